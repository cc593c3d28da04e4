"""Concurrency bisection with the measurement effort spent where it decides (effort.py).

The walk is bisection's (concurrency_bisection.py: per variant, every batch size, the highest
concurrency under the p99 budget, a cell warm-started at the previous batch size's answer), so
each variant is loaded once and serves every point that needs it. What changes is how long each
point is measured: window by window, until its interval separates it from the incumbent (the best
point so far that meets the budget) and from the budget, or the cap. A point far below the
incumbent, or clearly over the budget, stops after a few windows; a contender is measured to the
cap. The incumbent moves to every point that meets the budget with more throughput.

The answer is re-measured (confirm.py) only while its variant is still loaded: a reload costs
more than a point here, and the answer states its confidence whichever way (answer.py).
"""

from __future__ import annotations

import dataclasses
import math

from workbench.measure.engine.settings import MeasureSettings
from workbench.measure.grid.plan import Point, SweepError
from workbench.measure.grid.rows import PointRow
from workbench.measure.sweep.search.base import JudgedMeasure, SearchLog, SearchSpace, SearchStrategy, row_score
from workbench.measure.sweep.search.concurrency_bisection import bisect_cell
from workbench.measure.sweep.search.effort import DecidedBy, EffortRule, Incumbent, p99_limit

__all__ = ["AdaptiveEffort", "WINDOW_S"]

WINDOW_S = 0.5  # the adaptive search's window (the run's when shorter); see judging()


class AdaptiveEffort(SearchStrategy):
    """Bisection whose points are measured until decided: ``min_windows`` windows at least (the
    screen of a point that cannot win), ``max_windows`` at most (a contender)."""

    name = "adaptive"
    needs_budget = True
    measures_by_window = True
    reloads_to_confirm = False

    def __init__(self, latency_budget_ms: float | None = None, *, min_windows: int = 3, max_windows: int = 10,
                 window_s: float | None = WINDOW_S) -> None:
        super().__init__(latency_budget_ms)
        try:
            self.rule = EffortRule(min_windows, max_windows)
        except ValueError as err:
            raise SweepError(f"adaptive search: {err}") from None
        if window_s is not None and not (isinstance(window_s, (int, float)) and 0 < window_s <= 60):
            raise SweepError(f"adaptive search: window_s {window_s!r} must be seconds in (0, 60], or None for the "
                             "run's window")
        self.window_s = window_s

    @property
    def params(self) -> dict:
        return {**super().params, "min_windows": self.rule.min_windows, "max_windows": self.rule.max_windows,
                "window_s": self.window_s}

    def judging(self, settings: MeasureSettings) -> MeasureSettings:
        """Windows of ``window_s`` (never longer than the run's): the rule reads windows, not requests."""
        if self.window_s is None:
            return settings
        return dataclasses.replace(settings, window_s=min(self.window_s, settings.window_s))

    def search(self, space: SearchSpace, measure: JudgedMeasure, log: SearchLog) -> None:
        budget = self.latency_budget_ms
        best: PointRow | None = None
        incumbent: Incumbent | None = None

        def judged(point: Point) -> PointRow:
            nonlocal best, incumbent
            until = DecidedBy(self.rule, incumbent, p99_limit(budget))
            row = measure(point, until=until)
            if row_score(row, budget) > row_score(best, budget):
                best = row
                label = f"{row.variant} batch {row.batch_size} concurrency {row.concurrency}"
                incumbent = Incumbent.from_windows(label, until.seen) if len(until.seen) >= 2 else \
                    Incumbent(label, row.throughput, row.throughput_low, row.throughput_high)
            return row

        for v in range(len(space.variants)):
            start = None
            for b in range(len(space.batch_sizes)):
                cell = bisect_cell(space, v, b, judged, log, budget, start)
                start = cell.highest_ok if cell.highest_ok >= 0 else 0
        rows = [s for s in log.steps if s.get("stopped")]
        kinds = {}
        for step in rows:
            kind = step["stopped"].split(" after ")[0]
            kinds[kind] = kinds.get(kind, 0) + 1
        spent = ", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items())) or "none measured here"
        best_text = "none meets the budget" if row_score(best, budget) == -math.inf else \
            f"best {best.variant} batch {best.batch_size} concurrency {best.concurrency}"
        log.stop(f"every variant x batch size bisected on concurrency under p99 <= {budget:g} ms, each point "
                 f"measured until decided ({spent}); {best_text}")
