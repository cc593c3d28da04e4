"""An LLM sweep's effort mode on windows and rows built here (no server): the streaming windows read
as the effort rule reads them (output tokens/s, each window's own TTFT p99 and ITL p99 under the
SLO's names), a window without completed requests held as unknown, the SLO's limits judged by the
one rule, the incumbent moved only by points meeting the SLO, and the LLM answer's runner-up
(another variant) and confidence in words. tests/test_llm_effort_vllm.py runs it on real vLLM.
"""

from __future__ import annotations

import html
import math
import re
from dataclasses import replace

import numpy as np
import pytest

from workbench.measure.engine.streaming import Slo
from workbench.measure.engine.streaming.load import StreamWindow
from workbench.measure.engine.streaming.stream_results import RequestRecord, summarize
from workbench.measure.llm.result import LlmSweepResult, llm_frame
from workbench.measure.llm.rows import LlmRow
from workbench.measure.llm.slo_effort import ITL_P99, TTFT_P99, LlmEffort, pooled_text, slo_limits, stream_summaries
from workbench.measure.store.table import readable_table, significant
from workbench.measure.sweep.search.effort import RULE_REASON, EffortRule, Incumbent

MS = 1_000_000  # ns


def _request(sent_ms: float, ttft_ms: float, gap_ms: float, tokens: int = 5) -> RequestRecord:
    sent = int(sent_ms * MS)
    times = [sent + int((ttft_ms + k * gap_ms) * MS) for k in range(tokens)]
    return RequestRecord(sent, 16, tokens, token_ns=times, done_ns=times[-1] + MS, responses=tokens)


def _window(start_ms: float, tokens: int, done: list[RequestRecord], length_ms: float = 1000.0) -> StreamWindow:
    return StreamWindow(int(start_ms * MS), int((start_ms + length_ms) * MS), tokens, done, 0.01)


def _windows(ttft_ms: float, gap_ms: float, tokens_s: list[float]) -> list[StreamWindow]:
    """Windows of 1 s, each with 10 requests of that TTFT and gap (the last one 3x slower)."""
    out = []
    for k, rate in enumerate(tokens_s):
        done = [_request(k * 1000 + j, ttft_ms * (3 if j == 9 else 1), gap_ms) for j in range(10)]
        out.append(_window(k * 1000.0, int(rate), done))
    return out


def test_a_stream_window_reads_as_output_tokens_per_s_and_its_own_p99s():
    done = [_request(0, ttft, gap) for ttft, gap in ((10, 2), (20, 4), (40, 8))]
    done.append(RequestRecord(0, 16, 5, error="HTTP 500", done_ns=5 * MS))  # a failed request has no latency
    (summary,) = stream_summaries([_window(0, 250, done, length_ms=500.0)])
    assert summary.throughput == pytest.approx(500.0)  # 250 tokens in 0.5 s
    assert summary.latencies_ms[TTFT_P99] == pytest.approx(40.0)  # nearest rank of three: the largest
    assert summary.latencies_ms[ITL_P99] == pytest.approx(8.0)
    assert summary.requests == 4 and summary.duration_s == pytest.approx(0.5)
    (empty,) = stream_summaries([_window(0, 100, [])])
    assert empty.throughput == pytest.approx(100.0) and math.isnan(empty.latencies_ms[TTFT_P99])


