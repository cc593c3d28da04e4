"""What the points measured on one variant say about the points of that variant not measured.

Two regularities of a closed-loop load on one loaded variant, both read from the 36-point grids of
benchmarks/README.md ("the full space on a quiet machine"):

- p99 grows with the load, in batch size and in concurrency. A point that meets the budget vouches
  for every point with no larger batch and no higher concurrency; a point that misses it condemns
  every point with no smaller batch and no lower concurrency. (Bisection already leans on the
  concurrency half of this: concurrency_bisection.py.)
- Throughput grows with the load until the instances saturate, then stays flat. A measured point's
  throughput bounds the throughput of every point with no larger batch and no higher concurrency.
  Of the 432 heavier/lighter pairs in those three grids, 419 bear this out to within 3%. In the
  other 13 an overloaded point read below a lighter one, by up to 11% (1x2 batch 8: 896 infer/s at
  concurrency 2, 806 at 8). What matters is the gap to the variant's best point under the budget,
  the only one that could win. That gap reached 6% (1x2 batch 8 concurrency 1, 857 infer/s).
  So a point left out by the bound can beat the answer by about that much, less the bound's own
  margin: the bound is the high end of a 95% interval of a few windows.
  A 5% allowance on the bound was tried on the real server. It changed no answer on these grids.
  It kept the search walking a variant it had ruled out: 11-13 points and 36-45 s, against
  7-8 points and 26-30 s without it.

So a search can leave a point unmeasured when a heavier point's throughput interval already ends
below the incumbent's: it cannot win, whatever its p99.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["VariantFacts", "Bound"]


@dataclass(frozen=True)
class Bound:
    """The most throughput a point can have, and the measured point that says so (``by``:
    (batch index, concurrency index)); ``by`` None: nothing heavier was measured, so no bound."""

    throughput: float
    by: tuple[int, int] | None

    def below(self, incumbent_low: float) -> bool:
        return self.by is not None and self.throughput < incumbent_low


class VariantFacts:
    """The measured points of one variant, by (batch index, concurrency index) on the space's
    ascending axes: whether each met the budget, and the high end of its throughput interval.
    ``levels``: how many concurrency levels there are."""

    def __init__(self, levels: int) -> None:
        self.levels = levels
        self._meets: dict[tuple[int, int], bool] = {}
        self._high: dict[tuple[int, int], float] = {}

    def add(self, batch: int, level: int, meets: bool, throughput_high: float) -> None:
        """One measured point (a failed one: ``meets`` False, throughput NaN, which bounds nothing)."""
        self._meets[(batch, level)] = meets
        if not math.isnan(throughput_high):
            self._high[(batch, level)] = throughput_high

    def measured(self, batch: int, level: int) -> bool:
        return (batch, level) in self._meets

    def known_to_meet(self, batch: int, level: int) -> bool:
        """A point no lighter (larger or equal batch and concurrency) met the budget."""
        return any(ok and b >= batch and c >= level for (b, c), ok in self._meets.items())

    def known_to_miss(self, batch: int, level: int) -> bool:
        """A point no heavier (smaller or equal batch and concurrency) missed the budget."""
        return any(not ok and b <= batch and c <= level for (b, c), ok in self._meets.items())

    def bracket(self, batch: int) -> tuple[int, int]:
        """``(low, high)`` for this batch size: the highest concurrency index known to meet the
        budget (-1: none) and the lowest known to miss it (``levels``: none). The batch size's
        best point under the budget is at an index in [low, high)."""
        low = max((c for c in range(self.levels) if self.known_to_meet(batch, c)), default=-1)
        high = min((c for c in range(self.levels) if self.known_to_miss(batch, c)), default=self.levels)
        return low, high

    def missed_by(self, batch: int, level: int) -> tuple[int, int] | None:
        """The heaviest measured point no heavier than this one that missed the budget (None: none)."""
        misses = [key for key, ok in self._meets.items() if not ok and key[0] <= batch and key[1] <= level]
        return max(misses) if misses else None

    def bound(self, batch: int, level: int, *, meeting: bool = False) -> Bound:
        """The lowest throughput high end among the measured points no lighter than this one
        (``meeting``: among those that met the budget)."""
        heavier = [
            (high, key)
            for key, high in self._high.items()
            if key[0] >= batch and key[1] >= level and (not meeting or self._meets[key])
        ]
        if not heavier:
            return Bound(math.inf, None)
        throughput, by = min(heavier)
        return Bound(throughput, by)
