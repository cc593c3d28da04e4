"""What the tutorial notebooks share, so each notebook stays a few calls per cell.

* `choose_target`: the notebook asks for a Neuron target; this machine may have the SDK and a
  device, the SDK alone, or neither. The choice says which target to compile for and which to serve
  on, and says plainly when the same steps run on the CPU, so no CPU number passes for a Neuron one.
* `workspace`: a fresh folder per notebook run (``runs/<notebook>/<timestamp>/``) for artifacts,
  the model repository and sweep records; nothing a reader made before is overwritten, and saved
  sweeps stay there to be compared (`saved_runs`, `comparable_pair`).
* `describe_run`: the facts of a sweep that do not vary between runs (checked by nbval), apart from
  the numbers that do.
* `for_neuron_host`: the same model directory as served here, but for the Neuron host, so the
  notebooks can show its config and ``docker run`` even where no Neuron artifact can be made.
* small example pieces a notebook would otherwise define inline: a TensorFlow SavedModel and its
  in-process reference, greedy generation as the reference for the sampling model, the
  allocations that fit a core count, two comparable example sweeps.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import re
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import pandas as pd

from workbench.coremap import Allocation, CoreRange
from workbench.system import (NEURON_TARGETS, MissingSDKError, SystemInfo, TARGET_PACKAGES, detect, install_hint,
                             require_sdk, target_problem, usable_cpu_ids)
from workbench.generate import GenerateSettings
from workbench.measure.results import KEY_COLUMNS, RECORD_FILE, ResultsError, SweepResult, list_runs, load_run
from workbench.measure.settings import MeasureSettings

__all__ = [
    "RUNS_ENV",
    "Workspace",
    "TargetChoice",
    "runs_root",
    "workspace",
    "saved_runs",
    "runs_table",
    "comparable_pair",
    "describe_run",
    "choose_target",
    "for_neuron_host",
    "progress_bar",
    "allocations",
    "tiny_saved_model",
    "saved_model_reference",
    "greedy_generate",
    "make_example_runs",
]

RUNS_ENV = "WORKBENCH_RUNS_DIR"  # where tutorial runs go instead of ./runs (e.g. a shared results folder)
# framework -> (module that must import for any target, the extra that brings it)
_FRAMEWORK_MODULES = {"pytorch": ("torch", None), "tensorflow": ("tensorflow", "tensorflow"),
                      "transformers_neuronx": ("transformers", "transformers")}


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
    stamp = (now or datetime.now(timezone.utc)).strftime("%Y%m%d-%H%M%S")
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
            return load_run(folder).record.get("started") or "", str(folder)
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
            if older.record.get("model") != newer.record.get("model"):
                continue
            if keys & set(map(tuple, older.frame[list(KEY_COLUMNS)].astype(str).values)):
                return older, newer
    return None


def describe_run(run: SweepResult) -> str:
    """What a sweep did, without its timings: status, points, whether every output matched."""
    frame = run.frame
    planned = run.record.get("planned_points", len(frame))
    measured = frame[frame["throughput"].notna()] if "throughput" in frame.columns else frame.iloc[0:0]
    errors = int(frame["error"].notna().sum()) if "error" in frame.columns else 0
    outputs_ok = bool(len(measured)) and bool(measured["outputs_ok"].map(lambda v: str(v).lower() == "true").all())
    failures = int(measured["failures"].fillna(0).astype(int).sum()) if len(measured) else 0
    variants = ", ".join(dict.fromkeys(frame["variant"].astype(str))) if len(frame) else "none"
    return (f"sweep {run.status}: {len(measured)} of {planned} point(s) measured over variants {variants}; "
            f"served outputs {'match' if outputs_ok else 'DO NOT match'} the reference at every point; "
            f"{failures} failed request(s), {errors} point error(s)")


@dataclass(frozen=True)
class TargetChoice:
    """Where a notebook's steps run here. ``compile_target``/``serve_target`` are ``cpu`` or the
    wanted Neuron target; ``framework_ready`` is False when even the CPU path lacks its framework
    (an optional extra), and the notebook then only shows what it would generate."""

    wanted: str
    framework: str
    compile_target: str
    serve_target: str
    framework_ready: bool
    has_device: bool
    missing: tuple[str, ...] = ()
    hint: str = ""
    framework_module: str = ""
    neuron_cores: int | None = None  # this machine's NeuronCores when known (neuron-ls or instance type)

    @property
    def on_neuron(self) -> bool:
        return self.serve_target != "cpu"

    @property
    def message(self) -> str:
        what = f"{self.framework} for {self.wanted}"
        if not self.framework_ready:
            return (f"{self.framework_module} is not installed here ({self.hint}): this notebook shows what it would "
                    f"generate for {self.wanted} (a dry run for another machine) instead of serving a model.")
        if self.on_neuron:
            return f"Neuron SDK and device found: compiling {what} and serving on NeuronCores."
        cpu_numbers = "Every number below is a CPU number, not a Neuron number."
        if self.compile_target != "cpu":
            return (f"Neuron SDK for {self.wanted} found but no Neuron device: compiling {what} here (the artifact "
                    f"runs on a Neuron host) and serving its CPU twin on the CPU. {cpu_numbers}")
        return (f"No Neuron SDK here for {self.wanted} (missing {', '.join(self.missing)}): running the same "
                f"steps with the CPU target. {cpu_numbers} On a Neuron host: {self.hint}.")

    def core_range(self, neuron_range: str | CoreRange, instances: int = 1, *, cpus: int | None = None) -> CoreRange:
        """``neuron_range`` on NeuronCores; on the CPU as many of this machine's cores as the range
        asks for (at least one per instance), so the instances still split them evenly."""
        wanted = CoreRange.parse(neuron_range)
        if self.on_neuron:
            return wanted
        cpus = cpus or len(usable_cpu_ids())
        count = max(instances, min(wanted.size, cpus) // instances * instances)
        return CoreRange(0, count - 1)

    def all_cores(self, *, cpus: int | None = None) -> CoreRange:
        """Every core the serving target has here: all NeuronCores, or all usable CPUs."""
        if self.on_neuron:
            if not self.neuron_cores:
                raise ValueError("the NeuronCore count is unknown here (no neuron-ls): give the core range yourself")
            return CoreRange(0, self.neuron_cores - 1)
        return CoreRange(0, (cpus or len(usable_cpu_ids())) - 1)

    @property
    def tolerances(self) -> dict[str, float]:
        """``rtol``/``atol`` for comparing served with eager outputs. NeuronCore outputs are compared
        more loosely than the CPU's: neuron-cc (Inf1) casts FP32 to BF16 by default (``--fast-math``),
        and neuronx-cc did so for matrix multiplies before Neuron 2.27, which made ``--auto-cast none``
        the default (SDK compiler release notes, neuronx-cc 2.22.12471.0); --auto-cast flags still
        lower precision on request."""
        return {"rtol": 1e-2, "atol": 1e-2} if self.on_neuron else {"rtol": 1e-4, "atol": 1e-5}

    def measure_settings(self, **settings: Any) -> MeasureSettings:
        """`MeasureSettings` for a sweep here: this target's ``tolerances`` and the ``settings`` given."""
        return MeasureSettings(**{**self.tolerances, **settings})

    def servable(self, artifact):
        """The artifact to serve here: the Neuron one on a device, else its CPU twin."""
        if self.on_neuron or artifact.cpu_artifact is None:
            return artifact
        return artifact.cpu_artifact



