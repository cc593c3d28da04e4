"""How sure an answer is: whether the best point's 95% throughput interval lies above the runner-up's
(``Confidence``), and if not, about how much more measuring each would need before they could be
apart. "Not separable on this machine" is an answer too: on a noisy machine two configurations can
be as good as each other. The intervals are one run's: the same point measured minutes apart read
855 and 811 infer/s here (benchmarks/README, search vs grid), so "separable" says so "in this run".
Shared by a search's answer (sweep/search/answer.py), a saved run's best (results.describe_best)
and an LLM sweep's (llm/answers.py, on output tokens/s).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

__all__ = ["Confidence", "confidence", "number"]


def number(row: pd.Series, column: str) -> float:
    value = row.get(column)
    try:
        return math.nan if value is None else float(value)
    except (TypeError, ValueError):
        return math.nan


def _measured_s(row: pd.Series, column: str = "throughput") -> float:
    """How long the row's interval was measured: the span its pooled requests took (requests x
    batch / throughput); NaN without those (an LLM row: no batch size)."""
    span = number(row, "requests") * number(row, "batch_size") / number(row, column)
    return span if math.isfinite(span) and span > 0 else math.nan


def _windows(row: pd.Series, column: str = "throughput") -> float:
    """How many windows of the row's length its interval pools: the measured span over the window
    length; the row's window count without those (an LLM row: no batch size, no window length)."""
    per = _measured_s(row, column) / number(row, "window_s")
    return per if math.isfinite(per) and per > 0 else max(number(row, "windows"), 1.0)


@dataclass(frozen=True)
class Confidence:
    """Whether the best point's throughput interval lies above the runner-up's (``separable``;
    None: nothing to tell, no best point or no intervals), how much the two intervals overlap
    (infer/s, 0 when apart), about how much more measuring each would need to come apart
    (``more_seconds``, and ``more_windows`` of the rows' window length; None when apart or when no
    number would do), and the statement saying so. The statement gives seconds: a row measured by
    the stability rule may have lengthened its windows, so a count of windows would not say how long."""

    separable: bool | None
    statement: str
    overlap: float | None = None
    more_windows: int | None = None
    more_seconds: float | None = None

    def to_dict(self) -> dict:
        return {
            "separable": self.separable,
            "statement": self.statement,
            "overlap": None if self.overlap is None else round(self.overlap, 3),
            "more_windows": self.more_windows,
            "more_seconds": None if self.more_seconds is None else round(self.more_seconds, 1),
        }


def confidence(
    best: pd.Series | None, runner_up: pd.Series | None, *, column: str = "throughput", what: str = "throughput"
) -> Confidence:
    """How sure ``best`` is ahead of ``runner_up``: rows with ``column`` and its 95% interval
    ``<column>_low/high`` (a tensor row's ``throughput``; an LLM row's ``output_tokens_per_s``),
    named ``what`` in the statement.

    The estimate of windows assumes each interval narrows as one over the square root of the time
    measured: the two half-widths must shrink below the gap between the throughputs, so each point
    needs ((half_a + half_b) / gap)^2 times the windows it has."""
    if best is None:
        return Confidence(None, "no answer: no measured point qualifies")
    if runner_up is None:
        return Confidence(True, "separable: no other configuration qualifies", 0.0)
    a_low, a_high = number(best, f"{column}_low"), number(best, f"{column}_high")
    b_low, b_high = number(runner_up, f"{column}_low"), number(runner_up, f"{column}_high")
    if any(math.isnan(x) for x in (a_low, a_high, b_low, b_high)):
        article = "an" if what[:1] in "aeiou" else "a"
        return Confidence(None, f"not known: {article} {what} interval is missing (measured without one)")
    best_text, other_text = f"[{a_low:.1f}, {a_high:.1f}]", f"[{b_low:.1f}, {b_high:.1f}]"
    if a_low > b_high:
        return Confidence(
            True,
            f"separable: best's {what} interval {best_text} lies above the runner-up's "
            f"{other_text} (in this run: a machine can drift more than that between runs)",
            0.0,
        )
    overlap = min(a_high, b_high) - max(a_low, b_low)
    gap = number(best, column) - number(runner_up, column)
    if not gap > 0:
        return Confidence(
            False,
            f"not separable on this machine: intervals {best_text} and {other_text} overlap and "
            f"the {what} figures are equal; no number of windows separates them: accept either",
            overlap,
        )
    factor = ((a_high - a_low) / 2 + (b_high - b_low) / 2) ** 2 / gap**2
    more = max(math.ceil(max(_windows(best, column), _windows(runner_up, column)) * (factor - 1)), 1)
    seconds = max(_measured_s(best, column), _measured_s(runner_up, column)) * (factor - 1)
    how_long = f"{more} more windows" if math.isnan(seconds) else f"{max(seconds, 0.1):.1f} s more measuring"
    return Confidence(
        False,
        f"not separable on this machine: intervals {best_text} and {other_text} overlap; about "
        f"{how_long} each would be needed to separate them, or accept either",
        overlap,
        more,
        None if math.isnan(seconds) else seconds,
    )
