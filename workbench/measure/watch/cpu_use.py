"""How busy each CPU of the range was while a point was measured, from the kernel's per-CPU time
counters in /proc/stat (proc(5): user nice system idle iowait irq softirq steal ..., in clock
ticks since boot). Busy is everything but idle and iowait, as top and mpstat count it.

Recorded with each point (the row's ``cpu_busy``) so a point measured while another process took
the model's cores shows it. On a Neuron target the range names NeuronCores, not CPUs:
``neuron_use`` reads those from neuron-monitor into the row's ``neuron_busy`` instead.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

__all__ = ["cpu_times", "CpuUse", "format_busy"]

_STAT = Path("/proc/stat")


def cpu_times(text: str | None = None) -> dict[int, tuple[int, int]]:
    """``{cpu: (busy ticks, total ticks)}`` from /proc/stat (or its ``text``); {} where there is none."""
    if text is None:
        try:
            text = _STAT.read_text()
        except OSError:
            return {}
    out = {}
    for line in text.splitlines():
        name, _, rest = line.partition(" ")
        if not name.startswith("cpu") or name == "cpu":
            continue
        ticks = [int(v) for v in rest.split()]
        idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)
        total = sum(ticks[:8])  # guest times are already inside user and nice
        out[int(name[3:])] = (total - idle, total)
    return out


class CpuUse:
    """Busy share of ``cpus`` between ``start()`` and ``stop()``."""

    def __init__(self, cpus: Iterable[int]) -> None:
        self.cpus = tuple(cpus)
        self._before: dict[int, tuple[int, int]] = {}

    def start(self) -> CpuUse:
        self._before = cpu_times()
        return self

    def stop(self) -> dict[int, float]:
        """``{cpu: percent busy}`` for the CPUs of the range this machine has."""
        after = cpu_times()
        out = {}
        for cpu in self.cpus:
            if cpu in after and cpu in self._before:
                busy = after[cpu][0] - self._before[cpu][0]
                total = after[cpu][1] - self._before[cpu][1]
                if total > 0:
                    out[cpu] = 100.0 * busy / total
        return out


def format_busy(busy: dict[int, float]) -> str | None:
    """``"0:93.1 1:87.0"`` (CPU: percent busy), the row's column; None when nothing was read."""
    return " ".join(f"{cpu}:{share:.1f}" for cpu, share in sorted(busy.items())) or None
