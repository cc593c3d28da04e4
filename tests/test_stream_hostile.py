"""The streaming engine against servers that misbehave: a tiny HTTP server written here (on
127.0.0.1, a thread of this process) answers generate_stream the way a broken or hostile server
would: dripping a byte at a time, never answering, sending events that are not JSON objects,
claiming a billion tokens in one event, an endless line, a stream that ends short. Every point
must end in time (the request timeout and the time limit bound it, warm-up included), fail the
requests with a one-line reason, never leave its threads running, and never be a usable point.

Hypothesis drives one event line at a time through the same reader (``clients.take_event``)
under a time limit (its deadline) and a memory limit (tracemalloc's peak per example).
"""

from __future__ import annotations

import json
import socket
import threading
import time
import tracemalloc
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workbench.measure.engine.measure_settings import MeasureError, MeasureSettings
from workbench.measure.engine.streaming import (
    Lengths,
    WordTokenizer,
    build_prompts,
    measure_stream,
)
from workbench.measure.engine.streaming.clients import (
    MAX_EVENT_BYTES,
    StreamError,
    take_event,
)
from workbench.measure.engine.streaming.load import build_stream_plan
from workbench.measure.engine.streaming.stream_results import RequestRecord, Slo
from workbench.measure.llm.rows import LlmRow, usable_llm
from workbench.server.control import ModelControl, ServerError

pytestmark = pytest.mark.timeout(120)

MAX_TOKENS = 5
TIMEOUT_S = 1.5  # the request timeout each point is given
TIME_LIMIT_S = 1.0
# warm-up (one request timeout) + the windows' time limit + the last requests' timeout + slack
POINT_BOUND_S = TIMEOUT_S + TIME_LIMIT_S + TIMEOUT_S + 3.0


def _event(payload) -> bytes:
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


class _Hostile(BaseHTTPRequestHandler):
    """generate_stream as the model name in the path says: /v2/models/<how>/generate_stream."""

    protocol_version = "HTTP/1.1"
    lock = threading.Lock()
    served = 0  # requests "skewed" answered

    def log_message(self, *args) -> None:  # quiet
        pass

    def do_POST(self) -> None:
        how = self.path.split("/")[3]
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if how == "silent":
            time.sleep(TIMEOUT_S * 4)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        try:
            self._body(how)
        except OSError:  # the client gave up on us: as it should
            pass
        self.close_connection = True

    def do_GET(self) -> None:  # /metrics that never ends
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Connection", "close")
        self.end_headers()
        line = b"# HELP nv_inference_count x\n" * 1024
        try:
            for _ in range(1 << 20):  # 28 GiB, were it read to the end
                self.wfile.write(line)
        except OSError:  # the client stopped reading: as it should
            pass
        self.close_connection = True

    def _body(self, how: str) -> None:
        w = self.wfile
        if how == "good":
            for _ in range(MAX_TOKENS):
                w.write(_event({"text_output": "w"}))
        elif how == "skewed":  # every third request starts 0.1 s late, the others at once
            with _Hostile.lock:
                _Hostile.served += 1
                late = _Hostile.served % 3 == 0
            if late:
                time.sleep(0.1)
            for _ in range(MAX_TOKENS):
                w.write(_event({"text_output": "w"}))
        elif how == "short":  # the stream ends after 3 of the 5 tokens asked, without an error
            for _ in range(3):
                w.write(_event({"text_output": "w"}))
        elif how == "drip":  # a token, then a byte every 0.2 s, never a whole line
            w.write(_event({"text_output": "w"}))
            for _ in range(int(TIMEOUT_S * 4 / 0.2)):
                w.write(b"d")
                w.flush()
                time.sleep(0.2)
        elif how == "number":
            w.write(b"data: 5\n\n")
        elif how == "billion":
            w.write(_event({"text_output": "w", "num_output_tokens": 10 ** 9}))
        elif how == "endless":  # one line that never ends, as fast as the socket takes it
            chunk = b"x" * 65536
            for _ in range(4 * MAX_EVENT_BYTES // len(chunk)):
                w.write(chunk)
        w.flush()


@pytest.fixture(scope="module")
def hostile():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hostile)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def prompts():
    return build_prompts(WordTokenizer(), 4, Lengths(8), Lengths(MAX_TOKENS), seed=1)


