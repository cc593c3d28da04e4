"""Settings -> a Triton model directory (config.pbtxt + model.py), with gen_triton_model.py parity.

Upstream's generator accepted anything and let Triton or model.py fail at load time, crashed on
``--model_version`` other than 1, and left half-written folders. Here every flag keeps its
upstream spelling and meaning, but the settings are checked as a whole before anything is
written, the result can be previewed (files, per-instance core map) and diffed against disk, and
an existing directory -- ours, upstream's or hand-written -- can be read back and regenerated.
"""

from __future__ import annotations

import argparse
import importlib.resources
import json
import re
import sys
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from tritonclient.grpc import model_config_pb2

from workbench.system import detect, target_problem, usable_cpu_ids
from workbench.generate.config import (
    FRAMEWORKS,
    TARGETS,
    ModelConfig,
    build_config,
    parameters_of,
    read_config,
    to_text,
    validate_config,
)
from workbench.coremap import END_PARAMETER, START_PARAMETER, CoreMap, CoreRange, CoreRangeError
from workbench.generate.repository import FileContent, WriteResult, diff_model_dir, write_model_dir
from workbench.spec import ModelSpec, SpecError, TensorSpec

__all__ = [
    "GenerateError",
    "GenerateSettings",
    "GeneratedModel",
    "default_target",
    "validate",
    "render",
    "write",
    "diff",
    "load_settings",
    "register",
]

SIDECAR_SUFFIX = ".workbench.json"
TNX_AMPS = ("f32", "f16", "bf16")
# model.py refuses these data types (it has no wire conversion for them)
_UNSERVED_DTYPES = ("BYTES", "BF16")


class GenerateError(ValueError):
    """Settings that cannot produce a servable model; ``problems`` holds one message per bad item."""

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        super().__init__("; ".join(self.problems))


def default_target() -> str:
    """What this machine serves: ``cpu`` without a Neuron device, else its instance family
    (`workbench.system.detect`, the one place that decides)."""
    return detect().default_target


@dataclass
class GenerateSettings:
    """Every gen_triton_model.py option (same names and meaning) plus the workbench's own.

    ``triton_input``/``triton_output`` take upstream ``NAME,DTYPE,SHAPE`` items (or TensorSpecs);
    with ``max_batch_size > 0`` the dims leave out the batch dim, as upstream required. When both
    are empty they come from the compiled model: its ``.workbench.json`` sidecar, or for TensorFlow
    the SavedModel signature. A relative ``compiled_model`` is resolved against the model directory
    (what model.py does), unless ``copy_compiled_model`` copies it there from the current directory.
    ``name`` defaults to the directory's name; when it differs, ``triton_model_dir`` is taken as the
    model repository and the model goes to ``<triton_model_dir>/<name>``.

    Parameters written for model.py: ``WORKBENCH_TARGET``/``WORKBENCH_FRAMEWORK`` from target and
    framework, ``BATCH_REQUESTS`` = not ``disable_batch_requests_to_neuron``, ``CPU_AFFINITY``,
    ``TF_SIGNATURE_DEF_KEY`` (tensorflow), and for transformers_neuronx each ``tnx_x`` field as
    ``TNX_X`` (``tnx_model_class`` -> ``TNX_MODEL_CLASS`` ...); a None field is left out so model.py
    uses its default.
    """

    triton_model_dir: str = ""
    compiled_model: str = ""
    framework: str = "pytorch"  # upstream --model_type (plus transformers_neuronx)
    target: str = field(default_factory=default_target)
    triton_input: list = field(default_factory=list)
    triton_output: list = field(default_factory=list)
    neuron_core_range: str | CoreRange = "0:0"
    triton_model_instance_count: int = 1
    threads_per_core: int | None = None  # None: NUM_THREADS_PER_CORE left out (SDK default workers)
    model_version: int = 1
    max_batch_size: int = 0
    enable_dynamic_batching: bool = False
    preferred_batch_size: list = field(default_factory=list)
    max_queue_delay_microseconds: int | None = None
    disable_batch_requests_to_neuron: bool = False
    tag_set: str = "serve"
    signature_def_key: str = "serving_default"
    name: str | None = None
    copy_compiled_model: bool = False
    for_other_machine: bool = False
    cpu_affinity: bool = False
    # transformers-neuronx; None: what the compile recorded, else model.py's default (LlamaForSampling,
    # batch 1, tp degree = the instance's cores, 2048 positions, f32, sequence length = positions)
    tnx_model_class: str | None = None
    tnx_batch_size: int | None = None
    tnx_tp_degree: int | None = None
    tnx_n_positions: int | None = None
    tnx_amp: str | None = None
    tnx_unroll: int | None = None
    tnx_sequence_length: int | None = None
    tnx_compiled_dir: str | None = None  # graphs saved by .save(); loaded instead of recompiling

    def __post_init__(self) -> None:
        # single values are accepted where upstream took one (notebook callers pass 8, not [8])
        if isinstance(self.preferred_batch_size, int):
            self.preferred_batch_size = [self.preferred_batch_size]
        for name in ("triton_input", "triton_output"):
            if isinstance(getattr(self, name), (str, TensorSpec)):
                setattr(self, name, [getattr(self, name)])

    @property
    def model_dir(self) -> Path:
        base = Path(self.triton_model_dir)
        if self.name and self.name != base.name:
            return base / self.name
        return base

    @property
    def model_name(self) -> str:
        return self.name or Path(self.triton_model_dir).name


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


