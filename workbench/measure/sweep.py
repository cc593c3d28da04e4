"""Sweep batch sizes x core allocations x concurrency on ONE running tritonserver.

Model Analyzer restarts the server for every configuration and learns about a core split that does
not fit only when the model fails to load. Here the whole grid is checked against the core range
before anything runs, each variant is loaded into the same server as a config override (a reload,
never a restart), every point's served outputs are compared with
a reference, and every finished point is appended to disk at once, so a cancelled or crashed sweep
resumes where it stopped instead of measuring again.
"""

from __future__ import annotations

import itertools
import json
import math
import platform
import threading
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Collection, Mapping, Sequence

import numpy as np
from google.protobuf import json_format

from tritonclient.utils import InferenceServerException

from workbench.check import InputMaker, connect, infer, torch_eager
from workbench.compiler.artifact import ArtifactError, load_artifact, read_artifact
from workbench.system import detect, has_neuron_device, installed_versions, usable_cpu_ids
from workbench.generate.config import ModelConfig, check_config, parameters_of, read_config, spec_from_config, to_json
from workbench.coremap import Allocation, CoreRange, CoreRangeError, parse_allocations
from workbench.measure.loadgen import LoadResult, MeasureError, measure
from workbench.measure.perf_analyzer import PerfAnalyzerError, find_perf_analyzer, run_perf_analyzer
from workbench.measure.results import (
    KEY_COLUMNS,
    POINTS_FILE,
    RECORD_FILE,
    SweepResult,
    append_point,
    frame_from_rows,
    load_run,
    read_points,
    write_exports,
    write_record,
)
from workbench.tasks import Cancelled, check_cancel

__all__ = [
    "SweepError",
    "Allocation",
    "Batching",
    "Variant",
    "SweepPlan",
    "parse_allocations",
    "variant_config",
    "RunningServer",
    "eager_reference",
    "plan_variants",
    "check_out_dir",
    "check_settings",
    "run_sweep",
]

# Parameters the sweep itself sets for every variant; a free-form grid may not fight over them.
_VARIANT_PARAMETER = "WORKBENCH_SWEEP_VARIANT"
_CORE_PARAMETERS = ("NEURON_CORE_START_INDEX", "NEURON_CORE_END_INDEX", _VARIANT_PARAMETER)


class SweepError(ValueError):
    """A sweep that cannot run as asked; the message names the bad item."""


def _positive_ints(values: Any, what: str) -> tuple[int, ...]:
    if isinstance(values, (int, str)):
        values = [values]
    out: list[int] = []
    for value in values:
        for part in str(value).split(",") if isinstance(value, str) else [value]:
            try:
                number = int(part)
            except (TypeError, ValueError):
                raise SweepError(f"{what}: {part!r} is not a whole number") from None
            if number < 1:
                raise SweepError(f"{what}: {number} must be at least 1")
            if number in out:
                raise SweepError(f"{what}: {number} is listed twice")
            out.append(number)
    if not out:
        raise SweepError(f"{what}: give at least one value")
    return tuple(out)


@dataclass(frozen=True)
class Batching:
    """A dynamic-batching setting to try. ``enabled=False`` removes the dynamic_batching block;
    an empty enabled one turns the batcher on with Triton's defaults."""

    enabled: bool = True
    preferred_batch_sizes: tuple[int, ...] = ()
    max_queue_delay_us: int | None = None

    def __post_init__(self) -> None:
        sizes = tuple(self.preferred_batch_sizes)
        if sizes:
            sizes = _positive_ints(sizes, "preferred batch sizes")
        object.__setattr__(self, "preferred_batch_sizes", sizes)
        if self.max_queue_delay_us is not None and int(self.max_queue_delay_us) < 0:
            raise SweepError(f"queue delay {self.max_queue_delay_us} us must not be negative")
        if not self.enabled and (sizes or self.max_queue_delay_us is not None):
            raise SweepError("dynamic batching is off: preferred sizes and queue delay do not apply")

    @property
    def label(self) -> str:
        if not self.enabled:
            return "batching off"
        parts = ["dyn"]
        if self.preferred_batch_sizes:
            parts.append("pref=" + "+".join(map(str, self.preferred_batch_sizes)))
        if self.max_queue_delay_us is not None:
            parts.append(f"delay={self.max_queue_delay_us}us")
        return " ".join(parts)

    def apply(self, cfg: ModelConfig) -> None:
        cfg.ClearField("dynamic_batching")
        if not self.enabled:
            return
        cfg.dynamic_batching.SetInParent()
        cfg.dynamic_batching.preferred_batch_size.extend(self.preferred_batch_sizes)
        if self.max_queue_delay_us is not None:
            cfg.dynamic_batching.max_queue_delay_microseconds = int(self.max_queue_delay_us)

    def to_dict(self) -> dict:
        return {"enabled": self.enabled, "preferred_batch_sizes": list(self.preferred_batch_sizes),
                "max_queue_delay_us": self.max_queue_delay_us}

    @classmethod
    def from_dict(cls, data: Mapping) -> "Batching":
        return cls(bool(data["enabled"]), tuple(data.get("preferred_batch_sizes", ())), data.get("max_queue_delay_us"))


