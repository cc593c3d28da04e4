"""Read-back for the Python backend: a model directory on disk -> the GenerateSettings that regenerate it.

Works for directories this backend wrote (their ``WORKBENCH_*`` parameters say everything), for
those upstream's gen_triton_model.py wrote (framework, target and batching mode come from which of
its model.py variants is there, `workbench.generate.python_backend.upstream`) and for hand-written or hand-edited
ones: the fields the settings model are read into them, everything else is kept -- the rest of the
config (``extra_config``), custom parameters, extra files, a rewritten model.py and the
``configs/<name>.pbtxt`` variants -- so rendering the result rewrites an unchanged directory
byte for byte. Values that do not parse are kept as written, so the checks name them.
"""

from __future__ import annotations

import re
from dataclasses import fields, replace
from pathlib import Path

from workbench.coremap import END_PARAMETER, START_PARAMETER, CoreRange, CoreRangeError
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
from workbench.generate.python_backend.upstream import UpstreamModelPy, is_workbench_model_py, recognise
from workbench.generate.repository import version_folders
from workbench.generate.settings import GenerateSettings, default_target
from workbench.generate.settings_checks import FIXED_IN_VARIANTS, make_plan
from workbench.spec import tensor_index

__all__ = ["read_back"]


def read_back(model_dir: Path, config: ModelConfig) -> ReadBack:
    """Read ``model_dir`` (ours, upstream's or hand-written; ``config``: its config.pbtxt, already
    read) into settings that regenerate it."""
    versions = [int(p.name) for p in version_folders(model_dir) if int(p.name) > 0]
    version = next(
        (v for v in reversed(versions) if (model_dir / str(v) / "model.py").is_file()), versions[-1] if versions else 1
    )
    notes: list[str] = []
    model_py = model_dir / str(version) / "model.py"
    text = model_py.read_text(errors="replace") if model_py.is_file() else None
    upstream = recognise(text) if text is not None else None
    kept_model_py = None
    if upstream is not None:
        notes.append(
            f"{version}/model.py is upstream's {upstream.framework} {upstream.target} variant"
            + ("" if upstream.batch_requests else " with --disable_batch_requests_to_neuron")
            + "; regenerating replaces it with the workbench's model.py, same behaviour"
        )
    elif text is not None and not is_workbench_model_py(text):
        kept_model_py = str(model_py.resolve())
        notes.append(f"{version}/model.py is neither the workbench's nor one of upstream's: kept as written")
    hint = _target_hint(text) if text is not None and upstream is None else None
    base = _from_config(model_dir, config, version, upstream, notes, hint)
    variants = {}
    for path in sorted((model_dir / "configs").glob("*.pbtxt")) if (model_dir / "configs").is_dir() else []:
        variant = _from_config(model_dir, read_config(path), version, upstream, [], hint)
        variants[path.stem] = {
            f.name: getattr(variant, f.name)
            for f in fields(GenerateSettings)
            if f.name not in FIXED_IN_VARIANTS and getattr(variant, f.name) != getattr(base, f.name)
        }
    settings = replace(base, model_py=kept_model_py, variants=variants)
    owned = {
        "config.pbtxt",
        f"{version}/model.py",
        *(f"configs/{name}.pbtxt" for name in variants),
        *make_plan(settings).carried,
    }
    settings.extra_files = preserve.unowned_files(model_dir, owned)
    if settings.extra_files:
        notes.append(
            f"kept {len(settings.extra_files)} file(s) the generator does not write: " + ", ".join(settings.extra_files)
        )
    return ReadBack(settings, notes)


def _target_hint(text: str) -> str | None:
    """The target a model.py that is not upstream's unedited imports (a hand-edited upstream one, say)."""
    if is_workbench_model_py(text):
        return None
    if "torch_neuronx" in text or "tf.keras.models.load_model" in text:
        return "inf2"
    if re.search(r"torch\.neuron\b|import torch_neuron\b", text) or "tf.contrib.predictor" in text:
        return "inf1"
    return None


