"""Load generator: measure one load level of a served model the way perf_analyzer does, from Python.

Why not just call perf_analyzer: it is a C++ binary that is often missing (CPU-only clients,
notebooks, macOS), and its numbers come back as a CSV without the raw latencies. This engine
keeps perf_analyzer's definitions (back-to-back windows, a request belongs to the window in which
its response arrives, stability over the last 3 windows within 10%, the last 3 windows pooled,
nearest-rank percentiles, server breakdown diffed between statistics snapshots at the window
edges) and keeps every raw latency, failure and check result.

The client's own cost is kept low by building the request once per load level: a ready
``ModelInferRequest`` protobuf for gRPC, a ready binary body for HTTP (tritonclient's
``generate_request_body``). At low concurrency (up to ``BLOCKING_MAX_CONCURRENCY``) each slot is a
thread making blocking calls (grpc's synchronous stub, ``http.client``): measured on this 2-core
machine at concurrency 1, that costs about 40-60 us less client CPU per request than grpc.aio or
aiohttp, and at concurrency 1 every microsecond of it lands in the latency. Higher concurrency and
rate mode send from one asyncio event loop, where threads would fight over the GIL. Metadata and
statistics go through tritonclient's asyncio clients.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import math
import socket
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence
from urllib.parse import quote

import numpy as np

from workbench.measure.stats import (
    ServerStats,
    StatsError,
    is_stable,
    percentile_key,
    server_breakdown,
    summarize_latencies,
)
from workbench.spec import SpecError, numpy_dtype
from workbench.tasks import Cancelled

__all__ = ["MeasureError", "WindowResult", "LoadResult", "measure", "LATE_AFTER_S", "BUSY_WARNING",
           "MAX_OUTSTANDING", "BLOCKING_MAX_CONCURRENCY"]

# A rate-mode send counts as late when it leaves this long after its scheduled time. Event-loop
# timers wake with about a millisecond of granularity on Linux; 2 ms is past that noise.
LATE_AFTER_S = 0.002
# Share of late sends above which the result warns that the generator could not keep the rate
# (perf_analyzer's threshold is 1%).
LATE_WARNING_FRACTION = 0.01
# The client busy more than this share of a window (CPU of the event loop's thread, or of the whole
# process when blocking threads send): the client may be the bottleneck.
BUSY_WARNING = 0.8
# Concurrency mode up to this many slots: one thread per slot with a blocking client (cheaper per
# request); above it, one asyncio event loop (threads past a few would contend for the GIL).
BLOCKING_MAX_CONCURRENCY = 4
# Rate mode: most requests in flight at once (perf_analyzer bounds them by its thread count).
MAX_OUTSTANDING = 1024

_PROTOCOLS = ("grpc", "http")
_DISTRIBUTIONS = ("constant", "poisson")


class MeasureError(ValueError):
    """A measurement that cannot start: bad arguments, unreachable server, inputs that do not
    fit the model. Raised before any load is sent; the message names the bad item."""


# ---------------------------------------------------------------------------------------------
# Results


@dataclass
class WindowResult:
    """One measurement window: what completed in it and what the server reported for it."""

    index: int
    duration_s: float
    requests: int
    failures: int
    throughput: float
    latencies_us: np.ndarray
    send_delays_us: np.ndarray
    client_busy: float
    server: ServerStats | None

    def latency(self, which: float | None = None) -> float:
        """The stabilizing latency: the average, or percentile ``which``."""
        summary = summarize_latencies(self.latencies_us, which)
        return summary["avg"] if which is None else summary[percentile_key(which)]


@dataclass
class LoadResult:
    """One load level. Reported numbers pool the last ``stable_windows`` windows; all times in
    microseconds; throughput in inferences per second (requests x batch size)."""

    model: str
    url: str
    protocol: str
    batch_size: int
    concurrency: int | None
    request_rate: float | None
    distribution: str | None
    stable: bool
    throughput: float
    latency: dict[str, float]
    requests: int
    failures: int
    latencies_us: np.ndarray
    send_delays_us: np.ndarray
    late_fraction: float
    client_busy: float
    server: ServerStats | None
    windows: list[WindowResult]
    pooled_windows: int
    sent: int
    succeeded: int
    failed: int
    errors: dict[str, int]
    checked: int
    check_failures: int
    warnings: list[str] = field(default_factory=list)
    percentile: float | None = None
    server_total: ServerStats | None = None

    @property
    def p50_us(self) -> float:
        return self.latency["p50"]

    @property
    def p99_us(self) -> float:
        return self.latency["p99"]

    def to_row(self) -> dict[str, Any]:
        """Flat columns for a pandas table (one row per load level); ``perf_analyzer.parse_csv``
        produces rows with the same keys where perf_analyzer reports them."""
        row: dict[str, Any] = {
            "source": "workbench",
            "model": self.model,
            "protocol": self.protocol,
            "batch_size": self.batch_size,
            "concurrency": self.concurrency,
            "request_rate": self.request_rate,
            "throughput": self.throughput,
            "latency_avg_us": self.latency["avg"],
            "latency_std_us": self.latency["std"],
        }
        for key, value in self.latency.items():
            if key.startswith("p"):
                row[f"{key}_us"] = value
        row.update({
            "stable": self.stable,
            "windows": len(self.windows),
            "requests": self.requests,
            "failures": self.failures,
            "sent": self.sent,
            "failed": self.failed,
            "check_failures": self.check_failures,
            "late_fraction": self.late_fraction,
            "client_busy": self.client_busy,
            "warnings": len(self.warnings),
        })
        if self.server is not None:
            row.update(self.server.to_row())
        return row


# ---------------------------------------------------------------------------------------------
# Arguments and the model's interface


@dataclass(frozen=True)
class _Plan:
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


def _plan(url, model, protocol, batch_size, concurrency, request_rate, distribution, seed,
          warmup_requests, window_s, stability, stable_windows, max_windows, percentile,
          model_version, timeout_s) -> _Plan:
    if not isinstance(model, str) or not model.strip():
        raise MeasureError(f"model must be a model name, got {model!r}")
    if protocol not in _PROTOCOLS:
        raise MeasureError(f"protocol {protocol!r} is not one of {', '.join(_PROTOCOLS)}")
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
        if distribution not in _DISTRIBUTIONS:
            raise MeasureError(f"distribution {distribution!r} is not one of {', '.join(_DISTRIBUTIONS)}")
    else:
        concurrency = whole("concurrency", 1 if concurrency is None else concurrency, 1)
    window_s = positive("window_s", window_s)
    stability = positive("stability", stability)
    stable_windows = whole("stable_windows", stable_windows, 1)
    max_windows = whole("max_windows", max_windows, 1)
    if max_windows < stable_windows:
        raise MeasureError(f"max_windows ({max_windows}) must be >= stable_windows ({stable_windows})")
    if percentile is not None and (isinstance(percentile, bool) or not isinstance(percentile, (int, float))
                                   or not 0 < percentile <= 100):
        raise MeasureError(f"percentile must be in (0, 100], got {percentile!r}")
    if warmup_requests is None:
        # about a quarter second of traffic, at least 20 requests, at most 1000 (an unreachable rate)
        warmup_requests = max(20, 2 * concurrency) if concurrency else max(20, min(1000, int(request_rate / 4)))
    warmup_requests = whole("warmup_requests", warmup_requests, 0)
    timeout_s = positive("timeout_s", timeout_s)
    return _Plan(url, model, str(model_version or ""), protocol, batch_size, concurrency,
                 request_rate, distribution if request_rate is not None else "", int(seed),
                 warmup_requests, window_s, stability, stable_windows, max_windows, percentile, timeout_s)


@dataclass(frozen=True)
class _Tensor:
    name: str
    datatype: str
    shape: tuple[int, ...]


@dataclass(frozen=True)
class _Interface:
    inputs: tuple[_Tensor, ...]
    outputs: tuple[_Tensor, ...]
    max_batch_size: int


def _interface(metadata: Mapping, config: Mapping) -> _Interface:
    def tensors(items):
        return tuple(_Tensor(t["name"], t["datatype"], tuple(int(d) for d in t.get("shape", []))) for t in items)
    config = config.get("config", config)  # gRPC wraps the config, HTTP does not
    return _Interface(tensors(metadata.get("inputs", [])), tensors(metadata.get("outputs", [])),
                      int(config.get("max_batch_size", 0) or 0))


def _input_arrays(inputs: Any, iface: _Interface, plan: _Plan) -> list[np.ndarray]:
    """Turn the user's inputs into one array per model input, batch dim included, with the
    model's dtype; refuse anything that does not fit, naming the input."""
    model = plan.model
    if iface.max_batch_size == 0 and plan.batch_size != 1:
        raise MeasureError(f"model {model!r} does not batch (max_batch_size 0): batch_size must be 1")
    if iface.max_batch_size and plan.batch_size > iface.max_batch_size:
        raise MeasureError(f"batch_size {plan.batch_size} exceeds model {model!r}'s max_batch_size "
                           f"{iface.max_batch_size}")
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
        raise MeasureError("inputs must be numpy arrays (a list in the model's input order, or a dict "
                           f"by name) or a callable returning them, got {type(inputs).__name__}")
    return [_fit(np.asarray(a), t, iface, plan) for a, t in zip(arrays, iface.inputs)]


