"""A sweep measured on a Ray cluster: each variant of the plan is one Ray task.

The task asks Ray for what the variant's allocation needs (``neuron_cores`` for a Neuron target,
CPUs for the CPU target), unpacks the model folder Ray ships it (bytes in the object store) into a
node-local repository, starts a tritonserver there, measures the variant's points with `run_sweep`
on that node (the load generator beside the server), stops the server and returns the rows. The
driver appends a variant's rows to the run folder in one write when its task returns, so a variant
is in the run whole or not at all: a node lost mid-variant makes Ray run the task again elsewhere
(``max_retries``), and a driver killed mid-sweep leaves only whole variants, which ``resume``
skips. A tracker actor on the driver's node notes every start, so the record names each variant
that started more than once, and where.
"""

from __future__ import annotations

import io
import os
import shutil
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from workbench.coremap import CoreRange
from workbench.generate.backends import backend_of_config
from workbench.generate.config import parameters_of, read_config
from workbench.measure.engine.measure_settings import MeasureSettings
from workbench.measure.grid.plan import SweepError, SweepPlan, Variant
from workbench.measure.grid.rows import now
from workbench.measure.store.folder import RunRecord, points_text, read_record
from workbench.measure.store.results import (
    POINTS_FILE,
    SweepResult,
    frame_from_rows,
    node_name,
    read_points,
    write_exports,
    write_record,
)
from workbench.measure.sweep.lock import RunFolderLock
from workbench.measure.sweep.resume import unique_rows
from workbench.measure.sweep.swept import check_out_dir
from workbench.releases import RAY_VERSION

__all__ = [
    "NODE_COLUMN",
    "RAY_MISSING",
    "RUN_KIND",
    "Ask",
    "Placement",
    "TaskProgress",
    "VariantJob",
    "dashboard_url",
    "place",
    "placed_plan",
    "run_sweep_on_ray",
    "variant_ask",
]

RAY_MISSING = f"Ray is not installed here: pip install 'triton-neuron-workbench[ray]' (ray=={RAY_VERSION})"
RUN_KIND = "ray"
NODE_COLUMN = "node"  # the Ray node id that measured the row
NODE_ADDRESS_COLUMN = "node_address"
NEURON_CORES = "neuron_cores"  # Ray's resource name for AWS NeuronCores (docs.ray.io, Accelerator Support)
VISIBLE_CORES = "NEURON_RT_VISIBLE_CORES"
MAX_RETRIES = 3  # Ray runs a task again this often when its node or worker dies


def import_ray() -> Any:
    """The ``ray`` module, or a SweepError saying how to install it."""
    try:
        import ray
    except ImportError:
        raise SweepError(RAY_MISSING) from None
    return ray


def neuron_target(base) -> bool:
    """Whether the model runs on NeuronCores (the range names cores Ray hands out) or on the CPU."""
    return parameters_of(base).get("WORKBENCH_TARGET", "cpu") != "cpu"


@dataclass(frozen=True)
class Ask:
    """What one variant's task asks of Ray: CPUs, and NeuronCores on a Neuron target."""

    num_cpus: float
    neuron_cores: int = 0

    def options(self) -> dict:
        resources = {NEURON_CORES: self.neuron_cores} if self.neuron_cores else {}
        return {"num_cpus": self.num_cpus, **({"resources": resources} if resources else {})}


def variant_ask(variant: Variant, neuron: bool) -> Ask:
    """A Neuron variant asks for its cores as ``neuron_cores`` (one CPU for its load generator); a
    CPU variant for the CPUs its instances are pinned to."""
    if neuron:
        return Ask(num_cpus=1, neuron_cores=variant.allocation.instances * variant.allocation.cores_per_instance)
    return Ask(num_cpus=variant.allocation.instances * variant.allocation.cores_per_instance)


