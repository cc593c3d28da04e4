"""One variant measured as a Ray task on a node: what it asks of Ray (``neuron_cores`` for a Neuron
target, CPUs for the CPU target), where it was placed (on Neuron, NEURON_RT_VISIBLE_CORES from the
cores Ray assigned), the model folder shipped to it (an LLM's weights and tokenizer folders with it,
model.json pointed at them there), its own tritonserver in a node-local folder, the variant's points
measured by the one-server runner beside that server, and the rows returned. A tracker actor beside
the driver hears of every start and of progress; the folders of tasks killed mid-variant are removed.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import tarfile
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol, TypeVar

from workbench.coremap import CoreRange
from workbench.files import strict_json
from workbench.generate.backends import read_back
from workbench.generate.config import parameters_of
from workbench.generate.vllm_backend.engine_settings import VllmSettings
from workbench.generate.vllm_backend.readback import engine_args_file
from workbench.measure.engine.measure_settings import MeasureSettings
from workbench.measure.grid.plan import SweepError, SweepPlan, Variant
from workbench.measure.llm.plan import LlmPlan, LlmVariant
from workbench.measure.llm.rows import LLM_INT_COLUMNS, LLM_KEY_COLUMNS
from workbench.measure.store.results import (
    POINTS_FILE,
    SavedRun,
    read_points,
)
from workbench.measure.sweep.resume import unique_rows
from workbench.releases import RAY_VERSION
from workbench.server.protocol import Server

__all__ = [
    "Ask",
    "Job",
    "LlmVariantJob",
    "MAX_RETRIES",
    "NEURON_CORES",
    "NODE_COLUMN",
    "Placement",
    "RAY_MISSING",
    "ShippedModel",
    "StartTracker",
    "TaskOutcome",
    "TaskProgress",
    "VISIBLE_CORES",
    "VariantJob",
    "WORK_PREFIX",
    "engine_folders",
    "import_ray",
    "measure_variant",
    "pack_model",
    "place",
    "placed_plan",
    "too_big_for_every_node",
    "variant_ask",
]


RAY_MISSING = f"Ray is not installed here: pip install 'triton-neuron-workbench[ray]' (ray=={RAY_VERSION})"
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

    def sweep(
        self, server: Server, model_dir: Path, out_dir: Path, placement: Placement, progress: Progress
    ) -> SavedRun:
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

    def sweep(
        self, server: Server, model_dir: Path, out_dir: Path, placement: Placement, progress: Progress
    ) -> SavedRun:
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

    def sweep(
        self, server: Server, model_dir: Path, out_dir: Path, placement: Placement, progress: Progress
    ) -> SavedRun:
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
    mid-variant), their servers' run folders with them (made inside: `measure_variant`), and end
    a server still running from one; returns the pids whose folders are still there, their workers
    alive."""
    alive = []
    for folder in Path(tempfile.gettempdir()).glob(f"{WORK_PREFIX}*-*"):
        pid = folder.name[len(WORK_PREFIX) :].split("-", 1)[0]
        if not pid.isdigit():
            continue
        if Path(f"/proc/{pid}").exists():
            alive.append(int(pid))
        else:
            _end_servers_in(folder)
            shutil.rmtree(folder, ignore_errors=True)
    return alive


def _end_servers_in(folder: Path) -> None:
    """End a tritonserver serving a repository in ``folder``, its group and shared memory with it:
    a worker killed between starting its server and that server's guard leaves it running."""
    from workbench.server import guard

    repository = f"--model-repository={folder}/".encode()
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            args = cmdline.read_bytes().split(b"\0")
            pid = int(cmdline.parent.name)
            if not any(arg.startswith(repository) for arg in args) or os.getpgid(pid) != pid:
                continue
        except (OSError, ValueError):
            continue
        prefix = next((a.split(b"shm-region-prefix-name=", 1)[1].decode() for a in args if b"shm-region" in a), "")
        guard.take_down(pid, grace=3.0)
        guard.remove_shm_regions(prefix)


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
