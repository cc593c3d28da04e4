"""Before a search names its answer: measure it once more when one measurement cannot tell it
from the runner-up.

A search picks the highest of many noisy measurements, so its pick is, more often than not, one
measured on the high side (the winner's curse). When the best point's 95% throughput interval
overlaps the runner-up's, or its p99 interval reaches past the budget, the order and the margin
are within the noise of one measurement: the best point is measured again (once) and that
measurement is its row; the answer is then read again (the runner-up may now come first). A
resumed run does not measure again what its record says it already re-measured.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping

import pandas as pd

from workbench.measure.grid.plan import Point
from workbench.measure.grid.rows import PointRow
from workbench.measure.sweep.search.answer import answer
from workbench.measure.sweep.search.base import SearchLog

__all__ = ["why_confirm", "confirm_answer"]


def _value(row: pd.Series, column: str) -> float:
    value = row.get(column)
    return math.nan if value is None else float(value)


def why_confirm(best: pd.Series | None, runner_up: pd.Series | None, latency_budget_ms: float | None) -> str | None:
    """Why one measurement of ``best`` is not enough to name it (None: it is)."""
    if best is None:
        return None
    reasons = []
    if runner_up is not None:
        low, other_high = _value(best, "throughput_low"), _value(runner_up, "throughput_high")
        if math.isnan(low) or math.isnan(other_high):
            reasons.append("no throughput interval to tell it from the runner-up")
        elif low <= other_high:
            reasons.append(f"its throughput interval (from {low:.1f}) overlaps the runner-up's (to {other_high:.1f})")
    if latency_budget_ms is not None:
        high = _value(best, "p99_high_ms")
        if not math.isnan(high) and high > latency_budget_ms:
            reasons.append(f"its p99 interval reaches {high:.2f} ms, past the {latency_budget_ms:g} ms budget")
    return "; ".join(reasons) or None


def confirm_answer(
    rows: Iterable[PointRow],
    points: Mapping[tuple, Point],
    remeasure: Callable[[Point], PointRow],
    log: SearchLog,
    latency_budget_ms: float | None,
    done: Iterable[str] = (),
    only_variant: str | None = None,
) -> str | None:
    """Measure the answer of ``rows`` again when ``why_confirm`` says so (unless its label is in
    ``done``: re-measured by an earlier session; or, with ``only_variant`` (the variant loaded),
    unless it is of another variant: a search that never reloads says so instead); ``points``: the plan's points by key;
    ``remeasure(point)`` measures and keeps the new row as the point's. Returns the re-measured point's label, or None when nothing was measured."""
    rows = list(rows)
    if not rows:
        return None
    frame = pd.DataFrame([r.to_dict() for r in rows])
    found = answer(frame, latency_budget_ms)
    why = why_confirm(found.best, found.runner_up, latency_budget_ms)
    if why is None or found.best is None:
        return None
    key = (found.best["variant"], int(found.best["batch_size"]), int(found.best["concurrency"]))
    first = next(r for r in rows if r.key == key)
    point = points[key]
    if point.label in set(done):
        return None
    if only_variant is not None and point.variant.label != only_variant:
        log.note(
            f"answer {point.label} not measured again ({why}): its variant is no longer loaded, and this "
            "search does not reload a variant it has measured; the answer states its confidence instead"
        )
        return None
    row = remeasure(point)
    log.measured(row, f"the answer measured again: {why}", latency_budget_ms)
    log.note(
        f"answer {point.label} re-measured: {row.throughput:.1f} infer/s, p99 {row.p99_ms:.2f} ms "
        f"(first {first.throughput:.1f} infer/s, p99 {first.p99_ms:.2f} ms)"
    )
    return point.label
