"""The one switch between sweep kinds: a registry from a run record's ``kind`` to the module that
reads such runs back. The store reads runs through it and never names a kind itself; each kind's
package registers here (``workbench/measure/__init__.py`` lists them), so a new kind is one new
package and one line there.

A record whose kind is not registered (a tensor sweep, a Ray sweep of tensor variants) is read as the
store's own tensor table.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from workbench.measure.store.run_record import RunRecord

if TYPE_CHECKING:
    from workbench.measure.store.results import SavedRun

__all__ = ["RunKind", "register_kind", "run_kind", "registered_kinds"]


class RunKind(Protocol):
    """What the store needs of a sweep kind: its name (the record's ``kind``) and how its saved runs
    are read back (its row type and result class). The kind's own answers, plots and comparisons
    are methods of the result it returns."""

    name: str
    result_type: type[SavedRun]  # the result class its runs read back as

    def load(self, path: Path, record: RunRecord) -> SavedRun:
        """The run in folder ``path`` (``record`` already read from it)."""
        ...


_MODULES: dict[str, str] = {}  # kind name -> the module whose ``KIND`` is its RunKind


def register_kind(name: str, module: str) -> None:
    """Say that runs of kind ``name`` are read by ``module``'s ``KIND`` (imported on first use)."""
    _MODULES[name] = module


def registered_kinds() -> tuple[str, ...]:
    return tuple(_MODULES)


def run_kind(name: str) -> RunKind | None:
    """The registered kind ``name`` (None: the store's own tensor table reads it)."""
    module = _MODULES.get(name)
    return None if module is None else importlib.import_module(module).KIND
