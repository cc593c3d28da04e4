"""One load level, planned and checked before anything is sent: the `LoadPlan`, the model's
interface as the server reports it, and the user's inputs fitted to that interface.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from workbench.measure.engine.measure_settings import MeasureError, MeasureSettings
from workbench.spec import SpecError, numpy_dtype

__all__ = ["LoadPlan", "build_plan", "Tensor", "Interface", "interface_from", "input_arrays", "MAX_OUTSTANDING"]

# Rate mode: most requests in flight at once (perf_analyzer bounds them by its thread count).
MAX_OUTSTANDING = 1024
# Request rates a sender can keep: a request per 1000 s at the slowest, 100000/s at the fastest.
MIN_REQUEST_RATE, MAX_REQUEST_RATE = 0.001, 100_000.0

_DISTRIBUTIONS = ("constant", "poisson")


@dataclass(frozen=True)
class LoadPlan:
    """Everything the senders and the engine need to know about one load level, resolved:
    the settings' windows, limits and seed, the load, a warm-up count and the sending processes."""

    url: str
    model: str
    version: str
    protocol: str
    batch_size: int
    concurrency: int | None
    request_rate: float | None
    distribution: str
    seed: int
    warmup_requests: int
    window_s: float
    stability: float
    stable_windows: int
    max_windows: int
    percentile: float | None
    timeout_s: float
    time_limit_s: float | None = None
    min_latencies: int = 0
    processes: int = 1


def build_plan(
    url: str,
    model: str,
    settings: MeasureSettings,
    *,
    batch_size: int,
    concurrency: int | None,
    request_rate: float | None,
    distribution: str,
    percentile: float | None,
    model_version: str,
    timeout_s: float,
) -> LoadPlan:
    """The load level asked for, checked (MeasureError names the bad argument), with ``settings``'
    windows and a warm-up count resolved for this load."""
    if not isinstance(model, str) or not model.strip():
        raise MeasureError(f"model must be a model name, got {model!r}")
    if not isinstance(settings, MeasureSettings):
        raise MeasureError(f"settings must be a MeasureSettings, got {type(settings).__name__}")
    url = str(url)
    for scheme in ("http://", "https://", "grpc://"):
        url = url.removeprefix(scheme)
    url = url.rstrip("/")
    if ":" not in url:
        raise MeasureError(f"url {url!r} needs host:port (e.g. 127.0.0.1:8001 for gRPC, :8000 for HTTP)")

    def whole(name, value, low):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
            raise MeasureError(f"{name} must be an integer >= {low}, got {value!r}")
        return int(value)

    def positive(name, value):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 or not math.isfinite(value):
            raise MeasureError(f"{name} must be a positive number, got {value!r}")
        return float(value)

    batch_size = whole("batch_size", batch_size, 1)
    if request_rate is not None and concurrency is not None:
        raise MeasureError("give concurrency or request_rate, not both")
    if request_rate is not None:
        request_rate = positive("request_rate", request_rate)
        if not MIN_REQUEST_RATE <= request_rate <= MAX_REQUEST_RATE:
            raise MeasureError(
                f"request_rate must be between {MIN_REQUEST_RATE:g} and {MAX_REQUEST_RATE:g} "
                f"requests/s, got {request_rate:g}"
            )
        if distribution not in _DISTRIBUTIONS:
            raise MeasureError(f"distribution {distribution!r} is not one of {', '.join(_DISTRIBUTIONS)}")
    else:
        concurrency = whole("concurrency", 1 if concurrency is None else concurrency, 1)
    if percentile is not None and (
        isinstance(percentile, bool) or not isinstance(percentile, (int, float)) or not 0 < percentile <= 100
    ):
        raise MeasureError(f"percentile must be in (0, 100], got {percentile!r}")
    warmup_requests = settings.warmup_requests
    if warmup_requests is None:
        # about a quarter second of traffic, at least 20 requests, at most 1000 (an unreachable rate)
        if concurrency is not None:
            warmup_requests = max(20, 2 * concurrency)
        else:
            assert request_rate is not None  # one of the two: checked above
            warmup_requests = max(20, min(1000, int(request_rate / 4)))
    timeout_s = positive("timeout_s", timeout_s)
    s = settings
    if concurrency is None:
        processes = 1  # one schedule: its send times are only exact from one event loop
    elif s.processes is not None:
        processes = min(s.processes, concurrency)
    else:
        # circle: slots imports this module; system only for the process count
        from workbench.measure.engine.loadgen.slots import auto_processes
        from workbench.system import usable_cpu_ids

        processes = auto_processes(concurrency, len(usable_cpu_ids()))
    return LoadPlan(
        url,
        model,
        str(model_version or ""),
        s.protocol,
        batch_size,
        concurrency,
        request_rate,
        distribution if request_rate is not None else "",
        s.seed,
        warmup_requests,
        s.window_s,
        s.stability,
        s.stable_windows,
        s.max_windows,
        percentile,
        timeout_s,
        s.time_limit_s,
        s.min_latencies,
        processes,
    )


