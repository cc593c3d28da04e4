"""The load generator against a real tritonserver (python backend, tiny numpy models written in a
temporary repository): counts add up on the client and on the server, failures are counted when
a model fails on purpose, bad input is refused before anything is sent. No timing thresholds:
the machine is shared, so only counts and identities are asserted."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from dataclasses import replace

from workbench.measure import LoadResult, MeasureError, MeasureSettings, measure
from workbench.measure.engine.loadgen import BLOCKING_MAX_CONCURRENCY
from workbench.measure.engine.stats import server_breakdown
from workbench.tasks import Cancelled

pytestmark = pytest.mark.server

DOUBLE_PY = '''
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", (x * 2).astype(np.float32))]))
        return out
'''

# Fails every third execution on purpose by raising: Triton counts these in its `fail` statistics.
FLAKY_PY = '''
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.seen = 0

    def execute(self, requests):
        self.seen += 1
        if self.seen % 3 == 0:
            raise RuntimeError("flaky on purpose")
        return [pb_utils.InferenceResponse([pb_utils.Tensor("Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy())])
                for r in requests]
'''

# Answers every third request with an error response: Triton's statistics count those as successes.
ERROR_RESPONSE_PY = '''
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.seen = 0

    def execute(self, requests):
        out = []
        for request in requests:
            self.seen += 1
            if self.seen % 3 == 0:
                out.append(pb_utils.InferenceResponse(error=pb_utils.TritonError("error response on purpose")))
            else:
                x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
                out.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", x)]))
        return out
'''

# time_limit_s=None: stop after max_windows windows, as perf_analyzer does (the counts below rely on it);
# short windows: only counts and identities are asserted, and each window keeps both cores busy
FAST = MeasureSettings(window_s=0.1, max_windows=4, warmup_requests=10, time_limit_s=None)


def write_model(repo: Path, name: str, code: str, *, max_batch_size: int, dynamic_batching: bool = False,
                dims: tuple[int, ...] = (4,)) -> None:
    config = model_config_pb2.ModelConfig(name=name, backend="python", max_batch_size=max_batch_size)
    config.input.add(name="X", data_type=model_config_pb2.TYPE_FP32, dims=list(dims))
    config.output.add(name="Y", data_type=model_config_pb2.TYPE_FP32, dims=list(dims))
    config.instance_group.add(count=1, kind=model_config_pb2.ModelInstanceGroup.KIND_CPU)
    if dynamic_batching:
        config.dynamic_batching.max_queue_delay_microseconds = 2000
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(text_format.MessageToString(config))
    (repo / name / "1" / "model.py").write_text(code)


@pytest.fixture(scope="module")
def server(tmp_path_factory, triton_server_module):
    repo = tmp_path_factory.mktemp("repo")
    write_model(repo, "double", DOUBLE_PY, max_batch_size=8)
    write_model(repo, "batched", DOUBLE_PY, max_batch_size=8, dynamic_batching=True)
    write_model(repo, "flaky", FLAKY_PY, max_batch_size=8)
    write_model(repo, "error_response", ERROR_RESPONSE_PY, max_batch_size=8)
    write_model(repo, "single", DOUBLE_PY, max_batch_size=0)
    write_model(repo, "wide", DOUBLE_PY, max_batch_size=0, dims=(-1,))  # any length: bodies past every window
    srv = triton_server_module(repo)
    for name in ("double", "batched", "flaky", "error_response", "single", "wide"):
        srv.load(name)
    return srv


def url(server, protocol: str) -> str:
    return server.grpc_url if protocol == "grpc" else server.http_url


def settled_delta(server, model: str, before: dict, requests: int):
    """Server counters since ``before`` once it has counted ``requests`` requests: Triton updates
    statistics just after the response leaves, so the very last ones may lag a moment."""
    deadline = time.monotonic() + 10
    while True:
        delta = server_breakdown(before, server.stats(model), model)
        if delta.requests + delta.failures >= requests or time.monotonic() > deadline:
            return delta
        time.sleep(0.05)


def assert_consistent(result: LoadResult, batch_size: int) -> None:
    """Identities every result must satisfy, whatever the machine's speed."""
    assert result.sent == result.succeeded + result.failed
    assert 3 <= len(result.windows) <= 4
    # every measured window counts, not only the last ones the stopping rule compared
    assert result.pooled_windows == len(result.windows)
    pooled = result.windows
    assert result.requests == sum(w.requests for w in pooled) == result.latencies_us.size
    assert result.requests > 0
    assert result.latency["count"] == result.requests
    seconds = sum(w.duration_s for w in pooled)
    assert result.throughput == pytest.approx(result.requests * batch_size / seconds)
    lat = np.sort(result.latencies_us)
    assert result.latency["p50"] == lat[int(0.5 * (lat.size - 1) + 0.5)]
    assert result.latency["p99"] == lat[int(0.99 * (lat.size - 1) + 0.5)]
    assert result.latency["avg"] == pytest.approx(lat.mean())
    assert result.stable == (not any(w.startswith("not stable") for w in result.warnings))
    for window in result.windows:
        assert window.requests == window.latencies_us.size
        assert window.throughput == pytest.approx(window.requests * batch_size / window.duration_s)
    row = result.to_row()
    assert row["throughput"] == result.throughput and row["p50_us"] == result.latency["p50"]
    # the columns perf_analyzer's rows share (tests/test_perf_analyzer.py SHARED_KEYS)
    assert {"source", "model", "protocol", "batch_size", "concurrency", "request_rate", "throughput",
            "latency_avg_us", "p50_us", "p90_us", "p95_us", "p99_us", "server_queue_us",
            "server_compute_input_us", "server_compute_infer_us", "server_compute_output_us"} <= set(row)


