"""Rendering for Triton's Python backend: config.pbtxt + the one model.py, previewed, written, diffed.

Upstream wrote eight string-templated model.py variants; here every model gets
``templates/python_model.py`` verbatim and config.pbtxt is Triton's own ModelConfig protobuf, built
from what the checks (`workbench.generate.checks`) worked out. `render` builds the files in memory,
`write` puts them on disk all or nothing, `diff` compares them with what is there.
"""

from __future__ import annotations

import importlib.resources
from dataclasses import dataclass, field
from pathlib import Path

from workbench.coremap import CoreMap
from workbench.generate import options, preserve
from workbench.generate.checks import Plan, make_plan
from workbench.generate.config import ConfigError, ModelConfig, build_config, from_text, to_text, validate_config
from workbench.generate.repository import (Changes, FileContent, WriteResult, compare_model_dir, diff_model_dir,
                                           write_model_dir)
from workbench.generate.settings import GenerateError, GenerateSettings
from workbench.spec import ModelSpec

__all__ = ["GeneratedModel", "model_py_text", "render", "write", "diff", "changes"]


@dataclass
class GeneratedModel:
    """Everything a generation produces, before it is written. ``variants`` holds the
    ``configs/<name>.pbtxt`` configs (tritonserver ``--model-config-name=<name>``). For Triton's
    PyTorch backend (``settings.backend == "pytorch"``) ``model_py`` is the PyTorch 2 module's
    source ("" for TorchScript) and there is no core map: LibTorch places nothing on cores."""

    settings: GenerateSettings
    dest: Path
    spec: ModelSpec
    config: ModelConfig
    config_text: str
    model_py: str
    core_map: CoreMap | None
    files: dict[str, FileContent]
    warnings: list[str]
    variants: dict[str, ModelConfig] = field(default_factory=dict)

    def config_files(self) -> dict[str, str]:
        """Every config this directory holds, by the name tritonserver selects it with ("" = config.pbtxt)."""
        return {"": self.config_text, **{name: self.files[f"configs/{name}.pbtxt"] for name in self.variants}}

    def changes(self) -> Changes:
        """What writing would change in the directory on disk; pass it to `write` as ``confirm``."""
        return compare_model_dir(self.dest, self.files)

    def dry_run(self) -> str:
        """What would be written: the file list, every config, model.py and the per-instance cores."""
        version = self.settings.model_version
        parts = [f"# model directory {self.dest} (nothing written)"]
        parts += [f"#   {rel}" + (f"  <- copy of {content}" if isinstance(content, Path) else "")
                  for rel, content in self.files.items()]
        for name, text in self.config_files().items():
            rel = f"configs/{name}.pbtxt" if name else "config.pbtxt"
            parts += ["", f"# ---- {self.dest / rel}", text.rstrip("\n")]
        if self.model_py:
            parts += ["", f"# ---- {self.dest / str(version) / 'model.py'}", self.model_py.rstrip("\n")]
        if self.core_map is not None:
            parts += ["", "# ---- core map", self.core_map.describe()]
        parts += [f"warning: {w}" for w in self.warnings]
        return "\n".join(parts) + "\n"


def _parameters(settings: GenerateSettings, plan: Plan) -> dict[str, object]:
    core_map = plan.core_map
    params: dict[str, object] = {
        "COMPILED_MODEL": plan.compiled_ref,
        **core_map.core_range.parameters(),
        **({} if settings.threads_per_core is None else {"NUM_THREADS_PER_CORE": settings.threads_per_core}),
        "WORKBENCH_TARGET": settings.target,
        "WORKBENCH_FRAMEWORK": settings.framework,
        "BATCH_REQUESTS": not settings.disable_batch_requests_to_neuron,
        "CPU_AFFINITY": settings.cpu_affinity,
    }
    if settings.framework == "tensorflow":
        params["TF_SIGNATURE_DEF_KEY"] = settings.signature_def_key
    params.update(plan.tnx)
    params.update(settings.parameters)  # the user's own: never one of the above (checked)
    return params