def too_big_for_every_node(asks: Mapping[str, Ask], nodes: list[dict]) -> str | None:
    """Why some variants can never start (``nodes``: ``ray.nodes()``), or None. Ray would keep such a
    task pending for ever, waiting for a node that can hold it."""
    alive = [node.get("Resources", {}) for node in nodes if node.get("Alive")]
    largest_cpus = max((r.get("CPU", 0) for r in alive), default=0)
    largest_cores = max((r.get(NEURON_CORES, 0) for r in alive), default=0)
    stuck = [
        label
        for label, ask in asks.items()
        if not any(r.get("CPU", 0) >= ask.num_cpus and r.get(NEURON_CORES, 0) >= ask.neuron_cores for r in alive)
    ]
    if not stuck:
        return None
    first = asks[stuck[0]]
    wanted = f"{first.num_cpus:g} CPU(s)" + (f" and {first.neuron_cores} {NEURON_CORES}" if first.neuron_cores else "")
    largest = f"{largest_cpus:g} CPU(s)" + (f" and {largest_cores:g} {NEURON_CORES}" if first.neuron_cores else "")
    return (
        f"no node of this Ray cluster can hold variant {stuck[0]}"
        + (f" (and {len(stuck) - 1} more)" if len(stuck) > 1 else "")
        + f": it asks {wanted}, the largest node has {largest}; "
        "use smaller allocations or add a node that has them"
    )


@dataclass(frozen=True)
class Placement:
    """Where a task runs: its node, and on a Neuron target the cores Ray gave it and the
    NEURON_RT_VISIBLE_CORES the task runs with (``visible_set_by``: ``ray``, or ``workbench`` where
    Ray set none)."""

    node: str
    address: str
    neuron_cores: tuple[int, ...] = ()
    visible_cores: str | None = None
    visible_set_by: str | None = None


def _core_ids(value: str) -> tuple[int, ...]:
    """The ids of a NEURON_RT_VISIBLE_CORES value: ``"2"``, ``"4-7"`` or a comma list of them."""
    ids: list[int] = []
    for part in value.split(","):
        first, _, last = part.strip().partition("-")
        ids.extend(range(int(first), int(last or first) + 1))
    return tuple(sorted(ids))


def place(neuron: bool) -> Placement:
    """This task's placement (run inside a Ray task). On a Neuron target the cores are the ones Ray
    assigned; NEURON_RT_VISIBLE_CORES is set from them where Ray did not set it, and refused where
    it names other cores."""
    ray = import_ray()
    context = ray.get_runtime_context()
    node, address = context.get_node_id(), ray.util.get_node_ip_address()
    if not neuron:
        return Placement(node, address)
    cores = tuple(sorted(int(i) for i in context.get_accelerator_ids().get(NEURON_CORES, [])))
    if not cores:
        raise SweepError(f"Ray gave this task no {NEURON_CORES} on node {node}; a Neuron variant needs them")
    visible = os.environ.get(VISIBLE_CORES)
    set_by = "ray"
    if not visible:
        visible, set_by = ",".join(str(c) for c in cores), "workbench"
        os.environ[VISIBLE_CORES] = visible
    elif _core_ids(visible) != cores:
        raise SweepError(f"{VISIBLE_CORES}={visible} on node {node} is not the cores Ray assigned ({list(cores)})")
    return Placement(node, address, cores, visible, set_by)


def placed_plan(plan: SweepPlan, placement: Placement) -> SweepPlan:
    """The plan with its core range on the cores Ray gave the task (Neuron); as it is on the CPU."""
    cores = placement.neuron_cores
    if not cores:
        return plan
    if cores[-1] - cores[0] + 1 != len(cores):
        raise SweepError(
            f"Ray gave NeuronCores {list(cores)} on node {placement.node}, not one contiguous range; "
            "a variant's instances need neighbouring cores"
        )
    return replace(plan, core_range=CoreRange(cores[0], cores[-1]))


# ---- shipping the model folder ------------------------------------------------------------------


def pack_model(model_dir: Path) -> bytes:
    """The model folder as tar.gz bytes (for the object store), named by its folder name."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        tar.add(model_dir, arcname=model_dir.name)
    return buffer.getvalue()


def unpack_model(data: bytes, repository: Path) -> None:
    repository.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        tar.extractall(repository, filter="data")  # no absolute paths or links out of the folder


# ---- the task -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class VariantJob:
    """One variant's task: the plan, the variant's label, the model folder's name, how to measure."""

    label: str
    plan: SweepPlan
    model: str
    settings: MeasureSettings
    neuron: bool
    run_label: str


