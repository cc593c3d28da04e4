"""What the generator does not own, kept through read-back and regeneration.

A hand-edited config.pbtxt has fields the settings do not model (``label_filename``, ``optimization``,
``sequence_batching`` ...), custom parameters, extra files (a tokenizer, warm-up data) and perhaps a
rewritten model.py. Read-back splits the config into what the settings model and the *residual*
(`residual_text`); rendering merges the residual back (`merge`), so regenerating an unchanged
directory rewrites it byte for byte and an edited setting changes only its own field.
"""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath
from typing import Any

from workbench.generate.config import ConfigError, ModelConfig, from_text, to_text
from workbench.generate.repository import files_under
from workbench.generate.settings import TNX_PARAMETERS
from workbench.spec import ModelSpec

__all__ = ["OWNED_PARAMETERS", "residual_text", "merge", "problems", "unowned_files"]

# parameters the generator writes itself (the rest are the user's, in GenerateSettings.parameters)
OWNED_PARAMETERS = frozenset(
    {
        "COMPILED_MODEL",
        "NEURON_CORE_START_INDEX",
        "NEURON_CORE_END_INDEX",
        "NUM_THREADS_PER_CORE",
        "WORKBENCH_TARGET",
        "WORKBENCH_FRAMEWORK",
        "BATCH_REQUESTS",
        "CPU_AFFINITY",
        "TF_SIGNATURE_DEF_KEY",
        "TNX_COMPILED_DIR",
        *TNX_PARAMETERS.values(),
    }
)
# fields the settings model; everything else in a config is residual
_OWNED_TOP = (
    "name",
    "backend",
    "max_batch_size",
    "dynamic_batching",
    "parameters",
    "version_policy",
    "model_warmup",
    "response_cache",
    "model_transaction_policy",
)
_OWNED_ENTRY = {
    "input": ("name", "data_type", "dims", "optional"),
    "output": ("name", "data_type", "dims"),
    "instance_group": ("name", "kind", "count", "rate_limiter"),
}
_SCHEDULERS = ("sequence_batching", "ensemble_scheduling")


def _set_fields(message: Any) -> list[str]:
    return [descriptor.name for descriptor, _ in message.ListFields()]


def _strip(message: Any, owned: tuple[str, ...]) -> None:
    for name in owned:
        message.ClearField(name)


def residual_text(cfg: ModelConfig) -> str:
    """config.pbtxt text of every field of ``cfg`` the settings do not model ("" when none).
    Inputs and outputs keep their name (to merge back by); instance groups keep their position."""
    rest = ModelConfig()
    rest.CopyFrom(cfg)
    _strip(rest, _OWNED_TOP)
    for kind in ("input", "output"):
        kept = []
        for entry in getattr(cfg, kind):
            copy = type(entry)()
            copy.CopyFrom(entry)
            _strip(copy, _OWNED_ENTRY[kind])
            if _set_fields(copy):
                copy.name = entry.name
                kept.append(copy)
        rest.ClearField(kind)
        getattr(rest, kind).extend(kept)
    groups = rest.instance_group
    if len(groups):
        _strip(groups[0], _OWNED_ENTRY["instance_group"])
        while len(groups) and not _set_fields(groups[-1]):
            del groups[-1]
    return to_text(rest) if _set_fields(rest) else ""


def _parse(text: str) -> ModelConfig:
    return from_text(text, source="extra_config")


def merge(cfg: ModelConfig, extra_config: str) -> None:
    """Merge the residual (already checked by `problems`) into the generated ``cfg``."""
    if not extra_config.strip():
        return
    rest = _parse(extra_config)
    for kind in ("input", "output"):
        by_name = {entry.name: entry for entry in getattr(cfg, kind)}
        for entry in getattr(rest, kind):
            by_name[entry.name].MergeFrom(entry)
        rest.ClearField(kind)
    for position, group in enumerate(rest.instance_group):
        if position < len(cfg.instance_group):
            cfg.instance_group[position].MergeFrom(group)
        else:
            cfg.instance_group.add().CopyFrom(group)
    rest.ClearField("instance_group")
    cfg.MergeFrom(rest)