def _fit(array: np.ndarray, tensor: _Tensor, iface: _Interface, plan: _Plan) -> np.ndarray:
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
                raise MeasureError(f"input {name!r} is {tensor.datatype}; a {array.dtype} array cannot be "
                                   "converted without changing its values' kind")
            array = array.astype(want)
    rank = len(tensor.shape)
    if iface.max_batch_size:
        if array.ndim == rank - 1:
            array = np.repeat(array[np.newaxis], plan.batch_size, axis=0)
        elif array.ndim == rank and array.shape[0] != plan.batch_size:
            raise MeasureError(f"input {name!r} has {array.shape[0]} rows but batch_size is {plan.batch_size}")
    if array.ndim != rank or any(d != -1 and d != s for d, s in zip(tensor.shape[1 if iface.max_batch_size else 0:],
                                                                   array.shape[1 if iface.max_batch_size else 0:])):
        raise MeasureError(f"input {name!r}: shape {tuple(array.shape)} does not fit the model's "
                           f"{list(tensor.shape)} (-1 = any size)")
    return np.ascontiguousarray(array)


# ---------------------------------------------------------------------------------------------
# Protocol seams: one admin client (metadata, statistics) and one request sender per protocol


class _Admin:
    """Metadata, readiness and statistics through tritonclient's asyncio clients."""

    def __init__(self, plan: _Plan) -> None:
        self.plan = plan
        if plan.protocol == "grpc":
            import tritonclient.grpc.aio as client_module
            self.client = client_module.InferenceServerClient(plan.url)
            self.json = {"as_json": True}
        else:
            import tritonclient.http.aio as client_module
            self.client = client_module.InferenceServerClient(plan.url, conn_timeout=plan.timeout_s)
            self.json = {}

    async def interface(self) -> _Interface:
        plan = self.plan
        where = f"{plan.protocol}://{plan.url}"
        try:
            ready = await self.client.is_model_ready(plan.model, plan.version)
        except Exception as err:  # connection refused, DNS, protocol mismatch: all mean "cannot reach"
            raise MeasureError(f"cannot reach Triton at {where}: {err}") from None
        if not ready:
            raise MeasureError(f"model {plan.model!r} is not ready at {where} (not loaded, still loading, "
                               "or failed to load: see the server log)")
        metadata = await self.client.get_model_metadata(plan.model, plan.version, **self.json)
        config = await self.client.get_model_config(plan.model, plan.version, **self.json)
        return _interface(metadata, config)

    async def statistics(self) -> dict | None:
        try:
            return await self.client.get_inference_statistics(self.plan.model, self.plan.version, **self.json)
        except Exception:  # statistics extension off or unreachable: the client numbers still stand
            return None

    async def close(self) -> None:
        await self.client.close()


