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

Nothing the server sends is trusted to size memory or time: a request has a deadline
(``timeout_s`` from its send, however slowly the bytes drip), an event line is at most
``MAX_EVENT_BYTES``, a response's token count must be whole numbers within the tokens the request
still has room for, and an event that is not a JSON object fails its request with a one-line
reason. The reader threads and callbacks never die on what they read: any error fails that
request.
"""

from __future__ import annotations

import http.client
import itertools
import json
import queue
import socket
import threading
import time
from collections.abc import Callable
from typing import Protocol

import numpy as np

from workbench.measure.engine.measure_settings import MeasureError
from workbench.measure.engine.streaming.prompts import Prompt
from workbench.measure.engine.streaming.stream_results import RequestRecord
from workbench.refusals import WorkbenchError

__all__ = [
    "StreamClient",
    "GrpcStreamClient",
    "HttpStreamClient",
    "sampling_parameters",
    "open_client",
    "MAX_EVENT_BYTES",
    "StreamError",
    "tokens_in",
    "take_event",
]

Done = Callable[[RequestRecord], None]
# One server-sent event line at most (a vLLM response carries a few tokens' text: far below).
MAX_EVENT_BYTES = 1 << 20


class StreamError(WorkbenchError, ValueError):
    """What the server sent cannot be a response to this request (the one-line reason)."""


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def tokens_in(count: object, room: int) -> int:
    """Tokens in one response from its count output (a whole number >= 0, or a list of them),
    at most ``room`` (the tokens the request may still receive); StreamError otherwise."""
    try:
        values = np.asarray(count)
        whole = values.dtype.kind in "iu" or (
            values.dtype.kind == "f" and bool(np.all(np.isfinite(values))) and bool(np.all(values == np.round(values)))
        )
    except (ValueError, TypeError, OverflowError, RecursionError):
        whole = False
    if not whole or values.size > 4096:
        raise StreamError(f"token count {_short(count)} is not a whole number")
    if np.any(values < 0):
        raise StreamError(f"token count {_short(count)} is negative")
    total = float(np.sum(values, dtype=np.float64))
    if total > room:
        claimed = f"{total:.0f}" if total < 1e15 else f"{total:.3g}"  # one line, however large the count
        raise StreamError(f"a response claimed {claimed} tokens; the request had room for {room} more (max_tokens)")
    return int(total)


def _add_tokens(record: RequestRecord, count: object | None, now: int) -> None:
    """One response's tokens, stamped ``now``: one, or its count output's (checked)."""
    room = max(0, record.max_tokens - len(record.token_ns))
    tokens = 1 if count is None else tokens_in(count, room)
    if count is None and room < 1:
        raise StreamError(f"more responses than the {record.max_tokens} tokens asked for (max_tokens)")
    record.token_ns.extend([now] * tokens)
    record.responses += 1


def sampling_parameters(prompt: Prompt, ignore_eos: bool) -> str:
    """The vLLM backend's sampling parameters for one request (JSON text)."""
    params: dict = {"max_tokens": prompt.max_tokens}
    if ignore_eos:
        params["ignore_eos"] = True
    return json.dumps(params)


class StreamClient(Protocol):
    """Sends one request, stamps its tokens into ``record``, calls ``done(record)`` when it ends."""

    def submit(self, prompt: Prompt, record: RequestRecord, done: Done) -> None: ...

    def abandon(self, record: RequestRecord) -> None:
        """Stop reading ``record``'s request (its deadline passed): nothing more is read into it."""

    def close(self) -> None: ...