@dataclass
class _Plan:
    """What validation worked out, reused by render so nothing is computed twice."""

    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    spec: ModelSpec | None = None
    core_map: CoreMap | None = None
    compiled_ref: str = ""  # the COMPILED_MODEL value
    compiled_source: Path | None = None  # where the artifact is on this machine (None if unknown)
    carried: dict[str, Path] = field(default_factory=dict)  # files copied into the new directory
    record: dict | None = None  # the compile step's sidecar for the compiled model
    tnx: dict[str, object] = field(default_factory=dict)  # TNX_* parameters to write


def _tensor_items(items: list, kind: str, problems: list[str]) -> list[TensorSpec]:
    tensors = []
    for item in items:
        try:
            if isinstance(item, TensorSpec):
                tensors.append(item)
            elif isinstance(item, dict):
                tensors.append(TensorSpec(**item))
            else:
                tensors.append(TensorSpec.parse(str(item)))
        except (SpecError, TypeError) as err:
            problems.append(f"--triton_{kind} {err}")
    return tensors


def _read_sidecar(artifact: Path | None, problems: list[str]) -> dict | None:
    """The compile step's record beside the artifact, or None when there is none."""
    if artifact is None:
        return None
    side = artifact.with_name(artifact.name + SIDECAR_SUFFIX)
    if not side.is_file():
        return None
    try:
        data = json.loads(side.read_text())
        data["spec"] = ModelSpec.from_dict(data["spec"])
    except (OSError, ValueError, KeyError, TypeError) as err:
        problems.append(f"{side}: unreadable compile record ({err})")
        return None
    return data


def _dims_match(given: tuple[int, ...], expected: tuple[int, ...]) -> bool:
    return len(given) == len(expected) and all(g == e or -1 in (g, e) for g, e in zip(given, expected))


