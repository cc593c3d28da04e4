"""An LLM sweep's effort mode: each point measured until it is decided, by the tensor sweeps' rule
(``sweep/search/effort.py``: one rule), against the incumbent (the best point so far meeting the
SLO, by output tokens/s) and the SLO's limits instead of a p99 budget.

The rule reads each streaming window (`StreamWindow`) as a `WindowSummary`: output tokens/s as
its throughput, and the window's own TTFT p99 and ITL p99 (ms, nearest rank over the requests
that completed in it) under the names the SLO's answer uses (``answers.slo_text``). A window in
which no request completed has no latency (NaN): the rule leaves it out. A point's decision line
states its pooled figures first (``pooled_text``: its row's), the rule's per-window reading after.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from workbench.measure.engine.stats import summarize_latencies
from workbench.measure.engine.streaming import Slo
from workbench.measure.engine.streaming.load import StreamWindow
from workbench.measure.grid.rows import interval_text
from workbench.measure.llm.answers import latencies_text, load_text
from workbench.measure.llm.rows import ITL_P99, TTFT_P99, LlmRow, usable_llm
from workbench.measure.sweep.search.adaptive import AdaptiveEffort
from workbench.measure.sweep.search.base import DecidedSearch, Judge
from workbench.measure.sweep.search.capacity import CapacitySearch
from workbench.measure.sweep.search.effort import DecidedBy, EffortRule, Incumbent, WindowSummary

__all__ = [
    "TTFT_P99",
    "ITL_P99",
    "LLM_SEARCHES",
    "LlmSearch",
    "slo_limits",
    "slo_judge",
    "stream_summaries",
    "meets",
    "LlmEffort",
    "pooled_text",
]

# the searches an LLM sweep takes (``workbench sweep --search``, the LLM sweep panel's strategy): every
# point as planned, each measured until stable; the tensor sweeps' adaptive walk over each variant's
# loads (sweep/search/adaptive.py); or each variant's capacity by bisection (sweep/search/capacity.py),
# each point those measure until decided
LLM_SEARCHES = ("grid", "adaptive", "capacity")


@dataclass(frozen=True)
class LlmSearch:
    """Which points an LLM sweep measures and how long, as one value: ``grid`` (every point, each
    until stable, the engine's windows), ``adaptive`` (the points the adaptive walk cannot rule
    out) or ``capacity`` (per variant, the highest load meeting the SLO, by bisection), each of
    those two measuring a point until decided: an `EffortRule` of ``min_windows`` to
    ``max_windows`` windows. What ``--search grid|adaptive|capacity`` says on the command line and
    the LLM sweep panel's strategy controls describe. The windows are checked only for a search: a
    panel keeps them while the user switches, and the grid does not use them."""

    name: str = "grid"
    min_windows: int = EffortRule.min_windows
    max_windows: int = EffortRule.max_windows

    def __post_init__(self) -> None:
        if self.name not in LLM_SEARCHES:
            raise ValueError(
                f"unknown search {self.name!r} for an LLM sweep; choose {', '.join(LLM_SEARCHES[:-1])} "
                f"or {LLM_SEARCHES[-1]}"
            )
        self.effort()  # refuses the windows the rule would refuse, when the value is made

    def effort(self) -> EffortRule | None:
        """``run_llm_sweep``'s ``effort``: None for the grid, else the rule (ValueError names a bad window count)."""
        if self.name == "grid":
            return None
        return EffortRule(min_windows=self.min_windows, max_windows=self.max_windows)

    def strategy(self, slo: Slo) -> DecidedSearch | None:
        """The search strategy it names, judged by ``slo`` (`slo_judge`); None for the grid."""
        if self.name == "grid":
            return None
        judge, windows = slo_judge(slo), {"min_windows": self.min_windows, "max_windows": self.max_windows}
        if self.name == "capacity":
            return CapacitySearch(judge=judge, **windows)
        # the run's own windows: a streamed request takes seconds, a shorter window holds none
        return AdaptiveEffort(judge=judge, window_s=None, **windows)


def slo_limits(slo: Slo) -> dict[str, float]:
    """The rule's limits of an SLO: its TTFT and ITL p99 limits in ms (a None limit: none)."""
    limits = {TTFT_P99: slo.ttft_ms, ITL_P99: slo.itl_ms}
    return {name: float(limit) for name, limit in limits.items() if limit is not None}


def slo_judge(slo: Slo) -> Judge:
    """How a search judges an LLM sweep's rows and windows: the SLO's limits, the streaming windows."""
    return Judge(slo_limits(slo), stream_summaries)


def _p99(values: list[float]) -> float:
    return summarize_latencies(np.array(values))["p99"] if values else math.nan


def stream_summaries(windows: Sequence[StreamWindow]) -> list[WindowSummary]:
    """The streaming engine's windows as the effort rule reads them: output tokens/s, and the TTFT
    p99 and ITL p99 of the requests completed in each window alone."""
    out = []
    for w in windows:
        ok = [r for r in w.done if r.ok and r.token_ns]
        latencies = {
            TTFT_P99: _p99([r.ttft_ms for r in ok]),
            ITL_P99: _p99([r.itl_ms for r in ok if r.output_tokens > 1]),
        }
        out.append(WindowSummary(w.output_tokens_per_s, latencies, len(w.done), w.duration_s))
    return out


def pooled_text(row: LlmRow) -> str:
    """A point's figures over every request it measured, as its row, the table and the Best line
    show them (the output tokens/s with the row's 95% interval): what its decision line states first."""
    tokens = f"{row.output_tokens_per_s:.1f} output tok/s" + interval_text(
        row.output_tokens_per_s_low, row.output_tokens_per_s_high, 1
    )
    return f"{latencies_text(row.ttft_p99_ms, row.itl_p99_ms)}, {tokens}"


def meets(row: LlmRow, slo: Slo) -> bool:
    """Whether a measured row meets the SLO on its p99s (``answers.meeting``'s rule for one row)."""
    return (
        usable_llm(row.to_dict())
        and (slo.ttft_ms is None or row.ttft_p99_ms <= slo.ttft_ms)
        and (slo.itl_ms is None or row.itl_p99_ms <= slo.itl_ms)
    )


class LlmEffort:
    """The effort mode of one sweep: the rule, the SLO's limits and the incumbent so far.
    ``until()`` gives a point's engine ``until``; ``measured(row, until)`` moves the incumbent to
    the row when it meets the SLO with more output tokens/s, read from the windows the rule saw
    (its bootstrap interval where it saw fewer than two, as a row read back on a resume)."""

    def __init__(self, rule: EffortRule, slo: Slo) -> None:
        self.rule, self.slo, self.limits = rule, slo, slo_limits(slo)
        self.best: LlmRow | None = None
        self.incumbent: Incumbent | None = None

    def until(self) -> DecidedBy[StreamWindow]:
        return DecidedBy(self.rule, self.incumbent, self.limits, stream_summaries)

    def measured(self, row: LlmRow, until: DecidedBy[StreamWindow] | None = None) -> None:
        if row.error or not meets(row, self.slo):
            return
        if self.best is not None and not row.output_tokens_per_s > self.best.output_tokens_per_s:
            return
        self.best = row
        label = f"{row.variant} at {load_text(row.concurrency, row.request_rate)}"
        if until is not None and len(until.seen) >= 2:
            self.incumbent = Incumbent.from_windows(label, until.seen)
        else:
            self.incumbent = Incumbent(
                label, row.output_tokens_per_s, row.output_tokens_per_s_low, row.output_tokens_per_s_high
            )
