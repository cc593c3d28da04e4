"""config.pbtxt as Triton's own ModelConfig protobuf.

Upstream gen_triton_model.py glued config.pbtxt together from strings, so a typo in a dtype
(``TYPE_TYPE_FP32``) or a preferred batch size above max_batch_size only surfaced when Triton
loaded the model. Building the protobuf Triton itself parses, and checking it here, moves those
failures to generation time and lets a hand-edited config be read back and regenerated.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TypeAlias

from google.protobuf import json_format, text_format
from tritonclient.grpc import model_config_pb2

from workbench.coremap import END_PARAMETER, START_PARAMETER, CoreRange, CoreRangeError
from workbench.files import NotRegularFile, read_regular
from workbench.limits import tensor_name_problem
from workbench.refusals import WorkbenchError
from workbench.spec import ModelSpec, SpecError, TensorSpec, config_dtype, parse_dtype, upstream_item
from workbench.system import TARGETS

__all__ = [
    "ConfigError",
    "config_item",
    "ModelConfig",
    "TARGETS",
    "FRAMEWORKS",
    "build_config",
    "to_text",
    "from_text",
    "read_config",
    "to_json",
    "spec_from_config",
    "parameters_of",
    "parameter_string",
    "validate_config",
    "check_config",
]

# the generated protobuf class (tritonclient ships no stubs: to mypy an alias of Any)
ModelConfig: TypeAlias = model_config_pb2.ModelConfig

FRAMEWORKS = ("pytorch", "tensorflow", "transformers_neuronx")
_BOOL_PARAMETERS = ("BATCH_REQUESTS", "CPU_AFFINITY")
_KINDS = ("KIND_AUTO", "KIND_GPU", "KIND_CPU", "KIND_MODEL")


class ConfigError(WorkbenchError, ValueError):
    """A config.pbtxt that cannot be parsed or would not serve; the message names the bad item."""


# Measured on Triton 2.51 (r24.10): a request answered from the cache leaves the ordered batcher
# waiting for its slot, so the next request to the model never returns (HTTP timeout; without
# preserve_ordering, or without the cache, the same requests are answered)
PRESERVE_ORDERING_WITH_CACHE = (
    "{ordering} cannot be used with {cache}: on Triton 2.51 the first cache hit stalls "
    "every later request to the model (measured); choose one"
)


def build_config(
    name: str,
    spec: ModelSpec,
    *,
    max_batch_size: int = 0,
    dynamic_batching: bool = False,
    preferred_batch_sizes: Iterable[int] = (),
    max_queue_delay_us: int | None = None,
    instance_count: int = 1,
    kind: str = "KIND_MODEL",
    parameters: Mapping[str, object] | None = None,
    backend: str = "python",
    versions: Iterable[int] | None = None,
) -> ModelConfig:
    """A ModelConfig for ``spec``. The dims are taken as given: with ``max_batch_size > 0`` the spec
    must already leave out the batch dim (Triton adds it). Parameter values become strings, which
    is the only kind Triton's parameters map holds. ``versions`` pins a specific version policy."""
    if kind not in _KINDS:
        raise ConfigError(f"instance group kind {kind!r} is not one of {', '.join(_KINDS)}")
    cfg = ModelConfig(name=name, backend=backend, max_batch_size=int(max_batch_size))
    if versions is not None:
        cfg.version_policy.specific.versions.extend(int(v) for v in versions)
    if dynamic_batching:
        batching = cfg.dynamic_batching
        batching.SetInParent()  # an empty block still switches the dynamic batcher on
        batching.preferred_batch_size.extend(int(s) for s in preferred_batch_sizes)
        if max_queue_delay_us is not None:
            batching.max_queue_delay_microseconds = int(max_queue_delay_us)
    for tensor, field in [(t, cfg.input) for t in spec.inputs] + [(t, cfg.output) for t in spec.outputs]:
        entry = field.add(name=tensor.name, data_type=config_dtype(tensor.dtype))
        entry.dims.extend(tensor.dims)
    cfg.instance_group.add(kind=kind, count=int(instance_count))
    for key, value in (parameters or {}).items():
        cfg.parameters[str(key)].string_value = parameter_string(value)
    return cfg


