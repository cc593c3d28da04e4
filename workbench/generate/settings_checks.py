"""The checks: every problem with a GenerateSettings, collected before anything is written.

Upstream's generator accepted anything and let Triton or model.py fail at load time. `make_plan`
checks the settings as a whole -- names, core range, batching, the compiled model and its
``.workbench.json`` record, the tensors, the transformers-neuronx values -- and returns a `Plan`
holding every problem (one message each, naming the flag) and what the renderer needs, so nothing
is worked out twice.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, TypeVar

from workbench.compiler.artifact import SIDECAR_SUFFIX, sidecar_path
from workbench.coremap import CoreMap, CoreRange, CoreRangeError, describe_ranges
from workbench.generate import preserve, rules
from workbench.generate.config import FRAMEWORKS, TARGETS
from workbench.generate.record import check_against_record, read_sidecar, spec_from_record
from workbench.generate.settings import TNX_AMPS, TNX_PARAMETERS, GenerateError, GenerateSettings
from workbench.limits import dataclass_problems, model_name_problem, neuron_core_limit
from workbench.spec import ModelSpec, SpecError, TensorSpec, tensor_spec
from workbench.system import MissingSDKError, cpu_cores, target_problem, usable_cpu_ids

T = TypeVar("T")

__all__ = [
    "Plan",
    "make_plan",
    "FIXED_IN_VARIANTS",
    "variant_name_problem",
    "tensor_items",
    "plan_batching",
    "setting_flag",
]

# model.py refuses these data types (it has no wire conversion for them)
_UNSERVED_DTYPES = ("BYTES", "BF16")


@dataclass
class Plan:
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
    variants: dict[str, tuple[GenerateSettings, Plan]] = field(default_factory=dict)  # configs/<name>.pbtxt


def settled(value: T | None, what: str) -> T:
    """``value`` of a plan with no problems: every check that leaves it None reports a problem."""
    if value is None:
        raise GenerateError([f"the settings checks worked out no {what}"])
    return value


def tensor_items(items: list, kind: str, problems: list[str]) -> list[TensorSpec]:
    tensors = []
    for item in items:
        try:
            tensors.append(tensor_spec(item, kind))
        except SpecError as err:
            problems.append(f"--triton_{kind} {err}")
    return tensors


def _spec_from_saved_model(settings: GenerateSettings, path: Path) -> ModelSpec:
    try:
        from workbench.compiler.tensorflow import spec_from_saved_model  # tensorflow: only for a SavedModel
    except ImportError as err:
        raise GenerateError(
            [
                f"cannot read the inputs and outputs of {path} ({err}); pass --triton_input and --triton_output, "
                "or install the tensorflow extra (pip install 'workbench[tensorflow]')"
            ]
        ) from None

    try:
        return spec_from_saved_model(
            str(path), settings.tag_set, settings.signature_def_key, drop_batch_dim=settings.max_batch_size > 0
        )
    except (ImportError, MissingSDKError) as err:
        raise GenerateError(
            [
                f"TensorFlow is needed to read the inputs and outputs of {path} ({err}); pass --triton_input and "
                "--triton_output, or install the tensorflow extra (pip install 'workbench[tensorflow]')"
            ]
        ) from None
    except (SpecError, ValueError, OSError) as err:
        raise GenerateError([f"--compiled_model {path}: {err}"]) from None


def _place(flag: str, value: str, settings: GenerateSettings, plan: Plan) -> tuple[str, Path | None]:
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
        inside = _inside(resolved, dest)
        if inside is not None:  # carried into the new directory, so the path stays valid after --force
            _carry(plan, inside, resolved)
        return value, resolved
    if not settings.for_other_machine:
        hint = ""
        if not path.is_absolute() and path.exists():
            hint = (
                f"; {value} exists relative to the current directory, but model.py resolves relative "
                "paths against the model directory: give an absolute path or use --copy-compiled-model"
            )
        plan.problems.append(
            f"{flag} {value} not found (looked at {resolved}){hint}; "
            "use --for-other-machine if it only exists on the serving host"
        )
    return value, None


def _inside(path: Path, dest: Path) -> str | None:
    """``path`` relative to an existing ``dest`` (POSIX), when it lies inside it -- written
    relative or absolute -- else None."""
    if not dest.is_dir():
        return None
    try:
        rel = path.resolve().relative_to(dest.resolve())
    except ValueError:
        return None
    return rel.as_posix() if rel.parts else None


def _carry(plan: Plan, ref: str, source: Path) -> None:
    plan.carried[ref] = source
    sidecar = sidecar_path(source)
    if sidecar.is_file():
        plan.carried[ref + SIDECAR_SUFFIX] = sidecar


def _plan_compiled(settings: GenerateSettings, plan: Plan) -> None:
    compiled = str(settings.compiled_model).strip()
    if not compiled:
        plan.problems.append("--compiled_model is required: the path of the compiled model")
        return
    plan.compiled_ref, plan.compiled_source = _place("--compiled_model", compiled, settings, plan)
    plan.record = read_sidecar(plan.compiled_source, plan.problems)


def _plan_spec(settings: GenerateSettings, plan: Plan) -> None:
    inputs = tensor_items(list(settings.triton_input), "input", plan.problems)
    outputs = tensor_items(list(settings.triton_output), "output", plan.problems)
    if len(inputs) != len(settings.triton_input) or len(outputs) != len(settings.triton_output):
        return  # malformed items already reported
    record = plan.record
    where = f"per {plan.compiled_source}{SIDECAR_SUFFIX}" if record else ""
    if not inputs and not outputs:
        if record is not None:
            plan.spec = spec_from_record(settings, record)
        elif settings.framework == "tensorflow":
            if plan.compiled_source is None:
                plan.problems.append(
                    "--triton_input/--triton_output are needed: the SavedModel is not on this machine to read them from"
                )
                return
            try:
                plan.spec = _spec_from_saved_model(settings, plan.compiled_source)
            except GenerateError as err:
                plan.problems += err.problems
                return
        elif settings.framework == "transformers_neuronx":
            plan.spec = ModelSpec.parse(["input_ids,INT64,-1"], ["output_ids,INT64,-1"])
        else:
            plan.problems.append(
                "--triton_input and --triton_output are required for PyTorch models "
                "(TorchScript keeps no names, dtypes or shapes), e.g. --triton_input INPUT__0,INT64,4x384"
            )
            return
        record = None  # the spec came from it (or from the model): nothing to compare
    elif not inputs or not outputs:
        missing = "--triton_output" if inputs else "--triton_input"
        plan.problems.append(
            f"{missing} is missing: give both --triton_input and --triton_output"
            + (", or neither to read them from the SavedModel" if settings.framework == "tensorflow" else "")
        )
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
            plan.problems.append(
                f"transformers_neuronx models take input_ids (and optionally sequence_length) and "
                f"return one output; got inputs {names} and {len(spec.outputs)} output(s)"
            )
    for kind, tensors in (("input", spec.inputs), ("output", spec.outputs)):
        for t in tensors:
            if t.dtype in _UNSERVED_DTYPES:
                plan.problems.append(
                    f"{kind} {t.name!r}: {t.dtype} tensors are not supported by the generated "
                    "model.py; use a numeric type"
                )
    if record is not None:
        plan.problems += check_against_record(settings, spec, record, where)


def _plan_cores(settings: GenerateSettings, plan: Plan) -> None:
    core_range = settings.neuron_core_range
    if not isinstance(core_range, CoreRange):  # text GenerateSettings could not parse: the parser's words
        try:
            CoreRange.parse(core_range)
        except CoreRangeError as err:
            plan.problems.append(f"--neuron_core_range: {err}")
        return
    limit = neuron_core_limit(settings.target)
    if limit is not None and core_range.end >= limit[1]:
        plan.problems.append(
            f"--neuron_core_range {core_range}: core {core_range.end} exists on no {settings.target} "
            f"instance; the largest, {limit[0]}, has {limit[1]} NeuronCores (0:{limit[1] - 1})"
        )
        return
    cpus = cpu_cores() if settings.target == "cpu" and not settings.for_other_machine else None
    if cpus is not None and core_range.end >= cpus:  # a 100-core map of cores that are not there
        plan.problems.append(
            f"--neuron_core_range {core_range}: core {core_range.end} exists on no CPU of this "
            f"machine; it has {cpus} CPU cores (0:{cpus - 1})"
        )
        return
    try:
        plan.core_map = core_range.split(
            settings.triton_model_instance_count, 1 if settings.threads_per_core is None else settings.threads_per_core
        )
    except CoreRangeError as err:
        flag = (
            "--threads_per_core"
            if "threads per core" in str(err)
            else "--triton_model_instance_count"
            if "instance" in str(err)
            else "--neuron_core_range"
        )
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
            plan.warnings.append(
                f"core range {core_range} includes CPU(s) {describe_ranges(missing)} that this "
                "process cannot use "
                f"(usable: {sorted(usable)})" + ("; CPU affinity will fail" if settings.cpu_affinity else "")
            )


def plan_batching(settings: GenerateSettings, plan: Plan) -> None:
    mbs = settings.max_batch_size
    if mbs < 0:
        plan.problems.append(f"--max_batch_size {mbs} is negative; use 0 (no batching) or more")
    sizes = list(settings.preferred_batch_size)
    delay = settings.max_queue_delay_microseconds
    if delay is not None and delay < 0:
        plan.problems.append(f"--max_queue_delay_microseconds {delay} is negative")
    if not settings.enable_dynamic_batching:
        ignored = [
            flag
            for flag, value in (
                ("--preferred_batch_size", sizes),
                ("--max_queue_delay_microseconds", delay is not None),
            )
            if value
        ]
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
        plan.warnings.append(
            "--enable_dynamic_batching with --max_batch_size 0: Triton still runs each "
            "request alone; set --max_batch_size > 0 to batch requests"
        )


# what saved Neuron graphs were compiled with: loading them with other values fails
_TNX_GRAPH_FIELDS = ("tnx_model_class", "tnx_batch_size", "tnx_tp_degree", "tnx_n_positions", "tnx_amp")
_TNX_DEFAULT_N_POSITIONS = 2048  # model.py's default


def _flag(field_name: str) -> str:
    return "--" + field_name.replace("_", "-")


def setting_flag(field_name: str) -> str:
    """The CLI flag of a GenerateSettings field: upstream's spelling, ours with dashes."""
    if field_name == "framework":
        return "--model_type"
    if field_name.startswith("tnx_") or field_name in (
        "copy_compiled_model",
        "for_other_machine",
        "cpu_affinity",
        "state_dict",
    ):
        return _flag(field_name)
    return "--" + field_name