def variant_config(
    base: ModelConfig,
    allocation: Allocation,
    core_start: int,
    *,
    batching: Batching | None = None,
    parameters: Mapping[str, str] | None = None,
    max_batch_size: int | None = None,
) -> ModelConfig:
    """The base config with this allocation's instance count and core range end, and optionally
    another dynamic-batching block, max_batch_size and model parameters. Checked like any config."""
    if len(base.instance_group) > 1:
        raise SweepError(f"model {base.name!r} has {len(base.instance_group)} instance groups; "
                         "the sweep sets the count of a single group")
    cfg = ModelConfig()
    cfg.CopyFrom(base)
    group = cfg.instance_group[0] if cfg.instance_group else cfg.instance_group.add(kind="KIND_MODEL")
    group.count = allocation.instances
    for key, value in CoreRange(core_start, core_start + allocation.cores - 1).parameters().items():
        cfg.parameters[key].string_value = value
    if max_batch_size is not None:
        cfg.max_batch_size = int(max_batch_size)
    if batching is not None:
        batching.apply(cfg)
    for key, value in (parameters or {}).items():
        cfg.parameters[key].string_value = str(value)
    try:
        return check_config(cfg)
    except ValueError as err:
        raise SweepError(f"variant {allocation.label}: {err}") from None


@dataclass(frozen=True)
class Variant:
    """One model configuration of the sweep: loaded once, then measured at every batch size and
    concurrency."""

    allocation: Allocation
    core_start: int
    batching: Batching | None
    parameters: tuple[tuple[str, str], ...]
    config: ModelConfig = field(compare=False, repr=False)

    @property
    def core_end(self) -> int:
        return self.core_start + self.allocation.cores - 1

    @property
    def label(self) -> str:
        parts = [self.allocation.label]
        if self.batching is not None:
            parts.append(self.batching.label)
        parts += [f"{k}={v}" for k, v in self.parameters]
        return " ".join(parts)

    def columns(self) -> dict:
        """The variant's identity as table columns."""
        return {
            "variant": self.label,
            "allocation": self.allocation.label,
            "instances": self.allocation.instances,
            "cores_per_instance": self.allocation.cores_per_instance,
            "core_start": self.core_start,
            "core_end": self.core_end,
            "batching": self.batching.label if self.batching is not None else "as configured",
            "parameters": " ".join(f"{k}={v}" for k, v in self.parameters),
        }

    def config_json(self) -> dict:
        return json.loads(to_json(self.config))


