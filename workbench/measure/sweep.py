"""Running a sweep on ONE running tritonserver: each variant loaded as a config override (a reload,
never a restart), every point measured and checked, every row appended to disk at once.

The plan (``plan.py``) is checked whole before anything runs; each point's row (``rows.py``) is
made by ``point.measure_point`` and appended the moment it exists, so a cancelled or crashed sweep
resumes where it stopped instead of measuring again, and a resume with settings that would change
what the numbers mean is refused.
"""

from __future__ import annotations

import json
import platform
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Collection

from workbench import __version__
from workbench.check import CheckError, Eager, InputMaker, eager_reference
from workbench.coremap import CoreRange
from workbench.generate.config import ModelConfig, parameters_of, read_config, spec_from_config, to_json
from workbench.measure.core_check import check_server_cores
from workbench.measure.cpu_use import CpuUse, format_busy
from workbench.measure.engines import EngineChoice, choose_engine, resolved
from workbench.measure.neuron_use import NeuronUse
from workbench.measure.plan import Batching, Point, SweepError, SweepPlan, Variant, plan_variants, variant_config
from workbench.measure.point import Target, measure_point
from workbench.measure.results import (
    POINTS_FILE,
    RECORD_FILE,
    SCREENING_FILE,
    SweepResult,
    append_point,
    frame_from_rows,
    load_run,
    read_points,
    write_exports,
    write_record,
)
from workbench.measure.resume import compact_points, fingerprint, fingerprint_changes, set_aside, unique_rows
from workbench.measure.rows import PointRow, now
from workbench.measure.search import SearchLog, SearchSpace, SearchStrategy, answer, check_resume
from workbench.measure.search.confirm import confirm_answer
from workbench.measure.settings import MeasureSettings
from workbench.measure.settle import model_processes, wait_quiet
from workbench.measure.variant_times import first_and_warmup, load_variant
from workbench.server.state import describe_server, restore as restore_state, snapshot
from workbench.system import detect, installed_versions
from workbench.tasks import Cancelled, check_cancel

__all__ = [
    "SweepError",
    "Batching",
    "Variant",
    "SweepPlan",
    "variant_config",
    "plan_variants",
    "check_out_dir",
    "run_sweep",
]

_RECORD_PACKAGES = ("triton-neuron-workbench", "numpy", "pandas", "torch", "tritonclient", "protobuf",
                    "matplotlib", "nvidia-pytriton")


# A variant load that takes longer than this is taken as hung (generous: a large model on
# NeuronCores loads in minutes).
LOAD_TIMEOUT_S = 900.0


def check_out_dir(out_dir: str | Path, resume: bool) -> bool:
    """Whether ``out_dir`` holds a run to resume; a run there without ``resume`` is refused, so
    nothing measured before is overwritten."""
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise SweepError(f"{out_dir} is a file, not a folder for the run")
    has_run = (out_dir / RECORD_FILE).exists() or (out_dir / POINTS_FILE).exists()
    if has_run and not resume:
        raise SweepError(f"{out_dir} already holds a sweep run; resume it (resume=True, --resume) "
                         "or choose another folder")
    return has_run


def _open_run(out_dir: Path, model: str, settings: MeasureSettings, choice: EngineChoice,
              resume: bool, measured: dict) -> tuple[dict | None, list[PointRow]]:
    """The earlier record and rows (one per point) in ``out_dir`` when resuming; refuse to mix
    runs, overwrite one, or resume one whose model, config or versions changed (``measured``: the
    fingerprint of what this session measures)."""
    if not check_out_dir(out_dir, resume):
        return None, []
    record = load_run(out_dir).record
    old = record.get("settings", {})
    old_model = record.get("model", old.get("model"))
    different = ([f"model {old_model!r} -> {model!r}"] if old_model is not None and old_model != model else [])
    different += settings.differences(old)
    old_engine = (record.get("engine") or {}).get("engine")
    if old_engine is not None and old_engine != choice.engine:
        different.append(f"measured by {old_engine} -> {choice.engine} ({choice.reason})")
    if different:
        raise SweepError(f"cannot resume the run in {out_dir} with other settings ({'; '.join(different)}); "
                         "use the same settings or another folder")
    changed = fingerprint_changes(record.get("fingerprint"), measured)
    if changed:
        raise SweepError(f"cannot resume the run in {out_dir}: what it measured has changed ({'; '.join(changed)}); "
                         "its points would not be comparable. Start a new run (new_run=True, --new-run: the old "
                         "one is kept beside it) or use another folder")
    compact_points(out_dir / POINTS_FILE)
    return record, [PointRow.from_dict(row) for row in unique_rows(read_points(out_dir / POINTS_FILE))]


