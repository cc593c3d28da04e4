"""A sweep measured on a Ray cluster: each variant of the plan is one Ray task, for both sweep kinds:
a tensor model's `SweepPlan` and a vLLM-backend model's `LlmPlan` (max_num_seqs x tensor-parallel
degree x instances), each through its one-server runner (`run_sweep`, `run_llm_sweep`) on the node.

The task asks Ray for what the variant's allocation needs (``neuron_cores`` for a Neuron target,
CPUs for the CPU target), unpacks the model folder Ray ships it (bytes in the object store) into a
node-local repository (an LLM's weights and tokenizer folders with it, model.json pointed at them
there), starts a tritonserver there, measures the variant's points on that node (the load generator
beside the server), stops the server and returns the rows. The
driver appends a variant's rows to the run folder in one write when its task returns, so a variant
is in the run whole or not at all: a node lost mid-variant makes Ray run the task again elsewhere
(``max_retries``), and a driver killed mid-sweep leaves only whole variants, which ``resume``
skips. A tracker actor on the driver's node notes every start, so the record names each variant
that started more than once, and where. What differs between the kinds (the plan's variants and
points, the rows' keys, the record's fields, the result read back) is one `RayKind` each, chosen
once by the model's backend (`ray_kind`).
"""

from __future__ import annotations

import io
import json
import os
import shutil
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Protocol, TypeVar, overload

import pandas as pd

from workbench.coremap import CoreRange
from workbench.files import strict_json
from workbench.generate.backends import backend_of_config, read_back
from workbench.generate.config import parameters_of, read_config
from workbench.generate.vllm_backend.engine_settings import VllmSettings
from workbench.generate.vllm_backend.readback import engine_args_file
from workbench.measure.engine.measure_settings import MeasureSettings
from workbench.measure.grid.plan import SweepError, SweepPlan, Variant
from workbench.measure.grid.rows import INT_COLUMNS, KEY_COLUMNS, now
from workbench.measure.llm.plan import LlmPlan, LlmVariant
from workbench.measure.llm.result import LlmSweepResult, llm_frame
from workbench.measure.llm.rows import LLM_INT_COLUMNS, LLM_KEY_COLUMNS
from workbench.measure.store.folder import RunRecord, points_text, read_record
from workbench.measure.store.results import (
    POINTS_FILE,
    SavedRun,
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
    "LlmVariantJob",
    "Placement",
    "RayKind",
    "TaskOutcome",
    "TaskProgress",
    "VariantJob",
    "dashboard_url",
    "place",
    "placed_plan",
    "ray_kind",
    "run_sweep_on_ray",
    "variant_ask",
]

RAY_MISSING = f"Ray is not installed here: pip install 'triton-neuron-workbench[ray]' (ray=={RAY_VERSION})"
RUN_KIND = "ray"  # a tensor sweep's record on Ray (an LLM sweep's is the LLM kind's, read back as any)
CLUSTER_FIELD, CLUSTER = "cluster", "ray"  # every Ray sweep's record says so, whatever its kind
NODE_COLUMN = "node"  # the Ray node id that measured the row
NODE_ADDRESS_COLUMN = "node_address"
NEURON_CORES = "neuron_cores"  # Ray's resource name for AWS NeuronCores (docs.ray.io, Accelerator Support)
VISIBLE_CORES = "NEURON_RT_VISIBLE_CORES"
MAX_RETRIES = 3  # Ray runs a task again this often when its node or worker dies
CLEAR_TIMEOUT_S = 20.0  # how long a node waits for its cancelled tasks' workers to end before removing their folders


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


def cores_ask(cores: int, neuron: bool) -> Ask:
    """A Neuron variant asks for its ``cores`` as ``neuron_cores`` (one CPU for its load generator);
    a CPU variant for as many CPUs."""
    return Ask(num_cpus=1, neuron_cores=cores) if neuron else Ask(num_cpus=cores)


