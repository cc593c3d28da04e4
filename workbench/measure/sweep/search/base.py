"""What every search shares: the space it may walk (only the plan's checked variants, batch sizes
and concurrency levels), the test a measured point must pass, and the log of what it measured and
why it stopped, kept in the run record so a resumed search shows the same reasoning.

A strategy measures through the sweep's own ``measure(point)`` (the same load, point measurement
and run files as the full grid); on resume that call returns the row already on disk, so a
deterministic strategy replays its earlier decisions and goes on where it stopped. A strategy
that asks for ``screening`` settings also gets ``screen(point)``: a short measurement on the same
loaded variant, kept apart from the results (``screening.jsonl``), that only chooses what to
measure in full.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from workbench.measure.engine.measure_settings import MeasureSettings
from workbench.measure.grid.plan import Point, SweepError, SweepPlan, Variant
from workbench.measure.grid.rows import PointRow, usable
from workbench.measure.store.bounded import BoundedPoint

if TYPE_CHECKING:
    from workbench.measure.engine.loadgen import Until

__all__ = [
    "SearchSpace",
    "SearchLog",
    "SearchStrategy",
    "Measure",
    "JudgedMeasure",
    "row_score",
    "meets_budget",
    "may_meet_budget",
    "check_resume",
    "throughput_high",
]

Measure = Callable[[Point], PointRow]


class JudgedMeasure(Protocol):
    """The sweep's ``measure`` as a search that sets its own effort calls it: ``until`` ends the
    point's windows (effort.py) instead of the stability rule."""

    def __call__(self, point: Point, *, until: Until | None = None) -> PointRow: ...


def meets_budget(row: PointRow, latency_budget_ms: float | None) -> bool:
    """Usable and, with a budget, p99 within it."""
    return usable(row) and (latency_budget_ms is None or row.p99_ms <= latency_budget_ms)


def may_meet_budget(row: PointRow, latency_budget_ms: float | None) -> bool:
    """A screen's test: usable and the low end of its p99 interval within the budget (its p99 when
    it has no interval). A screen only chooses what to measure in full, so it rules a level out
    only when even its optimistic end misses: one short window's p99 moves between runs of the same
    point by as much as the gaps between candidates, and a screen read at face value can drop the
    grid's best cell against a budget inside that band."""
    if not usable(row):
        return False
    if latency_budget_ms is None:
        return True
    low = row.p99_ms if math.isnan(row.p99_low_ms) else min(row.p99_low_ms, row.p99_ms)
    return low <= latency_budget_ms


def row_score(row: PointRow | None, latency_budget_ms: float | None) -> float:
    """Throughput of a point that meets the budget, else -inf (it can never be the answer)."""
    return row.throughput if row is not None and meets_budget(row, latency_budget_ms) else -math.inf


@dataclass(frozen=True)
class SearchSpace:
    """The plan's checked variants, batch sizes and concurrency levels, each axis in ascending
    order (variants by total cores, then instances, then the plan's order)."""

    variants: tuple[Variant, ...]
    batch_sizes: tuple[int, ...]
    concurrency: tuple[int, ...]

    @classmethod
    def of(cls, plan: SweepPlan, variants: Sequence[Variant]) -> SearchSpace:
        order = sorted(
            range(len(variants)), key=lambda i: (variants[i].allocation.cores, variants[i].allocation.instances, i)
        )
        return cls(tuple(variants[i] for i in order), tuple(sorted(plan.batch_sizes)), tuple(sorted(plan.concurrency)))

    @property
    def size(self) -> int:
        return len(self.variants) * len(self.batch_sizes) * len(self.concurrency)

    def point(self, variant: int, batch: int, concurrency: int) -> Point:
        """The point at these axis indices."""
        return Point(self.variants[variant], self.batch_sizes[batch], self.concurrency[concurrency])


def _label(row: PointRow) -> str:
    return f"{row.variant} batch {row.batch_size} concurrency {row.concurrency}"


def throughput_high(row: PointRow) -> float:
    """The high end of the row's throughput interval (its throughput when it has none)."""
    return row.throughput if math.isnan(row.throughput_high) else row.throughput_high