def _sdk_key(wanted: str, framework: str) -> str:
    if framework == "tensorflow":
        return f"tensorflow-{wanted}"
    if framework == "transformers_neuronx":
        return "transformers_neuronx"
    return wanted


def choose_target(wanted: str, framework: str = "pytorch", *, system: SystemInfo | None = None) -> TargetChoice:
    """Compile for ``wanted`` when its SDK is installed, serve on it when a device is there too;
    otherwise the CPU target for both, with a message that says so."""
    if wanted not in NEURON_TARGETS:
        raise ValueError(f"target {wanted!r}: choose one of {', '.join(NEURON_TARGETS)}")
    if framework not in _FRAMEWORK_MODULES:
        raise ValueError(f"framework {framework!r}: choose one of {', '.join(_FRAMEWORK_MODULES)}")
    if target_problem(framework, wanted):
        raise ValueError(target_problem(framework, wanted))
    system = system or detect()
    module, extra = _FRAMEWORK_MODULES[framework]
    ready = importlib.util.find_spec(module) is not None
    key = _sdk_key(wanted, framework)
    try:
        require_sdk(key, system.packages)
        missing: tuple[str, ...] = ()
    except MissingSDKError as err:
        missing = tuple(err.missing)
    sdk = ready and not missing
    hint = install_hint(extra) if not ready and extra else install_hint(key)
    return TargetChoice(
        wanted=wanted, framework=framework,
        compile_target=wanted if sdk else "cpu",
        serve_target=wanted if sdk and system.has_device else "cpu",
        framework_ready=ready, has_device=system.has_device,
        missing=missing or (() if ready else TARGET_PACKAGES.get(extra or "", ())), hint=hint,
        framework_module=module, neuron_cores=system.neuron_cores,
    )


