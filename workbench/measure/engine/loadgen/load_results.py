"""What one load level measured: per-window results and the pooled `LoadResult`, raw latencies kept.

Plain values, built by the engine once a measurement ends and published whole.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from workbench.measure.engine.stats import ServerStats, Spread, percentile_key, summarize_latencies

__all__ = ["WindowResult", "LoadResult"]


@dataclass
class WindowResult:
    """One measurement window: what completed in it and what the server reported for it.
    ``completed_s``: when each request completed, in seconds from the window's start;
    ``send_delays_us``: the generator's own delay before sending each request (see ``LoadResult``)."""

    index: int
    duration_s: float
    requests: int
    failures: int
    throughput: float
    latencies_us: np.ndarray
    send_delays_us: np.ndarray
    client_busy: float
    server: ServerStats | None
    completed_s: np.ndarray = field(default_factory=lambda: np.empty(0))
    client_cpu_s: float = 0.0

    def latency(self, which: float | None = None) -> float:
        """The stabilizing latency: the average, or percentile ``which``."""
        summary = summarize_latencies(self.latencies_us, which)
        return summary["avg"] if which is None else summary[percentile_key(which)]


@dataclass
class LoadResult:
    """One load level. Reported numbers are over every window measured after the warm-up (each
    window is kept in ``windows``; ``stable`` is the stopping rule's verdict); all times in
    microseconds; throughput in inferences per second (requests x batch size).

    What the load generator cost: ``send_delays_us`` holds, per pooled request, how long the
    generator took to send it (in concurrency mode, from its slot's previous response; in rate
    mode, past its scheduled time), ``send_delay_us`` their mean; ``client_cpu_us`` is the CPU the
    generator's processes spent per pooled request, ``client_busy`` that CPU per second of wall
    time. ``spread`` bounds throughput and p99 (block bootstrap of the pooled windows);
    ``enough_latencies`` says whether the pooled windows held ``min_latencies`` latencies.
    """

    model: str
    url: str
    protocol: str
    batch_size: int
    concurrency: int | None
    request_rate: float | None
    distribution: str | None
    stable: bool
    throughput: float
    latency: dict[str, float]
    requests: int
    failures: int
    latencies_us: np.ndarray
    send_delays_us: np.ndarray
    late_fraction: float
    client_busy: float
    server: ServerStats | None
    windows: list[WindowResult]
    pooled_windows: int
    sent: int
    succeeded: int
    failed: int
    errors: dict[str, int]
    checked: int
    check_failures: int
    warnings: list[str] = field(default_factory=list)
    percentile: float | None = None
    server_total: ServerStats | None = None
    spread: Spread = field(default_factory=Spread.unknown)
    client_cpu_us: float = math.nan
    enough_latencies: bool = True
    min_latencies: int = 0
    processes: int = 1
    measured_s: float = 0.0
    stopped: str | None = None  # why the windows ended (stable, a limit, or the caller's rule)

    @property
    def p50_us(self) -> float:
        return self.latency["p50"]

    @property
    def p99_us(self) -> float:
        return self.latency["p99"]

    @property
    def send_delay_us(self) -> float:
        return float(np.mean(self.send_delays_us)) if self.send_delays_us.size else math.nan

    def to_row(self) -> dict[str, Any]:
        """Flat columns for a pandas table (one row per load level); ``perf_analyzer.parse_csv``
        produces rows with the same keys where perf_analyzer reports them."""
        row: dict[str, Any] = {
            "source": "workbench",
            "model": self.model,
            "protocol": self.protocol,
            "batch_size": self.batch_size,
            "concurrency": self.concurrency,
            "request_rate": self.request_rate,
            "throughput": self.throughput,
            "throughput_low": self.spread.throughput_low,
            "throughput_high": self.spread.throughput_high,
            "latency_avg_us": self.latency["avg"],
            "latency_std_us": self.latency["std"],
        }
        for key, value in self.latency.items():
            if key.startswith("p"):
                row[f"{key}_us"] = value
        row.update(
            {
                "p99_low_us": self.spread.latency_low,
                "p99_high_us": self.spread.latency_high,
                "stable": self.stable,
                "windows": len(self.windows),
                "requests": self.requests,
                "failures": self.failures,
                "sent": self.sent,
                "failed": self.failed,
                "check_failures": self.check_failures,
                "late_fraction": self.late_fraction,
                "send_delay_us": self.send_delay_us,
                "client_cpu_us": self.client_cpu_us,
                "client_busy": self.client_busy,
                "processes": self.processes,
                "warnings": len(self.warnings),
            }
        )
        if self.server is not None:
            row.update(self.server.to_row())
        return row
