"""A vLLM-backend model directory -> the settings that regenerate it, nothing lost.

model.json keys the settings model become their fields (the Neuron plugin keys included); any other
key is kept in ``extra_engine_args``; config parameters other than ours are kept in ``parameters``;
a config field or instance count regenerating would not write is named in the notes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from workbench.coremap import CoreRange, CoreRangeError
from workbench.files import read_text, strict_json
from workbench.generate.config import ConfigError, ModelConfig, parameters_of
from workbench.generate.product import ReadBack
from workbench.generate.settings import GenerateSettings
from workbench.generate.vllm_backend.engine_args import MAPPING_ARGS
from workbench.generate.vllm_backend.engine_settings import NxdiBuckets, VllmNeuronBuckets, VllmSettings
from workbench.generate.vllm_backend.render import _ENGINE_FIELDS, LNC_PARAMETER, TARGET_PARAMETER

__all__ = ["read_back_vllm", "engine_args_file"]

MODEL_JSON_LIMIT = 2**20  # engine arguments are KiBs; a /dev/zero link is not read whole


def engine_args_file(model_dir: Path) -> Path:
    """The newest version folder's model.json (Triton serves the highest version by default)."""
    versions = sorted((int(p.name) for p in model_dir.iterdir() if p.is_dir() and p.name.isdigit()), reverse=True)
    for version in versions:
        if (model_dir / str(version) / "model.json").is_file():
            return model_dir / str(version) / "model.json"
    raise ConfigError(f"{model_dir}: no <version>/model.json (the vLLM engine arguments)")


def _split_additional(args: dict) -> tuple[VllmNeuronBuckets, NxdiBuckets]:
    additional = args.get("additional_config")
    if not isinstance(additional, dict):
        return VllmNeuronBuckets(), NxdiBuckets()
    for space in MAPPING_ARGS["additional_config"]:  # a namespace that is not one would be lost
        if space in additional and not isinstance(additional[space], dict):
            raise ConfigError(
                f"additional_config.{space} must be a JSON object, got {type(additional[space]).__name__}"
            )
    neuron = additional.get("neuron_config", {})
    override = additional.get("override_neuron_config", {})
    vn_keys, nx_keys = set(vars(VllmNeuronBuckets())), set(vars(NxdiBuckets()))
    vn = VllmNeuronBuckets(**{k: tuple(v) for k, v in neuron.items() if k in vn_keys})
    nx_values: dict[str, Any] = {
        k: (tuple(v) if isinstance(v, list) else v) for k, v in override.items() if k in nx_keys
    }
    nx = NxdiBuckets(**nx_values)
    rest_neuron = {k: v for k, v in neuron.items() if k not in vn_keys}
    rest_override = {k: v for k, v in override.items() if k not in nx_keys}
    rest = {k: v for k, v in additional.items() if k not in ("neuron_config", "override_neuron_config")}
    if rest_neuron:
        rest["neuron_config"] = rest_neuron
    if rest_override:
        rest["override_neuron_config"] = rest_override
    if rest:
        args["additional_config"] = rest
    else:
        args.pop("additional_config")
    return vn, nx


# config.pbtxt fields the generator writes (inputs/outputs: the backend's auto-complete adds them)
_WRITTEN = {
    "name",
    "backend",
    "max_batch_size",
    "instance_group",
    "model_transaction_policy",
    "parameters",
    "input",
    "output",
}


def _not_carried(config: ModelConfig, vllm: VllmSettings, target: str) -> list[str]:
    """One note per config field regenerating would not write (a hand edit), so nothing goes unsaid."""
    notes = [
        f"config field {f.name} is not written by the vLLM generator: regenerating drops it"
        for f, _ in config.ListFields()
        if f.name not in _WRITTEN
    ]
    tp = vllm.tensor_parallel_size if isinstance(vllm.tensor_parallel_size, int) and vllm.tensor_parallel_size else 1
    size = vllm.core_range.size if isinstance(vllm.core_range, CoreRange) else tp
    count = sum(group.count for group in config.instance_group) or 1
    expected = 1 if target == "cpu" else max(size // tp, 1)
    if count != expected:
        notes.append(
            f"{count} instance(s) in instance_group; regenerating writes {expected} (the core range "
            f"split into instances of {tp} core(s))"
        )
    return notes


def read_back_vllm(model_dir: Path, config: ModelConfig) -> ReadBack:
    path = engine_args_file(model_dir)
    try:
        args = strict_json(read_text(path, limit=MODEL_JSON_LIMIT))
    except ValueError as err:  # not JSON, not UTF-8, NaN/Infinity, a repeated key, nested too deep
        raise ConfigError(f"{path}: not JSON: {err}") from None
    except OSError as err:  # a FIFO, a /dev link, a symlink: not read
        raise ConfigError(f"{err}") from None
    if not isinstance(args, dict):
        raise ConfigError(f"{path}: must be a JSON object of vLLM engine arguments")
    try:
        neuron, nxdi = _split_additional(args)
    except ConfigError as err:
        raise ConfigError(f"{path}: {err}") from None
    notes: list[str] = []
    params = parameters_of(config)
    target = params.pop(TARGET_PARAMETER, None)
    if target is None:
        target = "cpu"
        notes.append(f"no {TARGET_PARAMETER} parameter: read as target cpu")
    try:
        core_range = CoreRange.from_parameters(params)
    except CoreRangeError as err:
        raise ConfigError(str(err)) from None
    for key in core_range.parameters() if core_range is not None else {}:
        params.pop(key)
    lnc = params.pop(LNC_PARAMETER, None)
    fields = {name: args.pop(name) for name in _ENGINE_FIELDS if name in args}
    vllm = VllmSettings(
        model=str(args.pop("model", "")),
        **fields,
        core_range=core_range,
        lnc=None if lnc is None else int(lnc),
        vllm_neuron=neuron,
        nxdi=nxdi,
        extra_engine_args=args,
    )
    if core_range is not None and core_range == CoreRange(0, vllm.tensor_parallel_size - 1):
        vllm.core_range = None  # the default range: regenerating writes the same parameters
    notes += _not_carried(config, vllm, target)
    version = int(path.parent.name)
    settings = GenerateSettings(
        triton_model_dir=str(model_dir),
        backend="vllm",
        target=target,
        model_version=version,
        parameters=params,
        backend_settings=vllm,
    )
    return ReadBack(settings, notes)