def for_neuron_host(settings: GenerateSettings, choice: TargetChoice, artifact: Any, *, core_range: str | CoreRange,
                    repository: str | os.PathLike) -> GenerateSettings:
    """``settings`` (what is served here) retargeted to ``choice.wanted`` on NeuronCores ``core_range``,
    written under ``repository``. The Neuron artifact is copied in when it was compiled here; otherwise
    the model refers to the file the Neuron compile will produce (``--for-other-machine``), with its
    tensors spelled out because there is no file here to read them from."""
    target = choice.wanted
    name = Path(settings.triton_model_dir).name if not settings.name else settings.name
    common = dict(triton_model_dir=str(Path(repository) / name), name=None, target=target,
                  neuron_core_range=core_range, cpu_affinity=False)
    if artifact.target == target:
        return dataclasses.replace(settings, compiled_model=str(artifact.path), copy_compiled_model=True, **common)
    if settings.framework == "tensorflow":
        compiled = f"{artifact.name}.{target}.savedmodel"
    elif settings.framework == "transformers_neuronx":
        compiled = Path(artifact.path).name
    else:
        compiled = f"{artifact.name}.{target}.pt"
    tensors = {} if settings.triton_input or settings.framework == "transformers_neuronx" else dict(
        triton_input=list(artifact.spec.inputs), triton_output=list(artifact.spec.outputs))
    return dataclasses.replace(settings, compiled_model=compiled, copy_compiled_model=False, for_other_machine=True,
                               **tensors, **common)


@contextmanager
def progress_bar(description: str) -> Iterator[Callable[[int, int, str], None]]:
    """A ``progress(done, total, message)`` callback drawn as a tqdm bar (a widget in Jupyter)."""
    from tqdm.auto import tqdm

    bar = tqdm(total=1, desc=description)

    def update(done: int, total: int, message: str = "") -> None:
        bar.total, bar.n = max(total, 1), done
        bar.set_postfix_str(message[:60], refresh=False)
        bar.refresh()

    try:
        yield update
    finally:
        bar.close()


def allocations(cores: int) -> tuple[Allocation, ...]:
    """Every INSTANCESxCORES split whose cores divide ``cores`` evenly (``4`` -> 1x1, 2x1, 4x1, 1x2, 2x2, 1x4),
    for a sweep over core allocations."""
    if cores < 1:
        raise ValueError(f"cores must be at least 1, got {cores}")
    return tuple(Allocation(n, c) for c in range(1, cores + 1) for n in range(1, cores // c + 1)
                 if cores % (n * c) == 0)


def tiny_saved_model(path: str | os.PathLike) -> Path:
    """A TF2 SavedModel of upstream's add_sub QA model: inputs ``a``, ``b`` [N,4] FP32 -> ``sum``, ``diff``."""
    import tensorflow as tf

    class AddSub(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="a"),
                                      tf.TensorSpec([None, 4], tf.float32, name="b")])
        def serve(self, a, b):
            return {"sum": a + b, "diff": a - b}

    path = Path(path)
    if path.exists():
        raise FileExistsError(f"{path} already exists; choose a new folder for the SavedModel")
    module = AddSub()
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.serve})
    return path