def variant_ask(variant: Variant, neuron: bool) -> Ask:
    """A tensor variant's ask: the cores its instances are pinned to."""
    return cores_ask(variant.allocation.instances * variant.allocation.cores_per_instance, neuron)


def llm_variant_ask(variant: LlmVariant, neuron: bool) -> Ask:
    """An LLM variant's ask: a tensor-parallel degree of cores per instance."""
    return cores_ask(variant.instances * variant.tensor_parallel, neuron)


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


AnyPlan = TypeVar("AnyPlan", SweepPlan, LlmPlan)


def placed_plan(plan: AnyPlan, placement: Placement) -> AnyPlan:
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


ENGINE_FOLDER_KEYS = ("model", "tokenizer")  # model.json's keys that may name a local folder vLLM reads


@dataclass(frozen=True)
class EngineFolder:
    """A local folder a vLLM-backend model's engine reads (model.json's ``model`` / ``tokenizer``:
    its weights, its tokenizer), as a task gets it: its place inside the model folder when it is
    there (shipped with it), else its own tar.gz. A Hugging Face id (no local folder) is left as
    it is: the node fetches it as any vLLM would."""

    keys: tuple[str, ...]
    inside: str | None = None
    data: bytes = b""


def engine_folders(model_dir: Path) -> tuple[EngineFolder, ...]:
    """The local folders ``model_dir``'s vLLM engine reads, none for another backend's model: the
    driver's paths mean nothing on another node, so the folders go with the model."""
    vllm = read_back(model_dir).settings.backend_settings
    if not isinstance(vllm, VllmSettings):
        return ()
    keys_of: dict[Path, list[str]] = {}
    for key in ENGINE_FOLDER_KEYS:
        value = getattr(vllm, key)
        if value and Path(value).is_dir():
            keys_of.setdefault(Path(value).resolve(), []).append(key)
    root = model_dir.resolve()
    return tuple(
        EngineFolder(tuple(keys), inside=str(folder.relative_to(root)))
        if folder.is_relative_to(root)
        else EngineFolder(tuple(keys), data=pack_model(folder))
        for folder, keys in keys_of.items()
    )


@dataclass(frozen=True)
class ShippedModel:
    """What every task gets of the model (once, in the object store): its folder's tar.gz, and the
    engine's folders outside it."""

    folder: bytes
    engine: tuple[EngineFolder, ...] = ()

    @property
    def size(self) -> int:
        return len(self.folder) + sum(len(f.data) for f in self.engine)

    def unpack(self, work: Path, name: str) -> Path:
        """The model folder under ``work/repo`` (the server's repository), its model.json pointing
        at the engine's folders where they are on this node; returns the model folder."""
        unpack_model(self.folder, work / "repo")
        model_dir = work / "repo" / name
        if not self.engine:
            return model_dir
        args_file = engine_args_file(model_dir)
        args = strict_json(args_file.read_text())
        for number, folder in enumerate(self.engine):
            if folder.inside is not None:
                where = model_dir / folder.inside
            else:
                unpack_model(folder.data, work / "engine" / str(number))
                (where,) = (work / "engine" / str(number)).iterdir()
            args.update(dict.fromkeys(folder.keys, str(where)))
        args_file.write_text(json.dumps(args, indent=2))
        return model_dir


# ---- the task -----------------------------------------------------------------------------------

Progress = Callable[[float, int, str], None]


class Job(Protocol):
    """One variant's task as its node runs it (`measure_variant`): which variant of which model,
    and how its kind's one-server runner measures it and reads its rows back."""

    @property
    def label(self) -> str: ...

    @property
    def model(self) -> str:
        """The model folder's name."""
        ...

    @property
    def neuron(self) -> bool: ...

    def sweep(self, server: Any, model_dir: Path, out_dir: Path, placement: Placement, progress: Progress) -> SavedRun:
        """The variant's points measured on ``server`` into ``out_dir`` (its kind's runner)."""
        ...

    def rows(self, out_dir: Path) -> list[dict]:
        """The rows the runner wrote, one per point."""
        ...


