"""The Neuron devices of this machine, as the driver and neuron-ls show them: device nodes, whether
the driver is loaded, neuron-ls's per-device records and the global NeuronCore ids of each device.
Read by `system.detect`, doctor and the sweep's core check; nothing here imports the SDK."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

__all__ = ["neuron_devices", "driver_loaded", "has_neuron_device", "neuron_ls", "neuroncore_ids"]


def neuron_devices(dev_dir: str | os.PathLike = "/dev") -> list[str]:
    """``/dev/neuron0``, ``/dev/neuron1``... in device order."""
    found = [p for p in Path(dev_dir).glob("neuron*") if re.fullmatch(r"neuron\d+", p.name)]
    return [str(p) for p in sorted(found, key=lambda p: int(p.name[6:]))]


def driver_loaded(proc_devices: str | os.PathLike = "/proc/devices") -> bool:
    """Whether the Neuron driver is loaded (``neuron`` in /proc/devices)."""
    try:
        text = Path(proc_devices).read_text()
    except OSError:
        return False
    return any(line.split()[1:2] == ["neuron"] for line in text.splitlines())


def has_neuron_device(dev_dir: str | os.PathLike = "/dev", proc_devices: str | os.PathLike = "/proc/devices") -> bool:
    """True when the Neuron driver is loaded (``neuron`` in /proc/devices) or a device node exists."""
    return driver_loaded(proc_devices) or bool(neuron_devices(dev_dir))


def neuron_ls(executable: str | None = None, timeout: float = 30.0) -> list[dict] | None:
    """Per-device records from ``neuron-ls --json-output`` (None when the tool is absent or fails)."""
    executable = executable or shutil.which("neuron-ls")
    if not executable:
        return None
    try:
        done = subprocess.run([executable, "--json-output"], capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    try:
        data = json.loads(done.stdout)
    except json.JSONDecodeError:
        return None
    return data if isinstance(data, list) else None


def neuroncore_ids(records: Iterable[Mapping[str, Any]]) -> list[list[int]]:
    """The global NeuronCore ids of each neuron-ls device record: its ``neuroncore_ids`` when the tool
    gives them (tools from 2.25 on), else the running sum of ``nc_count`` (the only core key of the
    v2.24.0 JSON example; SDK tools/neuron-sys-tools/neuron-ls.rst at tags v2.24.0 vs v2.25.0). Cores
    are numbered across devices in device order, which is what the sum gives."""
    out, first = [], 0
    for record in records:
        count = int(record.get("nc_count") or 0)
        given = record.get("neuroncore_ids")
        ids = [int(i) for i in given] if given else list(range(first, first + count))
        out.append(ids)
        first = (max(ids) + 1) if ids else first + count
    return out
