"""Every problem with vLLM-backend settings, collected before anything is written, in the words of
``workbench generate --backend vllm`` (its flags); and the core map the checks work out.

The model's shape comes from its folder's ``config.json`` (Hugging Face): attention and KV heads
for the tensor-parallel degree, ``max_position_embeddings`` for max_model_len.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workbench.coremap import CoreMap, CoreRange, CoreRangeError
from workbench.files import read_text, strict_json
from workbench.generate.settings import GenerateSettings
from workbench.generate.vllm_backend.engine_args import MAX_MEMORY_BYTES, engine_arg_problems
from workbench.generate.vllm_backend.engine_settings import (
    DTYPES,
    NXDI_TARGETS,
    VLLM_NEURON_TARGETS,
    NxdiBuckets,
    VllmNeuronBuckets,
    VllmSettings,
)
from workbench.limits import INT32_MAX, is_whole, model_name_problem, neuron_core_limit
from workbench.system import DEFAULT_LNC, LNC_VALUES

__all__ = ["VllmPlan", "plan", "FLAGS", "TOKENIZER_FILES", "CPU_MIN_SHARE"]

CONFIG_LIMIT = 16 * 2**20  # a Hugging Face config.json is KiBs; a /dev/zero link is not read whole

# VllmSettings field -> the flag that sets it (the CLI's words, also vLLM's own CLI spelling)
FLAGS = {
    "model": "--compiled_model",
    "tokenizer": "--tokenizer",
    "dtype": "--dtype",
    "max_model_len": "--max-model-len",
    "max_num_seqs": "--max-num-seqs",
    "max_num_batched_tokens": "--max-num-batched-tokens",
    "tensor_parallel_size": "--tensor-parallel-size",
    "block_size": "--block-size",
    "kv_cache_memory_bytes": "--kv-cache-memory-bytes",
    "gpu_memory_utilization": "--gpu-memory-utilization",
    "core_range": "--neuron_core_range",
    "lnc": "--lnc",
    "num_batched_tokens_buckets": "--num-batched-tokens-buckets",
    "num_seqs_buckets": "--num-seqs-buckets",
    "enable_bucketing": "--enable-bucketing",
    "context_encoding_buckets": "--context-encoding-buckets",
    "token_generation_buckets": "--token-generation-buckets",
}
# what transformers' AutoTokenizer loads a tokenizer from
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "tokenizer_config.json")
# vLLM's CPU engine takes the share per NUMA node minus the worker's size: 0.05 was refused here (BOARD 12:35)
CPU_MIN_SHARE = 0.1
# vLLM 0.32's CPU attention kernel takes block sizes that are multiples of 32
# (vllm/v1/attention/backends/cpu_attn.py get_supported_kernel_block_sizes: MultipleOf(32))
CPU_BLOCK_MULTIPLE = 32


@dataclass
class VllmPlan:
    """What the checks found: the problems (nothing is written while any), warnings, the model's
    config.json, and the instances' cores (None on the CPU)."""

    settings: VllmSettings | None
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    hf_config: dict = field(default_factory=dict)
    core_map: CoreMap | None = None


def _whole(value: Any, flag: str, problems: list[str], low: int = 1, high: int = INT32_MAX) -> bool:
    """A count vLLM takes: whole, at least ``low``, at most ``high`` (its C++ kernels and the Neuron
    runtime hold sequence counts and lengths in 32-bit ints)."""
    if value is None:
        return False
    if not is_whole(value) or not low <= value <= high:
        problems.append(f"{flag} {value!r}: give a whole number from {low} to {high}")
        return False
    return True


