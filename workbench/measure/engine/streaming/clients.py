"""The two wires a token stream comes back on, each taking requests without blocking the caller:
gRPC bidirectional streaming (ModelStreamInfer, tritonclient's ``start_stream`` /
``async_stream_infer``, one stream carrying every request by id) and HTTP ``generate_stream``
(server-sent events read line by line from a plain ``http.client`` connection, one thread and
keep-alive connection per request in flight).

Requests are shaped as Triton's vLLM backend takes them (``text_input`` BYTES, ``stream`` BOOL,
``sampling_parameters`` JSON BYTES with ``max_tokens`` and ``ignore_eos``; ``text_output`` back):
every response carrying ``text_output`` is one output token, stamped on arrival, unless
``count_output`` names an output holding each response's token count (the vLLM backend's
``num_output_tokens``, asked for with the ``return_num_output_tokens`` input): an engine may put
several tokens in one response, and each is then stamped with that response's arrival.
"""

from __future__ import annotations

import http.client
import itertools
import json
import queue
import threading
import time
from typing import Callable, Protocol

import numpy as np

from workbench.measure.engine.streaming.prompts import Prompt
from workbench.measure.engine.streaming.stream_results import RequestRecord
from workbench.measure.engine.measure_settings import MeasureError

__all__ = ["StreamClient", "GrpcStreamClient", "HttpStreamClient", "sampling_parameters", "open_client"]

Done = Callable[[RequestRecord], None]


def _tokens_in(count: object) -> int:
    """Tokens in one response from its count output (a number or a list of them)."""
    return int(np.sum(np.asarray(count, dtype=np.int64)))


def sampling_parameters(prompt: Prompt, ignore_eos: bool) -> str:
    """The vLLM backend's sampling parameters for one request (JSON text)."""
    params: dict = {"max_tokens": prompt.max_tokens}
    if ignore_eos:
        params["ignore_eos"] = True
    return json.dumps(params)


class StreamClient(Protocol):
    """Sends one request, stamps its tokens into ``record``, calls ``done(record)`` when it ends."""

    def submit(self, prompt: Prompt, record: RequestRecord, done: Done) -> None: ...

    def close(self) -> None: ...


class GrpcStreamClient:
    """One gRPC stream for every request (tritonclient's own stream, callbacks on its thread).

    The stream has no deadline (``timeout_s`` is the point's: requests still open when it ends
    are waited for that long). tritonclient hands an error response to the callback without its
    request id, so an error fails every request then open: exact at concurrency 1 and for a
    broken stream, an over-count of failures when one of several requests fails alone."""

    def __init__(self, url: str, model: str, *, ignore_eos: bool, timeout_s: float,
                 count_output: str | None = None) -> None:
        import tritonclient.grpc as grpcclient

        self._grpc = grpcclient
        self.model, self.ignore_eos, self.count_output = model, ignore_eos, count_output
        self._ids = itertools.count()
        self._open: dict[str, tuple[RequestRecord, Done]] = {}
        self._lock = threading.Lock()
        self._client = grpcclient.InferenceServerClient(url)
        self._client.start_stream(callback=self._arrived, stream_timeout=None)
        self._output = [grpcclient.InferRequestedOutput(name) for name in ("text_output", count_output) if name]

    def _tensor(self, name: str, value, datatype: str):
        tensor = self._grpc.InferInput(name, [1], datatype)
        tensor.set_data_from_numpy(np.array([value], dtype=bool if datatype == "BOOL" else object))
        return tensor

    def submit(self, prompt: Prompt, record: RequestRecord, done: Done) -> None:
        request_id = str(next(self._ids))
        inputs = [self._tensor("text_input", prompt.text.encode(), "BYTES"), self._tensor("stream", True, "BOOL"),
                  self._tensor("sampling_parameters", sampling_parameters(prompt, self.ignore_eos).encode(), "BYTES")]
        if self.count_output:
            inputs.append(self._tensor(f"return_{self.count_output}", True, "BOOL"))
        with self._lock:
            self._open[request_id] = (record, done)
        record.sent_ns = time.perf_counter_ns()
        self._client.async_stream_infer(self.model, inputs, request_id=request_id, outputs=self._output,
                                        enable_empty_final_response=True)

    def _arrived(self, result, error) -> None:
        now = time.perf_counter_ns()
        if error is not None:  # tritonclient reports errors without the request: the stream failed
            self._fail_all(str(error))
            return
        response = result.get_response()
        with self._lock:
            entry = self._open.get(response.id)
        if entry is None:
            return
        if any(output.name == "text_output" for output in response.outputs):
            count = result.as_numpy(self.count_output) if self.count_output else None
            entry[0].token_ns.extend([now] * (1 if count is None else _tokens_in(count)))
            entry[0].responses += 1
        if response.parameters["triton_final_response"].bool_param:
            self._finish(response.id, now, "")

    def _finish(self, request_id: str, now: int, error: str) -> None:
        with self._lock:
            entry = self._open.pop(request_id, None)
        if entry is not None:
            entry[0].done_ns, entry[0].error = now, error
            entry[1](entry[0])

    def _fail_all(self, error: str) -> None:
        with self._lock:
            ids = list(self._open)
        for request_id in ids:
            self._finish(request_id, time.perf_counter_ns(), error)

    def close(self) -> None:
        try:
            self._client.stop_stream(cancel_requests=True)
        finally:
            self._client.close()
        self._fail_all("stream closed before the request finished")