def model_py_text() -> str:
    """The one model.py (workbench/generate/templates/python_model.py), copied verbatim into every model."""
    return (importlib.resources.files("workbench.generate") / "templates" / "python_model.py").read_text(encoding="utf-8")


def _config(settings: GenerateSettings, plan: Plan) -> ModelConfig:
    config = build_config(
        settings.model_name,
        plan.spec,
        max_batch_size=settings.max_batch_size,
        dynamic_batching=settings.enable_dynamic_batching,
        preferred_batch_sizes=settings.preferred_batch_size,
        max_queue_delay_us=settings.max_queue_delay_microseconds,
        instance_count=settings.triton_model_instance_count,
        parameters=_parameters(settings, plan),
    )
    options.apply(config, settings, plan.spec)
    preserve.merge(config, settings.extra_config)
    problems = validate_config(config, directory_name=settings.model_dir.name)
    if problems:  # a gap between the checks and the config's own: still refuse to write
        raise GenerateError(problems)
    return config


def kept_text(config: ModelConfig, on_disk: Path) -> str:
    """The config's text: the file on disk as it is (comments, layout) when it already says exactly
    this ModelConfig, so regenerating an unchanged hand-edited directory rewrites nothing."""
    if on_disk.is_file():
        try:
            text = on_disk.read_text(encoding="utf-8")
            if from_text(text) == config:
                return text
        except (ConfigError, UnicodeDecodeError):
            pass
    return to_text(config)


def render(settings: GenerateSettings) -> GeneratedModel:
    """Check ``settings`` and build the files in memory; raises GenerateError listing every problem.
    Settings for Triton's PyTorch backend are rendered by `pytorch_backend.generate`."""
    if settings.backend == "pytorch":
        from workbench.generate.pytorch_backend.generate import render_pytorch

        return render_pytorch(settings)
    plan = make_plan(settings)
    if plan.problems:
        raise GenerateError(plan.problems)
    config = _config(settings, plan)
    config_text = kept_text(config, settings.model_dir / "config.pbtxt")
    model_py_source = Path(settings.model_py) if settings.model_py is not None else None
    model_py = model_py_source.read_text(encoding="utf-8", errors="replace") if model_py_source else model_py_text()
    files: dict[str, FileContent] = {"config.pbtxt": config_text,
                                     f"{settings.model_version}/model.py": model_py_source or model_py}
    variants = {name: _config(variant, sub) for name, (variant, sub) in plan.variants.items()}
    files.update({f"configs/{name}.pbtxt": kept_text(cfg, settings.model_dir / "configs" / f"{name}.pbtxt")
                  for name, cfg in variants.items()})
    files.update(plan.carried)
    files.update({rel: Path(source) for rel, source in settings.extra_files.items()})
    warnings = list(plan.warnings)
    if settings.model_py is not None:
        warnings.append(f"{settings.model_version}/model.py is kept as written ({settings.model_py}), not generated: "
                        "it may not read the generated parameters")
    return GeneratedModel(settings, settings.model_dir, plan.spec, config, config_text, model_py, plan.core_map,
                          files, warnings, variants)


def write(generated: GeneratedModel, dest: str | Path | None = None, overwrite: bool = False,
          confirm: Changes | None = None) -> WriteResult:
    """Write the directory atomically. An existing one is replaced (and backed up) only with
    ``overwrite``, or with ``confirm=generated.changes()`` reviewed while the disk stays as it was;
    an existing directory that would not change is left alone."""
    return write_model_dir(generated.dest if dest is None else dest, generated.files, overwrite=overwrite,
                           confirm=confirm)


def diff(settings: GenerateSettings) -> str:
    """Unified diff between the model directory on disk and what ``settings`` would write."""
    generated = render(settings)
    return diff_model_dir(generated.dest, generated.files)


def changes(settings: GenerateSettings) -> Changes:
    """What regenerating with ``settings`` would change on disk (files and config fields)."""
    return render(settings).changes()
