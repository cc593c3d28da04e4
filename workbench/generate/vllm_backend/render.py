"""Rendering for Triton's vLLM backend: config.pbtxt + ``<version>/model.json``, in memory.

config.pbtxt says ``backend: "vllm"``, one KIND_MODEL instance group (the backend refuses KIND_GPU
for multi-device models and leaves placement to vLLM), max_batch_size 0 and a decoupled transaction
policy (what the backend's auto-complete sets anyway; written so the file says how it is served).
Inputs and outputs are left to the backend's auto-complete (``text_input``, ``stream``,
``sampling_parameters`` ... -> ``text_output``). The parameters record the target and the core range
for read-back; the backend itself reads none of them.
"""

from __future__ import annotations

import json

from workbench.generate.config import ModelConfig, parameter_string
from workbench.generate.product import GeneratedModel, kept_text
from workbench.generate.repository import FileContent
from workbench.generate.settings import GenerateSettings
from workbench.generate.vllm_backend.engine_checks import VllmPlan
from workbench.generate.vllm_backend.engine_settings import (
    NXDI_TARGETS,
    VLLM_NEURON_TARGETS,
    VllmSettings,
    absolute_folder,
)
from workbench.spec import ModelSpec, TensorSpec
from workbench.system import DEFAULT_LNC

__all__ = [
    "model_json",
    "model_json_text",
    "vllm_config",
    "render",
    "instance_environment",
    "TARGET_PARAMETER",
    "LNC_PARAMETER",
    "SPEC",
]

TARGET_PARAMETER = "WORKBENCH_TARGET"
LNC_PARAMETER = "NEURON_LOGICAL_NC_CONFIG"  # the runtime's own variable name (SDK logical-neuroncore-config)
# what the backend's auto-complete declares first (src/model.py _auto_complete_inputs_and_outputs)
SPEC = ModelSpec((TensorSpec("text_input", "BYTES", (1,)),), (TensorSpec("text_output", "BYTES", (-1,)),))
# VllmSettings fields written under their own name when set (None / False left out: vLLM's default)
_ENGINE_FIELDS = (
    "tokenizer",
    "dtype",
    "max_model_len",
    "max_num_seqs",
    "max_num_batched_tokens",
    "tensor_parallel_size",
    "block_size",
    "enforce_eager",
    "kv_cache_memory_bytes",
    "gpu_memory_utilization",
)


def model_json(settings: GenerateSettings) -> dict:
    """vLLM's engine arguments for these settings: what AsyncEngineArgs(**...) receives."""
    vllm = settings.backend_settings
    assert isinstance(vllm, VllmSettings)
    args: dict = {"model": absolute_folder(vllm.model)}  # read by a server started in any folder
    for name in _ENGINE_FIELDS:
        value = absolute_folder(vllm.tokenizer) if name == "tokenizer" else getattr(vllm, name)
        if value is not None and value is not False:
            args[name] = value
    additional: dict = {}
    if settings.target in VLLM_NEURON_TARGETS:
        neuron = {k: list(v) for k, v in vars(vllm.vllm_neuron).items() if v}
        if neuron:
            additional["neuron_config"] = neuron
    if settings.target in NXDI_TARGETS:
        override = {
            k: (list(v) if isinstance(v, tuple) else v) for k, v in vars(vllm.nxdi).items() if v is not None and v != ()
        }
        if override:
            additional["override_neuron_config"] = override
    extra = dict(vllm.extra_engine_args)
    if additional:  # merged into the user's own additional_config, namespace by namespace
        merged = dict(extra.pop("additional_config", {}))
        for space, keys in additional.items():
            merged[space] = {**merged.get(space, {}), **keys}
        args["additional_config"] = merged
    args.update(extra)
    return args


def model_json_text(args: dict) -> str:
    return json.dumps(args, indent=2, allow_nan=False) + "\n"  # strict JSON: the checks refused NaN


def vllm_config(settings: GenerateSettings, plan: VllmPlan) -> ModelConfig:
    instances = plan.core_map.instances if plan.core_map is not None else 1
    config = ModelConfig(name=settings.model_name, backend="vllm", max_batch_size=0)
    config.instance_group.add(kind="KIND_MODEL", count=instances)
    config.model_transaction_policy.decoupled = True
    params: dict[str, object] = {TARGET_PARAMETER: settings.target}
    if plan.core_map is not None:
        params.update(plan.core_map.core_range.parameters())
    vllm = settings.backend_settings
    if isinstance(vllm, VllmSettings) and vllm.lnc is not None:
        params[LNC_PARAMETER] = vllm.lnc
    params.update(settings.parameters)
    for key, value in params.items():
        config.parameters[key].string_value = parameter_string(value)
    return config


def render(settings: GenerateSettings, checked: VllmPlan) -> GeneratedModel:
    """The files in memory, from settings whose `checks.plan` found no problem."""
    config = vllm_config(settings, checked)
    config_text = kept_text(config, settings.model_dir / "config.pbtxt")
    engine_args = f"{settings.model_version}/model.json"
    files: dict[str, FileContent] = {"config.pbtxt": config_text, engine_args: model_json_text(model_json(settings))}
    return GeneratedModel(
        settings,
        settings.model_dir,
        SPEC,
        config,
        config_text,
        "",
        checked.core_map,
        files,
        list(checked.warnings),
        shown=(engine_args,),
        core_notes=instance_environment(settings, checked),
    )


def instance_environment(settings: GenerateSettings, plan: VllmPlan) -> tuple[str, ...]:
    """One line per instance: the Neuron runtime variables it must start with (its cores, at the
    target's LNC: logical NeuronCores on Trn2/Trn3)."""
    if plan.core_map is None:
        return ()
    vllm = settings.backend_settings
    lnc = (vllm.lnc if isinstance(vllm, VllmSettings) else None) or DEFAULT_LNC.get(settings.target, 1)
    lines = tuple(
        f"  instance {k}: NEURON_RT_VISIBLE_CORES={plan.core_map.visible_cores(k)}"
        + (f" {LNC_PARAMETER}={lnc}" if settings.target in DEFAULT_LNC else "")
        + f" (tensor_parallel_size {plan.core_map.cores_per_instance})"
        for k in range(plan.core_map.instances)
    )
    if settings.target in VLLM_NEURON_TARGETS:  # vLLM Neuron's CPU compilation (cpu_compile.CPU_COMPILE_DOC)
        lines += (
            (
                f"  NEFFs without a device: workbench cpu-compile {settings.model_dir} prints the "
                "CPU-compile environment and command"
            ),
        )
    return lines