@dataclass(frozen=True)
class SweepPlan:
    """The grid: batch sizes x allocations x concurrency, optionally x dynamic-batching settings
    x free-form model parameter values (``{"NUM_THREADS_PER_CORE": ["1", "2"]}``).

    ``batch_sizes`` are the batch of each request the load generator sends. ``core_range`` (``"0:1"``)
    defaults to the base config's NEURON_CORE_START_INDEX..END_INDEX. ``max_batch_size`` defaults
    to the base config's, raised to the largest batch size when that is smaller.
    """

    batch_sizes: tuple[int, ...]
    allocations: tuple[Allocation, ...]
    concurrency: tuple[int, ...] = (1,)
    core_range: CoreRange | None = None
    batching: tuple[Batching | None, ...] = (None,)
    parameters: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    max_batch_size: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "batch_sizes", _positive_ints(self.batch_sizes, "batch sizes"))
        object.__setattr__(self, "concurrency", _positive_ints(self.concurrency, "concurrency"))
        try:
            object.__setattr__(self, "allocations", parse_allocations(self.allocations))
            if self.core_range is not None:
                object.__setattr__(self, "core_range", CoreRange.parse(self.core_range))
        except CoreRangeError as err:
            raise SweepError(str(err)) from None
        batching = tuple(self.batching) or (None,)
        if len(set(batching)) != len(batching):
            raise SweepError("a dynamic-batching setting is listed twice")
        object.__setattr__(self, "batching", batching)
        grid: dict[str, tuple[str, ...]] = {}
        for key, values in dict(self.parameters).items():
            if key in _CORE_PARAMETERS:
                raise SweepError(f"parameter {key} is set by the sweep for each variant (core_range and allocations)")
            values = (values,) if isinstance(values, (str, int, float)) else tuple(values)
            values = tuple(str(v) for v in values)
            if not values:
                raise SweepError(f"parameter {key}: give at least one value")
            if len(set(values)) != len(values):
                raise SweepError(f"parameter {key}: a value is listed twice in {list(values)}")
            grid[str(key)] = values
        object.__setattr__(self, "parameters", grid)
        if self.max_batch_size is not None and int(self.max_batch_size) < max(self.batch_sizes):
            raise SweepError(f"max_batch_size {self.max_batch_size} is smaller than batch size {max(self.batch_sizes)}")

    @property
    def size(self) -> int:
        """Number of points (variants x batch sizes x concurrency)."""
        variants = len(self.allocations) * len(self.batching)
        for values in self.parameters.values():
            variants *= len(values)
        return variants * len(self.batch_sizes) * len(self.concurrency)

    def resolve_core_range(self, base: ModelConfig) -> CoreRange:
        if self.core_range is not None:
            return self.core_range
        try:
            core_range = CoreRange.from_parameters(parameters_of(base))
        except CoreRangeError as err:
            raise SweepError(f"model {base.name!r}: {err}") from None
        if core_range is None:
            raise SweepError(f"model {base.name!r} has no NEURON_CORE_START_INDEX/END_INDEX parameters; "
                             "give the sweep a core range such as 0:1")
        return core_range

    def variants(self, base: ModelConfig, *, available_cores: Collection[int] | None = None) -> list[Variant]:
        """Every variant's config, or one SweepError naming every allocation that does not fit.

        ``available_cores`` (CPU targets: the CPUs this process may use) also bounds the range.
        """
        core_range = self.resolve_core_range(base)
        start = core_range.start
        problems = [
            f"{a.label} needs {a.cores} core(s) but core range {core_range} has {core_range.size}"
            for a in self.allocations if a.cores > core_range.size
        ]
        missing = core_range.missing_from(available_cores) if available_cores is not None else []
        if missing:
            problems.append(f"core range {core_range} includes CPU(s) {missing} that this machine does not let "
                            f"the server use (usable: {sorted(available_cores)})")
        if base.max_batch_size == 0:
            # Its dims already include the batch dim: Triton would add a second one.
            unbatched = f"model {base.name!r} has max_batch_size 0 (its dims include the batch dim)"
            if self.max_batch_size is not None:
                problems.append(f"{unbatched}: max_batch_size {self.max_batch_size} cannot be set by the sweep; "
                                "regenerate the model with max_batch_size > 0")
            if max(self.batch_sizes) > 1:
                problems.append(f"{unbatched}, so batch sizes {list(self.batch_sizes)} cannot be sent; use batch size 1")
            for batching in self.batching:
                if batching is not None and batching.enabled:
                    problems.append(f"{batching.label}: dynamic batching needs max_batch_size > 0; {unbatched}")
        if problems:
            raise SweepError("cannot run this sweep: " + "; ".join(problems))
        max_batch = self.max_batch_size
        if max_batch is None and 0 < base.max_batch_size < max(self.batch_sizes):
            max_batch = max(self.batch_sizes)
        keys = list(self.parameters)
        out = []
        for allocation, batching, values in itertools.product(
            self.allocations, self.batching, itertools.product(*self.parameters.values())
        ):
            params = tuple(zip(keys, values))
            cfg = variant_config(base, allocation, start, batching=batching, parameters=dict(params),
                                 max_batch_size=max_batch)
            variant = Variant(allocation, start, batching, params, cfg)
            # A change of instance count alone is applied by Triton in place, and the Python backend
            # then hands the new instances the OLD config (stale count and core range). A parameter
            # naming the variant makes every switch a full reload, so model.py sees this config.
            cfg.parameters[_VARIANT_PARAMETER].string_value = variant.label
            out.append(variant)
        return out

    def to_dict(self) -> dict:
        return {
            "batch_sizes": list(self.batch_sizes),
            "allocations": [a.label for a in self.allocations],
            "concurrency": list(self.concurrency),
            "core_range": self.core_range.to_list() if self.core_range else None,
            "batching": [b.to_dict() if b is not None else None for b in self.batching],
            "parameters": {k: list(v) for k, v in self.parameters.items()},
            "max_batch_size": self.max_batch_size,
        }

    @classmethod
    def from_dict(cls, data: Mapping) -> "SweepPlan":
        return cls(
            batch_sizes=tuple(data["batch_sizes"]),
            allocations=tuple(data["allocations"]),
            concurrency=tuple(data["concurrency"]),
            core_range=data.get("core_range") or None,
            batching=tuple(Batching.from_dict(b) if b is not None else None for b in data.get("batching", [None])),
            parameters=data.get("parameters", {}),
            max_batch_size=data.get("max_batch_size"),
        )