@pytest.mark.parametrize("protocol", ["grpc", "http"])
@pytest.mark.parametrize("concurrency", [3, BLOCKING_MAX_CONCURRENCY + 2])
def test_concurrency_mode_counts_add_up(server, protocol, concurrency):
    """Both client paths: one blocking thread per slot (low concurrency) and the asyncio loop."""
    before = server.stats("double")
    checked = []

    def check(outputs):
        checked.append(outputs)
        return np.allclose(outputs["Y"], 2.0)

    result = measure(url(server, protocol), "double", [np.ones(4, np.float32)], replace(FAST, protocol=protocol),
                     batch_size=4, concurrency=concurrency, check=check)
    assert_consistent(result, 4)
    assert result.concurrency == concurrency and result.request_rate is None
    assert result.failed == 0 and result.errors == {}
    # server side: every inference the client saw, and nothing else
    delta = settled_delta(server, "double", before, result.sent)
    assert delta.requests == result.succeeded
    assert delta.inferences == result.succeeded * 4
    assert delta.failures == 0
    assert result.server_total is not None and result.server_total.inferences == result.succeeded * 4
    # the pooled windows' breakdown: batch 4 executed as sent, no dynamic batcher
    assert result.server is not None
    assert result.server.avg_batch == 4.0 and set(result.server.batch_histogram) == {4}
    assert result.server.queue_us >= 0 and result.server.compute_infer_us > 0 and result.server.overhead_us >= 0
    # the check saw every warm-up response and the first of each window, all as arrays of the batch
    assert result.checked == len(checked) == 10 + len(result.windows)
    assert result.check_failures == 0
    assert all(o["Y"].shape == (4, 4) for o in checked)


