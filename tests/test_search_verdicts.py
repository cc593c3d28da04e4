"""The benchmark's verdicts that hold (benchmarks/_interleave.py, search_vs_grid.py --runs): the
interleaved rounds measure the best and each answer alternately, an answer is judged from the
rounds' paired ratios, and the tally counts runs against the targets. On fixed inputs."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

from _interleave import Interleaved, Reading, RunOutcome, interleave, judge, tally  # noqa: E402

BEST, OTHER, THIRD = ("1x2", 8, 1), ("1x1", 8, 1), ("2x1", 4, 2)


def test_rounds_alternate_the_best_and_each_distinct_answer():
    order = []

    def measure(key):
        order.append(key)
        return Reading(100.0, 10.0)

    rounds = interleave(measure, BEST, [OTHER, BEST, OTHER, THIRD], rounds=3)
    assert order == [BEST, OTHER, THIRD] * 3
    assert rounds.answers == (OTHER, THIRD) and all(len(r) == 3 for r in rounds.readings.values())
    with pytest.raises(ValueError, match="rounds 1 must be >= 2"):
        interleave(measure, BEST, [OTHER], rounds=1)


def _rounds(best, other, other_p99=10.0):
    return Interleaved(BEST, (OTHER,), {BEST: [Reading(x, 10.0) for x in best],
                                       OTHER: [Reading(x, other_p99) for x in other]})


def test_an_answer_the_rounds_tell_below_the_best_is_wrong_even_when_the_grid_overlapped():
    # the machine drifted from 550 to 450 infer/s across the rounds; the answer read 75% of the best in every round
    rounds = _rounds([550.0, 500.0, 450.0], [412.5, 375.0, 337.5])
    verdict = judge(rounds, OTHER, budget_ms=29.15)
    assert not verdict.right
    assert "-25.0% against the best's (95% [-25.0%, -25.0%])" in verdict.detail and verdict.detail.endswith("below the best")


def test_drift_both_points_share_cancels_and_an_indistinguishable_answer_is_right():
    # unpaired, the answer's rounds (430-560) and the best's (450-550) say little; paired, it is within a few %
    rounds = _rounds([550.0, 500.0, 450.0], [560.0, 480.0, 430.0])
    verdict = judge(rounds, OTHER, budget_ms=29.15)
    assert verdict.right and "cannot be told from the best" in verdict.detail


def test_within_five_percent_is_right_and_over_the_budget_is_wrong():
    close = _rounds([500.0, 501.0, 499.0], [480.0, 481.0, 479.5])  # -4%, tightly: told apart, but within 5%
    assert judge(close, OTHER, budget_ms=29.15).right and "within 5%" in judge(close, OTHER, 29.15).detail
    over = _rounds([500.0, 500.0, 500.0], [510.0, 505.0, 520.0], other_p99=30.0)
    verdict = judge(over, OTHER, budget_ms=29.15)
    assert not verdict.right and "median p99 30.00 ms (over the 29.15 ms budget; the best's 10.00 ms): over the budget" in verdict.detail
    assert judge(over, BEST, 29.15).right and not judge(over, None, 29.15).right
    assert judge(over, THIRD, 29.15).detail == "not measured in the interleaved rounds"


def test_the_tally_counts_right_runs_and_median_same_run_shares_of_model_analyzer():
    outcomes = [RunOutcome("adaptive", wall, right, brute, quick) for wall, right, brute, quick in [
        (40.0, True, 350.0, 60.0),    # 0.11x brute, 0.67x quick
        (20.0, True, 340.0, 55.0),    # 0.06x, 0.36x
        (25.0, False, 360.0, 58.0),   # 0.07x, 0.43x
        (22.0, True, 330.0, 50.0),    # 0.07x, 0.44x
        (30.0, True, 345.0, 70.0),    # 0.09x, 0.43x
    ]] + [RunOutcome("halving", wall, right, 350.0, 60.0) for wall, right in
          [(170.0, True), (160.0, False), (180.0, True), (150.0, False), (175.0, True)]]
    adaptive, halving = tally(outcomes)
    assert (adaptive.search, adaptive.runs, adaptive.right, adaptive.median_wall_s) == ("adaptive", 5, 4, 25.0)
    assert adaptive.median_share["brute"] == pytest.approx(25.0 / 360.0)
    assert adaptive.median_share["quick"] == pytest.approx(25.0 / 58.0) and adaptive.met is True
    assert "right in 4 of 5 run(s) (target >= 4)" in adaptive.text() and adaptive.text().endswith(": met")
    assert halving.right == 3 and halving.met is False and halving.text().endswith(": missed")
    # the same times as the right count alone cannot meet: quick's share decides
    slow = tally([RunOutcome("adaptive", 40.0, True, 350.0, 60.0)])[0]
    assert slow.met is False and "median 0.67x MA quick (target <= 0.5x)" in slow.text()


def test_without_model_analyzer_the_time_target_is_not_judged():
    line = tally([RunOutcome("adaptive", 20.0, True)])[0]
    assert line.met is None and "vs MA brute: n/a (did not run)" in line.text()
    assert line.text().endswith("not judged (Model Analyzer's times missing)")
    assert tally([RunOutcome("adaptive", 20.0, False)])[0].met is False  # wrong answers miss whatever the times
