"""The streaming load generator (workbench.measure.engine.streaming) against a REAL tritonserver
serving a decoupled Python-backend model that streams words at a known pace (the project's paced
model, ``streaming.paced``, with no slow requests): the first after FIRST_MS, then one every
GAP_MS, as many as ``sampling_parameters``' max_tokens asks. Its inputs and outputs are shaped
like Triton's vLLM backend (text_input, stream, sampling_parameters in;
text_output streamed out), and it counts every word it sends on Triton's /metrics (a Python
backend custom metric), the way the vLLM backend counts its generation tokens: that count is the
server's own, read beside the client's.

The tests set TTFT and ITL and read them back within a tolerance generous for a shared 2-core
machine, over gRPC streaming and HTTP generate_stream, in concurrency and rate modes, with goodput
under an SLO the pace meets and under ones it cannot. One server serves the module.
"""

from __future__ import annotations

import math
import sys
import threading
import time

import numpy as np
import pytest

from workbench.measure.engine.streaming import (
    Lengths,
    ModelTokenizer,
    Slo,
    StreamResult,
    WordTokenizer,
    build_prompts,
    measure_stream,
)
from workbench.measure.engine.streaming.load import build_stream_plan
from workbench.measure.engine.measure_settings import MeasureError, MeasureSettings
from workbench.measure.engine.streaming.paced import PACED_TOKEN_METRIC, PacedSchedule, write_paced_model
from workbench.tasks import Cancelled


pytestmark = [pytest.mark.server, pytest.mark.timeout(300), pytest.mark.alone]  # reads paced times back

MODEL = "paced"
FIRST_MS = 100.0  # TTFT the model keeps
GAP_MS = 20.0  # inter-token gap the model keeps
MAX_TOKENS = 8
INPUT_TOKENS = 16
TOKEN_METRIC = PACED_TOKEN_METRIC
# Client-side times include the wire and a shared 2-core machine: generous, but far tighter than
# the SLOs that tell met from missed.
TTFT_SLACK_MS = 60.0
ITL_SLACK_MS = 8.0

MEETS = Slo(ttft_ms=500.0, itl_ms=50.0)
TTFT_TOO_TIGHT = Slo(ttft_ms=FIRST_MS / 2, itl_ms=None)
ITL_TOO_TIGHT = Slo(ttft_ms=None, itl_ms=GAP_MS / 2)

@pytest.fixture(scope="module")
def server(tmp_path_factory, triton_server_module):
    repo = tmp_path_factory.mktemp("streaming") / "repo"
    write_paced_model(repo, MODEL, PacedSchedule(tokens=MAX_TOKENS, first_ms=FIRST_MS, gap_ms=GAP_MS, slow_starts=0,
                                                 slow_streams=0))
    srv = triton_server_module(repo)
    srv.load(MODEL)
    return srv


@pytest.fixture(scope="module")
def prompts():
    return build_prompts(WordTokenizer(), 8, Lengths(INPUT_TOKENS), Lengths(MAX_TOKENS), seed=1)


def _settings(protocol: str) -> MeasureSettings:
    return MeasureSettings(protocol=protocol, window_s=0.6, stable_windows=2, max_windows=3, time_limit_s=5.0,
                           min_latencies=0)


def _measure(server, prompts, protocol: str, **load) -> StreamResult:
    url = server.grpc_url if protocol == "grpc" else server.http_url
    result = measure_stream(url, MODEL, prompts, _settings(protocol), slos=(MEETS, TTFT_TOO_TIGHT, ITL_TOO_TIGHT),
                            counts_from=server, token_metric=TOKEN_METRIC, **load)
    print(f"\n{protocol} {load}: {result.summary()}", file=sys.stderr)
    return result


LOADS = [
    pytest.param("grpc", {"concurrency": 3}, id="grpc-concurrency"),
    pytest.param("http", {"concurrency": 3}, id="http-concurrency"),
    pytest.param("grpc", {"request_rate": 8.0, "distribution": "poisson"}, id="grpc-poisson-rate"),
    pytest.param("http", {"request_rate": 8.0, "distribution": "constant"}, id="http-constant-rate"),
]


