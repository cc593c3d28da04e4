"""The Triton config fields users tune, typed: queue policies, the rate limiter, the version policy, warm-up.

Each class mirrors its message in model_config.proto (same field names and meaning), so settings stay
plain values; the protobuf is only touched by `apply` (settings -> ModelConfig) and `read`
(ModelConfig -> settings fields). Triton's rules for them are in `workbench.generate.rules`.

The command-line spellings (``parse_*``) are workbench-style, as upstream had none:
``--version-policy latest:2|all|specific:1,3``, ``--default-queue-policy max_queue_size=16,...``,
``--priority-queue-policy 2:timeout_action=DELAY,...``, ``--rate-limiter-resource NAME:COUNT[:global]``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from tritonclient.grpc import model_config_pb2

from workbench.refusals import WorkbenchError
from workbench.spec import ModelSpec, config_dtype, parse_dtype

__all__ = [
    "QueuePolicy",
    "RateLimiterResource",
    "RateLimiter",
    "VersionPolicy",
    "WarmupInput",
    "Warmup",
    "KINDS",
    "parse_queue_policy",
    "parse_priority_queue_policy",
    "parse_version_policy",
    "parse_resource",
    "parse_rate_limiter",
    "rate_limiter_text",
    "parse_optional_queue_policy",
    "queue_policy_text",
    "parse_priority_queue_policies",
    "priority_queue_policies_text",
    "parse_names",
    "parse_optional_version_policy",
    "warmup_samples",
    "warmup_text",
    "warmup_inputs_from_spec",
    "apply",
    "read",
    "OptionError",
]

KINDS = ("KIND_AUTO", "KIND_GPU", "KIND_CPU", "KIND_MODEL")


class OptionError(WorkbenchError, ValueError):
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
        if key.strip() in values:
            raise OptionError(f"{text!r}: key {key.strip()} is given twice; give it once")
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


# --- the settings panel's text fields: one list per field, blank meaning "not written" ------------


def _items(text: str, separator: str) -> list[str]:
    return [part.strip() for part in str(text).split(separator) if part.strip()]


def parse_rate_limiter(resources: str, priority: int) -> RateLimiter | None:
    """``R1:1,R2:2:global`` and a priority -> the rate limiter; None when neither is given."""
    parsed = tuple(parse_resource(item) for item in _items(resources, ","))
    return RateLimiter(parsed, priority) if parsed or priority else None


def rate_limiter_text(limiter: RateLimiter | None) -> tuple[str, int]:
    """What `parse_rate_limiter` reads back to ``limiter``: the resources' text and the priority."""
    if limiter is None:
        return "", 0
    resources = ",".join(f"{r.name}:{r.count}" + (":global" if r.global_ else "") for r in limiter.resources)
    return resources, limiter.priority


def parse_optional_queue_policy(text: str) -> QueuePolicy | None:
    """`parse_queue_policy`, blank -> None (the field is not written)."""
    return parse_queue_policy(text) if str(text).strip() else None


def queue_policy_text(policy: QueuePolicy | None) -> str:
    """What `parse_optional_queue_policy` reads back to ``policy`` (its fields that are not the default)."""
    if policy is None:
        return ""
    default, parts = QueuePolicy(), []
    for f in fields(QueuePolicy):
        value = getattr(policy, f.name)
        if value != getattr(default, f.name):
            parts.append(f"{f.name}={str(value).lower() if isinstance(value, bool) else value}")
    return ",".join(parts) or f"timeout_action={policy.timeout_action}"


def parse_priority_queue_policies(text: str) -> dict[int, QueuePolicy]:
    """``2:max_queue_size=4; 1:timeout_action=DELAY`` -> priority level -> its queue policy."""
    return dict(parse_priority_queue_policy(item) for item in _items(text, ";"))


def priority_queue_policies_text(policies: Mapping[int, QueuePolicy]) -> str:
    return "; ".join(f"{level}:{queue_policy_text(policy)}" for level, policy in policies.items())


def parse_names(text: str) -> list[str]:
    """``INPUT__1, INPUT__2`` -> the names (optional inputs)."""
    return _items(text, ",")


def parse_optional_version_policy(text: str) -> VersionPolicy | None:
    """`parse_version_policy`, blank -> None (the field is not written)."""
    return parse_version_policy(text) if str(text).strip() else None


def warmup_samples(count: int, data: str) -> list[Warmup]:
    """The settings panel's warm-up: ``count`` runs of one sample built from the inputs (0: none)."""
    return [Warmup(count=count, data=data)] if count else []


def warmup_text(samples: list[Warmup]) -> tuple[int, str]:
    """What `warmup_samples` reads back to ``samples``: the first sample's count and data."""
    return (samples[0].count, samples[0].data) if samples else (0, "zero")


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
    return QueuePolicy(
        model_config_pb2.ModelQueuePolicy.TimeoutAction.Name(message.timeout_action),
        message.default_timeout_microseconds,
        message.allow_timeout_override,
        message.max_queue_size,
    )


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
        inputs[name] = WarmupInput(
            parse_dtype(dtype) if dtype != "TYPE_INVALID" else dtype, tuple(entry.dims), data, entry.input_data_file
        )
    base = dict(name=message.name, batch_size=message.batch_size, count=message.count)
    for data in ("zero", "random"):
        # what `inputs=None` generates: read it back as that, so it follows the spec
        if spec is not None and inputs == warmup_inputs_from_spec(spec, data):
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
            group.rate_limiter.priority,
        )
    if cfg.HasField("dynamic_batching"):
        batching = cfg.dynamic_batching
        values.update(
            preserve_ordering=batching.preserve_ordering,
            priority_levels=batching.priority_levels,
            default_priority_level=batching.default_priority_level,
            default_queue_policy=_policy_of(batching.default_queue_policy)
            if batching.HasField("default_queue_policy")
            else None,
            priority_queue_policy={level: _policy_of(p) for level, p in sorted(batching.priority_queue_policy.items())},
        )
    choice = cfg.version_policy.WhichOneof("policy_choice") if cfg.HasField("version_policy") else None
    if choice == "latest":
        values["version_policy"] = VersionPolicy("latest", cfg.version_policy.latest.num_versions)
    elif choice == "all":
        values["version_policy"] = VersionPolicy("all")
    elif choice == "specific":
        values["version_policy"] = VersionPolicy("specific", versions=tuple(cfg.version_policy.specific.versions))
    return values
