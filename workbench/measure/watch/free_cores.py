"""Before a sweep: are the cores of its range free? On a Neuron host ``neuron-ls --json-output``
lists the processes holding each device (``neuron_processes``); a device in the range held by a
process other than the sweep's own server (and its backend stubs) would fail every load with
"NeuronCore(s) not available", so the sweep refuses first, naming the process. On the CPU, the
range's CPUs are sampled from /proc/stat: busy ones (other work) are a warning, since the sweep
can run but its numbers will be noisy.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from workbench.coremap import CoreRange
from workbench.measure.grid.plan import SweepError
from workbench.server.protocol import Server
from workbench.system import neuron_ls, neuroncore_ids

__all__ = ["BUSY_SHARE", "neuron_holders", "cpu_busy", "check_core_ownership"]

BUSY_SHARE = 0.5  # a CPU busier than this with other work is named in the warning


def _ancestors(pid: int, proc: Path = Path("/proc")) -> set[int]:
    out: set[int] = set()
    while pid > 1 and pid not in out:
        out.add(pid)
        try:
            status = (proc / str(pid) / "status").read_text()
        except OSError:
            break
        pid = next((int(line.split()[1]) for line in status.splitlines() if line.startswith("PPid:")), 0)
    return out


def neuron_holders(core_range: CoreRange, records: Sequence[Mapping], own_pid: int | None = None) -> list[str]:
    """``"device 0 (cores [0, 1]): pid 4242 (python3 other_server.py)"`` for every device with a
    core in the range held by a process that is not ``own_pid`` or one of its children."""
    wanted = set(range(core_range.start, core_range.end + 1))
    out = []
    # neuroncore_ids exists from tools 2.25; older tools give nc_count only (system.neuroncore_ids)
    for index, (record, ids) in enumerate(zip(records, neuroncore_ids(list(records)))):
        if not wanted.intersection(ids):
            continue
        others = [
            p
            for p in record.get("neuron_processes") or []
            if own_pid is None or own_pid not in _ancestors(int(p.get("pid", 0)))
        ]
        if others:
            held = ", ".join(f"pid {p.get('pid')} ({p.get('command', '?')})" for p in others)
            out.append(f"device {record.get('neuron_device', index)} (cores {ids}): {held}")
    return out


def _cpu_times(stat: Path) -> dict[int, tuple[int, int]]:
    """cpu -> (busy, total) jiffies from /proc/stat."""
    out = {}
    for line in stat.read_text().splitlines():
        name, *fields = line.split()
        if name.startswith("cpu") and name != "cpu":
            values = [int(v) for v in fields]
            idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
            out[int(name[3:])] = (sum(values[:8]) - idle, sum(values[:8]))
    return out


def cpu_busy(cpus: Iterable[int], seconds: float = 0.5, stat: Path = Path("/proc/stat")) -> dict[int, float]:
    """Share of each CPU's time spent busy over ``seconds`` (all processes)."""
    before = _cpu_times(stat)
    time.sleep(seconds)
    after = _cpu_times(stat)
    out = {}
    for cpu in cpus:
        if cpu in before and cpu in after:
            total = after[cpu][1] - before[cpu][1]
            out[cpu] = (after[cpu][0] - before[cpu][0]) / total if total > 0 else 0.0
    return out


def check_core_ownership(
    core_range: CoreRange,
    *,
    own_pid: int | None = None,
    neuron: bool | None = None,
    records: Sequence[Mapping] | None = None,
    seconds: float = 0.5,
) -> list[str]:
    """Warnings for the sweep's record; SweepError when a NeuronCore of the range is held by
    another process. ``neuron`` None: a Neuron host is one where neuron-ls answers."""
    if records is None and neuron is not False:
        records = neuron_ls()
    if records is not None:
        held = neuron_holders(core_range, records, own_pid)
        if held:
            raise SweepError(
                f"NeuronCores {core_range} are held by another process: {'; '.join(held)}. "
                "Stop it or sweep another core range"
            )
        return []
    busy = {
        c: share
        for c, share in cpu_busy(range(core_range.start, core_range.end + 1), seconds).items()
        if share > BUSY_SHARE
    }
    if not busy:
        return []
    shares = ", ".join(f"CPU {c} {share:.0%}" for c, share in sorted(busy.items()))
    return [
        f"CPUs of the range are busy with other work before the sweep ({shares}; load average "
        f"{os.getloadavg()[0]:.1f}): its numbers will be noisy"
    ]


def check_server_cores(core_range: CoreRange, server: Server) -> list[str]:
    """``check_core_ownership`` for a server this process started (its pid known, on this machine);
    a remote server's cores are on its own host, so they are not checked here (said in the result)."""
    pid = server.pid
    if pid is None:
        return ["core ownership not checked: the server was not started here (its host's cores are not visible)"]
    return check_core_ownership(core_range, own_pid=int(pid))