@pytest.mark.parametrize("protocol, distribution", [("grpc", "constant"), ("http", "poisson")])
def test_rate_mode_counts_add_up_and_records_send_delays(server, protocol, distribution):
    before = server.stats("double")
    result = measure(url(server, protocol), "double", {"X": np.ones((2, 4), np.float32)},
                     replace(FAST, protocol=protocol, seed=7), batch_size=2, request_rate=200, distribution=distribution)
    assert_consistent(result, 2)
    assert result.concurrency is None and result.request_rate == 200 and result.distribution == distribution
    delta = settled_delta(server, "double", before, result.sent)
    assert delta.inferences == result.succeeded * 2 and delta.failures == result.failed == 0
    # one send delay per request sent inside the pooled windows, none negative
    pooled = result.windows
    assert result.send_delays_us.size == sum(w.send_delays_us.size for w in pooled) > 0
    assert (result.send_delays_us >= 0).all()
    assert 0.0 <= result.late_fraction <= 1.0


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_failures_are_counted_never_dropped(server, protocol):
    before = server.stats("flaky")
    result = measure(url(server, protocol), "flaky", [np.ones(4, np.float32)], replace(FAST, protocol=protocol),
                     concurrency=2)
    assert result.failed > 0 and result.succeeded > 0
    assert result.sent == result.succeeded + result.failed
    assert sum(result.errors.values()) == result.failed
    assert all("flaky on purpose" in message for message in result.errors)
    assert sum(w.failures for w in result.windows) <= result.failed
    assert result.failures == sum(w.failures for w in result.windows)
    assert any("failed" in w and "flaky on purpose" in w for w in result.warnings)
    delta = settled_delta(server, "flaky", before, result.sent)
    assert delta.failures == result.failed
    assert delta.requests == result.succeeded
    assert delta.inferences == result.succeeded  # failed requests produce no inference


def test_error_responses_are_failures_even_where_server_stats_say_success(server):
    """Triton counts a python-backend error *response* as a successful request in its statistics;
    only the client sees it fail, which is why the client's count is the one reported."""
    before = server.stats("error_response")
    result = measure(server.grpc_url, "error_response", [np.ones(4, np.float32)], FAST, concurrency=2)
    assert result.failed > 0 and result.succeeded > 0
    assert all("error response on purpose" in message for message in result.errors)
    delta = settled_delta(server, "error_response", before, result.sent)
    assert delta.requests + delta.failures == result.sent  # every request reached the server


def test_failed_check_is_counted_and_reported(server):
    result = measure(server.grpc_url, "double", [np.ones(4, np.float32)], FAST,
                     check=lambda outputs: np.allclose(outputs["Y"], 3.0))
    assert result.checked > 0 and result.check_failures == result.checked
    assert result.failed == 0  # the server answered; only the outputs are wrong
    assert any("failed the check" in w for w in result.warnings)


def test_dynamic_batching_breakdown_is_consistent(server):
    before = server.stats("batched")
    result = measure(server.grpc_url, "batched", [np.ones(4, np.float32)], FAST, concurrency=6)
    delta = settled_delta(server, "batched", before, result.sent)
    assert delta.inferences == result.succeeded
    # identities of the statistics extension, whatever batches the scheduler formed
    assert sum(size * n for size, n in delta.batch_histogram.items()) == delta.inferences
    assert sum(delta.batch_histogram.values()) == delta.executions
    assert delta.avg_batch == pytest.approx(delta.inferences / delta.executions)
    assert 1.0 <= delta.avg_batch <= 6.0


def test_model_without_batching(server):
    http = replace(FAST, protocol="http")
    result = measure(server.http_url, "single", [np.arange(4, dtype=np.float64)], http,
                     check=lambda o: np.array_equal(o["Y"], np.arange(4, dtype=np.float32) * 2))
    assert result.failed == 0 and result.check_failures == 0 and result.checked > 0
    with pytest.raises(MeasureError, match="does not batch"):
        measure(server.http_url, "single", [np.ones(4, np.float32)], http, batch_size=2)


