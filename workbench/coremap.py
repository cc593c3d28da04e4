"""Split a core range over model instances, the way the generated model.py does at load time.

Upstream gen_triton_model.py computes this only inside model.py, so users learn about idle cores
and wrong ranges when Triton loads the model. Here the same arithmetic runs before anything is
written, for the preview, the validation and the sweep.
"""

from __future__ import annotations

from dataclasses import dataclass


class CoreRangeError(ValueError):
    """A core range or instance count that cannot be served; the message says which."""


@dataclass(frozen=True)
class CoreMap:
    start: int
    end: int
    instances: int
    cores_per_instance: int
    threads_per_core: int = 1

    @property
    def total(self) -> int:
        return self.end - self.start + 1

    def cores(self, instance: int) -> range:
        """Cores that instance ``instance`` (0-based) owns."""
        if not 0 <= instance < self.instances:
            raise IndexError(f"instance {instance} not in 0..{self.instances - 1}")
        first = self.start + instance * self.cores_per_instance
        return range(first, first + self.cores_per_instance)

    @property
    def idle(self) -> range:
        """Cores inside the range that no instance uses (uneven split)."""
        return range(self.start + self.instances * self.cores_per_instance, self.end + 1)

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
            {"instance": k, "cores": list(self.cores(k)), "visible_cores": self.visible_cores(k),
             "threads": self.threads()}
            for k in range(self.instances)
        ]

    def describe(self) -> str:
        lines = [f"core range {self.start}:{self.end} ({self.total} cores), {self.instances} instance(s) "
                 f"x {self.cores_per_instance} core(s), {self.threads_per_core} thread(s) per core"]
        for row in self.rows():
            lines.append(f"  instance {row['instance']}: cores {row['visible_cores']}, {row['threads']} thread(s)")
        if len(self.idle):
            idle = self.idle
            lines.append(f"  idle: cores {idle[0]}-{idle[-1]} ({len(idle)}) are not used by any instance")
        return "\n".join(lines)


def parse_core_range(text: str) -> tuple[int, int]:
    """Parse upstream ``a:b`` (inclusive)."""
    parts = str(text).split(":")
    try:
        if len(parts) != 2:
            raise ValueError
        start, end = int(parts[0]), int(parts[1])
    except ValueError:
        raise CoreRangeError(f"core range {text!r} is malformed; write a:b, e.g. 0:3") from None
    return start, end


def split_cores(start: int, end: int, instances: int = 1, threads_per_core: int = 1) -> CoreMap:
    """Split cores ``start..end`` (inclusive) evenly over ``instances``; leftovers stay idle."""
    if start < 0 or end < 0:
        raise CoreRangeError(f"core range {start}:{end} has a negative core index")
    if end < start:
        raise CoreRangeError(f"core range {start}:{end} is reversed: the end must be >= the start")
    if instances < 1:
        raise CoreRangeError(f"instance count must be >= 1, got {instances}")
    if threads_per_core < 1:
        raise CoreRangeError(f"threads per core must be >= 1, got {threads_per_core}")
    total = end - start + 1
    if instances > total:
        raise CoreRangeError(
            f"cannot give {instances} instances a core each from {total} core(s) in {start}:{end}"
        )
    return CoreMap(start, end, instances, total // instances, threads_per_core)
