"""The streaming load generator driving the tiny LLM served by Triton's REAL vLLM backend: the
output tokens the client received equal what the backend itself counted
(``vllm:generation_tokens_total`` on Triton's /metrics, with REPORT_CUSTOM_METRICS), over gRPC
streaming and HTTP generate_stream, prompts of an exact length in the model's own tokenizer.

Needs the vLLM environment and the shared folder's vLLM backend script (conftest's
``vllm_python`` / ``vllm_backend_dir``) and skips, saying which is missing, without them. Slow: a
vLLM engine takes ~25-45 s to load on 2 cores, so this lives apart from the paced-model tests.
"""

from __future__ import annotations

import json
import sys

import pytest

from workbench import zoo
from workbench.measure.engine.streaming import (
    VLLM_TOKEN_METRIC,
    Lengths,
    ModelTokenizer,
    Slo,
    build_prompts,
    measure_stream,
)
from workbench.measure.engine.measure_settings import MeasureSettings

pytestmark = [pytest.mark.server, pytest.mark.slow, pytest.mark.timeout(1200)]

MODEL = "tiny_llm"
MAX_TOKENS = 12
INPUT_TOKENS = 16


@pytest.fixture(scope="module")
def llm():
    return zoo.tiny_llm()


@pytest.fixture(scope="module")
def server(tiny_llm_server):
    return tiny_llm_server[0]  # conftest's: shared with the LLM sweep's tests


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_the_tiny_llm_streams_as_many_tokens_as_the_backend_counts(server, llm, protocol):
    prompts = build_prompts(ModelTokenizer(llm.path), 4, Lengths(INPUT_TOKENS), Lengths(MAX_TOKENS), seed=3)
    settings = MeasureSettings(protocol=protocol, window_s=1.0, stable_windows=2, max_windows=3, time_limit_s=8.0,
                               min_latencies=0)
    url = server.grpc_url if protocol == "grpc" else server.http_url
    result = measure_stream(url, MODEL, prompts, settings, concurrency=2, slos=(Slo(ttft_ms=5000.0, itl_ms=1000.0),),
                            counts_from=server, token_metric=VLLM_TOKEN_METRIC, count_output="num_output_tokens")
    print(f"\nvLLM {protocol}: {result.summary()}", file=sys.stderr)
    assert result.failures == 0 and result.requests > 0, result.warnings
    assert result.client_total_tokens == result.client_total_requests * MAX_TOKENS  # ignore_eos honoured
    assert result.server is not None and result.server.output_tokens == result.client_total_tokens
    assert result.server.requests == result.client_total_requests
    assert result.ttft_ms["p50"] > 0 and result.itl_ms["count"] > 0 and result.output_tokens_per_s > 0
    assert result.goodput["ttft<=5000ms,itl<=1000ms"] > 0.9
    assert result.tokens_per_response >= 1.0


def test_the_shared_server_serves_the_tiny_llm_without_an_auto_complete_stub(server, vllm_backend_dir):
    """The workbench adds the backend's inputs and outputs itself (workbench/server/vllm_io.py), so
    the server runs with ``--disable-auto-complete-config``: no load starts a stub that imports
    vLLM only to complete the config. What it serves has what the backend's auto-complete would
    have added (tests/test_vllm_io.py compares the two), which the streaming tests above use."""
    from workbench.server.vllm_io import declared_io

    assert not server.auto_complete and "--disable-auto-complete-config" in server.command()
    served = server.model_config(MODEL)
    io = declared_io(vllm_backend_dir / "vllm" / "model.py")
    assert io is not None
    assert {i["name"] for i in served["input"]} == {i.name for i in io.inputs}
    assert {o["name"] for o in served["output"]} == {o.name for o in io.outputs}
    assert served["model_transaction_policy"]["decoupled"] is True and served.get("max_batch_size", 0) == 0
    # the server keeps the load as asked, not the completed config it sent: what a sweep compares its
    # variants with to measure first the one served now (Triton answers its load at once)
    asked = server.last_load(MODEL)
    assert asked is not None and asked.files and "input" not in json.loads(asked.config)