def test_callable_inputs_get_the_batch_size(server):
    calls = []

    def make(batch):
        calls.append(batch)
        return [np.full((batch, 4), 0.5, np.float32)]

    result = measure(server.grpc_url, "double", make, FAST, batch_size=3,
                     check=lambda o: o["Y"].shape == (3, 4) and np.allclose(o["Y"], 1.0))
    assert calls == [3]  # built once per load level, not per request
    assert result.check_failures == 0 and result.failed == 0


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(inputs={"Z": np.ones(4, np.float32)}), "no input named 'Z'"),
        (dict(inputs=[np.ones(5, np.float32)]), "input 'X': shape"),
        (dict(inputs=[np.ones(4, np.float32)] * 2), "takes 1 input"),
        (dict(inputs=[np.ones(4, np.complex64)]), "input 'X' is FP32"),
        (dict(inputs=[np.ones((3, 4), np.float32)], batch_size=2), "3 rows but batch_size is 2"),
        (dict(batch_size=9), "exceeds model 'double'"),
        (dict(model="absent"), "not ready"),
        (dict(model_version="7"), "not ready"),
        (dict(concurrency=2, request_rate=10), "not both"),
        (dict(settings=dict(protocol="udp")), "protocol 'udp'"),
        (dict(settings=dict(max_windows=2)), "max_windows"),
        (dict(settings=dict(window_s=float("inf"))), "window_s must be a positive number"),
        (dict(settings=dict(warmup_requests=-1)), "warmup_requests"),
        (dict(settings=dict(seed=1.5)), "seed"),
        (dict(percentile=0), "percentile"),
    ],
)
def test_bad_input_is_refused_before_any_request(server, kwargs, message):
    before = server.stats("double")
    args = dict(model="double", inputs=[np.ones(4, np.float32)]) | kwargs
    changes = args.pop("settings", {})
    with pytest.raises(MeasureError, match=message):
        measure(server.grpc_url, args.pop("model"), args.pop("inputs"), replace(FAST, **changes), **args)
    after = server.stats("double")
    assert server_breakdown(before, after, "double").requests == 0


def test_settings_are_one_checked_value_not_a_dict(server):
    with pytest.raises(MeasureError, match="settings must be a MeasureSettings, got dict"):
        measure(server.grpc_url, "double", [np.ones(4, np.float32)], FAST.to_dict())


def test_unreachable_server_is_a_clear_error(server):
    from workbench.server import find_free_port

    with pytest.raises(MeasureError, match="cannot reach Triton at grpc://"):
        measure(f"127.0.0.1:{find_free_port()}", "double", [np.ones(4, np.float32)], FAST)