def _not_json(value: object) -> bool:
    """Whether ``value`` holds a number JSON cannot write (NaN, an infinity) anywhere in it."""
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, dict):
        return any(_not_json(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_not_json(v) for v in value)
    return False


def _model_config(folder: Path, problems: list[str]) -> dict:
    path = folder / "config.json"
    try:
        config = strict_json(read_text(path, limit=CONFIG_LIMIT))
    except FileNotFoundError:
        problems.append(f"--compiled_model {folder}: no config.json there (give a Hugging Face model folder)")
        return {}
    except (OSError, ValueError) as err:
        problems.append(f"--compiled_model {folder}: config.json cannot be read: {err}")
        return {}
    if not isinstance(config, dict):
        problems.append(
            f"--compiled_model {folder}: config.json must be a JSON object (a Hugging Face model "
            f"config), got a {type(config).__name__}"
        )
        return {}
    text = config.get("text_config")
    return {**(text if isinstance(text, dict) else {}), **config}


def _heads(vllm: VllmSettings, hf: dict, problems: list[str]) -> None:
    """vLLM's rule (vllm/model_executor/layers/linear.py QKVParallelLinear): the attention heads
    split evenly over the TP ranks; KV heads split evenly, or, when fewer than the ranks, are
    replicated, so the degree must be a multiple of them."""
    tp, heads = vllm.tensor_parallel_size, hf.get("num_attention_heads")
    kv_heads = hf.get("num_key_value_heads", heads)
    if is_whole(heads) and heads % tp:
        problems.append(
            f"--tensor-parallel-size {tp} does not divide the model's {heads} attention heads "
            "(config.json num_attention_heads)"
        )
    if is_whole(kv_heads) and kv_heads and (kv_heads % tp if kv_heads >= tp else tp % kv_heads):
        problems.append(
            f"--tensor-parallel-size {tp} does not fit the model's {kv_heads} KV heads "
            "(config.json num_key_value_heads): it must divide them, or be a multiple of them"
        )


def _buckets(values: tuple, flag: str, problems: list[str]) -> list[int]:
    good = [v for v in values if is_whole(v) and v >= 1]
    if len(good) != len(values):
        problems.append(f"{flag} {list(values)}: every bucket must be a whole number >= 1")
    elif good != sorted(set(good)):
        problems.append(f"{flag} {list(values)}: list the buckets once each, smallest first")
    return good


def _neuron_problems(settings: GenerateSettings, vllm: VllmSettings, problems: list[str]) -> None:
    target = settings.target
    given_vn = vllm.vllm_neuron != VllmNeuronBuckets()
    given_nx = vllm.nxdi != NxdiBuckets()
    if given_vn and target not in VLLM_NEURON_TARGETS:
        problems.append(
            f"{FLAGS['num_batched_tokens_buckets']}/{FLAGS['num_seqs_buckets']} are vLLM Neuron's "
            f"({', '.join(VLLM_NEURON_TARGETS)}), not --target {target}'s"
        )
    if given_nx and target not in NXDI_TARGETS:
        problems.append(
            f"{FLAGS['enable_bucketing']}/{FLAGS['context_encoding_buckets']}/"
            f"{FLAGS['token_generation_buckets']} are the NxD Inference plugin's "
            f"({', '.join(NXDI_TARGETS)}), not --target {target}'s"
        )
    # largest bucket = the engine maximum (VLLM_NEURON_CONFIG_DOC, "Largest must equal ...")
    for name, limit in (("num_batched_tokens_buckets", "max_num_batched_tokens"), ("num_seqs_buckets", "max_num_seqs")):
        buckets = _buckets(getattr(vllm.vllm_neuron, name), FLAGS[name], problems)
        if buckets and getattr(vllm, limit) != buckets[-1]:
            problems.append(
                f"{FLAGS[name]}: the largest bucket ({buckets[-1]}) must equal {FLAGS[limit]} "
                f"({getattr(vllm, limit) or 'not given'}), as vLLM Neuron requires"
            )
    # sequence buckets up to the sequence length (NXDI_NEURON_CONFIG_DOC: seq_len = max_model_len here)
    for name in ("context_encoding_buckets", "token_generation_buckets"):
        buckets = _buckets(getattr(vllm.nxdi, name), FLAGS[name], problems)
        if buckets and (vllm.max_model_len is None or buckets[-1] > vllm.max_model_len):
            problems.append(
                f"{FLAGS[name]}: the largest bucket ({buckets[-1]}) must be at most --max-model-len "
                f"({vllm.max_model_len or 'not given'}), the sequence length"
            )


def _core_map(settings: GenerateSettings, vllm: VllmSettings, plan: VllmPlan) -> None:
    target, tp = settings.target, vllm.tensor_parallel_size
    if target == "cpu":
        for name in ("core_range", "lnc"):
            if getattr(vllm, name) is not None:
                plan.problems.append(f"{FLAGS[name]} places NeuronCores; --target cpu has none (leave it out)")
        return
    if vllm.lnc is not None and (target not in DEFAULT_LNC or vllm.lnc not in LNC_VALUES):
        plan.problems.append(
            f"--lnc {vllm.lnc}: "
            + (
                f"one of {', '.join(map(str, LNC_VALUES))}"
                if target in DEFAULT_LNC
                else f"--target {target} has no LNC"
            )
        )
        return
    lnc = vllm.lnc or DEFAULT_LNC.get(target, 1)
    core_range = vllm.core_range if vllm.core_range is not None else CoreRange(0, tp - 1)
    if not isinstance(core_range, CoreRange):
        try:
            CoreRange.parse(core_range)
        except CoreRangeError as err:
            plan.problems.append(f"--neuron_core_range: {err}")
        return
    limit = neuron_core_limit(target)
    if limit is not None and core_range.end >= limit[1] // lnc:
        plan.problems.append(
            f"--neuron_core_range {core_range}: core {core_range.end} exists on no {target} "
            f"(the largest, {limit[0]}, has {limit[1] // lnc} at LNC={lnc})"
        )
    if tp > core_range.size:
        plan.problems.append(
            f"--tensor-parallel-size {tp} does not fit --neuron_core_range {core_range} "
            f"({core_range.size} core(s)): each instance needs {tp} cores"
        )
        return
    plan.core_map = core_range.blocks(tp)
    if len(plan.core_map.idle):
        idle = plan.core_map.idle
        plan.warnings.append(
            f"cores {idle[0]}-{idle[-1]} of {core_range} stay idle: {core_range.size} cores do not "
            f"split into instances of {tp}"
        )
    if plan.core_map.instances > 1:
        plan.warnings.append(
            "Triton's vLLM backend sets no NEURON_RT_VISIBLE_CORES per instance (src/model.py): "
            "each instance must be started with its own (the core map)"
        )


def plan(settings: GenerateSettings) -> VllmPlan:
    """Check ``settings`` (their ``backend_settings`` must be a VllmSettings); nothing is written."""
    vllm = settings.backend_settings
    if not isinstance(vllm, VllmSettings):
        return VllmPlan(None, [f"--backend vllm needs its settings (VllmSettings), got {type(vllm).__name__}"])
    out = VllmPlan(vllm)
    problems = out.problems
    if not settings.triton_model_dir:
        problems.append("--triton_model_dir is empty: name the model directory to write")
    elif model_name_problem(settings.model_name):  # a folder name and a URL segment, as for every backend
        problems.append(f"--name: {model_name_problem(settings.model_name)}")
    if not vllm.model:
        problems.append("--compiled_model is empty: give the model folder (config.json, weights, tokenizer)")
    elif not Path(vllm.model).is_dir():
        problems.append(f"--compiled_model {vllm.model}: no such model folder")
    else:
        out.hf_config = _model_config(Path(vllm.model), problems)
    tokenizer = Path(vllm.tokenizer or vllm.model)
    if vllm.model and tokenizer.is_dir() and not any((tokenizer / f).is_file() for f in TOKENIZER_FILES):
        problems.append(
            f"{'--tokenizer' if vllm.tokenizer else '--compiled_model'} {tokenizer}: no tokenizer there "
            f"({', '.join(TOKENIZER_FILES)})"
        )
    elif vllm.tokenizer and not tokenizer.is_dir():
        problems.append(f"--tokenizer {vllm.tokenizer}: no such folder")
    if vllm.dtype not in DTYPES:
        problems.append(f"--dtype {vllm.dtype!r} is not one of {', '.join(DTYPES)}")
    for name in ("max_num_seqs", "max_num_batched_tokens"):
        _whole(getattr(vllm, name), FLAGS[name], problems)
    _whole(vllm.kv_cache_memory_bytes, FLAGS["kv_cache_memory_bytes"], problems, high=MAX_MEMORY_BYTES)
    if vllm.max_model_len is not None and _whole(vllm.max_model_len, "--max-model-len", problems):
        positions = out.hf_config.get("max_position_embeddings")
        if is_whole(positions) and vllm.max_model_len > positions:
            problems.append(
                f"--max-model-len {vllm.max_model_len} is past the model's {positions} positions "
                "(config.json max_position_embeddings)"
            )
    if vllm.block_size is not None and _whole(vllm.block_size, "--block-size", problems):
        if settings.target == "cpu" and vllm.block_size % CPU_BLOCK_MULTIPLE:
            problems.append(
                f"--block-size {vllm.block_size}: vLLM's CPU attention takes multiples of {CPU_BLOCK_MULTIPLE}"
            )
    if vllm.kv_cache_memory_bytes is not None and vllm.gpu_memory_utilization is not None:
        problems.append("--kv-cache-memory-bytes and --gpu-memory-utilization both size the KV cache; give one")
    share = vllm.gpu_memory_utilization
    if share is not None:
        if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 < share <= 1:
            problems.append(f"--gpu-memory-utilization {share!r}: give a share in (0, 1]")
        elif settings.target == "cpu" and share < CPU_MIN_SHARE:
            problems.append(
                f"--gpu-memory-utilization {share}: vLLM's CPU engine refuses shares this small (taken "
                f"per NUMA node, minus the worker); give >= {CPU_MIN_SHARE} or --kv-cache-memory-bytes"
            )
    elif vllm.kv_cache_memory_bytes is None and settings.target == "cpu":
        out.warnings.append(
            "no KV-cache size: vLLM's CPU engine takes its default share of RAM (--kv-cache-memory-bytes sizes it)"
        )
    extra = vllm.extra_engine_args if isinstance(vllm.extra_engine_args, dict) else {}
    modelled = sorted(set(extra) & (set(FLAGS) - {"core_range", "lnc"}))
    if modelled:
        problems.append(
            f"--engine-arg {', '.join(modelled)}: set by their own flags ("
            f"{', '.join(FLAGS[k] for k in modelled)}), not as extra engine arguments"
        )
    if not isinstance(vllm.extra_engine_args, dict):
        problems.append(
            f"--engine-arg: the extra engine arguments must be a mapping, got {type(vllm.extra_engine_args).__name__}"
        )
    problems += engine_arg_problems(extra)
    not_json = sorted(key for key, value in extra.items() if _not_json(value))
    if not_json:
        problems.append(
            f"--engine-arg {', '.join(not_json)}: NaN and infinities are not JSON; model.json could not be read back"
        )
    if _whole(vllm.tensor_parallel_size, "--tensor-parallel-size", problems):
        _heads(vllm, out.hf_config, problems)
        _core_map(settings, vllm, out)
    _neuron_problems(settings, vllm, problems)
    return out
