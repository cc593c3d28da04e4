"""Does the served LLM generate what vLLM generates offline? ``check_served_generation``.

For a model served by Triton's vLLM backend the reference is not an eager forward but vLLM's own
offline engine on the same folder and engine arguments (the model directory's ``1/model.json``):
the greedy token ids must be equal, prompt by prompt, over each way the server answers
(HTTP ``generate``, HTTP ``generate_stream`` (server-sent events), gRPC streaming).

The served token ids are read from the backend's ``logprobs`` output, requested with vLLM's
``logprobs: 0``, which returns the log-probability of each sampled token keyed by its id (and no
others); the text alone could not tell two token sequences with the same text apart. The offline
run happens in a subprocess of the vLLM environment (`workbench/vllm_offline.py`), since the
workbench's own environment need not have vLLM.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np

__all__ = [
    "PROTOCOLS",
    "Offline",
    "ServedAnswer",
    "ask_served",
    "GenerationRow",
    "GenerationCheck",
    "GenerationServer",
    "engine_args",
    "offline_greedy",
    "served_greedy",
    "check_served_generation",
]

PROTOCOLS = ("http", "http_stream", "grpc_stream")
_OFFLINE_SCRIPT = Path(__file__).with_name("vllm_offline.py")


@dataclass(frozen=True)
class Offline:
    """vLLM's offline greedy generate for some prompts: token ids per prompt, and the run's facts."""

    token_ids: tuple[tuple[int, ...], ...]
    texts: tuple[str, ...]
    vllm_version: str
    load_seconds: float
    dropped_args: tuple[str, ...] = ()


@dataclass
class GenerationRow:
    prompt: str
    protocol: str
    served: tuple[int, ...]
    offline: tuple[int, ...]
    error: str = ""

    @property
    def ok(self) -> bool:
        return not self.error and self.served == self.offline


@dataclass
class GenerationCheck:
    model: str
    rows: list[GenerationRow] = field(default_factory=list)
    vllm_version: str = ""

    @property
    def ok(self) -> bool:
        return bool(self.rows) and all(r.ok for r in self.rows)

    def summary(self) -> str:
        protocols = ", ".join(dict.fromkeys(r.protocol for r in self.rows))
        prompts = len({r.prompt for r in self.rows})
        if self.ok:
            tokens = sum(len(r.served) for r in self.rows)
            return (
                f"served greedy tokens equal vLLM {self.vllm_version}'s offline generate for {self.model!r}: "
                f"{prompts} prompts over {protocols}, {tokens} tokens"
            )
        bad = [r for r in self.rows if not r.ok]
        first = bad[0]
        detail = first.error or f"served {list(first.served)} but offline {list(first.offline)}"
        return (
            f"{len(bad)} of {len(self.rows)} generations of {self.model!r} differ from vLLM's offline generate; "
            f"first: {first.protocol}, prompt {first.prompt!r}: {detail}"
        )


def engine_args(model_dir: str | Path) -> dict:
    """The vLLM engine arguments a model directory is served with (``1/model.json``)."""
    path = Path(model_dir) / "1" / "model.json"
    try:
        args = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as err:
        raise ValueError(f"cannot read the vLLM engine arguments {path}: {err}") from None
    if not isinstance(args, dict) or "model" not in args:
        raise ValueError(f'{path} must be a JSON object with a "model" key (vLLM\'s engine arguments)')
    return args


def offline_greedy(
    python: str | Path, args: dict, prompts: Sequence[str], max_tokens: int, *, timeout: float = 900.0
) -> Offline:
    """vLLM's offline greedy generate of ``prompts`` with engine arguments ``args``, run by
    ``python`` (an interpreter whose environment has vLLM). RuntimeError with its output's tail
    when the run fails."""
    with tempfile.TemporaryDirectory(prefix="workbench-vllm-offline-") as tmp:
        request, result = Path(tmp) / "request.json", Path(tmp) / "result.json"
        request.write_text(json.dumps({"engine_args": args, "prompts": list(prompts), "max_tokens": max_tokens}))
        utf8 = {"LC_ALL": "C.UTF-8", "LANG": "C.UTF-8"}  # vLLM's import reads UTF-8 templates (torch._inductor)
        done = subprocess.run(
            [str(python), str(_OFFLINE_SCRIPT), str(request), str(result)],
            cwd=tmp,
            env={**os.environ, **utf8},
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if done.returncode != 0 or not result.is_file():
            tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-25:])
            raise RuntimeError(f"vLLM's offline generate failed (exit {done.returncode}) in {python}:\n{tail}")
        data = json.loads(result.read_text())
    outputs = data["outputs"]
    return Offline(
        tuple(tuple(o["token_ids"]) for o in outputs),
        tuple(o["text"] for o in outputs),
        data["vllm_version"],
        float(data["load_seconds"]),
        tuple(data["dropped_args"]),
    )


def _sampling(max_tokens: int) -> dict:
    return {"temperature": 0.0, "max_tokens": max_tokens, "logprobs": 0}


def _token_ids(logprobs_json: str | bytes) -> list[int]:
    """Token ids from the vLLM backend's ``logprobs`` output: one {id: {...}} per generated token."""
    positions = json.loads(logprobs_json) or []
    ids = []
    for position in positions:
        if len(position) != 1:
            raise ValueError(f"expected only the sampled token per position (logprobs: 0), got {sorted(position)}")
        ids.append(int(next(iter(position))))
    return ids


