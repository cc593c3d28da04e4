"""What the searches that screen share (halving, hill-climb): every variant x batch size measured
first with short, cheap windows (concurrency bisected under the budget), kept apart from the
results, only to choose what to measure in full; and the one rule by which a screen rules a cell
out: its 95% throughput interval ends below the start of the best screen's, and its throughput
is more than ``within`` below the best's (a short screen on a busy machine moves by more than its
own interval between runs, so the interval alone is not trusted either). Against the budget a
screen is read the same way, optimistically: a level passes when the low end of its p99 interval
meets it (``base.may_meet_budget``); only the full measurement judges a p99 at face value.
"""

from __future__ import annotations

import dataclasses
import math

from workbench.measure.engine.measure_settings import MeasureSettings
from workbench.measure.grid.plan import SweepError
from workbench.measure.grid.rows import PointRow
from workbench.measure.sweep.search.base import Measure, SearchLog, SearchSpace, SearchStrategy
from workbench.measure.sweep.search.concurrency_bisection import CellAnswer, bisect_cell

__all__ = ["ScreeningSearch", "screen_variant", "clearly_below", "interval"]


class ScreeningSearch(SearchStrategy):
    """A search that screens with one window of ``screen_window_s`` and keeps a cell whose screen
    is within ``within`` (a fraction) of the best screen."""

    needs_budget = True

    def __init__(
        self, latency_budget_ms: float | None = None, *, screen_window_s: float = 0.2, within: float = 0.3
    ) -> None:
        super().__init__(latency_budget_ms)
        if (
            not isinstance(screen_window_s, (int, float))
            or isinstance(screen_window_s, bool)
            or not math.isfinite(screen_window_s)
            or screen_window_s <= 0
        ):
            raise SweepError(f"screen_window_s {screen_window_s!r} must be a positive number of seconds")
        if not isinstance(within, (int, float)) or not 0 <= within < 1:
            raise SweepError(f"within {within!r} must be a fraction in [0, 1) (0.3 = 30%)")
        self.screen_window_s, self.within = float(screen_window_s), float(within)

    @property
    def params(self) -> dict:
        return {**super().params, "screen_window_s": self.screen_window_s, "within": self.within}

    def screening(self, settings: MeasureSettings) -> MeasureSettings:
        """One window of ``screen_window_s`` (never longer than the run's), no latency floor."""
        return dataclasses.replace(
            settings,
            window_s=min(self.screen_window_s, settings.window_s),
            stable_windows=1,
            max_windows=1,
            time_limit_s=None,
            min_latencies=0,
        )

    def far_below(self, row: PointRow, best: PointRow) -> str | None:
        """Why the screen ``row`` rules its cell out beside the best screen ``best`` (None: it does not)."""
        if clearly_below(row, best) and row.throughput < (1 - self.within) * best.throughput:
            return (
                f"screened {interval(row)} is clearly below the best screen {interval(best)} "
                f"and more than {self.within:.0%} below it"
            )
        return None


def screen_variant(
    space: SearchSpace, v: int, screen: Measure, log: SearchLog, latency_budget_ms: float
) -> list[CellAnswer]:
    """Every batch size of variant ``v`` screened (one load), each cell's bisection warm-started at
    the previous batch size's answer; the cells in batch order."""
    cells: list[CellAnswer] = []
    start = None
    for b in range(len(space.batch_sizes)):
        cell = bisect_cell(space, v, b, screen, log, latency_budget_ms, start, screening=True)
        cells.append(cell)
        start = cell.highest_ok if cell.highest_ok >= 0 else 0
    return cells


def interval(row: PointRow) -> str:
    """Throughput with its 95% interval when the row has one."""
    if math.isnan(row.throughput_low) or math.isnan(row.throughput_high):
        return f"{row.throughput:.1f} infer/s"
    return f"{row.throughput:.1f} infer/s [{row.throughput_low:.1f}, {row.throughput_high:.1f}]"


def clearly_below(row: PointRow, best: PointRow) -> bool:
    """The 95% throughput interval of ``row`` ends below the start of ``best``'s (without intervals:
    the throughputs themselves)."""
    high = row.throughput if math.isnan(row.throughput_high) else row.throughput_high
    low = best.throughput if math.isnan(best.throughput_low) else best.throughput_low
    return row is not best and high < low