class GrpcStreamClient:
    """One gRPC stream for every request (tritonclient's own stream, callbacks on its thread).

    The stream has no deadline (``timeout_s`` is the point's: requests still open when it ends
    are waited for that long). tritonclient hands an error response to the callback without its
    request id, so an error fails every request then open: exact at concurrency 1 and for a
    broken stream, an over-count of failures when one of several requests fails alone."""

    def __init__(
        self, url: str, model: str, *, ignore_eos: bool, timeout_s: float, count_output: str | None = None
    ) -> None:
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
        inputs = [
            self._tensor("text_input", prompt.text.encode(), "BYTES"),
            self._tensor("stream", True, "BOOL"),
            self._tensor("sampling_parameters", sampling_parameters(prompt, self.ignore_eos).encode(), "BYTES"),
        ]
        if self.count_output:
            inputs.append(self._tensor(f"return_{self.count_output}", True, "BOOL"))
        with self._lock:
            self._open[request_id] = (record, done)
        record.sent_ns = time.perf_counter_ns()
        self._client.async_stream_infer(
            self.model, inputs, request_id=request_id, outputs=self._output, enable_empty_final_response=True
        )

    def _arrived(self, result, error) -> None:
        now = time.perf_counter_ns()
        if error is not None:  # tritonclient reports errors without the request: the stream failed
            self._fail_all(str(error))
            return
        request_id = ""
        try:
            response = result.get_response()
            request_id = response.id
            with self._lock:
                entry = self._open.get(request_id)
            if entry is None:
                return
            if any(output.name == "text_output" for output in response.outputs):
                count = result.as_numpy(self.count_output) if self.count_output else None
                if self.count_output and count is None:
                    raise StreamError(f"a response without its {self.count_output} output")
                _add_tokens(entry[0], count, now)
            final = response.parameters.get("triton_final_response")
            if final is not None and final.bool_param:
                self._finish(request_id, now, "")
        except Exception as err:  # this callback must not die: what it could not read fails the request
            reason = f"{type(err).__name__}: {err}"
            if request_id:
                self._finish(request_id, now, reason)
            else:
                self._fail_all(reason)

    def _finish(self, request_id: str, now: int, error: str) -> None:
        with self._lock:
            entry = self._open.pop(request_id, None)
        if entry is not None and not entry[0].done_ns:  # a request failed by its deadline stays failed
            entry[0].done_ns, entry[0].error = now, error
            entry[1](entry[0])

    def abandon(self, record: RequestRecord) -> None:
        with self._lock:
            for request_id, (open_record, _) in list(self._open.items()):
                if open_record is record:
                    del self._open[request_id]

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

    def __init__(
        self, url: str, model: str, *, ignore_eos: bool, timeout_s: float, threads: int, count_output: str | None = None
    ) -> None:
        self.count_output = count_output
        self.host, _, port = url.rpartition(":")
        self.port, self.model, self.ignore_eos, self.timeout_s = int(port), model, ignore_eos, timeout_s
        self.path = f"/v2/models/{model}/generate_stream"
        self._work: queue.Queue = queue.Queue()
        # id(record) -> its socket (kept here: a "Connection: close" answer drops it from the connection)
        self._reading: dict[int, socket.socket] = {}
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._serve, daemon=True, name=f"sse-{k}") for k in range(threads)]
        for thread in self._threads:
            thread.start()

    def submit(self, prompt: Prompt, record: RequestRecord, done: Done) -> None:
        fields = {
            "text_input": prompt.text,
            "stream": True,
            "sampling_parameters": sampling_parameters(prompt, self.ignore_eos),
        }
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
            except Exception as err:  # this thread must not die: what it could not read fails the request
                record.error = record.error or _reason(err, self.timeout_s)
                connection.close()
                connection = None
            finally:
                with self._lock:
                    self._reading.pop(id(record), None)
            if record.error and connection is not None:  # the rest of the stream is unread
                connection.close()
                connection = None
            record.done_ns = record.done_ns or time.perf_counter_ns()
            done(record)
        if connection is not None:
            connection.close()

    def _one(self, connection: http.client.HTTPConnection, body: bytes, record: RequestRecord) -> None:
        record.sent_ns = time.perf_counter_ns()
        deadline = record.sent_ns + int(self.timeout_s * 1e9)

        connection.request("POST", self.path, body, {"Content-Type": "application/json"})
        sock = connection.sock
        if sock is not None:
            with self._lock:
                self._reading[id(record)] = sock

        def bounded() -> None:  # each read waits at most until the request's deadline
            left = (deadline - time.perf_counter_ns()) / 1e9
            if left <= 0:
                raise TimeoutError(f"no final response within the {self.timeout_s:g} s request timeout")
            if sock is not None:
                sock.settimeout(left)

        bounded()
        response = connection.getresponse()
        if response.status != 200:
            said = response.read(300).decode(errors="replace")
            raise StreamError(f"generate_stream answered {response.status}: {' '.join(said.split())}")
        while not record.done_ns:  # server-sent events: "data: {...}" lines, blank lines between
            bounded()
            raw = response.readline(MAX_EVENT_BYTES + 1)
            now = time.perf_counter_ns()
            if not raw:
                break
            take_event(raw, record, self.count_output, now)
        record.done_ns = record.done_ns or time.perf_counter_ns()

    def abandon(self, record: RequestRecord) -> None:
        """Cut the connection under a read that drips past its deadline (a socket timeout bounds
        one read, not a line that arrives a byte at a time)."""
        with self._lock:
            sock = self._reading.get(id(record))
        _cut(sock)

    def close(self) -> None:
        for _ in self._threads:
            self._work.put(None)
        with self._lock:
            reading = list(self._reading.values())
        for sock in reading:  # requests still open at the end are abandoned, not waited for
            _cut(sock)
        for thread in self._threads:
            thread.join(self.timeout_s)