# ---------------------------------------------------------------------------------------------
# Running a sweep

Eager = Callable[[list[np.ndarray]], list[np.ndarray]]
# Settings that change what a number means: a resumed run must use the same ones.
ENGINES = ("workbench", "perf_analyzer")
_SETTINGS_THAT_MUST_MATCH = ("model", "engine", "protocol", "window_s", "stability", "stable_windows", "max_windows",
                             "warmup_requests", "seed", "rtol", "atol")
_RECORD_PACKAGES = ("triton-neuron-workbench", "numpy", "pandas", "torch", "tritonclient", "protobuf",
                    "matplotlib", "nvidia-pytriton")


class RunningServer:
    """A tritonserver someone else started (``--url``): the few calls a sweep makes, through
    tritonclient. It must run with ``--model-control-mode=explicit`` so variants can be loaded."""

    def __init__(self, url: str, protocol: str = "grpc") -> None:
        if protocol not in ("grpc", "http"):
            raise SweepError(f"protocol must be grpc or http, got {protocol!r}")
        self.url, self.protocol = url, protocol
        if protocol == "grpc":
            import tritonclient.grpc as module
        else:
            import tritonclient.http as module
        self._client = module.InferenceServerClient(url=url)
        self._json = {"as_json": True} if protocol == "grpc" else {}

    @property
    def grpc_url(self) -> str:
        return self._endpoint("grpc")

    @property
    def http_url(self) -> str:
        return self._endpoint("http")

    def _endpoint(self, protocol: str) -> str:
        if protocol != self.protocol:
            raise SweepError(f"the server at {self.url} was given as {self.protocol}; measure with protocol={self.protocol!r}")
        return self.url

    @property
    def version(self) -> str:
        return str(self._client.get_server_metadata(**self._json)["version"])

    def load(self, name: str, config: ModelConfig | None = None) -> None:
        self._client.load_model(name, config=None if config is None else to_json(config))

    def model_config(self, name: str, *, as_proto: bool = False) -> Any:
        data = self._client.get_model_config(name, **self._json)
        data = data.get("config", data)
        if not as_proto:
            return data
        return json_format.ParseDict(data, ModelConfig(), ignore_unknown_fields=True)

    def close(self) -> None:
        self._client.close()