def _point(url: str, how: str, prompts, count_output: str | None = None, concurrency: int = 2):
    settings = MeasureSettings(protocol="http", window_s=0.5, stable_windows=2, max_windows=2,
                               time_limit_s=TIME_LIMIT_S, min_latencies=0)
    threads_before = set(threading.enumerate())
    started = time.monotonic()
    result = measure_stream(url, how, prompts, settings, concurrency=concurrency, timeout_s=TIMEOUT_S,
                            count_output=count_output)
    took = time.monotonic() - started
    time.sleep(0.3)  # the reader threads were told to end; give them a moment
    left = [t for t in set(threading.enumerate()) - threads_before if t.name.startswith(("sse-", "stream-sender"))]
    return result, took, left


def test_a_well_behaved_server_gives_a_usable_point(hostile, prompts):
    result, took, left = _point(hostile, "good", prompts)
    assert result.usable and result.failures == 0 and result.requests > 0, result.unusable
    assert took < POINT_BOUND_S and not left


@pytest.mark.parametrize("how, reason", [
    ("silent", "request timeout"),
    ("drip", "request timeout"),
    ("number", "not a JSON object: b'data: 5"),
    ("billion", "claimed 1000000000 tokens"),
    ("endless", f"longer than {MAX_EVENT_BYTES} bytes"),
])
def test_a_misbehaving_server_fails_the_point_in_time_with_one_line(hostile, prompts, how, reason):
    result, took, left = _point(hostile, how, prompts, count_output="num_output_tokens" if how == "billion" else None)
    assert took < POINT_BOUND_S, f"{how}: the point took {took:.1f} s"
    assert not left, f"{how}: threads still running: {left}"
    assert not result.usable and result.requests == 0
    assert result.failures >= 0 and result.client_total_requests >= 1
    said = " | ".join(result.warnings)
    assert reason in said and all("\n" not in w for w in result.warnings), said
    assert result.stopped  # why it ended is said
    assert "NOT A MEASURED POINT" in result.summary()


class _Breaks(list):
    """Prompts whose fourth read raises: the sender thread meets an error of its own."""

    def __getitem__(self, index):
        self.reads = getattr(self, "reads", 0) + 1
        if self.reads > 3:
            raise RuntimeError("prompt store went away")
        return super().__getitem__(index)


def test_a_sender_that_dies_ends_the_point_saying_why(hostile, prompts):
    result, took, left = _point(hostile, "good", _Breaks(prompts))
    assert took < POINT_BOUND_S and not left
    assert not result.usable and "the sender stopped: RuntimeError: prompt store went away" in result.unusable
    assert result.stopped and "sender stopped" in result.stopped


class _Slow(list):
    """Prompts read slowly (0.15 s each): a client that cannot keep its one user busy."""

    def __getitem__(self, index):
        time.sleep(0.15)
        return super().__getitem__(index)


def test_a_few_slow_starts_at_concurrency_one_are_a_measured_point(hostile, prompts):
    """A third of the requests start 0.1 s late: the median pace is many times the total, yet the
    one user was busy throughout, so the point stands (a CI run refused such a point)."""
    result, took, left = _point(hostile, "skewed", prompts, concurrency=1)
    assert took < POINT_BOUND_S and not left
    assert result.tokens_per_user_per_s > 2 * result.output_tokens_per_s > 0  # what the old rule refused
    assert result.usable and result.failures == 0, result.unusable


def test_a_client_that_leaves_its_user_idle_is_not_a_measured_point(hostile, prompts):
    result, took, left = _point(hostile, "good", _Slow(prompts), concurrency=1)
    assert took < POINT_BOUND_S and not left
    assert not result.usable and "the users were idle most of the point" in result.unusable, result.unusable
    assert "at concurrency 1" in result.unusable