_GRPC_OPTIONS = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]


def _grpc_request(plan: _Plan, iface: _Interface, arrays: list[np.ndarray]) -> Any:
    from tritonclient.grpc import service_pb2
    from tritonclient.utils import serialize_byte_tensor

    request = service_pb2.ModelInferRequest(model_name=plan.model, model_version=plan.version)
    for tensor, array in zip(iface.inputs, arrays):
        entry = request.inputs.add()
        entry.name, entry.datatype = tensor.name, tensor.datatype
        entry.shape.extend(array.shape)
        if tensor.datatype == "BYTES":
            packed = serialize_byte_tensor(array)
            request.raw_input_contents.append(packed.item() if packed.size else b"")
        else:
            request.raw_input_contents.append(array.tobytes())
    for tensor in iface.outputs:
        request.outputs.add().name = tensor.name
    return request


def _grpc_outputs(response: Any) -> dict[str, np.ndarray]:
    from tritonclient.grpc import InferResult

    result = InferResult(response)
    return {out.name: result.as_numpy(out.name) for out in response.outputs}


class _GrpcSender:
    """Sends one pre-built ``ModelInferRequest`` over a grpc.aio channel."""

    blocking = False
    outputs = staticmethod(_grpc_outputs)

    def __init__(self, plan: _Plan, iface: _Interface, arrays: list[np.ndarray]) -> None:
        import grpc
        from tritonclient.grpc import service_pb2_grpc

        self._grpc = grpc
        self.request = _grpc_request(plan, iface, arrays)
        self.timeout = plan.timeout_s
        self.channel = grpc.aio.insecure_channel(plan.url, options=_GRPC_OPTIONS)
        self.stub = service_pb2_grpc.GRPCInferenceServiceStub(self.channel)

    async def send(self) -> tuple[bool, Any]:
        try:
            return True, await self.stub.ModelInfer(self.request, timeout=self.timeout)
        except self._grpc.aio.AioRpcError as err:
            return False, f"{err.code().name}: {err.details()}"
        except Exception as err:  # any client-side failure is a failed request, never a lost one
            return False, f"{type(err).__name__}: {err}"

    async def close(self) -> None:
        await self.channel.close()


