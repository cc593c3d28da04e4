"""Searches beside the grid: each strategy's stopping rule on tables whose answers are known, then
every strategy on one real tritonserver (the zoo's add_sub, as in test_sweep): only plan points
measured, the log says what and why, resume replays without measuring again, the answer names
the best with its margin and the runner-up, and `workbench sweep --search`."""

from __future__ import annotations

import html
import json
import math
import os
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from workbench.cli import main
from workbench.coremap import CoreRange
from workbench.generate.config import read_config
from workbench.measure.watch.free_cores import check_core_ownership, neuron_holders
from workbench.measure.grid.plan import SweepError, SweepPlan
from workbench.measure.store.results import POINTS_FILE, RECORD_FILE, SCREENING_FILE, frame_from_rows
from workbench.measure.grid.rows import PointRow
from workbench.measure.sweep.search import (
    AdaptiveEffort,
    ConcurrencyBisection,
    EarlyStop,
    HillClimb,
    SearchLog,
    SuccessiveHalving,
    SearchSpace,
    answer,
    make_search,
)
from workbench.measure.engine.measure_settings import MeasureSettings
from workbench.measure.sweep import run_sweep
from workbench.measure.sweep.search.bounds import Bound, VariantFacts
from workbench.measure.watch.variant_times import times_frame
from workbench.server import TritonServer

FAST = MeasureSettings(engine="workbench", window_s=0.2, max_windows=3, warmup_requests=5, time_limit_s=None)
# the sweep-mechanics tests (cancel, resume, refusals) assert rows, records and decisions, not figures:
# one short window a point is enough for them (each window keeps both cores busy)
QUICK = replace(FAST, window_s=0.1, stable_windows=1, max_windows=1)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, generate_cpu_model):
    return generate_cpu_model(tmp_path_factory.mktemp("search"), cpu_affinity=True)


@pytest.fixture(scope="module")
def server(model_dir):
    with TritonServer(model_dir.parent) as running:
        running.load("add_sub")
        yield running


# ---- stopping rules on known tables ------------------------------------------------------------


def _space(model_dir, allocations="1x1,2x1,1x2", batches=(1, 4, 8), concurrency=(1, 2, 4, 8), core_range="0:1"):
    plan = SweepPlan(batch_sizes=list(batches), allocations=allocations, concurrency=list(concurrency),
                     core_range=core_range)
    return plan, SearchSpace.of(plan, plan.variants(read_config(model_dir)))


def _table_measure(table):
    """measure(point) from {(allocation, batch, concurrency): (throughput, p99)}; keeps the order asked."""
    asked = []

    def measure(point):
        asked.append(point.key)
        throughput, p99 = table(point.variant.allocation.label, point.batch_size, point.concurrency)
        return PointRow(**point.columns(), throughput=throughput, p99_ms=p99, p50_ms=p99 / 2, failures=0,
                        outputs_ok=True, stable=True)
    return measure, asked


def _latency_model(allocation, batch, concurrency):
    """Throughput saturating with concurrency, better with more instances; p99 grows with load."""
    speed = {"1x1": 1.0, "1x2": 1.3, "2x1": 1.8}[allocation]
    throughput = speed * batch * 100 * min(concurrency, 4) / (1 + 0.02 * batch)
    p99 = batch * concurrency / speed
    return throughput, p99


def test_space_orders_allocations_by_cores_then_instances(model_dir):
    _plan, space = _space(model_dir, allocations="2x1,1x1,1x2", batches=(8, 1))
    assert [v.allocation.label for v in space.variants] == ["1x1", "1x2", "2x1"]
    assert space.batch_sizes == (1, 8) and space.size == 3 * 2 * 4


def test_bisection_closes_the_bracket_per_cell(model_dir):
    _plan, space = _space(model_dir, allocations="1x1", batches=(4,), concurrency=(1, 2, 4, 8, 16))
    measure, asked = _table_measure(_latency_model)
    log = SearchLog("bisection", {}, space)
    ConcurrencyBisection(latency_budget_ms=10).run(space, measure, log)
    # p99 = 4 x concurrency meets 10 ms at 2, misses at 4: the middle (4) first, then bisect 1..2
    assert [c for _v, _b, c in asked] == [4, 1, 2]
    assert log.notes[-1].endswith("p99 meets the budget at concurrency 2 and misses it at 4")
    assert "bisected" in log.stopped and [s["meets_budget"] for s in log.steps] == [False, True, True]


def test_bisection_edges_say_which_end_was_hit(model_dir):
    _plan, space = _space(model_dir, allocations="1x1", batches=(1,))
    measure, asked = _table_measure(_latency_model)
    log = SearchLog("bisection", {}, space)
    ConcurrencyBisection(latency_budget_ms=1000).run(space, measure, log)
    assert [c for *_k, c in asked] == [2, 4, 8] and "up to the highest concurrency 8" in log.notes[-1]
    measure, asked = _table_measure(_latency_model)
    log = SearchLog("bisection", {}, space)
    ConcurrencyBisection(latency_budget_ms=0.5).run(space, measure, log)
    assert [c for *_k, c in asked] == [2, 1] and "misses the budget already at the lowest concurrency 1" in log.notes[-1]


def test_early_stop_ends_walks_when_throughput_stops_growing_or_p99_misses(model_dir):
    _plan, space = _space(model_dir, allocations="1x1")
    measure, asked = _table_measure(_latency_model)
    log = SearchLog("early-stop", {}, space)
    EarlyStop(latency_budget_ms=30, min_gain=0.05).run(space, measure, log)
    # batch 1: throughput grows to concurrency 4, flat at 8; batch 4: p99 32 ms at 8 misses; batch 8 misses at 4
    assert asked == [("1x1", 1, 1), ("1x1", 1, 2), ("1x1", 1, 4), ("1x1", 1, 8),
                     ("1x1", 4, 1), ("1x1", 4, 2), ("1x1", 4, 4), ("1x1", 4, 8),
                     ("1x1", 8, 1), ("1x1", 8, 2), ("1x1", 8, 4)]
    assert any("batch 1: concurrency walk ends at 8: throughput gained less than 5%" in n for n in log.notes)
    assert any("batch 4: concurrency walk ends at 8: p99 32.00 ms misses the budget" in n for n in log.notes)