@dataclass(frozen=True)
class TaskProgress:
    """Where a running variant's task is: its node, the points measured of the variant's, the last
    thing it said (what the notebook shows per node while the rows are still on that node)."""

    variant: str
    node: str
    address: str
    done: int  # whole points measured (the message says how far into the next one)
    total: int
    message: str


class StartTracker:
    """A Ray actor beside the driver: every task notes its start here (label, node), so a variant
    that started twice (its node lost, Ray ran it again) is known to the driver, and its progress,
    so the driver can say what each node is measuring now."""

    def __init__(self) -> None:
        self.starts: dict[str, list[tuple[str, float]]] = {}
        self.progress: dict[str, TaskProgress] = {}

    def started(self, label: str, node: str, at: float) -> None:
        self.starts.setdefault(label, []).append((node, at))
        self.progress.pop(label, None)  # a retried variant starts its points again

    def moved(self, progress: TaskProgress) -> None:
        self.progress[progress.variant] = progress

    def all_starts(self) -> dict[str, list[tuple[str, float]]]:
        return self.starts

    def now(self) -> dict[str, TaskProgress]:
        return self.progress


WORK_PREFIX = "wb-ray-"


def _work_folder() -> Path:
    """A node-local folder for this task, named by its worker's pid; the folders of workers that
    are gone (a task cancelled or its worker killed mid-variant) are removed first."""
    root = Path(tempfile.gettempdir())
    for stale in root.glob(f"{WORK_PREFIX}*-*"):
        pid = stale.name[len(WORK_PREFIX) :].split("-", 1)[0]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            shutil.rmtree(stale, ignore_errors=True)
    return Path(tempfile.mkdtemp(prefix=f"{WORK_PREFIX}{os.getpid()}-", dir=root))


def measure_variant(job: VariantJob, model_bytes: bytes, tracker: Any) -> dict:
    """Run inside a Ray task: the variant measured on this node's own tritonserver; its rows (each
    naming the node) and what the node saw. No server or folder is left behind."""
    ray = import_ray()
    placement = place(job.neuron)
    # not waited on here; waited on before returning
    noted = tracker.started.remote(job.label, placement.node, time.time())
    times: dict[str, float] = {}
    clock = time.perf_counter()
    # run-time: the server and the sweep (torch with them) load only where a task runs
    from workbench.measure.sweep import run_sweep
    from workbench.server import TritonServer

    times["import_s"] = time.perf_counter() - clock
    work = _work_folder()
    try:
        clock = time.perf_counter()
        unpack_model(model_bytes, work / "repo")
        times["unpack_s"] = time.perf_counter() - clock
        plan = placed_plan(job.plan, placement)
        clock = time.perf_counter()
        server = TritonServer(work / "repo").start()
        times["server_start_s"] = time.perf_counter() - clock

        def moved(done: float, total: int, message: str) -> None:  # not waited on: one caller's calls run in order
            tracker.moved.remote(TaskProgress(job.label, placement.node, placement.address, int(done), total, message))

        try:
            clock = time.perf_counter()
            result = run_sweep(
                plan,
                server,
                work / "repo" / job.model,
                out_dir=work / "run",
                settings=job.settings,
                variants=[job.label],
                restore=False,
                label=f"{job.run_label}: {job.label}",
                progress=moved,
            )
            times["measure_s"] = time.perf_counter() - clock
            version = server.version
        finally:
            clock = time.perf_counter()
            server.stop()
            times["server_stop_s"] = time.perf_counter() - clock
        rows = [
            {**row, NODE_COLUMN: placement.node, NODE_ADDRESS_COLUMN: placement.address}
            for row in unique_rows(read_points(work / "run" / POINTS_FILE))
        ]
        record = result.record
        ray.get(noted)
        return {
            "label": job.label,
            "rows": rows,
            "status": result.status,
            "placement": asdict(placement),
            "engine": record.get("engine"),
            "server_version": version,
            "variant_config": record.get("variants", {}).get(job.label),
            "variant_times": record.get("variant_times", {}).get(job.label),
            "served_by": record.get("served_by", {}).get(job.label),
            "times": times,
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)


