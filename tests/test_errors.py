"""Every exception class the workbench defines is a WorkbenchError (one ``except`` catches what the
workbench refuses), keeping its built-in base; the two that are not refusals are named here. The
model.py templates run in Triton's own Python without the workbench, so their errors stand alone."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import workbench
from workbench.refusals import WorkbenchError

NOT_REFUSALS = {"workbench.tasks.Cancelled", "workbench.measure.engine.loadgen.grpc_h2.ConnectionClosed"}


def _exception_classes() -> dict[str, type[BaseException]]:
    found = {}
    for module_info in pkgutil.walk_packages(workbench.__path__, "workbench."):
        if ".templates" in module_info.name or module_info.name.endswith("__main__"):
            continue
        module = importlib.import_module(module_info.name)
        for _name, value in inspect.getmembers(module, inspect.isclass):
            if issubclass(value, BaseException) and value.__module__ == module.__name__:
                found[f"{value.__module__}.{value.__qualname__}"] = value
    return found


def test_every_refusal_is_a_workbench_error_and_keeps_its_builtin_base():
    classes = _exception_classes()
    assert len(classes) >= 30 and NOT_REFUSALS <= set(classes)
    outside = sorted(name for name, cls in classes.items() if not issubclass(cls, WorkbenchError))
    assert outside == sorted(NOT_REFUSALS)
    for name, cls in classes.items():
        if name not in NOT_REFUSALS and cls is not WorkbenchError:
            builtin = [base for base in cls.__mro__ if base.__module__ == "builtins" and base is not object]
            assert builtin[0] is not Exception, f"{name} keeps its built-in base (ValueError, RuntimeError, ...)"


def test_one_except_catches_a_refusal_and_its_old_base_still_does():
    from workbench.coremap import CoreRange, CoreRangeError

    for catch in (WorkbenchError, ValueError, CoreRangeError):
        with pytest.raises(catch, match="core range 3:1 is reversed: the end must be >= the start"):
            CoreRange.parse("3:1")