def _check_against_sidecar(settings: GenerateSettings, spec: ModelSpec, record: dict, where: str) -> list[str]:
    """Config dims, names and dtypes against what the compiled model takes (dims there exclude the batch)."""
    problems = []
    compiled: ModelSpec = record["spec"]
    batch_dim = bool(record.get("batch_dim", True))
    mbs = settings.max_batch_size
    if record.get("target") and record["target"] != settings.target:
        problems.append(f"--compiled_model was compiled for {record['target']} ({where}), but the target is "
                        f"{settings.target}; use --target {record['target']} or compile for {settings.target}")
    if record.get("framework") and record["framework"] != settings.framework:
        problems.append(f"--compiled_model is a {record['framework']} model ({where}), but --model_type is "
                        f"{settings.framework}")
    if not batch_dim and mbs > 0:
        problems.append(f"--max_batch_size {mbs}: the compiled model has no batch dim ({where}); "
                        "Triton cannot batch it, use --max_batch_size 0")
    for kind, given, known in (("input", spec.inputs, compiled.inputs), ("output", spec.outputs, compiled.outputs)):
        by_name = {t.name: t for t in known}
        for tensor in given:
            model_tensor = by_name.get(tensor.name)
            if model_tensor is None:
                names = ", ".join(by_name)
                problems.append(f"{kind} {tensor.name!r} is not one of the compiled model's {kind}s ({names}; {where})")
                continue
            if model_tensor.dtype != tensor.dtype:
                problems.append(f"{kind} {tensor.name!r}: dtype {tensor.dtype}, but the compiled model's is "
                                f"{model_tensor.dtype} ({where})")
            expected = model_tensor.dims if (mbs > 0 or not batch_dim) else (-1, *model_tensor.dims)
            if _dims_match(tensor.dims, expected):
                continue
            if settings.framework == "transformers_neuronx" and _dims_match(tensor.dims, model_tensor.dims):
                continue  # its model.py also takes one unbatched prompt
            if mbs > 0 and _dims_match(tensor.dims[1:], model_tensor.dims):
                problems.append(f"{kind} {tensor.name!r}: dims {list(tensor.dims)} include a batch dim, but with "
                                f"max_batch_size {mbs} Triton adds it; use {list(model_tensor.dims)}")
            elif mbs == 0 and batch_dim and _dims_match(tensor.dims, model_tensor.dims):
                problems.append(f"{kind} {tensor.name!r}: dims {list(tensor.dims)} lack the batch dim the compiled "
                                f"model takes; with max_batch_size 0 use {[-1, *model_tensor.dims]}")
            else:
                shown = ("[batch] + " if batch_dim else "") + str(list(model_tensor.dims))
                problems.append(f"{kind} {tensor.name!r}: dims {list(tensor.dims)} disagree with the compiled "
                                f"model's {shown} ({where})")
        missing = [name for name in by_name if name not in {t.name for t in given}]
        if missing:
            problems.append(f"the compiled model also takes {kind}(s) {', '.join(missing)} ({where})")
    return problems


def _spec_from_record(settings: GenerateSettings, record: dict) -> ModelSpec:
    spec: ModelSpec = record["spec"]
    if settings.max_batch_size == 0 and record.get("batch_dim", True):
        return spec.with_batch_dim(-1)
    return spec


def _spec_from_saved_model(settings: GenerateSettings, path: Path) -> ModelSpec:
    try:
        from workbench.compiler.tensorflow import spec_from_saved_model
    except ImportError as err:
        raise GenerateError([
            f"cannot read the inputs and outputs of {path} ({err}); pass --triton_input and --triton_output, "
            "or install the tensorflow extra (pip install 'workbench[tensorflow]')"
        ]) from None
    from workbench.system import MissingSDKError

    try:
        return spec_from_saved_model(str(path), settings.tag_set, settings.signature_def_key,
                                     drop_batch_dim=settings.max_batch_size > 0)
    except (ImportError, MissingSDKError) as err:
        raise GenerateError([
            f"TensorFlow is needed to read the inputs and outputs of {path} ({err}); pass --triton_input and "
            "--triton_output, or install the tensorflow extra (pip install 'workbench[tensorflow]')"
        ]) from None
    except (SpecError, ValueError, OSError) as err:
        raise GenerateError([f"--compiled_model {path}: {err}"]) from None


def _place(flag: str, value: str, settings: GenerateSettings, plan: _Plan) -> tuple[str, Path | None]:
    """Where a file the model needs goes: (the reference written in config.pbtxt, its path here or
    None). Copied into ``<version>/`` with --copy-compiled-model; otherwise a relative path is the
    model directory's, and one already inside an existing directory is carried into the new one."""
    path, dest = Path(value), settings.model_dir
    if settings.copy_compiled_model:
        ref = f"{settings.model_version}/{path.name}"
        if not path.exists():
            plan.problems.append(f"{flag} {value} does not exist, so it cannot be copied (--copy-compiled-model)")
            return ref, None
        _carry(plan, ref, path)
        return ref, path
    resolved = path if path.is_absolute() else dest / path
    if resolved.exists():
        if not path.is_absolute() and ".." not in path.parts and dest.is_dir():
            _carry(plan, path.as_posix(), resolved)
        return value, resolved
    if not settings.for_other_machine:
        hint = ""
        if not path.is_absolute() and path.exists():
            hint = (f"; {value} exists relative to the current directory, but model.py resolves relative "
                    "paths against the model directory: give an absolute path or use --copy-compiled-model")
        plan.problems.append(f"{flag} {value} not found (looked at {resolved}){hint}; "
                             "use --for-other-machine if it only exists on the serving host")
    return value, None