def test_early_stop_ends_the_batch_walk_when_the_best_stops_growing(model_dir):
    _plan, space = _space(model_dir, allocations="1x1", concurrency=(1,))
    flat = lambda allocation, batch, concurrency: (100.0 + batch, 1.0)  # noqa: E731
    measure, asked = _table_measure(flat)
    log = SearchLog("early-stop", {}, space)
    EarlyStop(min_gain=0.05).run(space, measure, log)
    assert asked == [("1x1", 1, 1), ("1x1", 4, 1)]
    assert "batch walk ends at 4: best throughput gained less than 5% over 1 batch size(s)" in log.notes[-1]


def _grid_best(plan, space, table, budget):
    grid = [PointRow(**p.columns(), throughput=t, p99_ms=l, p50_ms=l / 2, failures=0, outputs_ok=True)
            for v in space.variants for p in plan.points(v) for t, l in [table(v.allocation.label, p.batch_size, p.concurrency)]]
    best = answer(frame_from_rows(r.to_dict() for r in grid), budget).best
    return best["variant"], best["batch_size"], best["concurrency"]


def _climbs(log):
    return [n.split(": ", 2)[1] for n in log.notes if ": climb from" in n]


def test_hill_climb_starts_at_the_best_screen_and_stops_when_every_neighbour_is_ruled_out(model_dir):
    plan, space = _space(model_dir)
    screen, screened = _table_measure(_latency_model)
    measure, asked = _table_measure(_latency_model)
    log = SearchLog("hill-climb", {}, space)
    HillClimb(latency_budget_ms=20).run(space, measure, log, screen)
    assert {(v, b) for v, b, _c in screened} == {(v.label, b) for v in space.variants for b in space.batch_sizes}
    # 2x1 batch 8 screens best (4966 infer/s at concurrency 4): measured in full from that level up;
    # its neighbours (every variant, batch 4 and 8) all screen more than 30% below it, yet the best of
    # them, 2x1 batch 4 (2667 infer/s up to concurrency 8), is measured in full all the same
    assert asked == [("2x1", 8, 4), ("2x1", 8, 8), ("2x1", 4, 8)]
    assert asked[0] == _grid_best(plan, space, _latency_model, 20)
    assert any(n.endswith("climb starts at 2x1 batch 8: the best screen, 4965.5 infer/s") for n in log.notes)
    assert any(n.endswith("2x1 batch 4: the best screen beside 2x1 batch 8, measured in full although its screen "
                          "is far below: one screen alone does not end the climb") for n in log.notes)
    ruled = [n for n in log.notes if "not measured in full beside 2x1 batch 8" in n]
    assert len(ruled) == 4 and all("more than 30% below it" in n for n in ruled)
    assert log.stopped.startswith("local optimum: every neighbour of 2x1 batch 8 (diagonals included) is measured "
                                  "in full or ruled out by its screen")
    assert log.stopped.endswith("(2 of 9 cells measured in full)")
    with pytest.raises(SweepError, match="hill-climb search screens points: run it through run_sweep"):
        HillClimb(latency_budget_ms=20).run(space, measure, log)


def test_hill_climb_neighbours_are_one_step_on_every_axis_diagonals_included(model_dir):
    from workbench.measure.sweep.search.hill_climb import neighbours

    _plan, space = _space(model_dir, allocations="1x1,2x1,1x2,3x1", batches=(1, 4, 8), core_range="0:2")
    index = {v.allocation.label: i for i, v in enumerate(space.variants)}
    labels = lambda cells: {(space.variants[v].allocation.label, space.batch_sizes[b]) for v, b in cells}  # noqa: E731
    # instances and cores per instance are two axes: 2x1 and 1x2 differ by one step on each
    assert labels(neighbours(space, (index["1x2"], 0))) == {("1x1", 1), ("1x1", 4), ("2x1", 1), ("2x1", 4), ("1x2", 4)}
    # 3x1 is two instances away from 1x1 and 1x2
    assert labels(neighbours(space, (index["3x1"], 1))) == {(a, b) for a in ("2x1", "3x1") for b in (1, 4, 8)} - {("3x1", 4)}


def test_hill_climb_gets_past_one_bad_cell(model_dir):
    """What stalled a climb from one fixed cell along the axes: a cell that measures badly. Here
    1x1 batch 8 screens best but misses the budget in full at every concurrency (as the judging
    run's centre cell did), and 1x2 batch 4, the next best screen, is only a diagonal step from
    the grid's best, 2x1 batch 8. The climb starts again from the next screen and steps across."""
    plan, space = _space(model_dir)
    fluke = {("1x1", 8): 5.0, ("1x2", 4): 3.0}  # screened this many times their throughput

    def screened_at(allocation, batch, concurrency):
        throughput, p99 = _latency_model(allocation, batch, concurrency)
        return throughput * fluke.get((allocation, batch), 1.0), p99

    def in_full(allocation, batch, concurrency):
        throughput, p99 = _latency_model(allocation, batch, concurrency)
        return (throughput, 100.0) if (allocation, batch) == ("1x1", 8) else (throughput, p99)

    screen, _screened = _table_measure(screened_at)
    measure, asked = _table_measure(in_full)
    log = SearchLog("hill-climb", {}, space)
    HillClimb(latency_budget_ms=20).run(space, measure, log, screen)
    assert asked == [("1x1", 8, 2), ("1x1", 8, 1),  # from the screen's answer down: every level misses
                     ("1x2", 4, 4), ("1x2", 4, 8), ("2x1", 8, 4), ("2x1", 8, 8),
                     ("2x1", 4, 8)]  # the best screen beside 2x1 batch 8: lower in full, the climb stops
    assert asked[4] == _grid_best(plan, space, in_full, 20)
    assert any(n.endswith("1x1 batch 8: screened 6896.6 infer/s but no concurrency meets the budget in full; "
                          "the next best screen") for n in log.notes)
    assert any(n.endswith("climb starts at 1x2 batch 4: the best screen whose cell meets the budget in full, "
                          "5777.8 infer/s") for n in log.notes)
    assert _climbs(log) == ["climb from 1x2 batch 4 to 2x1 batch 8"]  # instances, cores and batch: one step each
    assert "local optimum: every neighbour of 2x1 batch 8" in log.stopped
    assert log.stopped.endswith("(4 of 9 cells measured in full)")