def _machine() -> dict:
    info = detect()
    return {"cpu_model": info.cpu_model, "cpu_count": info.cpu_count, "usable_cpus": info.usable_cpus,
            "neuron_devices": info.neuron_devices, "neuron_cores": info.neuron_cores,
            "python": platform.python_version(), "platform": platform.platform()}


def _base_config(server: Any, model: str | Path) -> tuple[str, ModelConfig, Path | None]:
    """(name, base config, model directory or None) of the model to sweep."""
    model_dir = Path(model) if Path(model).is_dir() else None
    if model_dir is None:
        name = str(model)
        try:
            return name, server.model_config(name, as_proto=True), None
        except Exception as err:
            raise SweepError(f"model {name!r} is not loaded on the server ({err}); load it or give its directory") from None
    base = read_config(model_dir)
    name = base.name or model_dir.name
    repository = getattr(server, "model_repository", None)  # known for a server we started
    if repository is not None and model_dir.resolve().parent != Path(repository).resolve():
        raise SweepError(f"{model_dir} is not in the server's model repository {repository}; the server "
                         f"would load its own {name!r}. Start the server on {model_dir.resolve().parent}")
    return name, base, model_dir


def _reference(model_dir: Path | None) -> Eager:
    """The in-process reference every point's outputs are checked against: the directory's model."""
    if model_dir is None:
        raise SweepError("outputs are checked at every point: pass reference= (inputs -> outputs) "
                         "or give the model directory")
    try:
        return eager_reference(model_dir)
    except CheckError as err:
        raise SweepError(str(err)) from None


def _url(server: Any, protocol: str) -> str:
    try:
        return server.grpc_url if protocol == "grpc" else server.http_url
    except ValueError as err:  # a remote server given on the other protocol
        raise SweepError(str(err)) from None


def _check_reachable_by_engine(server: Any) -> None:
    """The load generators reach a server in the clear and without headers: say so before anything loads."""
    options = getattr(server, "options", None)
    if options is not None and (options.ssl or options.headers):
        raise SweepError(f"the server at {server.url} needs TLS or headers, which the sweep's load generators "
                         "do not send yet; measure it through a plain endpoint (e.g. from inside its network)")


def _first_and_warmup(target: Target, batch_size: int, settings: MeasureSettings) -> dict:
    """First-response and warm-up times of a freshly loaded variant; a failure here is noted, and
    the point's own measurement says what is wrong."""
    try:
        return first_and_warmup(target, batch_size, settings.protocol, settings.seed)
    except Exception as err:  # noqa: BLE001 - any client error: recorded, not raised
        return {"error": f"first response failed: {err}"}