def eager_reference(model_dir: str | Path) -> Eager:
    """In-process outputs for a generated model directory: its COMPILED_MODEL loaded on the CPU
    (a Neuron artifact's CPU twin when there is no Neuron device), run eagerly on numpy inputs."""
    model_dir = Path(model_dir)
    params = parameters_of(read_config(model_dir))
    compiled = params.get("COMPILED_MODEL", "")
    if not compiled:
        raise SweepError(f"{model_dir}/config.pbtxt has no COMPILED_MODEL; pass reference= to check outputs")
    path = Path(compiled) if Path(compiled).is_absolute() else model_dir / compiled
    if params.get("WORKBENCH_FRAMEWORK", "pytorch") != "pytorch":
        raise SweepError(f"{model_dir}: only PyTorch models get an automatic reference; pass reference=")
    try:
        artifact = read_artifact(path)
    except ArtifactError as err:
        raise SweepError(f"{model_dir}: {err}; pass reference= (a function from inputs to outputs)") from None
    if not artifact.runs_on_cpu and artifact.cpu_artifact is not None and not has_neuron_device():
        artifact = artifact.cpu_artifact
    try:
        return torch_eager(load_artifact(artifact))
    except ArtifactError as err:
        raise SweepError(f"{model_dir}: cannot build a reference: {err}") from None


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _machine() -> dict:
    info = detect()
    return {"cpu_model": info.cpu_model, "cpu_count": info.cpu_count, "usable_cpus": info.usable_cpus,
            "neuron_devices": info.neuron_devices, "neuron_cores": info.neuron_cores,
            "python": platform.python_version(), "platform": platform.platform()}


def _point_row(variant: Variant, batch_size: int, concurrency: int) -> dict:
    return {**variant.columns(), "batch_size": batch_size, "concurrency": concurrency}


def _key(row: Mapping) -> tuple:
    return tuple(row[k] for k in KEY_COLUMNS)


def _ms(value_us: float | None) -> float:
    return float(value_us) / 1000.0 if value_us is not None else math.nan


def _measured_row(result: LoadResult, max_abs_diff: float) -> dict:
    server = result.server
    return {
        "throughput": result.throughput,
        "p50_ms": _ms(result.latency["p50"]), "p90_ms": _ms(result.latency["p90"]),
        "p95_ms": _ms(result.latency["p95"]), "p99_ms": _ms(result.latency["p99"]),
        "mean_ms": _ms(result.latency["avg"]),
        "stable": bool(result.stable), "windows": len(result.windows), "requests": result.requests,
        "failures": result.failed,
        "outputs_ok": result.checked > 0 and result.check_failures == 0,
        "max_abs_diff": max_abs_diff,
        "queue_ms": _ms(server.queue_us) if server else math.nan,
        "compute_input_ms": _ms(server.compute_input_us) if server else math.nan,
        "compute_infer_ms": _ms(server.compute_infer_us) if server else math.nan,
        "compute_output_ms": _ms(server.compute_output_us) if server else math.nan,
        "overhead_ms": _ms(server.overhead_us) if server else math.nan,
        "avg_batch": server.avg_batch if server else math.nan,
        "error": None,
        "measured_at": _now(),
        "warnings": " | ".join(result.warnings),
    }


class _OutputCheck:
    """Compares every checked response with the reference outputs; keeps the largest difference."""

    def __init__(self, expected: Mapping[str, np.ndarray], rtol: float, atol: float) -> None:
        self.expected, self.rtol, self.atol = expected, rtol, atol
        self.max_abs_diff = 0.0

    def __call__(self, outputs: Mapping[str, np.ndarray]) -> bool:
        ok = True
        for name, want in self.expected.items():
            got = outputs.get(name)
            if got is None or got.shape != want.shape:
                return False
            if want.dtype.kind in "OSU":  # strings: equal or not
                ok &= bool(np.array_equal(got, want))
                continue
            if got.size:
                diff = float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64))))
                self.max_abs_diff = max(self.max_abs_diff, diff)
            ok &= bool(np.allclose(got, want, rtol=self.rtol, atol=self.atol))
        return ok


def check_settings(*, protocol="grpc", window_s=1.0, stability=0.10, stable_windows=3, max_windows=10,
                   warmup_requests=None, rtol=1e-4, atol=1e-5) -> None:
    """Measurement settings that would fail every point are refused once, before anything starts."""
    problems = []
    if protocol not in ("grpc", "http"):
        problems.append(f"protocol {protocol!r} is not grpc or http")
    for name, value in (("window_s", window_s), ("stability", stability)):
        if not isinstance(value, (int, float)) or not value > 0:
            problems.append(f"{name} must be a positive number, got {value!r}")
    for name, value in (("rtol", rtol), ("atol", atol)):
        if not isinstance(value, (int, float)) or value < 0:
            problems.append(f"{name} must be >= 0, got {value!r}")
    if not isinstance(stable_windows, int) or stable_windows < 1:
        problems.append(f"stable_windows must be a whole number >= 1, got {stable_windows!r}")
    elif not isinstance(max_windows, int) or max_windows < stable_windows:
        problems.append(f"max_windows must be a whole number >= stable_windows ({stable_windows}), got {max_windows!r}")
    if warmup_requests is not None and (not isinstance(warmup_requests, int) or warmup_requests < 0):
        problems.append(f"warmup_requests must be a whole number >= 0, got {warmup_requests!r}")
    if problems:
        raise SweepError("; ".join(problems))


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