def test_a_screen_rules_a_level_out_only_when_its_whole_p99_interval_misses_the_budget(model_dir):
    """A short screen's p99 moves by a quarter between runs of one point; read at face value it
    dropped the grid's best cell (search_vs_grid, quiet: 2x1 batch 8 never measured in full).
    Here every screen reads p99 1.5x its true value with an interval reaching down to it: the
    screen keeps the levels the full measurement then meets, and the climb finds the grid's best."""
    plan, space = _space(model_dir)

    def screen(point):
        throughput, p99 = _latency_model(point.variant.allocation.label, point.batch_size, point.concurrency)
        return PointRow(**point.columns(), throughput=throughput, p99_ms=1.5 * p99, p99_low_ms=p99,
                        p99_high_ms=2 * p99, p50_ms=p99 / 2, failures=0, outputs_ok=True, stable=True)

    measure, asked = _table_measure(_latency_model)
    log = SearchLog("hill-climb", {}, space)
    HillClimb(latency_budget_ms=20).run(space, measure, log, screen)
    assert asked[0] == _grid_best(plan, space, _latency_model, 20) == ("2x1", 8, 4)
    best_screen = [s for s in log.screens if (s["variant"], s["batch_size"], s["concurrency"]) == ("2x1", 8, 4)]
    assert len(best_screen) == 1 and best_screen[0]["p99_ms"] > 20 and best_screen[0]["meets_budget"]
    # at face value (no interval) the same screens miss there (p99 1.5 x 17.8 ms), so the climb
    # starts at another cell and needs more full points to reach the best
    face, _ = _table_measure(lambda a, b, c: (_latency_model(a, b, c)[0], 1.5 * _latency_model(a, b, c)[1]))
    measure2, asked2 = _table_measure(_latency_model)
    log2 = SearchLog("hill-climb", {}, space)
    HillClimb(latency_budget_ms=20).run(space, measure2, log2, face)
    assert not [s for s in log2.screens if (s["variant"], s["batch_size"], s["concurrency"]) == ("2x1", 8, 4)
                and s["meets_budget"]]
    assert asked2[0] != ("2x1", 8, 4) and len(asked2) > len(asked)


def test_hill_climb_stops_when_no_screen_meets_the_budget(model_dir):
    _plan, space = _space(model_dir, allocations="1x1,2x1", batches=(4,))
    screen, screened = _table_measure(_latency_model)
    measure, asked = _table_measure(_latency_model)
    log = SearchLog("hill-climb", {}, space)
    HillClimb(latency_budget_ms=0.5).run(space, measure, log, screen)
    assert asked == [] and [c for *_k, c in screened] == [2, 1, 2, 1]
    assert log.stopped == "no cell meets p99 <= 0.5 ms in the screen (0 of 2 cells measured in full)"


def test_halving_screens_every_cell_and_measures_only_the_survivors_in_full(model_dir):
    plan, space = _space(model_dir)
    screen, screened = _table_measure(_latency_model)
    measure, asked = _table_measure(_latency_model)
    log = SearchLog("halving", {}, space)
    SuccessiveHalving(latency_budget_ms=20, within=0.15, keep=1).run(space, measure, log, screen)
    # every variant x batch size screened by bisection; in full only each variant's best cell, and only
    # while it was within 15% of the best screen so far
    assert {(v, b) for v, b, _c in screened} == {(v.label, b) for v in space.variants for b in space.batch_sizes}
    # each variant's best screened cell beat the best before it, so each is measured in full, once
    assert asked == [("1x1", 4, 4), ("1x2", 4, 4), ("2x1", 8, 4)]
    grid = [PointRow(**p.columns(), throughput=t, p99_ms=l, p50_ms=l / 2, failures=0, outputs_ok=True)
            for v in space.variants for p in plan.points(v) for t, l in [_latency_model(v.allocation.label, p.batch_size, p.concurrency)]]
    best = answer(frame_from_rows(r.to_dict() for r in grid), 20).best
    assert (best["variant"], best["batch_size"], best["concurrency"]) == asked[-1]
    # screens and full points in the order asked: one variant after the other, so each is loaded once
    calls = []
    both = [lambda p, f=f: (calls.append(p.variant.label), f(p))[1] for f in _table_measure(_latency_model)[:1] * 2]
    SuccessiveHalving(latency_budget_ms=20, within=0.15, keep=1).run(space, both[0], SearchLog("halving", {}, space), both[1])
    assert calls == sorted(calls, key=["1x1", "1x2", "2x1"].index) and len(calls) == len(screened) + len(asked)
    assert [s["variant"] for s in log.screens] == [k[0] for k in screened] and len(log.steps) == 3
    assert log.to_dict()["screened_points"] == len(set(screened)) and log.to_dict()["measured_points"] == 3
    assert "3 of 9 cells measured in full" in log.stopped
    assert any("1x1 batch 8: not measured in full: screened" in n and "is clearly below the best screen" in n
               and "1 cell(s) of the variant are measured in full already (keep 1)" in n for n in log.notes)


def test_halving_retries_a_full_miss_one_level_down(model_dir):
    _plan, space = _space(model_dir, allocations="1x1,2x1", batches=(4,))
    screen, _screened = _table_measure(_latency_model)
    slower = lambda a, b, c: (_latency_model(a, b, c)[0], _latency_model(a, b, c)[1] * 1.5)  # noqa: E731
    measure, asked = _table_measure(slower)
    log = SearchLog("halving", {}, space)
    SuccessiveHalving(latency_budget_ms=10, within=0.15).run(space, measure, log, screen)
    # screen: 1x1 batch 4 meets 10 ms at concurrency 2 (p99 8); in full p99 is 12: one level down, 1
    assert asked == [("1x1", 4, 2), ("1x1", 4, 1), ("2x1", 4, 4), ("2x1", 4, 2)]
    assert [s["why"] for s in log.steps][1] == "missed the budget in full: one concurrency level down"
    with pytest.raises(SweepError, match="screens points: run it through run_sweep"):
        SuccessiveHalving(latency_budget_ms=10).run(space, measure, log)
    with pytest.raises(SweepError, match="screen_window_s 0 must be a positive number"):
        SuccessiveHalving(latency_budget_ms=10, screen_window_s=0)
    with pytest.raises(SweepError, match="within 1.5 must be a fraction"):
        SuccessiveHalving(latency_budget_ms=10, within=1.5)
    short = SuccessiveHalving(latency_budget_ms=10, screen_window_s=0.05).screening(FAST)
    assert (short.window_s, short.stable_windows, short.max_windows, short.min_latencies) == (0.05, 1, 1, 0)
    assert short.engine == FAST.engine and short.seed == FAST.seed


