"""`GenerateSettings` with ``backend="pytorch"`` -> a model directory for Triton's PyTorch backend.

The CLI (``workbench generate --backend pytorch``) and the settings panel come here through
the backend switch (`workbench.generate.backends`), so preview, diff and write are the same calls
for every backend. The layout is Triton's ``runtime`` field: empty for a TorchScript archive
(``<version>/model.pt``), ``"model.py"`` for a PyTorch 2 module (``<version>/model.py`` and, with
``state_dict``, ``<version>/model.pt``). The backend's switches are the config's ``parameters``,
checked by `configs.pytorch_problems` (one table of keys and values, `layouts`); the model file is
checked by `files` (TorchScript archive, forward() arguments, the module class the runtime picks).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import cast

from workbench.generate import options, preserve, rules
from workbench.generate.config import ModelConfig, parameter_string
from workbench.generate.product import GeneratedModel, kept_text
from workbench.generate.pytorch_backend.configs import build_pytorch_config, check_pytorch_config
from workbench.generate.pytorch_backend.layout_files import is_torchscript_archive, pytorch2_files, torchscript_files
from workbench.generate.pytorch_backend.layouts import PYTORCH2, TORCHSCRIPT, PyTorchConfigError, parameter_problems
from workbench.generate.record import read_sidecar, spec_from_record
from workbench.generate.settings import GenerateError, GenerateSettings
from workbench.generate.settings_checks import (
    FIXED_IN_VARIANTS,
    Plan,
    plan_batching,
    setting_flag,
    settled,
    tensor_items,
    variant_name_problem,
)
from workbench.limits import dataclass_problems, model_name_problem
from workbench.spec import ModelSpec, SpecError

__all__ = ["RUNTIMES", "layout_of_settings", "pytorch_settings_problems", "render_pytorch"]

# Triton's ``runtime`` field -> the layout it selects.
RUNTIMES = {"": TORCHSCRIPT, "model.py": PYTORCH2}

# A configs/<name>.pbtxt variant is read by the server core (--model-config-name) and handed to the
# backend like config.pbtxt, so variants work for both layouts; they share the version folder's
# model files, so these stay the directory's own.
FIXED_IN_PYTORCH_VARIANTS = ("backend", "runtime", "compiled_model", "state_dict")


def layout_of_settings(settings: GenerateSettings) -> str:
    return RUNTIMES.get(settings.runtime, TORCHSCRIPT)


def _spec(settings: GenerateSettings, source: Path | None, plan: Plan) -> None:
    inputs = tensor_items(list(settings.triton_input), "input", plan.problems)
    outputs = tensor_items(list(settings.triton_output), "output", plan.problems)
    if len(inputs) != len(settings.triton_input) or len(outputs) != len(settings.triton_output):
        return
    if not inputs and not outputs:
        archive = layout_of_settings(settings) == TORCHSCRIPT or (source is not None and source.suffix != ".py")
        record = read_sidecar(source, plan.problems) if archive else None  # a module's source has no sidecar
        if record is None:
            plan.problems.append(
                "--triton_input and --triton_output are required (a TorchScript archive keeps no "
                "names, dtypes or shapes unless the compile step recorded them beside it)"
            )
            return
        plan.spec = spec_from_record(settings, record)
        return
    if not inputs or not outputs:
        plan.problems.append(
            f"{'--triton_output' if inputs else '--triton_input'} is missing: give both "
            "--triton_input and --triton_output"
        )
        return
    try:
        plan.spec = ModelSpec(tuple(inputs), tuple(outputs))
    except SpecError as err:
        plan.problems.append(str(err))


def pytorch_settings_problems(settings: GenerateSettings) -> Plan:
    """Every problem with settings meant for the PyTorch backend, before any file is read for
    writing; the plan carries the tensor spec the config is built from. (Fields only another
    backend reads are refused by the switch, `workbench.generate.backends.validate`.)"""
    plan = Plan()
    plan.problems += dataclass_problems(settings, setting_flag)
    if plan.problems:
        return plan
    if settings.framework != "pytorch":
        plan.problems.append(
            f"--model_type {settings.framework}: Triton's PyTorch backend serves PyTorch models "
            "only; use --backend python"
        )
    if settings.target != "cpu":
        plan.problems.append(
            f"--target {settings.target}: Triton's PyTorch backend runs on the CPU (or a GPU); "
            "Neuron models are served by the Python backend (--backend python)"
        )
    if settings.runtime not in RUNTIMES:
        plan.problems.append(
            f"--runtime {settings.runtime!r} is not supported: leave it out (TorchScript on "
            "LibTorch) or use --runtime model.py (PyTorch 2)"
        )
    if settings.state_dict and layout_of_settings(settings) != PYTORCH2:
        plan.problems.append(
            "--state-dict is for the PyTorch 2 layout (--runtime model.py); a TorchScript archive carries its weights"
        )
    if not isinstance(settings.parameters, dict):
        plan.problems.append(f"--parameter: expected KEY=VALUE pairs, got {settings.parameters!r}")
    elif settings.runtime in RUNTIMES:
        for key, value in settings.parameters.items():
            plan.problems += parameter_problems(str(key), parameter_string(value), layout_of_settings(settings))
    if not str(settings.triton_model_dir).strip():
        plan.problems.append("--triton_model_dir is required: the model directory to write")
    elif problem := model_name_problem(settings.model_name):
        plan.problems.append(problem)
    if settings.model_version < 1:
        plan.problems.append(f"--model_version {settings.model_version} is invalid; versions start at 1")
    plan_batching(settings, plan)
    compiled = str(settings.compiled_model).strip()
    source = Path(compiled).expanduser() if compiled else None
    wanted = (
        "a TorchScript archive (model.pt)"
        if layout_of_settings(settings) == TORCHSCRIPT
        else "the module's source (a .py file defining one torch.nn.Module class) or a TorchScript archive"
    )
    if source is None:
        plan.problems.append(f"--compiled_model is required: {wanted}")
    elif not source.is_file():
        plan.problems.append(
            f"--compiled_model {compiled} is not a file; it must be {wanted} (it is copied into the version folder)"
        )
        source = None
    elif layout_of_settings(settings) == PYTORCH2 and source.suffix != ".py":
        if not is_torchscript_archive(source):
            plan.problems.append(
                f"--compiled_model {compiled}: the PyTorch 2 layout (--runtime model.py) takes {wanted}, "
                "and this is neither"
            )
            source = None
        elif settings.state_dict:
            plan.problems.append(
                f"--state-dict: --compiled_model {compiled} is a TorchScript archive, which carries its weights"
            )
        else:  # src/model.py: no model.py in the version folder -> torch.jit.load(model.pt), not compiled
            plan.warnings.append(
                f"--compiled_model {compiled} is a TorchScript archive: the PyTorch 2 runtime loads it "
                "with torch.jit.load and runs it as it is (torch.compile applies only to its batch "
                "gather/scatter); the TorchScript layout (no --runtime) serves it on LibTorch itself"
            )
    if settings.state_dict and not Path(settings.state_dict).expanduser().is_file():
        plan.problems.append(f"--state-dict {settings.state_dict} is not a file")
    _spec(settings, source, plan)
    _plan_variants(settings, plan)
    written = {"config.pbtxt", *_model_files(settings), *(f"configs/{name}.pbtxt" for name in settings.variants)}
    plan.problems += preserve.problems(settings, plan.spec, written)
    plan.problems += rules.problems(settings, plan.spec, written | set(settings.extra_files))
    plan.warnings += rules.warnings(settings)
    plan.compiled_source = source
    return plan


def _model_files(settings: GenerateSettings) -> set[str]:
    """The version folder's files the backend loads (the defaults; ``default_model_filename`` in
    the kept config names another TorchScript file, which the extra-file check then sees)."""
    version = settings.model_version
    return {f"{version}/model.pt"} | ({f"{version}/model.py"} if layout_of_settings(settings) == PYTORCH2 else set())


def _plan_variants(settings: GenerateSettings, plan: Plan) -> None:
    """Each ``configs/<name>.pbtxt`` variant: the settings with its overrides, checked as a whole."""
    if not isinstance(settings.variants, dict):
        plan.problems.append(f"variants must map a name to the fields it changes, got {settings.variants!r}")
        return
    fixed = set(FIXED_IN_VARIANTS) | set(FIXED_IN_PYTORCH_VARIANTS)
    for name, overrides in settings.variants.items():
        label = f"configs/{name}.pbtxt"
        if variant_name_problem(name):
            plan.problems.append(variant_name_problem(name))
            continue
        wrong = sorted(set(overrides) & fixed)
        if wrong:
            plan.problems.append(
                f"{label}: {', '.join(setting_flag(w) for w in wrong)} cannot differ between the "
                "configs of one PyTorch-backend directory (they share its model files)"
            )
            continue
        try:
            variant = replace(settings, variants={}, **overrides)
        except TypeError as err:
            plan.problems.append(f"{label}: {err}")
            continue
        sub = pytorch_settings_problems(variant)
        plan.problems += [f"{label}: {problem}" for problem in sub.problems]
        plan.warnings += [f"{label}: {warning}" for warning in sub.warnings if warning not in plan.warnings]
        plan.variants[name] = (variant, sub)


def _config(settings: GenerateSettings, plan: Plan) -> ModelConfig:
    """The checked ModelConfig of ``settings`` (config.pbtxt or a variant)."""
    spec = settled(plan.spec, "tensor spec")
    cfg = build_pytorch_config(
        settings.model_name,
        spec,
        layout=layout_of_settings(settings),
        max_batch_size=settings.max_batch_size,
        dynamic_batching=settings.enable_dynamic_batching,
        preferred_batch_sizes=settings.preferred_batch_size,
        max_queue_delay_us=settings.max_queue_delay_microseconds,
        instance_kind=settings.instance_group_kind,
        instance_count=settings.triton_model_instance_count,
        parameters=settings.parameters,
    )
    options.apply(cfg, settings, spec)
    preserve.merge(cfg, settings.extra_config)
    if cfg.default_model_filename and layout_of_settings(settings) == PYTORCH2:
        raise PyTorchConfigError(
            f"default_model_filename {cfg.default_model_filename!r}: the workbench writes the "
            "PyTorch 2 module as <version>/model.py (its weights as model.pt); drop the field "
            "from the config (the runtime then loads those)"
        )
    return check_pytorch_config(cfg)


def render_pytorch(settings: GenerateSettings) -> GeneratedModel:
    """Check ``settings`` and build the PyTorch-backend files in memory (GenerateError lists every
    problem): config.pbtxt from `build_pytorch_config` with the tuned Triton fields applied, and
    the model file checked the way the backend will load it."""
    plan = pytorch_settings_problems(settings)
    if plan.problems:
        raise GenerateError(plan.problems)
    layout = layout_of_settings(settings)
    try:
        cfg = _config(settings, plan)
        variants = {}
        for name, (variant, sub) in plan.variants.items():
            try:
                variants[name] = _config(variant, sub)
            except PyTorchConfigError as err:
                raise PyTorchConfigError(f"configs/{name}.pbtxt: {err}") from None
        version = settings.model_version
        if layout == TORCHSCRIPT:
            files = torchscript_files(cfg, plan.compiled_source, version=version)
            model_py = ""
        else:
            files = pytorch2_files(
                cfg,
                settled(plan.compiled_source, "--compiled_model file"),
                version=version,
                state_dict=Path(settings.state_dict).expanduser() if settings.state_dict else None,
            )
            model_py = cast(str, files.get(f"{version}/model.py", ""))  # the module's source text
    except (PyTorchConfigError, FileNotFoundError) as err:
        raise GenerateError([str(err)]) from None
    except UnicodeDecodeError as err:
        raise GenerateError(
            [f"--compiled_model {plan.compiled_source} is not UTF-8 Python source ({err.reason})"]
        ) from None
    config_text = kept_text(cfg, settings.model_dir / "config.pbtxt")
    files["config.pbtxt"] = config_text
    files.update(
        {
            f"configs/{name}.pbtxt": kept_text(variant, settings.model_dir / "configs" / f"{name}.pbtxt")
            for name, variant in variants.items()
        }
    )
    files.update({rel: Path(src) for rel, src in settings.extra_files.items()})
    return GeneratedModel(
        settings,
        settings.model_dir,
        settled(plan.spec, "tensor spec"),
        cfg,
        config_text,
        model_py,
        None,
        files,
        list(plan.warnings),
        variants,
    )