def parameter_string(value: object) -> str:
    """A config parameter value as the string Triton stores: ``true``/``false`` for booleans (what
    model.py and both PyTorch-backend runtimes read), JSON for a dict or list (e.g.
    ``TORCH_COMPILE_OPTIONAL_PARAMETERS``), ``str`` otherwise."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True)
    return str(value)


# Top-level fields in reading order (what the model is, its tensors, how it runs); protobuf's own
# order (by field number) would put `backend` last.
_TEXT_ORDER = (
    "name",
    "platform",
    "backend",
    "runtime",
    "version_policy",
    "max_batch_size",
    "input",
    "output",
    "instance_group",
    "dynamic_batching",
    "sequence_batching",
    "parameters",
)


def to_text(cfg: ModelConfig) -> str:
    """Readable, stable text: name and backend first, parameters sorted by key, dims as ``[1, 384]``.
    Each top-level field is printed by text_format, so the result parses back to an equal message."""

    def rank(item):
        name = item[0].name
        return (_TEXT_ORDER.index(name) if name in _TEXT_ORDER else len(_TEXT_ORDER), item[0].number)

    parts = []
    for descriptor, _ in sorted(cfg.ListFields(), key=rank):
        single = ModelConfig()
        single.CopyFrom(cfg)
        for other, _ in cfg.ListFields():
            if other.name != descriptor.name:
                single.ClearField(other.name)
        parts.append(text_format.MessageToString(single, use_short_repeated_primitives=True))
    return "".join(parts)


def from_text(text: str, *, source: str = "config.pbtxt") -> ModelConfig:
    """Parse config.pbtxt text; a syntax error names the line and column."""
    cfg = ModelConfig()
    try:
        text_format.Parse(text, cfg)
    except text_format.ParseError as err:
        line, column = err.GetLine(), err.GetColumn()
        detail = str(err)
        if line is not None:
            detail = detail.split(" : ", 1)[-1]
            raise ConfigError(f"{source} line {line}, column {column}: {detail}") from None
        raise ConfigError(f"{source}: {detail}") from None
    return cfg


def read_config(path: str | Path) -> ModelConfig:
    """Read a config.pbtxt file, or the one inside a model directory."""
    path = Path(path)
    if path.is_dir():
        path = path / "config.pbtxt"
    if not path.is_file():
        raise ConfigError(f"{path}: no such config file")
    try:  # a regular file of bounded size, never through a link or from a FIFO or device
        data = read_regular(path)
    except NotRegularFile as err:
        raise ConfigError(str(err)) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:  # Triton reads protobuf text format, which is UTF-8
        raise ConfigError(
            f"{path}: not UTF-8 text (byte {err.object[err.start]:#04x} at offset {err.start}); save it as UTF-8"
        ) from None
    return from_text(text, source=str(path))


def to_json(cfg: ModelConfig) -> str:
    """The JSON string Triton's ``load_model(name, config=...)`` override takes (proto field names)."""
    return json_format.MessageToJson(cfg, preserving_proto_field_name=True, indent=None, sort_keys=True)


def parameters_of(cfg: ModelConfig) -> dict[str, str]:
    return {key: value.string_value for key, value in sorted(cfg.parameters.items())}


def _tensor_spec(entry: model_config_pb2.ModelInput | model_config_pb2.ModelOutput, kind: str) -> TensorSpec:
    dtype_name = model_config_pb2.DataType.Name(entry.data_type)
    try:
        return TensorSpec(entry.name, parse_dtype(dtype_name), tuple(entry.dims))
    except SpecError as err:
        raise ConfigError(f"{kind} {entry.name!r}: {err}") from None


def spec_from_config(cfg: ModelConfig) -> ModelSpec:
    """The model interface a config declares (dims as written, i.e. without the batch dim when
    max_batch_size > 0)."""
    inputs = tuple(_tensor_spec(t, "input") for t in cfg.input)
    outputs = tuple(_tensor_spec(t, "output") for t in cfg.output)
    try:
        return ModelSpec(inputs, outputs)
    except SpecError as err:
        raise ConfigError(f"config {cfg.name!r}: {err}") from None