def _carry(plan: _Plan, ref: str, source: Path) -> None:
    plan.carried[ref] = source
    sidecar = source.with_name(source.name + SIDECAR_SUFFIX)
    if sidecar.is_file():
        plan.carried[ref + SIDECAR_SUFFIX] = sidecar


def _plan_compiled(settings: GenerateSettings, plan: _Plan) -> None:
    compiled = str(settings.compiled_model).strip()
    if not compiled:
        plan.problems.append("--compiled_model is required: the path of the compiled model")
        return
    plan.compiled_ref, plan.compiled_source = _place("--compiled_model", compiled, settings, plan)
    plan.record = _read_sidecar(plan.compiled_source, plan.problems)


def _plan_spec(settings: GenerateSettings, plan: _Plan) -> None:
    inputs = _tensor_items(list(settings.triton_input), "input", plan.problems)
    outputs = _tensor_items(list(settings.triton_output), "output", plan.problems)
    if len(inputs) != len(settings.triton_input) or len(outputs) != len(settings.triton_output):
        return  # malformed items already reported
    record = plan.record
    where = f"per {plan.compiled_source}{SIDECAR_SUFFIX}" if record else ""
    if not inputs and not outputs:
        if record is not None:
            plan.spec = _spec_from_record(settings, record)
        elif settings.framework == "tensorflow":
            if plan.compiled_source is None:
                plan.problems.append("--triton_input/--triton_output are needed: the SavedModel is not on this "
                                     "machine to read them from")
                return
            try:
                plan.spec = _spec_from_saved_model(settings, plan.compiled_source)
            except GenerateError as err:
                plan.problems += err.problems
                return
        elif settings.framework == "transformers_neuronx":
            plan.spec = ModelSpec.parse(["input_ids,INT64,-1"], ["output_ids,INT64,-1"])
        else:
            plan.problems.append("--triton_input and --triton_output are required for PyTorch models "
                                 "(TorchScript keeps no names, dtypes or shapes), e.g. --triton_input INPUT__0,INT64,4x384")
            return
        record = None  # the spec came from it (or from the model): nothing to compare
    elif not inputs or not outputs:
        missing = "--triton_output" if inputs else "--triton_input"
        plan.problems.append(f"{missing} is missing: give both --triton_input and --triton_output"
                             + (", or neither to read them from the SavedModel" if settings.framework == "tensorflow"
                                else ""))
        return
    else:
        try:
            plan.spec = ModelSpec(tuple(inputs), tuple(outputs))
        except SpecError as err:
            plan.problems.append(str(err))
            return
    spec = plan.spec
    if settings.framework == "pytorch":
        try:
            spec.check_indexed_names()
        except SpecError as err:
            plan.problems.append(str(err))
    if settings.framework == "transformers_neuronx":
        names = [t.name for t in spec.inputs]
        if "input_ids" not in names or set(names) - {"input_ids", "sequence_length"} or len(spec.outputs) != 1:
            plan.problems.append(f"transformers_neuronx models take input_ids (and optionally sequence_length) and "
                                 f"return one output; got inputs {names} and {len(spec.outputs)} output(s)")
    for kind, tensors in (("input", spec.inputs), ("output", spec.outputs)):
        for t in tensors:
            if t.dtype in _UNSERVED_DTYPES:
                plan.problems.append(f"{kind} {t.name!r}: {t.dtype} tensors are not supported by the generated "
                                     "model.py; use a numeric type")
    if record is not None:
        plan.problems += _check_against_sidecar(settings, spec, record, where)