def _from_config(
    model_dir: Path,
    config: ModelConfig,
    version: int,
    upstream: UpstreamModelPy | None,
    notes: list[str],
    hint: str | None = None,
) -> GenerateSettings:
    """The settings one config (config.pbtxt or a configs/ variant) describes."""
    params = parameters_of(config)
    ours = "WORKBENCH_TARGET" in params
    compiled = params.get("COMPILED_MODEL", "")
    relative = bool(compiled) and not Path(compiled).is_absolute()
    compiled_path = model_dir / compiled if relative else Path(compiled)
    framework = params.get("WORKBENCH_FRAMEWORK", "") or (upstream.framework if upstream else "")
    if not framework:
        names = [t.name for t in list(config.input) + list(config.output)]
        is_saved_model = compiled and (compiled_path / "saved_model.pb").is_file()
        indexed = names and all(tensor_index(n) is not None for n in names)
        framework = "tensorflow" if is_saved_model or not indexed else "pytorch"
    target = params.get("WORKBENCH_TARGET", "") or (upstream.target if upstream else "") or hint or ""
    if not target:
        target = default_target()
        notes.append(f"no WORKBENCH_TARGET and no upstream model.py to tell the target: using this machine's, {target}")
    base = "model_dir"
    if not ours and target == "inf1" and relative:  # upstream's inf1 model.py opened it from the server's CWD
        if (Path.cwd() / compiled).exists():  # taken as this process's when the file is there
            compiled = str(Path.cwd() / compiled)
            compiled_path = Path(compiled)
            notes.append(
                f"COMPILED_MODEL {params['COMPILED_MODEL']!r} is relative to tritonserver's working directory "
                f"(upstream inf1): read as {compiled}, where it is"
            )
        else:
            base = "server_cwd"
            notes.append(
                f"COMPILED_MODEL {compiled!r} is relative to tritonserver's working directory (upstream "
                "inf1), and not in this one: regenerating needs its absolute path"
            )
    if framework == "tensorflow" and any(":" in t.name for t in config.input):
        notes.append(
            "tensor names like 'x:0' are graph tensor names (upstream's SavedModel reading); the generated "
            "model.py feeds the signature by its keys"
        )
    batch_requests = params.get("BATCH_REQUESTS", "")
    disable_batching = batch_requests == "false" if batch_requests else bool(upstream and not upstream.batch_requests)
    group = config.instance_group[0] if len(config.instance_group) else None
    batching = config.dynamic_batching if config.HasField("dynamic_batching") else None

    def integer(key: str) -> int | None:
        value = params.get(key, "").strip()
        return int(value) if re.fullmatch(r"-?\d+", value) else None

    try:
        core_range: CoreRange | str = CoreRange.from_parameters(params) or CoreRange(0, 0)
    except CoreRangeError:  # kept as written, so validation names it
        start = params.get(START_PARAMETER, "0")
        core_range = f"{start}:{params.get(END_PARAMETER, start)}"
    try:
        spec = spec_from_config(config)
    except ConfigError:
        spec = None
    settings = GenerateSettings(
        triton_model_dir=str(model_dir),
        compiled_model=compiled,
        framework=framework,
        target=target,
        triton_input=[config_item(t) for t in config.input],
        triton_output=[config_item(t) for t in config.output],
        neuron_core_range=core_range,
        triton_model_instance_count=(group.count or 1) if group is not None else 1,
        # upstream writes "1" whether asked or not: read as not given (the SDK's workers)
        threads_per_core=None
        if not ours and params.get("NUM_THREADS_PER_CORE", "").strip() == "1"
        else integer("NUM_THREADS_PER_CORE"),
        model_version=version,
        max_batch_size=config.max_batch_size,
        enable_dynamic_batching=batching is not None,
        preferred_batch_size=list(batching.preferred_batch_size) if batching is not None else [],
        max_queue_delay_microseconds=(batching.max_queue_delay_microseconds or None) if batching is not None else None,
        disable_batch_requests_to_neuron=disable_batching,
        signature_def_key=params.get("TF_SIGNATURE_DEF_KEY", "serving_default"),
        for_other_machine=bool(compiled) and (base == "server_cwd" or not compiled_path.exists()),
        cpu_affinity=params.get("CPU_AFFINITY", "false") == "true",
        parameters={k: v for k, v in params.items() if k not in preserve.OWNED_PARAMETERS},
        extra_config=preserve.residual_text(config),
        compiled_model_base=base,
        **options.read(config, spec),
    )
    if framework == "transformers_neuronx":
        settings = replace(
            settings,
            tnx_model_class=params.get("TNX_MODEL_CLASS") or None,
            tnx_batch_size=integer("TNX_BATCH_SIZE"),
            tnx_tp_degree=integer("TNX_TP_DEGREE"),
            tnx_n_positions=integer("TNX_N_POSITIONS"),
            tnx_amp=params.get("TNX_AMP") or None,
            tnx_unroll=integer("TNX_UNROLL"),
            tnx_sequence_length=integer("TNX_SEQUENCE_LENGTH"),
            tnx_compiled_dir=params.get("TNX_COMPILED_DIR") or None,
        )
    return settings