class SearchLog:
    """Every point a search measured (or found on disk), with the reason it was chosen, and why
    the search stopped. ``to_dict`` is what the run record keeps under ``search``."""

    def __init__(self, name: str, params: Mapping[str, Any], space: SearchSpace) -> None:
        self.name, self.params, self.space = name, dict(params), space
        self.steps: list[dict] = []
        self.screens: list[dict] = []
        self.notes: list[str] = []
        self.stopped: str | None = None
        self.confirmed: list[str] = []  # points measured again before the answer was named (confirm.py)
        self.bounded: list[BoundedPoint] = []  # points left unmeasured because a bound decided them

    @staticmethod
    def _entry(number: int, row: PointRow, why: str, latency_budget_ms: float | None, test=meets_budget) -> dict:
        return {
            "step": number,
            "variant": row.variant,
            "batch_size": row.batch_size,
            "concurrency": row.concurrency,
            "why": why,
            "throughput": None if math.isnan(row.throughput) else round(row.throughput, 3),
            "p99_ms": None if math.isnan(row.p99_ms) else round(row.p99_ms, 4),
            "meets_budget": test(row, latency_budget_ms),
            "error": row.error,
            "windows": None if math.isnan(row.windows) else int(row.windows),
            "stopped": row.stopped,
        }

    def measured(self, row: PointRow, why: str, latency_budget_ms: float | None) -> None:
        self.steps.append(self._entry(len(self.steps) + 1, row, why, latency_budget_ms))

    def screened(self, row: PointRow, why: str, latency_budget_ms: float | None) -> None:
        """A short screening measurement: it chose what to measure in full, and is no result
        (``meets_budget`` there is the screen's own test, ``may_meet_budget``)."""
        self.screens.append(self._entry(len(self.screens) + 1, row, why, latency_budget_ms, may_meet_budget))

    def left_out_by_p99(self, point: Point, by: PointRow, latency_budget_ms: float) -> None:
        """``point`` left unmeasured: ``by``, no heavier, missed the budget (p99 grows with the load)."""
        where = f"{_label(by)}, a lighter load, "
        if by.error or math.isnan(by.p99_ms):
            reading = where + f"failed ({by.error or 'no p99'}): counted as missing the budget"
        else:
            reading = where + f"read p99 {by.p99_ms:.2f} ms, past the {latency_budget_ms:g} ms budget"
        self._left_out(point, "p99", by, by.p99_ms, latency_budget_ms, reading)

    def left_out_by_throughput(
        self, point: Point, by: PointRow, high: float, incumbent_low: float | None = None, incumbent: str = ""
    ) -> None:
        """``point`` left unmeasured: its throughput is at most ``high``, the high end of ``by``'s
        interval, ``by`` no lighter (throughput grows with the load); ``high`` ends below
        ``incumbent_low`` (the low end of the interval ``incumbent`` names), or, with no incumbent
        given, ``by`` meets the budget and a lighter point cannot beat it."""
        reading = f"throughput at most {high:.1f} infer/s, the high end of {_label(by)}'s interval (a heavier load), "
        if incumbent_low is None:
            reading += f"which meets the budget at p99 {by.p99_ms:.2f} ms: a lighter point cannot beat it"
        else:
            reading += f"below {incumbent}"
        self._left_out(point, "throughput", by, high, math.nan if incumbent_low is None else incumbent_low, reading)

    def _left_out(self, point: Point, bound: str, by: PointRow, value: float, limit: float, reading: str) -> None:
        """Once per point: the first bound that decided it is the one that did."""
        if any((p.variant, p.batch_size, p.concurrency) == point.key for p in self.bounded):
            return
        self.bounded.append(
            BoundedPoint(*point.key, bound, by.key, float(value), float(limit), reading, len(self.steps))
        )

    def note(self, text: str) -> None:
        """A decision that measured nothing (a bracket closed, an axis walk ended)."""
        self.notes.append(f"after step {len(self.steps)}: {text}")

    def stop(self, reason: str) -> None:
        self.stopped = reason

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "params": self.params,
            "space_points": self.space.size,
            "measured_points": len({(s["variant"], s["batch_size"], s["concurrency"]) for s in self.steps}),
            "screened_points": len({(s["variant"], s["batch_size"], s["concurrency"]) for s in self.screens}),
            "steps": list(self.steps),
            "screens": list(self.screens),
            "notes": list(self.notes),
            "stopped": self.stopped,
            "confirmed": list(self.confirmed),
        }


class SearchStrategy:
    """A way to find the best point without measuring the whole grid. Subclasses set ``name``,
    check their parameters in ``__init__`` and implement ``search``."""

    name = "search"
    needs_budget = False
    # measures each point window by window through ``measure(point, until=...)`` (the built-in engine)
    measures_by_window = False
    # the answer re-measured (confirm.py) even when that reloads its variant
    reloads_to_confirm = True

    def __init__(self, latency_budget_ms: float | None = None) -> None:
        if latency_budget_ms is not None:
            try:
                latency_budget_ms = float(latency_budget_ms)
            except (TypeError, ValueError):
                raise SweepError(f"latency budget {latency_budget_ms!r} is not a number") from None
            if not math.isfinite(latency_budget_ms) or latency_budget_ms <= 0:
                raise SweepError(f"latency budget {latency_budget_ms} ms must be a positive number")
        elif self.needs_budget:
            raise SweepError(
                f"the {self.name} search needs a p99 latency budget (latency_budget_ms, --latency-budget-ms)"
            )
        self.latency_budget_ms = latency_budget_ms

    @property
    def params(self) -> dict[str, Any]:
        """Everything that changes which points the search picks (compared when a run resumes)."""
        return {"latency_budget_ms": self.latency_budget_ms}

    def to_dict(self) -> dict:
        return {"name": self.name, "params": self.params}

    def screening(self, settings: MeasureSettings) -> MeasureSettings | None:
        """The settings of this search's short screening measurements, made from the run's
        ``settings``; None: it measures every point it picks in full."""
        return None

    def judging(self, settings: MeasureSettings) -> MeasureSettings:
        """The settings of the points this search measures window by window (``measure(point,
        until=...)``), made from the run's ``settings``; the run's own by default."""
        return settings

    def run(self, space: SearchSpace, measure: Measure, log: SearchLog, screen: Measure | None = None) -> None:
        """Search; ``screen`` (given when ``screening`` asks for it) measures a point briefly."""
        self.search(space, measure, log, screen) if screen is not None else self.search(space, measure, log)
        if log.stopped is None:
            log.stop("every candidate the rules allowed was measured")

    def search(self, space: SearchSpace, measure: Measure, log: SearchLog) -> None:
        raise NotImplementedError


def check_resume(search: SearchStrategy | None, previous: Mapping[str, Any] | None) -> None:
    """Refuse to resume a run that another search (or the grid, ``search`` None) made: its points
    were chosen by other rules, and the log would mix two lines of reasoning."""
    if previous is None:
        return

    def identity(entry: Mapping[str, Any] | None) -> dict:
        return {"name": entry["name"], "params": entry["params"]} if entry else {"name": "grid", "params": {}}

    old, new = identity(previous.get("search")), identity(search.to_dict() if search is not None else None)
    if old != new:
        raise SweepError(
            f"cannot resume a run made by search {old} with search {new}; use the same search or another folder"
        )
