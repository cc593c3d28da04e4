"""The tiny LLM served by Triton's REAL vLLM backend in the wheel's tritonserver, checked against
vLLM's offline greedy generate over HTTP generate, HTTP generate_stream (SSE) and gRPC streaming.

Needs the vLLM environment and the shared folder's ``tools/vllm_backend_here.sh`` (conftest's
``vllm_python`` and ``vllm_backend_dir``); skips, saying which is missing, without them (all but the
refusal test). One server and one offline run serve every test here (a vLLM engine takes ~25-45 s
to load on 2 cores).

The model directory is the generator's (``generate --backend vllm``: config.pbtxt with
``backend: "vllm"`` + 1/model.json); the KV cache is given in bytes (64 MiB): the share of RAM
(``gpu_memory_utilization``) is taken per NUMA node minus the worker's own size, so a small share
that works on one machine is refused on another.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from workbench import generate, zoo
from workbench.served_generation import (
    PROTOCOLS,
    ask_served,
    check_served_generation,
    engine_args,
    offline_greedy,
    served_greedy,
)
from workbench.generate import GenerateSettings
from workbench.generate.vllm_backend import VllmSettings
from workbench.server import TritonServer
from workbench.server.errors import ModelRefusedError
from workbench.server.vllm_backend import SERVED_AS_VLLM

pytestmark = [pytest.mark.server, pytest.mark.slow, pytest.mark.timeout(1500)]

MAX_TOKENS = 12
MODEL = "tiny_llm"


@pytest.fixture(scope="module")
def llm():
    return zoo.tiny_llm()


@pytest.fixture(scope="module")
def repo(tmp_path_factory, llm) -> Path:
    """The model directory as ``workbench generate --backend vllm`` writes it."""
    repo = tmp_path_factory.mktemp("vllm") / "repo"
    vllm = VllmSettings(model=str(llm.path), dtype="float32", max_model_len=256, max_num_seqs=4,
                        kv_cache_memory_bytes=64 << 20, enforce_eager=True,
                        extra_engine_args={"disable_log_stats": True})
    generated = generate.render(GenerateSettings(triton_model_dir=str(repo / MODEL), backend="vllm", target="cpu",
                                                 backend_settings=vllm))
    generate.write(generated)
    return repo


@pytest.fixture(scope="module")
def offline(vllm_python, vllm_backend_dir, repo, llm):
    """vLLM's offline greedy tokens for the zoo prompts (before the server: the CPU is shared)."""
    started = time.monotonic()
    result = offline_greedy(vllm_python, engine_args(repo / MODEL), llm.prompts, MAX_TOKENS)
    print(f"\nvLLM offline: engine load {result.load_seconds:.1f} s, whole run {time.monotonic() - started:.1f} s",
          file=sys.stderr)
    return result


@pytest.fixture(scope="module")
def server(offline, vllm_python, vllm_backend_dir, repo):
    server = TritonServer(repo, vllm_backend=vllm_backend_dir, vllm_python=vllm_python, pytorch_backend=False)
    try:
        server.start(timeout=180)
        started = time.monotonic()
        server.load(MODEL, timeout=900)
        print(f"\nvLLM model load in tritonserver: {time.monotonic() - started:.1f} s", file=sys.stderr)
        yield server
    finally:
        server.stop()


def test_offline_reference_is_greedy_and_repeatable(offline, llm):
    assert len(offline.token_ids) == len(llm.prompts)
    assert all(len(ids) == MAX_TOKENS for ids in offline.token_ids), offline.token_ids  # no EOS: random weights
    assert offline.vllm_version.startswith("0.32")
    assert offline.dropped_args == ()  # every key of model.json was an engine argument


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_served_greedy_tokens_equal_offline(server, offline, llm, protocol):
    url = server.grpc_url if protocol.startswith("grpc") else server.http_url
    for prompt, expected in zip(llm.prompts, offline.token_ids):
        assert tuple(served_greedy(protocol, url, MODEL, prompt, MAX_TOKENS)) == expected, (protocol, prompt)


def test_check_served_generation_reports_match_and_mismatch(server, offline, repo, llm):
    check = check_served_generation(server, MODEL, repo / MODEL, llm.prompts[:2], max_tokens=MAX_TOKENS,
                                    offline=offline)
    assert check.ok, check.summary()
    assert "2 prompts over http, http_stream, grpc_stream" in check.summary()
    # a reference that differs in one token is caught and named
    wrong = type(offline)(((offline.token_ids[0][0] + 1,) + offline.token_ids[0][1:],) + offline.token_ids[1:],
                          offline.texts, offline.vllm_version, offline.load_seconds)
    bad = check_served_generation(server, MODEL, repo / MODEL, llm.prompts[:1], max_tokens=MAX_TOKENS,
                                  protocols=("http",), offline=wrong)
    assert not bad.ok and "1 of 1 generations" in bad.summary() and "http" in bad.summary()


@pytest.mark.parametrize("stream", (True, False), ids=("generate_stream", "generate"))
def test_ask_served_answers_the_offline_text_and_tokens(server, offline, llm, stream):
    """What the app's ask area shows: the answer's text and tokens, as vLLM generates them offline."""
    pieces: list[str] = []
    answer = ask_served(server.http_url, MODEL, llm.prompts[0], MAX_TOKENS, stream=stream, on_text=pieces.append)
    assert answer.token_ids == offline.token_ids[0]
    assert answer.text == offline.texts[0] and answer.text.strip()
    assert "".join(pieces) == (answer.text if stream else "")
    with pytest.raises(RuntimeError, match="generate.* answered 404: Request for unknown model: .no_such_model. is not found"):
        ask_served(server.http_url, "no_such_model", "hello", 2, stream=stream)


def test_served_by_names_the_vllm_backend(server, vllm_backend_dir, vllm_python):
    said = server.served_by(MODEL)
    assert SERVED_AS_VLLM in said and "vLLM 0.32" in said
    assert str(vllm_backend_dir / "vllm" / "model.py") in said and str(vllm_python) in said
    assert server.backend_of(MODEL).startswith(SERVED_AS_VLLM)
    assert f"--backend-directory={vllm_backend_dir}" in server.command()


def test_a_vllm_model_without_backend_is_refused_before_triton(repo):
    """A server with no vLLM backend refuses the load, saying where one comes from."""
    plain = TritonServer(repo, vllm_backend=False, pytorch_backend=False)
    with plain:
        with pytest.raises(ModelRefusedError, match="no vLLM backend.*vllm_backend_here.sh"):
            plain.load(MODEL)
        assert plain.index() == [] or all(row["state"] != "READY" for row in plain.index())