class _GrpcBlockingSender:
    """The same request through grpc's synchronous stub, called from one thread per slot (the
    channel is thread-safe and shared)."""

    blocking = True
    outputs = staticmethod(_grpc_outputs)

    def __init__(self, plan: _Plan, iface: _Interface, arrays: list[np.ndarray]) -> None:
        import grpc
        from tritonclient.grpc import service_pb2_grpc

        self._grpc = grpc
        self.request = _grpc_request(plan, iface, arrays)
        self.timeout = plan.timeout_s
        self.channel = grpc.insecure_channel(plan.url, options=_GRPC_OPTIONS)
        self.call = service_pb2_grpc.GRPCInferenceServiceStub(self.channel).ModelInfer

    def send(self) -> tuple[bool, Any]:
        try:
            return True, self.call(self.request, timeout=self.timeout)
        except self._grpc.RpcError as err:
            return False, f"{err.code().name}: {err.details()}"
        except Exception as err:  # any client-side failure is a failed request, never a lost one
            return False, f"{type(err).__name__}: {err}"

    async def close(self) -> None:
        self.channel.close()


class _HttpRequest:
    """The binary infer body (tritonclient's ``generate_request_body``), its headers and path, and
    the response parser, shared by both HTTP senders."""

    def __init__(self, plan: _Plan, iface: _Interface, arrays: list[np.ndarray]) -> None:
        import tritonclient.http as http
        import tritonclient.http.aio as http_aio

        self._parse = http_aio.InferenceServerClient.parse_response_body
        inputs = []
        for tensor, array in zip(iface.inputs, arrays):
            item = http.InferInput(tensor.name, list(array.shape), tensor.datatype)
            item.set_data_from_numpy(array, binary_data=True)
            inputs.append(item)
        outputs = [http.InferRequestedOutput(t.name, binary_data=True) for t in iface.outputs]
        body, json_size = http_aio.InferenceServerClient.generate_request_body(inputs, outputs=outputs)
        self.body = body if isinstance(body, bytes) else body.encode()
        # identity: the client would otherwise ask for gzip and the server would spend time compressing
        self.headers = {"Accept-Encoding": "identity"}
        if json_size is not None:
            self.headers["Inference-Header-Content-Length"] = str(json_size)
        path = f"/v2/models/{quote(plan.model)}"
        if plan.version:
            path += f"/versions/{plan.version}"
        self.path = f"{path}/infer"

    def outputs(self, payload: tuple[bytes, str | None]) -> dict[str, np.ndarray]:
        body, header_length = payload
        result = self._parse(body, header_length=int(header_length) if header_length else None)
        return {out["name"]: result.as_numpy(out["name"]) for out in result.get_response().get("outputs", [])}


class _HttpSender(_HttpRequest):
    """Posts the pre-built body with aiohttp (tritonclient's asyncio HTTP transport)."""

    blocking = False

    def __init__(self, plan: _Plan, iface: _Interface, arrays: list[np.ndarray]) -> None:
        import aiohttp

        super().__init__(plan, iface, arrays)
        self.uri = f"http://{plan.url}{self.path}"
        # One connection per request in flight: N in concurrency mode, at most MAX_OUTSTANDING in
        # rate mode (a smaller pool would queue requests inside the client and hide it in latency).
        limit = plan.concurrency or MAX_OUTSTANDING
        self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=limit),
                                             timeout=aiohttp.ClientTimeout(total=plan.timeout_s),
                                             auto_decompress=False)

    async def send(self) -> tuple[bool, Any]:
        try:
            async with self.session.post(self.uri, data=self.body, headers=self.headers) as response:
                body = await response.read()
                if response.status == 200:
                    return True, (body, response.headers.get("Inference-Header-Content-Length"))
                return False, f"HTTP {response.status}: {_http_error(body)}"
        except asyncio.TimeoutError:
            return False, "timeout: no response in time"
        except Exception as err:  # any client-side failure is a failed request, never a lost one
            return False, f"{type(err).__name__}: {err}"

    async def close(self) -> None:
        await self.session.close()


