"""How long to measure one point: until it is decided, not to a fixed sample size.

A point is measured window by window. After each window the rule below reads the windows so far
against the incumbent (the best point found so far that meets every latency limit) and the limits
(a tensor sweep's p99 budget; an LLM sweep's TTFT and ITL SLOs), and says one of:

- ``cannot win``: the low end of some latency's interval is past its limit; whatever its
  throughput, it is not the answer (and more load will not bring it back under);
- ``separated below``: its throughput interval ends below the start of the incumbent's: it is not
  the answer whatever its latencies. A latency that still straddles its limit is left so: a
  concurrency bisection steers by the mean, and a higher load, the only one that could beat the
  incumbent, would not have a lower latency (measured: waiting on the p99 here cost 3-7 windows a
  point and changed no answer);
- ``separated above``: its throughput interval starts above the end of the incumbent's (or there
  is no incumbent yet) and the high end of every latency's interval is within its limit: a new
  incumbent, known as one;
- ``cap reached``: ``max_windows`` windows and still undecided: a contender, given the full care;
- ``continue``.

So points that cannot win stop after ``min_windows`` windows (a screen of a few windows), and
only the points whose intervals touch the incumbent's or a limit are measured to the cap.

The intervals are Student-t 95% intervals of the per-window values (throughput, and each latency
read per window): window-to-window drift on a busy machine is the noise that matters here, and a
pooled bootstrap of requests (the row's own interval, stats.bootstrap_spread) does not see it.
Latencies are taken on the log scale (``latency_interval``): they are positive and their noise
multiplies. On a busy CI machine the tiny LLM's per-window ITL p99 read from a few ms to ~40 ms,
and the linear interval, [-3.0, 35.0] ms, never ruled out a 0.001 ms limit.
With ``min_windows`` >= 3 the t quantile (4.30 for two degrees of freedom) keeps a screen from
ruling on two lucky windows. The incumbent is read the same way, from its own windows
(``Incumbent.from_windows``), so both sides of a comparison carry the same kind of interval.

These readings decide when to stop; they are not the point's figures. A point's figures are its
row's, over every request it measured (the table's and the answer's); a verdict's line states those
first and gives the per-window intervals after them, as the rule's reason (``DecidedBy.decision``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Generic, TypeVar

if TYPE_CHECKING:
    from workbench.measure.engine.loadgen import WindowResult

__all__ = [
    "WindowSummary",
    "Incumbent",
    "Interval",
    "Verdict",
    "EffortRule",
    "t_interval",
    "latency_interval",
    "STOP_KINDS",
    "summaries",
    "DecidedBy",
    "p99_limit",
    "RULE_REASON",
]

# two-sided 95% Student-t quantiles (0.975) by degrees of freedom 1..30; past 30 the normal's 1.96
_T975 = (
    12.706,
    4.303,
    3.182,
    2.776,
    2.571,
    2.447,
    2.365,
    2.306,
    2.262,
    2.228,
    2.201,
    2.179,
    2.160,
    2.145,
    2.131,
    2.120,
    2.110,
    2.101,
    2.093,
    2.086,
    2.080,
    2.074,
    2.069,
    2.064,
    2.060,
    2.056,
    2.052,
    2.048,
    2.045,
    2.042,
)

STOP_KINDS = ("cannot win", "separated below", "separated above", "cap reached")
# how a decision line names the rule's per-window reading, after the point's pooled figures
RULE_REASON = "the rule's reason, read per window"


@dataclass(frozen=True)
class WindowSummary:
    """What one measurement window gave: its throughput (inferences/s, or output tokens/s), each
    latency the limits name, in ms, read over this window alone (``{"p99": 12.3}``, or
    ``{"TTFT p99": ..., "ITL p99": ...}``), and the window's size."""

    throughput: float
    latencies_ms: Mapping[str, float] = field(default_factory=dict)
    requests: int = 0
    duration_s: float = math.nan