def _plan_cores(settings: GenerateSettings, plan: _Plan) -> None:
    try:
        core_range = CoreRange.parse(settings.neuron_core_range)
    except CoreRangeError as err:
        plan.problems.append(f"--neuron_core_range: {err}")
        return
    try:
        plan.core_map = core_range.split(settings.triton_model_instance_count,
                                         1 if settings.threads_per_core is None else settings.threads_per_core)
    except CoreRangeError as err:
        flag = ("--threads_per_core" if "threads per core" in str(err) else
                "--triton_model_instance_count" if "instance" in str(err) else "--neuron_core_range")
        plan.problems.append(f"{flag}: {err}")
        return
    idle = plan.core_map.idle
    if len(idle):
        plan.warnings.append(
            f"cores {idle[0]}-{idle[-1]} of {core_range} stay idle: {plan.core_map.total} cores do not split evenly "
            f"over {plan.core_map.instances} instances ({plan.core_map.cores_per_instance} each)"
        )
    if settings.target == "cpu" and not settings.for_other_machine:
        usable = usable_cpu_ids()
        missing = core_range.missing_from(usable)
        if missing:
            plan.warnings.append(f"core range {core_range} includes CPU(s) {missing} that this process cannot use "
                                 f"(usable: {sorted(usable)})" + ("; CPU affinity will fail" if settings.cpu_affinity else ""))


def _plan_batching(settings: GenerateSettings, plan: _Plan) -> None:
    mbs = settings.max_batch_size
    if mbs < 0:
        plan.problems.append(f"--max_batch_size {mbs} is negative; use 0 (no batching) or more")
    sizes = list(settings.preferred_batch_size)
    delay = settings.max_queue_delay_microseconds
    if delay is not None and delay < 0:
        plan.problems.append(f"--max_queue_delay_microseconds {delay} is negative")
    if not settings.enable_dynamic_batching:
        ignored = [flag for flag, value in (("--preferred_batch_size", sizes),
                                            ("--max_queue_delay_microseconds", delay is not None)) if value]
        if ignored:
            plan.warnings.append(f"{' and '.join(ignored)} ignored without --enable_dynamic_batching (as upstream)")
        return
    for size in sizes:
        if size < 1:
            plan.problems.append(f"--preferred_batch_size {size} must be at least 1")
        elif mbs == 0:
            plan.problems.append(f"--preferred_batch_size {size} needs --max_batch_size > 0 (it is 0: batching off)")
        elif size > mbs:
            plan.problems.append(f"--preferred_batch_size {size} is larger than --max_batch_size {mbs}")
    if mbs == 0:
        plan.warnings.append("--enable_dynamic_batching with --max_batch_size 0: Triton still runs each "
                             "request alone; set --max_batch_size > 0 to batch requests")


# GenerateSettings field -> model.py parameter; the compile step records the same keys (without
# the tnx_ prefix) in its sidecar's "extra"
_TNX_PARAMETERS = {"tnx_model_class": "TNX_MODEL_CLASS", "tnx_batch_size": "TNX_BATCH_SIZE",
                   "tnx_tp_degree": "TNX_TP_DEGREE", "tnx_n_positions": "TNX_N_POSITIONS", "tnx_amp": "TNX_AMP",
                   "tnx_unroll": "TNX_UNROLL", "tnx_sequence_length": "TNX_SEQUENCE_LENGTH"}
# what saved Neuron graphs were compiled with: loading them with other values fails
_TNX_GRAPH_FIELDS = ("tnx_model_class", "tnx_batch_size", "tnx_tp_degree", "tnx_n_positions", "tnx_amp")
_TNX_DEFAULT_N_POSITIONS = 2048  # model.py's default


def _flag(field_name: str) -> str:
    return "--" + field_name.replace("_", "-")


