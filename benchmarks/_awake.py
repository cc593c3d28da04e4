"""The CPUs held out of halt: Linux's PM QoS CPU latency request (``/dev/cpu_dma_latency``).

While a process keeps that file open with a 32-bit value written to it, cpuidle picks no idle
state whose exit latency exceeds the value (the kernel's Documentation/power/pm_qos_interface.rst;
tuned's latency-performance profile does the same through ``force_latency``). At 0 only the POLL
state qualifies: an idle vCPU spins in the guest instead of halting into the hypervisor, so a
thread woken by a request or a response starts at once. Writing needs root.

Why the benchmarks want it: on this VM (Firecracker, cpuidle driver haltpoll with
``guest_halt_poll_ns=0``) every idle moment is a halt, and a served request at concurrency 1 goes
idle several times (the client waiting, Triton's threads, the stub waiting for the next request);
holding the request shows how much of the served path is the machine waking up.
"""

from __future__ import annotations

import os
import struct
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

DEVICE = Path("/dev/cpu_dma_latency")
CPUS = Path("/sys/devices/system/cpu")


def unavailable(device: Path = DEVICE) -> str | None:
    """Why the request cannot be held here, or None when it can."""
    try:
        os.close(os.open(device, os.O_WRONLY))
    except OSError as err:
        return f"cannot hold the PM QoS request: {device}: {err.strerror}"
    return None


@contextmanager
def held(device: Path = DEVICE, latency_us: int = 0) -> Iterator[None]:
    """Inside: no CPU enters an idle state slower to leave than ``latency_us`` (0: poll only)."""
    fd = os.open(device, os.O_WRONLY)
    try:
        os.write(fd, struct.pack("i", latency_us))
        yield
    finally:
        os.close(fd)  # closing the file drops the request


def idle_entries(cpus: Path = CPUS) -> dict[str, int]:
    """Entries into each cpuidle state, summed over the CPUs (state name -> count): the evidence
    that a hold took effect (POLL instead of halt)."""
    counts: dict[str, int] = {}
    for state in sorted(cpus.glob("cpu[0-9]*/cpuidle/state[0-9]*")):
        try:
            name = (state / "name").read_text().strip()
            counts[name] = counts.get(name, 0) + int((state / "usage").read_text())
        except (OSError, ValueError):
            continue
    return counts
