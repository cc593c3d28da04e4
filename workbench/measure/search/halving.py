"""Successive halving with short windows first (Jamieson & Talwalkar's rule, as Optuna's
SuccessiveHalvingPruner applies it): every variant x batch size is screened with short, cheap
measurements (one window of ``screen_window_s``, concurrency bisected under the budget), and only
the cells that the screen cannot rule out are measured in full; the answer is read from the full
measurements only.

A cell is ruled out only when its screen is clearly below the best screen so far: its 95%
throughput interval ends below the start of the best's, and its throughput is more than
``within`` below the best's (a short screen on a busy machine moves by more than its own
interval between runs, so the interval alone is not trusted either). Cells whose interval
overlaps the best's are always measured in full; the others within ``within`` only while the
variant has fewer than ``keep`` cells measured in full. A full point costs little beside a
variant load, so a wide cut is cheap.

The rungs run per variant while it is loaded: on this server a variant load (a Python-backend
stub per instance, each importing its framework) costs more than several full points, so a
global second rung that reloads every surviving variant would cost more than it saves. A
candidate whose full p99 misses the budget (a screen is a short sample) is retried one
concurrency level down, in full.
"""

from __future__ import annotations

import dataclasses
import math

from workbench.measure.plan import SweepError
from workbench.measure.rows import PointRow
from workbench.measure.search.base import Measure, SearchLog, SearchSpace, SearchStrategy, meets_budget
from workbench.measure.search.concurrency_bisection import CellAnswer, bisect_cell
from workbench.measure.settings import MeasureSettings

__all__ = ["SuccessiveHalving"]


class SuccessiveHalving(SearchStrategy):
    name = "halving"
    needs_budget = True

    def __init__(self, latency_budget_ms: float | None = None, *, screen_window_s: float = 0.2,
                 within: float = 0.3, keep: int = 2) -> None:
        super().__init__(latency_budget_ms)
        if not isinstance(screen_window_s, (int, float)) or isinstance(screen_window_s, bool) \
                or not math.isfinite(screen_window_s) or screen_window_s <= 0:
            raise SweepError(f"screen_window_s {screen_window_s!r} must be a positive number of seconds")
        if not isinstance(within, (int, float)) or not 0 <= within < 1:
            raise SweepError(f"within {within!r} must be a fraction in [0, 1) (0.3 = 30%)")
        if not isinstance(keep, int) or isinstance(keep, bool) or keep < 1:
            raise SweepError(f"keep {keep!r} must be a whole number >= 1 (cells per variant measured in full)")
        self.screen_window_s, self.within, self.keep = float(screen_window_s), float(within), keep

    @property
    def params(self) -> dict:
        return {**super().params, "screen_window_s": self.screen_window_s, "within": self.within, "keep": self.keep}

    def screening(self, settings: MeasureSettings) -> MeasureSettings:
        """One window of ``screen_window_s`` (never longer than the run's), no latency floor."""
        return dataclasses.replace(settings, window_s=min(self.screen_window_s, settings.window_s), stable_windows=1,
                                   max_windows=1, time_limit_s=None, min_latencies=0)

    def _full(self, space: SearchSpace, v: int, b: int, c: int, measure: Measure, log: SearchLog,
              why: str) -> PointRow:
        row = measure(space.point(v, b, c))
        log.measured(row, why, self.latency_budget_ms)
        if not meets_budget(row, self.latency_budget_ms) and c > 0:
            row = measure(space.point(v, b, c - 1))
            log.measured(row, "missed the budget in full: one concurrency level down", self.latency_budget_ms)
        return row

    def search(self, space: SearchSpace, measure: Measure, log: SearchLog, screen: Measure | None = None) -> None:
        if screen is None:
            raise SweepError("the halving search screens points: run it through run_sweep, which gives screen()")
        budget = self.latency_budget_ms
        best_screen: PointRow | None = None
        full_cells = 0
        for v, variant in enumerate(space.variants):
            cells: list[tuple[CellAnswer, int]] = []
            start = None
            for b in range(len(space.batch_sizes)):  # rung 1: every cell of the loaded variant, screened
                cell = bisect_cell(space, v, b, screen, log, budget, start, screening=True)
                cells.append((cell, b))
                start = cell.highest_ok if cell.highest_ok >= 0 else 0
            ranked = sorted((c for c in cells if c[0].best is not None), key=lambda c: -c[0].best.throughput)
            if not ranked:
                log.note(f"{variant.label}: no cell meets the budget in the screen; nothing measured in full")
                continue
            if best_screen is None or ranked[0][0].best.throughput > best_screen.throughput:
                best_screen = ranked[0][0].best
            kept = 0
            for cell, b in ranked:  # rung 2: the survivors, in full, while still loaded
                label = f"{variant.label} batch {space.batch_sizes[b]}"
                why = self._ruled_out(cell.best, best_screen, kept)
                if why is not None:
                    log.note(f"{label}: not measured in full: {why}")
                    continue
                overlaps = not _clearly_below(cell.best, best_screen)
                kept += 1
                self._full(space, v, b, space.concurrency.index(cell.best.concurrency), measure, log,
                           f"screened {_interval(cell.best)}: "
                           + ("its interval overlaps the best screen's" if overlaps
                              else f"within {self.within:.0%} of the best screen"))
                full_cells += 1
        cells_total = len(space.variants) * len(space.batch_sizes)
        log.stop(f"every cell screened with {self.screen_window_s:g} s windows; {full_cells} of {cells_total} "
                 f"cells measured in full (every cell whose screen's interval overlaps the best screen's; those "
                 f"within {self.within:.0%} of it while the variant has fewer than {self.keep} in full)")

    def _ruled_out(self, row: PointRow, best: PointRow, kept: int) -> str | None:
        """Why the screen rules this cell out (None: measure it in full)."""
        if not _clearly_below(row, best):
            return None
        if row.throughput < (1 - self.within) * best.throughput:
            return (f"screened {_interval(row)} is clearly below the best screen {_interval(best)} "
                    f"and more than {self.within:.0%} below it")
        if kept >= self.keep:
            return (f"screened {_interval(row)} is clearly below the best screen {_interval(best)}, and "
                    f"{kept} cell(s) of the variant are measured in full already (keep {self.keep})")
        return None


def _interval(row: PointRow) -> str:
    if math.isnan(row.throughput_low) or math.isnan(row.throughput_high):
        return f"{row.throughput:.1f} infer/s"
    return f"{row.throughput:.1f} infer/s [{row.throughput_low:.1f}, {row.throughput_high:.1f}]"


def _clearly_below(row: PointRow, best: PointRow) -> bool:
    """The 95% throughput interval of ``row`` ends below the start of ``best``'s (without intervals:
    the throughputs themselves)."""
    high = row.throughput if math.isnan(row.throughput_high) else row.throughput_high
    low = best.throughput if math.isnan(best.throughput_low) else best.throughput_low
    return row is not best and high < low