def p99_limit(latency_budget_ms: float | None) -> dict[str, float]:
    """A tensor sweep's limits: its p99 budget (none without one)."""
    return {} if latency_budget_ms is None else {"p99": latency_budget_ms}


@dataclass(frozen=True)
class Interval:
    mean: float
    low: float
    high: float

    def text(self, unit: str = "") -> str:
        """The rule's reading, named as one: the mean of the windows' own values and its interval
        (a row's figure, pooled over every request, is another number; ``Verdict.text`` puts it first)."""
        return f"per-window mean {self.mean:.1f}{unit}, 95% [{self.low:.1f}, {self.high:.1f}]"


def t_interval(values: Sequence[float]) -> Interval:
    """Mean of ``values`` with its 95% Student-t interval (unbounded for fewer than 2 values)."""
    n = len(values)
    mean = math.fsum(values) / n if n else math.nan
    if n < 2:
        return Interval(mean, -math.inf, math.inf)
    sd = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1))
    half = (_T975[n - 2] if n - 1 <= len(_T975) else 1.96) * sd / math.sqrt(n)
    return Interval(mean, mean - half, mean + half)


def latency_interval(values: Sequence[float]) -> Interval:
    """The t-interval of the logarithms of ``values`` (latencies, ms), mapped back, beside their
    arithmetic mean; the plain t-interval when fewer than two or any not positive."""
    if len(values) < 2 or min(values) <= 0:
        return t_interval(values)
    logs = t_interval([math.log(v) for v in values])
    return Interval(math.fsum(values) / len(values), math.exp(logs.low), math.exp(logs.high))


@dataclass(frozen=True)
class Incumbent:
    """The answer so far: its label and throughput interval."""

    label: str
    throughput: float
    throughput_low: float
    throughput_high: float

    @classmethod
    def from_windows(cls, label: str, windows: Sequence[WindowSummary]) -> Incumbent:
        """The incumbent read as a candidate is: the t-interval of its windows' throughputs."""
        found = t_interval([w.throughput for w in windows])
        return cls(label, found.mean, found.low, found.high)

    @property
    def low(self) -> float:
        return self.throughput if math.isnan(self.throughput_low) else self.throughput_low

    @property
    def high(self) -> float:
        return self.throughput if math.isnan(self.throughput_high) else self.throughput_high

    def text(self) -> str:
        return f"{self.label}'s [{self.low:.1f}, {self.high:.1f}]"


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

    def text(self, pooled: str = "") -> str:
        """What a row's ``stopped`` column says. With ``pooled`` (the point's figures over every
        request it measured, as its row and the answer show them) that comes first, and the rule's
        per-window reading after it, named as the reason: one number per figure, said once."""
        if not pooled:
            return f"{self.kind} after {self.windows} window(s): {self.why}"
        return f"{self.kind} after {self.windows} window(s): {pooled}; {RULE_REASON}: {self.why}"