class _HttpBlockingSender(_HttpRequest):
    """Posts the pre-built body with ``http.client``, one keep-alive connection per sending thread."""

    blocking = True

    def __init__(self, plan: _Plan, iface: _Interface, arrays: list[np.ndarray]) -> None:
        super().__init__(plan, iface, arrays)
        host, _, port = plan.url.rpartition(":")
        self._address = (host.strip("[]"), int(port))
        self.timeout = plan.timeout_s
        self._local = threading.local()
        self._connections: list[Any] = []
        self._lock = threading.Lock()

    def _connection(self) -> Any:
        connection = getattr(self._local, "connection", None)
        if connection is None:
            import http.client

            connection = http.client.HTTPConnection(*self._address, timeout=self.timeout)
            self._local.connection = connection
            with self._lock:
                self._connections.append(connection)
        return connection

    def send(self) -> tuple[bool, Any]:
        connection = self._connection()
        try:
            connection.request("POST", self.path, body=self.body, headers=self.headers)
            response = connection.getresponse()
            body = response.read()
        except (socket.timeout, TimeoutError):
            connection.close()  # a late response must not be read as the next request's
            return False, "timeout: no response in time"
        except Exception as err:  # any client-side failure is a failed request, never a lost one
            connection.close()  # reopened by the next request
            return False, f"{type(err).__name__}: {err}"
        if response.status == 200:
            return True, (body, response.getheader("Inference-Header-Content-Length"))
        return False, f"HTTP {response.status}: {_http_error(body)}"

    async def close(self) -> None:
        with self._lock:
            for connection in self._connections:
                connection.close()


def _http_error(body: bytes) -> str:
    import json

    try:
        return str(json.loads(body).get("error", body[:200]))
    except (ValueError, AttributeError):
        return body[:200].decode(errors="replace")


# ---------------------------------------------------------------------------------------------
# The engine


class _Bucket:
    """Everything that completed (or was sent, for send delays) during one window."""

    __slots__ = ("latencies_ns", "failures", "send_delays_s")

    def __init__(self) -> None:
        self.latencies_ns: list[int] = []
        self.failures = 0
        self.send_delays_s: list[float] = []