def test_a_server_gone_between_ready_and_metadata_is_a_clear_error():
    """A server that dies right after answering "ready" (CI run 14: killed under a sweep as a point
    began): the metadata request finds nobody; a MeasureError, never tritonclient's exception."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class ReadyThenGone(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:
            pass

        def do_GET(self) -> None:
            if self.path.endswith("/ready"):
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()
            else:  # the process is gone: the connection closes with no answer
                self.close_connection = True

    gone = ThreadingHTTPServer(("127.0.0.1", 0), ReadyThenGone)
    threading.Thread(target=gone.serve_forever, daemon=True).start()
    try:
        url = f"127.0.0.1:{gone.server_address[1]}"
        with pytest.raises(MeasureError, match=f"cannot reach Triton at http://{url}"):
            measure(url, "double", [np.ones(4, np.float32)], replace(FAST, protocol="http"))
    finally:
        gone.shutdown()
        gone.server_close()


def test_cancel_stops_and_drains(server):
    cancel = threading.Event()
    before = server.stats("double")
    seen = []

    def progress(done, total, message):
        seen.append((done, total, message))
        if done >= 1:
            cancel.set()

    with pytest.raises(Cancelled):
        measure(server.grpc_url, "double", [np.ones(4, np.float32)],
                MeasureSettings(window_s=0.2, max_windows=10, warmup_requests=5), concurrency=4, progress=progress,
                cancel=cancel)
    assert seen[0][0] == 0 and seen[-1][0] == 1 and seen[-1][1] == 10
    # every request that went out came back before measure() returned: nothing more reaches the server.
    # Triton counts a request once it is released, which can come just after its response was sent, so
    # the counts are read once they stand still (a sender left running would never let them)
    first, deadline = server.stats("double"), time.monotonic() + 5
    while time.monotonic() < deadline:
        time.sleep(0.1)
        now = server.stats("double")
        if server_breakdown(first, now, "double").requests == 0:
            break
        first = now
    time.sleep(0.3)
    assert server_breakdown(first, server.stats("double"), "double").requests == 0
    assert server_breakdown(before, first, "double").requests > 0


def test_works_from_inside_a_running_event_loop(server):
    """A Jupyter cell runs inside an event loop; measure() must still work there."""
    async def cell():
        return measure(server.grpc_url, "double", [np.ones(4, np.float32)], FAST)

    result = asyncio.run(cell())
    assert result.succeeded > 0 and result.sent == result.succeeded + result.failed


def test_percentile_drives_stability_and_is_reported(server):
    result = measure(server.grpc_url, "double", [np.ones(4, np.float32)], FAST, percentile=75, model_version="1")
    assert result.server is not None and result.server.requests > 0  # version-1 statistics were found
    assert "p75" in result.latency
    lat = np.sort(result.latencies_us)
    assert result.latency["p75"] == lat[int(0.75 * (lat.size - 1) + 0.5)]
    assert result.to_row()["p75_us"] == result.latency["p75"]


def test_a_rate_the_generator_cannot_keep_is_flagged(server):
    """100000 requests/s is far beyond what one Python event loop can send: the schedule slips,
    the send delays show it and the result says so (the requests that did go out all count)."""
    result = measure(server.grpc_url, "double", [np.ones(4, np.float32)],
                     MeasureSettings(window_s=0.1, max_windows=3, warmup_requests=10, time_limit_s=None),
                     request_rate=100_000)
    assert result.sent == result.succeeded + result.failed
    assert result.late_fraction > 0.5
    assert any("could not keep 100000 requests/s" in w for w in result.warnings)


# -- the HTTP/2 gRPC sender against grpcio's channel and tritonclient, on the same bytes -------------

def _infer_request(model: str, x: np.ndarray, *, datatype: str = "FP32", shape=None) -> bytes:
    from tritonclient.grpc import service_pb2

    request = service_pb2.ModelInferRequest(model_name=model)
    entry = request.inputs.add(name="X", datatype=datatype)
    entry.shape.extend(x.shape if shape is None else shape)
    request.raw_input_contents.append(x.tobytes())
    request.outputs.add(name="Y")
    return request.SerializeToString()


@pytest.mark.parametrize("model, x", [("double", np.arange(32, dtype=np.float32).reshape(8, 4)),
                                      # 12 MiB each way: past Triton's 8 MiB stream window and frame size
                                      ("wide", np.linspace(-1, 1, 3 << 20, dtype=np.float32))])
def test_h2_sender_outputs_equal_tritonclients(server, model, x):
    import tritonclient.grpc as grpcclient

    from workbench.measure.engine.loadgen.senders import GrpcH2Sender, GrpcSender
    from workbench.measure.engine.loadgen.wire import grpc_outputs

    item = grpcclient.InferInput("X", list(x.shape), "FP32")
    item.set_data_from_numpy(x)
    client = grpcclient.InferenceServerClient(server.grpc_url)
    expected = client.infer(model, [item]).as_numpy("Y")
    client.close()
    message = _infer_request(model, x)
    ours, reference = GrpcH2Sender(server.grpc_url, message, 30), GrpcSender(server.grpc_url, message, 30)
    try:
        ours._open()
        if model == "wide":  # the first body must wait for WINDOW_UPDATEs, frame by frame
            assert len(ours.body) > min(ours.peer_initial, ours.peer_window)
            assert len(ours.body) > ours.peer_frame
        for _ in range(3):  # the same connection, stream after stream
            ok, payload = ours.send()
            assert ok, payload
            np.testing.assert_array_equal(grpc_outputs(payload)["Y"], expected)
        assert ours.next_stream == 7  # three streams on one connection
        ok, payload = reference.send()
        assert ok and grpc_outputs(payload)["Y"].tobytes() == expected.tobytes() == (x * 2).tobytes()
    finally:
        ours.close()
        reference.close()


@pytest.mark.parametrize("model, message", [
    ("absent", _infer_request("absent", np.ones((1, 4), np.float32))),
    ("double", _infer_request("double", np.ones((1, 4), np.float32), shape=[1, 5])),  # 16 bytes for 20
    ("double", _infer_request("double", np.ones((1, 4), np.float32), datatype="INT64")),
    ("flaky", _infer_request("flaky", np.ones((1, 4), np.float32))),
])
def test_h2_sender_errors_read_as_grpcios(server, model, message):
    """The server's grpc-status and grpc-message, in the words grpcio gives them."""
    from workbench.measure.engine.loadgen.senders import GrpcH2Sender, GrpcSender

    ours, reference = GrpcH2Sender(server.grpc_url, message, 30), GrpcSender(server.grpc_url, message, 30)
    try:
        if model == "flaky":  # fails one execution in three: three sends each see one failure
            outcomes = [ours.send() for _ in range(3)] + [reference.send() for _ in range(3)]
            errors = [payload for ok, payload in outcomes if not ok]
            assert len(errors) == 2 and errors[0] == errors[1] and "flaky on purpose" in errors[0]
            return
        theirs = reference.send()
        mine = ours.send()
        assert theirs[0] is False and mine == theirs
        assert ours.send() == theirs  # and the connection still serves after an error
    finally:
        ours.close()
        reference.close()