@dataclass(frozen=True)
class EffortRule:
    """The rule with its bounds: no verdict before ``min_windows`` windows, none past ``max_windows``."""

    min_windows: int = 3
    max_windows: int = 10

    def __post_init__(self) -> None:
        if not isinstance(self.min_windows, int) or self.min_windows < 2:
            raise ValueError(f"min_windows {self.min_windows!r} must be a whole number >= 2 (an interval needs two)")
        if not isinstance(self.max_windows, int) or self.max_windows < self.min_windows:
            raise ValueError(
                f"max_windows {self.max_windows!r} must be a whole number >= min_windows ({self.min_windows})"
            )

    def judge(
        self, windows: Sequence[WindowSummary], incumbent: Incumbent | None, limits: Mapping[str, float]
    ) -> Verdict:
        """The verdict on a point after ``windows``, against ``limits`` (latency name -> limit in
        ms, each read from every window's ``latencies_ms``, NaN ones left out; empty: throughput alone). See the
        module's docstring."""
        k = len(windows)
        if k < self.min_windows:
            return Verdict("continue", f"fewer than {self.min_windows} windows", k)
        thr = t_interval([w.throughput for w in windows])
        latency = {name: latency_interval(_read(windows, name)) for name in limits}
        for name, limit in limits.items():
            if latency[name].low > limit:
                return Verdict("cannot win", f"{name} {latency[name].text(' ms')} is past the {limit:g} ms limit", k)
        straddling = [
            f"{name} {latency[name].text(' ms')} straddles the {limit:g} ms limit"
            for name, limit in limits.items()
            if latency[name].high > limit
        ]
        if incumbent is not None and thr.high < incumbent.low:
            return Verdict(
                "separated below",
                f"throughput {thr.text()} ends below {incumbent.text()}" + "".join(f"; {s}" for s in straddling),
                k,
            )
        if not straddling and (incumbent is None or thr.low > incumbent.high):
            over = "no incumbent yet" if incumbent is None else f"starts above {incumbent.text()}"
            within = "".join(
                f", {name} {latency[name].text(' ms')} within {limit:g} ms" for name, limit in limits.items()
            )
            return Verdict("separated above", f"throughput {thr.text()} {over}{within}", k)
        if k >= self.max_windows:
            undecided = list(straddling)
            if incumbent is not None and thr.low <= incumbent.high:
                undecided.append(f"throughput {thr.text()} overlaps {incumbent.text()}")
            return Verdict("cap reached", "; ".join(undecided) or "undecided", k)
        return Verdict(
            "continue",
            f"throughput {thr.text()}"
            + "".join(f", {name} {latency[name].text(' ms')}" for name in limits)
            + ": not yet separated",
            k,
        )


def _read(windows: Sequence[WindowSummary], name: str) -> list[float]:
    """The windows' ``name`` latencies (a name they do not carry: KeyError, the caller's bug); a
    window that completed no request has none (NaN) and is left out (fewer than two left: the
    interval is unbounded, so the latency straddles its limit)."""
    return [v for v in (w.latencies_ms[name] for w in windows) if not math.isnan(v)]


def summaries(windows: Sequence[WindowResult]) -> list[WindowSummary]:
    """The load generator's windows as the rule reads them (each window's own p99)."""
    return [WindowSummary(w.throughput, {"p99": w.latency(99) / 1000.0}, w.requests, w.duration_s) for w in windows]


Window = TypeVar("Window")


class DecidedBy(Generic[Window]):
    """An engine's ``until``: after each window, the rule's verdict text when it stops (None:
    measure on). ``summarize`` reads the engine's windows as the rule does (``summaries`` for the
    load generator's). Keeps the windows it last read (``seen``), so a point that becomes the
    incumbent is read from them (``Incumbent.from_windows``)."""

    def __init__(
        self,
        rule: EffortRule,
        incumbent: Incumbent | None,
        limits: Mapping[str, float],
        summarize: Callable[[Sequence[Window]], list[WindowSummary]],
    ) -> None:
        self.rule, self.incumbent, self.limits, self.summarize = rule, incumbent, dict(limits), summarize
        self.seen: list[WindowSummary] = []
        self.verdict: Verdict | None = None  # the verdict that stopped the windows

    def __call__(self, windows: Sequence[Window]) -> str | None:
        self.seen = self.summarize(windows)
        verdict = self.rule.judge(self.seen, self.incumbent, self.limits)
        if not verdict.stop:
            return None
        self.verdict = verdict
        return verdict.text()

    def decision(self, stopped: str | None, pooled: str) -> str | None:
        """The measured point's ``stopped``: the rule's verdict with ``pooled``, the point's figures
        over every request (its row's), first; any other reason (a time limit) as it was."""
        if self.verdict is None or stopped != self.verdict.text():
            return stopped
        return self.verdict.text(pooled)