def test_halving_measures_nothing_in_full_far_below_the_best_screen(model_dir):
    _plan, space = _space(model_dir, allocations="1x1,2x1", batches=(4,))
    fast_first = lambda a, b, c: _latency_model({"1x1": "2x1", "2x1": "1x1"}[a], b, c)  # noqa: E731
    screen, _screened = _table_measure(fast_first)
    measure, asked = _table_measure(fast_first)
    log = SearchLog("halving", {}, space)
    SuccessiveHalving(latency_budget_ms=10, within=0.15).run(space, measure, log, screen)
    assert asked == [("1x1", 4, 4)]  # 2x1 screened at 741 infer/s, far below 1x1's 2667
    assert any(n.endswith("2x1 batch 4: not measured in full: screened 740.7 infer/s is clearly below the best "
                          "screen 2666.7 infer/s and more than 15% below it") for n in log.notes)


def test_halving_drops_a_cell_only_when_its_screen_interval_is_clearly_below_the_best(model_dir):
    """A screen's own 95% interval decides: a cell far below the best by throughput but whose interval
    reaches the best's is measured in full; one whose interval ends below the best's start is not."""
    _plan, space = _space(model_dir, allocations="1x1", batches=(1, 4, 8), concurrency=(1,))
    screened_at = {1: (1000.0, 900.0, 1100.0), 4: (600.0, 300.0, 950.0), 8: (600.0, 550.0, 650.0)}

    def screen(point):
        t, low, high = screened_at[point.batch_size]
        return PointRow(**point.columns(), throughput=t, throughput_low=low, throughput_high=high, p99_ms=1.0,
                        failures=0, outputs_ok=True, stable=True)
    measure, asked = _table_measure(lambda a, b, c: (100.0 * b, 1.0))
    log = SearchLog("halving", {}, space)
    SuccessiveHalving(latency_budget_ms=10, within=0.15, keep=1).run(space, measure, log, screen)
    # batch 4 screened 40% below the best, and keep 1 is used up, yet its interval overlaps: measured
    assert asked == [("1x1", 1, 1), ("1x1", 4, 1)]
    assert any("its interval overlaps the best screen's" in s["why"] for s in log.steps if s["batch_size"] == 4)
    assert any(n.endswith("1x1 batch 8: not measured in full: screened 600.0 infer/s [550.0, 650.0] is clearly "
                          "below the best screen 1000.0 infer/s [900.0, 1100.0] and more than 15% below it")
               for n in log.notes)


def test_searches_that_need_a_budget_say_so_and_bad_names_are_refused():
    with pytest.raises(SweepError, match="hill-climb search needs a p99 latency budget"):
        HillClimb()
    with pytest.raises(SweepError, match="must be a positive number"):
        ConcurrencyBisection(latency_budget_ms=-1)
    with pytest.raises(SweepError, match="unknown search 'optuna'; choose grid, bisection, early-stop, hill-climb, halving, adaptive"):
        make_search("optuna")
    assert make_search("grid") is None and make_search("early-stop").params["min_gain"] == 0.05
    from workbench.cli.sweep import SEARCH_NAMES
    from workbench.measure.sweep.search.choice import search_names

    assert SEARCH_NAMES == search_names()  # the parser's choices, written out so --help imports no pandas


def test_answer_names_margin_and_a_runner_up_of_another_configuration(model_dir):
    plan, space = _space(model_dir, allocations="1x1,2x1", batches=(1, 4), concurrency=(1, 2))
    rows = [PointRow(**p.columns(), throughput=t, p99_ms=l, p50_ms=l / 2, failures=0, outputs_ok=True).to_dict()
            for v in space.variants for p in plan.points(v) for t, l in [_latency_model(v.allocation.label, p.batch_size, p.concurrency)]]
    found = answer(frame_from_rows(rows), latency_budget_ms=10)
    assert (found.best["variant"], found.best["batch_size"], found.best["concurrency"]) == ("2x1", 4, 2)
    assert found.margin_ms == pytest.approx(10 - 8 / 1.8)
    assert (found.runner_up["variant"], found.runner_up["batch_size"]) != ("2x1", 4)
    assert (found.runner_up["variant"], found.runner_up["batch_size"], found.runner_up["concurrency"]) == ("1x1", 4, 2)
    text = found.describe()
    assert "Best: 2x1, batch 4, concurrency 2" in text and "of the budget to spare" in text and "Runner-up: 1x1, batch 4" in text


def _recorded_grids():
    """The three 36-point grids of benchmarks/README.md (the quiet-machine runs of search_vs_grid.py)."""
    runs = json.loads((Path(__file__).parent / "data" / "search_grids.json").read_text())["runs"]
    return [(run["p99_budget_ms"], {(a, b, c): (x, p99) for a, b, c, x, p99 in run["points"]}) for run in runs]


@pytest.mark.parametrize("run", [0, 1, 2], ids=["budget 41 ms", "budget 15 ms", "budget 19 ms"])
def test_the_adaptive_walk_names_the_grids_answer_from_a_fifth_of_its_points(model_dir, run):
    """On each recorded grid (every point read as the grid measured it), the adaptive search's
    walk names the grid's best or a point within 5% of it under the budget, measures at most 8 of
    the 36 points (bisection of every cell measures 19-23 there), and loads each variant once:
    the likeliest answer first, then the one whose load waits for fewer instances to exit."""
    budget, grid = _recorded_grids()[run]
    _plan, space = _space(model_dir)
    asked = []

    def measure(point, until=None):
        asked.append((point.variant.allocation.label, point.batch_size, point.concurrency))
        throughput, p99 = grid[asked[-1]]
        return PointRow(**point.columns(), throughput=throughput, p99_ms=p99, p50_ms=p99 / 2, failures=0,
                        outputs_ok=True, stable=True)

    log = SearchLog("adaptive", {}, space)
    AdaptiveEffort(latency_budget_ms=budget).run(space, measure, log)
    best = max(x for x, p99 in grid.values() if p99 <= budget)
    named = max((k for k in asked if grid[k][1] <= budget), key=lambda k: grid[k][0])
    assert grid[named][0] >= 0.95 * best and len(asked) == len(set(asked)) <= 8, (named, asked)
    variants = [label for label, _b, _c in asked]
    assert [v for i, v in enumerate(variants) if i == 0 or variants[i - 1] != v] == ["1x2", "1x1", "2x1"]
    # the later variants were ruled out by their heaviest point alone, and the log says why
    assert asked[-2:] == [("1x1", 8, 8), ("2x1", 8, 8)]
    assert sum("cannot win, nothing else measured" in note for note in log.notes) == 2
    assert "left out by a heavier point's throughput" in log.stopped
    # every point not measured was decided by a bound, and the log says which and on what reading
    assert {(p.variant, p.batch_size, p.concurrency) for p in log.bounded} == set(grid) - set(asked)
    assert all(p.by in asked and p.after_step <= len(asked) for p in log.bounded)


