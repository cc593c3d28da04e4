"""Notebook 09's steps: the zoo's tiny LLM generated for Triton's vLLM backend, served and checked
here where this machine can, and generated for Trn2 and Inf2 to show what changes there.

* `vllm_here` (`workbench.server.vllm_env`, which the app uses too): the vLLM environment and
  Triton's vLLM backend directory this machine has, or the plain reason the serving cells are
  skipped (a Binder user has neither).
* `tiny_llm_settings`: one set of settings per target (cpu, trn2, inf2), the tiny LLM's shape
  (4 attention heads, 2 KV heads) deciding what tensor parallelism fits.
* `engine_args_table`: the ``1/model.json`` of several model directories side by side, each
  Neuron-only key with the SDK page that defines it (`NEURON_KEY_SOURCES`).
* `answers_table`, `stream_figures`: what the check and the streaming measurement found, as tables.

Nothing here measures or serves; the notebook calls `workbench.served_generation` and
`workbench.measure.engine.streaming` itself.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

import pandas as pd

from workbench.generate import GenerateSettings
from workbench.generate.vllm_backend import VllmSettings
from workbench.generate.vllm_backend.engine_settings import NEURON_KEY_SOURCES, NxdiBuckets, VllmNeuronBuckets
from workbench.server.vllm_env import (
    BACKEND_FOLDER,
    SHARED_ENV,
    VllmHere,
    assemble_vllm_backend,
    vllm_here,
    vllm_python_path,
)

if TYPE_CHECKING:
    from workbench.measure.engine.streaming import StreamResult
    from workbench.measure.llm import LlmSweepResult
    from workbench.served_generation import GenerationCheck
    from workbench.zoo import TinyLLM

__all__ = [
    "tiny_llm",
    "VllmHere",
    "vllm_here",
    "vllm_python_path",
    "assemble_vllm_backend",
    "tiny_llm_settings",
    "engine_args_table",
    "answers_table",
    "stream_figures",
    "SHARED_ENV",
    "BACKEND_FOLDER",
]


class EngineFields(TypedDict, total=False):
    """`VllmSettings` engine fields the tutorial sets beside the model, by name: a dict that goes
    into ``VllmSettings(model=..., **...)`` typed."""

    dtype: str
    max_model_len: int
    max_num_seqs: int
    kv_cache_memory_bytes: int
    enforce_eager: bool
    tensor_parallel_size: int
    core_range: str


# The tiny LLM's engine settings for vLLM's CPU engine: float32 (the CPU build's kernels), 256 positions,
# 4 sequences, a 64 MiB KV cache given in bytes (a share of RAM is taken per NUMA node minus the worker's
# own size, so a small share that works on one machine is refused on another), no graph capture.
CPU_ENGINE: EngineFields = dict(
    dtype="float32", max_model_len=256, max_num_seqs=4, kv_cache_memory_bytes=64 << 20, enforce_eager=True
)


def tiny_llm() -> TinyLLM | None:
    """The zoo's tiny LLM (`workbench.zoo.tiny_llm`), or None where ``transformers`` is not installed
    (it builds the model and trains its tokenizer), saying so."""
    from workbench.system import MissingSDKError
    from workbench.zoo import tiny_llm as build

    try:
        return build()
    except MissingSDKError as err:
        print(f"no tiny LLM here, the cells that need it are skipped: {err}")
        return None


def tiny_llm_settings(
    llm_path: str | os.PathLike[str], repository: str | os.PathLike[str], target: str, name: str = "tiny_llm"
) -> GenerateSettings:
    """The tiny LLM's settings for ``target``: on the CPU vLLM's CPU engine (`CPU_ENGINE`, and the
    backend's token counter on /metrics); on trn2 and inf2 bfloat16 over two NeuronCores per
    instance (the tiny LLM has 2 KV heads), two instances on cores 0-3, and each plugin's buckets:
    vLLM Neuron's prefill-token and decode-batch buckets on trn2, NxD Inference's context and
    token-generation buckets on inf2 (largest = the engine maximum, as each plugin's docs say)."""
    dest = str(Path(repository) / name)
    if target == "cpu":
        vllm = VllmSettings(model=str(llm_path), **CPU_ENGINE)
        return GenerateSettings(
            triton_model_dir=dest,
            backend="vllm",
            target="cpu",
            backend_settings=vllm,
            parameters={"REPORT_CUSTOM_METRICS": "true"},
        )
    common: EngineFields = dict(
        dtype="bfloat16",
        max_model_len=256,
        max_num_seqs=4,
        tensor_parallel_size=2,
        core_range="0:3",
    )
    if target == "trn2":
        vllm = VllmSettings(
            model=str(llm_path),
            **common,
            max_num_batched_tokens=256,
            lnc=2,
            vllm_neuron=VllmNeuronBuckets(num_batched_tokens_buckets=(64, 128, 256), num_seqs_buckets=(1, 2, 4)),
        )
    elif target == "inf2":
        vllm = VllmSettings(
            model=str(llm_path),
            **common,
            nxdi=NxdiBuckets(
                enable_bucketing=True, context_encoding_buckets=(64, 128, 256), token_generation_buckets=(128, 256)
            ),
        )
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
    parts = key.split(".")
    return NEURON_KEY_SOURCES.get((parts[-2], parts[-1]), "") if len(parts) >= 3 else ""


def engine_args_table(
    model_dirs: Mapping[str, str | os.PathLike[str]],
    *,
    only_differences: bool = True,
    hide: tuple[str, ...] = ("model",),
) -> pd.DataFrame:
    """The engine arguments (``1/model.json``, nested keys as ``a.b.c``) of each named model
    directory, one column per name ("" where a directory leaves the key out), the keys in ``hide``
    left out, only the keys that differ with ``only_differences``; ``source`` cites the SDK page
    of each Neuron-only key."""
    columns = {
        name: _flatten(json.loads((Path(d) / "1" / "model.json").read_text(encoding="utf-8")))
        for name, d in model_dirs.items()
    }
    keys = [k for k in dict.fromkeys(k for c in columns.values() for k in c) if k not in hide]
    frame = pd.DataFrame({name: [c.get(k, "") for k in keys] for name, c in columns.items()}, index=keys)
    if only_differences:
        frame = frame[frame.astype(str).nunique(axis=1) > 1]
    frame["source"] = [_source(k) for k in frame.index]
    frame.index.name = "model.json key"
    return frame


def engine_args_text(table: pd.DataFrame) -> str:
    """`engine_args_table` as text that keeps its columns aligned in a notebook at 1280 and 1920 px:
    each source page a footnote ([1], [2]) listed under the table, not a 110-character cell that
    wrapped every row (issue 43)."""
    pages = list(dict.fromkeys(page for page in table["source"] if page))
    shown = table.assign(source=[f"[{pages.index(page) + 1}]" if page else "" for page in table["source"]])
    return "\n".join([shown.to_string(), ""] + [f"[{number}] {page}" for number, page in enumerate(pages, 1)])


def answers_table(check: GenerationCheck, llm_path: str | os.PathLike[str]) -> pd.DataFrame:
    """Each prompt and way of asking, the served answer decoded by the model's own tokenizer, its
    token count, and whether its token ids equal vLLM's offline generate."""
    from workbench.measure.engine.streaming import ModelTokenizer

    tokenizer = ModelTokenizer(llm_path)
    return pd.DataFrame(
        [
            {
                "prompt": r.prompt,
                "protocol": r.protocol,
                "answer": tokenizer.decode(list(r.served)),
                "tokens": len(r.served),
                "equal to offline": r.ok,
                "error": r.error,
            }
            for r in check.rows
        ]
    )


def stream_figures(result: StreamResult) -> pd.DataFrame:
    """The streaming point as the figures a person reads: TTFT and inter-token latency percentiles,
    output tokens per second, and the tokens the client received beside those the server counted."""
    server = result.server.output_tokens if result.server is not None else "not counted"
    rows = {
        "requests measured (failed)": f"{result.requests} ({result.failures})",
        "TTFT p50 / p99 (ms)": f"{result.ttft_ms['p50']:.1f} / {result.ttft_ms['p99']:.1f}",
        "inter-token latency p50 / p99 (ms)": f"{result.itl_ms['p50']:.2f} / {result.itl_ms['p99']:.2f}",
        "output tokens per second (95% interval)": f"{result.output_tokens_per_s:.1f} "
        f"({result.output_tokens_per_s_low:.1f}-"
        f"{result.output_tokens_per_s_high:.1f})",
        "tokens the client received (whole run)": result.client_total_tokens,
        "tokens the server counted": server,
    }
    return pd.DataFrame({"value": list(rows.values())}, index=pd.Index(list(rows), name="streaming"))


def stream_against_sweep(result: StreamResult, sweep: LlmSweepResult, variant: str) -> str:
    """Whether the streamed check and the sweep's point at the same setting (``variant``, the same
    concurrency) agree: both output tokens/s with their 95% intervals, and where the intervals do
    not overlap, why two measurements of one setting can differ here. Notebook 09 read 351.5 against
    99.6 tokens/s with no word on it (issue 43)."""
    rows = sweep.frame[(sweep.frame["variant"] == variant) & (sweep.frame["concurrency"] == result.concurrency)]
    if rows.empty:
        return f"the sweep has no point of {variant} at concurrency {result.concurrency} to compare with"
    row = rows.iloc[0]
    check = (
        f"streamed check {result.output_tokens_per_s:.1f} tokens/s ({result.output_tokens_per_s_low:.1f}-"
        f"{result.output_tokens_per_s_high:.1f})"
    )
    swept = (
        f"sweep {float(row['output_tokens_per_s']):.1f} ({float(row['output_tokens_per_s_low']):.1f}-"
        f"{float(row['output_tokens_per_s_high']):.1f})"
    )
    same = f"{variant} at concurrency {result.concurrency}: {check}, {swept}"
    if (
        result.output_tokens_per_s_low <= float(row["output_tokens_per_s_high"])
        and float(row["output_tokens_per_s_low"]) <= result.output_tokens_per_s_high
    ):
        return f"{same}: the 95% intervals overlap, so the two agree"
    load = f" (load average now {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)" if hasattr(os, "getloadavg") else ""
    return (
        f"{same}: the 95% intervals do not overlap. The engine itself ran at another pace: inter-token "
        f"latency p50 {result.itl_ms['p50']:.2f} ms in the check against {float(row['itl_p50_ms']):.2f} ms in the "
        f"sweep, TTFT p50 {result.ttft_ms['p50']:.1f} against {float(row['ttft_p50_ms']):.1f} ms. The two ran "
        f"minutes apart, a few 1-second windows each, on a machine others use too{load}: the CPU the engine "
        "gets changes between them, and each interval sees only its own windows. Measure longer (more windows, "
        "a quiet machine) for a figure to keep"
    )
