"""The answer with the measurement effort spent where it decides: which points, and how long each.

Which points: each variant is loaded once and walked from its heaviest loads down (bounds.py).
p99 grows with batch size and concurrency, so a point that meets the budget vouches for every
lighter one; throughput grows with the load until it saturates, so a measured point bounds every
lighter one. Per batch size, largest first, the concurrency levels still open are probed from just
above the highest level known to meet the budget (the middle, when none is known). A level is
skipped when a heavier point's throughput already ends below the incumbent's (the best point so far
that meets the budget). A batch size whose best level under the budget is bounded so is left
unmeasured, and so is the level known to meet the budget when it cannot win. Before any other
point of a variant after the first, its heaviest point is measured, against the incumbent's
throughput alone. When that point's interval ends below the incumbent's, the whole variant cannot
win.

The first variant is the one with the most cores per instance, then the most cores. Under a p99
budget the fastest single request tends to win, and an early strong incumbent lets the bound rule
out more; in the three 36-point grids of benchmarks/README.md the answer was 1x2. The rest go
fewest instances first: each load waits for the instances of the variant before it to exit, and a
Python-backend stub takes about 1.5 s to exit (measured here: an unload of one stub 1.5 s, of two
3.1 s).

How long: window by window, until the point's interval separates it from the incumbent and from the
budget, or the cap (effort.py). A point far below the incumbent, or clearly over the budget, stops
after a few windows; a contender is measured to the cap.

The answer is re-measured (confirm.py) only while its variant is still loaded: a reload costs
more than a point here, and the answer states its confidence whichever way (answer.py).

The walk reads rows through `SearchRow` and judges them by the strategy's `Judge`, so an LLM
sweep's variants are walked the same way (llm/search_space.py): one size, its loads (concurrency
levels or request rates) as the levels, output tokens/s as the throughput and the SLO's TTFT and
ITL p99 as the limits. An LLM variant's load takes far longer than a point (a vLLM engine starts in
~25 s on 2 cores, a point takes a few), so the bound that rules a whole variant out saves most there.
"""

from __future__ import annotations

import dataclasses
import math

from workbench.measure.engine.measure_settings import MeasureSettings
from workbench.measure.grid.plan import SweepError
from workbench.measure.grid.rows import PointRow
from workbench.measure.sweep.search.base import (
    DecidedSearch,
    Judge,
    JudgedMeasure,
    SearchLog,
    SearchRow,
    SearchSpace,
    WalkedSpace,
)
from workbench.measure.sweep.search.bounds import VariantFacts
from workbench.measure.sweep.search.effort import DecidedBy, Incumbent, t_interval

__all__ = ["AdaptiveEffort", "WINDOW_S", "variant_order"]

WINDOW_S = 0.5  # the adaptive search's window (the run's when shorter); see judging()


def variant_order(space: WalkedSpace) -> list[int]:
    """Indices of the space's variants in the order the walk loads them (`WalkedSpace.order`)."""
    return space.order()


class AdaptiveEffort(DecidedSearch):
    """Each variant walked from its heaviest loads down, points bounded by heavier ones left out,
    each point measured until decided: ``min_windows`` windows at least (the screen of a point that
    cannot win), ``max_windows`` at most (a contender)."""

    name = "adaptive"

    def __init__(
        self,
        latency_budget_ms: float | None = None,
        *,
        judge: Judge | None = None,
        min_windows: int = 3,
        max_windows: int = 10,
        window_s: float | None = WINDOW_S,
    ) -> None:
        super().__init__(latency_budget_ms, judge=judge, min_windows=min_windows, max_windows=max_windows)
        if window_s is not None and not (isinstance(window_s, (int, float)) and 0 < window_s <= 60):
            raise SweepError(
                f"adaptive search: window_s {window_s!r} must be seconds in (0, 60], or None for the run's window"
            )
        self.window_s = window_s

    @property
    def params(self) -> dict:
        return {**super().params, "window_s": self.window_s, "walk": "bounded"}

    def judging(self, settings: MeasureSettings) -> MeasureSettings:
        """Windows of ``window_s`` (never longer than the run's): the rule reads windows, not requests."""
        if self.window_s is None:
            return settings
        return dataclasses.replace(settings, window_s=min(self.window_s, settings.window_s))

    def search(self, space: WalkedSpace, measure: JudgedMeasure, log: SearchLog) -> None:  # type: ignore[override]
        _Walk(self, space, measure, log).run()