def _one_variant(job: VariantJob | LlmVariantJob, out_dir: Path, progress: Progress) -> dict[str, Any]:
    """The keywords both runners take to measure a task's one variant into its node-local folder,
    leaving the server as it is (it is stopped next)."""
    return {
        "out_dir": out_dir,
        "settings": job.settings,
        "variants": [job.label],
        "restore": False,
        "label": f"{job.run_label}: {job.label}",
        "progress": progress,
    }


@dataclass(frozen=True)
class VariantJob:
    """A tensor variant's task: measured by `run_sweep`."""

    label: str
    plan: SweepPlan
    model: str
    settings: MeasureSettings
    neuron: bool
    run_label: str

    def sweep(self, server: Any, model_dir: Path, out_dir: Path, placement: Placement, progress: Progress) -> SavedRun:
        # run-time: the sweep (torch with it) loads only where a task runs
        from workbench.measure.sweep import run_sweep

        return run_sweep(placed_plan(self.plan, placement), server, model_dir, **_one_variant(self, out_dir, progress))

    def rows(self, out_dir: Path) -> list[dict]:
        return unique_rows(read_points(out_dir / POINTS_FILE))


@dataclass(frozen=True)
class LlmVariantJob:
    """An LLM variant's task: measured by `run_llm_sweep` (a load that hangs restarts the node's
    own server, as the command line's one-server sweep does)."""

    label: str
    plan: LlmPlan
    model: str
    settings: MeasureSettings
    neuron: bool
    run_label: str
    load_timeout_s: float

    def sweep(self, server: Any, model_dir: Path, out_dir: Path, placement: Placement, progress: Progress) -> SavedRun:
        # run-time: the streaming engine and the tokenizer load only where a task runs
        from workbench.measure.llm.run import run_llm_sweep

        return run_llm_sweep(
            placed_plan(self.plan, placement),
            server,
            model_dir,
            restart_stuck=True,
            load_timeout_s=self.load_timeout_s,
            **_one_variant(self, out_dir, progress),
        )

    def rows(self, out_dir: Path) -> list[dict]:
        return unique_rows(read_points(out_dir / POINTS_FILE, LLM_KEY_COLUMNS, LLM_INT_COLUMNS), LLM_KEY_COLUMNS)


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


@dataclass(frozen=True)
class TaskOutcome:
    """What a variant's task returns: its rows (each naming the node), how its run on the node
    ended (``failure``: why, when it did not complete), and what the node saw."""

    label: str
    rows: list[dict]
    status: str
    failure: str | None
    placement: Placement
    engine: Any
    server_version: str | None
    variant_times: Any
    served_by: Any
    times: dict[str, float]


class StartTracker:
    """A Ray actor beside the driver: every task notes its start here (label, node), so a variant
    that started twice (its node lost, Ray ran it again) is known to the driver, and its progress,
    so the driver can say what each node is measuring now."""

    def __init__(self) -> None:
        self.starts: dict[str, list[tuple[str, float]]] = {}
        self.progress: dict[str, TaskProgress] = {}
        self.workers: dict[str, tuple[str, int]] = {}  # label -> (node, worker pid) of its latest start

    def started(self, label: str, node: str, at: float, pid: int) -> None:
        self.starts.setdefault(label, []).append((node, at))
        self.workers[label] = (node, pid)
        self.progress.pop(label, None)  # a retried variant starts its points again

    def workers_of(self, labels: list[str]) -> dict[str, tuple[str, int]]:
        return {label: self.workers[label] for label in labels if label in self.workers}

    def moved(self, progress: TaskProgress) -> None:
        self.progress[progress.variant] = progress

    def all_starts(self) -> dict[str, list[tuple[str, float]]]:
        return self.starts

    def now(self) -> dict[str, TaskProgress]:
        return self.progress


WORK_PREFIX = "wb-ray-"


