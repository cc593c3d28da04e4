"""Core ranges and allocations: the one value every step passes on, parsed here and nowhere else.

A core range (upstream's ``--neuron_core_range a:b``, inclusive) travels from the settings panel
through generation (``NEURON_CORE_START_INDEX``/``END_INDEX``), the sweep (an allocation packed
from its start), the docker preview (the ``/dev/neuronN`` devices holding it) and model.py (the
same split at load time). Upstream computed the split only inside model.py, so users learnt about
idle cores and wrong ranges when Triton loaded the model; here the same arithmetic runs before
anything is written. NeuronCores on Neuron targets, CPU cores on the CPU.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from workbench.limits import is_whole
from workbench.refusals import WorkbenchError

__all__ = [
    "CoreRangeError",
    "CoreRange",
    "Allocation",
    "CoreMap",
    "START_PARAMETER",
    "END_PARAMETER",
    "parse_allocations",
    "split_cores",
    "CORE_INDEX_LIMIT",
    "describe_ranges",
]

# The config.pbtxt parameters upstream's model.py reads the range from.
START_PARAMETER = "NEURON_CORE_START_INDEX"
END_PARAMETER = "NEURON_CORE_END_INDEX"

# No machine has a core at or past this index: Linux numbers at most NR_CPUS = 8192 CPUs (its
# Kconfig's largest, x86 MAXSMP; arm64 stops at 4096) and the largest Neuron instance has 128
# NeuronCores (`workbench.system`). Ranges past it are refused when parsed, before anything sizes
# a list, a cpu set or a device list by them.
CORE_INDEX_LIMIT = 8192


class CoreRangeError(WorkbenchError, ValueError):
    """A core range, allocation or instance count that cannot be served; the message says which."""


_is_whole = is_whole  # an integer (numpy's too), not a bool and not a float that happens to be integral


def _whole(value: Any, what: str, low: int) -> int:
    if not _is_whole(value):
        raise CoreRangeError(f"{what} must be a whole number, got {value!r}")
    if value < low:
        raise CoreRangeError(f"{what} must be >= {low}, got {value}")
    return int(value)


@dataclass(frozen=True, order=True)
class CoreRange:
    """Cores ``start..end``, both included."""

    start: int
    end: int

    def __post_init__(self) -> None:
        if not (_is_whole(self.start) and _is_whole(self.end)):
            raise CoreRangeError(f"core range {self.start!r}:{self.end!r} must be whole numbers")
        object.__setattr__(self, "start", int(self.start))
        object.__setattr__(self, "end", int(self.end))
        if self.start < 0 or self.end < 0:
            raise CoreRangeError(f"core range {self.start}:{self.end} has a negative core index")
        if self.end < self.start:
            raise CoreRangeError(f"core range {self.start}:{self.end} is reversed: the end must be >= the start")
        if self.end >= CORE_INDEX_LIMIT:
            raise CoreRangeError(
                f"core range {self.start}:{self.end}: core {self.end} exists on no machine "
                f"(Linux numbers at most {CORE_INDEX_LIMIT} CPUs, 0:{CORE_INDEX_LIMIT - 1})"
            )

    @classmethod
    def parse(cls, value: str | CoreRange | tuple[int, int] | list[int]) -> CoreRange:
        """The one parser: upstream ``"a:b"``, a CoreRange, or a ``(start, end)`` pair."""
        if isinstance(value, CoreRange):
            return value
        if isinstance(value, (tuple, list)):
            if len(value) != 2:
                raise CoreRangeError(f"core range {value!r} must be a (start, end) pair")
            return cls(*value)
        text = str(value).strip()
        match = re.fullmatch(r"\s*(-?\d+)\s*:\s*(-?\d+)\s*", text)
        if match is None:
            raise CoreRangeError(f"core range {text!r} is malformed; write a:b, e.g. 0:3")
        return cls(int(match[1]), int(match[2]))

    @classmethod
    def parse_optional(cls, value: str | CoreRange | None) -> CoreRange | None:
        """`parse`, with a blank value (or None) meaning "none given": the config's own range is used."""
        if value is None or (isinstance(value, str) and not value.strip()):
            return None
        return cls.parse(value)

    @classmethod
    def from_parameters(cls, params: Mapping[str, str]) -> CoreRange | None:
        """The range a config's parameters declare (END defaults to START, as model.py reads it);
        None when neither is there."""
        start, end = params.get(START_PARAMETER), params.get(END_PARAMETER)
        if start is None and end is None:
            return None
        if start is None:
            raise CoreRangeError(f"parameter {START_PARAMETER} is missing; the core range needs both ends")
        values = []
        for key, text in ((START_PARAMETER, start), (END_PARAMETER, start if end is None else end)):
            if not re.fullmatch(r"\s*-?\d+\s*", str(text)):
                raise CoreRangeError(f"parameter {key} = {text!r} is not an integer")
            values.append(int(text))
        try:
            return cls(*values)
        except CoreRangeError as err:
            raise CoreRangeError(f"parameters {START_PARAMETER}/{END_PARAMETER}: {err}") from None

    def __str__(self) -> str:
        return f"{self.start}:{self.end}"

    @property
    def size(self) -> int:
        return self.end - self.start + 1

    @property
    def cores(self) -> range:
        return range(self.start, self.end + 1)

    def parameters(self) -> dict[str, str]:
        return {START_PARAMETER: str(self.start), END_PARAMETER: str(self.end)}

    def to_list(self) -> list[int]:
        return [self.start, self.end]

    def missing_from(self, available: Collection[int]) -> tuple[CoreRange, ...]:
        """The runs of cores of this range that are not in ``available`` (the CPUs this process may
        use, the NeuronCores an instance has), found by walking ``available`` only: never the range."""
        gaps, next_core = [], self.start
        for core in sorted(c for c in set(available) if self.start <= c <= self.end):
            if core > next_core:
                gaps.append(CoreRange(next_core, core - 1))
            next_core = core + 1
        if next_core <= self.end:
            gaps.append(CoreRange(next_core, self.end))
        return tuple(gaps)

    def blocks(self, cores_per_instance: int) -> CoreMap:
        """As many instances of ``cores_per_instance`` cores each as fit, from the start; leftovers stay
        idle (an LLM's instances: a tensor-parallel group each, 0:9 in blocks of 4 is 0-3 and 4-7)."""
        cores_per_instance = _whole(cores_per_instance, "cores per instance", 1)
        if cores_per_instance > self.size:
            raise CoreRangeError(
                f"cannot give an instance {cores_per_instance} cores from {self.size} core(s) in {self}"
            )
        return CoreMap(self, Allocation(self.size // cores_per_instance, cores_per_instance))

    def split(self, instances: int = 1, threads_per_core: int = 1) -> CoreMap:
        """Split evenly over ``instances`` (upstream's rule); leftovers stay idle."""
        instances = _whole(instances, "instance count", 1)
        threads_per_core = _whole(threads_per_core, "threads per core", 1)
        if instances > self.size:
            raise CoreRangeError(f"cannot give {instances} instances a core each from {self.size} core(s) in {self}")
        return CoreMap(self, Allocation(instances, self.size // instances), threads_per_core)

    def pack(self, allocation: Allocation, threads_per_core: int = 1) -> CoreMap:
        """``allocation`` placed from the start of this range (a sweep variant): its map covers
        exactly the cores it uses."""
        if allocation.cores > self.size:
            raise CoreRangeError(
                f"{allocation.label} needs {allocation.cores} core(s) but core range {self} has {self.size}"
            )
        used = CoreRange(self.start, self.start + allocation.cores - 1)
        return used.split(allocation.instances, threads_per_core)


@dataclass(frozen=True)
class Allocation:
    """``instances`` model instances of ``cores_per_instance`` cores each (``2x1``)."""

    instances: int
    cores_per_instance: int

    def __post_init__(self) -> None:
        for name in ("instances", "cores_per_instance"):
            value = getattr(self, name)
            if not _is_whole(value) or value < 1:
                raise CoreRangeError(f"allocation {name} must be a whole number >= 1, got {value!r}")

    @classmethod
    def parse(cls, value: str | Allocation) -> Allocation:
        """``"2x1"``: 2 instances of 1 core each."""
        if isinstance(value, Allocation):
            return value
        match = re.fullmatch(r"\s*(-?\d+)\s*x\s*(-?\d+)\s*", str(value).lower())
        if match is None:
            raise CoreRangeError(f"allocation {value!r} is malformed; write INSTANCESxCORES, e.g. 2x1")
        try:
            return cls(int(match[1]), int(match[2]))
        except CoreRangeError as err:
            raise CoreRangeError(f"allocation {value!r}: {err}") from None

    @property
    def label(self) -> str:
        return f"{self.instances}x{self.cores_per_instance}"

    @property
    def cores(self) -> int:
        return self.instances * self.cores_per_instance

    def __str__(self) -> str:
        return self.label


def parse_allocations(value: str | Iterable[str | Allocation]) -> tuple[Allocation, ...]:
    """``"1x1,2x1,1x2"`` or a list of such items; each once, at least one."""
    items = [p for p in value.split(",") if p.strip()] if isinstance(value, str) else list(value)
    allocations = tuple(Allocation.parse(item) for item in items)
    if not allocations:
        raise CoreRangeError("allocations: give at least one, e.g. 1x1,2x1")
    seen: set[Allocation] = set()
    for allocation in allocations:
        if allocation in seen:
            raise CoreRangeError(f"allocation {allocation.label} is listed twice")
        seen.add(allocation)
    return allocations


@dataclass(frozen=True)
class CoreMap:
    """A core range split over instances: which cores each instance owns, and which stay idle."""

    core_range: CoreRange
    allocation: Allocation
    threads_per_core: int = 1

    @property
    def start(self) -> int:
        return self.core_range.start

    @property
    def end(self) -> int:
        return self.core_range.end

    @property
    def instances(self) -> int:
        return self.allocation.instances

    @property
    def cores_per_instance(self) -> int:
        return self.allocation.cores_per_instance

    @property
    def total(self) -> int:
        return self.core_range.size

    def cores(self, instance: int) -> range:
        """Cores that instance ``instance`` (0-based) owns."""
        if not 0 <= instance < self.instances:
            raise IndexError(f"instance {instance} not in 0..{self.instances - 1}")
        first = self.start + instance * self.cores_per_instance
        return range(first, first + self.cores_per_instance)

    @property
    def idle(self) -> range:
        """Cores inside the range that no instance uses (uneven split)."""
        return range(self.start + self.allocation.cores, self.end + 1)

    def visible_cores(self, instance: int) -> str:
        """``NEURON_RT_VISIBLE_CORES`` value for an instance, e.g. ``"4-7"`` (``"2"`` for one core)."""
        cores = self.cores(instance)
        return str(cores[0]) if len(cores) == 1 else f"{cores[0]}-{cores[-1]}"

    def threads(self) -> int:
        """Threads per instance: its cores times threads per core (upstream used the whole range)."""
        return self.cores_per_instance * self.threads_per_core

    def rows(self) -> list[dict]:
        """One row per instance, for previews and tables."""
        return [
            {
                "instance": k,
                "cores": list(self.cores(k)),
                "visible_cores": self.visible_cores(k),
                "threads": self.threads(),
            }
            for k in range(self.instances)
        ]

    def describe(self) -> str:
        lines = [
            f"core range {self.core_range} ({self.total} cores), {self.instances} instance(s) "
            f"x {self.cores_per_instance} core(s), {self.threads_per_core} thread(s) per core"
        ]
        for row in self.rows():
            lines.append(f"  instance {row['instance']}: cores {row['visible_cores']}, {row['threads']} thread(s)")
        if len(self.idle):
            idle = self.idle
            lines.append(f"  idle: cores {idle[0]}-{idle[-1]} ({len(idle)}) are not used by any instance")
        return "\n".join(lines)


def describe_ranges(ranges: Iterable[CoreRange]) -> str:
    """``0-3, 6`` for runs of cores (one core's run shown as one number)."""
    return ", ".join(str(r.start) if r.size == 1 else f"{r.start}-{r.end}" for r in ranges)


def split_cores(start: int, end: int, instances: int = 1, threads_per_core: int = 1) -> CoreMap:
    """``CoreRange(start, end).split(...)``; the form model.py's self-contained copy is checked against."""
    return CoreRange(start, end).split(instances, threads_per_core)