# ---- the driver ---------------------------------------------------------------------------------


def _measured(rows: list[dict], plan: SweepPlan, variants: list[Variant]) -> set[str]:
    """Labels of the variants whose every point has an error-free row (a resume skips them)."""
    good = {(r.get("variant"), r.get("batch_size"), r.get("concurrency")) for r in rows if not r.get("error")}
    return {v.label for v in variants if all(p.key in good for p in plan.points(v))}


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
    progress: Callable[[int, int, str], None] | None = None,
    cancel: threading.Event | None = None,
    command: str | None = None,
) -> SweepResult:
    """Measure ``plan`` on the Ray cluster at ``address`` (None: the one this process is connected
    to, else ``RAY_ADDRESS``, else a Ray started here), one task per variant, into one run folder.

    ``model`` is a generated model directory on this machine; Ray ships it to each task. Every
    row names the node that measured it (``node``, ``node_address``); the record's ``nodes`` says
    what each node measured and ``retried`` which variants Ray started again after losing a node.
    ``resume`` keeps the variants measured before and measures the rest. Cancelling ends the
    running tasks (their servers with them) and returns the run so far, status ``cancelled``.
    """
    settings = MeasureSettings() if settings is None else settings
    model_dir = Path(model)
    if not (model_dir / "config.pbtxt").is_file():
        raise SweepError(f"{model_dir} is not a generated model directory (no config.pbtxt)")
    base = read_config(model_dir)
    if backend_of_config(base).streams_tokens:
        raise SweepError(
            f"{model_dir.name} streams tokens (an LLM sweep): run_sweep_on_ray measures tensor models; "
            "sweep it on one server with workbench.measure.llm"
        )
    neuron = neuron_target(base)
    variants = plan.variants(base)  # the whole plan checked before anything is shipped
    out_dir = Path(out_dir)
    has_run = check_out_dir(out_dir, resume)
    ray = import_ray()
    out_dir.mkdir(parents=True, exist_ok=True)
    with RunFolderLock(out_dir):
        previous = read_record(out_dir) if has_run else {}
        if previous and previous.get("kind") != RUN_KIND:
            raise SweepError(
                f"{out_dir} holds a run measured on one server, not on Ray; resume it without --ray or give a new --out"
            )
        if previous and previous.get("plan") != plan.to_dict():
            raise SweepError(
                f"cannot resume the Ray sweep in {out_dir}: it measured another plan "
                f"({previous.get('plan')}); resume with the same plan or give a new --out"
            )
        points = out_dir / POINTS_FILE
        rows = unique_rows(read_points(points)) if has_run and points.exists() else []
        done = _measured(rows, plan, variants)
        todo = [v for v in variants if v.label not in done]
        sweep = _RaySweep(ray, plan, model_dir, out_dir, settings, neuron, previous, label, command, progress)
        started_here = not ray.is_initialized()
        # the context of the cluster joined (or of the one already joined): its dashboard's address
        context = ray.init(
            address=address if started_here else None,
            logging_level="WARNING",
            log_to_driver=False,
            ignore_reinit_error=not started_here,
        )
        try:
            too_big = too_big_for_every_node({v.label: variant_ask(v, neuron) for v in todo}, ray.nodes())
            if too_big:
                raise SweepError(too_big)  # before the record is written
            sweep.open(variants, len(done))
            return sweep.run(todo, max_retries, cancel, dashboard_url(context))
        finally:
            if started_here:
                ray.shutdown()


