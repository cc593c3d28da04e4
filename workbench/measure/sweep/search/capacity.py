"""Capacity: per variant, the highest load whose latencies meet every limit (an LLM sweep's TTFT
and ITL SLOs, a tensor sweep's p99 budget), found by bisection over the variant's load levels with
each level measured until the effort rule decides it against the limits alone (effort.py, no
incumbent: "separated above" when every latency's interval ends within its limit, "cannot win"
when one starts past it). The answer is the variant whose capacity point gives the most throughput
(output tokens/s), with the runner-up of another variant and how sure their order is (the kind's
answer).

Latency grows with the load (bounds.py), so a level that meets the limits vouches for every lower
one and a level that misses condemns every higher one: about log2(levels) + 1 points per variant
and size instead of all of them. Each load left out is noted with the measured load that decided
it and that load's reading. This is what AIPerf's, GuideLLM's and vLLM bench's users ask for
most: the highest load that still meets the latency targets, found without measuring everything.
"""

from __future__ import annotations

from workbench.measure.sweep.search.base import DecidedSearch, JudgedMeasure, SearchLog, SearchRow, WalkedSpace
from workbench.measure.sweep.search.bounds import VariantFacts
from workbench.measure.sweep.search.effort import DecidedBy

__all__ = ["CapacitySearch"]


class CapacitySearch(DecidedSearch):
    """Every variant (and size) bisected on its loads under the limits, each level measured until
    decided: ``min_windows`` windows at least, ``max_windows`` at most."""

    name = "capacity"

    def search(self, space: WalkedSpace, measure: JudgedMeasure, log: SearchLog) -> None:  # type: ignore[override]
        sizes, levels = space.shape()
        limits = self.judge.text()
        found: list[SearchRow] = []
        for v in space.serving_first():
            facts = VariantFacts(levels)
            rows: dict[tuple[int, int], SearchRow] = {}  # the variant's measured points, by (size, level)
            for s in reversed(range(sizes)):
                row = self._bisect(space, v, s, facts, rows, measure, log)
                if row is not None:
                    found.append(row)
                self._note_left_out(space, v, s, rows, log)
        if not found:
            log.stop(f"every variant bisected on its loads under {limits}: none meets the limits at any load")
            return
        best = max(found, key=lambda r: r.objective)
        log.stop(
            f"every variant bisected on its loads under {limits}, each level measured until decided; "
            f"the most throughput at capacity: {best.search_label}, {best.objective:.1f}"
        )

    def _bisect(
        self,
        space: WalkedSpace,
        v: int,
        s: int,
        facts: VariantFacts,
        rows: dict[tuple[int, int], SearchRow],
        measure: JudgedMeasure,
        log: SearchLog,
    ) -> SearchRow | None:
        """The cell's highest level meeting the limits (its row), None when even the lowest misses;
        each point it measures joins ``rows`` (the variant's, by (size, level))."""
        cell, level, limits = space.label(v, s), space.level_text, self.judge.text()
        why = "the middle of the loads"
        while True:
            low, high = facts.bracket(s)
            if high - low > 1:
                probe = (low + high) // 2
            elif low >= 0 and (s, low) not in rows:  # vouched for by a larger size: measured for its throughput
                probe, why = low, "the capacity, known to meet the limits (a larger size did there)"
            else:
                break
            until = DecidedBy(self.rule, None, self.judge.limits, self.judge.summarize)
            row = measure(space.point(v, s, probe), until=until)
            log.measured(row, why, judge=self.judge)
            meets = self.judge.meets(row)
            rows[(s, probe)] = row
            facts.add(s, probe, meets, row.objective_high)
            why = "bisect: the last met the limits, try higher" if meets else "bisect: the last missed, try lower"
        if low < 0:
            log.note(f"{cell}: no capacity: misses {limits} already at the lowest load, {level(0)}")
            return None
        edge = f", misses them at {level(high)}" if high < facts.levels else ", the highest load planned"
        log.note(f"{cell}: capacity {level(low)}: meets {limits} there{edge}")
        return rows.get((s, low))

    def _note_left_out(
        self, space: WalkedSpace, v: int, s: int, rows: dict[tuple[int, int], SearchRow], log: SearchLog
    ) -> None:
        """Note each level of the cell left unmeasured with the bound that decided it: a measured
        point no heavier that missed the limits (latency grows with the load), else one no lighter
        that met them (the capacity is at or above it)."""
        limits = self.judge.text()
        missed = [key for key, row in rows.items() if not self.judge.meets(row)]
        met = [key for key, row in rows.items() if self.judge.meets(row)]
        for c in range(space.shape()[1]):
            if (s, c) in rows:
                continue
            heavier_miss = max((k for k in missed if k[0] <= s and k[1] <= c), default=None)
            lighter_meet = min((k for k in met if k[0] >= s and k[1] >= c), default=None)
            if heavier_miss is not None:
                by = rows[heavier_miss]
                why = (
                    f"{by.search_label}, no heavier, missed {limits} ({self._reading(by)}): latency grows with the load"
                )
            elif lighter_meet is not None:
                by = rows[lighter_meet]
                why = f"{by.search_label}, no lighter, met {limits} ({self._reading(by)}): the capacity is there or higher"
            else:  # not reached: a bisection decides every level of its cell
                continue
            log.note(f"{space.label(v, s, c)} left out by a bound: {why}")

    def _reading(self, row: SearchRow) -> str:
        """A measured point's latencies the limits name, or why it has none."""
        if row.error:
            return f"failed: {row.error}"
        return ", ".join(f"{name} {row.latencies_ms[name]:.1f} ms" for name in self.judge.limits)