@dataclass(frozen=True)
class Tensor:
    name: str
    datatype: str
    shape: tuple[int, ...]


@dataclass(frozen=True)
class Interface:
    inputs: tuple[Tensor, ...]
    outputs: tuple[Tensor, ...]
    max_batch_size: int


def interface_from(metadata: Mapping, config: Mapping) -> Interface:
    def tensors(items):
        return tuple(Tensor(t["name"], t["datatype"], tuple(int(d) for d in t.get("shape", []))) for t in items)

    config = config.get("config", config)  # gRPC wraps the config, HTTP does not
    return Interface(
        tensors(metadata.get("inputs", [])),
        tensors(metadata.get("outputs", [])),
        int(config.get("max_batch_size", 0) or 0),
    )


def input_arrays(inputs: Any, iface: Interface, plan: LoadPlan) -> list[np.ndarray]:
    """Turn the user's inputs into one array per model input, batch dim included, with the
    model's dtype; refuse anything that does not fit, naming the input."""
    model = plan.model
    if iface.max_batch_size == 0 and plan.batch_size != 1:
        raise MeasureError(f"model {model!r} does not batch (max_batch_size 0): batch_size must be 1")
    if iface.max_batch_size and plan.batch_size > iface.max_batch_size:
        raise MeasureError(
            f"batch_size {plan.batch_size} exceeds model {model!r}'s max_batch_size {iface.max_batch_size}"
        )
    if callable(inputs):
        inputs = inputs(plan.batch_size if iface.max_batch_size else None)
    if isinstance(inputs, np.ndarray):
        inputs = [inputs]
    names = [t.name for t in iface.inputs]
    if isinstance(inputs, Mapping):
        unknown = sorted(set(inputs) - set(names))
        missing = [n for n in names if n not in inputs]
        if unknown:
            raise MeasureError(f"model {model!r} has no input named {unknown[0]!r}; its inputs are {names}")
        if missing:
            raise MeasureError(f"no array for input {missing[0]!r} of model {model!r}")
        arrays = [inputs[n] for n in names]
    elif isinstance(inputs, Sequence) and not isinstance(inputs, (str, bytes)):
        arrays = list(inputs)
        if len(arrays) != len(names):
            raise MeasureError(f"model {model!r} takes {len(names)} input(s) {names}; got {len(arrays)} array(s)")
    else:
        raise MeasureError(
            "inputs must be numpy arrays (a list in the model's input order, or a dict "
            f"by name) or a callable returning them, got {type(inputs).__name__}"
        )
    return [_fit(np.asarray(a), t, iface, plan) for a, t in zip(arrays, iface.inputs)]


def _fit(array: np.ndarray, tensor: Tensor, iface: Interface, plan: LoadPlan) -> np.ndarray:
    name = tensor.name
    if tensor.datatype == "BYTES":
        if array.dtype.kind not in "OSU":
            raise MeasureError(f"input {name!r} is BYTES; got a {array.dtype} array")
        array = array.astype(object)
    else:
        try:
            want = numpy_dtype(tensor.datatype)
        except SpecError as err:
            raise MeasureError(f"input {name!r}: {err}") from None
        if array.dtype != want:
            if not np.can_cast(array.dtype, want, casting="same_kind"):
                raise MeasureError(
                    f"input {name!r} is {tensor.datatype}; a {array.dtype} array cannot be "
                    "converted without changing its values' kind"
                )
            array = array.astype(want)
    rank = len(tensor.shape)
    if iface.max_batch_size:
        if array.ndim == rank - 1:
            array = np.repeat(array[np.newaxis], plan.batch_size, axis=0)
        elif array.ndim == rank and array.shape[0] != plan.batch_size:
            raise MeasureError(f"input {name!r} has {array.shape[0]} rows but batch_size is {plan.batch_size}")
    if array.ndim != rank or any(
        d != -1 and d != s
        for d, s in zip(
            tensor.shape[1 if iface.max_batch_size else 0 :], array.shape[1 if iface.max_batch_size else 0 :]
        )
    ):
        raise MeasureError(
            f"input {name!r}: shape {tuple(array.shape)} does not fit the model's {list(tensor.shape)} (-1 = any size)"
        )
    return np.ascontiguousarray(array)


# ---------------------------------------------------------------------------------------------