class _RaySweep:
    """The driver's side of one Ray sweep: the record, the tasks in flight, rows as they come."""

    def __init__(
        self,
        ray: Any,
        plan: SweepPlan,
        model_dir: Path,
        out_dir: Path,
        settings: MeasureSettings,
        neuron: bool,
        previous: Mapping[str, Any],
        label: str | None,
        command: str | None,
        progress: Callable[[int, int, str], None] | None,
    ) -> None:
        self.ray, self.plan, self.model_dir, self.out_dir = ray, plan, model_dir, out_dir
        self.settings, self.neuron, self.previous, self.progress = settings, neuron, previous, progress
        self.label = label or previous.get("label") or out_dir.name
        self.command = command
        self.record: dict = {}
        self.session: dict = {}
        self.count = 0

    def open(self, variants: list[Variant], measured_before: int) -> None:
        """The record as this session starts (the earlier one's, when resuming)."""
        record = dict(self.previous)
        name = self.model_dir.name  # Triton names a model by its folder (a config's name must match it)
        per_variant = len(self.plan.batch_sizes) * len(self.plan.concurrency)
        record.update(
            {
                "kind": RUN_KIND,
                "label": self.label,
                "model": name,
                "model_dir": str(self.model_dir.resolve()),
                "started": record.get("started") or now(),
                "ended": None,
                "status": "running",
                "plan": self.plan.to_dict(),
                "planned_points": per_variant * len(variants),
                "settings": {"model": name, **self.settings.to_dict()},
                "seed": self.settings.seed,
                "target": "neuron" if self.neuron else "cpu",
                "variants": {**record.get("variants", {}), **{v.label: v.config_json() for v in variants}},
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
            "reused_variants": measured_before,
        }
        record["sessions"] = list(record.get("sessions", [])) + [self.session]
        self.record = record
        self.count = measured_before * per_variant
        write_record(self.out_dir, record)

    def run(
        self, todo: list[Variant], max_retries: int, cancel: threading.Event | None, dashboard: str | None
    ) -> SweepResult:
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
            packed = pack_model(self.model_dir)
            model_bytes = ray.put(packed)
            self.session["shipped"] = {"bytes": len(packed), "pack_s": round(time.perf_counter() - clock, 4)}
            submitted = time.time()
            task = ray.remote(measure_variant)
            pending = {}
            for variant in todo:
                job = VariantJob(variant.label, self.plan, self.model_dir.name, self.settings, self.neuron, self.label)
                ref = task.options(
                    **variant_ask(variant, self.neuron).options(),
                    max_retries=max_retries,
                    retry_exceptions=False,
                    name=f"workbench variant {variant.label}",
                ).remote(job, model_bytes, tracker)
                pending[ref] = variant.label
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

    def _take(self, outcome: dict) -> None:
        """One variant's rows into the run, and what its node did into the record."""
        label, placement = outcome["label"], outcome["placement"]
        _append_variant(self.out_dir / POINTS_FILE, outcome["rows"])
        node = self.record["nodes"].setdefault(placement["node"], {"address": placement["address"], "variants": []})
        node["variants"].append(label)
        if placement.get("neuron_cores"):
            node.setdefault("neuron_cores", {})[label] = {
                "assigned": placement["neuron_cores"],
                "visible": placement["visible_cores"],
                "set_by": placement["visible_set_by"],
            }
        for key in ("variant_times", "served_by"):
            if outcome.get(key) is not None:
                self.record.setdefault(key, {})[label] = outcome[key]
        self.record.setdefault("task_times", {})[label] = outcome["times"]
        self.record["engine"] = outcome.get("engine") or self.record.get("engine")
        self.record["server_version"] = outcome.get("server_version")
        self.record["failed_variants"].pop(label, None)
        self.record.get("running", {}).pop(label, None)
        self.session["measured_variants"] += 1
        self.count += len(outcome["rows"])
        write_record(self.out_dir, self.record)
        self._report(f"{node_name(placement['node'])}: {label} measured ({len(outcome['rows'])} points)")

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

    def _save(self) -> SweepResult:
        points = self.out_dir / POINTS_FILE
        frame = frame_from_rows(unique_rows(read_points(points)) if points.exists() else [])
        write_record(self.out_dir, self.record)
        write_exports(self.out_dir, frame, self.record)
        return SweepResult(frame, RunRecord.from_dict(self.record), self.out_dir)