def _plan_tnx(settings: GenerateSettings, plan: _Plan) -> None:
    """TNX_* values: given ones, else what the compile recorded, else model.py's defaults (left out)."""
    if settings.framework != "transformers_neuronx":
        return
    record = plan.record if plan.record and plan.record.get("framework") == "transformers_neuronx" else {}
    recorded = record.get("extra") or {}
    recorded_graphs = recorded.get("compiled_dir") if settings.target != "cpu" else None
    values: dict[str, object] = {}
    for name in _TNX_PARAMETERS:
        given, known = getattr(settings, name), recorded.get(name.removeprefix("tnx_"))
        if given is not None and known is not None and given != known and recorded_graphs and \
                settings.tnx_compiled_dir is None and name in _TNX_GRAPH_FIELDS:
            plan.problems.append(f"{_flag(name)} {given} differs from the {known} its saved Neuron graphs were "
                                 f"compiled with ({recorded_graphs}); recompile, or leave {_flag(name)} out")
        values[name] = given if given is not None else known
    for name in ("tnx_batch_size", "tnx_tp_degree", "tnx_n_positions", "tnx_sequence_length", "tnx_unroll"):
        if values[name] is not None and int(values[name]) < 1:
            plan.problems.append(f"{_flag(name)} {values[name]} must be at least 1")
    positions = values["tnx_n_positions"] or _TNX_DEFAULT_N_POSITIONS
    if values["tnx_sequence_length"] is not None and values["tnx_sequence_length"] > positions:
        plan.problems.append(f"--tnx-sequence-length {values['tnx_sequence_length']} exceeds --tnx-n-positions "
                             f"{positions}")
    if values["tnx_amp"] is not None and values["tnx_amp"] not in TNX_AMPS:
        plan.problems.append(f"--tnx-amp {values['tnx_amp']!r} is not one of {', '.join(TNX_AMPS)}")
    if values["tnx_model_class"] is not None and not str(values["tnx_model_class"]).strip():
        plan.problems.append("--tnx-model-class is empty; e.g. LlamaForSampling")
    plan.tnx = {_TNX_PARAMETERS[name]: value for name, value in values.items() if value is not None}
    if settings.tnx_compiled_dir is not None:
        if settings.target == "cpu":
            plan.warnings.append("--tnx-compiled-dir is ignored on the cpu target (it holds Neuron graphs)")
        else:
            plan.tnx["TNX_COMPILED_DIR"], _ = _place("--tnx-compiled-dir", settings.tnx_compiled_dir, settings, plan)
    elif recorded_graphs and plan.compiled_source is not None:
        # the compile saves its graphs beside the checkpoint: keep them beside it here too
        source = plan.compiled_source.parent / Path(recorded_graphs).name
        if source.exists():
            value = str(source) if settings.copy_compiled_model else \
                (Path(plan.compiled_ref).parent / source.name).as_posix()
            plan.tnx["TNX_COMPILED_DIR"], _ = _place("--tnx-compiled-dir", value, settings, plan)
        else:
            plan.warnings.append(f"the saved Neuron graphs {source} recorded by the compile are missing; "
                                 "model.py will compile the model at load time")


def _plan(settings: GenerateSettings) -> _Plan:
    plan = _Plan()
    if settings.framework not in FRAMEWORKS:
        plan.problems.append(f"--model_type {settings.framework!r} is not one of {', '.join(FRAMEWORKS)}")
    if settings.target not in TARGETS:
        plan.problems.append(f"--target {settings.target!r} is not one of {', '.join(TARGETS)}")
    name = settings.model_name
    if not str(settings.triton_model_dir).strip():
        plan.problems.append("--triton_model_dir is required: the model directory to write")
    elif not name or name in (".", "..") or not re.fullmatch(r"[A-Za-z0-9_.\-]+", name):
        plan.problems.append(f"model name {name!r} is not usable; use letters, digits, '_', '-' or '.'")
    if settings.model_version < 1:
        plan.problems.append(f"--model_version {settings.model_version} is invalid; versions start at 1")
    _plan_cores(settings, plan)
    _plan_batching(settings, plan)
    unservable = target_problem(settings.framework, settings.target)
    if unservable:
        plan.problems.append(unservable)
    elif settings.framework in FRAMEWORKS and settings.target in TARGETS:
        _plan_compiled(settings, plan)
        _plan_spec(settings, plan)
        _plan_tnx(settings, plan)
    return plan


def validate(settings: GenerateSettings) -> list[str]:
    """Every problem with ``settings``, one message each naming the bad item; empty when fine.
    Nothing is written. (Warnings, e.g. idle cores, come with `render`.)"""
    return _plan(settings).problems


def _parameters(settings: GenerateSettings, plan: _Plan) -> dict[str, object]:
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
    plan = _plan(settings)
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


# --- reading a directory back --------------------------------------------------------------------

def _version_dirs(model_dir: Path) -> list[int]:
    return sorted(int(p.name) for p in model_dir.iterdir() if p.is_dir() and p.name.isdigit() and int(p.name) > 0)


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
    versions = _version_dirs(model_dir)
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
        indexed = names and all(re.fullmatch(r".+__\d+", n) for n in names)
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
        triton_input=[_upstream_item(t) for t in config.input],
        triton_output=[_upstream_item(t) for t in config.output],
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