class HttpStreamClient:
    """``POST /v2/models/<model>/generate_stream``; each ``data:`` event is one response."""

    def __init__(self, url: str, model: str, *, ignore_eos: bool, timeout_s: float, threads: int,
                 count_output: str | None = None) -> None:
        self.count_output = count_output
        self.host, _, port = url.rpartition(":")
        self.port, self.model, self.ignore_eos, self.timeout_s = int(port), model, ignore_eos, timeout_s
        self.path = f"/v2/models/{model}/generate_stream"
        self._work: queue.Queue = queue.Queue()
        self._threads = [threading.Thread(target=self._serve, daemon=True, name=f"sse-{k}") for k in range(threads)]
        for thread in self._threads:
            thread.start()

    def submit(self, prompt: Prompt, record: RequestRecord, done: Done) -> None:
        fields = {"text_input": prompt.text, "stream": True,
                  "sampling_parameters": sampling_parameters(prompt, self.ignore_eos)}
        if self.count_output:
            fields[f"return_{self.count_output}"] = True
        self._work.put((json.dumps(fields).encode(), record, done))

    def _serve(self) -> None:
        connection = None
        while True:
            item = self._work.get()
            if item is None:
                break
            body, record, done = item
            if connection is None:
                connection = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout_s)
            try:
                self._one(connection, body, record)
            except (OSError, http.client.HTTPException, ValueError) as err:
                record.error = f"{type(err).__name__}: {err}"
                connection.close()
                connection = None
            record.done_ns = record.done_ns or time.perf_counter_ns()
            done(record)
        if connection is not None:
            connection.close()

    def _one(self, connection: http.client.HTTPConnection, body: bytes, record: RequestRecord) -> None:
        record.sent_ns = time.perf_counter_ns()
        connection.request("POST", self.path, body, {"Content-Type": "application/json"})
        response = connection.getresponse()
        if response.status != 200:
            said = response.read()[:300].decode(errors="replace")
            raise ValueError(f"generate_stream answered {response.status}: {said}")
        for raw in response:  # server-sent events: "data: {...}" lines, blank lines between
            now = time.perf_counter_ns()
            if not raw.startswith(b"data:"):
                continue
            event = json.loads(raw[5:])
            if "error" in event:
                record.error = str(event["error"])
            elif "text_output" in event:
                count = event.get(self.count_output) if self.count_output else None
                record.token_ns.extend([now] * (1 if count is None else _tokens_in(count)))
                record.responses += 1
        record.done_ns = time.perf_counter_ns()

    def close(self) -> None:
        for _ in self._threads:
            self._work.put(None)
        for thread in self._threads:
            thread.join(self.timeout_s)


def open_client(protocol: str, url: str, model: str, *, ignore_eos: bool, timeout_s: float,
                in_flight: int, count_output: str | None = None) -> StreamClient:
    """The client for ``protocol`` ("grpc" or "http"); ``in_flight``: most requests at once."""
    if protocol == "grpc":
        return GrpcStreamClient(url, model, ignore_eos=ignore_eos, timeout_s=timeout_s, count_output=count_output)
    if protocol == "http":
        return HttpStreamClient(url, model, ignore_eos=ignore_eos, timeout_s=timeout_s, threads=in_flight,
                                count_output=count_output)
    raise MeasureError(f"protocol {protocol!r} is not one of grpc, http")
