"""Package names that load on first use (PEP 562 module ``__getattr__``): a package lists
``name -> module`` (or ``name -> (module, attribute)``) and gets one resolver, so importing it,
or one of its submodules for a ``--help``, does not pay for torch or tritonclient."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_getattr(
    package: str, names: Mapping[str, str | tuple[str, str]], namespace: dict[str, Any]
) -> Callable[[str], Any]:
    """The ``__getattr__`` for ``package``: imports the module of ``name`` when first asked and
    keeps the value in the package's ``namespace`` (later lookups are plain attribute reads)."""

    def __getattr__(name: str) -> Any:
        try:
            where = names[name]
        except KeyError:
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        module, attribute = (where, name) if isinstance(where, str) else where
        value = getattr(importlib.import_module(module), attribute)
        namespace[name] = value
        return value

    return __getattr__