def _plan_tnx(settings: GenerateSettings, plan: Plan) -> None:
    """TNX_* values: given ones, else what the compile recorded, else model.py's defaults (left out)."""
    if settings.framework != "transformers_neuronx":
        return
    record = plan.record if plan.record and plan.record.get("framework") == "transformers_neuronx" else {}
    recorded = record.get("extra") or {}
    recorded_graphs = recorded.get("compiled_dir") if settings.target != "cpu" else None
    values: dict[str, Any] = {}  # a setting, else what the compile recorded (JSON)
    for name in TNX_PARAMETERS:
        given, known = getattr(settings, name), recorded.get(name.removeprefix("tnx_"))
        if (
            given is not None
            and known is not None
            and given != known
            and recorded_graphs
            and settings.tnx_compiled_dir is None
            and name in _TNX_GRAPH_FIELDS
        ):
            plan.problems.append(
                f"{_flag(name)} {given} differs from the {known} its saved Neuron graphs were "
                f"compiled with ({recorded_graphs}); recompile, or leave {_flag(name)} out"
            )
        values[name] = given if given is not None else known
    for name in ("tnx_batch_size", "tnx_tp_degree", "tnx_n_positions", "tnx_sequence_length", "tnx_unroll"):
        if values[name] is not None and int(values[name]) < 1:
            plan.problems.append(f"{_flag(name)} {values[name]} must be at least 1")
    positions = values["tnx_n_positions"] or _TNX_DEFAULT_N_POSITIONS
    if values["tnx_sequence_length"] is not None and values["tnx_sequence_length"] > positions:
        plan.problems.append(
            f"--tnx-sequence-length {values['tnx_sequence_length']} exceeds --tnx-n-positions {positions}"
        )
    if values["tnx_amp"] is not None and values["tnx_amp"] not in TNX_AMPS:
        plan.problems.append(f"--tnx-amp {values['tnx_amp']!r} is not one of {', '.join(TNX_AMPS)}")
    if values["tnx_model_class"] is not None and not str(values["tnx_model_class"]).strip():
        plan.problems.append("--tnx-model-class is empty; e.g. LlamaForSampling")
    plan.tnx = {TNX_PARAMETERS[name]: value for name, value in values.items() if value is not None}
    if settings.tnx_compiled_dir is not None:
        if settings.target == "cpu":
            plan.warnings.append("--tnx-compiled-dir is ignored on the cpu target (it holds Neuron graphs)")
        else:
            plan.tnx["TNX_COMPILED_DIR"], _ = _place("--tnx-compiled-dir", settings.tnx_compiled_dir, settings, plan)
    elif recorded_graphs and plan.compiled_source is not None:
        # the compile saves its graphs beside the checkpoint: keep them beside it here too
        source = plan.compiled_source.parent / Path(recorded_graphs).name
        if source.exists():
            value = (
                str(source)
                if settings.copy_compiled_model
                else (Path(plan.compiled_ref).parent / source.name).as_posix()
            )
            plan.tnx["TNX_COMPILED_DIR"], _ = _place("--tnx-compiled-dir", value, settings, plan)
        else:
            plan.warnings.append(
                f"the saved Neuron graphs {source} recorded by the compile are missing; "
                "model.py will compile the model at load time"
            )


