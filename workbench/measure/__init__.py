"""Measuring served models, in five wings that read as the pipeline:

* ``grid/``: the grid a sweep measures and its values (`SweepPlan`, `PointRow`);
* ``sweep/``: running a sweep: the runner every sweep kind shares (``runner.py``), the tensor kind
  (`run_sweep`, `SweepRun`), its pre-run check, backend comparison, resume and the search
  strategies; the LLM kind lives in ``llm/`` (a kind: one package, one line in the switch below);
  ``cluster/`` runs sweeps and compiles as Ray tasks across machines;
* ``engine/``: how one load level is measured (`MeasureSettings`, the built-in load generator,
  perf_analyzer, the server statistics arithmetic);
* ``watch/``: what is watched around a point (load and warm-up times, quiet, held cores, busy share);
* ``store/``: saved runs and what is made of them (`RunRecord`, `SweepResult`, plots, notes, cost),
  read back by kind through ``store/kinds.py``, never naming one.

``measure()`` runs one load level and returns a ``LoadResult``; ``MeasureSettings`` says how.
"""

from workbench.measure.store.kinds import register_kind

# The one switch between sweep kinds: a run record's kind -> the module whose KIND reads it back
# (and, for a kind that sweeps, runs it). A tensor sweep's runs are the store's own table.
register_kind("llm", "workbench.measure.llm.kind")
register_kind("backends", "workbench.measure.sweep.compare_backends")

from workbench.measure.engine.loadgen import LoadResult, WindowResult, measure  # noqa: E402
from workbench.measure.engine.measure_settings import MeasureError, MeasureSettings  # noqa: E402
from workbench.measure.engine.stats import (  # noqa: E402
    ServerStats,
    StatsError,
    is_stable,
    percentile,
    server_breakdown,
    summarize_latencies,
)

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
