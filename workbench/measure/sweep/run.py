"""Running a sweep on ONE running tritonserver: each variant loaded as a config override (a reload,
never a restart), every point measured and checked, every row appended to disk at once.

The plan (``plan.py``) is checked whole before anything runs; each point's row (``rows.py``) is
made by ``point.measure_point`` and appended the moment it exists, so a cancelled or crashed sweep
resumes where it stopped instead of measuring again, and a resume with settings that would change
what the numbers mean is refused.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, replace
from pathlib import Path

import pandas as pd

from workbench import __version__
from workbench.generate.config import parameters_of, spec_from_config, to_json
from workbench.measure.engine.engines import EngineChoice, choose_engine, resolved
from workbench.measure.engine.loadgen import Until
from workbench.measure.engine.measure_settings import MeasureSettings
from workbench.measure.grid.plan import Batching, Point, SweepError, SweepPlan, Variant, plan_variants, variant_config
from workbench.measure.grid.rows import PointRow
from workbench.measure.store.results import SCREENING_FILE, RunRecord, SweepResult, frame_from_rows
from workbench.measure.store.run_record import TENSOR_KIND
from workbench.measure.sweep.point import Target, measure_point
from workbench.measure.sweep.reproduce import sweep_call
from workbench.measure.sweep.resume import fingerprint, resumed_rows
from workbench.measure.sweep.runner import SweepRunner, run_sweep_kind
from workbench.measure.sweep.search import SearchLog, SearchSpace, SearchStrategy, answer, check_resume
from workbench.measure.sweep.search.confirm import confirm_answer
from workbench.measure.sweep.search.effort import DecidedBy
from workbench.measure.sweep.swept import (
    base_config,
    check_in_repository,
    check_out_dir,
    check_reachable_by_engine,
    chosen_variants,
    config_digest,
    range_cpus,
    reference_for,
    screened_rows,
    server_url,
)
from workbench.measure.watch.cpu_use import CpuUse, format_busy
from workbench.measure.watch.free_cores import check_server_cores
from workbench.measure.watch.neuron_use import NeuronUse
from workbench.measure.watch.settle import model_processes, replaced, wait_quiet
from workbench.measure.watch.variant_times import first_and_warmup_noted, load_variant
from workbench.served_outputs import Eager, InputMaker
from workbench.server.protocol import Server
from workbench.tasks import check_cancel

__all__ = [
    "SweepError",
    "Batching",
    "Variant",
    "SweepPlan",
    "variant_config",
    "plan_variants",
    "check_out_dir",
    "run_sweep",
    "SweepRun",
]

_RECORD_PACKAGES = (
    "triton-neuron-workbench",
    "numpy",
    "pandas",
    "torch",
    "tritonclient",
    "protobuf",
    "matplotlib",
    "nvidia-pytriton",
)


# A variant load that takes longer than this is taken as hung (generous: a large model on
# NeuronCores loads in minutes).
LOAD_TIMEOUT_S = 900.0


def run_sweep(
    plan: SweepPlan,
    server: Server,
    model: str | Path,
    *,
    out_dir: str | Path,
    settings: MeasureSettings | None = None,
    reference: Eager | None = None,
    inputs: InputMaker | None = None,
    resume: bool = False,
    new_run: bool = False,
    label: str | None = None,
    restore: bool = True,
    load_timeout_s: float = LOAD_TIMEOUT_S,
    progress: Callable[[int, int, str], None] | None = None,
    cancel: threading.Event | None = None,
    variants: Collection[str] | None = None,
    search: SearchStrategy | None = None,
    command: str | None = None,
) -> SweepResult:
    """Measure every point of ``plan`` on ``server`` (a running `TritonServer` or `RunningServer`),
    as ``settings`` say (default ``MeasureSettings()``: perf_analyzer where it runs here, else the
    built-in load generator, over gRPC; the choice and its reason go into the run record).

    ``model``: a generated model directory inside the server's repository, or the name of a
    model the server has loaded. Each variant is loaded as a config override (no restart); at each
    point seeded inputs of that batch size are sent and every checked response is compared with
    ``reference(inputs)`` (default: the directory's compiled model run in-process). ``inputs(batch,
    seed=...)`` makes valid inputs where random ones are not (token ids, masks: e.g. a zoo model's
    ``example_inputs``); the default draws them from the config's spec. With
    ``settings.engine == "perf_analyzer"`` Triton's perf_analyzer measures each point instead of
    the built-in load generator, into the same columns. Rows are appended to ``out_dir`` as they
    are measured; with ``resume`` the points already there are kept, not measured again (one row
    per point however often it resumes), unless the model's files, its config or the workbench or
    server version changed since: that is refused, naming what changed. ``new_run`` starts afresh
    in ``out_dir``, the run there moved to ``<out_dir>.replaced-<n>`` beside it.
    A variant load that gets no answer within ``load_timeout_s`` fails its points, and the
    variants after it are not loaded (their points fail naming the stuck load): a hung stub would
    only make each of them wait as long. Cancelling returns the partial result (status
    ``cancelled``). At the end the model is left as it was before: loaded again with the config it
    was served with, or unloaded if it was not loaded (``restore=False`` skips that, e.g. when the
    server is stopped right after); no other model on the server is touched. ``variants``: labels
    of the plan's variants to measure (a Ray task's one variant, `cluster.ray_task`); default all.
    ``search`` (a ``measure.search`` strategy) measures only the points it picks, through the same
    loading, measurement and files; its log and answer go into the record.
    ``command``: the command line that ran this sweep (the CLI gives it), recorded beside the Python
    call that measures the same grid again (the record's ``reproduce``; `workbench report` shows both).
    """
    settings = MeasureSettings() if settings is None else settings
    if not isinstance(settings, MeasureSettings):
        raise SweepError(f"settings must be a MeasureSettings, got {type(settings).__name__}")
    if isinstance(server, (list, tuple, dict)):
        raise SweepError(
            "run_sweep measures one server; several machines are swept as a Ray cluster: "
            "workbench.measure.cluster.run_sweep_on_ray"
        )
    check_out_dir(out_dir, resume or new_run)
    sweep = SweepRun(
        plan,
        server,
        model,
        Path(out_dir),
        settings,
        reference=reference,
        inputs=inputs,
        variants=variants,
        search=search,
        load_timeout_s=load_timeout_s,
        progress=progress,
        cancel=cancel,
    )
    return run_sweep_kind(
        sweep,
        Path(out_dir),
        resume=resume,
        new_run=new_run,
        label=label,
        command=command,
        restore=restore,
        progress=progress,
        cancel=cancel,
    )  # type: ignore[return-value]


@dataclass
class _Loaded:
    """The variant the server holds for this sweep: its label, why it failed to load (or None), the
    backend that served it; ``stuck`` says why loads stopped (one got no answer in time)."""

    variant: str | None = None
    error: str | None = None
    backend: str | None = None
    any_loaded: bool = False
    stuck: str | None = None


class SweepRun:
    """The tensor sweep kind (`runner.SweepKind`) for one model on one server: the variant loaded
    and measuring a point (inferences per second against latency, outputs checked). The grid, the
    searches (through `measure` and `screen`), a Ray task's variant and a backend comparison all drive
    it through `run_sweep`; `runner.SweepRunner` owns the run folder, record and session.

    Everything is checked when it is made (the model, the plan's variants, the cores, the engine)
    and nothing is loaded or written until the runner opens the run.
    """

    kind = TENSOR_KIND
    packages: tuple[str, ...] = _RECORD_PACKAGES

    def __init__(
        self,
        plan: SweepPlan,
        server: Server,
        model: str | Path,
        out_dir: Path,
        settings: MeasureSettings,
        *,
        reference: Eager | None,
        inputs: InputMaker | None,
        variants: Collection[str] | None,
        search: SearchStrategy | None,
        load_timeout_s: float,
        progress: Callable[[int, int, str], None] | None,
        cancel: threading.Event | None,
    ) -> None:
        self.plan, self.server, self.out_dir, self.settings = plan, server, out_dir, settings
        self.search, self.load_timeout_s, self.progress, self.cancel = search, load_timeout_s, progress, cancel
        self.name, self.base, self.model_dir = base_config(server, model)
        reference = reference_for(self.model_dir) if reference is None else reference
        self.variants = chosen_variants(plan_variants(plan, self.base), variants)
        self.space = SearchSpace.of(plan, self.variants)  # what a search walks
        self.core_range = plan.resolve_core_range(self.base)
        check_in_repository(server, self.name, self.model_dir)
        self.core_warnings = check_server_cores(self.core_range, server)  # held NeuronCores: refused here
        self.url = server_url(server, settings.protocol)
        check_reachable_by_engine(server)
        # perf_analyzer asked for and absent: said before anything is loaded
        self.choice = choose_engine(settings)
        if (
            search is not None
            and search.measures_by_window
            and settings.engine == "auto"
            and self.choice.engine != "workbench"
        ):
            self.choice = EngineChoice(
                "workbench",
                None,
                f"the built-in load generator: the {search.name} search "
                "stops each point between windows, which perf_analyzer cannot",
            )
        self.measuring = resolved(settings, self.choice)
        if search is not None and search.measures_by_window and self.measuring.engine != "workbench":
            raise SweepError(
                f"the {search.name} search measures each point window by window with the built-in "
                f"load generator; {self.measuring.engine} cannot be stopped between windows "
                '(engine="workbench", --engine workbench)'
            )
        self.target = Target(
            self.url, self.name, spec_from_config(self.base), self.base.max_batch_size > 0, reference, inputs
        )
        self.screening = search.screening(self.measuring) if search is not None else None
        self.judging = search.judging(self.measuring) if search is not None else self.measuring
        self.cpus = range_cpus(self.core_range, self.base)
        self.config_digests = {v.label: config_digest(v.config_json()) for v in self.variants}
        self.loaded = _Loaded()
        self.rows: list[PointRow] = []
        self.by_key: dict[tuple, PointRow] = {}
        self.screened: dict[tuple, PointRow] = {}
        self.previous: RunRecord | None = None
        self.log: SearchLog | None = None
        self.run: SweepRunner  # the run driving it, from measure_all on

    # ---- the kind's part of the run (the runner, `runner.SweepRunner`, owns the rest) ------------

    def fingerprint(self) -> dict:
        return fingerprint(
            self.model_dir,
            to_json(self.base),
            server_version=self.server.version,
            package_version=__version__,
            compiled_model=parameters_of(self.base).get("COMPILED_MODEL"),
        )

    def planned_points(self) -> int:
        return sum(len(self.plan.points(v)) for v in self.variants)

    def resume(self, previous: RunRecord, measured: dict) -> int:
        """The earlier rows (one per point, failed ones left to measure again), refused when the
        measurement settings, engine, model, config or versions changed (`resume.resumed_rows`)."""
        self.previous = previous
        different = self.settings.differences(previous.settings or {})
        old_engine = previous.engine.get("engine") if isinstance(previous.engine, dict) else None
        if old_engine is not None and old_engine != self.choice.engine:
            different.append(f"measured by {old_engine} -> {self.choice.engine} ({self.choice.reason})")
        rows = resumed_rows(
            self.out_dir, previous, model=self.name, different=different, measured=measured, digests=self.config_digests
        )
        check_resume(self.search, previous)
        self.rows = [PointRow.from_dict(row) for row in rows]
        self.by_key = {r.key: r for r in self.rows}
        if self.screening is not None:
            self.screened = {r.key: r for r in screened_rows(self.out_dir, previous)}
        return len(self.rows)

    def record_fields(self, record: RunRecord, command: str | None) -> dict:
        """What this sweep records beside the common fields: its plan, settings, engine, base config
        and variants' configs, the held-core warnings, and how to measure it again."""
        fields = {
            "model_dir": str(self.model_dir.resolve()) if self.model_dir else None,
            "plan": self.plan.to_dict(),
            "settings": {"model": self.name, **self.settings.to_dict()},
            "engine": self.choice.to_dict(),
            "seed": self.settings.seed,
            "base_config": json.loads(to_json(self.base)),
            "variants": {**(record.variants or {}), **{v.label: v.config_json() for v in self.variants}},
            "core_check": self.core_warnings,
            "search": None,  # this session's search log, written as it goes
        }
        python = sweep_call(record.with_changes(**fields), self.out_dir)
        fields["reproduce"] = {"python": python, **({"command": command} if command else {})}
        if self.search is not None:
            self.log = SearchLog(self.search.name, self.search.params, self.space)
        return fields

    def result(self, run: SweepRunner) -> SweepResult:
        result = SweepResult(frame_from_rows(r.to_dict() for r in self.rows), run.record, self.out_dir)
        if self.log is not None and self.search is not None:
            answer_now = answer(result.frame, self.search.latency_budget_ms).to_dict()
            run.record.search = {**self.log.to_dict(), "answer": answer_now}
            run.record.bounded = list(self.log.bounded)
        return result

    def export_frame(self, frame: pd.DataFrame) -> pd.DataFrame:
        return frame

    def restorable(self) -> bool:
        return self.loaded.any_loaded and self.loaded.stuck is None

    def screened_points(self) -> int:
        return len(self.screened)

    def _report(self, message: str, within: float = 0.0) -> None:
        self.run.report(message, within)

    def measure_all(self, run: SweepRunner) -> None:
        """Measure the grid (or what the search picks)."""
        self.run = run
        self._report(f"measured by {self.choice.engine}: {self.choice.reason}")
        search, log = self.search, self.log
        if search is None:
            for variant in self.variants:
                for point in self.plan.points(variant):
                    self.measure(point)
            return
        if log is None:
            raise RuntimeError("the search log is made by record_fields, which the runner calls first")
        search.run(self.space, self.measure, log, self.screen if self.screening is not None else None)
        points = {p.key: p for v in self.variants for p in self.plan.points(v)}
        done_before = ((self.previous.search if self.previous is not None else None) or {}).get("confirmed", [])
        loaded = None if search.reloads_to_confirm else (self.loaded.variant or "")
        confirmed = confirm_answer(
            self.rows,
            points,
            lambda p: self.measure(p, again=True),
            log,
            search.latency_budget_ms,
            done=done_before,
            only_variant=loaded,
        )
        log.confirmed = list(done_before) + ([confirmed] if confirmed else [])

    # ---- one point ------------------------------------------------------------------------------

    def measure(self, point: Point, again: bool = False, *, until: Until | None = None) -> PointRow:
        """The point's row: the one on disk when resuming, else loaded (when the variant changes) and
        measured; ``again``: measured anew, the new row the point's unless it failed; ``until``: a
        search's rule that ends the point's windows (effort.py)."""
        if point.key in self.by_key and not again:
            self.run.count += 1
            return self.by_key[point.key]
        check_cancel(self.cancel)
        row = self._measured_row(point, self.measuring if until is None else self.judging, until)
        if isinstance(until, DecidedBy) and not row.error:  # the verdict told with the row's own figures
            row = replace(row, stopped=until.decision(row.stopped, row.pooled_text()))
        if point.key not in self.by_key:
            self.rows.append(row)
            self.by_key[row.key] = row
        elif not row.error:
            self.rows[self.rows.index(self.by_key[row.key])] = self.by_key[row.key] = row
        self.run.add(row.to_dict(), counts=not again)
        self._report(f"{point.label}: {row.summary()}")
        return row

    def screen(self, point: Point) -> PointRow:
        """A short screening measurement (the search's ``screening`` settings), kept apart from the results."""
        if point.key in self.screened:
            return self.screened[point.key]
        if self.screening is None:
            raise RuntimeError("screen() is given only to a search whose screening settings are set")
        check_cancel(self.cancel)
        row = self._measured_row(point, self.screening)
        self.run.add(row.to_dict(), SCREENING_FILE)
        if not row.error:
            self.screened[row.key] = row
        self._report(f"{point.label} (screen): {row.summary()}")
        return row

    def _measured_row(self, point: Point, how: MeasureSettings, until: Until | None = None) -> PointRow:
        """The point measured as ``how`` says, its row stamped with what it measured."""
        model, digest = self.name, self.config_digests[point.variant.label]
        self._load(point)
        if self.loaded.error is not None:
            return replace(PointRow.failed(point, self.loaded.error), model=model, config_digest=digest)
        cores = self.cpus or range(self.core_range.start, self.core_range.end + 1)
        use = (CpuUse(cores) if self.cpus else NeuronUse(cores)).start()
        row = measure_point(
            self.target,
            point,
            how,
            cancel=self.cancel,
            until=until,
            progress=lambda d, n, message: self._report(f"{point.label}: {message}", d / n if n else 0.0),
        )
        busy = format_busy(use.stop())
        row = replace(row, served_by=self.loaded.backend, model=model, config_digest=digest)
        return replace(row, cpu_busy=busy) if self.cpus else replace(row, neuron_busy=busy)

    def _prepare_cases(self, prepared: dict) -> None:
        """Make each batch size's request and reference outputs (``Target.case``, cached: the first
        load's quiet-wait pays for all, later ones find them made). A failure is left for the
        point's own measurement to report."""
        started = time.perf_counter()
        try:
            for batch_size in sorted(set(self.plan.batch_sizes)):
                self.target.case(batch_size, self.measuring.seed)
        except Exception:  # the point measuring this batch size makes the case again and says why
            return
        prepared["seconds"] = round(time.perf_counter() - started, 3)

    def _load(self, point: Point) -> None:
        """Load the point's variant when it is not the one loaded (once per change, timed)."""
        variant, loaded, server = point.variant, self.loaded, self.server
        if loaded.variant == variant.label:
            return
        self._report(f"loading {variant.label}")
        loaded.variant = variant.label
        self.run.session.setdefault("loads", []).append(variant.label)  # every load, in order (a reload shows twice)
        leaving = model_processes(server.pid, self.name)  # the model's stubs before this load
        times, loaded.error, loaded.stuck = load_variant(server, self.name, variant, self.load_timeout_s, loaded.stuck)
        if loaded.error is None:
            loaded.any_loaded = True
            served_by = server.served_by(self.name)  # which backend served it (PyTorch backend or its twin)
            if served_by is not None:
                self.run.record.served_by = {**(self.run.record.served_by or {}), variant.label: served_by}
            loaded.backend = server.backend_of(self.name)
            # the previous variant's stubs exit (and the new ones finish importing) after the load returns
            leaving = replaced(leaving, model_processes(server.pid, self.name))
            self._report(f"{variant.label}: waiting for the server's processes to go quiet")
            # meanwhile, the work that needs no server: every batch size's request and reference outputs
            prepared: dict = {}
            preparing = threading.Thread(target=self._prepare_cases, args=(prepared,), daemon=True)
            preparing.start()
            quiet = wait_quiet(server.pid, leaving=leaving, cancel=self.cancel)
            preparing.join()
            times["quiet"] = quiet.to_dict() if quiet is not None else None
            times["prepared_while_quiet_s"] = prepared.get("seconds")
            times.update(first_and_warmup_noted(self.target, point.batch_size, self.settings))
        self.run.record.variant_times = {**(self.run.record.variant_times or {}), variant.label: times}
