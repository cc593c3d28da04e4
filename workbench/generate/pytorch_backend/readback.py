"""Read-back of a model directory for Triton's PyTorch backend: the GenerateSettings (``backend``,
``runtime``, ``state_dict``, every parameter) that regenerate it, so the settings panel and
``workbench generate --diff/--dry-run`` can edit it.

Both layouts: TorchScript (``<v>/model.pt``, or ``default_model_filename``) and PyTorch 2
(``runtime: "model.py"``: ``<v>/model.py`` and an optional ``<v>/model.pt`` state dict), with
their ``configs/<name>.pbtxt`` variants. The model files in the directory become the sources the
next write copies from; what the settings do not model (other fields, ``platform``, other files
and versions) is kept. A directory the real backend serves but the workbench would not write
(an unknown parameter, ``INFERENCE_MODE: " true"``, another ``runtime``) still reads back, with
the value as written, so the checks refuse it naming the field.
"""

from __future__ import annotations

from dataclasses import fields, replace
from pathlib import Path

from workbench.generate import options, preserve
from workbench.generate.config import (
    ConfigError,
    ModelConfig,
    config_item,
    parameters_of,
    read_config,
    spec_from_config,
)
from workbench.generate.product import ReadBack
from workbench.generate.pytorch_backend.layouts import PYTORCH2, TORCHSCRIPT
from workbench.generate.pytorch_backend.serving import pytorch2_module_file
from workbench.generate.repository import version_folders
from workbench.generate.settings import GenerateSettings
from workbench.generate.settings_checks import FIXED_IN_VARIANTS

__all__ = ["is_pytorch_config", "read_back_pytorch", "model_files"]

_RUNTIMES = {"": TORCHSCRIPT, "model.py": PYTORCH2}


def is_pytorch_config(config: ModelConfig) -> bool:
    """True for a config Triton gives to its PyTorch backend (``backend: "pytorch"``, or the older
    ``platform: "pytorch_libtorch"``)."""
    return config.backend == "pytorch" or (not config.backend and config.platform == "pytorch_libtorch")


def model_files(config: ModelConfig, version: int, model_dir: Path | None = None) -> dict[str, str]:
    """Role -> the file, relative to the model directory, the backend loads for ``config``:
    ``model`` (the TorchScript archive, or what the PyTorch 2 runtime picks: `pytorch2_module_file`)
    and, for a PyTorch 2 module, ``state_dict`` (the same stem with ``.pt``, when it is there)."""
    if _RUNTIMES.get(config.runtime) != PYTORCH2:
        return {"model": f"{version}/{config.default_model_filename or 'model.pt'}"}
    folder = None if model_dir is None else model_dir / str(version)
    try:
        name = pytorch2_module_file(config, folder if folder is not None and folder.is_dir() else None)
    except FileNotFoundError:
        name = pytorch2_module_file(config)
    files = {"model": f"{version}/{name}"}
    if name.endswith(".py"):
        files["state_dict"] = f"{version}/{name[:-3]}.pt"
    return files


def _version(model_dir: Path, config: ModelConfig) -> int:
    """The newest version folder holding the model file (Triton's default policy serves the newest)."""
    versions = [int(p.name) for p in version_folders(model_dir) if int(p.name) > 0]
    with_model = [v for v in versions if (model_dir / model_files(config, v, model_dir)["model"]).is_file()]
    return (with_model or versions or [1])[-1]


def _settings(model_dir: Path, config: ModelConfig, version: int) -> tuple[GenerateSettings, list[str]]:
    """The settings one config (config.pbtxt or a configs/ variant) describes, and what was decided."""
    notes: list[str] = []
    files = model_files(config, version, model_dir)
    model, state_dict = model_dir / files["model"], ""
    if "state_dict" in files and (model_dir / files["state_dict"]).is_file():
        state_dict = str(model_dir / files["state_dict"])
    if _RUNTIMES.get(config.runtime) == PYTORCH2 and not files["model"].endswith(".py"):
        notes.append(
            f'runtime "model.py" with {files["model"]} and no module source: the PyTorch 2 runtime loads '
            "it as a TorchScript archive (torch.jit.load)"
        )
    try:
        spec = spec_from_config(config)
    except ConfigError:
        spec = None
    rest = ModelConfig()
    rest.CopyFrom(config)
    rest.ClearField("runtime")  # a setting of its own
    if rest.platform == "pytorch_libtorch" and not rest.backend:
        notes.append('platform: "pytorch_libtorch" (the older spelling) is kept; the generator adds backend: "pytorch"')
    group = config.instance_group[0] if len(config.instance_group) else None
    batching = config.dynamic_batching if config.HasField("dynamic_batching") else None
    settings = GenerateSettings(
        triton_model_dir=str(model_dir),
        compiled_model=str(model),
        framework="pytorch",
        target="cpu",
        backend="pytorch",
        runtime=config.runtime,
        state_dict=state_dict,
        triton_input=[config_item(t) for t in config.input],
        triton_output=[config_item(t) for t in config.output],
        triton_model_instance_count=(group.count or 1) if group is not None else 1,
        model_version=version,
        max_batch_size=config.max_batch_size,
        enable_dynamic_batching=batching is not None,
        preferred_batch_size=list(batching.preferred_batch_size) if batching is not None else [],
        max_queue_delay_microseconds=(batching.max_queue_delay_microseconds or None) if batching is not None else None,
        parameters=dict(parameters_of(config)),  # every key is the backend's: the checks name a foreign one
        extra_config=preserve.residual_text(rest),
        **options.read(config, spec),
    )
    return settings, notes


def read_back_pytorch(model_dir: str | Path, config: ModelConfig | None = None) -> ReadBack:
    """The `ReadBack` of a PyTorch-backend directory (``config``: its config.pbtxt, already read)."""
    model_dir = Path(model_dir)
    config = read_config(model_dir) if config is None else config
    version = _version(model_dir, config)
    base, notes = _settings(model_dir, config, version)
    variants = {}
    configs = model_dir / "configs"
    for path in sorted(configs.glob("*.pbtxt")) if configs.is_dir() else []:
        variant, _ = _settings(model_dir, read_config(path), version)
        variants[path.stem] = {
            f.name: getattr(variant, f.name)
            for f in fields(GenerateSettings)
            if f.name not in FIXED_IN_VARIANTS and getattr(variant, f.name) != getattr(base, f.name)
        }
    settings = replace(base, variants=variants)
    owned = {"config.pbtxt", *(f"configs/{name}.pbtxt" for name in variants)}
    for cfg in [config, *(read_config(configs / f"{name}.pbtxt") for name in variants)]:
        owned |= {rel for rel in model_files(cfg, version, model_dir).values() if (model_dir / rel).is_file()}
    owned |= {str(Path(p).relative_to(model_dir)) for p in (settings.compiled_model, settings.state_dict) if p}
    settings.extra_files = preserve.unowned_files(model_dir, owned)
    if settings.extra_files:
        notes.append(
            f"kept {len(settings.extra_files)} file(s) the generator does not write: " + ", ".join(settings.extra_files)
        )
    return ReadBack(settings, notes)