def _remove_stale_work_folders() -> list[int]:
    """Remove the task folders of workers that are gone (a task cancelled or its worker killed
    mid-variant), their servers' run folders with them (made inside: `measure_variant`); returns
    the pids whose folders are still there, their workers alive."""
    alive = []
    for folder in Path(tempfile.gettempdir()).glob(f"{WORK_PREFIX}*-*"):
        pid = folder.name[len(WORK_PREFIX) :].split("-", 1)[0]
        if not pid.isdigit():
            continue
        if Path(f"/proc/{pid}").exists():
            alive.append(int(pid))
        else:
            shutil.rmtree(folder, ignore_errors=True)
    return alive


def _work_folder() -> Path:
    """A node-local folder for this task, named by its worker's pid; stale ones removed first."""
    _remove_stale_work_folders()
    return Path(tempfile.mkdtemp(prefix=f"{WORK_PREFIX}{os.getpid()}-", dir=tempfile.gettempdir()))


def remove_work_folders_of(pids: list[int], timeout_s: float) -> list[int]:
    """Run on a node after its tasks were cancelled: wait (at most ``timeout_s``) for their workers
    (``pids``) to end, then remove their folders; returns the pids whose folders are left."""
    deadline = time.monotonic() + timeout_s
    while True:
        left = [pid for pid in _remove_stale_work_folders() if pid in pids]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


def _selected(mapping: Any, label: str) -> Any:
    return (mapping or {}).get(label)


