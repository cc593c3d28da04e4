"""What one load level measured: per-window results and the pooled `LoadResult`, raw latencies kept.

Plain values, built by the engine once a measurement ends and published whole.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from workbench.measure.stats import ServerStats, percentile_key, summarize_latencies

__all__ = ["WindowResult", "LoadResult"]


@dataclass
class WindowResult:
    """One measurement window: what completed in it and what the server reported for it."""

    index: int
    duration_s: float
    requests: int
    failures: int
    throughput: float
    latencies_us: np.ndarray
    send_delays_us: np.ndarray
    client_busy: float
    server: ServerStats | None

    def latency(self, which: float | None = None) -> float:
        """The stabilizing latency: the average, or percentile ``which``."""
        summary = summarize_latencies(self.latencies_us, which)
        return summary["avg"] if which is None else summary[percentile_key(which)]


@dataclass
class LoadResult:
    """One load level. Reported numbers pool the last ``stable_windows`` windows; all times in
    microseconds; throughput in inferences per second (requests x batch size)."""

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

    @property
    def p50_us(self) -> float:
        return self.latency["p50"]

    @property
    def p99_us(self) -> float:
        return self.latency["p99"]

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
            "latency_avg_us": self.latency["avg"],
            "latency_std_us": self.latency["std"],
        }
        for key, value in self.latency.items():
            if key.startswith("p"):
                row[f"{key}_us"] = value
        row.update({
            "stable": self.stable,
            "windows": len(self.windows),
            "requests": self.requests,
            "failures": self.failures,
            "sent": self.sent,
            "failed": self.failed,
            "check_failures": self.check_failures,
            "late_fraction": self.late_fraction,
            "client_busy": self.client_busy,
            "warnings": len(self.warnings),
        })
        if self.server is not None:
            row.update(self.server.to_row())
        return row

