"""A notebook run's folder and its saved sweeps.

`workspace` makes a fresh folder per notebook run (``runs/<notebook>/<timestamp>/``) for artifacts,
the model repository and sweep records; nothing a reader made before is overwritten, and saved
sweeps stay there to be compared (`saved_runs`, `runs_table`, `comparable_pair`, and
`make_example_runs` when there are none). `describe_run`: the facts of a sweep that do not vary
between runs (checked by nbval), apart from the numbers that do.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd

from workbench.coremap import CoreRange, parse_allocations
from workbench.generate import GenerateSettings
from workbench.measure.engine.measure_settings import MeasureSettings
from workbench.measure.store.results import KEY_COLUMNS, RECORD_FILE, ResultsError, SweepResult, list_runs, load_run

__all__ = [
    "RUNS_ENV",
    "Workspace",
    "runs_root",
    "workspace",
    "saved_runs",
    "runs_table",
    "comparable_pair",
    "describe_run",
    "make_example_runs",
]

RUNS_ENV = "WORKBENCH_RUNS_DIR"  # where tutorial runs go instead of ./runs (e.g. a shared results folder)


def runs_root() -> Path:
    """``$WORKBENCH_RUNS_DIR`` when set, else ``runs/`` in the current directory (the notebook's)."""
    return Path(os.environ.get(RUNS_ENV) or "runs")


@dataclass(frozen=True)
class Workspace:
    """One notebook run's folder: ``artifacts/``, ``model_repository/`` and one folder per sweep."""

    notebook: str
    root: Path

    @property
    def artifacts(self) -> Path:
        return self.root / "artifacts"

    @property
    def repository(self) -> Path:
        return self.root / "model_repository"

    def sweep_dir(self, label: str = "sweep") -> Path:
        """Where a sweep saves its record; ``run_sweep`` creates it and refuses to reuse one."""
        if not re.fullmatch(r"[A-Za-z0-9_.\-]+", label):
            raise ValueError(f"sweep label {label!r}: use letters, digits, '_', '-' or '.'")
        return self.root / label

    def __str__(self) -> str:
        return str(self.root)


def workspace(notebook: str, *, root: str | os.PathLike | None = None, now: datetime | None = None) -> Workspace:
    """A new folder ``<root>/<notebook>/<UTC timestamp>/`` with an empty model repository.

    A second run in the same second gets ``-2``, ``-3``...: an earlier run is never reused.
    """
    if not re.fullmatch(r"[A-Za-z0-9_\-]+", notebook or ""):
        raise ValueError(f"notebook name {notebook!r}: use letters, digits, '_' or '-' (e.g. 01-quickstart)")
    base = Path(root) if root is not None else runs_root()
    if base.exists() and not base.is_dir():
        raise NotADirectoryError(f"runs folder {base} is a file; set {RUNS_ENV} to a folder")
    stamp = (now or datetime.now(UTC)).strftime("%Y%m%d-%H%M%S")
    parent = base / notebook
    parent.mkdir(parents=True, exist_ok=True)
    for attempt in range(1, 1000):
        folder = parent / (stamp if attempt == 1 else f"{stamp}-{attempt}")
        try:
            folder.mkdir()
        except FileExistsError:
            continue
        break
    else:
        raise FileExistsError(f"{parent}: no free folder name for {stamp}")
    space = Workspace(notebook, folder.resolve())
    space.repository.mkdir()
    return space


def saved_runs(root: str | os.PathLike | None = None) -> list[Path]:
    """Every saved sweep (a folder holding ``run.json``) under ``root``, oldest first."""
    base = Path(root) if root is not None else runs_root()
    if not base.is_dir():
        return []
    folders = [p.parent for p in base.rglob(RECORD_FILE)]

    def started(folder: Path) -> tuple[str, str]:
        try:
            return load_run(folder).record.started or "", str(folder)
        except ResultsError:
            return "", str(folder)

    return sorted(folders, key=started)


def comparable_pair(folders: list[Path]) -> tuple[SweepResult, SweepResult] | None:
    """The two newest complete runs of the same model that measured at least one common point
    (same variant, batch size and concurrency), older first; None when no such pair exists."""
    runs = []
    for folder in folders:
        try:
            run = load_run(folder)
        except ResultsError:
            continue
        if run.complete and len(run.frame):
            runs.append(run)
    for i in range(len(runs) - 1, 0, -1):
        newer = runs[i]
        keys = set(map(tuple, newer.frame[list(KEY_COLUMNS)].astype(str).values))
        for older in reversed(runs[:i]):
            if older.record.model != newer.record.model:
                continue
            if keys & set(map(tuple, older.frame[list(KEY_COLUMNS)].astype(str).values)):
                return older, newer
    return None


def describe_run(run: SweepResult) -> str:
    """What a sweep did, without its timings: status, points, whether every output matched."""
    frame = run.frame
    planned = run.record.planned_points if run.record.planned_points is not None else len(frame)
    measured = frame[frame["throughput"].notna()] if "throughput" in frame.columns else frame.iloc[0:0]
    errors = int(frame["error"].notna().sum()) if "error" in frame.columns else 0
    outputs_ok = bool(len(measured)) and bool(measured["outputs_ok"].map(lambda v: str(v).lower() == "true").all())
    failures = int(measured["failures"].fillna(0).astype(int).sum()) if len(measured) else 0
    variants = ", ".join(dict.fromkeys(frame["variant"].astype(str))) if len(frame) else "none"
    return (
        f"sweep {run.status}: {len(measured)} of {planned} point(s) measured over variants {variants}; "
        f"served outputs {'match' if outputs_ok else 'DO NOT match'} the reference at every point; "
        f"{failures} failed request(s), {errors} point error(s)"
    )


def runs_table(root: str | os.PathLike | None = None) -> pd.DataFrame:
    """One row per saved sweep under ``root`` (see `saved_runs`), newest first."""
    frames = [list_runs(folder) for folder in sorted({p.parent for p in saved_runs(root)})]
    if not frames:
        return pd.DataFrame(
            columns=["path", "label", "model", "status", "points", "planned", "started", "ended", "best_throughput"]
        )
    return pd.concat(frames, ignore_index=True).sort_values("started", ascending=False, ignore_index=True)


def make_example_runs(
    space: Workspace,
    *,
    settings: MeasureSettings | None = None,
    progress: Callable[[int, int, str], None] | None = None,
    cancel: threading.Event | None = None,
) -> tuple[SweepResult, SweepResult]:
    """Two small sweeps to compare when none are saved: the zoo's mlp on one server, the same grid
    (1 instance, batch 1 and 4, concurrency 4) with the dynamic batcher off, then on, both measured
    as ``settings`` say (default: half-second windows, at most 4)."""
    # start-up: `from workbench import tutorial` stays light; torch and the server load when a helper runs
    from workbench import zoo
    from workbench.compiler import compile_model
    from workbench.generate import render, write
    from workbench.measure.grid.plan import SweepPlan
    from workbench.measure.sweep import run_sweep
    from workbench.server import TritonServer

    model = zoo.get("mlp")
    artifact = compile_model(
        model.module, model.example_inputs(2), "cpu", out_dir=space.artifacts, name="mlp", cancel=cancel
    )
    variants = {"mlp_batching_off": False, "mlp_batching_on": True}
    for name, batching in variants.items():
        write(
            render(
                GenerateSettings(
                    triton_model_dir=str(space.repository / name),
                    compiled_model=str(artifact.path),
                    copy_compiled_model=True,
                    target="cpu",
                    neuron_core_range=CoreRange(0, 0),
                    max_batch_size=8,
                    enable_dynamic_batching=batching,
                    max_queue_delay_microseconds=500 if batching else None,
                )
            )
        )
    plan = SweepPlan(batch_sizes=(1, 4), allocations=parse_allocations("1x1"), concurrency=(4,))
    settings = (
        MeasureSettings(window_s=0.5, max_windows=4, time_limit_s=3, min_latencies=500)
        if settings is None
        else settings
    )
    runs = []
    with TritonServer(space.repository) as server:
        for name in variants:  # the sweep loads its variant and, restoring the server, unloads it again
            runs.append(
                run_sweep(
                    plan,
                    server,
                    space.repository / name,
                    out_dir=space.sweep_dir(name),
                    label=name,
                    settings=settings,
                    progress=progress,
                    cancel=cancel,
                )
            )
    return runs[0], runs[1]