def test_h2_sender_concurrency_4_is_4_connections(server):
    """Like perf_analyzer's threads: every slot its own connection, and the server counts them all."""
    from workbench.measure.engine.loadgen.senders import make_sender

    message = _infer_request("double", np.ones((2, 4), np.float32))
    senders = [make_sender("grpc", message, server.grpc_url, 30, blocking=True) for _ in range(4)]
    before = server.stats("double")
    outcomes: list = []

    def run(sender):
        outcomes.extend(sender.send() for _ in range(25))

    threads = [threading.Thread(target=run, args=(s,)) for s in senders]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    try:
        assert len(outcomes) == 100 and all(ok for ok, _ in outcomes)
        assert len({s.sock.getsockname() for s in senders}) == 4
        assert all(s.next_stream == 51 for s in senders)  # 25 streams on each connection
        assert settled_delta(server, "double", before, 100).inferences == 200
    finally:
        for sender in senders:
            sender.close()


def test_a_server_that_goes_away_mid_point_is_reported_not_hung(tmp_path, triton_server):
    """The server stops while four slots are sending: measure() returns, the failures counted.
    (More latencies asked for than 12 windows can hold, so the point is still running when the server
    stops, however fast the machine.)"""
    write_model(tmp_path, "double", DOUBLE_PY, max_batch_size=8)
    srv = triton_server(tmp_path)
    srv.load("double")
    outcome: dict = {}

    def run():
        try:
            outcome["result"] = measure(srv.grpc_url, "double", [np.ones(4, np.float32)],
                                        MeasureSettings(window_s=0.5, max_windows=12, warmup_requests=5,
                                                        time_limit_s=None, min_latencies=10**7),
                                        concurrency=4, timeout_s=5)
        except MeasureError as err:
            outcome["error"] = err

    thread = threading.Thread(target=run)
    thread.start()
    time.sleep(2.0)
    srv.stop(timeout=10)
    thread.join(60)
    assert not thread.is_alive()  # 12 windows of 0.5 s: far less than a minute unless a slot hangs
    if "result" in outcome:
        result = outcome["result"]
        assert result.failed > 0 and result.sent == result.succeeded + result.failed
        assert any("closed the connection" in m or "going away" in m or "Connection" in m for m in result.errors)
    else:
        assert "error" in outcome


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_a_sender_cut_off_at_the_end_sends_nothing_more(server, protocol):
    """A slot still out when a point ends is cut off; it must not retry on a new connection (that
    request would reach the server after the point, uncounted)."""
    from workbench.measure.engine.loadgen.senders import Admin, make_sender
    from workbench.measure.engine.loadgen.slots import _abort
    from workbench.measure.engine.loadgen.wire import grpc_request, http_request

    plan = type("Plan", (), {"model": "double", "version": "", "url": url(server, protocol), "protocol": protocol,
                             "timeout_s": 30.0})
    admin = Admin(plan)
    iface = admin.interface()
    admin.close()
    x = [np.ones((1, 4), np.float32)]
    request = grpc_request(plan, iface, x) if protocol == "grpc" else http_request(plan, iface, x)
    sender = make_sender(protocol, request, url(server, protocol), 30, blocking=True)
    try:
        start = server.stats("double")
        assert sender.send()[0]
        settled_delta(server, "double", start, 1)  # that request counted before the baseline is taken
        before = server.stats("double")
        _abort(sender)
        ok, message = sender.send()
        assert not ok and message
        time.sleep(0.3)
        assert server_breakdown(before, server.stats("double"), "double").requests == 0
    finally:
        sender.close()
