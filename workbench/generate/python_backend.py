"""Rendering for Triton's Python backend: config.pbtxt + the one model.py, previewed, written, diffed.

Upstream wrote eight string-templated model.py variants; here every model gets
``templates/python_model.py`` verbatim and config.pbtxt is Triton's own ModelConfig protobuf, built
from what the checks (`workbench.generate.checks`) worked out. `render` builds the files in memory,
`write` puts them on disk all or nothing, `diff` compares them with what is there.
"""

from __future__ import annotations

import importlib.resources
from dataclasses import dataclass
from pathlib import Path

from workbench.coremap import CoreMap
from workbench.generate.checks import Plan, make_plan
from workbench.generate.config import ModelConfig, build_config, to_text, validate_config
from workbench.generate.repository import FileContent, WriteResult, diff_model_dir, write_model_dir
from workbench.generate.settings import GenerateError, GenerateSettings
from workbench.spec import ModelSpec

__all__ = ["GeneratedModel", "model_py_text", "render", "write", "diff"]


@dataclass
class GeneratedModel:
    """Everything a generation produces, before it is written."""

    settings: GenerateSettings
    dest: Path
    spec: ModelSpec
    config: ModelConfig
    config_text: str
    model_py: str
    core_map: CoreMap
    files: dict[str, FileContent]
    warnings: list[str]

    def dry_run(self) -> str:
        """What would be written: the file list, config.pbtxt, model.py and the per-instance cores."""
        version = self.settings.model_version
        parts = [f"# model directory {self.dest} (nothing written)"]
        parts += [f"#   {rel}" + (f"  <- copy of {content}" if isinstance(content, Path) else "")
                  for rel, content in self.files.items()]
        parts += ["", f"# ---- {self.dest / 'config.pbtxt'}", self.config_text.rstrip("\n"),
                  "", f"# ---- {self.dest / str(version) / 'model.py'}", self.model_py.rstrip("\n"),
                  "", "# ---- core map", self.core_map.describe()]
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
    return params


def model_py_text() -> str:
    """The one model.py (workbench/generate/templates/python_model.py), copied verbatim into every model."""
    return (importlib.resources.files("workbench.generate") / "templates" / "python_model.py").read_text(encoding="utf-8")


def render(settings: GenerateSettings) -> GeneratedModel:
    """Check ``settings`` and build the files in memory; raises GenerateError listing every problem."""
    plan = make_plan(settings)
    if plan.problems:
        raise GenerateError(plan.problems)
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
    problems = validate_config(config, directory_name=settings.model_dir.name)
    if problems:  # a gap between the checks above and the config's own: still refuse to write
        raise GenerateError(problems)
    config_text = to_text(config)
    model_py = model_py_text()
    files: dict[str, FileContent] = {"config.pbtxt": config_text, f"{settings.model_version}/model.py": model_py}
    files.update(plan.carried)
    return GeneratedModel(settings, settings.model_dir, plan.spec, config, config_text, model_py, plan.core_map,
                          files, plan.warnings)


def write(generated: GeneratedModel, dest: str | Path | None = None, overwrite: bool = False) -> WriteResult:
    """Write the directory atomically; an existing one is refused unless ``overwrite`` (then backed up)."""
    return write_model_dir(generated.dest if dest is None else dest, generated.files, overwrite=overwrite)


def diff(settings: GenerateSettings) -> str:
    """Unified diff between the model directory on disk and what ``settings`` would write."""
    generated = render(settings)
    return diff_model_dir(generated.dest, generated.files)