def saved_model_reference(path: str | os.PathLike, spec: Any, signature: str = "serving_default"):
    """The SavedModel run in-process: numpy inputs in the spec's input order -> outputs in its output order."""
    import tensorflow as tf

    function = tf.saved_model.load(str(path)).signatures[signature]
    inputs = [t.name for t in spec.by_index("input")]
    outputs = [t.name for t in spec.by_index("output")]

    def run(arrays: list[np.ndarray]) -> list[np.ndarray]:
        result = function(**{name: tf.constant(a) for name, a in zip(inputs, arrays)})
        return [result[name].numpy() for name in outputs]

    return run


def greedy_generate(model: Any, prompt_ids: np.ndarray, length: int) -> np.ndarray:
    """``transformers``' greedy generation to exactly ``length`` tokens: what the served sampling model
    must return on the CPU target."""
    import torch

    ids = torch.from_numpy(np.asarray(prompt_ids, dtype=np.int64))
    with torch.inference_mode():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_length=length, min_length=length,
                             do_sample=False, pad_token_id=model.config.pad_token_id)
    return out.numpy()


def runs_table(root: str | os.PathLike | None = None) -> pd.DataFrame:
    """One row per saved sweep under ``root`` (see `saved_runs`), newest first."""
    frames = [list_runs(folder) for folder in sorted({p.parent for p in saved_runs(root)})]
    if not frames:
        return pd.DataFrame(columns=["path", "label", "model", "status", "points", "planned", "started", "ended",
                                     "best_throughput"])
    return pd.concat(frames, ignore_index=True).sort_values("started", ascending=False, ignore_index=True)


def make_example_runs(space: Workspace, *, settings: MeasureSettings | None = None,
                      progress: Callable[[int, int, str], None] | None = None,
                      cancel: threading.Event | None = None) -> tuple[SweepResult, SweepResult]:
    """Two small sweeps to compare when none are saved: the zoo's mlp on one server, the same grid
    (1 instance, batch 1 and 4, concurrency 4) with the dynamic batcher off, then on, both measured
    as ``settings`` say (default: half-second windows, at most 4)."""
    from workbench import zoo
    from workbench.compiler import compile_model
    from workbench.generate import render, write
    from workbench.measure.plan import SweepPlan
    from workbench.measure.sweep import run_sweep
    from workbench.server import TritonServer

    model = zoo.get("mlp")
    artifact = compile_model(model.module, model.example_inputs(2), "cpu", out_dir=space.artifacts, name="mlp",
                             cancel=cancel)
    variants = {"mlp_batching_off": False, "mlp_batching_on": True}
    for name, batching in variants.items():
        write(render(GenerateSettings(
            triton_model_dir=str(space.repository / name), compiled_model=str(artifact.path),
            copy_compiled_model=True, target="cpu", neuron_core_range="0:0", max_batch_size=8,
            enable_dynamic_batching=batching, max_queue_delay_microseconds=500 if batching else None)))
    plan = SweepPlan(batch_sizes=(1, 4), allocations="1x1", concurrency=(4,))
    settings = MeasureSettings(window_s=0.5, max_windows=4) if settings is None else settings
    runs = []
    with TritonServer(space.repository) as server:
        for name in variants:
            server.load(name)
            runs.append(run_sweep(plan, server, space.repository / name, out_dir=space.sweep_dir(name), label=name,
                                  settings=settings, progress=progress, cancel=cancel))
            server.unload(name)
    return runs[0], runs[1]
