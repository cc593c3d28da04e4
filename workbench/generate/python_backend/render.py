"""Rendering for Triton's Python backend: config.pbtxt + the one model.py, in memory.

Upstream wrote eight string-templated model.py variants; here every model gets
``templates/python_model.py`` verbatim and config.pbtxt is Triton's own ModelConfig protobuf, built
from what the checks (`workbench.generate.settings_checks`) worked out. Writing, diffing and previewing are
the same for every backend (`workbench.generate.backends`).
"""

from __future__ import annotations

import importlib.resources
from pathlib import Path

from workbench.generate import options, preserve
from workbench.generate.config import ModelConfig, build_config, validate_config
from workbench.generate.product import GeneratedModel, kept_text
from workbench.generate.repository import FileContent
from workbench.generate.settings import GenerateError, GenerateSettings
from workbench.generate.settings_checks import Plan, make_plan, settled

__all__ = ["model_py_text", "render"]


def _parameters(settings: GenerateSettings, plan: Plan) -> dict[str, object]:
    core_map = settled(plan.core_map, "core map")
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
    return (importlib.resources.files("workbench.generate") / "templates" / "python_model.py").read_text(
        encoding="utf-8"
    )


def _config(settings: GenerateSettings, plan: Plan) -> ModelConfig:
    spec = settled(plan.spec, "tensor spec")
    config = build_config(
        settings.model_name,
        spec,
        max_batch_size=settings.max_batch_size,
        dynamic_batching=settings.enable_dynamic_batching,
        preferred_batch_sizes=settings.preferred_batch_size,
        max_queue_delay_us=settings.max_queue_delay_microseconds,
        instance_count=settings.triton_model_instance_count,
        parameters=_parameters(settings, plan),
    )
    options.apply(config, settings, spec)
    preserve.merge(config, settings.extra_config)
    problems = validate_config(config, directory_name=settings.model_dir.name)
    if problems:  # a gap between the checks and the config's own: still refuse to write
        raise GenerateError(problems)
    return config


def render(settings: GenerateSettings) -> GeneratedModel:
    """Check ``settings`` and build the files in memory; raises GenerateError listing every problem."""
    plan = make_plan(settings)
    if plan.problems:
        raise GenerateError(plan.problems)
    config = _config(settings, plan)
    config_text = kept_text(config, settings.model_dir / "config.pbtxt")
    model_py_source = Path(settings.model_py) if settings.model_py is not None else None
    model_py = model_py_source.read_text(encoding="utf-8", errors="replace") if model_py_source else model_py_text()
    files: dict[str, FileContent] = {
        "config.pbtxt": config_text,
        f"{settings.model_version}/model.py": model_py_source or model_py,
    }
    variants = {name: _config(variant, sub) for name, (variant, sub) in plan.variants.items()}
    files.update(
        {
            f"configs/{name}.pbtxt": kept_text(cfg, settings.model_dir / "configs" / f"{name}.pbtxt")
            for name, cfg in variants.items()
        }
    )
    files.update(plan.carried)
    files.update({rel: Path(source) for rel, source in settings.extra_files.items()})
    warnings = list(plan.warnings)
    if settings.model_py is not None:
        warnings.append(
            f"{settings.model_version}/model.py is kept as written ({settings.model_py}), not generated: "
            "it may not read the generated parameters"
        )
    return GeneratedModel(
        settings,
        settings.model_dir,
        settled(plan.spec, "tensor spec"),
        config,
        config_text,
        model_py,
        plan.core_map,
        files,
        warnings,
        variants,
    )
