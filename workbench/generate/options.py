"""The Triton config fields users tune, typed: queue policies, the rate limiter, the version policy, warm-up.

Each class mirrors its message in model_config.proto (same field names and meaning), so settings stay
plain values; the protobuf is only touched by `apply` (settings -> ModelConfig) and `read`
(ModelConfig -> settings fields). Triton's own rules for these fields -- core's
model_config_utils.cc ``ValidateModelConfig`` and backend_model_instance.cc ``GenerateWarmupData`` --
are in `problems`, so a bad value is named when generating instead of failing the load.

The command-line spellings (``parse_*``) are workbench-style, as upstream had none:
``--version-policy latest:2|all|specific:1,3``, ``--default-queue-policy max_queue_size=16,...``,
``--priority-queue-policy 2:timeout_action=DELAY,...``, ``--rate-limiter-resource NAME:COUNT[:global]``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Mapping

from tritonclient.grpc import model_config_pb2

from workbench.spec import ModelSpec, SpecError, config_dtype, parse_dtype

__all__ = ["QueuePolicy", "RateLimiterResource", "RateLimiter", "VersionPolicy", "WarmupInput", "Warmup",
           "KINDS", "parse_queue_policy", "parse_priority_queue_policy", "parse_version_policy",
           "parse_resource", "warmup_inputs_from_spec", "apply", "read", "problems"]

KINDS = ("KIND_AUTO", "KIND_GPU", "KIND_CPU", "KIND_MODEL")
TIMEOUT_ACTIONS = ("REJECT", "DELAY")
WARMUP_DATA = ("zero", "random", "file")


class OptionError(ValueError):
    """A command-line or text spelling of an option that does not parse; the message shows the form."""


@dataclass(frozen=True)
class QueuePolicy:
    """ModelQueuePolicy: what happens to requests that wait too long or find the queue full."""

    timeout_action: str = "REJECT"  # REJECT or DELAY
    default_timeout_microseconds: int = 0  # 0: no timeout
    allow_timeout_override: bool = False  # requests may set their own (shorter) timeout
    max_queue_size: int = 0  # 0: unbounded


@dataclass(frozen=True)
class RateLimiterResource:
    name: str
    count: int = 1
    global_: bool = False  # proto field "global": shared by every device, not per device


@dataclass(frozen=True)
class RateLimiter:
    """ModelRateLimiter on the instance group: resources an instance needs to run, and its priority.
    Only used when tritonserver runs with ``--rate-limit=execution_count``."""

    resources: tuple[RateLimiterResource, ...] = ()
    priority: int = 0


@dataclass(frozen=True)
class VersionPolicy:
    """ModelVersionPolicy: ``latest`` (the newest ``num_versions``), ``all``, or ``specific`` ``versions``."""

    kind: str = "latest"
    num_versions: int = 1
    versions: tuple[int, ...] = ()

    def __str__(self) -> str:
        if self.kind == "latest":
            return f"latest:{self.num_versions}"
        if self.kind == "specific":
            return "specific:" + ",".join(map(str, self.versions))
        return self.kind


@dataclass(frozen=True)
class WarmupInput:
    """One input of a warm-up sample: ``data`` zero, random, or file (``<model>/warmup/<input_data_file>``)."""

    data_type: str
    dims: tuple[int, ...]
    data: str = "zero"
    input_data_file: str = ""


@dataclass(frozen=True)
class Warmup:
    """ModelWarmup: a sample Triton runs ``count`` times (0 means once) on every instance before the
    model is READY, as ``batch_size`` requests of one row each. ``inputs`` None: one input per config
    input, its dtype and dims (a variable dim as 1) filled with ``data`` -- so a Neuron model has run
    once before the first client request, whatever the spec."""

    name: str = "warmup"
    batch_size: int = 1
    count: int = 1
    inputs: Mapping[str, WarmupInput] | None = None
    data: str = "zero"  # for inputs=None: zero (safe for ids and masks) or random


# --- parsing the command-line spellings ------------------------------------------------------------

def _key_values(text: str, form: str) -> dict[str, str]:
    values = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.partition("=")
        if not sep or not key.strip():
            raise OptionError(f"{text!r}: expected {form}")
        values[key.strip()] = value.strip()
    return values


def _bool(text: str, what: str) -> bool:
    lowered = text.lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise OptionError(f"{what} {text!r} must be true or false")


def _int(text: str, what: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise OptionError(f"{what} {text!r} is not a whole number") from None


def parse_queue_policy(text: str) -> QueuePolicy:
    """``max_queue_size=16,timeout_action=DELAY,default_timeout_microseconds=5000,allow_timeout_override=true``"""
    form = "KEY=VALUE[,KEY=VALUE] with keys " + ", ".join(f.name for f in fields(QueuePolicy))
    values = _key_values(text, form)
    unknown = set(values) - {f.name for f in fields(QueuePolicy)}
    if unknown:
        raise OptionError(f"{text!r}: unknown key(s) {', '.join(sorted(unknown))}; expected {form}")
    kwargs: dict[str, Any] = {}
    for key, value in values.items():
        if key == "timeout_action":
            kwargs[key] = value.upper()
        elif key == "allow_timeout_override":
            kwargs[key] = _bool(value, key)
        else:
            kwargs[key] = _int(value, key)
    return QueuePolicy(**kwargs)


def parse_priority_queue_policy(text: str) -> tuple[int, QueuePolicy]:
    """``LEVEL:KEY=VALUE,...``, e.g. ``2:timeout_action=DELAY,max_queue_size=4``."""
    level, sep, rest = text.partition(":")
    if not sep:
        raise OptionError(f"{text!r}: expected LEVEL:KEY=VALUE[,KEY=VALUE], e.g. 2:max_queue_size=4")
    return _int(level.strip(), "priority level"), parse_queue_policy(rest)


def parse_version_policy(text: str) -> VersionPolicy:
    """``latest``, ``latest:N``, ``all``, ``specific:1,3``."""
    kind, _, rest = text.strip().partition(":")
    kind = kind.strip().lower()
    if kind == "latest":
        return VersionPolicy("latest", _int(rest, "latest version count") if rest.strip() else 1)
    if kind == "all" and not rest.strip():
        return VersionPolicy("all")
    if kind == "specific" and rest.strip():
        return VersionPolicy("specific", versions=tuple(_int(v.strip(), "version") for v in rest.split(",")))
    raise OptionError(f"version policy {text!r}: expected latest[:N], all or specific:V[,V]")


def parse_resource(text: str) -> RateLimiterResource:
    """``NAME:COUNT`` or ``NAME:COUNT:global``."""
    parts = [p.strip() for p in text.split(":")]
    if len(parts) not in (2, 3) or not parts[0] or (len(parts) == 3 and parts[2].lower() != "global"):
        raise OptionError(f"rate limiter resource {text!r}: expected NAME:COUNT or NAME:COUNT:global")
    return RateLimiterResource(parts[0], _int(parts[1], f"resource {parts[0]} count"), len(parts) == 3)


# --- settings <-> ModelConfig ----------------------------------------------------------------------

def warmup_inputs_from_spec(spec: ModelSpec, data: str = "zero") -> dict[str, WarmupInput]:
    """One warm-up input per model input: its dtype and config dims, a variable (-1) dim as 1 (Triton
    needs every dim given; the batch dim is not in the dims when max_batch_size > 0)."""
    return {t.name: WarmupInput(t.dtype, tuple(1 if d == -1 else d for d in t.dims), data) for t in spec.inputs}


def _queue_policy(message: Any, policy: QueuePolicy) -> None:
    message.SetInParent()
    message.timeout_action = model_config_pb2.ModelQueuePolicy.TimeoutAction.Value(policy.timeout_action)
    message.default_timeout_microseconds = policy.default_timeout_microseconds
    message.allow_timeout_override = policy.allow_timeout_override
    message.max_queue_size = policy.max_queue_size


def _policy_of(message: Any) -> QueuePolicy:
    return QueuePolicy(model_config_pb2.ModelQueuePolicy.TimeoutAction.Name(message.timeout_action),
                       message.default_timeout_microseconds, message.allow_timeout_override, message.max_queue_size)


def apply(cfg: model_config_pb2.ModelConfig, settings: Any, spec: ModelSpec) -> None:
    """Write the tuned fields of ``settings`` (a GenerateSettings, already checked) into ``cfg``."""
    group = cfg.instance_group[0]
    group.kind = model_config_pb2.ModelInstanceGroup.Kind.Value(settings.instance_group_kind)
    if settings.instance_group_name:
        group.name = settings.instance_group_name
    if settings.rate_limiter is not None:
        group.rate_limiter.SetInParent()
        group.rate_limiter.priority = settings.rate_limiter.priority
        for resource in settings.rate_limiter.resources:
            group.rate_limiter.resources.add(name=resource.name, count=resource.count, **{"global": resource.global_})
    if settings.enable_dynamic_batching:
        batching = cfg.dynamic_batching
        batching.preserve_ordering = settings.preserve_ordering
        batching.priority_levels = settings.priority_levels
        batching.default_priority_level = settings.default_priority_level
        if settings.default_queue_policy is not None:
            _queue_policy(batching.default_queue_policy, settings.default_queue_policy)
        for level, policy in settings.priority_queue_policy.items():
            _queue_policy(batching.priority_queue_policy[int(level)], policy)
    optional = set(settings.optional_inputs)
    for entry in cfg.input:
        entry.optional = entry.name in optional
    for warmup in settings.model_warmup:
        message = cfg.model_warmup.add(name=warmup.name, batch_size=warmup.batch_size, count=warmup.count)
        inputs = warmup.inputs if warmup.inputs is not None else warmup_inputs_from_spec(spec, warmup.data)
        for name, item in inputs.items():
            entry = message.inputs[name]
            entry.data_type = model_config_pb2.DataType.Value(config_dtype(item.data_type))
            entry.dims.extend(item.dims)
            if item.data == "file":
                entry.input_data_file = item.input_data_file
            elif item.data == "random":
                entry.random_data = True
            else:
                entry.zero_data = True
    if settings.response_cache is not None:
        cfg.response_cache.enable = settings.response_cache
    if settings.decoupled is not None:
        cfg.model_transaction_policy.decoupled = settings.decoupled
    policy = settings.version_policy
    if policy is not None:
        if policy.kind == "latest":
            cfg.version_policy.latest.num_versions = policy.num_versions
        elif policy.kind == "all":
            cfg.version_policy.all.SetInParent()
        else:
            cfg.version_policy.specific.versions.extend(policy.versions)


def _warmup_of(message: Any, spec: ModelSpec | None) -> Warmup:
    inputs = {}
    for name, entry in sorted(message.inputs.items()):
        kind = entry.WhichOneof("input_data_type")
        data = {"zero_data": "zero", "random_data": "random", "input_data_file": "file"}.get(kind or "", "zero")
        dtype = model_config_pb2.DataType.Name(entry.data_type)
        inputs[name] = WarmupInput(parse_dtype(dtype) if dtype != "TYPE_INVALID" else dtype, tuple(entry.dims), data,
                                   entry.input_data_file)
    base = dict(name=message.name, batch_size=message.batch_size, count=message.count)
    for data in ("zero", "random") if spec is not None else ():
        # what `inputs=None` generates: read it back as that, so it follows the spec
        if inputs == warmup_inputs_from_spec(spec, data):
            return Warmup(**base, data=data)
    return Warmup(**base, inputs=inputs)


def read(cfg: model_config_pb2.ModelConfig, spec: ModelSpec | None) -> dict[str, Any]:
    """The tuned fields of ``cfg`` as GenerateSettings keyword arguments (for read-back)."""
    group = cfg.instance_group[0] if len(cfg.instance_group) else model_config_pb2.ModelInstanceGroup(kind="KIND_MODEL")
    values: dict[str, Any] = {
        "instance_group_kind": model_config_pb2.ModelInstanceGroup.Kind.Name(group.kind),
        "instance_group_name": group.name,
        "rate_limiter": None,
        "optional_inputs": [t.name for t in cfg.input if t.optional],
        "model_warmup": [_warmup_of(w, spec) for w in cfg.model_warmup],
        "response_cache": cfg.response_cache.enable if cfg.HasField("response_cache") else None,
        "decoupled": cfg.model_transaction_policy.decoupled if cfg.HasField("model_transaction_policy") else None,
        "version_policy": None,
    }
    if group.HasField("rate_limiter"):
        values["rate_limiter"] = RateLimiter(
            tuple(RateLimiterResource(r.name, r.count, getattr(r, "global")) for r in group.rate_limiter.resources),
            group.rate_limiter.priority)
    if cfg.HasField("dynamic_batching"):
        batching = cfg.dynamic_batching
        values.update(
            preserve_ordering=batching.preserve_ordering, priority_levels=batching.priority_levels,
            default_priority_level=batching.default_priority_level,
            default_queue_policy=_policy_of(batching.default_queue_policy)
            if batching.HasField("default_queue_policy") else None,
            priority_queue_policy={level: _policy_of(p) for level, p in sorted(batching.priority_queue_policy.items())})
    choice = cfg.version_policy.WhichOneof("policy_choice") if cfg.HasField("version_policy") else None
    if choice == "latest":
        values["version_policy"] = VersionPolicy("latest", cfg.version_policy.latest.num_versions)
    elif choice == "all":
        values["version_policy"] = VersionPolicy("all")
    elif choice == "specific":
        values["version_policy"] = VersionPolicy("specific", versions=tuple(cfg.version_policy.specific.versions))
    return values


# --- Triton's rules ----------------------------------------------------------------------------

def _policy_problems(label: str, policy: QueuePolicy) -> list[str]:
    problems = []
    if policy.timeout_action not in TIMEOUT_ACTIONS:
        problems.append(f"{label} timeout_action {policy.timeout_action!r} is not one of {', '.join(TIMEOUT_ACTIONS)}")
    if policy.default_timeout_microseconds < 0:
        problems.append(f"{label} default_timeout_microseconds {policy.default_timeout_microseconds} is negative")
    if policy.max_queue_size < 0:
        problems.append(f"{label} max_queue_size {policy.max_queue_size} is negative (0 means unbounded)")
    return problems


def _batcher_problems(settings: Any) -> list[str]:
    """model_config_utils.cc ValidateModelConfig, the dynamic_batching part."""
    tuned = [flag for flag, on in (("--preserve-ordering", settings.preserve_ordering),
                                   ("--priority-levels", settings.priority_levels),
                                   ("--default-priority-level", settings.default_priority_level),
                                   ("--default-queue-policy", settings.default_queue_policy is not None),
                                   ("--priority-queue-policy", settings.priority_queue_policy)) if on]
    if not settings.enable_dynamic_batching:
        return [f"{' and '.join(tuned)} configure the dynamic batcher: add --enable_dynamic_batching"] if tuned else []
    problems = []
    levels = settings.priority_levels
    if levels < 0:
        problems.append(f"--priority-levels {levels} is negative")
    if levels > 0 and not 1 <= settings.default_priority_level <= levels:
        problems.append(f"--default-priority-level {settings.default_priority_level} must be in 1..{levels} with "
                        f"--priority-levels {levels} (Triton refuses the load otherwise; 1 is the highest priority)")
    if levels == 0 and settings.default_priority_level:
        problems.append(f"--default-priority-level {settings.default_priority_level} needs --priority-levels")
    for level in settings.priority_queue_policy:
        if not 1 <= int(level) <= levels:
            problems.append(f"--priority-queue-policy level {level} must be in 1..{levels} (the --priority-levels)"
                            if levels else f"--priority-queue-policy level {level} needs --priority-levels")
    policies = {"--default-queue-policy": settings.default_queue_policy} if settings.default_queue_policy else {}
    policies.update({f"--priority-queue-policy {level}": p for level, p in settings.priority_queue_policy.items()})
    for label, policy in policies.items():
        problems += _policy_problems(label, policy)
    if settings.preserve_ordering:
        if levels > 1:
            problems.append(f"--preserve-ordering allows one priority level only, not --priority-levels {levels} "
                            "(Triton: \"Only one priority level is allowed when 'preserve_ordering' is true\")")
        for label, policy in policies.items():
            if policy.timeout_action == "DELAY" and policy.default_timeout_microseconds:
                problems.append(f"{label}: timeout_action DELAY with a timeout cannot be used with --preserve-ordering")
    return problems


def _warmup_problems(settings: Any, spec: ModelSpec, files: set[str]) -> list[str]:
    """backend_model_instance.cc GenerateWarmupData: every dim given, data chosen, the file present."""
    problems: list[str] = []
    by_name = {t.name: t for t in spec.inputs}
    seen: set[str] = set()
    for warmup in settings.model_warmup:
        label = f"warm-up sample {warmup.name!r}"
        if not warmup.name:
            problems.append("a warm-up sample has no name")
        elif warmup.name in seen:
            problems.append(f"{label}: duplicate name")
        seen.add(warmup.name)
        if warmup.batch_size < 1:
            problems.append(f"{label}: batch_size {warmup.batch_size} must be at least 1 (Triton skips 0)")
        if warmup.count < 0:
            problems.append(f"{label}: count {warmup.count} is negative")
        if warmup.inputs is None:
            if warmup.data not in ("zero", "random"):
                problems.append(f"{label}: data {warmup.data!r} must be zero or random")
            continue
        required = [n for n in by_name if n not in settings.optional_inputs]
        missing = [n for n in required if n not in warmup.inputs]
        if missing:
            problems.append(f"{label}: input(s) {', '.join(missing)} missing (every required input needs data)")
        for name, item in warmup.inputs.items():
            where = f"{label} input {name!r}"
            tensor = by_name.get(name)
            if tensor is None:
                problems.append(f"{where} is not a model input ({', '.join(by_name)})")
                continue
            try:
                dtype = parse_dtype(item.data_type)
            except SpecError:
                dtype = None
            if dtype != tensor.dtype:
                problems.append(f"{where}: data_type {item.data_type} differs from the input's {tensor.dtype}")
            dims = list(item.dims)
            if any(d < 1 for d in dims):
                problems.append(f"{where}: dims {dims} must all be given (no -1): Triton builds the sample from them")
            elif len(dims) != len(tensor.dims) or any(c != -1 and c != d for c, d in zip(tensor.dims, dims)):
                problems.append(f"{where}: dims {dims} do not fit the input's {list(tensor.dims)} (the load would fail)")
            if item.data not in WARMUP_DATA:
                problems.append(f"{where}: data {item.data!r} is not one of {', '.join(WARMUP_DATA)}")
            elif item.data == "file" and f"warmup/{item.input_data_file}" not in files:
                problems.append(f"{where}: warmup/{item.input_data_file} is not in the model directory "
                                "(Triton reads warm-up files from <model>/warmup/)")
    return problems


def problems(settings: Any, spec: ModelSpec | None, files: set[str]) -> list[str]:
    """Every problem with the tuned fields of ``settings``; ``files`` are the model directory's files
    after the write (relative paths), for the warm-up data files and the versions a policy names."""
    found = _batcher_problems(settings)
    if settings.instance_group_kind not in KINDS:
        found.append(f"--instance-group-kind {settings.instance_group_kind!r} is not one of {', '.join(KINDS)}")
    elif settings.instance_group_kind == "KIND_GPU":
        found.append("--instance-group-kind KIND_GPU: the generated model.py runs on the CPU or NeuronCores, never a "
                     "GPU; use KIND_MODEL (upstream's) or KIND_CPU")
    if settings.instance_group_name and not settings.instance_group_name.strip():
        found.append("--instance-group-name is blank")
    limiter = settings.rate_limiter
    if limiter is not None:
        names = [r.name for r in limiter.resources]
        for resource in limiter.resources:
            if not resource.name.strip():
                found.append("rate limiter resource with an empty name")
            if resource.count < 0:
                found.append(f"rate limiter resource {resource.name!r} count {resource.count} is negative")
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            found.append(f"rate limiter resource(s) {', '.join(duplicates)} given twice")
        if limiter.priority < 0:
            found.append(f"--rate-limiter-priority {limiter.priority} is negative")
    if spec is not None:
        inputs = [t.name for t in spec.inputs]
        unknown = [n for n in settings.optional_inputs if n not in inputs]
        if unknown:
            found.append(f"--optional-input {', '.join(unknown)}: not a model input ({', '.join(inputs)})")
        if inputs and set(inputs) <= set(settings.optional_inputs):
            found.append("every input is optional: a request with no inputs at all would reach the model")
        found += _warmup_problems(settings, spec, files)
    if settings.decoupled and settings.model_py is None:
        found.append("--decoupled: the generated model.py answers from execute(); a decoupled model needs a model.py "
                     "that sends its responses through response senders")
    if settings.decoupled and settings.response_cache:
        found.append("--response-cache cannot be used with a decoupled model (Triton refuses the load)")
    policy = settings.version_policy
    if policy is not None:
        versions = {int(p.split("/", 1)[0]) for p in files if p.split("/", 1)[0].isdigit() and "/" in p}
        if policy.kind not in ("latest", "all", "specific"):
            found.append(f"version policy {policy.kind!r} is not latest, all or specific")
        elif policy.kind == "latest" and policy.num_versions < 1:
            found.append(f"--version-policy latest:{policy.num_versions} must keep at least 1 version")
        elif policy.kind == "specific":
            if not policy.versions or any(v < 1 for v in policy.versions):
                found.append(f"--version-policy {policy}: versions start at 1")
            elif settings.model_version not in policy.versions:
                found.append(f"--version-policy {policy} does not serve --model_version {settings.model_version}, "
                             "the version written")
            missing = sorted(v for v in policy.versions if v >= 1 and v not in versions)
            if missing and settings.model_version in policy.versions:
                found.append(f"--version-policy {policy}: no version folder {', '.join(map(str, missing))} in the "
                             "model directory")
    return found


def warnings(settings: Any) -> list[str]:
    if settings.rate_limiter is not None:
        return ["the rate limiter applies only when tritonserver runs with --rate-limit=execution_count "
                "(TritonServer(extra_args=['--rate-limit=execution_count']))"]
    return []
