"""Successive halving with short windows first (Jamieson & Talwalkar's rule, as Optuna's
SuccessiveHalvingPruner applies it): every variant x batch size is screened with short, cheap
measurements (one window of ``screen_window_s``, concurrency bisected under the budget), and only
the cells whose screened throughput comes within ``within`` of the best screened so far are
measured in full; the answer is read from the full measurements only. The defaults (30%, two
cells per variant) are wide because a 0.2 s screen on a busy machine moves by tens of percent
between runs (benchmarks/search_vs_grid.py prints the spreads); a full point costs little
beside a variant load, so a wide cut is cheap insurance.

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
        best_screen = -math.inf
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
            best_screen = max(best_screen, ranked[0][0].best.throughput)
            cut = (1 - self.within) * best_screen
            for rank, (cell, b) in enumerate(ranked):  # rung 2: the survivors, in full, while still loaded
                label = f"{variant.label} batch {space.batch_sizes[b]}"
                if rank >= self.keep or cell.best.throughput < cut:
                    log.note(f"{label}: not measured in full: screened {cell.best.throughput:.1f} infer/s "
                             + (f"is below {1 - self.within:.0%} of the best screen {best_screen:.1f}"
                                if cell.best.throughput < cut else f"ranks {rank + 1} of the variant (keep {self.keep})"))
                    continue
                self._full(space, v, b, space.concurrency.index(cell.best.concurrency), measure, log,
                           f"screened {cell.best.throughput:.1f} infer/s, within {self.within:.0%} of the best screen")
                full_cells += 1
        cells_total = len(space.variants) * len(space.batch_sizes)
        log.stop(f"every cell screened with {self.screen_window_s:g} s windows; {full_cells} of {cells_total} "
                 f"cells measured in full (screened within {self.within:.0%} of the best screen, "
                 f"at most {self.keep} per variant)")