def test_the_output_tokens_interval_is_the_block_bootstrap_of_the_tokens_arrivals():
    from workbench.measure.engine.streaming.load import _tokens_interval

    steady = RequestRecord(0, 16, 2000, token_ns=[k * MS for k in range(1, 2001)], done_ns=2001 * MS)
    window = [_window(0, 2000, [steady], length_ms=2000.0)]
    low, high = _tokens_interval(window, [steady], 2.0, seed=0)
    assert 990.0 <= low <= 1000.0 <= high <= 1010.0  # every block alike (100 tokens each, give or take one)
    burst = RequestRecord(0, 16, 2000, token_ns=[k * MS // 10 for k in range(1, 2001)], done_ns=201 * MS)
    low, high = _tokens_interval(window, [burst], 2.0, seed=0)  # all in the first 0.2 s of 2 s: 2 of 20 blocks
    assert low < 1000.0 < high and high - low > 500.0
    assert all(math.isnan(v) for v in _tokens_interval([], [], 0.0, seed=0))


def test_the_slo_limits_are_named_as_the_answer_names_them():
    assert slo_limits(Slo(ttft_ms=500.0, itl_ms=50.0)) == {TTFT_P99: 500.0, ITL_P99: 50.0}
    assert slo_limits(Slo(ttft_ms=None, itl_ms=20.0)) == {ITL_P99: 20.0}


def test_a_point_past_the_itl_limit_cannot_win_after_the_screen():
    rule, windows = EffortRule(3, 8), _windows(ttft_ms=30.0, gap_ms=12.0, tokens_s=[400, 420, 410])
    verdict = rule.judge(stream_summaries(windows), None, slo_limits(Slo(ttft_ms=500.0, itl_ms=5.0)))
    assert verdict.kind == "cannot win" and verdict.windows == 3
    assert verdict.why.startswith("ITL p99 per-window mean 12.0 ms, 95% [12.0, 12.0] is past the 5 ms limit")
    within = rule.judge(stream_summaries(windows), None, slo_limits(Slo(ttft_ms=500.0, itl_ms=50.0)))
    assert within.kind == "separated above" and "TTFT p99 per-window mean 90.0 ms" in within.why  # the slow tenth request: p99


def test_windows_without_completed_requests_leave_the_latency_unknown_not_within():
    """Long requests in short windows: a window may complete none. Its latency is left out; with
    fewer than two known the latency straddles its limit, so the point is not called a winner."""
    windows = [_window(k * 1000.0, 400, []) for k in range(3)]
    verdict = EffortRule(3, 4).judge(stream_summaries(windows), None, slo_limits(Slo()))
    assert verdict.kind == "continue" and "straddles" not in verdict.why
    capped = EffortRule(3, 3).judge(stream_summaries(windows), None, slo_limits(Slo()))
    assert capped.kind == "cap reached" and "TTFT p99 per-window mean nan ms, 95% [-inf, inf] straddles the 500 ms limit" in capped.why
    mixed = _windows(ttft_ms=30.0, gap_ms=2.0, tokens_s=[400, 410, 405]) + [_window(3000.0, 400, [])]
    above = EffortRule(3, 8).judge(stream_summaries(mixed), None, slo_limits(Slo()))
    assert above.kind == "separated above" and above.windows == 4  # the three known windows decide


def _row(variant: str, concurrency: int, tokens_s: float, low: float, high: float, ttft99: float = 100.0,
         itl99: float = 20.0, **extra) -> dict:
    return LlmRow(variant=variant, max_num_seqs=4, tensor_parallel=1, instances=1, cores_per_instance=1,
                  core_start=None, core_end=None, concurrency=concurrency, request_rate=None, input_tokens=16,
                  output_tokens=8, output_tokens_per_s=tokens_s, output_tokens_per_s_low=low,
                  output_tokens_per_s_high=high, requests_per_s=tokens_s / 8, tokens_per_user_per_s=50.0,
                  ttft_p50_ms=ttft99 / 2, ttft_p90_ms=ttft99, ttft_p99_ms=ttft99, itl_p50_ms=itl99 / 2,
                  itl_p90_ms=itl99, itl_p99_ms=itl99, goodput=1.0, client_output_tokens=400,
                  server_output_tokens=400, requests=50, failures=0, windows=4, stable=True, **extra).to_dict()


def _result(rows) -> LlmSweepResult:
    return LlmSweepResult(llm_frame(rows), {"kind": "llm", "slo": {"ttft_ms": 500.0, "itl_ms": 50.0}})


def test_the_runner_up_is_another_variant_and_overlapping_intervals_are_not_separable():
    rows = [_row("seqs4-tp1-x1", 1, 100.0, 95.0, 105.0), _row("seqs4-tp1-x1", 4, 300.0, 280.0, 320.0),
            _row("seqs8-tp1-x1", 4, 290.0, 270.0, 310.0),
            _row("seqs8-tp1-x1", 8, 500.0, 480.0, 520.0, itl99=80.0)]  # faster but past the ITL limit
    found = _result(rows).answer()
    assert (found.best["variant"], int(found.best["concurrency"])) == ("seqs4-tp1-x1", 4)
    assert (found.runner_up["variant"], int(found.runner_up["concurrency"])) == ("seqs8-tp1-x1", 4)
    sure = found.confidence
    assert sure.separable is False and sure.overlap == pytest.approx(30.0)
    # each half-width 20 against a gap of 10: (40 / 10)^2 = 16 times the 4 windows, 60 more
    assert sure.more_windows == 60
    text = _result(rows).describe_best()
    assert "Runner-up: seqs8-tp1-x1 (max_num_seqs 4" in text
    assert ("Confidence: not separable on this machine: intervals [280.0, 320.0] and [270.0, 310.0] overlap; about "
            "60 more windows each would be needed to separate them, or accept either.") in text
    saved = found.to_dict()
    assert saved["best"]["output_tokens_per_s_interval"] == [280.0, 320.0]
    assert saved["runner_up"]["load"] == "concurrency 4" and saved["confidence"]["more_windows"] == 60


def test_apart_intervals_are_separable_and_a_lone_variant_says_so():
    rows = [_row("seqs4-tp1-x1", 4, 300.0, 290.0, 310.0), _row("seqs1-tp1-x1", 4, 150.0, 140.0, 160.0)]
    assert ("Confidence: separable: best's output tokens/s interval [290.0, 310.0] lies above the runner-up's "
            "[140.0, 160.0] (in this run: a machine can drift more than that between runs).") \
        in _result(rows).describe_best()
    alone = _result(rows[:1]).describe_best()
    assert "No other variant meets it. Confidence: separable: no other configuration qualifies." in alone
    no_interval = [_row("seqs4-tp1-x1", 4, 300.0, math.nan, math.nan), rows[1]]
    assert "Confidence: not known: an output tokens/s interval is missing" in _result(no_interval).describe_best()


def test_the_incumbent_moves_only_to_points_meeting_the_slo_with_more_tokens():
    effort = LlmEffort(EffortRule(3, 6), Slo(ttft_ms=500.0, itl_ms=50.0))
    assert effort.until().incumbent is None and effort.until().limits == {TTFT_P99: 500.0, ITL_P99: 50.0}
    effort.measured(LlmRow.from_dict(_row("a", 1, 100.0, 95.0, 105.0)))
    assert effort.incumbent == Incumbent("a at concurrency 1", 100.0, 95.0, 105.0)
    effort.measured(LlmRow.from_dict(_row("a", 8, 900.0, 890.0, 910.0, ttft99=900.0)))  # past the TTFT limit
    effort.measured(LlmRow.from_dict(_row("b", 1, 90.0, 85.0, 95.0)))  # fewer tokens
    assert effort.incumbent.label == "a at concurrency 1"
    until = effort.until()
    windows = _windows(ttft_ms=30.0, gap_ms=2.0, tokens_s=[200, 210, 205])
    assert until(windows).startswith("separated above after 3 window(s): throughput per-window mean 205.0, 95% [")
    effort.measured(LlmRow.from_dict(_row("b", 4, 205.0, 200.0, 210.0)), until)
    expected = float(np.mean([200, 210, 205]))
    assert effort.incumbent.label == "b at concurrency 4" and effort.incumbent.throughput == pytest.approx(expected)
    assert effort.incumbent.throughput_low < 200.0  # read from the windows the rule saw: their t-interval


def test_the_cli_turns_the_effort_mode_on_with_search_adaptive(tmp_path, capsys):
    """``--search adaptive`` names the tensor sweeps' effort search; in LLM mode its cap is
    ``--max-windows`` when given, else the rule's default; the grid measures until stable."""
    from workbench.cli import build_parser
    from workbench.cli.llm_sweep import effort_rule

    parser = build_parser("sweep")
    rules = {}
    for flags in ([], ["--search", "adaptive"], ["--search", "adaptive", "--max-windows", "5"]):
        args = parser.parse_args(["sweep", str(tmp_path), "--out", str(tmp_path / "run"), *flags])
        problems: list[str] = []
        rules[" ".join(flags)] = effort_rule(args, args.flag_defaults, problems)
        assert problems == []
    assert rules[""] is None
    assert rules["--search adaptive"] == EffortRule(3, 10)
    assert rules["--search adaptive --max-windows 5"] == EffortRule(3, 5)
    args = parser.parse_args(["sweep", str(tmp_path), "--out", str(tmp_path / "run"), "--search", "adaptive",
                              "--max-windows", "2"])
    problems = []
    assert effort_rule(args, args.flag_defaults, problems) is None
    assert problems == ["--max-windows 2: with --search adaptive, max_windows 2 must be a whole number >= "
                        "min_windows (3)"]
    with pytest.raises(SystemExit):
        parser.parse_args(["sweep", "--help"])
    assert "adaptive measures each point until decided against the best point so far under the SLO" in " ".join(
        capsys.readouterr().out.split())


def test_the_cli_report_of_an_effort_run_gives_each_point_its_verdict_and_the_front(capsys, tmp_path):
    """What `workbench sweep --search adaptive` prints after the table: one line per point with its
    load level and the rule's verdict, then the answer with its confidence and the Pareto front."""
    import argparse

    from workbench.cli.llm_sweep import _report

    rows = [_row("seqs4-tp1-x1", 1, 100.0, 95.0, 105.0, stopped="separated above after 3 window(s): no incumbent yet"),
            _row("seqs8-tp1-x1", 4, 290.0, 270.0, 310.0, itl99=80.0,
                 stopped="cannot win after 3 window(s): ITL p99 80.0 ms [70.0, 90.0] is past the 50 ms limit")]
    result = LlmSweepResult(llm_frame(rows), {"kind": "llm", "slo": {"ttft_ms": 500.0, "itl_ms": 50.0},
                                              "effort": {"min_windows": 3, "max_windows": 10}, "status": "complete"},
                            tmp_path)
    args = argparse.Namespace(min_goodput=None, instance_type=None, instance_cores=None, no_plots=True)
    assert _report(result, args, None) == 0
    printed = capsys.readouterr().out
    assert "seqs4-tp1-x1 at concurrency 1: separated above after 3 window(s): no incumbent yet" in printed
    assert "seqs8-tp1-x1 at concurrency 4: cannot win after 3 window(s): ITL p99 80.0 ms" in printed
    assert "Confidence: separable: no other configuration qualifies." in printed
    assert "Pareto front (output tokens/s per user / total): " in printed
    grid = LlmSweepResult(result.frame, {**result.record, "effort": None}, tmp_path)
    assert grid.verdicts() == [] and len(result.verdicts()) == 2  # only an effort-mode run has verdicts


def decided_run() -> tuple[LlmSweepResult, float, str]:
    """An adaptive run whose first point's windows read TTFT p99 90, 180 and 135 ms each (the slow
    tenth request of each), so the mean of the windows' own p99s (135.0) is not the p99 over its 30
    requests; the point is decided by the rule and its row made as the sweep makes it (its pooled
    figures from the streaming engine's ``summarize``). Returns the run, that pooled TTFT p99 and
    the decision line."""
    slo = Slo(ttft_ms=500.0, itl_ms=50.0)
    until = LlmEffort(EffortRule(3, 6), slo).until()
    windows = [
        _window(k * 1000.0, rate, [_request(k * 1000 + j, ttft * (3 if j == 9 else 1), 2.0) for j in range(10)])
        for k, (ttft, rate) in enumerate([(30.0, 200), (60.0, 210), (45.0, 205)])
    ]
    stopped = until(windows)
    assert stopped is not None and stopped.startswith("separated above after 3 window(s): ")
    pooled = summarize([r for w in windows for r in w.done], 3.0, (slo,))
    row = LlmRow.from_dict(_row("seqs4-tp1-x1", 4, 205.0, 200.0, 210.0, ttft99=pooled["ttft_ms"]["p99"],
                                itl99=pooled["itl_ms"]["p99"]))
    row = replace(row, stopped=until.decision(stopped, pooled_text(row)))  # as llm/run.py's sweep does
    runner_up = _row("seqs1-tp1-x1", 4, 150.0, 140.0, 160.0, ttft99=61.0,
                     stopped="cannot win after 3 window(s): its own reason")
    record = {"kind": "llm", "slo": {"ttft_ms": 500.0, "itl_ms": 50.0}, "effort": {"min_windows": 3, "max_windows": 6}}
    return LlmSweepResult(llm_frame([row.to_dict(), runner_up]), record), pooled["ttft_ms"]["p99"], row.stopped


def test_a_point_shows_one_ttft_p99_in_the_best_line_its_decision_line_and_the_table():
    """Issue 43: the Best line said TTFT p99 326.9 ms and the same point's decision line 234.3 ms
    [145.6, 353.8] (the mean of its windows' own p99s). The decision line now states the point's
    figures over all its requests first, the numbers the Best line and the table show (the output
    tokens/s with the row's interval), and the per-window reading only after, named as the rule's
    reason."""
    result, pooled_p99, decision = decided_run()
    best_line = result.describe_best()
    assert best_line.startswith("Best (") and "seqs4-tp1-x1 (max_num_seqs 4" in best_line
    best_ttft = re.search(r"TTFT p99 ([0-9.]+) ms", best_line).group(1)  # the best point's, before the runner-up's
    assert best_ttft == f"{pooled_p99:.1f}" and best_ttft != "135.0"
    line = next(v for v in result.verdicts() if v.startswith("seqs4-tp1-x1 at concurrency 4: "))
    assert line.endswith(decision)
    stated, named, reason = line.partition(f"; {RULE_REASON}: ")
    assert named and stated == (f"seqs4-tp1-x1 at concurrency 4: separated above after 3 window(s): over all its "
                                f"requests TTFT p99 {best_ttft} ms, ITL p99 2.00 ms, 205.0 output tok/s, 95% "
                                f"[200.0, 210.0]")
    assert re.findall(r"TTFT p99 ([0-9.]+) ms", stated) == [best_ttft]  # one TTFT p99 before the reason
    assert reason.startswith("throughput per-window mean 205.0, 95% [") and "no incumbent yet" in reason
    assert "TTFT p99 per-window mean 135.0 ms, 95% [" in reason and "within 500 ms" in reason
    table = readable_table(result.table())
    assert table.text(0, "ttft_p99_ms") == significant(pooled_p99) == significant(float(best_ttft))
    assert table.text(0, "output_tokens_per_s_low") == "200–210"
    stopped_cell = table.rows[0][table.source.index("stopped")]
    assert f"TTFT p99 {best_ttft} ms" in (stopped_cell.tooltip or stopped_cell.text)


def test_the_report_gives_a_point_the_ttft_p99_of_its_best_line_and_its_table():
    """`workbench report` of the same run: its Best line, its table's TTFT p99 cell and the point's
    decision line (the ``stopped`` cell's whole text) carry the one pooled TTFT p99."""
    from workbench.report.html import report_html
    from workbench.report.run_report import run_report

    result, pooled_p99, decision = decided_run()
    page = html.unescape(report_html(run_report(result)))
    assert result.describe_best() in page and f"TTFT p99 {pooled_p99:.1f} ms" in result.describe_best()
    row = page.split("<tbody>")[1].split("</tr>")[0]
    heads = re.findall(r"<th[^>]*>(.*?)</th>", page.split("<tbody>")[0].rsplit("<thead>", 1)[1])
    cells = re.findall(r"<td[^>]*>(.*?)</td>", row)
    assert cells[next(i for i, h in enumerate(heads) if h.startswith("TTFT p99"))] == significant(pooled_p99)
    assert f"title='{decision}'" in row and decision.startswith(
        f"separated above after 3 window(s): over all its requests TTFT p99 {pooled_p99:.1f} ms"
    )