def run_sweep(
    plan: SweepPlan,
    server: Any,
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
    engine: EngineChoice | None = None,
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
    of the plan's variants to measure (a fan-out's share, `fanout.run_fanout`); default all.
    ``search`` (a ``measure.search`` strategy) measures only the points it picks, through the same
    loading, measurement and files; its log and answer go into the record. ``engine``: the choice
    already made for ``settings`` (a fan-out makes one for all its servers); default: made here.
    """
    settings = MeasureSettings() if settings is None else settings
    if not isinstance(settings, MeasureSettings):
        raise SweepError(f"settings must be a MeasureSettings, got {type(settings).__name__}")
    out_dir = Path(out_dir)
    check_out_dir(out_dir, resume or new_run)
    name, base, model_dir = _base_config(server, model)
    reference = _reference(model_dir) if reference is None else reference
    variants = _chosen(plan_variants(plan, base), variants)
    core_range = plan.resolve_core_range(base)
    core_warnings = check_server_cores(core_range, server)  # held NeuronCores: refused here
    url = _url(server, settings.protocol)
    _check_reachable_by_engine(server)
    # perf_analyzer asked for and absent: said before anything is loaded
    choice = choose_engine(settings) if engine is None else engine
    measuring = resolved(settings, choice)
    target = Target(url, name, spec_from_config(base), base.max_batch_size > 0, reference, inputs)

    measured = fingerprint(model_dir, to_json(base), server_version=server.version, package_version=__version__,
                           compiled_model=parameters_of(base).get("COMPILED_MODEL"))
    if new_run and check_out_dir(out_dir, True):
        set_aside(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    previous, rows = _open_run(out_dir, name, settings, choice, resume, measured)
    check_resume(search, previous)
    done = {r.key for r in rows if not r.error}
    rows = [r for r in rows if r.key in done]  # failed points are measured again

    record = dict(previous or {})
    record.update({
        "label": label or record.get("label") or out_dir.name,
        "model": name,
        "model_dir": str(model_dir.resolve()) if model_dir else None,
        "started": record.get("started") or now(),
        "ended": None,
        "status": "running",
        "plan": plan.to_dict(),
        "planned_points": sum(len(plan.points(v)) for v in variants),
        "settings": {"model": name, **settings.to_dict()},
        "engine": choice.to_dict(),
        "seed": settings.seed,
        "base_config": json.loads(to_json(base)),
        "variants": {**record.get("variants", {}), **{v.label: v.config_json() for v in variants}},
        "server_version": server.version,
        "fingerprint": measured,
        "url": url,
        "server": describe_server(server, url),
        "machine": _machine(),
        "packages": installed_versions(_RECORD_PACKAGES),
        "core_check": core_warnings,
    })
    record.pop("search", None)
    log = SearchLog(search.name, search.params, SearchSpace.of(plan, variants)) if search is not None else None
    sessions = list(record.get("sessions", []))
    session = {"started": now(), "ended": None, "status": "running", "measured": 0, "reused": len(rows)}
    record["sessions"] = sessions + [session]
    write_record(out_dir, record)

    def save() -> SweepResult:
        result = SweepResult(frame_from_rows(r.to_dict() for r in rows), record, out_dir)
        if log is not None:
            record["search"] = {**log.to_dict(), "answer": answer(result.frame, search.latency_budget_ms).to_dict()}
        write_record(out_dir, record)
        write_exports(out_dir, result.frame, record)
        return result

    total = record["planned_points"]
    count = 0

    def report(message: str) -> None:
        if progress is not None:
            progress(count, total, message)

    status = "failed"
    loaded = False
    stuck: str | None = None  # why loads stopped: one got no answer in time
    before = snapshot(server, [name]) if restore else None
    report(f"measured by {choice.engine}: {choice.reason}")
    by_key = {r.key: r for r in rows}
    current: dict[str, Any] = {"variant": None, "error": None, "served_by": None}
    screening = search.screening(measuring) if search is not None else None
    cpus = _range_cpus(core_range, base)
    screened = {r.key: r for r in _screened_rows(out_dir, previous)} if screening is not None else {}

    def load(point: Point) -> None:
        """Load the point's variant when it is not the one loaded (once per change, timed)."""
        nonlocal loaded, stuck
        variant = point.variant
        if current["variant"] == variant.label:
            return
        report(f"loading {variant.label}")
        current["variant"] = variant.label
        leaving = model_processes(getattr(server, "pid", None), name)  # the stubs this load replaces
        times, current["error"], stuck = load_variant(server, name, variant, load_timeout_s, stuck)
        if current["error"] is None:
            loaded = True
            if hasattr(server, "served_by"):  # which backend served it (PyTorch backend or its twin)
                record.setdefault("served_by", {})[variant.label] = server.served_by(name)
                current["served_by"] = server.backend_of(name)
            # the previous variant's stubs exit (and the new ones finish importing) after the load returns
            report(f"{variant.label}: waiting for the server's processes to go quiet")
            quiet = wait_quiet(getattr(server, "pid", None), leaving=leaving, cancel=cancel)
            times["quiet"] = quiet.to_dict() if quiet is not None else None
            times.update(_first_and_warmup(target, point.batch_size, settings))
        record.setdefault("variant_times", {})[variant.label] = times

    def measured_row(point: Point, how: MeasureSettings) -> PointRow:
        load(point)
        if current["error"] is not None:
            return PointRow.failed(point, current["error"])
        use = (CpuUse(cpus) if cpus else NeuronUse(range(core_range.start, core_range.end + 1))).start()
        row = measure_point(target, point, how, cancel=cancel,
                            progress=lambda _d, _n, message: report(f"{point.label}: {message}"))
        busy = format_busy(use.stop())
        return replace(row, served_by=current["served_by"], **{"cpu_busy" if cpus else "neuron_busy": busy})

    def measure(point: Point, again: bool = False) -> PointRow:
        """The point's row: the one on disk when resuming, else loaded (when the variant changes) and
        measured; ``again``: measured anew, the new row the point's unless it failed."""
        nonlocal count
        if point.key in by_key and not again:
            count += 1
            return by_key[point.key]
        check_cancel(cancel)
        row = measured_row(point, measuring)
        append_point(out_dir / POINTS_FILE, row.to_dict())
        if point.key not in by_key:
            rows.append(row)
            by_key[row.key] = row
        elif not row.error:
            rows[rows.index(by_key[row.key])] = by_key[row.key] = row
        count += 0 if again else 1
        session["measured"] += 1
        save()
        report(f"{point.label}: {row.summary()}")
        return row

    def screen(point: Point) -> PointRow:
        """A short screening measurement (the search's ``screening`` settings), kept apart from the results."""
        if point.key in screened:
            return screened[point.key]
        check_cancel(cancel)
        row = measured_row(point, screening)
        append_point(out_dir / SCREENING_FILE, row.to_dict())
        if not row.error:
            screened[row.key] = row
        report(f"{point.label} (screen): {row.summary()}")
        return row

    try:
        if search is None:
            for variant in variants:
                for point in plan.points(variant):
                    measure(point)
        else:
            search.run(log.space, measure, log, screen if screening is not None else None)
            points = {p.key: p for v in variants for p in plan.points(v)}
            done_before = ((previous or {}).get("search") or {}).get("confirmed", [])
            confirmed = confirm_answer(rows, points, lambda p: measure(p, again=True), log,
                                       search.latency_budget_ms, done=done_before)
            log.confirmed = list(done_before) + ([confirmed] if confirmed else [])
        status = "complete"
    except Cancelled:
        status = "cancelled"
    finally:
        # not after a stuck load: restoring would only wait as long again
        if before is not None and loaded and stuck is None and getattr(server, "running", True):
            try:
                session["restored"] = restore_state(server, before)
            except Exception as err:  # the sweep's own outcome (and its error, if any) comes first
                session["restored"] = f"failed: {err}"
        record["status"] = session["status"] = status
        record["ended"] = session["ended"] = now()
        result = save()
    return result


def _range_cpus(core_range: CoreRange, base: ModelConfig) -> tuple[int, ...]:
    """The CPUs of the core range on the CPU target (on Neuron the range names NeuronCores)."""
    if parameters_of(base).get("WORKBENCH_TARGET", "cpu") != "cpu":
        return ()
    return tuple(range(core_range.start, core_range.end + 1))


def _screened_rows(out_dir: Path, previous: dict | None) -> list[PointRow]:
    """The screening rows a resumed search made before (error-free, one per point)."""
    path = out_dir / SCREENING_FILE
    if previous is None or not path.exists():
        return []
    return [PointRow.from_dict(row) for row in unique_rows(read_points(path)) if not row.get("error")]


def _chosen(variants: list[Variant], labels: Collection[str] | None) -> list[Variant]:
    """The plan's variants named by ``labels`` (all when None); an unknown label is an error."""
    if labels is None:
        return variants
    known = {v.label for v in variants}
    unknown = [label for label in labels if label not in known]
    if unknown:
        raise SweepError(f"variant(s) {unknown} are not in the plan (its variants: {sorted(known)})")
    return [v for v in variants if v.label in set(labels)]