def _extra_config_problems(settings: Any, spec: ModelSpec | None) -> list[str]:
    try:
        rest = _parse(settings.extra_config)
    except ConfigError as err:
        return [str(err)]
    found = []
    owned = [name for name in _set_fields(rest) if name in _OWNED_TOP]
    if owned:
        found.append(f"extra_config sets {', '.join(owned)}, which the settings own: set them there instead")
    for kind in ("input", "output"):
        names = {t.name for t in (spec.inputs if kind == "input" else spec.outputs)} if spec is not None else None
        for entry in getattr(rest, kind):
            clash = [f for f in _set_fields(entry) if f in _OWNED_ENTRY[kind] and f != "name"]
            if clash:
                found.append(f"extra_config {kind} {entry.name!r} sets {', '.join(clash)}, which the settings own")
            if names is not None and entry.name not in names:
                found.append(
                    f"extra_config {kind} {entry.name!r} is not one of the model's {kind}s ({', '.join(sorted(names))})"
                )
    for position, group in enumerate(rest.instance_group):
        clash = [f for f in _set_fields(group) if f in _OWNED_ENTRY["instance_group"]]
        if position == 0 and clash:
            found.append(f"extra_config instance_group sets {', '.join(clash)}, which the settings own")
    schedulers = [name for name in _SCHEDULERS if rest.HasField(name)]
    if schedulers and settings.enable_dynamic_batching:
        found.append(
            f"extra_config has {schedulers[0]}, and Triton takes one scheduler: drop it or --enable_dynamic_batching"
        )
    if "sequence_batching" in schedulers and settings.response_cache:
        found.append("--response-cache cannot be used with sequence batching (Triton refuses the load)")
    return found


def problems(settings: Any, spec: ModelSpec | None, generated_files: set[str]) -> list[str]:
    """What is wrong with the kept parts of ``settings``: custom parameters, the residual config, the
    extra files and model.py, and a relative path whose meaning regeneration would change."""
    found = []
    for key, value in settings.parameters.items():
        if not str(key).strip() or not re.fullmatch(r"[^\s]+", str(key)):
            found.append(f"parameter key {key!r} must be a non-empty word")
        elif key in OWNED_PARAMETERS:
            found.append(f"parameter {key} is written by the generator; set it through its setting, not parameters")
        elif not isinstance(value, (str, int, float, bool)):
            found.append(f"parameter {key}: value {value!r} must be a string (Triton stores strings)")
    if settings.extra_config.strip():
        found += _extra_config_problems(settings, spec)
    for rel, source in settings.extra_files.items():
        path = PurePosixPath(str(rel))
        if path.is_absolute() or ".." in path.parts or not str(rel).strip():
            found.append(f"extra file {rel!r} must be a relative path inside the model directory")
        elif str(path) in generated_files:
            found.append(f"extra file {rel} is also a file the generator writes")
        elif not Path(source).exists():
            found.append(f"extra file {rel}: its source {source} does not exist")
    if settings.model_py is not None and not Path(settings.model_py).is_file():
        found.append(f"model_py {settings.model_py} is not a file")
    compiled = str(settings.compiled_model).strip()
    if settings.compiled_model_base not in ("model_dir", "server_cwd"):
        found.append(f"compiled_model_base {settings.compiled_model_base!r} is not model_dir or server_cwd")
    elif settings.compiled_model_base == "server_cwd" and compiled and not Path(compiled).is_absolute():
        found.append(
            f"--compiled_model {compiled!r} is relative to tritonserver's working directory (upstream's inf1 "
            "model.py opened it as written), but the generated model.py resolves it against the model "
            "directory, so regenerating would change what is loaded; give its absolute path (or a path "
            "relative to the model directory with compiled_model_base='model_dir')"
        )
    return found


def unowned_files(model_dir: Path, owned: set[str]) -> dict[str, str]:
    """Files under ``model_dir`` that are neither in ``owned`` nor inside an owned folder (a SavedModel),
    relative path -> absolute path (files in symlinked folders too, copied when written); ``__pycache__`` is
    left out (Python writes it beside a loaded model.py)."""
    found = {}
    for text in files_under(model_dir):
        if text in owned or any(text.startswith(prefix.rstrip("/") + "/") for prefix in owned):
            continue
        found[text] = str((model_dir / text).resolve())
    return found
