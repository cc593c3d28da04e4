"""The one base of the workbench's refusals, so a caller (a notebook, the command line, a test)
catches everything the workbench refuses with one ``except WorkbenchError`` and lets any other
error through. Each refusal keeps its built-in base too (ValueError for bad input, RuntimeError for
a step that failed, FileNotFoundError for a missing tool), so existing ``except ValueError`` code
keeps working. Not a refusal, so not here: ``tasks.Cancelled`` (the user stopped a task) and the
load generator's internal ``ConnectionClosed``."""

from __future__ import annotations

__all__ = ["WorkbenchError"]


class WorkbenchError(Exception):
    """Something the workbench refused or could not do, said in the words of the screen it came from."""