@dataclass(frozen=True)
class ServedAnswer:
    """What a served generative model answered one prompt: the text (the prompt left out) and its
    token ids, in order."""

    text: str
    token_ids: tuple[int, ...]


def _http_generate(
    http_url: str,
    model: str,
    prompt: str,
    max_tokens: int,
    stream: bool,
    timeout: float,
    on_text: Callable[[str], None] | None = None,
) -> ServedAnswer:
    """One greedy generation over Triton's generate extension; ``on_text(delta)`` sees each piece of
    a stream as it arrives."""
    body = {
        "text_input": prompt,
        "stream": stream,
        "exclude_input_in_output": True,
        "return_logprobs": True,
        "parameters": _sampling(max_tokens),
    }
    endpoint = "generate_stream" if stream else "generate"
    request = urllib.request.Request(
        f"http://{http_url}/v2/models/{model}/{endpoint}",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            if not stream:
                answer = json.loads(response.read())
                return ServedAnswer(str(answer.get("text_output", "")), tuple(_token_ids(answer["logprobs"])))
            ids: list[int] = []
            text: list[str] = []
            for raw in response:  # server-sent events: "data: {...}" lines, one response each
                line = raw.decode("utf-8").strip()
                if not line.startswith("data:"):
                    continue
                event = json.loads(line[len("data:") :])
                if "error" in event:
                    raise RuntimeError(event["error"])
                if event.get("logprobs") is not None:
                    ids += _token_ids(event["logprobs"])
                if event.get("text_output"):
                    text.append(str(event["text_output"]))
                    if on_text is not None:
                        on_text(text[-1])
            return ServedAnswer("".join(text), tuple(ids))
    except urllib.error.HTTPError as err:
        raise RuntimeError(f"{endpoint} answered {err.code}: {_error_text(err)}") from None


def _error_text(err: urllib.error.HTTPError) -> str:
    """Triton's own sentence from an error response (``{"error": "..."}``), else the body."""
    body = err.read().decode(errors="replace")
    try:
        return str(json.loads(body)["error"])
    except (ValueError, KeyError, TypeError):
        return body


def ask_served(
    http_url: str,
    model: str,
    prompt: str,
    max_tokens: int,
    *,
    stream: bool = True,
    on_text: Callable[[str], None] | None = None,
    timeout: float = 300.0,
) -> ServedAnswer:
    """The served model's greedy answer to ``prompt`` over HTTP ``generate_stream`` (``stream``) or
    ``generate``; ``on_text`` sees a stream's pieces as they arrive. RuntimeError says what the
    server answered; OSError when nothing answers."""
    return _http_generate(http_url, model, prompt, max_tokens, stream, timeout, on_text)


def _grpc_stream(grpc_url: str, model: str, prompt: str, max_tokens: int, timeout: float) -> list[int]:
    import tritonclient.grpc as grpcclient

    def tensor(name: str, value, dtype: str) -> grpcclient.InferInput:
        t = grpcclient.InferInput(name, [1], dtype)
        t.set_data_from_numpy(np.array([value], dtype=object if dtype == "BYTES" else bool))
        return t

    inputs = [
        tensor("text_input", prompt.encode(), "BYTES"),
        tensor("stream", True, "BOOL"),
        tensor("sampling_parameters", json.dumps(_sampling(max_tokens)).encode(), "BYTES"),
        tensor("exclude_input_in_output", True, "BOOL"),
        tensor("return_logprobs", True, "BOOL"),
    ]
    answers: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(grpc_url)
    try:
        client.start_stream(callback=lambda result, error: answers.put((result, error)))
        client.async_stream_infer(
            model, inputs, outputs=[grpcclient.InferRequestedOutput("logprobs")], enable_empty_final_response=True
        )
        ids: list[int] = []
        while True:
            result, error = answers.get(timeout=timeout)
            if error is not None:
                raise RuntimeError(f"gRPC stream: {error}")
            response = result.get_response()
            logprobs = result.as_numpy("logprobs")
            if logprobs is not None:
                ids += _token_ids(logprobs[0])
            if response.parameters["triton_final_response"].bool_param:
                return ids
    finally:
        client.stop_stream()
        client.close()


def served_greedy(
    protocol: str, url: str, model: str, prompt: str, max_tokens: int, *, timeout: float = 300.0
) -> list[int]:
    """The served model's greedy token ids for ``prompt`` over ``protocol`` (one of PROTOCOLS;
    ``url`` is the server's HTTP host:port, or gRPC's for ``grpc_stream``)."""
    if protocol == "http":
        return list(_http_generate(url, model, prompt, max_tokens, False, timeout).token_ids)
    if protocol == "http_stream":
        return list(_http_generate(url, model, prompt, max_tokens, True, timeout).token_ids)
    if protocol == "grpc_stream":
        return _grpc_stream(url, model, prompt, max_tokens, timeout)
    raise ValueError(f"unknown protocol {protocol!r}; use one of {', '.join(PROTOCOLS)}")


class GenerationServer(Protocol):
    """What the check needs of a server: its HTTP and gRPC ``host:port``s (a `TritonServer` or a
    `RunningServer` has both)."""

    @property
    def http_url(self) -> str: ...

    @property
    def grpc_url(self) -> str: ...


def check_served_generation(
    server: GenerationServer,
    model: str,
    model_dir: str | Path,
    prompts: Sequence[str],
    *,
    max_tokens: int = 16,
    python: str | Path | None = None,
    protocols: Sequence[str] = PROTOCOLS,
    offline: Offline | None = None,
) -> GenerationCheck:
    """Generate ``prompts`` greedily on the served ``model`` over each of ``protocols`` and compare
    the token ids with vLLM's offline generate: ``offline`` (a run made before), else one run here
    by ``python`` (an interpreter with vLLM, e.g. ``TritonServer.vllm.backend.python``) on
    ``model_dir``'s engine arguments."""
    if not prompts:
        raise ValueError("give at least one prompt")
    unknown = [p for p in protocols if p not in PROTOCOLS]
    if unknown:
        raise ValueError(f"unknown protocol(s) {', '.join(unknown)}; use {', '.join(PROTOCOLS)}")
    if offline is None:
        if python is None:
            raise ValueError("no Python with vLLM for the offline reference: pass python= (e.g. .venv-vllm/bin/python)")
        offline = offline_greedy(python, engine_args(model_dir), prompts, max_tokens)
    check = GenerationCheck(model, vllm_version=offline.vllm_version)
    for protocol in protocols:
        url = server.grpc_url if protocol.startswith("grpc") else server.http_url
        for prompt, reference in zip(prompts, offline.token_ids):
            try:
                served = tuple(served_greedy(protocol, url, model, prompt, max_tokens))
                check.rows.append(GenerationRow(prompt, protocol, served, reference))
            except Exception as err:  # a failed request is a failed row, named, not a crashed check
                check.rows.append(GenerationRow(prompt, protocol, (), reference, f"{type(err).__name__}: {err}"))
    return check
