"""Searches beside the full grid: each finds the best point under a p99 budget while measuring a
fraction of the points, through the sweep's own measurement and run files (``run_sweep(search=...)``).

``make_search("hill-climb", latency_budget_ms=20)``; ``SEARCHES`` names them for the CLI.
`CapacitySearch` (per variant the highest load meeting the limits) is taken by LLM sweeps
(``llm/slo_effort.LlmSearch``); every strategy reads rows through `SearchRow` and judges them by a
`Judge`, so it walks any kind's `WalkedSpace`.
"""

from __future__ import annotations

from typing import Any

from workbench.measure.grid.plan import SweepError
from workbench.measure.sweep.search.adaptive import AdaptiveEffort
from workbench.measure.sweep.search.answer import Answer, answer
from workbench.measure.sweep.search.base import Judge, SearchLog, SearchRow, SearchSpace, SearchStrategy, check_resume
from workbench.measure.sweep.search.capacity import CapacitySearch
from workbench.measure.sweep.search.concurrency_bisection import ConcurrencyBisection
from workbench.measure.sweep.search.early_stop import EarlyStop
from workbench.measure.sweep.search.halving import SuccessiveHalving
from workbench.measure.sweep.search.hill_climb import HillClimb

__all__ = [
    "SEARCHES",
    "make_search",
    "SearchStrategy",
    "SearchSpace",
    "SearchLog",
    "AdaptiveEffort",
    "CapacitySearch",
    "Judge",
    "SearchRow",
    "ConcurrencyBisection",
    "EarlyStop",
    "HillClimb",
    "SuccessiveHalving",
    "Answer",
    "answer",
    "check_resume",
]

SEARCHES: dict[str, type[SearchStrategy]] = {
    cls.name: cls for cls in (ConcurrencyBisection, EarlyStop, HillClimb, SuccessiveHalving, AdaptiveEffort)
}


def make_search(name: str, **params: Any) -> SearchStrategy | None:
    """The strategy called ``name`` with its parameters; ``"grid"`` is the full grid (None)."""
    if name == "grid":
        return None
    if name not in SEARCHES:
        raise SweepError(f"unknown search {name!r}; choose grid, {', '.join(SEARCHES)}")
    try:
        return SEARCHES[name](**params)
    except TypeError as err:
        raise SweepError(f"search {name}: {err}") from None