class _Engine:
    def __init__(self, plan: _Plan, sender: Any, admin: _Admin, check: Callable | None,
                 progress: Callable | None, cancel: threading.Event | None) -> None:
        self.plan, self.sender, self.admin = plan, sender, admin
        self.check, self.progress, self.cancel = check, progress, cancel
        self.bucket = _Bucket()
        self.stop = False
        self.sent = self.succeeded = self.failed = 0
        self.errors: Counter[str] = Counter()
        self.checked = self.check_failures = 0
        self.check_messages: list[str] = []
        self.warming = True
        self.check_next = True
        self.window_start = (0, 0.0)
        self.pending: set[asyncio.Task] = set()
        self.rng = np.random.default_rng(plan.seed)
        # Blocking senders record from their threads: counters and the bucket swap share this lock.
        # Their CPU is spread over threads, so the busy share is the whole process's CPU.
        self.lock = threading.Lock()
        self.cpu_clock = time.process_time if sender.blocking else time.thread_time
        self.closed = False  # set when the counts are final: a request abandoned after that is not recorded

    # -- recording ------------------------------------------------------------------------

    def _record(self, t0: int, t1: int, ok: bool, payload: Any) -> None:
        if not ok:
            self.failed += 1
            self.bucket.failures += 1
            self.errors[str(payload)] += 1
        else:
            self._succeeded(t1 - t0, payload)
        if self.warming and self.succeeded + self.failed >= self.plan.warmup_requests:
            self._end_warmup()

    def _succeeded(self, latency_ns: int, payload: Any) -> None:
        self.succeeded += 1
        self.bucket.latencies_ns.append(latency_ns)
        if self.check is not None and self.check_next:
            self.check_next = self.warming  # every warm-up response, then the first of each window
            self._run_check(payload)

    def _end_warmup(self) -> None:
        """The first window starts the moment the last warm-up response is in."""
        self.warming = False
        self.window_start = (time.perf_counter_ns(), self.cpu_clock())
        self.bucket, self.check_next = _Bucket(), True

    def _run_check(self, payload: Any) -> None:
        self.checked += 1
        try:
            passed = bool(self.check(self.sender.outputs(payload)))
            message = "check returned False"
        except Exception as err:  # a broken check is a failed check, reported with its message
            passed, message = False, f"check raised {type(err).__name__}: {err}"
        if not passed:
            self.check_failures += 1
            if len(self.check_messages) < 3:
                self.check_messages.append(message)

    # -- load -----------------------------------------------------------------------------

    async def _worker(self) -> None:
        send, clock = self.sender.send, time.perf_counter_ns
        while not self.stop:
            self.sent += 1
            t0 = clock()
            ok, payload = await send()
            self._record(t0, clock(), ok, payload)

    def _blocking_worker(self) -> None:
        """One concurrency slot on its own thread: blocking sends back to back."""
        send, clock, lock = self.sender.send, time.perf_counter_ns, self.lock
        while not self.stop:
            with lock:
                self.sent += 1
            t0 = clock()
            ok, payload = send()
            t1 = clock()
            with lock:
                if self.closed:
                    return
                self._record(t0, t1, ok, payload)

    async def _one(self, slots: asyncio.Semaphore) -> None:
        try:
            t0 = time.perf_counter_ns()
            ok, payload = await self.sender.send()
            self._record(t0, time.perf_counter_ns(), ok, payload)
        finally:
            slots.release()

    async def _schedule(self) -> None:
        loop = asyncio.get_running_loop()
        rate = self.plan.request_rate
        poisson = self.plan.distribution == "poisson"
        # A rate the server cannot serve piles up requests; past this many outstanding the
        # schedule waits (those sends count as late) instead of growing without bound.
        slots = asyncio.Semaphore(MAX_OUTSTANDING)
        due = time.perf_counter()
        while not self.stop:
            wait = due - time.perf_counter()
            # behind schedule, still yield once per send so responses and window edges run
            await asyncio.sleep(max(wait, 0.0))
            await slots.acquire()
            if self.stop:
                slots.release()
                break
            self.bucket.send_delays_s.append(max(0.0, time.perf_counter() - due))
            self.sent += 1
            task = loop.create_task(self._one(slots))
            self.pending.add(task)
            task.add_done_callback(self.pending.discard)
            due += self.rng.exponential(1.0 / rate) if poisson else 1.0 / rate

    # -- windows --------------------------------------------------------------------------

    def _cancelled(self) -> bool:
        return self.cancel is not None and self.cancel.is_set()

    async def _sleep_until(self, deadline_ns: int) -> None:
        while not self._cancelled():
            left = (deadline_ns - time.perf_counter_ns()) / 1e9
            if left <= 0:
                return
            await asyncio.sleep(min(left, 0.05))

    def _report(self, done: int, message: str) -> None:
        if self.progress is not None:
            self.progress(done, self.plan.max_windows, message)

    async def run(self) -> LoadResult:
        plan = self.plan
        first_snapshot = await self.admin.statistics()
        if plan.warmup_requests == 0:
            self._end_warmup()
        pool = None
        if plan.concurrency and self.sender.blocking:
            pool = concurrent.futures.ThreadPoolExecutor(plan.concurrency, thread_name_prefix="workbench-load")
            loop = asyncio.get_running_loop()
            drivers = [loop.run_in_executor(pool, self._blocking_worker) for _ in range(plan.concurrency)]
        elif plan.concurrency:
            drivers = [asyncio.ensure_future(self._worker()) for _ in range(plan.concurrency)]
        else:
            drivers = [asyncio.ensure_future(self._schedule())]
        windows: list[WindowResult] = []
        snapshots: list[dict | None] = []
        try:
            self._report(0, f"warming up ({plan.warmup_requests} requests)")
            while self.warming and not self._cancelled():
                await asyncio.sleep(0.005)
            start_ns, start_cpu = self.window_start
            snapshots.append(await self.admin.statistics())
            finished = False
            while not finished and not self._cancelled():
                await self._sleep_until(start_ns + int(plan.window_s * 1e9))
                with self.lock:
                    end_ns, end_cpu = time.perf_counter_ns(), self.cpu_clock()
                    bucket, self.bucket = self.bucket, _Bucket()
                windows.append(self._window(len(windows), bucket, end_ns - start_ns, end_cpu - start_cpu))
                finished = self._stable(windows) or len(windows) >= plan.max_windows
                self.check_next = not finished  # the first response of the next window, if any
                start_ns, start_cpu = end_ns, end_cpu
                snapshots.append(await self.admin.statistics())
                windows[-1].server = self._server(snapshots[-2], snapshots[-1])
                w = windows[-1]
                self._report(len(windows), f"window {len(windows)}/{plan.max_windows}: "
                                           f"{w.throughput:.1f} infer/s, p50 {w.latency(50) / 1000:.2f} ms")
        finally:
            self.stop = True
            await self._drain(drivers)
            if pool is not None:  # threads still out end with their request (closing the sender ends it)
                pool.shutdown(wait=False)
        if self._cancelled():
            raise Cancelled("measurement cancelled")
        last_snapshot = await self._settled_statistics(first_snapshot)
        return self._result(windows, snapshots, first_snapshot, last_snapshot)

    async def _drain(self, drivers: list[asyncio.Future]) -> None:
        """Let every request in flight finish, so sent == succeeded + failed. After a cancel the
        user is waiting: requests still out after a short grace are abandoned and counted failed."""
        grace = 2.0 if self._cancelled() else self.plan.timeout_s + 5.0
        # stop is set: workers end after their request, the scheduler sends nothing more
        _, late = await asyncio.wait(set(drivers) | self.pending, timeout=grace)
        for task in late:
            task.cancel()
        if late:
            await asyncio.wait(late)
        for task in drivers:  # a bug in the engine itself must surface, not shrink the load quietly
            if task.done() and not task.cancelled() and task.exception() is not None:
                raise task.exception()
        with self.lock:
            self.closed = True
        lost = self.sent - self.succeeded - self.failed
        if lost:
            self.failed += lost
            self.errors[f"abandoned: no response within {grace:g} s after the measurement ended"] += lost

    async def _settled_statistics(self, first: dict | None) -> dict | None:
        """Statistics once the server has counted every request sent: Triton updates them just
        after the response leaves, so the last responses may not be counted yet."""
        deadline = time.monotonic() + 2.0
        while True:
            snapshot = await self.admin.statistics()
            if first is None or snapshot is None or time.monotonic() > deadline:
                return snapshot
            try:
                counted = server_breakdown(first, snapshot, self.plan.model, self.plan.version or None)
            except StatsError:
                return snapshot
            if counted.requests + counted.failures >= self.sent:
                return snapshot
            await asyncio.sleep(0.01)

    def _server(self, before: dict | None, after: dict | None) -> ServerStats | None:
        if before is None or after is None:
            return None
        try:
            return server_breakdown(before, after, self.plan.model, self.plan.version or None)
        except StatsError:  # the model was reloaded meanwhile: no breakdown for this span
            return None

    def _window(self, index: int, bucket: _Bucket, duration_ns: int, cpu_s: float) -> WindowResult:
        seconds = duration_ns / 1e9
        return WindowResult(
            index=index,
            duration_s=seconds,
            requests=len(bucket.latencies_ns),
            failures=bucket.failures,
            throughput=len(bucket.latencies_ns) * self.plan.batch_size / seconds,
            latencies_us=np.asarray(bucket.latencies_ns, dtype=float) / 1000.0,
            send_delays_us=np.asarray(bucket.send_delays_s, dtype=float) * 1e6,
            client_busy=cpu_s / seconds,
            server=None,
        )

    def _stable(self, windows: list[WindowResult]) -> bool:
        p = self.plan
        return is_stable([w.throughput for w in windows], [w.latency(p.percentile) for w in windows],
                         stability=p.stability, windows=p.stable_windows)

    def _result(self, windows: list[WindowResult], snapshots: list[dict | None],
                first_snapshot: dict | None, last_snapshot: dict | None) -> LoadResult:
        p = self.plan
        pooled = windows[-p.stable_windows:]
        seconds = sum(w.duration_s for w in pooled)
        requests = sum(w.requests for w in pooled)
        latencies = np.concatenate([w.latencies_us for w in pooled]) if pooled else np.empty(0)
        delays = np.concatenate([w.send_delays_us for w in pooled]) if pooled else np.empty(0)
        late = float(np.mean(delays > LATE_AFTER_S * 1e6)) if delays.size else 0.0
        busy = sum(w.client_busy * w.duration_s for w in pooled) / seconds if seconds else 0.0
        server = self._server(snapshots[len(windows) - len(pooled)], snapshots[len(windows)])
        server_total = self._server(first_snapshot, last_snapshot)
        result = LoadResult(
            model=p.model, url=p.url, protocol=p.protocol, batch_size=p.batch_size,
            concurrency=p.concurrency, request_rate=p.request_rate, distribution=p.distribution or None,
            stable=self._stable(windows),
            throughput=requests * p.batch_size / seconds if seconds else 0.0,
            latency=summarize_latencies(latencies, p.percentile),
            requests=requests, failures=sum(w.failures for w in pooled),
            latencies_us=latencies, send_delays_us=delays, late_fraction=late, client_busy=busy,
            server=server, windows=windows, pooled_windows=len(pooled),
            sent=self.sent, succeeded=self.succeeded, failed=self.failed, errors=dict(self.errors),
            checked=self.checked, check_failures=self.check_failures,
            percentile=p.percentile, server_total=server_total,
        )
        result.warnings = self._warnings(result)
        return result

    def _warnings(self, r: LoadResult) -> list[str]:
        p = self.plan
        out = []
        if not r.stable:
            pooled = r.windows[-p.stable_windows:]
            thr = [w.throughput for w in pooled]
            lat = [w.latency(p.percentile) for w in pooled]

            def spread(xs: list[float]) -> float:
                return (max(xs) / min(xs) - 1) * 100 if xs and min(xs) > 0 else math.inf

            which = "average latency" if p.percentile is None else f"p{p.percentile:g} latency"
            out.append(f"not stable after {len(r.windows)} window(s): over the last {len(pooled)} throughput "
                       f"varied {spread(thr):.0f}% and {which} {spread(lat):.0f}% (limit "
                       f"{p.stability * 100:.0f}%); numbers pool those windows anyway")
        if r.failed:
            top, count = max(r.errors.items(), key=lambda kv: kv[1])
            out.append(f"{r.failed} of {r.sent} request(s) failed; most common error ({count}x): {top}")
        if r.check_failures:
            out.append(f"outputs failed the check in {r.check_failures} of {r.checked} checked response(s): "
                       + "; ".join(self.check_messages))
        if p.request_rate is not None and r.late_fraction > LATE_WARNING_FRACTION:
            out.append(f"{r.late_fraction * 100:.1f}% of requests left more than {LATE_AFTER_S * 1000:.0f} ms "
                       f"after their scheduled time (mean delay {np.mean(r.send_delays_us) / 1000:.2f} ms): "
                       f"the load generator could not keep {p.request_rate:g} requests/s")
        if r.client_busy > BUSY_WARNING:
            out.append(f"the load generator's event loop was busy {r.client_busy * 100:.0f}% of the time: "
                       "its own cost may limit the load (perf_analyzer gives a cross-check)")
        if r.server is None:
            out.append("no server statistics (statistics extension unavailable): client-side numbers only")
        return out