def test_a_stream_that_ends_short_is_not_a_measured_point(hostile, prompts):
    result, took, left = _point(hostile, "short", prompts)
    assert took < POINT_BOUND_S and not left
    assert not result.usable
    assert "received 3 of 5" in result.unusable and "#0" in result.unusable
    # one user's pace from the tokens received, not asked for
    e2e = sorted(r.e2e_ms for r in result.records if r.ok)
    assert result.tokens_per_user_per_s <= 3 * 1000 / e2e[0] + 1e-6
    # an LLM sweep saves it with its reason, figures kept, and no answer counts it
    point = SimpleNamespace(concurrency=2, columns=lambda: {
        "variant": "v", "max_num_seqs": 1, "tensor_parallel": 1, "instances": 1, "cores_per_instance": 1,
        "core_start": None, "core_end": None, "concurrency": 2, "request_rate": None, "input_tokens": 8,
        "output_tokens": MAX_TOKENS})
    row = LlmRow.measured(point, result, next(iter(result.goodput)))
    assert row.error == f"not a measured point: {result.unusable}"
    assert row.output_tokens_per_s == result.output_tokens_per_s > 0 and not usable_llm(row.to_dict())


def test_an_endless_metrics_page_is_refused_in_bounded_memory(hostile):
    control = ModelControl(hostile, "http", metrics_url=f"http://{hostile}/metrics")
    tracemalloc.start()
    started = time.monotonic()
    try:
        with pytest.raises(ServerError, match="ran past 16 MiB"):
            control.metrics()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert time.monotonic() - started < 15 and peak < 64 << 20


def test_a_grpc_peer_that_never_answers_fails_the_point_in_time(prompts):
    """A listener that accepts and says nothing: no HTTP/2, no response, the requests' deadlines end it."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    url = f"127.0.0.1:{listener.getsockname()[1]}"
    try:
        settings = MeasureSettings(protocol="grpc", window_s=0.5, stable_windows=2, max_windows=2,
                                   time_limit_s=TIME_LIMIT_S, min_latencies=0)
        started = time.monotonic()
        result = measure_stream(url, "silent", prompts, settings, concurrency=1, timeout_s=TIMEOUT_S)
        took = time.monotonic() - started
    finally:
        listener.close()
    assert took < POINT_BOUND_S, took
    assert not result.usable and result.requests == 0
    assert any("request timeout" in w or "failed" in w for w in result.warnings), result.warnings


@pytest.mark.parametrize("rate", [1e-300, 1e308, float("inf"), 1e-9])
def test_request_rates_past_what_can_be_sent_are_refused(rate):
    with pytest.raises(MeasureError, match="request_rate must be"):
        _plan(rate)


def _plan(rate: float):
    return build_stream_plan("127.0.0.1:1", "m", MeasureSettings(), concurrency=None, request_rate=rate,
                             distribution="constant", slos=(Slo(),), ignore_eos=True, timeout_s=5.0)


def test_the_warm_up_of_the_highest_rate_accepted_is_bounded():
    plan = _plan(100000.0)
    assert plan.load.warmup_requests <= 1000


# -- one event at a time, Hypothesis ---------------------------------------------------------------

_json = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=20),
                     lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner, max_size=5),
                     max_leaves=30)
_counts = st.one_of(st.integers(min_value=-10, max_value=10 ** 30), st.floats(allow_nan=True, allow_infinity=True),
                    st.lists(st.integers(min_value=-5, max_value=10 ** 12), max_size=50), st.text(max_size=10), _json)
_events = st.one_of(
    _json.map(lambda v: b"data: " + json.dumps(v).encode()),
    st.builds(lambda c: b"data: " + json.dumps({"text_output": "w", "num_output_tokens": c}).encode(), _counts),
    st.builds(lambda n: b"data: " + b"[" * n + b"]" * n, st.integers(min_value=0, max_value=100_000)),
    st.binary(max_size=200),
    st.just(b"data: " + b"1" * (MAX_EVENT_BYTES + 1)),
)


@settings(max_examples=300, deadline=500, suppress_health_check=[HealthCheck.too_slow])
@given(lines=st.lists(_events, min_size=1, max_size=8), max_tokens=st.integers(min_value=1, max_value=64),
       count_output=st.sampled_from([None, "num_output_tokens"]))
def test_no_event_can_crash_the_reader_or_claim_what_was_not_asked(lines, max_tokens, count_output):
    record = RequestRecord(0, 1, max_tokens)
    tracemalloc.start()
    try:
        for line in lines:
            try:
                take_event(line, record, count_output, time.perf_counter_ns())
            except StreamError as err:  # the one kind of refusal, in one line
                assert "\n" not in str(err) and len(str(err)) < 200
                break
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(record.token_ns) <= max_tokens  # never more tokens than asked
    assert record.responses <= len(lines)
    assert peak < 64 * MAX_EVENT_BYTES  # no server count sizes memory
