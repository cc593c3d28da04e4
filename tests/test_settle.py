"""Measuring on a quiet server: the wait after a variant load follows a real process group's CPU
(a busy process keeps it waiting; it returns once that stops), and on a real tritonserver it
returns only once the previous variant's stubs are gone. And the search's answer measured again
before it is named, when one measurement cannot tell it from the runner-up (confirm.py)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from workbench.generate.config import read_config
from workbench.measure.grid.plan import SweepPlan
from workbench.measure.store.results import POINTS_FILE, RECORD_FILE
from workbench.measure.grid.rows import PointRow
from workbench.measure.sweep.search import ConcurrencyBisection, SearchLog, SearchSpace
from workbench.measure.sweep.search import confirm
from workbench.measure.sweep.search.confirm import confirm_answer, why_confirm
from workbench.measure.engine.measure_settings import MeasureSettings
from workbench.measure.watch.settle import group_cpu, model_processes, replaced, wait_quiet
from workbench.measure.sweep import run_sweep
from workbench.server import TritonServer

pytestmark = pytest.mark.alone  # the waits follow CPU shares and end within limits

FAST = MeasureSettings(engine="workbench", window_s=0.2, max_windows=3, warmup_requests=5, time_limit_s=None)

# Busy for some CPU seconds, then mark that it stopped and sleep: the group is busy, then quiet.
_BUSY_THEN_IDLE = ("import sys, time, pathlib\n"
                   "while time.process_time() < float(sys.argv[1]): pass\n"
                   "pathlib.Path(sys.argv[2]).write_text('done')\ntime.sleep(60)\n")


@pytest.fixture
def busy_group(tmp_path):
    started = []

    def start(busy_s: float):
        marker = tmp_path / f"done-{len(started)}"
        process = subprocess.Popen([sys.executable, "-c", _BUSY_THEN_IDLE, str(busy_s), str(marker)],
                                   start_new_session=True)
        started.append(process)
        return process, marker
    yield start
    for process in started:
        process.kill()
        process.wait()


def test_the_wait_lasts_while_a_process_of_the_group_is_busy_and_ends_once_it_is_idle(busy_group):
    process, marker = busy_group(0.5)
    # any CPU tick counts as busy (this test runs niced beside benchmarks: its child gets little CPU)
    quiet = wait_quiet(process.pid, idle_share=0.001, quiet_s=1.0, timeout_s=60)
    assert quiet is not None and quiet.settled and quiet.processes == 1
    assert marker.exists()  # it returned only after the busy phase ended
    assert quiet.peak > 0.001  # it saw the busy phase
    assert set(group_cpu(process.pid)) == {process.pid}


def test_the_wait_lasts_until_the_replaced_processes_exit_and_a_group_that_keeps_them_is_said_so(busy_group):
    process, _marker = busy_group(0.0)  # idle at once, and never exits
    quiet = wait_quiet(process.pid, leaving=frozenset({process.pid}), quiet_s=0.2, timeout_s=0.8)
    assert quiet is not None and not quiet.settled and quiet.left == 1
    # a group leader whose child (same group, as a stub in tritonserver's) exits after a second
    leader = subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time\n"
                               "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(1.0)'])\n"
                               "print(child.pid, flush=True); child.wait(); time.sleep(60)"],
                              start_new_session=True, stdout=subprocess.PIPE, text=True)
    try:
        child = int(leader.stdout.readline())
        quiet = wait_quiet(leader.pid, leaving=frozenset({child}), quiet_s=0.2, timeout_s=60)
        assert quiet.settled and quiet.left == 0 and child not in group_cpu(leader.pid)  # it exited first
        assert quiet.processes == 1
    finally:
        leader.kill()
        leader.wait()


def test_nothing_is_waited_for_without_a_local_process_group():
    assert wait_quiet(None) is None
    assert wait_quiet(2 ** 22 + 12345) is None  # no such group here (a remote server's)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, generate_cpu_model):
    return generate_cpu_model(tmp_path_factory.mktemp("settle"))


@pytest.fixture(scope="module")
def server(model_dir):
    with TritonServer(model_dir.parent) as running:
        running.load("add_sub")
        yield running


def _stubs(server) -> set[int]:
    return set(group_cpu(server.pid)) - {server.pid}


def test_after_a_reload_the_wait_ends_only_once_the_old_variants_stubs_are_gone(server, model_dir):
    plan = SweepPlan(batch_sizes=[1], allocations="1x1,2x1", concurrency=[1], core_range="0:1")
    one, two = sorted(plan.variants(read_config(model_dir)), key=lambda v: v.allocation.instances)
    for variant in (one, two):
        old = model_processes(server.pid, "add_sub")
        assert old and old <= _stubs(server)  # the stubs the load replaces, by their model.py path
        server.load("add_sub", config=variant.config)
        quiet = wait_quiet(server.pid, leaving=old)
        assert quiet.settled and quiet.left == 0
        # the replaced stubs exited before it returned (they idle, then finalise, after the load returns)
        assert not old & _stubs(server)
        assert len(_stubs(server)) == quiet.processes - 1 == variant.allocation.instances
    assert model_processes(server.pid, "no_such_model") == frozenset() and model_processes(None, "add_sub") == frozenset()


def test_a_sweep_records_its_wait_for_a_quiet_server_with_each_variant(server, model_dir, tmp_path):
    plan = SweepPlan(batch_sizes=[1], allocations="1x1,2x1", concurrency=[1], core_range="0:1")
    result = run_sweep(plan, server, model_dir, out_dir=tmp_path / "run", settings=FAST)
    for label, times in result.record["variant_times"].items():
        assert times["quiet"]["settled"] is True, label
        assert times["quiet"]["waited_s"] >= 0.5  # at least QUIET_S of quiet
    assert len(result.frame) == 2 and result.frame["error"].isna().all()


def test_a_load_of_the_config_already_loaded_replaces_no_stub_and_is_not_waited_out(server, model_dir, tmp_path):
    """A run that starts with the variant the run before it left loaded: Triton keeps its instances,
    so no stub leaves, and the wait ends once the server is quiet (it used to wait out its 30 s)."""
    assert replaced(frozenset({1, 2}), frozenset({1, 2, 3, 4})) == {1, 2}
    assert replaced(frozenset({1, 2}), frozenset({1, 2})) == frozenset() == replaced(frozenset({1, 2}), frozenset({2}))
    plan = SweepPlan(batch_sizes=[1], allocations="1x1", concurrency=[1], core_range="0:1")
    for run in ("first", "again"):
        before = model_processes(server.pid, "add_sub")
        result = run_sweep(plan, server, model_dir, out_dir=tmp_path / run, settings=FAST, restore=False)
        quiet = result.record["variant_times"]["1x1"]["quiet"]
        assert quiet["settled"] is True and quiet["left"] == 0, quiet
    assert model_processes(server.pid, "add_sub") == before  # the second load started no stub
    assert quiet["waited_s"] < 5, quiet


# ---- the answer measured again -----------------------------------------------------------------


def _row(space, v, b, c, throughput, low, high, p99=1.0, p99_high=1.5):
    return PointRow(**space.point(v, b, c).columns(), throughput=throughput, throughput_low=low,
                    throughput_high=high, p99_ms=p99, p99_high_ms=p99_high, p50_ms=p99 / 2, failures=0,
                    outputs_ok=True, stable=True)


def test_the_answer_is_measured_again_only_when_one_measurement_cannot_tell_it_from_the_runner_up(model_dir):
    plan = SweepPlan(batch_sizes=[1, 4], allocations="1x1", concurrency=[1], core_range="0:1")
    space = SearchSpace.of(plan, plan.variants(read_config(model_dir)))
    points = {space.point(0, b, 0).key: space.point(0, b, 0) for b in range(2)}
    again = []

    def remeasure(point):
        again.append(point.key)
        return _row(space, 0, 1, 0, 150.0, 140.0, 160.0)

    apart = [_row(space, 0, 0, 0, 100.0, 95.0, 105.0), _row(space, 0, 1, 0, 200.0, 190.0, 210.0)]
    log = SearchLog("bisection", {}, space)
    assert confirm_answer(apart, points, remeasure, log, 10.0) is None and again == []
    close = [_row(space, 0, 0, 0, 180.0, 170.0, 195.0), apart[1]]
    assert "overlaps the runner-up's (to 195.0)" in why_confirm(*_best_two(close), 10.0)
    label = confirm_answer(close, points, remeasure, log, 10.0)
    assert again == [space.point(0, 1, 0).key] and label == space.point(0, 1, 0).label
    assert log.steps[-1]["why"].startswith("the answer measured again: its throughput interval")
    assert "re-measured: 150.0 infer/s" in log.notes[-1] and "(first 200.0 infer/s" in log.notes[-1]
    # a resumed run that re-measured it already does not measure it again
    assert confirm_answer(close, points, remeasure, log, 10.0, done=[label]) is None and len(again) == 1
    # a margin within the noise: the p99 interval reaches past the budget
    over = [apart[0], _row(space, 0, 1, 0, 200.0, 190.0, 210.0, p99=9.0, p99_high=11.0)]
    assert "past the 10 ms budget" in why_confirm(*_best_two(over), 10.0)


def _best_two(rows):
    from workbench.measure.store.results import frame_from_rows
    from workbench.measure.sweep.search import answer

    found = answer(frame_from_rows(r.to_dict() for r in rows), 10.0)
    return found.best, found.runner_up


def test_a_search_measures_its_answer_again_on_a_real_server_and_a_resume_does_not(server, model_dir, tmp_path,
                                                                                 monkeypatch):
    # every answer counted as within the noise, so the sweep's path that measures it again runs
    monkeypatch.setattr(confirm, "why_confirm", lambda *_a: "forced by the test")
    plan = SweepPlan(batch_sizes=[1, 4], allocations="1x1", concurrency=[1, 2], core_range="0:1")
    out = tmp_path / "run"
    first = run_sweep(plan, server, model_dir, out_dir=out, settings=FAST,
                      search=ConcurrencyBisection(latency_budget_ms=1000))
    log = first.record["search"]
    assert len(log["confirmed"]) == 1 and log["steps"][-1]["why"] == "the answer measured again: forced by the test"
    lines = [json.loads(line) for line in (out / POINTS_FILE).read_text().splitlines()]
    keys = [(r["variant"], r["batch_size"], r["concurrency"]) for r in lines]
    again = keys[-1]
    assert keys.count(again) == 2 and len(first.frame) == len(set(keys))  # one row per point in the result
    row = first.frame.set_index(["variant", "batch_size", "concurrency"]).loc[again]
    assert row["measured_at"] == lines[-1]["measured_at"] and row["throughput"] == lines[-1]["throughput"]
    resumed = run_sweep(plan, server, model_dir, out_dir=out, settings=FAST, resume=True,
                        search=ConcurrencyBisection(latency_budget_ms=1000))
    assert resumed.record["sessions"][-1]["measured"] == 0
    assert resumed.record["search"]["confirmed"] == log["confirmed"]
    assert len((out / POINTS_FILE).read_text().splitlines()) == len(set(keys))  # compacted, nothing appended
    assert json.loads((out / RECORD_FILE).read_text())["status"] == "complete"
