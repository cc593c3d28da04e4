"""``workbench generate --backend vllm``'s own flags -> `VllmSettings` (vLLM's CLI spellings).

``--compiled_model`` names the Hugging Face model folder and ``--neuron_core_range`` the cores the
instances split (tensor-parallel-size cores each); both move into the VllmSettings, so the one
value lives in one place.
"""

from __future__ import annotations

import argparse
from typing import Any

from workbench.generate.settings import GenerateError, whole_numbers
from workbench.generate.vllm_backend.engine_args import parse_engine_arg_items
from workbench.generate.vllm_backend.engine_settings import (
    DTYPES,
    NxdiBuckets,
    VllmNeuronBuckets,
    VllmSettings,
    absolute_folder,
)

__all__ = ["add_vllm_flags", "vllm_values"]

_DEST = "vllm_"  # argparse dests: never a GenerateSettings field, so the generic flag handling skips them


def _buckets(text: str) -> tuple[int, ...]:
    try:
        return tuple(whole_numbers(text))
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def add_vllm_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "Triton's vLLM backend (--backend vllm)",
        "1/model.json's vLLM engine arguments; --compiled_model is the Hugging Face model folder, "
        "--neuron_core_range the cores split into instances of --tensor-parallel-size cores",
    )
    add = group.add_argument
    add("--tokenizer", dest=_DEST + "tokenizer", metavar="DIR", help="tokenizer folder (default: the model's)")
    add("--dtype", dest=_DEST + "dtype", choices=DTYPES, help="weights' dtype (default auto)")
    for flag, what in (
        ("--max-model-len", "context length (default: the model's)"),
        ("--max-num-seqs", "sequences per engine step"),
        ("--max-num-batched-tokens", "tokens per engine step"),
        ("--tensor-parallel-size", "cores (ranks) per instance (default 1)"),
        ("--block-size", "KV-cache block, tokens"),
        ("--kv-cache-memory-bytes", "KV-cache size in bytes"),
        ("--lnc", "trn2's logical NeuronCore config (default 2)"),
    ):
        add(flag, dest=_DEST + flag[2:].replace("-", "_"), type=int, metavar="N", help=what)
    add(
        "--gpu-memory-utilization",
        dest=_DEST + "gpu_memory_utilization",
        type=float,
        metavar="SHARE",
        help="KV cache as a share of device memory (on the CPU engine: give >= 0.1, or bytes)",
    )
    add("--enforce-eager", dest=_DEST + "enforce_eager", action="store_true", help="no compiled graphs")
    add(
        "--engine-arg",
        dest=_DEST + "engine_arg",
        action="append",
        metavar="KEY=JSON",
        help="any other vLLM engine argument, e.g. disable_log_stats=true",
    )
    neuron = parser.add_argument_group("vLLM Neuron (--backend vllm --target trn2|trn3)")
    neuron.add_argument(
        "--num-batched-tokens-buckets",
        dest=_DEST + "num_batched_tokens_buckets",
        type=_buckets,
        metavar="N,N",
        help="prefill token buckets; the largest = --max-num-batched-tokens",
    )
    neuron.add_argument(
        "--num-seqs-buckets",
        dest=_DEST + "num_seqs_buckets",
        type=_buckets,
        metavar="N,N",
        help="decode batch buckets; the largest = --max-num-seqs",
    )
    nxdi = parser.add_argument_group("NxD Inference plugin (--backend vllm --target inf2|trn1)")
    nxdi.add_argument("--enable-bucketing", dest=_DEST + "enable_bucketing", choices=("true", "false"))
    nxdi.add_argument(
        "--context-encoding-buckets",
        dest=_DEST + "context_encoding_buckets",
        type=_buckets,
        metavar="N,N",
        help="prompt (context) sequence buckets, up to --max-model-len",
    )
    nxdi.add_argument(
        "--token-generation-buckets",
        dest=_DEST + "token_generation_buckets",
        type=_buckets,
        metavar="N,N",
        help="generation sequence buckets, up to --max-model-len",
    )


def _engine_args(items: list[str]) -> dict:
    args, problems = parse_engine_arg_items(items)
    if problems:
        raise GenerateError(problems)
    return args


def vllm_values(given: dict[str, Any], values: dict[str, Any]) -> None:
    """Move the vLLM flags (and the model folder, the core range) into ``values["backend_settings"]``;
    refused without --backend vllm."""
    own = {key[len(_DEST) :]: value for key, value in given.items() if key.startswith(_DEST)}
    if given.get("backend") != "vllm":
        if own:
            flags = ", ".join("--" + key.replace("_", "-") for key in own)
            raise GenerateError([f"{flags}: for Triton's vLLM backend; add --backend vllm"])
        return
    neuron = VllmNeuronBuckets(
        **{k: own.pop(k) for k in ("num_batched_tokens_buckets", "num_seqs_buckets") if k in own}
    )
    bucketing = own.pop("enable_bucketing", None)
    nxdi = NxdiBuckets(
        None if bucketing is None else bucketing == "true",
        **{k: own.pop(k) for k in ("context_encoding_buckets", "token_generation_buckets") if k in own},
    )
    extra = _engine_args(own.pop("engine_arg", []) or [])
    for key in ("tokenizer",):  # folders: absolute, so the model directory works from any folder
        if own.get(key):
            own[key] = absolute_folder(own[key])
    values["backend_settings"] = VllmSettings(
        model=absolute_folder(values.pop("compiled_model", "")) or "",
        core_range=values.pop("neuron_core_range", None),
        vllm_neuron=neuron,
        nxdi=nxdi,
        extra_engine_args=extra,
        **own,
    )
