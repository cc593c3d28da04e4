"""How long to measure one point: until it is decided, not to a fixed sample size.

A point is measured window by window. After each window the rule below reads the windows so far
against the incumbent (the best point found so far that meets the budget) and the p99 budget,
and says one of:

- ``cannot win``: the low end of its p99 interval is past the budget; whatever its throughput,
  it is not the answer (and more load will not bring it back under);
- ``separated below``: its throughput interval ends below the start of the incumbent's, and its
  p99 interval ends within the budget (a concurrency bisection steers by whether a point meets
  the budget: a p99 that straddles it is measured on);
- ``separated above``: its throughput interval starts above the end of the incumbent's (or there
  is no incumbent yet) and the high end of its p99 interval is within the budget: a new incumbent,
  known as one;
- ``cap reached``: ``max_windows`` windows and still undecided: a contender, given the full care;
- ``continue``.

So points that cannot win stop after ``min_windows`` windows (a screen of a few windows), and
only the points whose intervals touch the incumbent's or the budget are measured to the cap.

The intervals are Student-t 95% intervals of the per-window values (throughput, and p99 read per
window): window-to-window drift on a busy machine is the noise that matters here, and a pooled
bootstrap of requests (the row's own interval, stats.bootstrap_spread) does not see it. With
``min_windows`` >= 3 the t quantile (4.30 for two degrees of freedom) keeps a screen from ruling
on two lucky windows. The incumbent is read as its row records it (``throughput_low/high``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    from workbench.measure.engine.loadgen import Until, WindowResult

__all__ = ["WindowSummary", "Incumbent", "Interval", "Verdict", "EffortRule", "t_interval", "STOP_KINDS", "summaries",
           "until_decided"]

# two-sided 95% Student-t quantiles (0.975) by degrees of freedom 1..30; past 30 the normal's 1.96
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
         2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
         2.045, 2.042)

STOP_KINDS = ("cannot win", "separated below", "separated above", "cap reached")


@dataclass(frozen=True)
class WindowSummary:
    """What one measurement window gave: inferences/s, the window's own p99 (ms), its length."""

    throughput: float
    p99_ms: float
    requests: int = 0
    duration_s: float = math.nan


@dataclass(frozen=True)
class Interval:
    mean: float
    low: float
    high: float

    def text(self, unit: str = "") -> str:
        return f"{self.mean:.1f}{unit} [{self.low:.1f}, {self.high:.1f}]"


def t_interval(values: Sequence[float]) -> Interval:
    """Mean of ``values`` with its 95% Student-t interval (unbounded for fewer than 2 values)."""
    n = len(values)
    mean = math.fsum(values) / n if n else math.nan
    if n < 2:
        return Interval(mean, -math.inf, math.inf)
    sd = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1))
    half = (_T975[n - 2] if n - 1 <= len(_T975) else 1.96) * sd / math.sqrt(n)
    return Interval(mean, mean - half, mean + half)


@dataclass(frozen=True)
class Incumbent:
    """The answer so far: its label and throughput interval as its row records it."""

    label: str
    throughput: float
    throughput_low: float
    throughput_high: float

    @property
    def low(self) -> float:
        return self.throughput if math.isnan(self.throughput_low) else self.throughput_low

    @property
    def high(self) -> float:
        return self.throughput if math.isnan(self.throughput_high) else self.throughput_high


@dataclass(frozen=True)
class Verdict:
    """The rule's word after ``windows`` windows: ``kind`` (a ``STOP_KINDS`` entry or
    ``continue``) and why, in numbers."""

    kind: str
    why: str
    windows: int

    @property
    def stop(self) -> bool:
        return self.kind != "continue"

    def text(self) -> str:
        """What a row's ``stopped`` column says."""
        return f"{self.kind} after {self.windows} window(s): {self.why}"


@dataclass(frozen=True)
class EffortRule:
    """The rule with its bounds: no verdict before ``min_windows`` windows, none past ``max_windows``."""

    min_windows: int = 3
    max_windows: int = 10

    def __post_init__(self) -> None:
        if not isinstance(self.min_windows, int) or self.min_windows < 2:
            raise ValueError(f"min_windows {self.min_windows!r} must be a whole number >= 2 (an interval needs two)")
        if not isinstance(self.max_windows, int) or self.max_windows < self.min_windows:
            raise ValueError(f"max_windows {self.max_windows!r} must be a whole number >= min_windows "
                             f"({self.min_windows})")

    def judge(self, windows: Sequence[WindowSummary], incumbent: Incumbent | None,
              latency_budget_ms: float | None) -> Verdict:
        """The verdict on a point after ``windows`` (see the module's docstring)."""
        k = len(windows)
        if k < self.min_windows:
            return Verdict("continue", f"fewer than {self.min_windows} windows", k)
        thr = t_interval([w.throughput for w in windows])
        p99 = t_interval([w.p99_ms for w in windows])
        if latency_budget_ms is not None and p99.low > latency_budget_ms:
            return Verdict("cannot win", f"p99 {p99.text(' ms')} is past the {latency_budget_ms:g} ms budget", k)
        within = latency_budget_ms is None or p99.high <= latency_budget_ms
        # below the incumbent, and its p99 decided too: the bisection steers by whether it meets the budget
        if incumbent is not None and thr.high < incumbent.low and within:
            return Verdict("separated below", f"throughput {thr.text()} ends below {incumbent.label}'s "
                                              f"[{incumbent.low:.1f}, {incumbent.high:.1f}]", k)
        if within and (incumbent is None or thr.low > incumbent.high):
            budget = "" if latency_budget_ms is None else f", p99 {p99.text(' ms')} within {latency_budget_ms:g} ms"
            over = ("no incumbent yet" if incumbent is None else
                    f"starts above {incumbent.label}'s [{incumbent.low:.1f}, {incumbent.high:.1f}]")
            return Verdict("separated above", f"throughput {thr.text()} {over}{budget}", k)
        if k >= self.max_windows:
            undecided = []
            if not within:
                undecided.append(f"p99 {p99.text(' ms')} straddles the {latency_budget_ms:g} ms budget")
            if incumbent is not None and thr.low <= incumbent.high:
                undecided.append(f"throughput {thr.text()} overlaps {incumbent.label}'s "
                                 f"[{incumbent.low:.1f}, {incumbent.high:.1f}]")
            return Verdict("cap reached", "; ".join(undecided) or "undecided", k)
        return Verdict("continue", f"throughput {thr.text()}, p99 {p99.text(' ms')}: not yet separated", k)


def summaries(windows: Sequence["WindowResult"]) -> list[WindowSummary]:
    """The load generator's windows as the rule reads them."""
    return [WindowSummary(w.throughput, w.latency(99) / 1000.0, w.requests, w.duration_s) for w in windows]


def until_decided(rule: EffortRule, incumbent: Incumbent | None, latency_budget_ms: float | None) -> "Until":
    """The load generator's ``until``: after each window, the rule's verdict text when it stops."""
    def until(windows: list["WindowResult"]) -> str | None:
        verdict = rule.judge(summaries(windows), incumbent, latency_budget_ms)
        return verdict.text() if verdict.stop else None
    return until