class _Walk:
    """One run of the adaptive search: the incumbent, and the facts of the variant being walked."""

    def __init__(self, search: AdaptiveEffort, space: WalkedSpace, measure: JudgedMeasure, log: SearchLog) -> None:
        self.rule, self.judge = search.rule, search.judge
        self.space, self.measure, self.log = space, measure, log
        self.sizes, self.levels = space.shape()
        self.best: SearchRow | None = None
        self.incumbent: Incumbent | None = None
        self.left_out = 0  # batch sizes and variants decided without measuring their points
        self.rows: dict[tuple[int, int], SearchRow] = {}  # the walked variant's measured points

    def run(self) -> None:
        space = self.space
        for v in variant_order(space):
            facts = VariantFacts(self.levels)
            self.rows = {}
            if self.incumbent is not None and not self._worth_walking(v, facts):
                for b in range(self.sizes):
                    self._record_left_out(v, b, facts)
                continue
            for b in reversed(range(self.sizes)):
                self._walk_batch(v, b, facts)
                self._record_left_out(v, b, facts)
        self._stop()

    def _record_left_out(self, v: int, b: int, facts: VariantFacts) -> None:
        """Log each level of this batch size left unmeasured with the bound that decided it: a
        lighter point that missed the budget (p99), else a heavier point whose throughput ends
        below the incumbent's, else a heavier point that meets the budget (a lighter one cannot
        beat it). Tensor sweeps only: their rows and p99 budget are what the record's bounds read."""
        if not isinstance(self.space, SearchSpace):
            return
        budget = self.judge.limits["p99"]  # a tensor walk is judged by its p99 budget (needs_budget)
        for c in range(self.levels):
            if facts.measured(b, c):
                continue
            point = self.space.point(v, b, c)
            missed = facts.missed_by(b, c)
            bound, meeting = facts.bound(b, c), facts.bound(b, c, meeting=True)
            if missed is not None:
                self.log.left_out_by_p99(point, self._point_row(missed), budget)
            elif self.incumbent is not None and bound.by is not None and bound.below(self.incumbent.low):
                self.log.left_out_by_throughput(
                    point, self._point_row(bound.by), bound.throughput, self.incumbent.low, self.incumbent.text()
                )
            elif meeting.by is not None:
                self.log.left_out_by_throughput(point, self._point_row(meeting.by), meeting.throughput)

    def _point_row(self, cell: tuple[int, int]) -> PointRow:
        row = self.rows[cell]
        assert isinstance(row, PointRow)  # a tensor walk measures PointRows
        return row

    def _judged(self, v: int, b: int, c: int, why: str, facts: VariantFacts, *, throughput_only: bool = False) -> None:
        """Measure one point until decided; it may become the incumbent, and it joins the facts."""
        limits = {} if throughput_only else self.judge.limits
        until = DecidedBy(self.rule, self.incumbent, limits, self.judge.summarize)
        row = self.measure(self.space.point(v, b, c), until=until)
        self.log.measured(row, why, judge=self.judge)
        self.rows[(b, c)] = row
        if self.judge.score(row) > self.judge.score(self.best):
            self.best = row
            label = row.search_label
            self.incumbent = (
                Incumbent.from_windows(label, until.seen)
                if len(until.seen) >= 2
                else Incumbent(label, row.objective, row.objective_low, row.objective_high)
            )
        high = (
            t_interval([w.throughput for w in until.seen]).high
            if len(until.seen) >= 2
            else (row.objective if math.isnan(row.objective_high) else row.objective_high)
        )
        facts.add(b, c, self.judge.meets(row), high)

    def _label(self, v: int, b: int, c: int | None = None) -> str:
        return self.space.label(v, b, c)

    def _worth_walking(self, v: int, facts: VariantFacts) -> bool:
        """Measure the variant's heaviest point against the incumbent's throughput: False when it
        ends below, as every other point of the variant then does."""
        top_b, top_c = self.sizes - 1, self.levels - 1
        self._judged(
            v,
            top_b,
            top_c,
            "the variant's heaviest load: its throughput bounds every other point's",
            facts,
            throughput_only=True,
        )
        bound = facts.bound(0, 0)
        if self.incumbent is not None and bound.below(self.incumbent.low):
            self.left_out += 1
            self.log.note(
                f"{self.space.variants[v].label}: cannot win, nothing else measured: its heaviest load's "
                f"throughput ends at {bound.throughput:.1f}, below {self.incumbent.text()}"
            )
            return False
        return True

    def _walk_batch(self, v: int, b: int, facts: VariantFacts) -> None:
        """Find this batch size's best level under the budget, measuring only what could win."""
        cell, level, limits = self._label(v, b), self.space.level_text, self.judge.text()
        while True:
            low, high = facts.bracket(b)
            if high == 0:
                self.log.note(f"{cell}: misses {limits} already at the lowest load, {level(0)}")
                return
            if high - low == 1 and facts.measured(b, low):
                self.log.note(
                    f"{cell}: meets {limits} at {level(low)}"
                    + (f" and misses it at {level(high)}" if high < facts.levels else ", the highest load")
                )
                return
            bound = facts.bound(b, high - 1)
            if self.incumbent is not None and bound.by is not None and bound.below(self.incumbent.low):
                self.left_out += 1
                where = (
                    f"{level(low)}, known to meet the limits"
                    if high - low == 1
                    else f"{level(max(low, 0))} to {level(high - 1)}"
                )
                self.log.note(
                    f"{cell}: cannot win, left unmeasured: its best within the limits ({where}) has at "
                    f"most the throughput of {self._label(v, *bound.by)}, {bound.throughput:.1f}, "
                    f"below {self.incumbent.text()}"
                )
                return
            if high - low == 1:  # the level known to meet the budget (a heavier point did) is the best here
                self._judged(v, b, low, "meets the limits (a heavier point did): measured for its throughput", facts)
                continue
            could_win = [
                c
                for c in range(low + 1, high)
                if self.incumbent is None or not facts.bound(b, c).below(self.incumbent.low)
            ]
            if low >= 0:
                probe, why = could_win[0], "the lowest level that could win above one known to meet the limits"
            else:
                probe, why = could_win[(len(could_win) - 1) // 2], "the middle of the levels that could win"
            self._judged(v, b, probe, why, facts)

    def _stop(self) -> None:
        kinds: dict[str, int] = {}
        for step in self.log.steps:
            if step.get("stopped"):
                kind = step["stopped"].split(" after ")[0]
                kinds[kind] = kinds.get(kind, 0) + 1
        spent = ", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items())) or "none measured here"
        best = self.best
        best_text = (
            f"best {best.search_label}" if best is not None and self.judge.meets(best) else "none meets the limits"
        )
        self.log.stop(
            f"every variant walked from its heaviest load down under {self.judge.text()}, "
            f"{self.left_out} batch size(s) or variant(s) left out by a heavier point's throughput, "
            f"each point measured until decided ({spent}); {best_text}"
        )