@pytest.mark.parametrize("protocol, load", LOADS)
def test_a_paced_model_reads_back_its_ttft_itl_and_token_count(server, prompts, protocol, load):
    result = _measure(server, prompts, protocol, **load)
    assert result.failures == 0 and result.requests > 0, result.warnings
    # the pace the model keeps, read back
    assert FIRST_MS - 2 <= result.ttft_ms["p50"] <= FIRST_MS + TTFT_SLACK_MS
    assert abs(result.itl_ms["p50"] - GAP_MS) <= ITL_SLACK_MS
    assert abs(result.token_gap_ms["p50"] - GAP_MS) <= ITL_SLACK_MS
    assert result.itl_ms["count"] == result.requests
    assert result.token_gap_ms["count"] == result.requests * (MAX_TOKENS - 1)
    expected_e2e = FIRST_MS + (MAX_TOKENS - 1) * GAP_MS
    assert expected_e2e - 2 <= result.e2e_ms["p50"] <= expected_e2e + TTFT_SLACK_MS
    # throughput agrees with the load: tokens/s = requests/s x tokens per request, roughly
    assert result.output_tokens_per_s == pytest.approx(result.requests_per_s * MAX_TOKENS, rel=0.35)
    if "concurrency" in load:
        assert result.requests_per_s == pytest.approx(load["concurrency"] / (expected_e2e / 1000), rel=0.35)
    else:  # sent on the schedule: constant gaps, or the seeded exponential draws
        sent = np.diff([r.sent_ns for r in result.records]) / 1e9
        rate = load["request_rate"]
        schedule = (np.full(sent.size, 1 / rate) if load["distribution"] == "constant"
                    else np.random.default_rng(0).exponential(1 / rate, size=sent.size + 1)[:sent.size])
        assert np.abs(np.cumsum(sent) - np.cumsum(schedule)).max() < 0.05  # a shared CPU delays sends
        if load["distribution"] == "constant":
            assert result.requests_per_s == pytest.approx(rate, rel=0.35)
    assert result.input_tokens == result.requests * INPUT_TOKENS
    assert result.tokens_per_response == 1.0  # one word per response: nothing bunched
    # the client's count is the server's own, request for request and token for token
    assert result.server is not None
    assert result.client_total_tokens == result.client_total_requests * MAX_TOKENS
    assert result.server.output_tokens == result.client_total_tokens
    assert result.server.requests == result.client_total_requests
    # goodput: near all under an SLO the pace meets, none under ones it cannot
    assert result.goodput["ttft<=500ms,itl<=50ms"] >= 0.95
    assert result.goodput[f"ttft<={FIRST_MS / 2:g}ms"] == 0.0
    assert result.goodput[f"itl<={GAP_MS / 2:g}ms"] == 0.0
    assert math.isfinite(result.client_cpu_us_per_token) and result.client_cpu_us_per_token > 0
    assert "client CPU" in result.summary() and "us/token" in result.summary()
    row = result.to_dict()
    assert row["server"]["output_tokens"] == result.client_total_tokens and "records" not in row


# -- no server needed -----------------------------------------------------------------------------


def test_prompts_have_the_exact_token_count_and_are_seeded():
    tokenizer = WordTokenizer()
    lengths = Lengths(20, "uniform", 10)
    prompts = build_prompts(tokenizer, 30, lengths, Lengths(8, "normal", 3), seed=7)
    assert all(len(tokenizer.encode(p.text)) == p.input_tokens for p in prompts)
    assert len({p.input_tokens for p in prompts}) > 3 and all(10 <= p.input_tokens <= 30 for p in prompts)
    assert all(p.max_tokens >= 1 for p in prompts)
    again = build_prompts(WordTokenizer(), 30, lengths, Lengths(8, "normal", 3), seed=7)
    assert [(p.input_tokens, p.max_tokens) for p in again] == [(p.input_tokens, p.max_tokens) for p in prompts]


class _Merging:
    """A tokenizer whose round trip always loses a token: no exact prompt exists."""

    def encode(self, text: str) -> list[int]:
        return [1] * max(0, len(text.split()) - 1)

    def decode(self, ids: list[int]) -> str:
        return " ".join("x" for _ in ids)


def test_a_tokenizer_that_cannot_give_the_length_is_refused():
    with pytest.raises(MeasureError, match="exactly 5 tokens"):
        build_prompts(_Merging(), 1, Lengths(5), Lengths(4), vocabulary=[1])


@pytest.mark.parametrize("bad, message", [
    ({"concurrency": 2, "request_rate": 3.0}, "not both"),
    ({"concurrency": 0}, "concurrency must be"),
    ({"request_rate": -1.0}, "request_rate must be"),
    ({"request_rate": 2.0, "distribution": "gamma"}, "distribution 'gamma'"),
])
def test_bad_load_is_refused_before_anything_is_sent(bad, message):
    load = {"concurrency": None, "request_rate": None, "distribution": "constant"} | bad
    with pytest.raises(MeasureError, match=message):
        build_stream_plan("127.0.0.1:1", MODEL, MeasureSettings(), slos=(MEETS,), ignore_eos=True,
                          timeout_s=5.0, **load)


def test_bad_lengths_are_refused():
    with pytest.raises(MeasureError, match="token length"):
        Lengths(0)
    with pytest.raises(MeasureError, match="length distribution"):
        Lengths(4, "zipf")


def test_a_cancel_stops_the_point_within_the_grace(server, prompts):
    cancel = threading.Event()
    started = time.monotonic()
    with pytest.raises(Cancelled):
        measure_stream(server.grpc_url, MODEL, prompts, _settings("grpc"), concurrency=2, cancel=cancel,
                       progress=lambda done, total, message: cancel.set())
    assert time.monotonic() - started < 5.0


def test_a_model_that_is_not_there_fails_the_requests_and_says_why(server, prompts):
    result = measure_stream(server.http_url, "no_such_model", prompts, _settings("http"), concurrency=2)
    assert result.requests == 0 and result.client_total_requests >= 1
    assert any("no_such_model" in w or "unknown model" in w.lower() for w in result.warnings), result.warnings


def test_prompts_from_the_tiny_llms_own_tokenizer_have_the_exact_count():
    pytest.importorskip("transformers", reason="the tiny LLM's tokenizer needs transformers")
    from workbench import zoo

    tokenizer = ModelTokenizer(zoo.tiny_llm().path)
    prompts = build_prompts(tokenizer, 12, Lengths(24, "uniform", 12), Lengths(8), seed=5)
    assert [len(tokenizer.encode(p.text)) for p in prompts] == [p.input_tokens for p in prompts]
    assert len({p.input_tokens for p in prompts}) > 3