def measure_variant(job: Job, model: ShippedModel, tracker: Any) -> TaskOutcome:
    """Run inside a Ray task: the variant measured on this node's own tritonserver; its rows (each
    naming the node) and what the node saw. No server or folder is left behind (the server's run
    folder is inside the task's, so a task killed here leaves one folder, the next task's to remove)."""
    ray = import_ray()
    placement = place(job.neuron)
    # not waited on here; waited on before returning
    noted = tracker.started.remote(job.label, placement.node, time.time(), os.getpid())
    times: dict[str, float] = {}
    clock = time.perf_counter()
    # run-time: the server loads only where a task runs
    from workbench.server import TritonServer

    times["import_s"] = time.perf_counter() - clock
    work = _work_folder()
    try:
        clock = time.perf_counter()
        model_dir = model.unpack(work, job.model)
        times["unpack_s"] = time.perf_counter() - clock
        clock = time.perf_counter()
        server = TritonServer(work / "repo", run_parent=work).start()
        times["server_start_s"] = time.perf_counter() - clock

        def moved(done: float, total: int, message: str) -> None:  # not waited on: one caller's calls run in order
            tracker.moved.remote(TaskProgress(job.label, placement.node, placement.address, int(done), total, message))

        try:
            clock = time.perf_counter()
            result = job.sweep(server, model_dir, work / "run", placement, moved)
            times["measure_s"] = time.perf_counter() - clock
            version = server.version
        finally:
            clock = time.perf_counter()
            server.stop()
            times["server_stop_s"] = time.perf_counter() - clock
        rows = [
            {**row, NODE_COLUMN: placement.node, NODE_ADDRESS_COLUMN: placement.address}
            for row in job.rows(work / "run")
        ]
        record = result.record
        ray.get(noted)
        return TaskOutcome(
            label=job.label,
            rows=rows,
            status=result.status,
            failure=record.sessions[-1].get("failure") if record.sessions else None,
            placement=placement,
            engine=record.engine,
            server_version=version,
            variant_times=_selected(record.variant_times, job.label),
            served_by=_selected(record.served_by, job.label),
            times=times,
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


# ---- the sweep kinds, as the driver sees them ---------------------------------------------------


class RayKind(Protocol):
    """What the driver needs of a sweep kind on Ray: the variants to send (by label, with their asks
    and points), the task of each, which are measured already (a resume skips them), the record's
    fields of the kind, and the result its rows read back as."""

    record_kind: str  # the record's kind: how `load_run` / `workbench report` read the run back
    model_dir: Path
    neuron: bool

    def labels(self) -> list[str]:
        """The variants the plan sends to Ray, in its order (an LLM variant that cannot run is not)."""
        ...

    def ask(self, label: str) -> Ask: ...

    def points(self, label: str) -> int:
        """How many points of the plan the variant has."""
        ...

    def job(self, label: str, run_label: str) -> Job: ...

    def measured(self, rows: list[dict]) -> set[str]:
        """Labels of the variants whose every point has an error-free row (a resume skips them)."""
        ...

    def read_rows(self, path: Path) -> list[dict]:
        """The rows of the run's points file, one per point."""
        ...

    def record_fields(self) -> dict[str, Any]:
        """The kind's fields of the record (what the run measured and how)."""
        ...

    def changed(self, previous: Mapping[str, Any]) -> str | None:
        """What a resume of ``previous`` (this kind's record) would measure differently, or None."""
        ...

    def result(self, rows: list[dict], record: Mapping[str, Any], out_dir: Path) -> SavedRun:
        """The run as its kind reads it back."""
        ...

    def export_frame(self, result: SavedRun) -> pd.DataFrame:
        """The table results.csv / results.json export."""
        ...


def _plan_changed(previous: Mapping[str, Any], plan: dict) -> str | None:
    if previous.get("plan") != plan:
        return f"it measured another plan ({previous.get('plan')})"
    return None


class _PlanOnRay:
    """What both kinds do alike with their plan's variants (``variants``: those sent, by label) and
    rows (``key_columns`` name a point, ``int_columns`` are read as whole numbers)."""

    plan: Any  # a SweepPlan or an LlmPlan: each has ``points(variant)`` whose ``key`` is the row's
    variants: Mapping[str, Any]
    key_columns: tuple[str, ...]
    int_columns: tuple[str, ...]

    def labels(self) -> list[str]:
        return list(self.variants)

    def points(self, label: str) -> int:
        return len(self.plan.points(self.variants[label]))

    def measured(self, rows: list[dict]) -> set[str]:
        good = {tuple(r.get(c) for c in self.key_columns) for r in rows if not r.get("error")}
        return {label for label, v in self.variants.items() if all(p.key in good for p in self.plan.points(v))}

    def read_rows(self, path: Path) -> list[dict]:
        return unique_rows(read_points(path, self.key_columns, self.int_columns), self.key_columns)


class TensorOnRay(_PlanOnRay):
    """A tensor model's `SweepPlan` on Ray: a variant per allocation x batching x parameters."""

    record_kind = RUN_KIND
    key_columns, int_columns = tuple(KEY_COLUMNS), tuple(INT_COLUMNS)

    def __init__(self, plan: SweepPlan, model_dir: Path, settings: MeasureSettings) -> None:
        base = read_config(model_dir)
        self.plan, self.model_dir, self.settings = plan, model_dir, settings
        self.neuron = neuron_target(base)
        self.variants = {v.label: v for v in plan.variants(base)}  # the whole plan checked before anything is shipped

    def ask(self, label: str) -> Ask:
        return variant_ask(self.variants[label], self.neuron)

    def job(self, label: str, run_label: str) -> Job:
        return VariantJob(label, self.plan, self.model_dir.name, self.settings, self.neuron, run_label)

    def record_fields(self) -> dict[str, Any]:
        return {
            "plan": self.plan.to_dict(),
            "settings": {"model": self.model_dir.name, **self.settings.to_dict()},
            "seed": self.settings.seed,
            "target": "neuron" if self.neuron else "cpu",
            "variants": {label: v.config_json() for label, v in self.variants.items()},
        }

    def changed(self, previous: Mapping[str, Any]) -> str | None:
        return _plan_changed(previous, self.plan.to_dict())

    def result(self, rows: list[dict], record: Mapping[str, Any], out_dir: Path) -> SavedRun:
        return SweepResult(frame_from_rows(rows), RunRecord.from_dict(record), out_dir)

    def export_frame(self, result: SavedRun) -> pd.DataFrame:
        return result.frame


class LlmOnRay(_PlanOnRay):
    """A vLLM-backend model's `LlmPlan` on Ray: a variant per max_num_seqs x tensor-parallel degree
    x instances, its loads its points; recorded as any LLM run (kind ``llm``), so it reads back as one.

    The variants are generated and checked here, on the driver; one that cannot run (the backend's
    checks, more tensor-parallel workers than this machine's NUMA nodes on the CPU) is recorded as
    skipped and not sent."""

    key_columns, int_columns = tuple(LLM_KEY_COLUMNS), tuple(LLM_INT_COLUMNS)

    def __init__(self, plan: LlmPlan, model_dir: Path, settings: MeasureSettings, load_timeout_s: float) -> None:
        # run-time: the LLM sweep's record fields come with its runner
        from workbench.measure.llm.run import LlmSweep

        self.record_kind = LlmSweep.kind
        self.plan, self.model_dir, self.settings, self.load_timeout_s = plan, model_dir, settings, load_timeout_s
        base = read_back(model_dir).settings
        self.neuron = base.target != "cpu"
        self.target = base.target
        self.all_variants = plan.variants(base)
        self.variants = {v.label: v for v in self.all_variants if not v.skipped}

    def ask(self, label: str) -> Ask:
        return llm_variant_ask(self.variants[label], self.neuron)

    def job(self, label: str, run_label: str) -> Job:
        return LlmVariantJob(
            label, self.plan, self.model_dir.name, self.settings, self.neuron, run_label, self.load_timeout_s
        )

    def record_fields(self) -> dict[str, Any]:
        from workbench.measure.llm.run import llm_meaning

        return {
            **llm_meaning(self.plan, self.settings, None),
            "plan": self.plan.to_dict(),
            "variants": {v.label: v.to_dict() for v in self.all_variants},
            "skipped": {v.label: v.skipped for v in self.all_variants if v.skipped},
            "target": self.target,
        }

    def changed(self, previous: Mapping[str, Any]) -> str | None:
        if previous.get("settings") != self.settings.to_dict():
            return f"it was measured with other settings ({previous.get('settings')})"
        return _plan_changed(previous, self.plan.to_dict())

    def result(self, rows: list[dict], record: Mapping[str, Any], out_dir: Path) -> SavedRun:
        return LlmSweepResult(llm_frame(rows), RunRecord.from_dict(record), out_dir)

    def export_frame(self, result: SavedRun) -> pd.DataFrame:
        from workbench.measure.llm.run import llm_export_frame

        return llm_export_frame(result.frame, self.plan)


def ray_kind(
    plan: SweepPlan | LlmPlan, model_dir: Path, settings: MeasureSettings, load_timeout_s: float | None = None
) -> RayKind:
    """The one switch: the model's backend says the kind (a token-streaming backend sweeps an
    `LlmPlan`, any other a `SweepPlan`); a plan of the other kind is refused, naming both."""
    if not (model_dir / "config.pbtxt").is_file():
        raise SweepError(f"{model_dir} is not a generated model directory (no config.pbtxt)")
    streams = backend_of_config(read_config(model_dir)).streams_tokens
    if streams and isinstance(plan, LlmPlan):
        from workbench.measure.llm.run import LOAD_TIMEOUT_S

        return LlmOnRay(plan, model_dir, settings, LOAD_TIMEOUT_S if load_timeout_s is None else load_timeout_s)
    if not streams and isinstance(plan, SweepPlan):
        return TensorOnRay(plan, model_dir, settings)
    wanted = "an LlmPlan (workbench.measure.llm)" if streams else "a SweepPlan"
    what = "streams tokens (an LLM sweep)" if streams else "is a tensor model"
    raise SweepError(f"{model_dir.name} {what}: give {wanted}, not a {type(plan).__name__}")


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
    if previous.get("kind") != RUN_KIND and previous.get(CLUSTER_FIELD) != CLUSTER:
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
