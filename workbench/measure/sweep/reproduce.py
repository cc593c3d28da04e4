"""The Python call that measures a run again: the same model directory, grid and measurement
settings, read from the run record alone (``plan``, ``settings``, ``model_dir``), so the record of
any sweep -- from the CLI, the app or a notebook -- says how to reproduce it.

`run_sweep` stores it in the record as ``reproduce.python`` when the sweep starts and the CLI adds
the exact ``reproduce.command`` it was given; a record that predates both gets the call made here.
"""

from __future__ import annotations

import json
import pprint
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["sweep_call", "backends_call", "reproduce_lines"]

AGAIN_NOTE = (
    "Measuring again into the same folder needs new_run=True (--new-run): the old run is kept beside it "
    "as <folder>.replaced-N; or give another out_dir (--out)."
)


def _literal(value: Any) -> str:
    """A JSON value as Python source (true/false/null spelled as Python's), wrapped to read."""
    return pprint.pformat(json.loads(json.dumps(value)), width=100, sort_dicts=False)


def _settings(settings: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in settings.items() if k != "model"}


def sweep_call(record: Mapping[str, Any], out_dir: str | Path) -> str:
    """A script that serves the run's model repository on this machine and sweeps the same grid
    with the same settings into ``out_dir``."""
    model_dir = record.get("model_dir")
    if not model_dir or not record.get("plan"):
        return ""
    repository = str(Path(model_dir).parent)
    label = f", label={record['label']!r}" if record.get("label") else ""
    return "\n".join(
        [
            "import workbench",
            "",
            f"plan = workbench.SweepPlan.from_dict({_literal(record['plan'])})",
            f"settings = workbench.MeasureSettings.from_dict({_literal(_settings(record.get('settings') or {}))})",
            f"with workbench.TritonServer({repository!r}) as server:",
            f"    run = workbench.run_sweep(plan, server, {str(model_dir)!r}, out_dir={str(out_dir)!r},",
            f"                              settings=settings{label})",
            "print(run.describe_best())",
        ]
    )


def backends_call(
    plan: Mapping[str, Any],
    model_dirs: Sequence[str | Path],
    out_dir: str | Path,
    backend_grid: Mapping[str, Iterable[Any]] | None,
    settings: Mapping[str, Any],
) -> str:
    """The `compare_backends` call of a backend comparison, as a script like `sweep_call`'s."""
    dirs = [str(Path(d).resolve()) for d in model_dirs]
    grid = {k: list(v) for k, v in (backend_grid or {}).items()}
    return "\n".join(
        [
            "import workbench",
            "from workbench.measure.sweep.compare_backends import compare_backends",
            "",
            f"plan = workbench.SweepPlan.from_dict({_literal(dict(plan))})",
            f"settings = workbench.MeasureSettings.from_dict({_literal(_settings(settings))})",
            f"with workbench.TritonServer({str(Path(dirs[0]).parent)!r}) as server:",
            f"    comparison = compare_backends(plan, server, {dirs!r}, {str(out_dir)!r},",
            f"                                  backend_grid={grid!r}, settings=settings)",
            "print(comparison.summary())",
        ]
    )


def reproduce_lines(record: Mapping[str, Any], folder: str | Path | None) -> list[tuple[str, str]]:
    """(kind, text) of every way the record says to measure the run again: the command line it
    was run with (``command``) and the Python call (``python``), the recorded ones first."""
    recorded = dict(record.get("reproduce") or {})
    out = []
    if recorded.get("command"):
        out.append(("command", recorded["command"]))
    python = recorded.get("python") or sweep_call(record, folder or record.get("label") or "run")
    if python:
        out.append(("python", python))
    return out