def test_a_heavier_point_vouches_condemns_and_bounds_the_lighter_ones():
    facts = VariantFacts(levels=4)
    facts.add(2, 1, meets=True, throughput_high=900.0)   # batch index 2, concurrency index 1 met the budget
    facts.add(1, 3, meets=False, throughput_high=800.0)  # a miss condemns every heavier point
    assert facts.known_to_meet(0, 0) and facts.known_to_meet(2, 1) and not facts.known_to_meet(2, 2)
    assert facts.known_to_miss(2, 3) and not facts.known_to_miss(1, 2) and not facts.known_to_miss(0, 3)
    assert facts.bracket(1) == (1, 3) and facts.bracket(2) == (1, 3) and facts.bracket(0) == (1, 4)
    assert facts.bound(0, 1) == Bound(800.0, (1, 3))  # the lowest of the heavier points' high ends
    assert facts.bound(2, 1) == Bound(900.0, (2, 1)) and facts.bound(2, 2).by is None
    assert facts.bound(0, 1).below(850.0) and not facts.bound(2, 2).below(850.0)
    facts.add(0, 0, meets=False, throughput_high=float("nan"))  # a failed point bounds nothing
    assert facts.bound(0, 0) == Bound(800.0, (1, 3)) and facts.measured(0, 0) and not facts.measured(0, 1)
    assert facts.bracket(0) == (1, 0)  # contradicting facts (noise): the walk reads high 0 as "misses at the lowest"


# ---- on a real server --------------------------------------------------------------------------


@pytest.mark.server
@pytest.mark.alone  # which branch a 0.05 s screen takes depends on the machine being otherwise idle
@pytest.mark.parametrize("search, rule", [
    (ConcurrencyBisection(latency_budget_ms=60_000), "up to the highest concurrency 4"),
    (ConcurrencyBisection(latency_budget_ms=0.001), "misses the budget already at the lowest concurrency 1"),
    (EarlyStop(latency_budget_ms=0.001), "concurrency walk ends at 1: p99"),
    (HillClimb(latency_budget_ms=0.001, screen_window_s=0.05), "no cell meets p99 <= 0.001 ms in the screen"),
    (HillClimb(latency_budget_ms=60_000, screen_window_s=0.05, within=0.9),
     "is measured in full or ruled out by its screen, and none beats its"),
    (SuccessiveHalving(latency_budget_ms=60_000, screen_window_s=0.05, within=0.9, keep=1),
     "2 of 4 cells measured in full"),
])
def test_each_strategy_stops_by_its_rule_on_a_real_server(server, model_dir, tmp_path, search, rule):
    # two variants of one instance each: a rule is about points, and a load of one stub is the cheapest
    plan = SweepPlan(batch_sizes=[1, 4], allocations="1x1,1x2", concurrency=[1, 2, 4], core_range="0:1")
    result = run_sweep(plan, server, model_dir, out_dir=tmp_path / "run", settings=FAST, search=search)
    record = json.loads((tmp_path / "run" / RECORD_FILE).read_text())["search"]
    assert result.complete and record["name"] == search.name
    assert any(rule in note for note in record["notes"] + [record["stopped"]])
    # nothing in full only when no screen met the budget
    in_full = not (search.screening(FAST) is not None and search.latency_budget_ms < 1)
    assert (0 < len(result.frame) if in_full else result.frame.empty) and len(result.frame) < plan.size
    assert record["measured_points"] == len(result.frame)
    # every point once, in the order measured; then, when one measurement could not tell it from the
    # runner-up, the answer once more (confirm.py)
    steps = [(s["variant"], s["batch_size"], s["concurrency"]) for s in record["steps"]]
    again = [s for s in record["steps"] if s["why"].startswith("the answer measured again")]
    assert steps[:len(steps) - len(again)] == list(
        zip(result.frame["variant"], result.frame["batch_size"], result.frame["concurrency"]))
    assert len(again) == len(record["confirmed"]) <= 1
    if again:  # a point measured before, named by its label
        v, b, c = steps[-1]
        assert steps[-1] in steps[:-1] and record["confirmed"] == [f"{v} batch {b} concurrency {c}"]
    assert result.frame["outputs_ok"].all() and (result.frame["throughput"] > 0).all()
    screens = [json.loads(line) for line in (tmp_path / "run" / SCREENING_FILE).read_text().splitlines()] \
        if search.screening(FAST) is not None else []
    times = times_frame(result.record).set_index("variant")
    # every variant loaded (to screen or to measure) was timed
    assert set(times.index) == set(result.frame["variant"]) | {r["variant"] for r in screens}
    assert (times["load_s"] > 0).all() and (times["first_response_s"] > 0).all()
    assert (times["warmup_s"] >= times["first_response_s"]).all() and (times["warmup_requests"] >= 1).all()
    assert record["screened_points"] == len(screens) == len({(r["variant"], r["batch_size"], r["concurrency"]) for r in screens})
    # a screen is one short window: 0.05 s asked, under FAST's 0.2 s however late a busy machine ends it
    # (a CI run read more than 0.1 s: the wait drains responses, and the window ends when it returns)
    assert all(r["outputs_ok"] and r["windows"] == 1 and r["window_s"] < FAST.window_s for r in screens), screens
    if search.latency_budget_ms < 1:
        assert record["answer"]["best"] is None
    else:
        assert record["answer"]["best"]["throughput"] == result.frame["throughput"].max()
        assert record["answer"]["margin_ms"] > 0


