"""The measurement-effort rule (search/effort.py) and the answer's confidence (search/answer.py),
replayed on windows recorded once from a real tritonserver on this machine
(tests/data/effort_windows.json, made by benchmarks/record_effort_windows.py): each point's
per-window throughput and p99, and its row's 95% throughput interval."""

from __future__ import annotations

import json
import math
import re
import statistics
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from workbench.measure.grid.rows import PointRow
from workbench.measure.store.results import describe_best, frame_from_rows
from workbench.measure.store.table import readable_table, significant
from workbench.measure.sweep.search.answer import answer, confidence
from workbench.measure.sweep.search.effort import (
    RULE_REASON,
    DecidedBy,
    EffortRule,
    Incumbent,
    WindowSummary,
    latency_interval,
    p99_limit,
    t_interval,
)

RECORDED = json.loads((Path(__file__).parent / "data" / "effort_windows.json").read_text())


def _point(variant, batch, concurrency):
    (found,) = [p for p in RECORDED["points"]
                if (p["variant"], p["batch_size"], p["concurrency"]) == (variant, batch, concurrency)]
    return found


def _windows(point):
    return [WindowSummary(w["throughput"], {"p99": w["p99_ms"]}, w["requests"], w["duration_s"])
            for w in point["windows"]]


def _incumbent(point):
    return Incumbent(f"{point['variant']} b{point['batch_size']} c{point['concurrency']}", point["throughput"],
                     point["throughput_low"], point["throughput_high"])


def _replay(rule, point, incumbent, latency_budget_ms):
    """The verdicts after 1, 2, ... windows, until the first that stops (as the engine asks)."""
    verdicts = []
    for k in range(1, len(point["windows"]) + 1):
        verdicts.append(rule.judge(_windows(point)[:k], incumbent, p99_limit(latency_budget_ms)))
        if verdicts[-1].stop:
            break
    return verdicts


def _by_hand(values):
    """Mean and half-width of the 95% t interval, from the statistics module and the textbook
    quantiles for 2 and 7 degrees of freedom (the only ones these tests stop at)."""
    t = {3: 4.303, 8: 2.365}[len(values)]
    return statistics.fmean(values), t * statistics.stdev(values) / math.sqrt(len(values))


def test_t_interval_matches_the_textbook():
    found = t_interval([1.0, 2.0, 3.0])
    assert found.mean == 2.0 and found.high - found.mean == pytest.approx(4.303 / math.sqrt(3))
    assert math.isinf(t_interval([5.0]).high)


def test_a_point_far_below_the_incumbent_stops_after_the_few_window_screen():
    rule = EffortRule(min_windows=3, max_windows=8)
    candidate, best = _point("2x1", 1, 1), _point("2x1", 8, 4)
    verdicts = _replay(rule, candidate, _incumbent(best), latency_budget_ms=20)
    assert [v.kind for v in verdicts] == ["continue", "continue", "separated below"]
    mean, half = _by_hand([w["throughput"] for w in candidate["windows"][:3]])
    assert mean + half < best["throughput_low"]  # the stop is what the numbers say
    assert verdicts[-1].text().startswith("separated below after 3 window(s): throughput")


def test_a_point_clearly_over_the_budget_cannot_win_whatever_its_throughput():
    rule = EffortRule(min_windows=3, max_windows=8)
    candidate = _point("1x1", 8, 4)  # the second-highest throughput recorded, p99 ~10 ms
    verdicts = _replay(rule, candidate, None, latency_budget_ms=1.0)
    assert verdicts[-1].kind == "cannot win" and verdicts[-1].windows == 3
    mean, half = _by_hand([w["p99_ms"] for w in candidate["windows"][:3]])
    assert mean - half > 1.0