def validate_config(cfg: ModelConfig, *, directory_name: str | None = None) -> list[str]:
    """Every problem Triton or the generated model.py would hit at load time, one specific message
    each; an empty list means the config is fine. Give ``directory_name`` when the config lives in a
    model directory: Triton refuses a name that differs from it."""
    problems: list[str] = []
    if not cfg.name:
        problems.append("name is empty; Triton needs the model name (the directory name)")
    elif directory_name is not None and cfg.name != directory_name:
        problems.append(
            f"name {cfg.name!r} differs from its directory {directory_name!r}; Triton requires "
            "the model name to equal the directory name"
        )
    if not cfg.backend and not cfg.platform:
        problems.append('neither backend nor platform is set; generated models use backend: "python"')
    if cfg.max_batch_size < 0:
        problems.append(f"max_batch_size {cfg.max_batch_size} is negative; use 0 (no batching) or more")
    problems += _tensor_problems(cfg)
    problems += _batching_problems(cfg)
    problems += _scheduling_problems(cfg)
    for group in cfg.instance_group:
        label = f"instance_group {group.name!r}" if group.name else "instance_group"
        if group.count < 0:
            problems.append(f"{label} count {group.count} is negative")
    for version in cfg.version_policy.specific.versions:
        if version < 1:
            problems.append(f"version_policy specific version {version} is invalid; versions start at 1")
    problems += _parameter_problems(cfg)
    return problems


def check_config(cfg: ModelConfig, *, directory_name: str | None = None) -> ModelConfig:
    """Raise ConfigError listing every problem ``validate_config`` finds; return ``cfg`` otherwise."""
    problems = validate_config(cfg, directory_name=directory_name)
    if problems:
        raise ConfigError("; ".join(problems))
    return cfg


# Backends whose auto-complete declares the tensors a config leaves out: Triton's vLLM backend
# (src/model.py auto_complete_config: text_input, stream, sampling_parameters ... -> text_output).
TENSORS_AUTO_COMPLETED = ("vllm",)


def _tensor_problems(cfg: ModelConfig) -> list[str]:
    problems: list[str] = []
    if cfg.backend not in TENSORS_AUTO_COMPLETED:
        if not cfg.input:
            problems.append("no input declared")
        if not cfg.output:
            problems.append("no output declared")
    seen: dict[str, str] = {}
    for kind, entries in (("input", cfg.input), ("output", cfg.output)):
        for position, entry in enumerate(entries):
            label = f"{kind} {entry.name!r}" if entry.name else f"{kind} #{position}"
            if not entry.name:
                problems.append(f"{label} has no name")
            elif tensor_name_problem(entry.name):
                problems.append(f"{kind}: {tensor_name_problem(entry.name)}")
            elif entry.name in seen:
                problems.append(f"{label}: duplicate name (already an {seen[entry.name]})")
            else:
                seen[entry.name] = kind
            if entry.data_type == model_config_pb2.TYPE_INVALID:
                problems.append(f"{label}: data_type is missing or TYPE_INVALID")
            if not entry.dims and not entry.HasField("reshape"):
                problems.append(f"{label}: dims are empty; give at least one dim (-1 for variable)")
            for dim in entry.dims:
                if dim == 0 or dim < -1:
                    problems.append(f"{label}: dim {dim} in {list(entry.dims)} is invalid; dims are positive or -1")
                    break
    return problems


def _scheduling_problems(cfg: ModelConfig) -> list[str]:
    """Triton's rules for the dynamic batcher's priorities and the response cache (core's
    model_config_utils.cc ValidateModelConfig), for configs edited by hand."""
    problems: list[str] = []
    if cfg.response_cache.enable and cfg.model_transaction_policy.decoupled:
        problems.append("response_cache cannot be enabled for a decoupled model (model_transaction_policy)")
    if cfg.response_cache.enable and cfg.HasField("sequence_batching"):
        problems.append("response_cache cannot be enabled with sequence_batching")
    if not cfg.HasField("dynamic_batching"):
        return problems
    batching, levels = cfg.dynamic_batching, cfg.dynamic_batching.priority_levels
    if levels and not 1 <= batching.default_priority_level <= levels:
        problems.append(
            f"dynamic_batching default_priority_level {batching.default_priority_level} must be in "
            f"1..{levels} (priority_levels)"
        )
    for level in batching.priority_queue_policy:
        if not 1 <= level <= levels:
            problems.append(
                f"dynamic_batching priority_queue_policy level {level} must be in 1..{levels} (priority_levels)"
            )
    if batching.preserve_ordering:
        if levels > 1:
            problems.append(
                f"dynamic_batching preserve_ordering allows one priority level only, not priority_levels {levels}"
            )
        policies = [batching.default_queue_policy, *batching.priority_queue_policy.values()]
        if any(p.timeout_action == p.DELAY and p.default_timeout_microseconds for p in policies):
            problems.append("dynamic_batching preserve_ordering cannot be used with a DELAY queue policy timeout")
        if cfg.response_cache.enable:
            problems.append(
                PRESERVE_ORDERING_WITH_CACHE.format(
                    ordering="dynamic_batching preserve_ordering", cache="response_cache"
                )
            )
    return problems