@pytest.mark.server
def test_a_cancelled_search_resumes_with_the_same_decisions_and_no_point_twice(server, model_dir, tmp_path):
    out = tmp_path / "run"
    # two variants of one instance each: resume is about points and screens, and a load of one stub is the cheapest
    plan = SweepPlan(batch_sizes=[1, 4, 8], allocations="1x1,1x2", concurrency=[1, 2], core_range="0:1")
    cancel = threading.Event()

    def stop_after_two(done, total, message):
        if done >= 2:
            cancel.set()

    climb = lambda budget=60_000: HillClimb(latency_budget_ms=budget, screen_window_s=0.05, within=0.9)  # noqa: E731
    first = run_sweep(plan, server, model_dir, out_dir=out, settings=QUICK, cancel=cancel, progress=stop_after_two,
                      search=climb(), restore=False)  # the resume restores the model at its end
    assert first.status == "cancelled" and len(first.frame) == 2
    assert first.record["search"]["stopped"] is None and len(first.record["search"]["steps"]) == 2
    kept = (out / POINTS_FILE).read_text().splitlines()
    screened = (out / SCREENING_FILE).read_text().splitlines()
    assert len(first.record["search"]["screens"]) == len(screened) >= 6  # every cell (2 variants x 3 batches) screened first
    with pytest.raises(SweepError, match="cannot resume a run made by search .*hill-climb.* with search .*grid"):
        run_sweep(plan, server, model_dir, out_dir=out, settings=QUICK, resume=True)
    with pytest.raises(SweepError, match="latency_budget_ms': 60000.0.* with search .*latency_budget_ms': 50.0"):
        run_sweep(plan, server, model_dir, out_dir=out, settings=QUICK, resume=True, search=climb(50))

    loads = []
    second = run_sweep(plan, server, model_dir, out_dir=out, settings=QUICK, resume=True,
                       progress=lambda d, t, m: loads.append(m), search=climb())
    lines = (out / POINTS_FILE).read_text().splitlines()
    assert second.complete and lines[:2] == kept
    assert (out / SCREENING_FILE).read_text().splitlines() == screened  # no cell screened again
    assert not any("(screen)" in m for m in loads)
    keys = [(r["variant"], r["batch_size"], r["concurrency"]) for r in map(json.loads, lines)]
    # each point once; the answer once more at the end when one measurement could not name it (confirm.py)
    confirmed = second.record["search"]["confirmed"]
    searched = keys[:len(keys) - len(confirmed)]
    assert len(searched) == len(set(searched)) < plan.size and len(confirmed) <= 1
    assert not confirmed or keys[-1] in searched
    steps = second.record["search"]["steps"]
    assert [(s["variant"], s["batch_size"], s["concurrency"]) for s in steps] == keys  # the replay asked the same first
    assert second.record["search"]["stopped"].startswith("local optimum")
    assert [(s["reused"], s["measured"]) for s in second.record["sessions"]] == [(0, 2), (2, len(keys) - 2)]


@pytest.mark.server
def test_a_cancelled_halving_resumes_without_screening_or_measuring_a_point_twice(server, model_dir, tmp_path):
    out = tmp_path / "run"
    plan = SweepPlan(batch_sizes=[1, 4], allocations="1x1,1x2", concurrency=[1, 2, 4], core_range="0:1")
    cancel = threading.Event()
    seen = []

    def stop_after_three_screens(done, total, message):
        seen.append(message)
        if sum("(screen)" in m for m in seen) >= 3:
            cancel.set()

    search = lambda: SuccessiveHalving(latency_budget_ms=60_000, screen_window_s=0.05)  # noqa: E731
    first = run_sweep(plan, server, model_dir, out_dir=out, settings=QUICK, cancel=cancel,
                      progress=stop_after_three_screens, search=search(), restore=False)  # the resume restores
    assert first.status == "cancelled" and len(first.record["search"]["screens"]) == 3
    kept = (out / SCREENING_FILE).read_text().splitlines()
    second = run_sweep(plan, server, model_dir, out_dir=out, settings=QUICK, resume=True, search=search())
    lines = (out / SCREENING_FILE).read_text().splitlines()
    keys = [(r["variant"], r["batch_size"], r["concurrency"]) for r in map(json.loads, lines)]
    assert second.complete and lines[:3] == kept and len(keys) == len(set(keys))
    assert [(s["variant"], s["batch_size"], s["concurrency"]) for s in second.record["search"]["screens"]] == keys
    full = [(r["variant"], r["batch_size"], r["concurrency"]) for r in map(json.loads, (out / POINTS_FILE).read_text().splitlines())]
    confirmed = second.record["search"]["confirmed"]
    searched = full[:len(full) - len(confirmed)]  # the answer may be measured once more, at the end (confirm.py)
    assert len(searched) == len(set(searched)) == len(second.frame) and set(full) <= set(keys)  # only screened cells, in full
    assert len(confirmed) <= 1 and (not confirmed or full[-1] in searched)
    assert second.record["search"]["answer"]["best"]["throughput"] == second.frame["throughput"].max()


@pytest.mark.server
def test_cli_sweep_with_a_search(server, model_dir, tmp_path, capsys):
    code = main(["sweep", str(model_dir), "--url", server.grpc_url, "--out", str(tmp_path / "cli"),
                 "--batch-sizes", "1,4", "--allocations", "1x1", "--concurrency", "1,2,4",
                 "--window-ms", "100", "--stable-windows", "1", "--max-windows", "1", "--warmup", "5", "--no-plots",
                 "--engine", "workbench", "--time-limit-s", "0",  # one short window a point: the search's words are asserted
                 "--search", "bisection", "--latency-budget-ms", "60000", "--instance-type", "m7i.large"])
    out = capsys.readouterr().out
    assert code == 0
    # 3 points when every point meets the 60 s budget (batch 1: c2 then c4; batch 4 starts at c4); a point
    # that failed on a loaded machine counts as missing the budget, and the bisection goes on below it
    search = json.loads((tmp_path / "cli" / "run.json").read_text())["search"]
    failed = [step for step in search["steps"] if step["error"]]
    assert search["measured_points"] == 3 if not failed else 3 < search["measured_points"] <= 6
    assert (f"search bisection: {search['measured_points']} of 6 points measured; "
            "stopped: every variant x batch size bisected") in out
    # the answer and the cost ranking follow the measured rows (which batch wins is the machine's say)
    frame = pd.read_csv(tmp_path / "cli" / "results.csv")
    cheapest = frame.loc[frame["throughput"].idxmax()]  # 1x1 holds 1 of m7i.large's 2 vCPUs (a CPU run: a CPU type)
    assert f"Best: 1x1, batch {cheapest['batch_size']}, concurrency {cheapest['concurrency']}" in out
    assert "of the budget to spare" in out
    expected = 0.1008 / 2 / (cheapest["throughput"] * 3600) * 1e6
    assert "Cheapest on m7i.large at $0.1008/h (unverified, 2026-12-06" in out
    assert f"batch {cheapest['batch_size']}, concurrency {cheapest['concurrency']}: ${expected:.4f} per million" in out


