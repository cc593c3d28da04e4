"""How busy each NeuronCore of the range was while a point was measured, from neuron-monitor
(aws-neuron-tools): the Neuron twin of ``cpu_use``.

neuron-monitor streams one JSON report per period to stdout. Given a config that asks only for
the ``neuroncore_counters`` of every runtime with a 1 s period, each report's
``neuron_runtime_data[].report.neuroncore_counters.neuroncores_in_use`` maps a NeuronCore index
(a string) to its ``neuroncore_utilization``, in percent over that period (AWS Neuron SDK,
tools/neuron-sys-tools/neuron-monitor-user-guide.rst; /work/shared/reference/neuron_api.md).
A core is read as the sum over runtimes in one report (two processes cannot share a core, so at
most one reports it) and as the mean of the reports that arrived while the point ran.
Without neuron-monitor (a CPU host, a client without aws-neuronx-tools) nothing is read.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

__all__ = ["MONITOR_CONFIG", "NeuronUse", "core_utilization"]

# The config the SDK guide documents: a period, and per runtime (tag_filter ".*": every one) its metric groups.
MONITOR_CONFIG = {
    "period": "1s",
    "neuron_runtimes": [{"tag_filter": ".*", "metrics": [{"type": "neuroncore_counters"}]}],
}


def core_utilization(report: dict) -> dict[int, float]:
    """``{NeuronCore index: percent busy}`` of one neuron-monitor report (cores no runtime uses: absent)."""
    out: dict[int, float] = {}
    for runtime in report.get("neuron_runtime_data") or []:
        counters = ((runtime.get("report") or {}).get("neuroncore_counters") or {}).get("neuroncores_in_use") or {}
        for index, values in counters.items():
            share = (values or {}).get("neuroncore_utilization")
            if share is not None:
                out[int(index)] = out.get(int(index), 0.0) + float(share)
    return out


@dataclass
class _Monitor:
    """A running neuron-monitor: its process, the thread reading its reports, its config folder."""

    process: subprocess.Popen[str]
    reader: threading.Thread
    folder: tempfile.TemporaryDirectory[str]


class NeuronUse:
    """Mean busy share of ``cores`` (NeuronCore indices) between ``start()`` and ``stop()``, read by
    ``neuron-monitor`` (``executable``: default the one on PATH; absent: nothing is read)."""

    def __init__(self, cores: Iterable[int], executable: str | None = None) -> None:
        self.cores = tuple(cores)
        self.executable = executable or shutil.which("neuron-monitor")
        self._reports: list[dict[int, float]] = []
        self._monitor: _Monitor | None = None

    def start(self) -> NeuronUse:
        if self.executable is None:
            return self
        folder = tempfile.TemporaryDirectory(prefix="workbench-neuron-monitor-")
        config = Path(folder.name) / "monitor.json"
        config.write_text(json.dumps(MONITOR_CONFIG))
        process = subprocess.Popen(
            [self.executable, "-c", str(config)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
            text=True,
        )
        reader = threading.Thread(target=self._read, args=(process.stdout,), daemon=True)
        reader.start()
        self._monitor = _Monitor(process, reader, folder)
        return self

    def _read(self, stream) -> None:
        for line in stream:
            try:
                report = json.loads(line)
            except json.JSONDecodeError:
                continue  # a torn line when it is stopped
            if isinstance(report, dict):
                self._reports.append(core_utilization(report))

    def stop(self) -> dict[int, float]:
        """``{core: mean percent busy}`` for the cores of the range some report named."""
        monitor = self._monitor
        if monitor is not None:
            monitor.process.terminate()
            try:
                monitor.process.wait(5)
            except subprocess.TimeoutExpired:
                monitor.process.kill()
                monitor.process.wait()
            monitor.reader.join(5)
            if monitor.process.stdout is not None:  # a pipe: it was opened with stdout=PIPE
                monitor.process.stdout.close()
            monitor.folder.cleanup()
            self._monitor = None
        out = {}
        for core in self.cores:
            seen = [report.get(core, 0.0) for report in self._reports if report]
            if seen:
                out[core] = sum(seen) / len(seen)
        return out
