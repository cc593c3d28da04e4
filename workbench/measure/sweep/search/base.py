"""What every search shares: the space it may walk (only the plan's checked variants, batch sizes
and concurrency levels), the test a measured point must pass, and the log of what it measured and
why it stopped, kept in the run record so a resumed search shows the same reasoning.

Searches read rows through `SearchRow` (the objective, the pooled latencies the limits name, the
point's keys) and judge them by a `Judge` (the limits: a tensor sweep's p99 budget, an LLM sweep's
TTFT and ITL SLOs), so one strategy walks a tensor sweep's rows and an LLM sweep's alike.

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
from dataclasses import dataclass, field
from typing import Any, Protocol

from workbench.measure.engine.measure_settings import MeasureSettings
from workbench.measure.grid.plan import Point, SweepError, SweepPlan, Variant
from workbench.measure.grid.rows import PointRow, usable
from workbench.measure.store.bounded import BoundedPoint
from workbench.measure.sweep.search.effort import DecidedBy, EffortRule, WindowSummary, p99_limit, summaries

__all__ = [
    "SearchRow",
    "Judge",
    "WalkedSpace",
    "SearchSpace",
    "SearchLog",
    "SearchStrategy",
    "DecidedSearch",
    "Measure",
    "JudgedMeasure",
    "row_score",
    "meets_budget",
    "may_meet_budget",
    "check_resume",
    "throughput_high",
]

Measure = Callable[[Point], PointRow]


class SearchRow(Protocol):
    """What a search reads of a measured row, whatever the sweep kind (`PointRow`: inferences/s
    and p99; `LlmRow`: output tokens/s, TTFT p99 and ITL p99)."""

    @property
    def key(self) -> tuple: ...
    @property
    def variant(self) -> str: ...
    @property
    def error(self) -> str | None: ...
    @property
    def windows(self) -> float: ...
    @property
    def stopped(self) -> str | None: ...
    @property
    def objective(self) -> float:
        """What the search maximises (throughput, or output tokens/s)."""
        ...

    @property
    def objective_low(self) -> float:
        """The low end of its 95% interval (NaN: none)."""
        ...

    @property
    def objective_high(self) -> float: ...
    @property
    def latencies_ms(self) -> Mapping[str, float]:
        """The pooled latencies a `Judge`'s limits name (``{"p99": ...}``; ``{"TTFT p99": ...,
        "ITL p99": ...}``)."""
        ...

    @property
    def is_usable(self) -> bool:
        """Its figures can be trusted (the kind's one rule)."""
        ...

    @property
    def search_label(self) -> str:
        """The point in words (``1x2 batch 8 concurrency 4``; ``seqs4-tp1-x1 at concurrency 4``)."""
        ...

    @property
    def search_point(self) -> dict[str, Any]:
        """The point's keys beside its variant, as a search's log keeps them."""
        ...

    @property
    def search_figures(self) -> dict[str, float | None]:
        """The figures a search's log keeps of it (rounded; None: not measured)."""
        ...


def _all_within(row: SearchRow, limits: Mapping[str, float]) -> bool:
    latencies = row.latencies_ms
    return all(latencies[name] <= limit for name, limit in limits.items())


@dataclass(frozen=True)
class Judge:
    """What a search judges rows against, in its sweep kind's terms: ``limits`` (latency name ->
    ms, read from each row's `SearchRow.latencies_ms` and from each window the effort rule reads),
    and ``summarize``, how the kind's engine windows are read by the rule (effort.py's
    ``summaries`` for the load generator's, the LLM sweep's ``stream_summaries``)."""

    limits: Mapping[str, float] = field(default_factory=dict)
    summarize: Callable[[Sequence[Any]], list[WindowSummary]] = summaries

    def meets(self, row: SearchRow | None) -> bool:
        """Usable and every limit met."""
        return row is not None and row.is_usable and _all_within(row, self.limits)

    def score(self, row: SearchRow | None) -> float:
        """The objective of a row that meets every limit, else -inf (it can never be the answer)."""
        return row.objective if row is not None and self.meets(row) else -math.inf

    def text(self) -> str:
        """The limits in words (``p99 <= 20 ms``; ``TTFT p99 <= 500 ms and ITL p99 <= 50 ms``)."""
        return " and ".join(f"{name} <= {limit:g} ms" for name, limit in self.limits.items()) or "no latency limit"


class JudgedMeasure(Protocol):
    """The sweep's ``measure`` as a search that sets its own effort calls it: ``until`` ends the
    point's windows (effort.py) instead of the stability rule. ``point`` is the kind's, as
    `WalkedSpace.point` gives it (a tensor sweep's `Point`, an LLM sweep's); its row a `SearchRow`."""

    def __call__(self, point: Any, *, until: DecidedBy[Any] | None = None) -> SearchRow: ...


def meets_budget(row: PointRow, latency_budget_ms: float | None) -> bool:
    """Usable and, with a budget, p99 within it."""
    return Judge(p99_limit(latency_budget_ms)).meets(row)


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


class WalkedSpace(Protocol):
    """A sweep's space as a walk over its load reads it: variants, each a grid of (size index,
    load index) on axes that both grow the load (a tensor variant: batch size x concurrency; an LLM
    variant: one size x its concurrency levels or request rates), in ascending order."""

    @property
    def variants(self) -> Sequence[Any]: ...
    @property
    def size(self) -> int: ...
    def shape(self) -> tuple[int, int]:
        """(sizes, load levels) of every variant."""
        ...

    def point(self, variant: int, size: int, level: int) -> Any:
        """The point at these indices (what the sweep's ``measure`` takes)."""
        ...

    def label(self, variant: int, size: int, level: int | None = None) -> str:
        """A cell (a variant at one size), or one of its points, in words."""
        ...

    def level_text(self, level: int) -> str:
        """One load level in words (``concurrency 4``, ``2 req/s``)."""
        ...

    def order(self) -> list[int]:
        """The variants' indices in the order a walk loads them (the likeliest answer first)."""
        ...

    def serving_first(self) -> list[int]:
        """The order for a walk whose variants decide nothing for one another (capacity): the one
        the server serves now first, as loading it again starts nothing; else `order`."""
        ...


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

    def shape(self) -> tuple[int, int]:
        return len(self.batch_sizes), len(self.concurrency)

    def label(self, variant: int, batch: int, concurrency: int | None = None) -> str:
        text = f"{self.variants[variant].label} batch {self.batch_sizes[batch]}"
        return text if concurrency is None else f"{text} {self.level_text(concurrency)}"

    def level_text(self, level: int) -> str:
        return f"concurrency {self.concurrency[level]}"

    def order(self) -> list[int]:
        """First the likeliest answer (most cores per instance, then most cores), then the rest,
        fewest instances first (the cheaper load to follow): the reasons are adaptive.py's."""

        def likely(v: int) -> tuple[int, int, int]:
            allocation = self.variants[v].allocation
            return (-allocation.cores_per_instance, -allocation.cores, v)

        first, *rest = sorted(range(len(self.variants)), key=likely)
        return [first, *sorted(rest, key=lambda v: (self.variants[v].allocation.instances, likely(v)))]

    def serving_first(self) -> list[int]:
        return self.order()  # a tensor sweep's loads are seconds: the likeliest answer first


def _label(row: PointRow) -> str:
    return f"{row.variant} batch {row.batch_size} concurrency {row.concurrency}"


def throughput_high(row: PointRow) -> float:
    """The high end of the row's throughput interval (its throughput when it has none)."""
    return row.throughput if math.isnan(row.throughput_high) else row.throughput_high


class SearchLog:
    """Every point a search measured (or found on disk), with the reason it was chosen, and why
    the search stopped. ``to_dict`` is what the run record keeps under ``search``."""

    def __init__(self, name: str, params: Mapping[str, Any], space: WalkedSpace) -> None:
        self.name, self.params, self.space = name, dict(params), space
        self.steps: list[dict] = []
        self.screens: list[dict] = []
        self.notes: list[str] = []
        self.stopped: str | None = None
        self.confirmed: list[str] = []  # points measured again before the answer was named (confirm.py)
        self.bounded: list[BoundedPoint] = []  # points left unmeasured because a bound decided them
        self._measured: set[tuple] = set()
        self._screened: set[tuple] = set()

    @staticmethod
    def _entry(number: int, row: SearchRow, why: str, meets: bool) -> dict:
        return {
            "step": number,
            "variant": row.variant,
            **row.search_point,
            "why": why,
            **row.search_figures,
            "meets_budget": meets,  # every limit: a p99 budget, or an LLM sweep's SLO
            "error": row.error,
            "windows": None if math.isnan(row.windows) else int(row.windows),
            "stopped": row.stopped,
        }

    def measured(
        self, row: SearchRow, why: str, latency_budget_ms: float | None = None, *, judge: Judge | None = None
    ) -> None:
        """A point measured in full, judged by ``judge`` (default: the p99 budget ``latency_budget_ms``)."""
        judge = judge if judge is not None else Judge(p99_limit(latency_budget_ms))
        self.steps.append(self._entry(len(self.steps) + 1, row, why, judge.meets(row)))
        self._measured.add(row.key)

    def screened(self, row: PointRow, why: str, latency_budget_ms: float | None) -> None:
        """A short screening measurement: it chose what to measure in full, and is no result
        (``meets_budget`` there is the screen's own test, ``may_meet_budget``)."""
        self.screens.append(self._entry(len(self.screens) + 1, row, why, may_meet_budget(row, latency_budget_ms)))
        self._screened.add(row.key)

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
            "measured_points": len(self._measured),
            "screened_points": len(self._screened),
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

    def __init__(self, latency_budget_ms: float | None = None, *, judge: Judge | None = None) -> None:
        self.judged_by_kind = judge is not None  # an LLM sweep's SLO, not a p99 budget
        if judge is not None:
            if latency_budget_ms is not None:
                raise SweepError(f"the {self.name} search: give a latency budget or a judge, not both")
            self.latency_budget_ms: float | None = None
            self.judge = judge
            return
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
        self.judge = Judge(p99_limit(latency_budget_ms))

    @property
    def budget_ms(self) -> float:
        """The p99 budget of a search that needs one (``needs_budget``, checked in ``__init__``)."""
        if self.latency_budget_ms is None:
            raise SweepError(f"the {self.name} search needs a p99 latency budget")
        return self.latency_budget_ms

    @property
    def params(self) -> dict[str, Any]:
        """Everything that changes which points the search picks (compared when a run resumes)."""
        if self.judged_by_kind:
            return {"limits": dict(self.judge.limits)}
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

    def search(self, space: SearchSpace, measure: Measure, log: SearchLog, screen: Measure | None = None) -> None:
        """``screen``: given only to a search whose ``screening`` asks for it."""
        raise NotImplementedError


class DecidedSearch(SearchStrategy):
    """A search that measures each point it picks window by window until the effort rule decides
    it (effort.py): ``min_windows`` windows at least, ``max_windows`` at most."""

    needs_budget = True
    measures_by_window = True
    reloads_to_confirm = False  # a reload costs more than a point: the answer states its confidence instead

    def __init__(
        self,
        latency_budget_ms: float | None = None,
        *,
        judge: Judge | None = None,
        min_windows: int = 3,
        max_windows: int = 10,
    ) -> None:
        super().__init__(latency_budget_ms, judge=judge)
        try:
            self.rule = EffortRule(min_windows, max_windows)
        except ValueError as err:
            raise SweepError(f"{self.name} search: {err}") from None

    @property
    def params(self) -> dict[str, Any]:
        return {**super().params, "min_windows": self.rule.min_windows, "max_windows": self.rule.max_windows}

    # Wider than SearchStrategy.search, which types the tensor sweep's grid and plain measure: a
    # decided search walks any kind's space and needs a measure that takes ``until``.
    def search(self, space: WalkedSpace, measure: JudgedMeasure, log: SearchLog) -> None:  # type: ignore[override]
        raise NotImplementedError

    def walk(self, space: WalkedSpace, measure: JudgedMeasure, log: SearchLog) -> None:
        """``run`` on a kind's own space (an LLM sweep's): the search, then why it stopped."""
        self.search(space, measure, log)
        if log.stopped is None:
            log.stop("every candidate the rules allowed was measured")


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
