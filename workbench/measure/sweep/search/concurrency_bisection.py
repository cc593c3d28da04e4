"""Per variant and batch size, the highest concurrency whose p99 meets the budget, by bisection
over the plan's concurrency levels (perf_analyzer's ``--binary-search`` under
``--latency-threshold``; Model Analyzer's parameter search does the same around a violated
constraint). p99 grows with the load, so a level that misses the budget rules out every higher
one and a level that meets it every lower one: about log2(levels) points per cell instead of all.
"""

from __future__ import annotations

from dataclasses import dataclass

from workbench.measure.grid.rows import PointRow
from workbench.measure.sweep.search.base import (
    Measure,
    SearchLog,
    SearchSpace,
    SearchStrategy,
    may_meet_budget,
    meets_budget,
    row_score,
    throughput_high,
)

__all__ = ["CellAnswer", "bisect_cell", "ConcurrencyBisection"]


@dataclass(frozen=True)
class CellAnswer:
    """What bisection found for one variant x batch size: the best point meeting the budget
    (None when even the lowest level misses it), the index of the highest level meeting it
    (-1: none), and why the bisection ended."""

    best: PointRow | None
    highest_ok: int
    reason: str

    def score(self, latency_budget_ms: float) -> float:
        return row_score(self.best, latency_budget_ms)


def bisect_cell(
    space: SearchSpace,
    variant: int,
    batch: int,
    measure: Measure,
    log: SearchLog,
    latency_budget_ms: float,
    start: int | None = None,
    *,
    screening: bool = False,
    start_why: str = "warm start at a neighbour's answer",
) -> CellAnswer:
    """Bisect the concurrency levels of one cell. ``start`` (an index, e.g. the answer of a
    neighbouring cell, logged as ``start_why``) is probed first; a failed point counts as missing
    the budget.
    ``screening``: ``measure`` is a short screen, logged as one (its rows are no results), and a
    level passes when it may meet the budget (``may_meet_budget``: the low end of its p99 interval)."""
    record = log.screened if screening else log.measured
    passes = may_meet_budget if screening else meets_budget
    levels = space.concurrency
    low, high = -1, len(levels)  # low: highest index known to meet the budget; high: lowest known to miss
    rows: list[PointRow] = []
    probe = start if start is not None and 0 <= start < len(levels) else (len(levels) - 1) // 2
    why = start_why if start is not None else "middle of the concurrency levels"
    while high - low > 1:
        row = measure(space.point(variant, batch, probe))
        record(row, why, latency_budget_ms)
        rows.append(row)
        if passes(row, latency_budget_ms):
            low = probe
        else:
            high = probe
        if probe == start and low == probe and high - low > 1:
            probe, why = low + 1, "met the budget: try the next level up"
        elif probe == start and high == probe and high - low > 1:
            probe, why = high - 1, "missed the budget: try the next level down"
        else:
            probe, why = (low + high) // 2, "bisect the remaining levels"
    if not screening:  # the levels the bisection left out, each with the measured level that decided it
        by_level = {space.concurrency.index(r.concurrency): r for r in rows}
        for c in range(len(levels)):
            if c in by_level:
                continue
            if high < len(levels) and c > high:
                log.left_out_by_p99(space.point(variant, batch, c), by_level[high], latency_budget_ms)
            elif 0 <= low and c < low:
                log.left_out_by_throughput(
                    space.point(variant, batch, c), by_level[low], throughput_high(by_level[low])
                )
    cell = f"{space.variants[variant].label} batch {space.batch_sizes[batch]}"
    if low == -1:
        reason = f"{cell}: p99 misses the budget already at the lowest concurrency {levels[0]}"
    elif high == len(levels):
        reason = f"{cell}: p99 meets the budget up to the highest concurrency {levels[-1]}"
    else:
        reason = f"{cell}: p99 meets the budget at concurrency {levels[low]} and misses it at {levels[high]}"
    log.note(("screen (p99 read at the low end of its interval): " if screening else "") + reason)
    ok = [r for r in rows if passes(r, latency_budget_ms)]
    best = max(ok, key=lambda r: r.throughput) if ok else None
    return CellAnswer(best, low, reason)


class ConcurrencyBisection(SearchStrategy):
    """Every variant x batch size, each bisected on concurrency under the p99 budget; a cell starts
    at the answer of the previous batch size of the same variant."""

    name = "bisection"
    needs_budget = True

    def search(self, space: SearchSpace, measure: Measure, log: SearchLog, screen: Measure | None = None) -> None:
        for v in range(len(space.variants)):
            start = None
            for b in range(len(space.batch_sizes)):
                answer = bisect_cell(space, v, b, measure, log, self.budget_ms, start)
                start = answer.highest_ok if answer.highest_ok >= 0 else 0
        log.stop(f"every variant x batch size bisected on concurrency under p99 <= {self.latency_budget_ms:g} ms")
