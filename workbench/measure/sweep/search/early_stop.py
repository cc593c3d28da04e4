"""Early stop along concurrency and batch size: per variant, walk the batch sizes upward and, in
each, the concurrency levels upward; a walk ends when the last ``tries`` steps did not raise the
best throughput by ``min_gain`` (Model Analyzer's rule: 5% over 4 tries; Model Navigator stops
growing the batch the same way), or, with a budget, when p99 misses it (more load only adds latency).
``tries`` defaults to 1, not Model Analyzer's 4: on a plan of four concurrency levels, four tries
would never stop a walk.
"""

from __future__ import annotations

import math

from workbench.measure.grid.plan import SweepError
from workbench.measure.sweep.search.base import Measure, SearchLog, SearchSpace, SearchStrategy, row_score

__all__ = ["EarlyStop"]


class EarlyStop(SearchStrategy):
    name = "early-stop"

    def __init__(self, latency_budget_ms: float | None = None, *, min_gain: float = 0.05, tries: int = 1) -> None:
        super().__init__(latency_budget_ms)
        if not isinstance(min_gain, (int, float)) or not 0 <= min_gain < 10:
            raise SweepError(f"min_gain {min_gain!r} must be a fraction >= 0 (0.05 = 5%)")
        if not isinstance(tries, int) or tries < 1:
            raise SweepError(f"tries {tries!r} must be a whole number >= 1")
        self.min_gain, self.tries = float(min_gain), tries

    @property
    def params(self) -> dict:
        return {**super().params, "min_gain": self.min_gain, "tries": self.tries}

    def _stalled(self, history: list[float]) -> bool:
        """The last ``tries`` results add less than ``min_gain`` over the best before them."""
        if len(history) <= self.tries:
            return False
        before = max(history[: -self.tries])
        return before > -math.inf and max(history[-self.tries :]) < before * (1 + self.min_gain)

    def search(self, space: SearchSpace, measure: Measure, log: SearchLog, screen: Measure | None = None) -> None:
        budget, gain = self.latency_budget_ms, f"{self.min_gain:.0%}"
        for v, variant in enumerate(space.variants):
            batch_bests: list[float] = []
            for b, batch in enumerate(space.batch_sizes):
                history: list[float] = []
                for c, concurrency in enumerate(space.concurrency):
                    row = measure(space.point(v, b, c))
                    log.measured(row, "first concurrency level" if c == 0 else "throughput still growing", budget)
                    history.append(row_score(row, budget))
                    if history[-1] == -math.inf:
                        log.note(
                            f"{variant.label} batch {batch}: concurrency walk ends at {concurrency}: "
                            + (f"p99 {row.p99_ms:.2f} ms misses the budget" if not row.error else "point failed")
                        )
                        break
                    if self._stalled(history):
                        log.note(
                            f"{variant.label} batch {batch}: concurrency walk ends at {concurrency}: "
                            f"throughput gained less than {gain} over {self.tries} step(s)"
                        )
                        break
                batch_bests.append(max(history))
                if batch_bests[-1] == -math.inf:
                    log.note(
                        f"{variant.label}: batch walk ends at {batch}: no concurrency meets the budget, "
                        "and a larger batch only adds latency"
                    )
                    break
                if self._stalled(batch_bests):
                    log.note(
                        f"{variant.label}: batch walk ends at {batch}: best throughput gained less than "
                        f"{gain} over {self.tries} batch size(s)"
                    )
                    break
        log.stop(
            f"every variant walked until throughput stopped growing by {gain}"
            + (f" or p99 missed {budget:g} ms" if budget is not None else "")
        )
