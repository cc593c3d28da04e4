"""Measuring served models: the settings, the load generator, the statistics arithmetic, perf_analyzer,
and the sweep (plan, points, rows, results, plots) built on them.

``measure()`` runs one load level and returns a ``LoadResult``; ``MeasureSettings`` says how.
"""

from workbench.measure.loadgen import LoadResult, WindowResult, measure
from workbench.measure.settings import MeasureError, MeasureSettings
from workbench.measure.stats import ServerStats, StatsError, is_stable, percentile, server_breakdown, summarize_latencies

__all__ = [
    "MeasureSettings",
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