def test_cli_refuses_a_search_without_its_budget(model_dir, tmp_path, capsys):
    code = main(["sweep", str(model_dir), "--out", str(tmp_path / "cli"), "--search", "hill-climb"])
    assert code == 2 and "needs a p99 latency budget" in capsys.readouterr().err
    assert not (tmp_path / "cli").exists()


# ---- core ownership before a sweep ---------------------------------------------------------------
# FAKE neuron-ls: there is no Neuron device here. The FAKE prints the --json-output schema of the
# SDK's neuron-ls page (tools/neuron-sys-tools/neuron-ls.rst: neuron_device, nc_count,
# neuroncore_ids, neuron_processes), as tests/test_doctor.py's FAKE does.


def _fake_neuron_ls(tmp_path, monkeypatch, holder_pid):
    devices = [{"neuron_device": 0, "nc_count": 2, "neuroncore_ids": [0, 1], "logical_neuroncore_config": 1,
                "neuron_processes": [{"pid": holder_pid, "command": "python3 other_server.py"}]},
               {"neuron_device": 1, "nc_count": 2, "neuroncore_ids": [2, 3], "neuron_processes": []}]
    bin_dir = tmp_path / "fake-bin"
    bin_dir.mkdir()
    script = bin_dir / "neuron-ls"
    script.write_text("#!/bin/sh\n# FAKE neuron-ls for tests: NOT the AWS tool; prints a fixed --json-output.\n"
                      f"cat <<'EOF'\n{json.dumps(devices)}\nEOF\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    return devices


def test_held_neuron_cores_are_named_and_the_servers_own_stubs_are_not(tmp_path, monkeypatch):
    devices = _fake_neuron_ls(tmp_path, monkeypatch, 4242)
    assert neuron_holders(CoreRange(0, 1), devices) == ["device 0 (cores [0, 1]): pid 4242 (python3 other_server.py)"]
    assert neuron_holders(CoreRange(2, 3), devices) == []
    mine = [dict(devices[0], neuron_processes=[{"pid": os.getpid(), "command": "triton_python_backend_stub"}])]
    assert neuron_holders(CoreRange(0, 1), mine, own_pid=os.getppid()) == []  # a child of our server
    with pytest.raises(SweepError, match="NeuronCores 0:1 are held by another process: device 0"):
        check_core_ownership(CoreRange(0, 1))  # reads the FAKE neuron-ls on PATH


@pytest.mark.server
def test_a_sweep_refuses_neuron_cores_another_process_holds(server, model_dir, tmp_path, monkeypatch):
    _fake_neuron_ls(tmp_path, monkeypatch, 4242)
    plan = SweepPlan(batch_sizes=[1], allocations="1x1", core_range="0:1")
    with pytest.raises(SweepError, match=r"held by another process: device 0 \(cores \[0, 1\]\): pid 4242 \(python3"):
        run_sweep(plan, server, model_dir, out_dir=tmp_path / "run", settings=QUICK)
    assert not (tmp_path / "run").exists()
    (tmp_path / "again").mkdir()
    _fake_neuron_ls(tmp_path / "again", monkeypatch, server.pid)
    result = run_sweep(plan, server, model_dir, out_dir=tmp_path / "run", settings=QUICK)  # its own server: fine
    assert result.complete and result.record["core_check"] == []


def test_busy_cpus_of_the_range_are_a_warning(tmp_path):
    burner = subprocess.Popen([sys.executable, "-c", "import os; os.sched_setaffinity(0, {0})\nwhile True: pass"])
    try:
        time.sleep(0.5)
        warnings = check_core_ownership(CoreRange(0, 0), neuron=False, seconds=1.0)
    finally:
        burner.kill()
        burner.wait()
    assert len(warnings) == 1 and "busy with other work before the sweep (CPU 0 " in warnings[0]


@pytest.mark.server
def test_the_adaptive_search_loads_each_variant_once_and_says_why_each_point_stopped(server, model_dir, tmp_path):
    """The server's own log counts the loads: one per variant, then the model restored; every
    point measured says which verdict ended it after how many windows; the answer is saved with
    its confidence."""
    plan = SweepPlan(batch_sizes=[1, 4], allocations="1x1,1x2", concurrency=[1, 4], core_range="0:1")
    before = len(server.log.lines())
    search = AdaptiveEffort(latency_budget_ms=60_000, min_windows=2, max_windows=3, window_s=FAST.window_s / 2)
    result = run_sweep(plan, server, model_dir, out_dir=tmp_path / "run", settings=FAST, search=search)
    # the search's own (shorter) windows measured every point it judged, and the run record says so
    judged = result.frame[result.frame["stopped"].str.contains(" after ") & ~result.frame["stopped"].str.startswith("stable")]
    # as timed: none shorter than asked; a window can overrun on a busy machine (0.167 s for 0.1 once), not most
    assert len(judged) and (judged["window_s"] >= FAST.window_s / 2).all()
    assert judged["window_s"].median() < 0.75 * FAST.window_s, judged["window_s"].tolist()
    assert json.loads((tmp_path / "run" / RECORD_FILE).read_text())["search"]["params"]["window_s"] == FAST.window_s / 2
    loaded = [line for line in server.log.lines()[before:] if "successfully loaded 'add_sub'" in line]
    session = result.record["sessions"][-1]
    assert session["loads"] == ["1x2", "1x1"]  # the likeliest answer (most cores) first; each once
    assert len(loaded) == len(session["loads"]) + 1, loaded  # + the model restored as it was served
    record = json.loads((tmp_path / "run" / RECORD_FILE).read_text())["search"]
    kinds = ("cannot win", "separated below", "separated above", "cap reached")
    for step in record["steps"]:
        if step["why"].startswith("the answer measured again"):
            assert step["stopped"].startswith("stable") or "limit" in step["stopped"] or "max windows" in step["stopped"]
            continue
        kind, _, rest = step["stopped"].partition(" after ")
        assert kind in kinds and rest.startswith(f"{step['windows']} window(s): ")
        assert 2 <= step["windows"] <= 3  # the search's min_windows and max_windows
    assert result.frame["stopped"].notna().all()
    confidence = record["answer"]["confidence"]
    assert confidence["separable"] in (True, False)
    assert confidence["statement"].startswith("separable" if confidence["separable"] else "not separable on this machine")
    assert "each point measured until decided" in record["stopped"]
    times = result.record["variant_times"]
    assert all(t["prepared_while_quiet_s"] is not None for t in times.values())



def test_the_adaptive_search_measures_with_its_own_window_never_longer_than_the_runs():
    run = MeasureSettings(engine="workbench", window_s=0.4)
    assert AdaptiveEffort(10.0, window_s=0.25).judging(run).window_s == 0.25
    assert AdaptiveEffort(10.0, window_s=2.0).judging(run).window_s == 0.4
    assert AdaptiveEffort(10.0, window_s=None).judging(run) is run
    with pytest.raises(SweepError, match=r"adaptive search: window_s -1 must be seconds in \(0, 60\]"):
        AdaptiveEffort(10.0, window_s=-1)


@pytest.mark.server
@pytest.mark.parametrize("budget_ms, bound", [(60_000, "throughput"), (0.001, "p99")],
                         ids=["every point meets: throughput bounds", "none meets: p99 bounds"])
def test_the_adaptive_search_records_each_point_a_bound_decided_and_the_report_shows_it(
        server, model_dir, tmp_path, budget_ms, bound):
    """Every plan point the walk did not measure is in the record's ``bounded`` with the measured
    point that decided it and that point's own reading; the record reads back the same from disk,
    and the report's "Left out by a bound" section lists each one."""
    from workbench.measure.store.results import load_run
    from workbench.report.html import save_report

    # two variants of one instance each: bounds are per variant, and a load of one stub is the cheapest
    plan = SweepPlan(batch_sizes=[1, 4], allocations="1x1,1x2", concurrency=[1, 2, 4], core_range="0:1")
    search = AdaptiveEffort(latency_budget_ms=budget_ms, min_windows=2, max_windows=3, window_s=FAST.window_s / 2)
    result = run_sweep(plan, server, model_dir, out_dir=tmp_path / "run", settings=FAST, search=search)
    assert result.complete
    frame = result.frame.set_index(["variant", "batch_size", "concurrency"])
    measured = set(frame.index)
    bounded = result.record.bounded
    left = {(p.variant, p.batch_size, p.concurrency) for p in bounded}
    plan_points = {(v, b, c) for v in ("1x1", "1x2") for b in (1, 4) for c in (1, 2, 4)}
    # the adaptive walk decides every point: measured, or left out by a bound that says so, never both
    assert left and not left & measured and left | measured == plan_points and len(left) == len(bounded)
    assert any(p.bound == bound for p in bounded)
    for point in bounded:
        by = frame.loc[point.by]  # a point the search measured
        assert point.by in measured and point.by[0] == point.variant
        if point.bound == "p99":  # a point no heavier than it missed the budget, read as that point's p99
            assert point.by[1] <= point.batch_size and point.by[2] <= point.concurrency
            assert point.value == pytest.approx(by["p99_ms"]) and point.value > budget_ms == point.limit
            assert f"read p99 {by['p99_ms']:.2f} ms, past the {budget_ms:g} ms budget" in point.reading
        else:  # a point no lighter caps its throughput: below the incumbent's interval, or it meets the budget
            assert point.by[1] >= point.batch_size and point.by[2] >= point.concurrency
            assert point.value >= by["throughput"] * 0.5 and f"at most {point.value:.1f} infer/s" in point.reading
            assert point.value < point.limit or (math.isnan(point.limit) and by["p99_ms"] <= budget_ms)
    on_disk = json.loads((tmp_path / "run" / RECORD_FILE).read_text())
    assert on_disk["version"] == 3 and len(on_disk["bounded"]) == len(bounded)
    assert load_run(tmp_path / "run").record.bounded == bounded
    page = save_report(tmp_path / "run").read_text()
    section = page[page.index("<section id='bounded'>"):]
    section = section[:section.index("</section>")]
    assert f"{len(bounded)} point(s) the search did not measure" in section
    assert section.count("<li>") == len(bounded)
    for point in bounded:
        assert html.escape(point.describe()) in section
        assert f"{point.variant} batch {point.batch_size} concurrency {point.concurrency}: left out by the " \
               f"{'throughput' if point.bound == 'throughput' else 'p99'} bound" in section


def test_a_bisection_records_the_levels_its_bracket_left_out(model_dir):
    """Bisection on a table: the levels above the first miss are left out by that miss's p99, the
    levels below the highest pass by that pass's throughput."""
    _plan, space = _space(model_dir, allocations="1x1", batches=(1,), concurrency=(1, 2, 4, 8, 16))
    measure, asked = _table_measure(lambda a, b, c: (100.0 * c, 5.0 * c))
    log = SearchLog("bisection", {}, space)
    ConcurrencyBisection(latency_budget_ms=12).run(space, measure, log)
    assert [k[2] for k in asked] == [4, 1, 2]  # middle misses, then down to the highest pass
    by_level = {p.concurrency: p for p in log.bounded}
    assert set(by_level) == {8, 16}
    assert all(p.bound == "p99" and p.by == ("1x1", 1, 4) and p.value == 20.0 and p.limit == 12 for p in by_level.values())
    assert "read p99 20.00 ms, past the 12 ms budget" in by_level[16].reading
    _plan, space = _space(model_dir, allocations="1x1", batches=(1,), concurrency=(1, 2, 4, 8, 16))
    measure, asked = _table_measure(lambda a, b, c: (100.0 * c, 1.0 * c))
    log = SearchLog("bisection", {}, space)
    ConcurrencyBisection(latency_budget_ms=12).run(space, measure, log)
    assert [k[2] for k in asked] == [4, 8, 16]  # the highest meets: the lighter levels cannot beat it
    assert [(p.concurrency, p.bound, p.by[2], p.value) for p in log.bounded] == [(1, "throughput", 8, 800.0),
                                                                              (2, "throughput", 8, 800.0)]
