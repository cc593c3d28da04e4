"""Successive halving with short windows first (Jamieson & Talwalkar's rule, as Optuna's
SuccessiveHalvingPruner applies it): every variant x batch size is screened with short, cheap
measurements (one window of ``screen_window_s``, concurrency bisected under the budget), and only
the cells that the screen cannot rule out are measured in full; the answer is read from the full
measurements only.

A cell is ruled out only when its screen is clearly below the best screen so far (screen.py's
rule, shared with hill-climb). Cells whose interval overlaps the best's are always measured in
full; the others within ``within`` only while the variant has fewer than ``keep`` cells measured
in full. A full point costs little beside a variant load, so a wide cut is cheap.

The rungs run per variant while it is loaded: on this server a variant load (a Python-backend
stub per instance, each importing its framework) costs more than several full points, so a
global second rung that reloads every surviving variant would cost more than it saves. A
candidate whose full p99 misses the budget (a screen is a short sample) is retried one
concurrency level down, in full.
"""

from __future__ import annotations

from workbench.measure.grid.plan import SweepError
from workbench.measure.grid.rows import PointRow
from workbench.measure.sweep.search.base import Measure, SearchLog, SearchSpace, meets_budget
from workbench.measure.sweep.search.screen import ScreeningSearch, clearly_below, interval, screen_variant

__all__ = ["SuccessiveHalving"]


class SuccessiveHalving(ScreeningSearch):
    name = "halving"

    def __init__(
        self,
        latency_budget_ms: float | None = None,
        *,
        screen_window_s: float = 0.2,
        within: float = 0.3,
        keep: int = 2,
    ) -> None:
        super().__init__(latency_budget_ms, screen_window_s=screen_window_s, within=within)
        if not isinstance(keep, int) or isinstance(keep, bool) or keep < 1:
            raise SweepError(f"keep {keep!r} must be a whole number >= 1 (cells per variant measured in full)")
        self.keep = keep

    @property
    def params(self) -> dict:
        return {**super().params, "keep": self.keep}

    def _full(self, space: SearchSpace, v: int, b: int, c: int, measure: Measure, log: SearchLog, why: str) -> PointRow:
        row = measure(space.point(v, b, c))
        log.measured(row, why, self.latency_budget_ms)
        if not meets_budget(row, self.latency_budget_ms) and c > 0:
            row = measure(space.point(v, b, c - 1))
            log.measured(row, "missed the budget in full: one concurrency level down", self.latency_budget_ms)
        return row

    def search(self, space: SearchSpace, measure: Measure, log: SearchLog, screen: Measure | None = None) -> None:
        if screen is None:
            raise SweepError("the halving search screens points: run it through run_sweep, which gives screen()")
        budget = self.budget_ms
        best_screen: PointRow | None = None
        full_cells = 0
        for v, variant in enumerate(space.variants):
            # rung 1: every cell of the loaded variant, screened
            cells = screen_variant(space, v, screen, log, budget)
            ranked = sorted(
                ((c.best, b) for b, c in enumerate(cells) if c.best is not None), key=lambda c: -c[0].throughput
            )
            if not ranked:
                log.note(f"{variant.label}: no cell meets the budget in the screen; nothing measured in full")
                continue
            if best_screen is None or ranked[0][0].throughput > best_screen.throughput:
                best_screen = ranked[0][0]
            kept = 0
            for screened, b in ranked:  # rung 2: the survivors, in full, while still loaded
                label = f"{variant.label} batch {space.batch_sizes[b]}"
                why = self._ruled_out(screened, best_screen, kept)
                if why is not None:
                    log.note(f"{label}: not measured in full: {why}")
                    continue
                overlaps = not clearly_below(screened, best_screen)
                kept += 1
                self._full(
                    space,
                    v,
                    b,
                    space.concurrency.index(screened.concurrency),
                    measure,
                    log,
                    f"screened {interval(screened)}: "
                    + (
                        "its interval overlaps the best screen's"
                        if overlaps
                        else f"within {self.within:.0%} of the best screen"
                    ),
                )
                full_cells += 1
        cells_total = len(space.variants) * len(space.batch_sizes)
        log.stop(
            f"every cell screened with {self.screen_window_s:g} s windows; {full_cells} of {cells_total} "
            f"cells measured in full (every cell whose screen's interval overlaps the best screen's; those "
            f"within {self.within:.0%} of it while the variant has fewer than {self.keep} in full)"
        )

    def _ruled_out(self, row: PointRow, best: PointRow, kept: int) -> str | None:
        """Why the screen rules this cell out (None: measure it in full)."""
        if not clearly_below(row, best):
            return None
        far = self.far_below(row, best)
        if far is not None:
            return far
        if kept >= self.keep:
            return (
                f"screened {interval(row)} is clearly below the best screen {interval(best)}, and "
                f"{kept} cell(s) of the variant are measured in full already (keep {self.keep})"
            )
        return None