# what a configs/<name>.pbtxt variant may change: everything but where and what the directory is
FIXED_IN_VARIANTS = ("triton_model_dir", "name", "model_version", "variants", "extra_files", "model_py")


def variant_name_problem(name: object) -> str:
    """Why ``name`` cannot be a ``configs/<name>.pbtxt`` variant ("" when it can)."""
    if not re.fullmatch(r"[A-Za-z0-9_.\-]+", str(name)) or name in (".", ".."):
        return f"config variant name {name!r} is not usable; use letters, digits, '_', '-' or '.'"
    return ""


def _written(settings: GenerateSettings, plan: Plan) -> set[str]:
    return {
        "config.pbtxt",
        f"{settings.model_version}/model.py",
        *plan.carried,
        *(f"configs/{name}.pbtxt" for name in settings.variants),
    }


def _plan_variants(settings: GenerateSettings, plan: Plan) -> None:
    """Each variant is the settings with its overrides, checked as a whole; its problems name it."""
    allowed = {f.name for f in fields(GenerateSettings)} - set(FIXED_IN_VARIANTS)
    for name, overrides in settings.variants.items():
        label = f"configs/{name}.pbtxt"
        if variant_name_problem(name):
            plan.problems.append(variant_name_problem(name))
            continue
        wrong = sorted(set(overrides) - allowed)
        if wrong:
            plan.problems.append(
                f"{label}: {', '.join(wrong)} cannot differ between configs of one model directory "
                f"(a variant may set {', '.join(sorted(allowed))})"
            )
            continue
        variant = replace(settings, variants={}, **overrides)
        sub = make_plan(variant)
        plan.problems += [f"{label}: {problem}" for problem in sub.problems]
        plan.warnings += [f"{label}: {warning}" for warning in sub.warnings]
        for rel, source in sub.carried.items():
            if rel in plan.carried and Path(plan.carried[rel]).resolve() != Path(source).resolve():
                plan.problems.append(
                    f"{label}: {rel} would be both {plan.carried[rel]} and {source}; give the "
                    "compiled models different file names"
                )
            plan.carried.setdefault(rel, source)
        plan.variants[name] = (variant, sub)


