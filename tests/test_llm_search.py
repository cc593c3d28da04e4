"""The tensor sweeps' searches walking an LLM sweep's rows (no server): the same strategies
(sweep/search/adaptive.py, capacity.py) over `LlmSearchSpace`, judged by the plan's SLO on output
tokens/s, TTFT p99 and ITL p99: the adaptive walk leaves out what a heavier point's reading rules
out, the capacity search bisects each variant's loads, and both log why, in the LLM's words; the
command line names them. tests/test_llm_sweep_vllm.py runs the adaptive search on real vLLM."""

from __future__ import annotations

import math

import pytest

from workbench.measure.engine.streaming import Slo
from workbench.measure.grid.plan import SweepError
from workbench.measure.llm.plan import LlmPlan, LlmVariant
from workbench.measure.llm.rows import ITL_P99, TTFT_P99, LlmRow
from workbench.measure.llm.search_space import LlmSearchSpace
from workbench.measure.llm.slo_effort import LlmSearch, slo_judge, stream_summaries
from workbench.measure.sweep.search import AdaptiveEffort, CapacitySearch, SearchLog, check_resume

SLO = Slo(ttft_ms=500.0, itl_ms=50.0)
PLAN = LlmPlan(max_num_seqs=(1, 4), concurrency=(8, 1, 4, 2), input_tokens=16, output_tokens=8, slo=SLO)
# (variant, concurrency) -> (output tokens/s, ITL p99 ms): seqs4 saturates at 4 and breaks the ITL SLO
# at 8; seqs1 serves one sequence at a time, so its output tokens/s does not rise with the load
GRID = {
    ("seqs4", 1): (100.0, 10.0), ("seqs4", 2): (180.0, 15.0), ("seqs4", 4): (300.0, 30.0), ("seqs4", 8): (310.0, 60.0),
    ("seqs1", 1): (100.0, 10.0), ("seqs1", 2): (101.0, 10.0), ("seqs1", 4): (99.0, 10.0), ("seqs1", 8): (100.0, 10.0),
}


def _variant(seqs: int) -> LlmVariant:
    return LlmVariant(seqs, 1, 1, None, {}, {})


def _space() -> LlmSearchSpace:
    return LlmSearchSpace.of(PLAN, [_variant(1), _variant(4), LlmVariant(8, 2, 1, None, {}, {}, "needs 2 NUMA nodes")])


def _measure(asked: list, incumbents: list | None = None):
    def measure(point, *, until=None):
        assert until is not None and until.summarize is stream_summaries  # the streaming windows, read by the rule
        if incumbents is not None:
            incumbents.append(until.incumbent)
        asked.append((point.variant.label.split("-")[0], point.concurrency))
        tokens, itl = GRID[asked[-1]]
        return LlmRow(**point.columns(), output_tokens_per_s=tokens, output_tokens_per_s_low=0.97 * tokens,
                      output_tokens_per_s_high=1.03 * tokens, ttft_p99_ms=40.0, itl_p99_ms=itl, failures=0,
                      tokens_per_user_per_s=tokens / point.concurrency)
    return measure


def test_the_space_is_the_runnable_variants_at_ascending_loads_the_likeliest_first():
    space = _space()
    assert [v.label for v in space.variants] == ["seqs1-tp1-x1", "seqs4-tp1-x1"]  # the skipped one is not walked
    assert space.shape() == (1, 4) and space.size == 8
    assert [space.level_text(i) for i in range(4)] == ["concurrency 1", "concurrency 2", "concurrency 4",
                                                       "concurrency 8"]
    assert space.order() == [1, 0]  # the most sequences per engine step first
    point = space.point(1, 0, 2)
    assert point.key == ("seqs4-tp1-x1", 4, None) and point.key in {p.key for p in PLAN.points(_variant(4))}
    rates = LlmSearchSpace.of(LlmPlan(request_rate="2,0.5", slo=SLO), [_variant(4)])
    assert rates.label(0, 0, 0) == "seqs4-tp1-x1 at 0.5 req/s" and rates.point(0, 0, 1).request_rate == 2.0


