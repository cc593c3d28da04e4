"""The sweep's plan: the grid of batch sizes x core allocations x concurrency (x dynamic-batching
settings x model parameters), checked against the model and its core range before anything runs,
and expanded into variants (one model config each) and points (a variant at one load).

Model Analyzer restarts the server for every configuration and learns about a core split that does
not fit only when the model fails to load. Here the whole grid is checked first, so a sweep that
cannot run says so, naming every bad item, before a server or a file is touched.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from workbench.coremap import Allocation, CoreRange, CoreRangeError, describe_ranges, parse_allocations
from workbench.generate.backends import backend_of_config
from workbench.generate.config import ModelConfig, check_config, parameters_of, to_json
from workbench.measure.engine.measure_settings import MeasureError
from workbench.system import usable_cpu_ids

__all__ = ["SweepError", "Batching", "Variant", "Point", "SweepPlan", "variant_config", "plan_variants", "parse_counts"]

# Parameters the sweep itself sets for every variant; a free-form grid may not fight over them.
_VARIANT_PARAMETER = "WORKBENCH_SWEEP_VARIANT"
_CORE_PARAMETERS = ("NEURON_CORE_START_INDEX", "NEURON_CORE_END_INDEX", _VARIANT_PARAMETER)


class SweepError(MeasureError):
    """A sweep that cannot run as asked; the message names the bad item."""


def _positive_ints(values: Any, what: str) -> tuple[int, ...]:
    if isinstance(values, (int, str)):
        values = [values]
    out: list[int] = []
    for value in values:
        for part in str(value).split(",") if isinstance(value, str) else [value]:
            if isinstance(part, str) and not part.strip():
                raise SweepError(f"{what}: {value!r} has an empty item; separate the values by single commas")
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


def parse_counts(values: Any, what: str) -> tuple[int, ...]:
    """``"1,4,8"`` (or a list) as whole numbers >= 1, each once: the sweep's batch sizes and
    concurrency levels, wherever they are typed. SweepError names ``what`` and the bad item."""
    return _positive_ints(values, what)


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
        return {
            "enabled": self.enabled,
            "preferred_batch_sizes": list(self.preferred_batch_sizes),
            "max_queue_delay_us": self.max_queue_delay_us,
        }

    @classmethod
    def from_dict(cls, data: Mapping) -> Batching:
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
        raise SweepError(
            f"model {base.name!r} has {len(base.instance_group)} instance groups; "
            "the sweep sets the count of a single group"
        )
    cfg = ModelConfig()
    cfg.CopyFrom(base)
    group = cfg.instance_group[0] if cfg.instance_group else cfg.instance_group.add(kind="KIND_MODEL")
    group.count = allocation.instances
    if backend_of_config(cfg).pins_cores:  # e.g. Triton's PyTorch backend pins no cores, reads no such keys
        for key, value in CoreRange(core_start, core_start + allocation.cores - 1).parameters().items():
            cfg.parameters[key].string_value = value
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


@dataclass(frozen=True)
class Point:
    """One point of the grid: a variant measured at one batch size and concurrency."""

    variant: Variant
    batch_size: int
    concurrency: int

    @property
    def key(self) -> tuple[str, int, int]:
        """What identifies the point in a run (``results.KEY_COLUMNS``): finished once, never measured again."""
        return (self.variant.label, self.batch_size, self.concurrency)

    @property
    def label(self) -> str:
        return f"{self.variant.label} batch {self.batch_size} concurrency {self.concurrency}"

    def columns(self) -> dict:
        """The point's identity as table columns."""
        return {**self.variant.columns(), "batch_size": self.batch_size, "concurrency": self.concurrency}


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
    core_range: CoreRange | None = None
    batching: tuple[Batching | None, ...] = (None,)
    parameters: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    max_batch_size: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "batch_sizes", _positive_ints(self.batch_sizes, "batch sizes"))
        object.__setattr__(self, "concurrency", _positive_ints(self.concurrency, "concurrency"))
        try:
            object.__setattr__(self, "allocations", parse_allocations(self.allocations))
            if self.core_range is not None:
                object.__setattr__(self, "core_range", CoreRange.parse(self.core_range))
        except CoreRangeError as err:
            raise SweepError(str(err)) from None
        batching = tuple(self.batching) or (None,)
        if len(set(batching)) != len(batching):
            raise SweepError("a dynamic-batching setting is listed twice")
        object.__setattr__(self, "batching", batching)
        grid: dict[str, tuple[str, ...]] = {}
        for key, values in dict(self.parameters).items():
            if key in _CORE_PARAMETERS:
                raise SweepError(f"parameter {key} is set by the sweep for each variant (core_range and allocations)")
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

    def resolve_core_range(self, base: ModelConfig) -> CoreRange:
        if self.core_range is not None:
            return self.core_range
        try:
            core_range = CoreRange.from_parameters(parameters_of(base))
        except CoreRangeError as err:
            raise SweepError(f"model {base.name!r}: {err}") from None
        if core_range is None and not backend_of_config(base).pins_cores:
            # a backend that pins no cores (Triton's PyTorch backend): allocations count instances on this machine's CPUs
            return CoreRange(0, max(len(usable_cpu_ids()), 1) - 1)
        if core_range is None:
            raise SweepError(
                f"model {base.name!r} has no NEURON_CORE_START_INDEX/END_INDEX parameters; "
                "give the sweep a core range such as 0:1"
            )
        return core_range

    def variants(self, base: ModelConfig, *, available_cores: Collection[int] | None = None) -> list[Variant]:
        """Every variant's config, or one SweepError naming every allocation that does not fit.

        ``available_cores`` (CPU targets: the CPUs this process may use) also bounds the range.
        """
        core_range = self.resolve_core_range(base)
        start = core_range.start
        problems = [
            f"{a.label} needs {a.cores} core(s) but core range {core_range} has {core_range.size}"
            for a in self.allocations
            if a.cores > core_range.size
        ]
        missing = core_range.missing_from(available_cores) if available_cores is not None else ()
        if missing and available_cores is not None:
            problems.append(
                f"core range {core_range} includes CPU(s) {describe_ranges(missing)} that this "
                "machine does not let "
                f"the server use (usable: {sorted(available_cores)})"
            )
        if base.max_batch_size == 0:
            # Its dims already include the batch dim: Triton would add a second one.
            unbatched = f"model {base.name!r} has max_batch_size 0 (its dims include the batch dim)"
            if self.max_batch_size is not None:
                problems.append(
                    f"{unbatched}: max_batch_size {self.max_batch_size} cannot be set by the sweep; "
                    "regenerate the model with max_batch_size > 0"
                )
            if max(self.batch_sizes) > 1:
                problems.append(
                    f"{unbatched}, so batch sizes {list(self.batch_sizes)} cannot be sent; use batch size 1"
                )
            for batching in self.batching:
                if batching is not None and batching.enabled:
                    problems.append(f"{batching.label}: dynamic batching needs max_batch_size > 0; {unbatched}")
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
            cfg = variant_config(
                base, allocation, start, batching=batching, parameters=dict(params), max_batch_size=max_batch
            )
            variant = Variant(allocation, start, batching, params, cfg)
            # A change of instance count alone is applied by Triton in place, and the Python backend
            # then hands the new instances the OLD config (stale count and core range). A parameter
            # naming the variant makes every switch a full reload, so model.py sees this config.
            cfg.parameters[_VARIANT_PARAMETER].string_value = variant.label
            out.append(variant)
        return out

    def points(self, variant: Variant) -> list[Point]:
        """The variant's points, batch size by batch size, each at every concurrency."""
        return [Point(variant, b, c) for b in self.batch_sizes for c in self.concurrency]

    def to_dict(self) -> dict:
        return {
            "batch_sizes": list(self.batch_sizes),
            "allocations": [a.label for a in self.allocations],
            "concurrency": list(self.concurrency),
            "core_range": self.core_range.to_list() if self.core_range else None,
            "batching": [b.to_dict() if b is not None else None for b in self.batching],
            "parameters": {k: list(v) for k, v in self.parameters.items()},
            "max_batch_size": self.max_batch_size,
        }

    @classmethod
    def from_dict(cls, data: Mapping) -> SweepPlan:
        return cls(
            batch_sizes=tuple(data["batch_sizes"]),
            allocations=tuple(data["allocations"]),
            concurrency=tuple(data["concurrency"]),
            core_range=data.get("core_range") or None,
            batching=tuple(Batching.from_dict(b) if b is not None else None for b in data.get("batching", [None])),
            parameters=data.get("parameters", {}),
            max_batch_size=data.get("max_batch_size"),
        )


def plan_variants(plan: SweepPlan, base: ModelConfig) -> list[Variant]:
    """``plan.variants`` bounded by this machine's cores when the model runs on the CPU (the server
    is local), so a range model.py could not pin to is refused before anything starts."""
    cpu_target = parameters_of(base).get("WORKBENCH_TARGET") == "cpu"
    return plan.variants(base, available_cores=usable_cpu_ids() if cpu_target else None)