def test_a_point_clearly_above_the_incumbent_and_within_the_budget_is_the_new_incumbent():
    rule = EffortRule(min_windows=3, max_windows=8)
    candidate, best = _point("2x1", 8, 4), _point("1x1", 8, 4)
    verdicts = _replay(rule, candidate, _incumbent(best), latency_budget_ms=20)
    assert verdicts[-1].kind == "separated above" and verdicts[-1].windows == 3
    mean, half = _by_hand([w["throughput"] for w in candidate["windows"][:3]])
    assert mean - half > best["throughput_high"]
    p99, p99_half = _by_hand([w["p99_ms"] for w in candidate["windows"][:3]])
    assert p99 + p99_half <= 20
    # with a budget its p99 interval straddles, it is not decided at 3 windows
    straddled = rule.judge(_windows(candidate)[:3], _incumbent(best), p99_limit(p99))
    assert straddled.kind == "continue"


def test_a_contender_whose_interval_overlaps_the_incumbent_is_measured_to_the_cap():
    rule = EffortRule(min_windows=3, max_windows=8)
    candidate, best = _point("1x1", 8, 1), _point("2x1", 8, 1)
    verdicts = _replay(rule, candidate, _incumbent(best), latency_budget_ms=20)
    assert [v.kind for v in verdicts] == ["continue"] * 7 + ["cap reached"]
    mean, half = _by_hand([w["throughput"] for w in candidate["windows"]])
    assert mean + half >= best["throughput_low"] and mean - half <= best["throughput_high"]
    assert "overlaps 2x1 b8 c1's" in verdicts[-1].why


def test_effort_goes_where_it_decides():
    """Over every recorded point against the best recorded one, the screens (stopped early) cost
    fewer windows than the cap each, and only points overlapping the best run to it."""
    rule = EffortRule(min_windows=3, max_windows=8)
    best = max(RECORDED["points"], key=lambda p: p["throughput"])
    spent = {(p["variant"], p["batch_size"], p["concurrency"]): _replay(rule, p, _incumbent(best), 20)[-1]
             for p in RECORDED["points"] if p is not best}
    early = [v for v in spent.values() if v.kind in ("separated below", "cannot win")]
    assert early and all(v.windows < rule.max_windows for v in early)
    assert sum(v.windows for v in spent.values()) < rule.max_windows * len(spent)


def test_the_rule_refuses_bounds_that_cannot_give_an_interval():
    with pytest.raises(ValueError, match="min_windows 1 must be a whole number >= 2"):
        EffortRule(min_windows=1)
    with pytest.raises(ValueError, match="max_windows 2 must be a whole number >= min_windows"):
        EffortRule(min_windows=3, max_windows=2)


# ---- the answer's confidence --------------------------------------------------------------------


def _row(point):
    requests = sum(w["requests"] for w in point["windows"])
    return PointRow(variant=point["variant"], allocation=point["variant"], instances=int(point["variant"][0]),
                    cores_per_instance=1, core_start=0, core_end=1, batching="", parameters="",
                    batch_size=point["batch_size"], concurrency=point["concurrency"], throughput=point["throughput"],
                    throughput_low=point["throughput_low"], throughput_high=point["throughput_high"],
                    p99_ms=point["p99_ms"], p50_ms=point["p99_ms"] / 2, requests=requests, failures=0,
                    outputs_ok=True, windows=len(point["windows"]), window_s=RECORDED["window_s"]).to_dict()


def test_an_answer_whose_runner_up_overlaps_it_is_marked_not_separable():
    best, other = _point("2x1", 8, 1), _point("1x1", 8, 1)
    assert best["throughput_low"] <= other["throughput_high"]  # the recorded intervals overlap
    found = answer(frame_from_rows([_row(best), _row(other)]), latency_budget_ms=20)
    assert (found.best["variant"], found.runner_up["variant"]) == ("2x1", "1x1")
    sure = found.confidence
    assert sure.separable is False and sure.statement.startswith("not separable on this machine: intervals")
    assert sure.overlap == pytest.approx(other["throughput_high"] - best["throughput_low"])
    # the windows it names would be enough: each interval narrowed by sqrt(k / (k + more))
    k = len(best["windows"])
    half = lambda p: (p["throughput_high"] - p["throughput_low"]) / 2  # noqa: E731
    narrowed = (half(best) + half(other)) * math.sqrt(k / (k + sure.more_windows))
    assert narrowed < best["throughput"] - other["throughput"]
    # said in seconds, the same estimate: the windows it names, of the recorded length, less the rounding up
    window_s = RECORDED["window_s"]
    assert window_s * (sure.more_windows - 1) < sure.more_seconds <= window_s * sure.more_windows
    assert f"about {sure.more_seconds:.1f} s more measuring each would be needed to separate them, or accept either" \
        in found.describe()
    saved = found.to_dict()
    assert saved["confidence"]["separable"] is False and saved["confidence"]["more_windows"] == sure.more_windows
    assert saved["confidence"]["more_seconds"] == round(sure.more_seconds, 1)
    assert saved["runner_up"]["throughput_interval"] == [other["throughput_low"], other["throughput_high"]]


