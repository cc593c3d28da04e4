"""Notebook 09's steps: the zoo's tiny LLM generated for Triton's vLLM backend, served and checked
here where this machine can, and generated for Trn2 and Inf2 to show what changes there.

* `vllm_here`: the vLLM environment and Triton's vLLM backend directory this machine has, found
  the way the tests find them (``$WORKBENCH_VLLM_PYTHON``, else the checkout's ``.venv-vllm``; the
  shared folder's ``vllm_backend_here.sh`` assembles the backend inside that environment), or the
  plain reason the serving cells are skipped (a Binder user has neither).
* `tiny_llm_settings`: one set of settings per target (cpu, trn2, inf2), the tiny LLM's shape
  (4 attention heads, 2 KV heads) deciding what tensor parallelism fits.
* `engine_args_table`: the ``1/model.json`` of several model directories side by side, each
  Neuron-only key with the SDK page that defines it (`NEURON_KEY_SOURCES`).
* `answers_table`, `stream_figures`: what the check and the streaming measurement found, as tables.

Nothing here measures or serves; the notebook calls `workbench.check_generate` and
`workbench.measure.engine.streaming` itself.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Mapping

import pandas as pd

from workbench.files import one_at_a_time
from workbench.generate import GenerateSettings
from workbench.generate.vllm_backend import VllmSettings
from workbench.generate.vllm_backend.settings import NEURON_KEY_SOURCES, NxdiBuckets, VllmNeuronBuckets

if TYPE_CHECKING:
    from workbench.check_generate import GenerationCheck
    from workbench.measure.engine.streaming import StreamResult
    from workbench.zoo import TinyLLM

__all__ = ["tiny_llm", "VllmHere", "vllm_here", "vllm_python_path", "assemble_vllm_backend", "tiny_llm_settings", "engine_args_table",
           "answers_table", "stream_figures", "SHARED_ENV", "BACKEND_FOLDER"]

ROOT = Path(__file__).resolve().parents[2]  # the checkout (notebooks/, scripts/, .venv-vllm/)
SHARED_ENV = "WORKBENCH_SHARED"  # the shared folder, else ../shared beside the checkout (as the tests)
VLLM_SCRIPT = Path("tools") / "vllm_backend_here.sh"
BACKEND_FOLDER = "triton-vllm-backend"  # inside the vLLM environment: one backend per environment
# The tiny LLM's engine settings for vLLM's CPU engine: float32 (the CPU build's kernels), 256 positions,
# 4 sequences, a 64 MiB KV cache given in bytes (a share of RAM is taken per NUMA node minus the worker's
# own size, so a small share that works on one machine is refused on another), no graph capture.
CPU_ENGINE = dict(dtype="float32", max_model_len=256, max_num_seqs=4, kv_cache_memory_bytes=64 << 20,
                  enforce_eager=True)


@dataclass(frozen=True)
class VllmHere:
    """What serves a vLLM model on this machine: the vLLM environment's Python and Triton's vLLM
    backend directory (both, or ``reason`` says which is missing)."""

    python: Path | None
    backend_dir: Path | None
    reason: str = ""

    @property
    def ready(self) -> bool:
        return self.python is not None and self.backend_dir is not None

    @property
    def message(self) -> str:
        if self.ready:
            return f"served here: Triton's vLLM backend at {self.backend_dir}, vLLM from {self.python}"
        return f"not served here, the serving cells are skipped: {self.reason}"


def tiny_llm() -> "TinyLLM | None":
    """The zoo's tiny LLM (`workbench.zoo.tiny_llm`), or None where ``transformers`` is not installed
    (it builds the model and trains its tokenizer), saying so."""
    from workbench.system import MissingSDKError
    from workbench.zoo import tiny_llm as build

    try:
        return build()
    except MissingSDKError as err:
        print(f"no tiny LLM here, the cells that need it are skipped: {err}")
        return None


def shared_folder() -> Path:
    """``$WORKBENCH_SHARED``, else ``shared/`` beside the checkout (tests/shared_folder.py's rule)."""
    return Path(os.environ.get(SHARED_ENV) or ROOT.parent / "shared")


def vllm_python_path() -> Path:
    """Where the vLLM environment's Python should be: ``$WORKBENCH_VLLM_PYTHON`` (dev.sh test sets
    it), else the checkout's ``.venv-vllm`` (scripts/vllm_env.sh's default). It may not exist."""
    from workbench.server.vllm import ENV_PYTHON

    named = os.environ.get(ENV_PYTHON)
    return Path(named) if named else ROOT / ".venv-vllm" / "bin" / "python"


def assemble_vllm_backend(script: str | os.PathLike[str], python: str | os.PathLike[str], *,
                          timeout_s: float = 300) -> Path:
    """The backend directory ``script`` (the shared ``vllm_backend_here.sh``) assembles for
    ``python`` inside its environment (``<venv>/triton-vllm-backend``; a rerun returns at once),
    with the stub's UTF-8 locale fix (its .pth goes into the vLLM environment only, whose stub
    would otherwise fail to import vLLM). Inside the environment because the script's default
    folder is one per Python version, and once it exists the script returns early, without putting
    the locale fix into a new environment. Processes assembling it at once take turns (a lock file
    beside it). RuntimeError with the script's words when it fails."""
    out = Path(python).parent.parent / BACKEND_FOLDER
    with one_at_a_time(out.with_name(f"{out.name}.lock")):
        done = subprocess.run(["bash", str(script), str(python), str(out)], capture_output=True, text=True,
                              timeout=timeout_s, env={**os.environ, "WB_STUB_LOCALE_FIX": "1"}, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{script} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    return Path(done.stdout.strip().splitlines()[-1])


def vllm_here(shared: str | os.PathLike[str] | None = None) -> VllmHere:
    """The vLLM environment (``$WORKBENCH_VLLM_PYTHON``, else the checkout's ``.venv-vllm``) and
    the backend the shared folder's script assembles for it; what is missing is said, not raised."""
    from workbench.server.vllm import ENV_PYTHON

    named = os.environ.get(ENV_PYTHON)
    python = vllm_python_path()
    if not python.is_file():
        where = f"${ENV_PYTHON} names {python}" if named else f"${ENV_PYTHON} is unset and {python} is absent"
        return VllmHere(None, None, f"no vLLM environment ({where}; `bash scripts/vllm_env.sh` sets one up, "
                                    f"then export {ENV_PYTHON}=.venv-vllm/bin/python)")
    script = Path(shared or shared_folder()) / VLLM_SCRIPT
    if not script.is_file():
        return VllmHere(python.absolute(), None, f"no Triton vLLM backend for this server: {script} is absent "
                                                 f"(set ${SHARED_ENV} to the shared folder, or run Triton's vLLM "
                                                 "container)")
    return VllmHere(python.absolute(), assemble_vllm_backend(script, python))


def tiny_llm_settings(llm_path: str | os.PathLike[str], repository: str | os.PathLike[str], target: str,
                      name: str = "tiny_llm") -> GenerateSettings:
    """The tiny LLM's settings for ``target``: on the CPU vLLM's CPU engine (`CPU_ENGINE`, and the
    backend's token counter on /metrics); on trn2 and inf2 bfloat16 over two NeuronCores per
    instance (the tiny LLM has 2 KV heads), two instances on cores 0-3, and each plugin's buckets:
    vLLM Neuron's prefill-token and decode-batch buckets on trn2, NxD Inference's context and
    token-generation buckets on inf2 (largest = the engine maximum, as each plugin's docs say)."""
    dest = str(Path(repository) / name)
    if target == "cpu":
        vllm = VllmSettings(model=str(llm_path), **CPU_ENGINE)
        return GenerateSettings(triton_model_dir=dest, backend="vllm", target="cpu", backend_settings=vllm,
                                parameters={"REPORT_CUSTOM_METRICS": "true"})
    common = dict(model=str(llm_path), dtype="bfloat16", max_model_len=256, max_num_seqs=4, tensor_parallel_size=2,
                  core_range="0:3")
    if target == "trn2":
        vllm = VllmSettings(**common, max_num_batched_tokens=256, lnc=2, vllm_neuron=VllmNeuronBuckets(
            num_batched_tokens_buckets=(64, 128, 256), num_seqs_buckets=(1, 2, 4)))
    elif target == "inf2":
        vllm = VllmSettings(**common, nxdi=NxdiBuckets(enable_bucketing=True, context_encoding_buckets=(64, 128, 256),
                                                       token_generation_buckets=(128, 256)))
    else:
        raise ValueError(f"target {target!r}: this tutorial shows cpu, trn2 and inf2")
    return GenerateSettings(triton_model_dir=dest, backend="vllm", target=target, backend_settings=vllm)


def _flatten(args: Mapping, prefix: str = "") -> dict[str, object]:
    out: dict[str, object] = {}
    for key, value in args.items():
        if isinstance(value, Mapping) and value:
            out.update(_flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = json.dumps(value) if isinstance(value, (list, dict, bool)) else value
    return out


def _source(key: str) -> str:
    parts = tuple(key.split("."))
    return NEURON_KEY_SOURCES.get(parts[-2:], "") if len(parts) >= 3 else ""


def engine_args_table(model_dirs: Mapping[str, str | os.PathLike[str]], *, only_differences: bool = True,
                      hide: tuple[str, ...] = ("model",)) -> pd.DataFrame:
    """The engine arguments (``1/model.json``, nested keys as ``a.b.c``) of each named model
    directory, one column per name ("" where a directory leaves the key out), the keys in ``hide``
    left out, only the keys that differ with ``only_differences``; ``source`` cites the SDK page
    of each Neuron-only key."""
    columns = {name: _flatten(json.loads((Path(d) / "1" / "model.json").read_text(encoding="utf-8")))
               for name, d in model_dirs.items()}
    keys = [k for k in dict.fromkeys(k for c in columns.values() for k in c) if k not in hide]
    frame = pd.DataFrame({name: [c.get(k, "") for k in keys] for name, c in columns.items()}, index=keys)
    if only_differences:
        frame = frame[frame.astype(str).nunique(axis=1) > 1]
    frame["source"] = [_source(k) for k in frame.index]
    frame.index.name = "model.json key"
    return frame


def answers_table(check: "GenerationCheck", llm_path: str | os.PathLike[str]) -> pd.DataFrame:
    """Each prompt and way of asking, the served answer decoded by the model's own tokenizer, its
    token count, and whether its token ids equal vLLM's offline generate."""
    from workbench.measure.engine.streaming import ModelTokenizer

    tokenizer = ModelTokenizer(llm_path)
    return pd.DataFrame([{"prompt": r.prompt, "protocol": r.protocol, "answer": tokenizer.decode(list(r.served)),
                          "tokens": len(r.served), "equal to offline": r.ok, "error": r.error}
                         for r in check.rows])


def stream_figures(result: "StreamResult") -> pd.DataFrame:
    """The streaming point as the figures a person reads: TTFT and inter-token latency percentiles,
    output tokens per second, and the tokens the client received beside those the server counted."""
    server = result.server.output_tokens if result.server is not None else "not counted"
    rows = {"requests measured (failed)": f"{result.requests} ({result.failures})",
            "TTFT p50 / p99 (ms)": f"{result.ttft_ms['p50']:.1f} / {result.ttft_ms['p99']:.1f}",
            "inter-token latency p50 / p99 (ms)": f"{result.itl_ms['p50']:.2f} / {result.itl_ms['p99']:.2f}",
            "output tokens per second": f"{result.output_tokens_per_s:.1f}",
            "tokens the client received (whole run)": result.client_total_tokens,
            "tokens the server counted": server}
    return pd.DataFrame({"value": list(rows.values())}, index=pd.Index(list(rows), name="streaming"))