def test_the_adaptive_walk_leaves_out_what_a_heavier_reading_rules_out_and_names_the_grids_best():
    space, asked = _space(), []
    search = LlmSearch("adaptive").strategy(SLO)
    assert isinstance(search, AdaptiveEffort) and search.params["limits"] == {TTFT_P99: 500.0, ITL_P99: 50.0}
    log = SearchLog(search.name, search.params, space)
    search.run(space, _measure(asked), log)
    # seqs4 bisected up from the middle to the SLO's edge; seqs1 ruled out by its heaviest load alone
    assert asked == [("seqs4", 2), ("seqs4", 4), ("seqs4", 8), ("seqs1", 8)]
    record = log.to_dict()
    assert (record["measured_points"], record["space_points"]) == (4, 8)
    best = max((k for k in asked if GRID[k][1] <= 50.0), key=lambda k: GRID[k][0])
    grid_best = max((k for k in GRID if GRID[k][1] <= 50.0), key=lambda k: GRID[k][0])
    assert best == grid_best == ("seqs4", 4)
    assert "best seqs4-tp1-x1 at concurrency 4" in record["stopped"]
    assert "TTFT p99 <= 500 ms and ITL p99 <= 50 ms" in record["stopped"]
    assert any(n.endswith("seqs4-tp1-x1: meets TTFT p99 <= 500 ms and ITL p99 <= 50 ms at concurrency 4 and misses "
                          "it at concurrency 8") for n in record["notes"])
    assert any("seqs1-tp1-x1: cannot win, nothing else measured: its heaviest load's throughput ends at 103.0, "
               "below seqs4-tp1-x1 at concurrency 4's [291.0, 309.0]" in n for n in record["notes"])
    step = record["steps"][1]
    assert (step["variant"], step["concurrency"], step["request_rate"]) == ("seqs4-tp1-x1", 4, None)
    assert step["output_tokens_per_s"] == 300.0 and step["itl_p99_ms"] == 30.0 and step["meets_budget"] is True
    assert record["steps"][2]["meets_budget"] is False  # ITL p99 60 ms: past the SLO


def test_a_failed_or_unusable_point_never_becomes_the_answer():
    judge = slo_judge(SLO)
    row = LlmRow(**PLAN.points(_variant(4))[0].columns(), output_tokens_per_s=500.0, ttft_p99_ms=10.0,
                 itl_p99_ms=5.0, failures=2)
    assert not judge.meets(row) and judge.score(row) == -math.inf
    assert judge.score(LlmRow.failed(PLAN.points(_variant(4))[0], "load failed")) == -math.inf


def test_an_llm_search_is_judged_by_the_slo_and_a_resume_with_another_search_is_refused():
    adaptive = LlmSearch("adaptive", max_windows=5).strategy(SLO)
    assert adaptive.params["max_windows"] == 5 and adaptive.params["window_s"] is None  # the run's own windows
    assert LlmSearch("grid").strategy(SLO) is None
    with pytest.raises(ValueError, match="unknown search 'halving' for an LLM sweep; choose grid, adaptive or capacity"):
        LlmSearch("halving")
    with pytest.raises(SweepError, match="give a latency budget or a judge, not both"):
        AdaptiveEffort(20.0, judge=slo_judge(SLO))
    check_resume(adaptive, {"search": adaptive.to_dict()})
    with pytest.raises(SweepError, match="cannot resume a run made by search .*'grid'.* with search .*'adaptive'"):
        check_resume(adaptive, {"search": None})
    other = LlmSearch("adaptive").strategy(Slo(ttft_ms=500.0, itl_ms=20.0))
    with pytest.raises(SweepError, match="cannot resume a run made by search"):
        check_resume(other, {"search": adaptive.to_dict()})


def test_the_capacity_search_bisects_each_variants_loads_for_the_highest_meeting_the_slo():
    space, asked, incumbents = _space(), [], []
    search = LlmSearch("capacity", max_windows=6).strategy(SLO)
    assert isinstance(search, CapacitySearch) and search.params == {
        "limits": {TTFT_P99: 500.0, ITL_P99: 50.0}, "min_windows": 3, "max_windows": 6}
    log = SearchLog(search.name, search.params, space)
    search.run(space, _measure(asked, incumbents), log)
    # bisection from the middle: seqs4 meets at 2 and 4, breaks ITL at 8; seqs1 meets everywhere
    assert asked == [("seqs4", 2), ("seqs4", 4), ("seqs4", 8), ("seqs1", 2), ("seqs1", 4), ("seqs1", 8)]
    assert incumbents == [None] * 6  # each level decided against the SLO alone
    record = log.to_dict()
    assert (record["measured_points"], record["space_points"]) == (6, 8)
    assert [n.split(": ", 1)[1] for n in record["notes"]] == [
        "seqs4-tp1-x1: capacity concurrency 4: meets TTFT p99 <= 500 ms and ITL p99 <= 50 ms there, misses them "
        "at concurrency 8",
        "seqs4-tp1-x1 at concurrency 1 left out by a bound: seqs4-tp1-x1 at concurrency 2, no lighter, met TTFT p99 "
        "<= 500 ms and ITL p99 <= 50 ms (TTFT p99 40.0 ms, ITL p99 15.0 ms): the capacity is there or higher",
        "seqs1-tp1-x1: capacity concurrency 8: meets TTFT p99 <= 500 ms and ITL p99 <= 50 ms there, the highest "
        "load planned",
        "seqs1-tp1-x1 at concurrency 1 left out by a bound: seqs1-tp1-x1 at concurrency 2, no lighter, met TTFT p99 "
        "<= 500 ms and ITL p99 <= 50 ms (TTFT p99 40.0 ms, ITL p99 10.0 ms): the capacity is there or higher",
    ]
    assert record["stopped"].endswith("the most throughput at capacity: seqs4-tp1-x1 at concurrency 4, 300.0")