def test_an_answer_apart_from_its_runner_up_is_marked_separable():
    best, other = _point("1x1", 8, 4), _point("2x1", 8, 1)
    assert best["throughput_low"] > other["throughput_high"]
    found = answer(frame_from_rows([_row(best), _row(other)]), latency_budget_ms=20)
    assert found.confidence.separable is True and found.confidence.more_windows is None
    assert (f"separable: best's throughput interval [{best['throughput_low']:.1f}, {best['throughput_high']:.1f}] "
            f"lies above the runner-up's [{other['throughput_low']:.1f}, {other['throughput_high']:.1f}]"
            in found.describe())


def test_confidence_without_a_runner_up_or_an_answer_says_so():
    only = pd.Series(_row(_point("2x1", 8, 4)))
    assert confidence(only, None).statement == "separable: no other configuration qualifies"
    assert confidence(None, None).separable is None
    no_interval = only.copy()
    no_interval["throughput_low"] = math.nan
    assert confidence(no_interval, only).statement.startswith("not known: a throughput interval is missing")


def test_a_point_below_the_incumbent_stops_even_while_its_p99_straddles_the_budget():
    """Below the incumbent it is not the answer whatever its p99; the straddle is said, not waited on."""
    rule, best = EffortRule(), Incumbent("2x1 b8 c4", 205.0, 200.0, 210.0)
    straddling = [WindowSummary(100.0 + d, {"p99": p99}) for d, p99 in ((0, 4.0), (1, 6.0), (-1, 5.0))]
    verdict = rule.judge(straddling, best, p99_limit(5.0))
    assert verdict.kind == "separated below" and verdict.windows == 3
    assert verdict.why.endswith("straddles the 5 ms limit") and "ends below 2x1 b8 c4's [200.0, 210.0]" in verdict.why
    assert rule.judge(straddling, best, p99_limit(None)).why.endswith("[200.0, 210.0]")  # no budget: nothing to say
    # the same windows near the incumbent are measured on: the straddle decides whether it could be the answer
    near = [WindowSummary(w.throughput + 105.0, w.latencies_ms) for w in straddling]
    assert rule.judge(near, best, p99_limit(5.0)).kind == "continue"


def test_every_named_latency_is_held_to_its_own_limit():
    """An LLM point has two limits (TTFT and ITL): past either one, it cannot win; above the
    incumbent it is the new one only when both are decided within."""
    rule = EffortRule()
    slos = {"TTFT p99": 500.0, "ITL p99": 50.0}
    slow_tokens = [WindowSummary(900.0 + d, {"TTFT p99": 200.0 + d, "ITL p99": 80.0 + d}) for d in (0, 2, -2)]
    verdict = rule.judge(slow_tokens, None, slos)
    assert verdict.kind == "cannot win" and verdict.why.startswith("ITL p99 per-window mean 80.0 ms, 95% [")
    fine = [WindowSummary(900.0 + d, {"TTFT p99": 200.0 + d, "ITL p99": 30.0 + d}) for d in (0, 2, -2)]
    verdict = rule.judge(fine, Incumbent("tp1 seqs 8 c4", 700.0, 690.0, 710.0), slos)
    assert verdict.kind == "separated above"
    assert "TTFT p99 per-window mean 200.0 ms, 95% [" in verdict.why and "within 500 ms" in verdict.why and "within 50 ms" in verdict.why
    with pytest.raises(KeyError):  # a limit on a latency the windows do not carry is a caller's bug
        rule.judge(fine, None, {"E2E p99": 1.0})


