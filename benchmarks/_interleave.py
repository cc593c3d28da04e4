"""Verdicts that hold: the grid's best and each search's answer measured again interleaved (A, B1,
B2, A, B1, B2, ... with the same fixed windows), each answer judged from those rounds, and the tally
of whole comparisons repeated (search_vs_grid.py --runs N).

Why interleaved: the grid measures its best once, minutes before or after a search measures its
answer; on a shared machine the load changes between the two, and one point read twice an hour
apart differed by more than the gap between candidates (issue 46). Measured in alternating rounds,
both points see the same machine, and each round's ratio B/A cancels the drift both share.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from workbench.measure.sweep.search.effort import t_interval

__all__ = [
    "Reading",
    "Interleaved",
    "Judgement",
    "RunOutcome",
    "TallyLine",
    "interleave",
    "judge",
    "tally",
    "WITHIN",
    "TARGET_SHARE",
    "MA_TARGETS",
]

Key = tuple[str, int, int]  # (variant, batch size, concurrency)
WITHIN = 0.05  # an answer within 5% of the best's throughput is as good as the best
TARGET_SHARE = 0.8  # runs that must name the best (or one the interleaved rounds cannot tell from it): 4 of 5
MA_TARGETS = {"brute": 0.25, "quick": 0.5}  # median wall time at most this share of Model Analyzer's, same run


@dataclass(frozen=True)
class Reading:
    """One measurement of a point: throughput (infer/s) and p99 (ms)."""

    throughput: float
    p99_ms: float


@dataclass(frozen=True)
class Interleaved:
    """The rounds: ``readings[key]`` in the order measured, one per round for every key."""

    best: Key
    answers: tuple[Key, ...]
    readings: dict[Key, list[Reading]]


def interleave(measure: Callable[[Key], Reading], best: Key, answers: Sequence[Key], rounds: int) -> Interleaved:
    """``rounds`` rounds of the grid's best then every distinct other answer, each measured by
    ``measure`` (the same windows for all)."""
    if rounds < 2:
        raise ValueError(f"rounds {rounds} must be >= 2: an interval needs two")
    others = tuple(dict.fromkeys(a for a in answers if a != best))
    readings: dict[Key, list[Reading]] = {key: [] for key in (best, *others)}
    for _ in range(rounds):
        for key in (best, *others):
            readings[key].append(measure(key))
    return Interleaved(best, others, readings)


@dataclass(frozen=True)
class Judgement:
    """Whether an answer counts as the best, and the figures that say so."""

    right: bool
    detail: str


def judge(rounds: Interleaved, answer: Key | None, budget_ms: float, within: float = WITHIN) -> Judgement:
    """The answer judged from the interleaved rounds: right when it is the grid's best, or when its
    median p99 over the rounds meets the budget and either its throughput is within ``within`` of
    the best's (mean of the rounds' ratios) or the 95% t-interval of the rounds' ratios B/A - 1
    reaches 0 (the rounds cannot tell it from the best; above 0: it is better)."""
    if answer is None:
        return Judgement(False, "named no point")
    if answer == rounds.best:
        return Judgement(True, "the grid's best")
    if answer not in rounds.readings:
        return Judgement(False, "not measured in the interleaved rounds")
    a, b = rounds.readings[rounds.best], rounds.readings[answer]
    ratios = [y.throughput / x.throughput - 1 for x, y in zip(a, b)]
    spread = t_interval(ratios)
    p99 = statistics.median(r.p99_ms for r in b)
    fits = p99 <= budget_ms
    close = spread.mean >= -within
    cannot_tell = spread.high >= 0
    detail = (
        f"interleaved over {len(ratios)} rounds: its throughput {spread.mean:+.1%} against the best's "
        f"(95% [{spread.low:+.1%}, {spread.high:+.1%}]), median p99 {p99:.2f} ms "
        f"({'within' if fits else 'over'} the {budget_ms:.2f} ms budget; the best's "
        f"{statistics.median(r.p99_ms for r in a):.2f} ms)"
    )
    why = "cannot be told from the best" if cannot_tell else f"within {within:.0%}" if close else "below the best"
    return Judgement(fits and (close or cannot_tell), f"{detail}: {why if fits else 'over the budget'}")


@dataclass(frozen=True)
class RunOutcome:
    """One search in one whole comparison: its wall time, its judgement, and Model Analyzer's wall
    times in the same run (None: it did not run)."""

    search: str
    wall_s: float
    right: bool
    ma_brute_s: float | None = None
    ma_quick_s: float | None = None


@dataclass(frozen=True)
class TallyLine:
    """One search over every run: how many runs it was right, its median wall time, its median
    share of each Model Analyzer mode's wall time (same-run ratios; None: MA never ran), and whether
    the target holds (None: not judged, MA's times missing)."""

    search: str
    runs: int
    right: int
    median_wall_s: float
    median_share: dict[str, float | None]
    met: bool | None

    def text(self) -> str:
        needed = math.ceil(TARGET_SHARE * self.runs)
        shares = "".join(
            f", median {share:.2f}x MA {mode} (target <= {MA_TARGETS[mode]:g}x)"
            if share is not None
            else f", vs MA {mode}: n/a (did not run)"
            for mode, share in self.median_share.items()
        )
        verdict = "not judged (Model Analyzer's times missing)" if self.met is None else "met" if self.met else "missed"
        return (
            f"{self.search:<12} right in {self.right} of {self.runs} run(s) (target >= {needed}), "
            f"median {self.median_wall_s:.1f} s{shares}: {verdict}"
        )


def tally(outcomes: Sequence[RunOutcome]) -> list[TallyLine]:
    """Per search (in first-seen order), the tally against the targets: right in at least
    ``TARGET_SHARE`` of its runs, and its median same-run share of MA brute's and MA quick's wall
    time at most ``MA_TARGETS``."""
    lines = []
    for name in dict.fromkeys(o.search for o in outcomes):
        mine = [o for o in outcomes if o.search == name]
        right = sum(o.right for o in mine)
        shares: dict[str, float | None] = {}
        for mode in MA_TARGETS:
            ratios = [o.wall_s / ma for o in mine if (ma := getattr(o, f"ma_{mode}_s")) is not None and ma > 0]
            shares[mode] = statistics.median(ratios) if ratios else None
        often = right >= math.ceil(TARGET_SHARE * len(mine))
        if any(share is None for share in shares.values()):
            met = False if not often else None
        else:
            met = often and all(share <= MA_TARGETS[mode] for mode, share in shares.items())
        lines.append(TallyLine(name, len(mine), right, statistics.median(o.wall_s for o in mine), shares, met))
    return lines
