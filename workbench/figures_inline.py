"""Matplotlib figures shown as images in a notebook, whatever its backend.

The workbench draws on `matplotlib.figure.Figure` objects it makes itself (never pyplot: a figure
made in a worker thread or a test must not touch pyplot's global state). IPython shows such a
figure as an image only once the inline backend has registered its PNG formatter, which happens
when pyplot is imported under that backend; a notebook that never imports pyplot (09) otherwise
prints ``<Figure size 850x460 with 1 Axes>``. `register` adds the same formatter IPython's inline
backend adds (`IPython.core.pylabtools.print_figure`), by type name so matplotlib is not imported
for it, and leaves one that is already there (``%matplotlib inline``'s settings win).
"""

from __future__ import annotations

import sys

__all__ = ["register"]


def _png(figure: object) -> bytes | None:
    from IPython.core.pylabtools import print_figure

    return print_figure(figure, "png", bbox_inches="tight")


def register() -> bool:
    """In a running IPython, show `matplotlib.figure.Figure` results as PNG images; True when a
    formatter is in place afterwards (False outside IPython)."""
    ipython_module = sys.modules.get("IPython")
    shell = ipython_module.get_ipython() if ipython_module is not None else None
    if shell is None:
        return False
    png = shell.display_formatter.formatters["image/png"]
    known = {f"{getattr(t, '__module__', '')}.{getattr(t, '__name__', '')}" for t in png.type_printers}
    if "matplotlib.figure.Figure" not in known and ("matplotlib.figure", "Figure") not in png.deferred_printers:
        png.for_type_by_name("matplotlib.figure", "Figure", _png)
    return True