def test_the_capacity_search_starts_with_the_variant_the_server_serves_and_names_the_same_answer():
    """Loading the variant served now starts no engine: the capacity search, whose variants decide
    nothing for one another, measures it first; the adaptive walk keeps the likeliest answer first."""
    serving = LlmSearchSpace.of(PLAN, [_variant(1), _variant(4)], serving=_variant(1))
    assert serving.serving == 0 and serving.order() == [1, 0] and serving.serving_first() == [0, 1]
    assert _space().serving is None and _space().serving_first() == [1, 0]  # none served: the likeliest first
    assert LlmSearchSpace.of(PLAN, [_variant(4)], serving=_variant(1)).serving is None  # not one of the plan's
    logs = {}
    for name, space in (("likeliest first", _space()), ("served first", serving)):
        asked: list = []
        search = LlmSearch("capacity").strategy(SLO)
        logs[name] = SearchLog(search.name, search.params, space)
        search.run(space, _measure(asked), logs[name])
        assert [v for v, _ in asked] == (["seqs4"] * 3 + ["seqs1"] * 3 if name == "likeliest first"
                                         else ["seqs1"] * 3 + ["seqs4"] * 3), asked
    assert logs["served first"].stopped == logs["likeliest first"].stopped
    def notes(log):  # without "after step N: ", which the order changes
        return sorted(n.split(": ", 1)[1] for n in log.notes)

    assert notes(logs["served first"]) == notes(logs["likeliest first"])


def test_a_variant_missing_the_slo_at_its_lowest_load_has_no_capacity():
    tight = Slo(ttft_ms=500.0, itl_ms=5.0)
    space, asked = _space(), []
    search = LlmSearch("capacity").strategy(tight)
    log = SearchLog(search.name, search.params, space)
    search.run(space, _measure(asked), log)
    assert asked == [("seqs4", 2), ("seqs4", 1), ("seqs1", 2), ("seqs1", 1)]
    assert all("no capacity: misses TTFT p99 <= 500 ms and ITL p99 <= 5 ms already at the lowest load, "
               "concurrency 1" in n for n in log.notes if ": no capacity: " in n)
    # the loads above a miss are noted with the miss that decided them and its reading
    assert [n.split(": ", 1)[1] for n in log.notes if " left out by a bound: " in n][:2] == [
        f"seqs4-tp1-x1 at concurrency {c} left out by a bound: seqs4-tp1-x1 at concurrency 2, no heavier, missed "
        "TTFT p99 <= 500 ms and ITL p99 <= 5 ms (TTFT p99 40.0 ms, ITL p99 15.0 ms): latency grows with the load"
        for c in (4, 8)]
    assert "none meets the limits at any load" in log.stopped


@pytest.mark.parametrize("name", ["adaptive", "capacity"])
def test_the_command_line_names_the_llm_search_and_refuses_capacity_for_a_tensor_model(tmp_path, name):
    from workbench.cli import build_parser
    from workbench.cli.llm_sweep import llm_search
    from workbench.cli.sweep import search_from_args

    parser = build_parser("sweep")
    args = parser.parse_args(["sweep", str(tmp_path), "--out", str(tmp_path / "run"), "--search", name,
                              "--max-windows", "4"])
    problems: list[str] = []
    assert llm_search(args, args.flag_defaults, problems) == LlmSearch(name, max_windows=4) and problems == []
    if name == "capacity":
        with pytest.raises(SweepError, match="--search capacity is for LLM sweeps \\(a vLLM-backend model\\); a "
                                             "tensor model takes grid, bisection"):
            search_from_args(args)


def test_run_llm_sweep_refuses_a_search_it_cannot_judge_before_anything_starts(tmp_path):
    from workbench.measure.llm import run_llm_sweep
    from workbench.measure.sweep.search.effort import EffortRule

    out = tmp_path / "run"
    for search, message in (
        ("halving", "unknown search 'halving' for an LLM sweep"),
        (AdaptiveEffort(20.0), "search must be an LlmSearch or a name \\('grid', 'adaptive', 'capacity'\\), got "
                               "AdaptiveEffort: an LLM sweep's search is judged by its plan's SLO"),
    ):
        with pytest.raises(SweepError, match=message):
            run_llm_sweep(PLAN, object(), tmp_path, out_dir=out, search=search)
    with pytest.raises(SweepError, match="give effort .* or a search .*, not both"):
        run_llm_sweep(PLAN, object(), tmp_path, out_dir=out, search="adaptive", effort=EffortRule())
    assert not out.exists()
