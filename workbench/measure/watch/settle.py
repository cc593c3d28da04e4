"""Waiting for a local server to go quiet before a point is measured.

A variant load returns once the new instances are ready, but the server is not done: the previous
variant's Python-backend stubs (each with torch imported) sit idle for about a second, then spend
1-5 s finalising at up to a CPU's worth before they exit (add_sub here, at load 2-3).
Measured then, a point's first windows share the cores with that work, and the same point
measured twice differs by tens of percent. So, after a load and before the first response is
timed, the sweep waits until the model's stubs from before the load (``model_processes``: a
Python-backend stub's command line names the model's file, ``<repository>/<model>/<version>/model.py``)
have exited and the server's process group (tritonserver and the stubs that join its group) has
used less than ``idle_share`` of a CPU, with the same processes alive, for ``quiet_s`` in a row.

CPU times come from /proc/<pid>/stat (proc(5): utime and stime, in clock ticks; read by guard.group_stats).
Where the server is not a local process (a remote server), nothing can be read: nothing is waited for.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from workbench.server.guard import group_stats

__all__ = [
    "IDLE_SHARE",
    "QUIET_S",
    "SETTLE_TIMEOUT_S",
    "Quiet",
    "group_cpu",
    "busy_share",
    "model_processes",
    "replaced",
    "wait_quiet",
]

IDLE_SHARE = 0.05  # of one CPU, the whole group together: an idle tritonserver with stubs uses ~0
QUIET_S = 0.5  # that long in a row
SETTLE_TIMEOUT_S = 30.0  # then measure anyway, and say so
SAMPLE_S = 0.1
_PROC = Path("/proc")
_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 0.01


def group_cpu(pgid: int) -> dict[int, float]:
    """``{pid: CPU seconds so far}`` (utime + stime) of the live processes of group ``pgid``."""
    return {pid: (int(fields[11]) + int(fields[12])) * _TICK_S for pid, fields in group_stats(pgid).items()}


def model_processes(pgid: int | None, model: str) -> frozenset[int]:
    """The processes of group ``pgid`` (not its leader) whose command line names ``/<model>/``:
    the model's Python-backend stubs; empty without a local group."""
    if pgid is None:
        return frozenset()
    found = set()
    for pid in group_stats(pgid):
        try:
            argv = (_PROC / str(pid) / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if pid != pgid and any(f"/{model}/".encode() in arg for arg in argv):
            found.add(pid)
    return frozenset(found)


def replaced(before: frozenset[int], after: frozenset[int]) -> frozenset[int]:
    """The stubs a load replaced: ``before`` (the model's stubs before it) when it started new ones,
    none when every stub after it was there before. A load of the config already loaded keeps its
    instances (Triton 2.51 returns at once), and waiting for those stubs to exit would last until
    the wait's timeout: measured, 30 s at the start of a search whose first variant the run before
    it had left loaded."""
    return before if after - before else frozenset()


def busy_share(before: dict[int, float], after: dict[int, float], seconds: float) -> float:
    """CPUs' worth the group used between two ``group_cpu`` readings ``seconds`` apart (a process
    that started in between counts with all its time)."""
    if seconds <= 0:
        return 0.0
    used = sum(cpu - before.get(pid, 0.0) for pid, cpu in after.items())
    return max(0.0, used) / seconds


@dataclass(frozen=True)
class Quiet:
    """How the wait for a quiet server went: ``waited_s``, whether it went quiet (``settled``),
    the group's last busy share (CPUs), its process count, and the busiest share seen."""

    waited_s: float
    settled: bool
    busy: float
    peak: float
    processes: int
    left: int = 0  # processes of ``leaving`` that had not exited when the wait ended

    def to_dict(self) -> dict:
        return {k: round(v, 3) if isinstance(v, float) else v for k, v in asdict(self).items()}


def wait_quiet(
    pgid: int | None,
    *,
    leaving: frozenset[int] = frozenset(),
    idle_share: float = IDLE_SHARE,
    quiet_s: float = QUIET_S,
    timeout_s: float = SETTLE_TIMEOUT_S,
    sample_s: float = SAMPLE_S,
    cancel: threading.Event | None = None,
) -> Quiet | None:
    """Wait until the processes ``leaving`` (e.g. the previous variant's stubs) have exited and
    group ``pgid`` used less than ``idle_share`` of a CPU, with no process starting or exiting,
    for ``quiet_s`` in a row (at most ``timeout_s``); None when ``pgid`` is None or the group is
    not visible here (a remote server)."""
    if pgid is None:
        return None
    start = last_at = time.monotonic()
    last = group_cpu(pgid)
    if not last:
        return None
    quiet_since, busy, peak = start, 0.0, 0.0
    while True:
        if cancel is not None and cancel.is_set():
            break
        time.sleep(sample_s)
        now, reading = time.monotonic(), group_cpu(pgid)
        busy = busy_share(last, reading, now - last_at)
        peak = max(peak, busy)
        left = len(leaving & set(reading))
        if busy >= idle_share or set(reading) != set(last) or left:
            quiet_since = now
        last, last_at = reading, now
        if now - quiet_since >= quiet_s:
            return Quiet(now - start, True, busy, peak, len(reading))
        if now - start >= timeout_s:
            break
    return Quiet(time.monotonic() - start, False, busy, peak, len(last), len(leaving & set(last)))
