"""The vLLM backend's own settings: the engine arguments ``1/model.json`` holds, typed, and per
Neuron target the plugin settings its docs define.

Triton's vLLM backend (triton-inference-server/vllm_backend src/model.py) reads ``<version>/model.json``
and passes every key to ``vllm.engine.arg_utils.AsyncEngineArgs(**...)``; it reads nothing else but
two config parameters. So the fields here are vLLM's engine-argument names, and the Neuron
settings travel inside vLLM's own ``additional_config`` engine argument, where each plugin reads them:

* Trn2/Trn3 -- vLLM Neuron (SDK 2.34, GA): ``additional_config["neuron_config"]`` with
  ``num_batched_tokens_buckets`` and ``num_seqs_buckets`` (`VLLM_NEURON_CONFIG_DOC`).
* Inf2/Trn1 -- vLLM 0.16 with the NxD Inference plugin: ``additional_config["override_neuron_config"]``
  overriding NxDI ``NeuronConfig`` fields, here ``enable_bucketing``, ``context_encoding_buckets``
  and ``token_generation_buckets`` (`NXDI_VLLM_DOC`, `NXDI_NEURON_CONFIG_DOC`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from workbench.coremap import CoreRange, CoreRangeError

__all__ = [
    "absolute_folder",
    "VllmSettings",
    "VllmNeuronBuckets",
    "NxdiBuckets",
    "VLLM_NEURON_TARGETS",
    "NXDI_TARGETS",
    "VLLM_NEURON_CONFIG_DOC",
    "NXDI_VLLM_DOC",
    "NXDI_NEURON_CONFIG_DOC",
    "NEURON_KEY_SOURCES",
    "DTYPES",
]

# vLLM Neuron serves Trn2/Trn3 only; Inf2/Trn1 keep the legacy vLLM 0.16 + NxDI plugin
# (SDK 2.34 libraries/vllm-neuron/neuron-inference-overview: "For Inf2 and Trn1 ... use Option 1").
VLLM_NEURON_TARGETS = ("trn2", "trn3")
NXDI_TARGETS = ("inf2", "trn1")

# Sources of every Neuron-only key written into model.json (one place; tests check against it).
VLLM_NEURON_CONFIG_DOC = (
    "https://awsdocs-neuron.readthedocs-hosted.com/en/latest/vllm-neuron/docs/guides/"
    "reference-configuration.html"
)  # "Compilation options" table; additional-config.html
NXDI_VLLM_DOC = (
    "https://awsdocs-neuron.readthedocs-hosted.com/en/v2.29.1/libraries/nxd-inference/"
    "developer_guides/vllm-user-guide-v1.html"
)  # override_neuron_config via additional_config
NXDI_NEURON_CONFIG_DOC = (
    "https://awsdocs-neuron.readthedocs-hosted.com/en/latest/libraries/nxd-inference/"
    "api-guides/api-guide.html"
)  # NeuronConfig: bucketing attributes
NEURON_KEY_SOURCES = {
    ("neuron_config", "num_batched_tokens_buckets"): VLLM_NEURON_CONFIG_DOC,
    ("neuron_config", "num_seqs_buckets"): VLLM_NEURON_CONFIG_DOC,
    ("override_neuron_config", "enable_bucketing"): NXDI_NEURON_CONFIG_DOC,
    ("override_neuron_config", "context_encoding_buckets"): NXDI_NEURON_CONFIG_DOC,
    ("override_neuron_config", "token_generation_buckets"): NXDI_NEURON_CONFIG_DOC,
}


def absolute_folder(path: str | None) -> str | None:
    """A local folder as an absolute path (model.json is read by a server started anywhere; vLLM
    would resolve a relative one against the server's working folder); empty or None stays so."""
    if not path or not isinstance(path, str):
        return path
    return os.path.abspath(os.path.expanduser(path))


# vLLM's ModelDType (vllm/config/model.py, 0.32): the values --dtype accepts
DTYPES = ("auto", "half", "float16", "bfloat16", "float", "float32")


@dataclass(frozen=True)
class VllmNeuronBuckets:
    """vLLM Neuron (Trn2/Trn3) ``additional_config.neuron_config`` compile buckets (VLLM_NEURON_CONFIG_DOC):
    prefill token counts (largest must equal max_num_batched_tokens) and decode batch sizes (largest
    must equal max_num_seqs). Empty: the plugin's default (powers of two up to those maxima)."""

    num_batched_tokens_buckets: tuple[int, ...] = ()
    num_seqs_buckets: tuple[int, ...] = ()


@dataclass(frozen=True)
class NxdiBuckets:
    """NxD Inference ``NeuronConfig`` fields overridden through vLLM (Inf2/Trn1; NXDI_VLLM_DOC,
    NXDI_NEURON_CONFIG_DOC): bucketing on/off and the context-encoding / token-generation sequence
    buckets (each up to the sequence length, max_model_len). None / empty: NxDI's default."""

    enable_bucketing: bool | None = None
    context_encoding_buckets: tuple[int, ...] = ()
    token_generation_buckets: tuple[int, ...] = ()


@dataclass
class VllmSettings:
    """What ``1/model.json`` says (vLLM engine-argument names) plus where the instances run.

    ``model``: the Hugging Face model folder (config.json, weights, tokenizer); ``tokenizer``: another
    folder for the tokenizer (None: the model's). The KV cache is sized by ``kv_cache_memory_bytes``
    or by ``gpu_memory_utilization`` (the share of device memory; on vLLM's CPU engine, of a NUMA
    node's RAM minus the worker's own size, so a small share is refused: give bytes, or >= 0.1).
    ``core_range``: the NeuronCores (at the target's LNC: logical cores) split into instances of
    ``tensor_parallel_size`` cores each; None: the first ``tensor_parallel_size`` cores. ``lnc``:
    trn2's logical NeuronCore config (None: the SDK default). ``extra_engine_args``: any other
    engine argument, kept as given (read-back carries what is not modelled here).
    """

    model: str = ""
    tokenizer: str | None = None
    dtype: str = "auto"
    max_model_len: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    tensor_parallel_size: int = 1
    block_size: int | None = None
    enforce_eager: bool = False
    kv_cache_memory_bytes: int | None = None
    gpu_memory_utilization: float | None = None
    core_range: CoreRange | str | None = None
    lnc: int | None = None
    vllm_neuron: VllmNeuronBuckets = field(default_factory=VllmNeuronBuckets)
    nxdi: NxdiBuckets = field(default_factory=NxdiBuckets)
    extra_engine_args: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.core_range is not None and not isinstance(self.core_range, CoreRange):
            try:
                self.core_range = CoreRange.parse_optional(self.core_range)
            except CoreRangeError:
                pass  # kept as given: validation names it
