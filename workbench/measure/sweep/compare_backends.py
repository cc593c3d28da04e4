"""One model measured through several Triton backends on one server, in one call: the same model
generated for the Python backend (model.py) and for Triton's PyTorch backend (LibTorch, or its
Python-backend twin where the server has no PyTorch backend), each swept by `sweep.run_sweep`
with the same grid -- the PyTorch-backend directories also over their backend's parameters
(`pytorch_backend.sweep_grid`: threads, inference mode, optimized execution, torch.compile).

The result joins the runs into one table whose ``variant`` names the backend that served it, so
the plots (which colour by variant) and tables group by backend; `BackendComparison.summary`
gives each backend's throughput and p50 against the first at every common batch size and
concurrency, with the server's own breakdown (queue / compute) that explains them.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from workbench.generate.config import ConfigError, read_config
from workbench.generate.pytorch_backend.backend import PYTORCH
from workbench.measure.engine.measure_settings import MeasureSettings
from workbench.measure.grid.plan import SweepError, SweepPlan, plan_variants
from workbench.measure.store.results import (
    JSON_FILE,
    ReadableFrame,
    RunRecord,
    SweepResult,
    backend_variant,
    frame_from_rows,
    load_run,
    write_exports,
    write_record,
)
from workbench.measure.sweep.reproduce import backends_call
from workbench.server.protocol import Server

__all__ = ["BackendSweep", "BackendComparison", "compare_backends", "backend_plan", "backend_plans", "run_folders"]

_BREAKDOWN = ("queue_ms", "compute_input_ms", "compute_infer_ms", "compute_output_ms")


def backend_plan(plan: SweepPlan, model_dir: str | Path, backend_grid: Mapping[str, Iterable[Any]] | None) -> SweepPlan:
    """``plan`` for one model directory: a PyTorch-backend model also sweeps ``backend_grid``
    (friendly settings checked by `sweep_grid` against its config); a Python-backend one as is."""
    cfg = read_config(model_dir)
    if not backend_grid or not PYTORCH.recognises(cfg):
        return plan
    # start-up: the PyTorch backend's grid only for its sweeps; sweep/'s package imports this module
    from workbench.generate.pytorch_backend import PyTorchConfigError, sweep_grid

    try:
        grid = sweep_grid(cfg, backend_grid)
    except PyTorchConfigError as err:
        raise SweepError(f"{model_dir}: {err}") from None
    return dataclasses.replace(plan, parameters={**dict(plan.parameters), **grid})


def backend_plans(
    plan: SweepPlan, model_dirs: Sequence[str | Path], backend_grid: Mapping[str, Iterable[Any]] | None = None
) -> list[SweepPlan]:
    """Each directory's plan (`backend_plan`), every variant built against its config, so that a
    bad directory, a repeated model name, a grid a layout has no setting for, or a grid with no
    PyTorch-backend model to apply to is refused (SweepError naming it) before anything runs."""
    dirs = [Path(d) for d in model_dirs]
    if not dirs:
        raise SweepError("give at least one model directory to measure")
    repositories = {d.resolve().parent for d in dirs}
    if len(repositories) > 1:
        raise SweepError(
            f"the model directories are in different repositories ({sorted(map(str, repositories))}); "
            "generate them side by side so one server loads them all"
        )
    configs = []
    for d in dirs:
        if not (d / "config.pbtxt").is_file():
            raise SweepError(f"{d} is not a model directory (no config.pbtxt)")
        try:
            configs.append(read_config(d))
        except ConfigError as err:
            raise SweepError(f"{d}: {err}") from None
    names = [cfg.name or d.name for cfg, d in zip(configs, dirs)]
    if len(set(names)) != len(names):
        raise SweepError(f"model names {names} repeat; each backend's model needs its own name")
    if backend_grid and not any(PYTORCH.recognises(cfg) for cfg in configs):
        raise SweepError(
            f"the backend settings ({', '.join(backend_grid)}) are for Triton's PyTorch backend, and "
            f"{', '.join(names)} {'is' if len(names) == 1 else 'are'} for the Python backend: "
            "compare with a model generated with --backend pytorch"
        )
    plans = [backend_plan(plan, d, backend_grid) for d in dirs]
    for model_plan, cfg, d in zip(plans, configs, dirs):
        try:
            plan_variants(model_plan, cfg)
        except ValueError as err:  # SweepError, CoreRangeError, ConfigError
            raise SweepError(f"{d}: {err}") from None
    return plans


def run_folders(model_dirs: Sequence[str | Path], out_dir: str | Path) -> dict[str, Path]:
    """Model name -> the folder under ``out_dir`` its run goes to (`compare_backends`), in order."""
    names = [read_config(d).name or Path(d).name for d in model_dirs]
    return {name: Path(out_dir) / name for name in names}


@dataclass(frozen=True)
class BackendSweep:
    """What a sweep adds to compare backends (``workbench sweep --compare/--backend-param``, the
    sweep panel's backend fields), made once from either and checked by `check`.

    ``compare``: the other model directories measured with the same grid; a bare name is a model
    in the first model's repository. ``grid``: the PyTorch backend's own settings swept, setting ->
    values (``{"threads": (1, 2)}``); text (``"threads=1,2; inference_mode=on,off"``, or one item
    per setting) is read by `pytorch_backend.sweep.parse_backend_grid`, the one parser of it."""

    compare: tuple[str, ...] = ()
    grid: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # start-up: the PyTorch backend's grid only for its sweeps; sweep/'s package imports this module
        from workbench.generate.pytorch_backend.sweep import parse_backend_grid

        compare = (self.compare,) if isinstance(self.compare, (str, Path)) else tuple(self.compare)
        compare = tuple(str(c).strip() for c in compare)
        if any(not c for c in compare):
            raise SweepError("a model to compare with is blank")
        object.__setattr__(self, "compare", compare)
        grid = self.grid
        if isinstance(grid, str) or (not isinstance(grid, Mapping) and all(isinstance(i, str) for i in grid)):
            try:
                grid = parse_backend_grid(grid)
            except ConfigError as err:
                raise SweepError(str(err)) from None
        object.__setattr__(self, "grid", {str(k): tuple(v) for k, v in dict(grid).items()})

    @property
    def grid_points(self) -> int:
        """How many backend variants each point of a PyTorch-backend model is measured with."""
        points = 1
        for values in self.grid.values():
            points *= len(values)
        return points

    @property
    def active(self) -> bool:
        """True when there is something to compare or sweep (else the sweep is a plain one)."""
        return bool(self.compare or self.grid)

    def model_dirs(self, first: str | Path) -> list[Path]:
        """``first`` and the directories to compare it with, in the order they are measured."""
        first = Path(first)
        return [first, *(Path(c) if "/" in c else first.parent / c for c in self.compare)]

    def check(self, plan: SweepPlan, first: str | Path) -> list[SweepPlan]:
        """Each model's plan, everything checked before a server is touched (`backend_plans`)."""
        return backend_plans(plan, self.model_dirs(first), self.grid)


@dataclass(frozen=True)
class BackendComparison:
    """Each model's run (by model name, in the order measured) and every row in one frame, with
    ``model`` and ``served_by`` columns and ``variant`` prefixed by the backend."""

    runs: dict[str, SweepResult]
    frame: pd.DataFrame = field(repr=False)
    path: Path | None = None  # where the joined results.csv/.json are (compare_backends' out_dir)
    record: Mapping[str, Any] = field(default_factory=dict, repr=False)  # its run.json (compare_backends)

    @property
    def backends(self) -> list[str]:
        return list(dict.fromkeys(self.frame["served_by"].dropna()))

    def result(self) -> SweepResult:
        """The joined table as one SweepResult, for the plots and `SweepResult.table`; its record is
        the comparison's own run.json when it was written (`compare_backends`)."""
        record = dict(self.record) if self.record else comparison_record(self.runs, self.frame)
        return BackendsResult(self.frame, RunRecord.from_dict(record), self.path)

    def table(self) -> pd.DataFrame:
        """Per backend variant and point: throughput, p50, p99 and the server's breakdown (ms)."""
        usable = self.frame[self.frame["error"].isna()]
        columns = [
            "served_by",
            "variant",
            "batch_size",
            "concurrency",
            "throughput",
            "p50_ms",
            "p99_ms",
            *_BREAKDOWN,
            "outputs_ok",
        ]
        return ReadableFrame(usable[columns].reset_index(drop=True))

    def summary(self) -> str:
        """Each backend's best variant against the first backend's at each common point."""
        table = self.table()
        if table.empty:
            return "no measured points"
        best = (
            table.sort_values("throughput", ascending=False)
            .groupby(["served_by", "batch_size", "concurrency"], sort=False)
            .head(1)
        )
        backends = self.backends
        base = backends[0]
        lines = []
        for (batch, concurrency), group in best.groupby(["batch_size", "concurrency"]):
            rows = {row["served_by"]: row for _, row in group.iterrows()}
            if base not in rows:
                continue
            ref = rows[base]
            lines.append(
                f"batch {batch}, concurrency {concurrency}: {base} [{ref['variant']}] "
                f"{ref['throughput']:.1f} infer/s, p50 {ref['p50_ms']:.3f} ms" + _breakdown_text(ref)
            )
            for backend in backends[1:]:
                if backend in rows:
                    row = rows[backend]
                    lines.append(
                        f"  {backend} [{row['variant']}]: {row['throughput']:.1f} infer/s "
                        f"(x{row['throughput'] / ref['throughput']:.2f}), p50 {row['p50_ms']:.3f} ms "
                        f"(x{row['p50_ms'] / ref['p50_ms']:.2f})" + _breakdown_text(row)
                    )
        return "\n".join(lines)


class BackendsResult(SweepResult):
    """A backend comparison's joined table: each variant led by the backend that served it."""

    led_by_backend = True


class _BackendsKind:
    """How a backend comparison's folder reads back (`store.kinds`): its rows are the joined
    ``results.json`` (each backend's own run sits in a folder of its own)."""

    name = "backends"
    result_type = BackendsResult

    def load(self, path: Path, record: RunRecord) -> BackendsResult:
        joined = load_run(path / JSON_FILE) if (path / JSON_FILE).is_file() else None
        return BackendsResult(joined.frame if joined else frame_from_rows([]), record, path)


KIND = _BackendsKind()


def comparison_record(
    runs: Mapping[str, SweepResult], frame: pd.DataFrame, label: str | None = None, **extra: Any
) -> dict[str, Any]:
    """The run record of a backend comparison (its own run.json, so saved-run lists show it): the
    sub-runs' folders (absolute: a report opened elsewhere finds them) and labels, each model's
    directory and the backend that served each variant, what was measured and where (server,
    machine, packages: one server measured them all, as the first sub-run records), the status of
    the whole."""
    records = [run.record for run in runs.values()]
    first = records[0] if records else {}
    backends = list(dict.fromkeys(frame["served_by"].dropna())) if "served_by" in frame.columns else []
    statuses = [r.get("status") for r in records]
    status = next(
        (s for s in ("failed", "cancelled", "running") if s in statuses), "complete" if records else "unknown"
    )
    return {
        "kind": "backends",
        "label": label or "backends: " + " vs ".join(backends),
        "model": " vs ".join(runs),
        "runs": {name: str(Path(run.path).resolve()) for name, run in runs.items() if run.path is not None},
        "model_dirs": {name: r.get("model_dir") for name, r in zip(runs, records)},
        "backends": backends,
        "served_by": (
            {variant: by for variant, by in zip(frame["variant"], frame["served_by"]) if isinstance(by, str)}
            if "served_by" in frame.columns
            else {}
        ),
        "run_labels": {name: run.label for name, run in runs.items()},
        "status": status,
        "started": min((r.get("started") or "" for r in records), default="") or None,
        "ended": max((r.get("ended") or "" for r in records), default="") or None,
        "planned_points": sum(r.get("planned_points") or 0 for r in records),
        "settings": first.get("settings"),
        "engine": first.get("engine"),
        **{key: first.get(key) for key in ("server_version", "server", "url", "machine", "packages")},
        **extra,
    }


def _breakdown_text(row: pd.Series) -> str:
    values = [row.get(key) for key in _BREAKDOWN]
    if any(pd.isna(v) for v in values):
        return ""
    queue, c_in, infer, c_out = (float(v) for v in values)
    return f"; server: queue {queue:.3f} ms, compute {c_in + infer + c_out:.3f} ms (infer {infer:.3f})"


def compare_backends(
    plan: SweepPlan,
    server: Server,
    model_dirs: Sequence[str | Path],
    out_dir: str | Path,
    *,
    backend_grid: Mapping[str, Iterable[Any]] | None = None,
    settings: MeasureSettings | None = None,
    progress: Callable[[int, int, str], None] | None = None,
    cancel: threading.Event | None = None,
    resume: bool = False,
    **sweep_options: Any,
) -> BackendComparison:
    """Sweep each model directory (the same model generated for different backends, in the
    server's repository) with ``plan`` into ``out_dir/<model name>``, one after the other on
    ``server``, and write the joined table to ``out_dir`` (results.csv/.json); see `backend_plan`
    for ``backend_grid``. Every other option goes to `run_sweep`,
    except ``restore``: each model is left as it was before its run (unloaded when it was not
    loaded), so the next one may restart the server for its process-wide LibTorch settings."""
    # start-up: the PyTorch backend's grid only for its sweeps; sweep/'s package imports this module
    from workbench.measure.sweep import run_sweep

    if "restore" in sweep_options:
        raise SweepError("compare_backends always restores each model after its run (restore= is not an option)")
    label = sweep_options.pop("label", None)  # the comparison's; each model's run gets its own
    dirs = [Path(d) for d in model_dirs]
    plans = backend_plans(plan, dirs, backend_grid)  # every grid checked before anything runs
    folders = run_folders(dirs, out_dir)
    names = list(folders)
    reproduce = {
        "python": backends_call(plan.to_dict(), dirs, out_dir, backend_grid, (settings or MeasureSettings()).to_dict())
    }
    if sweep_options.get("command"):
        reproduce["command"] = sweep_options["command"]
    runs: dict[str, SweepResult] = {}
    for name, model_dir, model_plan in zip(names, dirs, plans):
        report = (
            None
            if progress is None
            else (lambda done, total, message, n=name: progress(done, total, f"{n}: {message}"))
        )
        runs[name] = run_sweep(
            model_plan,
            server,
            model_dir,
            out_dir=folders[name],
            settings=settings,
            progress=report,
            cancel=cancel,
            resume=resume,
            label=f"{label}: {name}" if label else name,
            **sweep_options,
        )
        if runs[name].status == "cancelled":
            break
    frames = []
    for name, run in runs.items():
        frame = run.frame.copy()
        frame["model"] = name
        frame["variant"] = [
            backend_variant(by, variant, name) for by, variant in zip(frame["served_by"], frame["variant"])
        ]
        frames.append(frame)
    frame = frame_from_rows(pd.concat(frames, ignore_index=True).to_dict("records"))
    record = comparison_record(
        runs,
        frame,
        label,
        plan=plan.to_dict(),
        backend_grid={k: list(v) for k, v in (backend_grid or {}).items()},
        reproduce=reproduce,
    )
    comparison = BackendComparison(runs, frame, Path(out_dir), record)
    write_record(out_dir, record)  # the comparison is a saved run of its own (listed, opened, reported)
    write_exports(out_dir, frame, record)
    return comparison