def _batching_problems(cfg: ModelConfig) -> list[str]:
    if not cfg.HasField("dynamic_batching"):
        return []
    problems: list[str] = []
    batching = cfg.dynamic_batching
    if cfg.max_batch_size == 0 and len(batching.preferred_batch_size):
        problems.append(
            "dynamic_batching preferred_batch_size is set but max_batch_size is 0 (batching off); "
            "set max_batch_size > 0 or drop the preferred sizes"
        )
    for size in batching.preferred_batch_size:
        if size <= 0:
            problems.append(f"dynamic_batching preferred_batch_size {size} must be positive")
        elif cfg.max_batch_size > 0 and size > cfg.max_batch_size:
            problems.append(
                f"dynamic_batching preferred_batch_size {size} is larger than max_batch_size {cfg.max_batch_size}"
            )
    return problems


def _int_parameter(params: dict[str, str], key: str, problems: list[str]) -> int | None:
    if key not in params:
        return None
    try:
        return int(params[key])
    except ValueError:
        problems.append(f"parameter {key} = {params[key]!r} is not an integer")
        return None


def _parameter_problems(cfg: ModelConfig) -> list[str]:
    """The upstream model.py contract: its core and thread parameters must make a valid split."""
    problems: list[str] = []
    params = parameters_of(cfg)
    threads = _int_parameter(params, "NUM_THREADS_PER_CORE", problems)
    if threads is not None and threads < 1:
        problems.append(f"parameter NUM_THREADS_PER_CORE = {threads} must be at least 1")
    has_start = START_PARAMETER in params
    if has_start != (END_PARAMETER in params):
        missing = END_PARAMETER if has_start else START_PARAMETER
        problems.append(f"parameter {missing} is missing; the core range needs both ends")
    else:
        try:
            core_range = CoreRange.from_parameters(params)
        except CoreRangeError as err:
            problems.append(str(err))
            core_range = None
        if core_range is not None:
            try:
                core_range.split(sum(group.count or 1 for group in cfg.instance_group) or 1)
            except CoreRangeError as err:
                problems.append(f"parameters {START_PARAMETER}/{END_PARAMETER}: {err}")
    if "COMPILED_MODEL" in params and not params["COMPILED_MODEL"].strip():
        problems.append("parameter COMPILED_MODEL is empty; give the compiled model's path")
    if "WORKBENCH_TARGET" in params and params["WORKBENCH_TARGET"] not in TARGETS:
        problems.append(
            f"parameter WORKBENCH_TARGET = {params['WORKBENCH_TARGET']!r} is not one of {', '.join(TARGETS)}"
        )
    if "WORKBENCH_FRAMEWORK" in params and params["WORKBENCH_FRAMEWORK"] not in FRAMEWORKS:
        problems.append(
            f"parameter WORKBENCH_FRAMEWORK = {params['WORKBENCH_FRAMEWORK']!r} is not one of {', '.join(FRAMEWORKS)}"
        )
    for key in _BOOL_PARAMETERS:
        if key in params and params[key] not in ("true", "false"):
            problems.append(f'parameter {key} = {params[key]!r} must be "true" or "false"')
    if has_start and len(cfg.instance_group) > 1:
        problems.append(
            f"{len(cfg.instance_group)} instance_group blocks; model.py splits its core range over exactly one"
        )
    return problems


def config_item(entry: model_config_pb2.ModelInput | model_config_pb2.ModelOutput) -> str | tuple[str, str, list[int]]:
    """``NAME,DTYPE,SHAPE`` for a config tensor; the dtype as written (TYPE_STRING -> BYTES). A
    name outside the tensor-name rule comes back as a (name, dtype, dims) triple, so the checks
    name it by that rule instead of failing to split an item."""
    dtype = model_config_pb2.DataType.Name(entry.data_type).removeprefix("TYPE_")
    dtype = "BYTES" if dtype == "STRING" else dtype
    if tensor_name_problem(entry.name):
        return (entry.name, dtype, list(entry.dims))
    return upstream_item(entry.name, dtype, entry.dims)
