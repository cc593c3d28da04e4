"""Hill climbing over variants (core allocations, in order of cores used) x batch sizes: each cell
scored by its best throughput under the p99 budget (``bisect_cell`` on concurrency, warm-started at
the best cell's answer), the climb moving to the first neighbour that beats the best by
``min_gain``, and stopping when no unmeasured neighbour of the best does (a local optimum).

Model Analyzer's quick search climbs instance count x max_batch_size the same way (its radius and
fixed concurrency differ). Neighbours sharing the loaded variant come first, so the server reloads
only when the climb has to look along the allocation axis.
"""

from __future__ import annotations

import math

from workbench.measure.plan import SweepError
from workbench.measure.search.base import Measure, SearchLog, SearchSpace, SearchStrategy
from workbench.measure.search.concurrency_bisection import CellAnswer, bisect_cell

__all__ = ["HillClimb"]


class HillClimb(SearchStrategy):
    name = "hill-climb"
    needs_budget = True

    def __init__(self, latency_budget_ms: float | None = None, *, min_gain: float = 0.0) -> None:
        super().__init__(latency_budget_ms)
        if not isinstance(min_gain, (int, float)) or not 0 <= min_gain < 10:
            raise SweepError(f"min_gain {min_gain!r} must be a fraction >= 0 (0.05 = 5%)")
        self.min_gain = float(min_gain)

    @property
    def params(self) -> dict:
        return {**super().params, "min_gain": self.min_gain}

    @staticmethod
    def _neighbours(space: SearchSpace, cell: tuple[int, int]) -> list[tuple[int, int]]:
        """Batch size up and down on the same variant first, then the adjacent allocations."""
        v, b = cell
        out = [(v, b + 1), (v, b - 1), (v + 1, b), (v - 1, b)]
        return [(i, j) for i, j in out if 0 <= i < len(space.variants) and 0 <= j < len(space.batch_sizes)]

    def search(self, space: SearchSpace, measure: Measure, log: SearchLog) -> None:
        budget = self.latency_budget_ms
        scores: dict[tuple[int, int], CellAnswer] = {}

        def label(cell: tuple[int, int]) -> str:
            return f"{space.variants[cell[0]].label} batch {space.batch_sizes[cell[1]]}"

        best = (len(space.variants) // 2, len(space.batch_sizes) // 2)  # the centre reaches any cell soonest
        scores[best] = bisect_cell(space, *best, measure, log, budget)
        while True:
            start = max(scores[best].highest_ok, 0)
            moved = False
            for cell in self._neighbours(space, best):
                if cell in scores:
                    continue
                scores[cell] = bisect_cell(space, *cell, measure, log, budget, start)
                here, there = scores[best].score(budget), scores[cell].score(budget)
                if there > -math.inf and (here == -math.inf or there > here * (1 + self.min_gain)):
                    log.note(f"climb from {label(best)} to {label(cell)}: "
                             + (f"{there:.1f} vs {here:.1f} infer/s" if here > -math.inf else "the first cell meeting the budget"))
                    best, moved = cell, True
                    break
            if not moved:
                break
        cells = len(space.variants) * len(space.batch_sizes)
        if scores[best].best is None:
            log.stop(f"no cell near the start meets p99 <= {budget:g} ms ({len(scores)} of {cells} cells measured)")
        else:
            log.stop(f"local optimum: no unmeasured neighbour of {label(best)} beats its "
                     f"{scores[best].score(budget):.1f} infer/s by more than {self.min_gain:.0%} "
                     f"({len(scores)} of {cells} cells measured)")
