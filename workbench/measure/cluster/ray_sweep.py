"""A sweep measured on a Ray cluster, the driver's side: each variant of the plan is one Ray task
(`ray_task.measure_variant`: its own tritonserver on its node, the model folder shipped to it), for
both sweep kinds, a tensor model's `SweepPlan` and a vLLM-backend model's `LlmPlan`, each kind one
`RayKind` (`ray_kinds`). The driver appends a variant's rows to the run folder in one write when its
task returns, so a variant is in the run whole or not at all: a node lost mid-variant makes Ray run
the task again elsewhere (``max_retries``), and a driver killed mid-sweep leaves only whole
variants, which ``resume`` skips. A tracker actor on the driver's node notes every start, so the
record names each variant that started more than once, and where.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any, overload

from workbench.measure.cluster.ray_kinds import CLUSTER, CLUSTER_FIELD, RayKind, measured_on_ray, ray_kind
from workbench.measure.cluster.ray_task import (
    MAX_RETRIES,
    ShippedModel,
    StartTracker,
    TaskOutcome,
    TaskProgress,
    engine_folders,
    import_ray,
    measure_variant,
    pack_model,
    remove_work_folders_of,
    too_big_for_every_node,
)
from workbench.measure.engine.measure_settings import MeasureSettings
from workbench.measure.grid.plan import SweepError, SweepPlan
from workbench.measure.grid.rows import now
from workbench.measure.llm.plan import LlmPlan
from workbench.measure.llm.result import LlmSweepResult
from workbench.measure.store.folder import points_text, read_record
from workbench.measure.store.results import (
    POINTS_FILE,
    SavedRun,
    SweepResult,
    node_name,
    write_exports,
    write_record,
)
from workbench.measure.sweep.lock import RunFolderLock
from workbench.measure.sweep.swept import check_out_dir

__all__ = [
    "dashboard_url",
    "run_sweep_on_ray",
]


CLEAR_TIMEOUT_S = 20.0  # how long a node waits for its cancelled tasks' workers to end before removing their folders


# ---- the driver ---------------------------------------------------------------------------------


def _append_variant(path: Path, rows: list[dict]) -> None:
    """A variant's rows appended in one write and synced: a crash leaves all of them or none whole
    (a torn last line is dropped when the run is read)."""
    with open(path, "ab") as handle:
        handle.write(points_text(rows).encode("utf-8"))
        handle.flush()
        os.fsync(handle.fileno())


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[-1] if text else ''}".strip()


def dashboard_url(context: Any) -> str | None:
    """The Ray dashboard's address from ``ray.init``'s context (``address_info['webui_url']``, as Ray
    documents it), None where the cluster runs without one (Ray Core alone has no dashboard)."""
    url = (context.address_info or {}).get("webui_url") if context is not None else None
    if not url:
        return None
    return url if "://" in url else f"http://{url}"


def _resume_problem(previous: Mapping[str, Any], kind: RayKind, out_dir: Path) -> str | None:
    """Why the run in ``out_dir`` (its record ``previous``) cannot be resumed on Ray as ``kind``."""
    if not measured_on_ray(previous):
        return f"{out_dir} holds a run measured on one server, not on Ray; resume it without --ray or give a new --out"
    if previous.get("kind") != kind.record_kind:
        return (
            f"cannot resume the Ray sweep in {out_dir}: it is a {previous.get('kind')} sweep, not a "
            f"{kind.record_kind} one; give a new --out"
        )
    changed = kind.changed(previous)
    if changed:
        return f"cannot resume the Ray sweep in {out_dir}: {changed}; resume with the same plan or give a new --out"
    return None


@overload
def run_sweep_on_ray(
    plan: SweepPlan,
    model: str | Path,
    *,
    out_dir: str | Path,
    settings: MeasureSettings | None = None,
    address: str | None = None,
    resume: bool = False,
    label: str | None = None,
    max_retries: int = MAX_RETRIES,
    load_timeout_s: float | None = None,
    progress: Callable[[int, int, str], None] | None = None,
    cancel: threading.Event | None = None,
    command: str | None = None,
) -> SweepResult: ...


@overload
def run_sweep_on_ray(
    plan: LlmPlan,
    model: str | Path,
    *,
    out_dir: str | Path,
    settings: MeasureSettings | None = None,
    address: str | None = None,
    resume: bool = False,
    label: str | None = None,
    max_retries: int = MAX_RETRIES,
    load_timeout_s: float | None = None,
    progress: Callable[[int, int, str], None] | None = None,
    cancel: threading.Event | None = None,
    command: str | None = None,
) -> LlmSweepResult: ...


def run_sweep_on_ray(
    plan: SweepPlan | LlmPlan,
    model: str | Path,
    *,
    out_dir: str | Path,
    settings: MeasureSettings | None = None,
    address: str | None = None,
    resume: bool = False,
    label: str | None = None,
    max_retries: int = MAX_RETRIES,
    load_timeout_s: float | None = None,
    progress: Callable[[int, int, str], None] | None = None,
    cancel: threading.Event | None = None,
    command: str | None = None,
) -> SavedRun:
    """Measure ``plan`` on the Ray cluster at ``address`` (None: the one this process is connected
    to, else ``RAY_ADDRESS``, else a Ray started here), one task per variant, into one run folder.

    ``model`` is a generated model directory on this machine; Ray ships it to each task. A tensor
    model takes a `SweepPlan` (returns a `SweepResult`); a vLLM-backend model an `LlmPlan` (returns
    an `LlmSweepResult`, the run recorded as any LLM sweep's): its weights and tokenizer folders,
    where model.json names local ones, are shipped with it, and each node's server needs Triton's
    vLLM backend (its container, or ``WORKBENCH_VLLM_BACKEND`` / ``WORKBENCH_VLLM_PYTHON`` in the
    node's environment, set before ``ray start``). ``settings``: how each point is measured (default:
    the kind's, ``MeasureSettings()`` or ``LLM_SETTINGS``); ``load_timeout_s``: an LLM variant's
    load (default the LLM sweep's). Every row names the node that measured it (``node``,
    ``node_address``); the record's ``nodes`` says what each node measured and ``retried`` which
    variants Ray started again after losing a node. ``resume`` keeps the variants measured before
    and measures the rest. Cancelling ends the running tasks (their servers with them) and returns
    the run so far, status ``cancelled``.
    """
    model_dir = Path(model)
    if settings is None:
        from workbench.measure.llm.run import LLM_SETTINGS

        settings = LLM_SETTINGS if isinstance(plan, LlmPlan) else MeasureSettings()
    kind = ray_kind(plan, model_dir, settings, load_timeout_s)
    out_dir = Path(out_dir)
    has_run = check_out_dir(out_dir, resume)
    ray = import_ray()
    out_dir.mkdir(parents=True, exist_ok=True)
    with RunFolderLock(out_dir):
        previous = read_record(out_dir) if has_run else {}
        problem = _resume_problem(previous, kind, out_dir) if previous else None
        if problem:
            raise SweepError(problem)
        points = out_dir / POINTS_FILE
        rows = kind.read_rows(points) if has_run and points.exists() else []
        done = kind.measured(rows)
        todo = [label for label in kind.labels() if label not in done]
        sweep = _RaySweep(ray, kind, out_dir, previous, label, command, progress)
        started_here = not ray.is_initialized()
        # the context of the cluster joined (or of the one already joined): its dashboard's address
        context = ray.init(
            address=address if started_here else None,
            logging_level="WARNING",
            log_to_driver=False,
            ignore_reinit_error=not started_here,
        )
        try:
            too_big = too_big_for_every_node({v: kind.ask(v) for v in todo}, ray.nodes())
            if too_big:
                raise SweepError(too_big)  # before the record is written
            sweep.open(done)
            return sweep.run(todo, max_retries, cancel, dashboard_url(context))
        finally:
            if started_here:
                ray.shutdown()


class _RaySweep:
    """The driver's side of one Ray sweep: the record, the tasks in flight, rows as they come."""

    def __init__(
        self,
        ray: Any,
        kind: RayKind,
        out_dir: Path,
        previous: Mapping[str, Any],
        label: str | None,
        command: str | None,
        progress: Callable[[int, int, str], None] | None,
    ) -> None:
        self.ray, self.kind, self.model_dir, self.out_dir = ray, kind, kind.model_dir, out_dir
        self.previous, self.progress = previous, progress
        self.label = label or previous.get("label") or out_dir.name
        self.command = command
        self.record: dict = {}
        self.session: dict = {}
        self.count = 0

    def open(self, measured_before: set[str]) -> None:
        """The record as this session starts (the earlier one's, when resuming)."""
        record = dict(self.previous)
        name = self.model_dir.name  # Triton names a model by its folder (a config's name must match it)
        fields = self.kind.record_fields()
        record.update(
            {
                **fields,
                "kind": self.kind.record_kind,
                CLUSTER_FIELD: CLUSTER,
                "label": self.label,
                "model": name,
                "model_dir": str(self.model_dir.resolve()),
                "started": record.get("started") or now(),
                "ended": None,
                "status": "running",
                "planned_points": sum(self.kind.points(label) for label in self.kind.labels()),
                "variants": {**record.get("variants", {}), **fields["variants"]},
                "nodes": record.get("nodes", {}),
                "retried": record.get("retried", {}),
                "failed_variants": {},
                "running": {},  # a killed driver's last word on its tasks is not this session's
            }
        )
        if self.command:
            record["reproduce"] = {"command": self.command}
        self.session = {
            "started": now(),
            "ended": None,
            "status": "running",
            "measured_variants": 0,
            "reused_variants": len(measured_before),
        }
        record["sessions"] = list(record.get("sessions", [])) + [self.session]
        self.record = record
        self.count = sum(self.kind.points(label) for label in measured_before)
        write_record(self.out_dir, record)

    def run(self, todo: list[str], max_retries: int, cancel: threading.Event | None, dashboard: str | None) -> SavedRun:
        ray = self.ray
        status = "failed"
        self.record["dashboard"] = dashboard
        try:
            strategy = ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy(
                ray.get_runtime_context().get_node_id(), soft=False
            )  # the tracker lives beside the driver
            tracker = ray.remote(StartTracker).options(num_cpus=0, scheduling_strategy=strategy).remote()
            # up before any task starts: a start noted to a tracker still starting waits in the task's
            # worker, and is lost with it when its node is (the retry then looks like a first start)
            ray.get(tracker.all_starts.remote())
            clock = time.perf_counter()
            shipped = ShippedModel(pack_model(self.model_dir), engine_folders(self.model_dir))
            model_ref = ray.put(shipped)
            self.session["shipped"] = {"bytes": shipped.size, "pack_s": round(time.perf_counter() - clock, 4)}
            submitted = time.time()
            task = ray.remote(measure_variant)
            pending = {}
            for label in todo:
                ref = task.options(
                    **self.kind.ask(label).options(),
                    max_retries=max_retries,
                    retry_exceptions=False,
                    name=f"workbench variant {label}",
                ).remote(self.kind.job(label, self.label), model_ref, tracker)
                pending[ref] = label
            self._report(f"{len(pending)} variant(s) sent to Ray")
            cancelled = self._collect(pending, cancel, tracker)
            self._note_starts(ray.get(tracker.all_starts.remote()), submitted)
            status = "cancelled" if cancelled else "failed" if self.record["failed_variants"] else "complete"
        finally:
            self.record["status"] = self.session["status"] = status
            self.record["ended"] = self.session["ended"] = now()
            self.record["running"] = {}
            result = self._save()
        return result

    def _collect(self, pending: dict, cancel: threading.Event | None, tracker: Any) -> bool:
        """Rows appended as each task returns, what each node measures now noted as it moves; True
        when cancelled (the tasks still running ended)."""
        ray = self.ray
        asked = None  # the tracker's answer on its way (never waited for: a busy tracker slows nothing)
        while pending:
            if cancel is not None and cancel.is_set():
                for ref in pending:
                    ray.cancel(ref, force=True)  # the worker ends; its server's guard takes the server down
                self._clear_cancelled(tracker, list(pending.values()))
                return True
            if asked is None:
                asked = tracker.now.remote()
            elif ray.wait([asked], timeout=0)[0]:
                self._note_running(ray.get(asked), set(pending.values()))
                asked = None
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=0.5)
            for ref in ready:
                label = pending.pop(ref)
                try:
                    outcome = ray.get(ref)
                except Exception as err:  # the task failed where it ran, or on every retry: the others go on
                    self.record["failed_variants"][label] = _first_line(err)
                    self.record.get("running", {}).pop(label, None)
                    self._report(f"{label}: failed ({_first_line(err)})")
                    write_record(self.out_dir, self.record)
                    continue
                self._take(outcome)
        return False

    def _clear_cancelled(self, tracker: Any, labels: list[str]) -> None:
        """The folders of the cancelled tasks removed on their nodes (a worker ended by force runs no
        `finally`): a task per node, pinned to it, once the workers are gone. What is left (a node
        that did not answer in time) goes when the next task on that node starts."""
        ray = self.ray
        by_node: dict[str, list[int]] = {}
        try:
            for node, pid in ray.get(tracker.workers_of.remote(labels), timeout=10).values():
                by_node.setdefault(node, []).append(pid)
            cleanup = ray.remote(remove_work_folders_of)
            refs = [
                cleanup.options(
                    num_cpus=0,
                    scheduling_strategy=ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy(node, soft=False),
                ).remote(pids, CLEAR_TIMEOUT_S)
                for node, pids in by_node.items()
            ]
            left = [pid for pids in ray.get(refs, timeout=CLEAR_TIMEOUT_S + 30) for pid in pids]
        except Exception as err:  # a node gone, a timeout: its next task removes what is left
            left = [pid for pids in by_node.values() for pid in pids]
            self.session["cancel_cleanup"] = _first_line(err)
        if left:
            self.session["work_folders_left"] = left

    def _take(self, outcome: TaskOutcome) -> None:
        """One variant's rows into the run, and what its node did into the record (a variant whose
        run on the node did not complete is named in ``failed_variants``: a resume measures it again)."""
        label, placement = outcome.label, outcome.placement
        _append_variant(self.out_dir / POINTS_FILE, outcome.rows)
        node = self.record["nodes"].setdefault(placement.node, {"address": placement.address, "variants": []})
        node["variants"].append(label)
        if placement.neuron_cores:
            node.setdefault("neuron_cores", {})[label] = {
                "assigned": list(placement.neuron_cores),
                "visible": placement.visible_cores,
                "set_by": placement.visible_set_by,
            }
        for key, value in (("variant_times", outcome.variant_times), ("served_by", outcome.served_by)):
            if value is not None:
                self.record.setdefault(key, {})[label] = value
        self.record.setdefault("task_times", {})[label] = outcome.times
        self.record["engine"] = outcome.engine or self.record.get("engine")
        self.record["server_version"] = outcome.server_version
        if outcome.status == "complete":
            self.record["failed_variants"].pop(label, None)
        else:
            self.record["failed_variants"][label] = (
                f"{outcome.status} on its node: {outcome.failure or 'no reason given'}"
            )
        self.record.get("running", {}).pop(label, None)
        self.session["measured_variants"] += 1
        self.count += len(outcome.rows)
        write_record(self.out_dir, self.record)
        self._report(f"{node_name(placement.node)}: {label} measured ({len(outcome.rows)} points)")

    def _note_running(self, progress: dict[str, TaskProgress], pending: set[str]) -> None:
        """The record's ``running``: each variant measuring now, on which node and how far (written,
        and reported, only when it changed)."""
        running = {label: asdict(moved) for label, moved in progress.items() if label in pending}
        if running == self.record.get("running"):
            return
        self.record["running"] = running
        write_record(self.out_dir, self.record)
        for label, moved in running.items():
            self._report(f"{node_name(moved['node'])}: {label} {moved['done']}/{moved['total']} {moved['message']}")

    def _note_starts(self, starts: dict[str, list[tuple[str, float]]], submitted: float) -> None:
        """Each variant's wait from submission to its (first) start, and the variants that started
        more than once this session: the nodes they started on, in order."""
        for label, started in starts.items():
            times = self.record.setdefault("task_times", {}).setdefault(label, {})
            times["queued_s"] = round(started[0][1] - submitted, 4)
            nodes = [node for node, _ in started]
            if len(nodes) > 1:
                measured_on = [n for n, e in self.record["nodes"].items() if label in e["variants"]]
                self.record["retried"][label] = {
                    "started_on": nodes,
                    "measured_on": measured_on[-1] if measured_on else None,
                }

    def _report(self, message: str) -> None:
        if self.progress is not None:
            self.progress(self.count, self.record["planned_points"], message)

    def _save(self) -> SavedRun:
        points = self.out_dir / POINTS_FILE
        result = self.kind.result(self.kind.read_rows(points) if points.exists() else [], self.record, self.out_dir)
        write_record(self.out_dir, self.record)
        write_exports(self.out_dir, self.kind.export_frame(result), self.record)
        return result