def _upstream_item(entry: Any) -> str:
    """``NAME,DTYPE,SHAPE`` for a config tensor; the dtype as written (TYPE_STRING -> BYTES)."""
    dtype = model_config_pb2.DataType.Name(entry.data_type).removeprefix("TYPE_")
    dtype = "BYTES" if dtype == "STRING" else dtype
    return f"{entry.name},{dtype},{'x'.join(str(d) for d in entry.dims)}"


# --- the `workbench generate` command -------------------------------------------------------------

def _one_line_errors(parser: argparse.ArgumentParser) -> None:
    """Usage errors as one line and exit status 2 (argparse prints the whole usage block)."""
    prog = parser.prog

    def error(message: str) -> None:
        print(f"{prog}: error: {message} (see {prog} --help)", file=sys.stderr)
        raise SystemExit(2)

    def parse_known_args(args=None, namespace=None):
        parsed, extras = argparse.ArgumentParser.parse_known_args(parser, args, namespace)
        if extras:
            error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed, extras

    parser.error = error  # type: ignore[method-assign]
    parser.parse_known_args = parse_known_args  # type: ignore[method-assign]


def register(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "generate",
        help="write a Triton model directory (config.pbtxt + model.py); gen_triton_model.py flags",
        description="Generate a Triton Python-backend model directory for a compiled model. Takes every "
                    "gen_triton_model.py flag with its upstream spelling; everything is checked before "
                    "anything is written.",
        allow_abbrev=False,
    )
    up = parser.add_argument_group("gen_triton_model.py flags")
    up.add_argument("--model_type", choices=FRAMEWORKS, default="pytorch",
                    help="framework of the compiled model (default pytorch)")
    up.add_argument("--inf2", action="store_true", help="target inf2 (trn1/trn2 with --target trn1/trn2)")
    up.add_argument("--triton_input", action="extend", nargs="+", default=[], metavar="NAME,DTYPE,SHAPE",
                    help="input tensor, e.g. INPUT__0,INT64,4x384 (no batch dim when --max_batch_size > 0); repeatable, "
                         "several items each; omitted: read from the compiled model's .workbench.json or SavedModel")
    up.add_argument("--triton_output", action="extend", nargs="+", default=[], metavar="NAME,DTYPE,SHAPE",
                    help="output tensor, same form as --triton_input")
    up.add_argument("--compiled_model", required=True,
                    help="compiled model path; relative paths are resolved against the model directory")
    up.add_argument("--neuron_core_range", default="0:0", metavar="A:B",
                    help="cores A..B (inclusive) split evenly over the instances (default 0:0)")
    up.add_argument("--triton_model_instance_count", type=int, default=1, metavar="N",
                    help="model instances sharing the core range (default 1)")
    up.add_argument("--threads_per_core", type=int, default=None, metavar="N",
                    help="Neuron: DataParallel workers per core (default: the SDK's, 2); cpu: threads per core "
                         "(default 1)")
    up.add_argument("--triton_model_dir", required=True, help="the model directory to write")
    up.add_argument("--model_version", type=int, default=1, metavar="N", help="writes N/model.py (default 1)")
    up.add_argument("--max_batch_size", type=int, default=0, metavar="N",
                    help="0 (default): requests carry their own batch dim; N > 0: Triton adds a batch dim up to N")
    up.add_argument("--enable_dynamic_batching", action="store_true", help="add a dynamic_batching block")
    up.add_argument("--preferred_batch_size", type=int, action="extend", nargs="+", default=[], metavar="N",
                    help="dynamic batcher preferred size(s), each <= --max_batch_size")
    up.add_argument("--max_queue_delay_microseconds", type=int, metavar="US",
                    help="dynamic batcher queue delay in microseconds")
    up.add_argument("--disable_batch_requests_to_neuron", action="store_true",
                    help="one model call per request instead of one per batch of requests")
    up.add_argument("--tag_set", default="serve", help="SavedModel tag set (TensorFlow auto-detection)")
    up.add_argument("--signature_def_key", default="serving_default", help="SavedModel signature")
    own = parser.add_argument_group("workbench options")
    own.add_argument("--target", choices=TARGETS, help=f"{', '.join(TARGETS)} (default: this machine's)")
    own.add_argument("--name", help="model name; when it differs from the --triton_model_dir name, that "
                                    "directory is the repository and the model goes to DIR/NAME")
    own.add_argument("--dry-run", action="store_true", dest="dry_run",
                     help="print the files and the core map; write nothing")
    own.add_argument("--force", action="store_true",
                     help="replace an existing directory (the old one is kept in <repository>.backups/)")
    own.add_argument("--for-other-machine", action="store_true", dest="for_other_machine",
                     help="the compiled model exists only on the serving host: do not check for it")
    own.add_argument("--copy-compiled-model", action="store_true", dest="copy_compiled_model",
                     help="copy the compiled model into DIR/VERSION/ and reference it relatively")
    own.add_argument("--cpu-affinity", action="store_true", dest="cpu_affinity",
                     help="cpu target: pin each instance to its cores")
    tnx = parser.add_argument_group("transformers-neuronx (--model_type transformers_neuronx)")
    tnx.add_argument("--tnx-model-class", dest="tnx_model_class",
                     help="transformers_neuronx sampling class (default: the compile's, else LlamaForSampling)")
    tnx.add_argument("--tnx-batch-size", dest="tnx_batch_size", type=int, help="default: the compile's, else 1")
    tnx.add_argument("--tnx-tp-degree", dest="tnx_tp_degree", type=int,
                     help="default: the compile's, else the instance's cores")
    tnx.add_argument("--tnx-n-positions", dest="tnx_n_positions", type=int, help="default: the compile's, else 2048")
    tnx.add_argument("--tnx-amp", dest="tnx_amp", choices=TNX_AMPS, help="default: the compile's, else f32")
    tnx.add_argument("--tnx-unroll", dest="tnx_unroll", type=int)
    tnx.add_argument("--tnx-sequence-length", dest="tnx_sequence_length", type=int,
                     help="longest output (default: --tnx-n-positions)")
    tnx.add_argument("--tnx-compiled-dir", dest="tnx_compiled_dir",
                     help="Neuron graphs saved by the compile (default: the compile's, beside the checkpoint)")
    _one_line_errors(parser)
    parser.set_defaults(func=run_cli)
    return parser


