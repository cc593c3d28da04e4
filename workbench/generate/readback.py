"""Read-back: a model directory on disk -> the GenerateSettings that regenerate it.

Works for directories this package wrote (their ``WORKBENCH_*`` parameters say everything), for
those upstream's gen_triton_model.py wrote (framework and target inferred from the tensor names,
the compiled model and what the old model.py imports) and for hand-written ones. Values that do
not parse are kept as written, so the checks name them instead of read-back guessing.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any

from tritonclient.grpc import model_config_pb2

from workbench.coremap import END_PARAMETER, START_PARAMETER, CoreRange, CoreRangeError
from workbench.generate.config import parameters_of, read_config
from workbench.generate.repository import version_folders
from workbench.generate.settings import GenerateSettings, default_target
from workbench.spec import tensor_index, upstream_item

__all__ = ["load_settings"]


def _target_from_model_py(text: str) -> str | None:
    """Which upstream variant a model.py is, from what it imports; None for ours (it reads
    WORKBENCH_TARGET) or an unknown one."""
    if "WORKBENCH_TARGET" in text:
        return None
    if "torch_neuronx" in text or "tf.keras.models.load_model" in text:
        return "inf2"
    if re.search(r"torch\.neuron\b|import torch_neuron\b", text) or "tf.contrib.predictor" in text:
        return "inf1"
    return None


def load_settings(model_dir: str | Path) -> GenerateSettings:
    """Settings that regenerate ``model_dir``: one written by this package, by upstream's
    gen_triton_model.py (its parameters, dims and dynamic_batching block) or by hand.

    Upstream meanings are kept: an upstream inf1 directory's relative COMPILED_MODEL is relative
    to the server's working directory (taken as this process's), so it is made absolute; its
    ``NUM_THREADS_PER_CORE "1"`` is upstream's default, read as not given (None)."""
    model_dir = Path(model_dir)
    config = read_config(model_dir)
    params = parameters_of(config)
    versions = [int(p.name) for p in version_folders(model_dir) if int(p.name) > 0]
    version = next((v for v in reversed(versions) if (model_dir / str(v) / "model.py").is_file()),
                   versions[-1] if versions else 1)
    upstream = not params.get("WORKBENCH_TARGET", "")
    target = params.get("WORKBENCH_TARGET", "")
    if not target:
        model_py = model_dir / str(version) / "model.py"
        target = (_target_from_model_py(model_py.read_text(errors="replace")) if model_py.is_file() else None) \
            or default_target()
    compiled = params.get("COMPILED_MODEL", "")
    if upstream and target == "inf1" and compiled and not Path(compiled).is_absolute():
        compiled = str(Path.cwd() / compiled)  # upstream's inf1 model.py opened it as written
    compiled_path = Path(compiled) if Path(compiled).is_absolute() else model_dir / compiled
    framework = params.get("WORKBENCH_FRAMEWORK", "")
    if not framework:
        names = [t.name for t in list(config.input) + list(config.output)]
        is_saved_model = compiled and (compiled_path / "saved_model.pb").is_file()
        indexed = names and all(tensor_index(n) is not None for n in names)
        framework = "tensorflow" if is_saved_model or not indexed else "pytorch"
    group = config.instance_group[0] if len(config.instance_group) else None
    batching = config.dynamic_batching if config.HasField("dynamic_batching") else None

    def integer(key: str) -> int | None:
        value = params.get(key, "").strip()
        return int(value) if re.fullmatch(r"-?\d+", value) else None

    try:
        core_range = str(CoreRange.from_parameters(params) or CoreRange(0, 0))
    except CoreRangeError:  # kept as written, so validation names it
        start = params.get(START_PARAMETER, "0")
        core_range = f"{start}:{params.get(END_PARAMETER, start)}"
    settings = GenerateSettings(
        triton_model_dir=str(model_dir),
        compiled_model=compiled,
        framework=framework,
        target=target,
        triton_input=[_config_item(t) for t in config.input],
        triton_output=[_config_item(t) for t in config.output],
        neuron_core_range=core_range,
        triton_model_instance_count=(group.count or 1) if group is not None else 1,
        threads_per_core=None if upstream and params.get("NUM_THREADS_PER_CORE", "").strip() == "1"
        else integer("NUM_THREADS_PER_CORE"),
        model_version=version,
        max_batch_size=config.max_batch_size,
        enable_dynamic_batching=batching is not None,
        preferred_batch_size=list(batching.preferred_batch_size) if batching is not None else [],
        max_queue_delay_microseconds=(batching.max_queue_delay_microseconds or None) if batching is not None else None,
        disable_batch_requests_to_neuron=params.get("BATCH_REQUESTS", "true") == "false",
        signature_def_key=params.get("TF_SIGNATURE_DEF_KEY", "serving_default"),
        for_other_machine=bool(compiled) and not compiled_path.exists(),
        cpu_affinity=params.get("CPU_AFFINITY", "false") == "true",
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


def _config_item(entry: Any) -> str:
    """``NAME,DTYPE,SHAPE`` for a config tensor; the dtype as written (TYPE_STRING -> BYTES)."""
    dtype = model_config_pb2.DataType.Name(entry.data_type).removeprefix("TYPE_")
    dtype = "BYTES" if dtype == "STRING" else dtype
    return upstream_item(entry.name, dtype, entry.dims)
