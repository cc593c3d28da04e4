"""Sweep batch sizes x core allocations x concurrency on ONE running tritonserver.

Model Analyzer restarts the server for every configuration and learns about a core split that does
not fit only when the model fails to load. Here the whole grid is checked against the core range
before anything runs, each variant is loaded into the same server as a config override (Triton
reloads it, or updates the instance group in place), every point's served outputs are compared with
a reference, and every finished point is appended to disk at once, so a cancelled or crashed sweep
resumes where it stopped instead of measuring again.
"""

from __future__ import annotations

import itertools
import json
import os
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

from workbench.config import ModelConfig, check_config, parameters_of, to_json
from workbench.coremap import CoreMap, CoreRangeError, parse_core_range, split_cores

__all__ = [
    "SweepError",
    "Allocation",
    "Batching",
    "Variant",
    "SweepPlan",
    "parse_allocations",
    "variant_config",
]

# Parameters the sweep itself sets for every variant; a free-form grid may not fight over them.
_CORE_PARAMETERS = ("NEURON_CORE_START_INDEX", "NEURON_CORE_END_INDEX")


class SweepError(ValueError):
    """A sweep that cannot run as asked; the message names the bad item."""


def _positive_ints(values: Any, what: str) -> tuple[int, ...]:
    if isinstance(values, (int, str)):
        values = [values]
    out: list[int] = []
    for value in values:
        for part in str(value).split(",") if isinstance(value, str) else [value]:
            try:
                number = int(part)
            except (TypeError, ValueError):
                raise SweepError(f"{what}: {part!r} is not a whole number") from None
            if number < 1:
                raise SweepError(f"{what}: {number} must be at least 1")
            if number in out:
                raise SweepError(f"{what}: {number} is listed twice")
            out.append(number)
    if not out:
        raise SweepError(f"{what}: give at least one value")
    return tuple(out)