def _target_from_args(args: argparse.Namespace) -> str:
    if args.inf2:
        if args.target in ("cpu", "inf1"):
            raise GenerateError([f"--inf2 contradicts --target {args.target}"])
        return args.target or "inf2"
    return args.target or default_target()


def settings_from_args(args: argparse.Namespace) -> GenerateSettings:
    names = {f.name for f in fields(GenerateSettings)}
    values = {key: value for key, value in vars(args).items() if key in names}
    values["framework"] = args.model_type
    values["target"] = _target_from_args(args)
    return GenerateSettings(**values)


def _upstream_target_note(args: argparse.Namespace, target: str) -> str | None:
    """Upstream had no --target: without --inf2 it generated inf1 code, on any host. Say so when the
    machine's default differs, so a copied upstream command line is not silently reinterpreted."""
    if args.target or args.inf2 or target in ("cpu", "inf1"):
        return None
    return (f"no --target/--inf2: using this machine's target {target} (upstream gen_triton_model.py "
            "generated inf1 code without --inf2; pass --target inf1 for that)")


def run_cli(args: argparse.Namespace) -> int:
    """0 written (or dry run), 2 bad settings (nothing written), 1 refused by the file system."""
    from workbench.generate.repository import RepositoryError

    try:
        settings = settings_from_args(args)
        generated = render(settings)
    except GenerateError as err:
        for problem in err.problems:
            print(f"workbench generate: error: {problem}", file=sys.stderr)
        return 2
    note = _upstream_target_note(args, settings.target)
    if note:
        generated.warnings.insert(0, note)
    if args.dry_run:
        sys.stdout.write(generated.dry_run())
        if generated.dest.exists():
            changes = diff_model_dir(generated.dest, generated.files) or "(no changes)\n"
            sys.stdout.write(f"\n# ---- changes against {generated.dest}\n{changes}")
        return 0
    try:
        result = write(generated, overwrite=args.force)
    except (RepositoryError, OSError) as err:
        print(f"workbench generate: error: {err}", file=sys.stderr)
        return 1
    for warning in generated.warnings:
        print(f"workbench generate: warning: {warning}", file=sys.stderr)
    print(f"wrote {result.path}" + (f" (previous directory kept as {result.backup})" if result.backup else ""))
    print(generated.core_map.describe())
    return 0
