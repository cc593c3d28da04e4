"""Measuring served models: the load generator, the statistics arithmetic, perf_analyzer.

``measure()`` runs one load level and returns a ``LoadResult``; the sweep builds on it.
"""

from workbench.measure.loadgen import LoadResult, MeasureError, WindowResult, measure
from workbench.measure.stats import ServerStats, StatsError, is_stable, percentile, server_breakdown, summarize_latencies

__all__ = [
    "LoadResult",
    "MeasureError",
    "WindowResult",
    "measure",
    "ServerStats",
    "StatsError",
    "is_stable",
    "percentile",
    "server_breakdown",
    "summarize_latencies",
]