@dataclass(frozen=True)
class Allocation:
    """``instances`` model instances with ``cores_per_instance`` cores each, packed from the start
    of the core range (NeuronCores on Neuron targets, CPU cores on the CPU)."""

    instances: int
    cores_per_instance: int

    def __post_init__(self) -> None:
        for name in ("instances", "cores_per_instance"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise SweepError(f"allocation {name} must be a whole number >= 1, got {value!r}")

    @classmethod
    def parse(cls, text: str | "Allocation") -> "Allocation":
        """``"2x1"``: 2 instances of 1 core each."""
        if isinstance(text, Allocation):
            return text
        parts = str(text).strip().lower().split("x")
        try:
            if len(parts) != 2:
                raise ValueError
            instances, cores = int(parts[0]), int(parts[1])
        except ValueError:
            raise SweepError(f"allocation {text!r} is malformed; write INSTANCESxCORES, e.g. 2x1") from None
        try:
            return cls(instances, cores)
        except SweepError as err:
            raise SweepError(f"allocation {text!r}: {err}") from None

    @property
    def label(self) -> str:
        return f"{self.instances}x{self.cores_per_instance}"

    @property
    def cores(self) -> int:
        return self.instances * self.cores_per_instance

    def core_map(self, start: int) -> CoreMap:
        """The split model.py makes for this allocation: range ``start .. start+cores-1``."""
        return split_cores(start, start + self.cores - 1, self.instances)


def parse_allocations(text: str | Iterable[str | Allocation]) -> tuple[Allocation, ...]:
    """``"1x1,2x1,1x2"`` or a list of such items / Allocations."""
    items = [p for p in text.split(",") if p.strip()] if isinstance(text, str) else list(text)
    allocations = tuple(Allocation.parse(item) for item in items)
    if not allocations:
        raise SweepError("allocations: give at least one, e.g. 1x1,2x1")
    seen = set()
    for alloc in allocations:
        if alloc in seen:
            raise SweepError(f"allocation {alloc.label} is listed twice")
        seen.add(alloc)
    return allocations


@dataclass(frozen=True)
class Batching:
    """A dynamic-batching setting to try. ``enabled=False`` removes the dynamic_batching block;
    an empty enabled one turns the batcher on with Triton's defaults."""

    enabled: bool = True
    preferred_batch_sizes: tuple[int, ...] = ()
    max_queue_delay_us: int | None = None

    def __post_init__(self) -> None:
        sizes = tuple(self.preferred_batch_sizes)
        if sizes:
            sizes = _positive_ints(sizes, "preferred batch sizes")
        object.__setattr__(self, "preferred_batch_sizes", sizes)
        if self.max_queue_delay_us is not None and int(self.max_queue_delay_us) < 0:
            raise SweepError(f"queue delay {self.max_queue_delay_us} us must not be negative")
        if not self.enabled and (sizes or self.max_queue_delay_us is not None):
            raise SweepError("dynamic batching is off: preferred sizes and queue delay do not apply")

    @property
    def label(self) -> str:
        if not self.enabled:
            return "batching off"
        parts = ["dyn"]
        if self.preferred_batch_sizes:
            parts.append("pref=" + "+".join(map(str, self.preferred_batch_sizes)))
        if self.max_queue_delay_us is not None:
            parts.append(f"delay={self.max_queue_delay_us}us")
        return " ".join(parts)

    def apply(self, cfg: ModelConfig) -> None:
        cfg.ClearField("dynamic_batching")
        if not self.enabled:
            return
        cfg.dynamic_batching.SetInParent()
        cfg.dynamic_batching.preferred_batch_size.extend(self.preferred_batch_sizes)
        if self.max_queue_delay_us is not None:
            cfg.dynamic_batching.max_queue_delay_microseconds = int(self.max_queue_delay_us)

    def to_dict(self) -> dict:
        return {"enabled": self.enabled, "preferred_batch_sizes": list(self.preferred_batch_sizes),
                "max_queue_delay_us": self.max_queue_delay_us}

    @classmethod
    def from_dict(cls, data: Mapping) -> "Batching":
        return cls(bool(data["enabled"]), tuple(data.get("preferred_batch_sizes", ())), data.get("max_queue_delay_us"))


def variant_config(
    base: ModelConfig,
    allocation: Allocation,
    core_start: int,
    *,
    batching: Batching | None = None,
    parameters: Mapping[str, str] | None = None,
    max_batch_size: int | None = None,
) -> ModelConfig:
    """The base config with this allocation's instance count and core range end, and optionally
    another dynamic-batching block, max_batch_size and model parameters. Checked like any config."""
    if len(base.instance_group) > 1:
        raise SweepError(f"model {base.name!r} has {len(base.instance_group)} instance groups; "
                         "the sweep sets the count of a single group")
    cfg = ModelConfig()
    cfg.CopyFrom(base)
    group = cfg.instance_group[0] if cfg.instance_group else cfg.instance_group.add(kind="KIND_MODEL")
    group.count = allocation.instances
    cfg.parameters["NEURON_CORE_START_INDEX"].string_value = str(core_start)
    cfg.parameters["NEURON_CORE_END_INDEX"].string_value = str(core_start + allocation.cores - 1)
    if max_batch_size is not None:
        cfg.max_batch_size = int(max_batch_size)
    if batching is not None:
        batching.apply(cfg)
    for key, value in (parameters or {}).items():
        cfg.parameters[key].string_value = str(value)
    try:
        return check_config(cfg)
    except ValueError as err:
        raise SweepError(f"variant {allocation.label}: {err}") from None


@dataclass(frozen=True)
class Variant:
    """One model configuration of the sweep: loaded once, then measured at every batch size and
    concurrency."""

    allocation: Allocation
    core_start: int
    batching: Batching | None
    parameters: tuple[tuple[str, str], ...]
    config: ModelConfig = field(compare=False, repr=False)

    @property
    def core_end(self) -> int:
        return self.core_start + self.allocation.cores - 1

    @property
    def label(self) -> str:
        parts = [self.allocation.label]
        if self.batching is not None:
            parts.append(self.batching.label)
        parts += [f"{k}={v}" for k, v in self.parameters]
        return " ".join(parts)

    def columns(self) -> dict:
        """The variant's identity as table columns."""
        return {
            "variant": self.label,
            "allocation": self.allocation.label,
            "instances": self.allocation.instances,
            "cores_per_instance": self.allocation.cores_per_instance,
            "core_start": self.core_start,
            "core_end": self.core_end,
            "batching": self.batching.label if self.batching is not None else "as configured",
            "parameters": " ".join(f"{k}={v}" for k, v in self.parameters),
        }

    def config_json(self) -> dict:
        return json.loads(to_json(self.config))


def _core_range(value: Any) -> tuple[int, int] | None:
    if value is None:
        return None
    if isinstance(value, str):
        start, end = parse_core_range(value)
    else:
        start, end = (int(v) for v in value)
    try:
        split_cores(start, end)
    except CoreRangeError as err:
        raise SweepError(str(err)) from None
    return start, end


@dataclass(frozen=True)
class SweepPlan:
    """The grid: batch sizes x allocations x concurrency, optionally x dynamic-batching settings
    x free-form model parameter values (``{"NUM_THREADS_PER_CORE": ["1", "2"]}``).

    ``batch_sizes`` are the batch of each request the load generator sends. ``core_range`` (``"0:1"``)
    defaults to the base config's NEURON_CORE_START_INDEX..END_INDEX. ``max_batch_size`` defaults
    to the base config's, raised to the largest batch size when that is smaller.
    """

    batch_sizes: tuple[int, ...]
    allocations: tuple[Allocation, ...]
    concurrency: tuple[int, ...] = (1,)
    core_range: tuple[int, int] | None = None
    batching: tuple[Batching | None, ...] = (None,)
    parameters: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    max_batch_size: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "batch_sizes", _positive_ints(self.batch_sizes, "batch sizes"))
        object.__setattr__(self, "concurrency", _positive_ints(self.concurrency, "concurrency"))
        object.__setattr__(self, "allocations", parse_allocations(self.allocations))
        object.__setattr__(self, "core_range", _core_range(self.core_range))
        batching = tuple(self.batching) or (None,)
        if len(set(batching)) != len(batching):
            raise SweepError("a dynamic-batching setting is listed twice")
        object.__setattr__(self, "batching", batching)
        grid: dict[str, tuple[str, ...]] = {}
        for key, values in dict(self.parameters).items():
            if key in _CORE_PARAMETERS:
                raise SweepError(f"parameter {key} is set by the allocations; use core_range and allocations instead")
            values = (values,) if isinstance(values, (str, int, float)) else tuple(values)
            values = tuple(str(v) for v in values)
            if not values:
                raise SweepError(f"parameter {key}: give at least one value")
            if len(set(values)) != len(values):
                raise SweepError(f"parameter {key}: a value is listed twice in {list(values)}")
            grid[str(key)] = values
        object.__setattr__(self, "parameters", grid)
        if self.max_batch_size is not None and int(self.max_batch_size) < max(self.batch_sizes):
            raise SweepError(f"max_batch_size {self.max_batch_size} is smaller than batch size {max(self.batch_sizes)}")

    @property
    def size(self) -> int:
        """Number of points (variants x batch sizes x concurrency)."""
        variants = len(self.allocations) * len(self.batching)
        for values in self.parameters.values():
            variants *= len(values)
        return variants * len(self.batch_sizes) * len(self.concurrency)

    def resolve_core_range(self, base: ModelConfig) -> tuple[int, int]:
        if self.core_range is not None:
            return self.core_range
        params = parameters_of(base)
        try:
            return _core_range((params["NEURON_CORE_START_INDEX"], params["NEURON_CORE_END_INDEX"]))
        except KeyError:
            raise SweepError(f"model {base.name!r} has no NEURON_CORE_START_INDEX/END_INDEX parameters; "
                             "give the sweep a core range such as 0:1") from None
        except ValueError as err:
            raise SweepError(f"model {base.name!r}: core range parameters: {err}") from None

    def variants(self, base: ModelConfig, *, available_cores: int | None = None) -> list[Variant]:
        """Every variant's config, or one SweepError naming every allocation that does not fit.

        ``available_cores`` (CPU targets: the cores this machine has) also bounds the range.
        """
        start, end = self.resolve_core_range(base)
        total = end - start + 1
        problems = [
            f"{a.label} needs {a.cores} core(s) but core range {start}:{end} has {total}"
            for a in self.allocations if a.cores > total
        ]
        if available_cores is not None and end >= available_cores:
            problems.append(f"core range {start}:{end} reaches core {end} but this machine has cores 0..{available_cores - 1}")
        if base.max_batch_size == 0 and self.max_batch_size is None and max(self.batch_sizes) > 1:
            problems.append(f"model {base.name!r} has max_batch_size 0 (requests carry no batch dim), "
                            f"so batch sizes {list(self.batch_sizes)} cannot be sent; use batch size 1")
        for batching in self.batching:
            if batching is not None and batching.enabled and base.max_batch_size == 0 and self.max_batch_size is None:
                problems.append(f"{batching.label}: dynamic batching needs max_batch_size > 0 (model {base.name!r} has 0)")
        if problems:
            raise SweepError("cannot run this sweep: " + "; ".join(problems))
        max_batch = self.max_batch_size
        if max_batch is None and 0 < base.max_batch_size < max(self.batch_sizes):
            max_batch = max(self.batch_sizes)
        keys = list(self.parameters)
        out = []
        for allocation, batching, values in itertools.product(
            self.allocations, self.batching, itertools.product(*self.parameters.values())
        ):
            params = tuple(zip(keys, values))
            cfg = variant_config(base, allocation, start, batching=batching, parameters=dict(params),
                                 max_batch_size=max_batch)
            out.append(Variant(allocation, start, batching, params, cfg))
        return out

    def to_dict(self) -> dict:
        return {
            "batch_sizes": list(self.batch_sizes),
            "allocations": [a.label for a in self.allocations],
            "concurrency": list(self.concurrency),
            "core_range": list(self.core_range) if self.core_range else None,
            "batching": [b.to_dict() if b is not None else None for b in self.batching],
            "parameters": {k: list(v) for k, v in self.parameters.items()},
            "max_batch_size": self.max_batch_size,
        }

    @classmethod
    def from_dict(cls, data: Mapping) -> "SweepPlan":
        return cls(
            batch_sizes=tuple(data["batch_sizes"]),
            allocations=tuple(data["allocations"]),
            concurrency=tuple(data["concurrency"]),
            core_range=tuple(data["core_range"]) if data.get("core_range") else None,
            batching=tuple(Batching.from_dict(b) if b is not None else None for b in data.get("batching", [None])),
            parameters=data.get("parameters", {}),
            max_batch_size=data.get("max_batch_size"),
        )