def _open_run(out_dir: Path, settings: dict, resume: bool) -> tuple[dict | None, list[dict]]:
    """The earlier record and rows in ``out_dir`` when resuming; refuse to mix runs or overwrite one."""
    if not check_out_dir(out_dir, resume):
        return None, []
    previous = load_run(out_dir)
    old = previous.record.get("settings", {})
    different = [f"{key} {old.get(key)!r} -> {settings[key]!r}" for key in _SETTINGS_THAT_MUST_MATCH
                 if key in old and old.get(key) != settings[key]]
    if different:
        raise SweepError(f"cannot resume the run in {out_dir} with other settings ({'; '.join(different)}); "
                         "use the same settings or another folder")
    return previous.record, read_points(out_dir / POINTS_FILE)


def plan_variants(plan: SweepPlan, base: ModelConfig) -> list[Variant]:
    """``plan.variants`` bounded by this machine's cores when the model runs on the CPU (the server
    is local), so a range model.py could not pin to is refused before anything starts."""
    cpu_target = parameters_of(base).get("WORKBENCH_TARGET") == "cpu"
    return plan.variants(base, available_cores=usable_cpu_ids() if cpu_target else None)


def run_sweep(
    plan: SweepPlan,
    server: Any,
    model: str | Path,
    *,
    out_dir: str | Path,
    reference: Eager | None = None,
    inputs: InputMaker | None = None,
    engine: str = "workbench",
    perf_analyzer: str | Sequence[str] | None = None,
    protocol: str = "grpc",
    window_s: float = 1.0,
    stability: float = 0.10,
    stable_windows: int = 3,
    max_windows: int = 10,
    warmup_requests: int | None = None,
    seed: int = 0,
    rtol: float = 1e-4,
    atol: float = 1e-5,
    resume: bool = False,
    label: str | None = None,
    restore: bool = True,
    progress: Callable[[int, int, str], None] | None = None,
    cancel: threading.Event | None = None,
) -> SweepResult:
    """Measure every point of ``plan`` on ``server`` (a running `TritonServer` or `RunningServer`).

    ``model``: a generated model directory inside the server's repository, or the name of a
    model the server has loaded. Each variant is loaded as a config override (no restart); at each
    point seeded inputs of that batch size are sent and every checked response is compared with
    ``reference(inputs)`` (default: the directory's compiled model run in-process). ``inputs(batch,
    seed=...)`` makes valid inputs where random ones are not (token ids, masks: e.g. a zoo model's
    ``example_inputs``); the default draws them from the config's spec. ``engine="perf_analyzer"``
    measures each point with Triton's perf_analyzer (``perf_analyzer``: its path or command, else
    ``$PERF_ANALYZER`` or PATH) instead of the built-in load generator, into the same columns;
    outputs are then checked with one request per point before it runs. Rows are
    appended to ``out_dir`` as they are measured; with ``resume`` the points already there are kept,
    not measured again. Cancelling returns the partial result (status ``cancelled``). At the end
    the model is loaded again with its own config (``restore=False`` skips that, e.g. when the
    server is stopped right after).
    """
    out_dir = Path(out_dir)
    check_settings(protocol=protocol, window_s=window_s, stability=stability, stable_windows=stable_windows,
                    max_windows=max_windows, warmup_requests=warmup_requests, rtol=rtol, atol=atol)
    check_out_dir(out_dir, resume)
    model_dir = Path(model) if Path(model).is_dir() else None
    if model_dir is not None:
        base = read_config(model_dir)
        name = base.name or model_dir.name
        repository = getattr(server, "model_repository", None)  # known for a server we started
        if repository is not None and model_dir.resolve().parent != Path(repository).resolve():
            raise SweepError(f"{model_dir} is not in the server's model repository {repository}; the server "
                             f"would load its own {name!r}. Start the server on {model_dir.resolve().parent}")
    else:
        name = str(model)
        try:
            base = server.model_config(name, as_proto=True)
        except Exception as err:
            raise SweepError(f"model {name!r} is not loaded on the server ({err}); load it or give its directory") from None
    if reference is None:
        if model_dir is None:
            raise SweepError("outputs are checked at every point: pass reference= (inputs -> outputs) "
                             "or give the model directory")
        reference = eager_reference(model_dir)
    spec = spec_from_config(base)
    variants = plan_variants(plan, base)
    url = server.grpc_url if protocol == "grpc" else server.http_url
    if engine not in ENGINES:
        raise SweepError(f"engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    if engine == "perf_analyzer":
        find_perf_analyzer(perf_analyzer)  # not found: say so before anything is loaded
    settings = {"model": name, "engine": engine, "protocol": protocol, "window_s": window_s, "stability": stability,
                "stable_windows": stable_windows, "max_windows": max_windows,
                "warmup_requests": warmup_requests, "seed": seed, "rtol": rtol, "atol": atol}
    measure_args = dict(protocol=protocol, window_s=window_s, stability=stability, stable_windows=stable_windows,
                        max_windows=max_windows, warmup_requests=warmup_requests, seed=seed)
    if engine == "perf_analyzer":
        measure_args = {"perf_analyzer": perf_analyzer, **measure_args}
    out_dir.mkdir(parents=True, exist_ok=True)
    previous, rows = _open_run(out_dir, settings, resume)
    done = {_key(r) for r in rows if not r.get("error")}
    rows = [r for r in rows if _key(r) in done]  # failed points are measured again

    record = dict(previous or {})
    record.update({
        "label": label or record.get("label") or out_dir.name,
        "model": name,
        "model_dir": str(model_dir.resolve()) if model_dir else None,
        "started": record.get("started") or _now(),
        "ended": None,
        "status": "running",
        "plan": plan.to_dict(),
        "planned_points": plan.size,
        "settings": settings,
        "seed": seed,
        "base_config": json.loads(to_json(base)),
        "variants": {**record.get("variants", {}), **{v.label: v.config_json() for v in variants}},
        "server_version": server.version,
        "url": url,
        "machine": _machine(),
        "packages": installed_versions(_RECORD_PACKAGES),
    })
    sessions = list(record.get("sessions", []))
    session = {"started": _now(), "ended": None, "status": "running", "measured": 0, "reused": len(rows)}
    record["sessions"] = sessions + [session]
    write_record(out_dir, record)

    def save() -> SweepResult:
        result = SweepResult(frame_from_rows(rows), record, out_dir)
        write_record(out_dir, record)
        write_exports(out_dir, result.frame, record)
        return result

    total = plan.size
    count = 0

    def report(message: str) -> None:
        if progress is not None:
            progress(count, total, message)

    status = "failed"
    loaded = False
    try:
        for variant in variants:
            points = [(b, c) for b in plan.batch_sizes for c in plan.concurrency]
            todo = [(b, c) for b, c in points if _key(_point_row(variant, b, c)) not in done]
            count += len(points) - len(todo)
            if not todo:
                continue
            check_cancel(cancel)
            report(f"loading {variant.label}")
            try:
                server.load(name, config=variant.config)
                loaded = True
                load_error = None
            except Exception as err:  # Triton refused this variant: record it and go on with the rest
                if not getattr(server, "running", True):
                    raise
                load_error = f"load failed: {err}"
            for batch_size, concurrency in todo:
                check_cancel(cancel)
                row = _point_row(variant, batch_size, concurrency)
                where = f"{variant.label} batch {batch_size} concurrency {concurrency}"
                if load_error is None:
                    row.update(_measure_point(url, name, spec, base, reference, inputs, batch_size, concurrency,
                                              seed, rtol, atol, measure_args, count, total, where, progress, cancel))
                else:
                    row.update(error=load_error, measured_at=_now())
                append_point(out_dir / POINTS_FILE, row)
                rows.append(row)
                count += 1
                session["measured"] += 1
                save()
                report(f"{where}: " + (f"{row['throughput']:.1f} infer/s, p99 {row['p99_ms']:.2f} ms"
                                       if not row.get("error") else row["error"]))
        status = "complete"
    except Cancelled:
        status = "cancelled"
    finally:
        record["status"] = session["status"] = status
        record["ended"] = session["ended"] = _now()
        result = save()
        if restore and loaded and getattr(server, "running", True):
            try:
                server.load(name, config=base)  # leave the model as the user configured it
            except Exception:
                pass  # the sweep's own outcome (and its error, if any) is what the caller needs
    return result


def _measure_point(url, name, spec, base, reference, make_inputs, batch_size, concurrency, seed, rtol, atol,
                   measure_args, count, total, where, progress, cancel) -> dict:
    """One point: seeded inputs, their reference outputs, then the load generator (which checks
    the warm-up responses and the first response of every window against them)."""
    batch = batch_size if base.max_batch_size > 0 else None
    inputs = ([np.asarray(a) for a in make_inputs(batch_size, seed=seed)] if make_inputs
              else spec.example_inputs(batch, seed=seed))
    expected = dict(zip([t.name for t in spec.by_index("output")], reference(inputs)))
    checker = _OutputCheck(expected, rtol, atol)
    names = [t.name for t in spec.by_index("input")]

    def inner(done: int, steps: int, message: str) -> None:
        if progress is not None:
            progress(count, total, f"{where}: {message}")

    if "perf_analyzer" in measure_args:
        return _perf_analyzer_point(url, name, spec, dict(zip(names, inputs)), checker, batch_size, concurrency,
                                    base.max_batch_size > 0, measure_args, inner, cancel)
    try:
        result = measure(url, name, dict(zip(names, inputs)), batch_size=batch_size, concurrency=concurrency,
                         check=checker, progress=inner, cancel=cancel, **measure_args)
    except MeasureError as err:
        return {"error": f"measure failed: {err}", "measured_at": _now()}
    return _measured_row(result, checker.max_abs_diff)


def _perf_analyzer_point(url, name, spec, inputs, checker, batch_size, concurrency, batched, measure_args,
                         progress, cancel) -> dict:
    """The same point measured by perf_analyzer: one checked request first (perf_analyzer only
    validates against files it is given), then its run with the same values, read into our columns."""
    args = dict(measure_args)
    command = args.pop("perf_analyzer")
    args.pop("stable_windows")  # perf_analyzer's is fixed at 3
    args.pop("seed")
    args["warmup_requests"] = args["warmup_requests"] or 0
    try:
        connection = connect(url, args["protocol"])
        try:
            outputs = infer(connection, name, spec, list(inputs.values()))
        finally:
            connection[1].close()
        outputs_ok = checker(dict(zip([t.name for t in spec.by_index("output")], outputs)))
        samples = {k: (v[0] if batched else v) for k, v in inputs.items()}  # perf_analyzer batches samples
        (row,) = run_perf_analyzer(url, name, command=command, inputs=samples, batch_size=batch_size,
                                   concurrency=concurrency, progress=progress, cancel=cancel, **args)
    except (PerfAnalyzerError, InferenceServerException) as err:
        return {"error": f"perf_analyzer failed: {err}", "measured_at": _now()}
    us = lambda key: row.get(key, math.nan)  # noqa: E731
    return {
        "throughput": row["throughput"],
        "p50_ms": _ms(us("p50_us")), "p90_ms": _ms(us("p90_us")), "p95_ms": _ms(us("p95_us")),
        "p99_ms": _ms(us("p99_us")), "mean_ms": _ms(us("latency_avg_us")),
        "stable": True,  # perf_analyzer fails a point it cannot stabilise
        "windows": math.nan, "requests": math.nan, "failures": 0,
        "outputs_ok": outputs_ok,
        "max_abs_diff": checker.max_abs_diff,
        "queue_ms": _ms(us("server_queue_us")), "compute_input_ms": _ms(us("server_compute_input_us")),
        "compute_infer_ms": _ms(us("server_compute_infer_us")),
        "compute_output_ms": _ms(us("server_compute_output_us")),
        "overhead_ms": math.nan, "avg_batch": math.nan,
        "error": None, "measured_at": _now(), "warnings": "measured by perf_analyzer",
    }