def _plan_kept(settings: GenerateSettings, plan: Plan) -> None:
    written = _written(settings, plan)
    plan.problems += preserve.problems(settings, plan.spec, written)
    plan.problems += rules.problems(settings, plan.spec, written | set(settings.extra_files))
    if settings.instance_group_kind == "KIND_GPU":
        plan.problems.append(
            "--instance-group-kind KIND_GPU: the generated model.py runs on the CPU or NeuronCores, "
            "never a GPU; use KIND_MODEL (upstream's) or KIND_CPU"
        )
    plan.warnings += rules.warnings(settings)


def make_plan(settings: GenerateSettings) -> Plan:
    """Check ``settings`` as a whole; the plan holds every problem and what `render` builds from."""
    plan = Plan()
    plan.problems += dataclass_problems(settings, setting_flag)
    if plan.problems:
        return plan  # the checks below compare and count: they need the right types first
    if settings.framework not in FRAMEWORKS:
        plan.problems.append(f"--model_type {settings.framework!r} is not one of {', '.join(FRAMEWORKS)}")
    if settings.target not in TARGETS:
        plan.problems.append(f"--target {settings.target!r} is not one of {', '.join(TARGETS)}")
    name = settings.model_name
    if not str(settings.triton_model_dir).strip():
        plan.problems.append("--triton_model_dir is required: the model directory to write")
    elif problem := model_name_problem(name):
        plan.problems.append(problem)
    if settings.model_version < 1:
        plan.problems.append(f"--model_version {settings.model_version} is invalid; versions start at 1")
    _plan_cores(settings, plan)
    plan_batching(settings, plan)
    unservable = target_problem(settings.framework, settings.target)
    if unservable:
        plan.problems.append(unservable)
    elif settings.framework in FRAMEWORKS and settings.target in TARGETS:
        _plan_compiled(settings, plan)
        _plan_spec(settings, plan)
        _plan_tnx(settings, plan)
    _plan_variants(settings, plan)
    _plan_kept(settings, plan)
    return plan
