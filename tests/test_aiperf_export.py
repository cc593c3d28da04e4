"""benchmarks/_aiperf.py reads AIPerf's exports into the streaming engine's figures: checked on the
exports of a real AIPerf 0.13.0 run against the tiny LLM on Triton's vLLM backend
(tests/data/aiperf, its README says how it was recorded and what the server counted)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import jinja2
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from _aiperf import TEMPLATE, read_export  # noqa: E402

from workbench.measure.engine.streaming import Prompt  # noqa: E402
from workbench.measure.engine.streaming.clients import sampling_parameters  # noqa: E402

DATA = Path(__file__).parent / "data" / "aiperf"
SERVER_COUNTED = 1408  # vllm:generation_tokens_total over the recorded run (README)


@pytest.fixture(scope="module")
def point():
    return read_export(DATA, window_s=0.5, stability=0.10, stable_windows=3)


def test_the_profiling_phase_is_read_apart_from_the_warm_up(point):
    summary = json.loads((DATA / "profile_export_aiperf.json").read_text())
    assert point.requests == summary["request_count"]["avg"] == 20
    assert point.total_requests == 22  # 2 warm-up requests beside them
    assert point.ttft_ms_p50 == summary["time_to_first_token"]["p50"]
    assert point.output_tokens_per_s == summary["output_token_throughput"]["avg"]
    assert point.e2e_ms_p50 == summary["request_latency"]["p50"] > point.ttft_ms_p50
    assert point.first_byte_ms_p50 == summary["http_req_waiting"]["p50"] < point.ttft_ms_p50
    assert point.in_flight == summary["effective_concurrency"]["avg"] < 2  # asked 2: it sends late
    assert point.seconds == pytest.approx(summary["benchmark_duration"]["avg"], rel=0.05)


def test_the_tokens_asked_for_match_the_servers_count_and_aiperfs_own_count_does_not(point):
    assert point.total_max_tokens == SERVER_COUNTED
    # AIPerf re-tokenizes the decoded text: more tokens than the server generated
    assert point.total_tokens > SERVER_COUNTED * 1.3
    assert point.server_tokens_per_s == pytest.approx(20 * 64 / point.seconds)
    assert point.output_tokens_per_s > point.server_tokens_per_s
    assert point.server_itl_ms_p50 > point.itl_ms_p50  # the same time spread over fewer tokens


def test_stability_is_judged_on_whole_windows_of_the_profiling_phase(point):
    assert point.windows == int(point.seconds / 0.5)
    wide = read_export(DATA, window_s=0.5, stability=100.0, stable_windows=3)
    assert wide.stable and not read_export(DATA, window_s=0.5, stability=0.0, stable_windows=3).stable


def test_aiperf_sent_the_body_our_http_client_sends():
    sent = json.loads((DATA / "inputs.json").read_text())["data"][0]["payloads"][0]
    prompt = Prompt(sent["text_input"], 32, 64)
    ours = {"text_input": prompt.text, "stream": True,
            "sampling_parameters": json.loads(sampling_parameters(prompt, ignore_eos=True)),
            "return_num_output_tokens": True}
    assert {**sent, "sampling_parameters": json.loads(sent["sampling_parameters"])} == ours
    rendered = jinja2.Environment(autoescape=True).from_string(TEMPLATE).render(text=prompt.text, stream=True,
                                                                                 max_tokens=64)
    assert json.loads(rendered) == sent