def take_event(raw: bytes, record: RequestRecord, count_output: str | None, now: int) -> None:
    """One line of a generate_stream body into ``record``: a ``data:`` event's tokens (stamped
    ``now``) or its error; other lines (blank, comments) are skipped. StreamError (one line) for a
    line too long, an event that is not a JSON object, or a token count that cannot be."""
    if len(raw) > MAX_EVENT_BYTES:
        raise StreamError(f"an event line longer than {MAX_EVENT_BYTES} bytes")
    if not raw.startswith(b"data:"):
        return
    try:
        event = json.loads(raw[5:])
    except (ValueError, RecursionError):
        raise StreamError(f"an event that is not JSON: {_short(raw[:80])}") from None
    if not isinstance(event, dict):
        raise StreamError(f"an event that is not a JSON object: {_short(raw[:80])}")
    if "error" in event:
        record.error = " ".join(str(event["error"]).split())[:300] or "the server sent an empty error"
    elif "text_output" in event:
        count = event.get(count_output) if count_output else None
        if count_output and count is None:
            raise StreamError(f"an event without its {count_output} output")
        _add_tokens(record, count, now)


def _cut(sock: socket.socket | None) -> None:
    """End the reads on ``sock`` now (its reader sees the end of the stream)."""
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def _reason(err: Exception, timeout_s: float) -> str:
    """A failed request's one-line reason."""
    if isinstance(err, TimeoutError) or "timed out" in str(err):
        return f"no final response within the {timeout_s:g} s request timeout"
    return " ".join(f"{type(err).__name__}: {err}".split())[:300]


def open_client(
    protocol: str,
    url: str,
    model: str,
    *,
    ignore_eos: bool,
    timeout_s: float,
    in_flight: int,
    count_output: str | None = None,
) -> StreamClient:
    """The client for ``protocol`` ("grpc" or "http"); ``in_flight``: most requests at once."""
    if protocol == "grpc":
        return GrpcStreamClient(url, model, ignore_eos=ignore_eos, timeout_s=timeout_s, count_output=count_output)
    if protocol == "http":
        return HttpStreamClient(
            url, model, ignore_eos=ignore_eos, timeout_s=timeout_s, threads=in_flight, count_output=count_output
        )
    raise MeasureError(f"protocol {protocol!r} is not one of grpc, http")