async def _measure_async(plan: _Plan, inputs: Any, check, progress, cancel) -> LoadResult:
    admin = _Admin(plan)
    try:
        iface = await admin.interface()
        arrays = _input_arrays(inputs, iface, plan)
        blocking = plan.concurrency is not None and plan.concurrency <= BLOCKING_MAX_CONCURRENCY
        sender = {("grpc", False): _GrpcSender, ("grpc", True): _GrpcBlockingSender,
                  ("http", False): _HttpSender, ("http", True): _HttpBlockingSender}[plan.protocol, blocking]
        sender = sender(plan, iface, arrays)
        try:
            return await _Engine(plan, sender, admin, check, progress, cancel).run()
        finally:
            await sender.close()
    finally:
        await admin.close()


def measure(
    url: str,
    model: str,
    inputs: Any,
    *,
    protocol: str = "grpc",
    batch_size: int = 1,
    concurrency: int | None = None,
    request_rate: float | None = None,
    distribution: str = "constant",
    seed: int = 0,
    warmup_requests: int | None = None,
    window_s: float = 1.0,
    stability: float = 0.10,
    stable_windows: int = 3,
    max_windows: int = 10,
    percentile: float | None = None,
    check: Callable[[dict[str, np.ndarray]], bool] | None = None,
    model_version: str = "",
    timeout_s: float = 30.0,
    progress: Callable[[int, int, str], None] | None = None,
    cancel: threading.Event | None = None,
) -> LoadResult:
    """Measure one load level of ``model`` served at ``url`` (``host:port``).

    Load: ``concurrency`` requests kept outstanding (default 1), or ``request_rate`` requests/s
    sent on a ``constant`` or seeded ``poisson`` schedule (send delays recorded).
    ``inputs``: numpy arrays in the model's input order or by name, or a callable
    ``inputs(batch_size)`` returning them (called with None for models without batching); arrays
    without the batch dim are repeated ``batch_size`` times. Built into one request, once.

    After ``warmup_requests`` responses (default: max(20, 2 x concurrency), or a quarter second of
    the rate capped at 1000), back-to-back windows of ``window_s`` run until the last
    ``stable_windows`` agree within ``stability`` on throughput and latency (average, or
    ``percentile``) or ``max_windows`` is reached (then ``stable`` is False, not an error).
    ``check(outputs)`` gets ``{name: array}`` of every warm-up response and the first of each
    window; failures are counted in ``check_failures``. Failed requests are counted, never dropped.
    ``cancel`` stops at the next poll (within 50 ms) and raises ``Cancelled``.
    """
    plan = _plan(url, model, protocol, batch_size, concurrency, request_rate, distribution, seed,
                 warmup_requests, window_s, stability, stable_windows, max_windows, percentile,
                 model_version, timeout_s)
    coroutine = _measure_async(plan, inputs, check, progress, cancel)
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    # Called from a thread that already runs an event loop (a Jupyter cell): use a fresh thread.
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="workbench-measure") as pool:
        return pool.submit(asyncio.run, coroutine).result()