def test_a_latency_far_past_its_limit_cannot_win_however_much_its_windows_scatter():
    """Per-window ITL p99s as a busy CI machine read them for the tiny LLM (from a few ms to ~40):
    the linear t-interval reaches below zero and never rules out a 0.001 ms limit; the interval
    on the log scale stays positive, so the point stops after its screen."""
    scattered = [2.0, 5.0, 40.0]
    assert t_interval(scattered).low < 0  # the old reading: the limit straddled, measured to the cap
    found = latency_interval(scattered)
    assert 0 < found.low < min(scattered) and found.high > max(scattered) and found.mean == pytest.approx(47 / 3)
    windows = [WindowSummary(300.0 + i, {"ITL p99": v}) for i, v in enumerate(scattered)]
    verdict = EffortRule().judge(windows, None, {"ITL p99": 0.001})
    assert verdict.kind == "cannot win" and verdict.why.startswith("ITL p99 per-window mean 15.7 ms, 95% [")
    assert latency_interval([12.0, 12.0]) == t_interval([12.0, 12.0])  # no scatter: the same either way
    assert latency_interval([0.0, 3.0]) == t_interval([0.0, 3.0])  # not all positive: the linear one


def test_the_incumbent_is_read_from_its_windows_as_a_candidate_is():
    windows = [WindowSummary(v, {"p99": 1.0}) for v in (100.0, 110.0, 90.0)]
    incumbent = Incumbent.from_windows("1x1 b1 c1", windows)
    found = t_interval([100.0, 110.0, 90.0])
    assert (incumbent.throughput, incumbent.low, incumbent.high) == (found.mean, found.low, found.high)
    assert incumbent.text() == f"1x1 b1 c1's [{found.low:.1f}, {found.high:.1f}]"


def test_a_tensor_points_decision_line_states_the_p99_its_row_and_best_line_show():
    """The tensor sweep's verdicts have the LLM's shape (issue 43): the decision line states the
    point's figures over all its requests (its row's p99 with the row's interval, the Best line's
    p99), and the per-window reading the rule judged on only after, as the rule's reason."""
    rule = EffortRule(min_windows=3, max_windows=8)
    candidate, best = _point("2x1", 8, 4), _point("1x1", 8, 4)
    until = DecidedBy(rule, _incumbent(best), p99_limit(20), summarize=list)
    windows = _windows(candidate)
    stopped = next(s for s in (until(windows[:k]) for k in range(1, len(windows) + 1)) if s is not None)
    row = replace(PointRow.from_dict(_row(candidate)), p99_low_ms=candidate["p99_ms"] * 0.9,
                  p99_high_ms=candidate["p99_ms"] * 1.1)
    decided = replace(row, stopped=until.decision(stopped, row.pooled_text()))
    assert until.decision("time limit 5 s reached", row.pooled_text()) == "time limit 5 s reached"  # not the rule's
    stated, named, reason = decided.stopped.partition(f"; {RULE_REASON}: ")
    p99 = f"p99 {candidate['p99_ms']:.2f} ms"
    assert named and stated == (
        f"separated above after 3 window(s): over all its requests {candidate['throughput']:.1f} infer/s, 95% "
        f"[{candidate['throughput_low']:.1f}, {candidate['throughput_high']:.1f}], {p99}, 95% "
        f"[{candidate['p99_ms'] * 0.9:.2f}, {candidate['p99_ms'] * 1.1:.2f}]")
    per_window = statistics.fmean(w["p99_ms"] for w in candidate["windows"][:3])
    assert f"p99 per-window mean {per_window:.1f} ms, 95% [" in reason and f"{per_window:.2f}" != f"{candidate['p99_ms']:.2f}"
    frame = frame_from_rows([decided.to_dict(), _row(best)])
    best_line = describe_best(frame, latency_budget_ms=20)
    assert f"2x1 (2 instance(s) x 1 core(s)), batch 8, concurrency 4: {candidate['throughput']:.1f} infer/s" in best_line
    assert re.search(r"p99 [0-9.]+ ms", best_line).group(0) == p99
    table = readable_table(frame)
    assert table.text(0, "p99_ms") == significant(candidate["p99_ms"])
