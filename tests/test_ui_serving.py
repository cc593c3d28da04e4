"""Headless tests of the server, sweep and results panels against a real tritonserver.

One Workbench per module: a real CPU compile of ``add_sub``, the model directory written from the
preview panel, and the server started from the server panel (stopped at teardown, even on
failure). Assertions are on what the real server reports, the run folders written and the
widgets' contents; never on timings.
"""

from __future__ import annotations

import html
import re
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from workbench.generate.config import read_config
from workbench.ui import Workbench

pytestmark = pytest.mark.server


def _text(html_value: str) -> str:
    """What a user reads in an HTML widget: tags dropped, entities decoded."""
    return html.unescape(re.sub(r"<[^>]+>", " ", html_value))


def _wait(predicate, timeout: float = 60.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    root = tmp_path_factory.mktemp("ui_serving")
    app = Workbench(root / "model_repository")
    try:
        model = app["model"]
        model.controls["zoo_model"].value = "add_sub"
        task = model.start_compile()
        assert task.join(timeout=120) and task.state == "done", task.error_text
        assert app["preview"].write() is not None
        server = app["server"]
        server.controls["start"].click()
        assert server.ops.join(timeout=180), "server start did not finish"
        assert server.ops.task.state == "done", server.ops.task.error_text
        yield app
    finally:
        app.close()


def _sweep(app, **values):
    sweep = app["sweep"]
    # the built-in engine, stopping after max_windows: quick plumbing tests (perf_analyzer has its own)
    defaults = {"batch_sizes": "1,2", "allocations": "1x1", "concurrency": "1", "window_s": 0.2,
                "stable_windows": 2, "max_windows": 3, "time_limit_s": 0, "engine": "workbench", "label": ""}
    for key, value in {**defaults, **values}.items():
        sweep.controls[key].value = value
    return sweep


def test_start_shows_the_model_ready_on_a_real_server(app):
    panel = app["server"]
    server = app.state.server
    assert server.running
    assert panel.controls["start"].disabled and not panel.controls["stop"].disabled
    assert {"name": "add_sub", "version": "1", "state": "READY", "reason": ""} in panel.index
    assert re.search(r"add_sub\s+1\s+READY", _text(panel.controls["models"].value))
    info = _text(panel.controls["server_info"].value)
    assert f"http {server.ports['http']}" in info and f"grpc {server.ports['grpc']}" in info
    _wait(lambda: "loading: add_sub:1" in panel.log.text, what="the live log")
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        a = np.arange(8, dtype=np.float32).reshape(2, 4)
        inputs = [httpclient.InferInput(n, [2, 4], "FP32") for n in ("INPUT__0", "INPUT__1")]
        for tensor in inputs:
            tensor.set_data_from_numpy(a)
        result = client.infer("add_sub", inputs)
        np.testing.assert_allclose(result.as_numpy("OUTPUT__0"), a + a)
    finally:
        client.close()


def test_unload_load_and_reload_from_the_panel(app):
    panel, preview, settings = app["server"], app["preview"], app["settings"]
    panel.controls["model"].value = "add_sub"
    panel.controls["unload"].click()
    assert panel.ops.join(timeout=60) and panel.ops.task.state == "done", panel.ops.task.error_text
    assert re.search(r"add_sub\s+1\s+UNAVAILABLE", _text(panel.controls["models"].value))
    panel.controls["load"].click()
    assert panel.ops.join(timeout=120) and panel.ops.task.state == "done", panel.ops.task.error_text
    assert re.search(r"add_sub\s+1\s+READY", _text(panel.controls["models"].value))

    settings.controls["core_range"].value = "0:1"
    settings.controls["instance_count"].value = 2
    preview.controls["write"].click()
    preview.controls["confirm_overwrite"].click()
    assert read_config(app.state.model_dir).instance_group[0].count == 2
    assert "add_sub was rewritten on disk" in _text(panel.controls["notice"].value)
    assert app.state.server.model_config("add_sub", as_proto=True).instance_group[0].count == 1
    panel.controls["reload"].click()
    assert panel.ops.join(timeout=120) and panel.ops.task.state == "done", panel.ops.task.error_text
    assert app.state.server.model_config("add_sub", as_proto=True).instance_group[0].count == 2
    assert "READY" in _text(panel.controls["models"].value) and panel.controls["notice"].value == ""


def test_a_bad_model_name_is_reported_not_raised(app):
    panel = app["server"]
    panel.controls["model"].value = "no_such_model"
    panel.controls["load"].click()
    assert panel.ops.join(timeout=60)
    assert panel.ops.task.state == "failed"
    assert "load no_such_model failed" in _text(panel.controls["error"].value)
    assert app.state.server.running and not panel.controls["load"].disabled
    panel.controls["model"].value = "add_sub"


def test_a_small_sweep_runs_from_the_panel_with_table_and_plots(app):
    sweep = _sweep(app, label="first")
    assert "2 point(s)" in _text(sweep.controls["grid_size"].value)
    task = sweep.start()
    assert task is not None, sweep.controls["error"].value
    assert task.join(timeout=240) and task.state == "done", task.error_text
    result = sweep.result
    assert result is app.state.sweep and result.status == "complete" and len(result.frame) == 2
    assert result.path == Path(sweep.controls["runs_dir"].value) / "first"
    assert (result.path / "results.csv").is_file() and (result.path / "points.jsonl").is_file()
    assert bool(result.frame["outputs_ok"].all())  # served outputs matched the eager model
    table = _text(sweep.controls["table"].value)
    assert "throughput (infer/s)" in table and "p99 (ms)" in table and sweep.controls["table"].value.count("<tr") == 3
    assert all(bytes(image.value).startswith(b"\x89PNG") for image in sweep.controls["plots"].children)
    best = _text(sweep.controls["best"].value)
    assert "Best (highest throughput" in best and "Confidence: " in best  # how sure, where the answer is read
    sweep.controls["budget_ms"].value = 1e-6
    assert "No configuration meets p99" in _text(sweep.controls["best"].value)
    sweep.controls["export"].click()
    assert (result.path / "plots" / "latency_vs_batch.png").is_file()
    assert "latency_vs_batch.svg" in _text(sweep.controls["exported"].value)
    # the model is left with its own config after the sweep
    assert app.state.server.is_model_ready("add_sub")


def test_cancel_stops_the_sweep_and_keeps_finished_points(app):
    sweep = _sweep(app, label="second", batch_sizes="1,2,4,8", concurrency="1,2")
    task = sweep.start()
    assert task is not None, sweep.controls["error"].value
    _wait(lambda: sweep.result is not None and len(sweep.result.frame) >= 1 or not task.running,
          timeout=240, what="the first measured point")
    sweep.controls["cancel"].click()
    assert task.join(timeout=120)
    assert task.state == "cancelled", task.error_text
    assert sweep.controls["status"].value == "cancelled"
    assert sweep.result.status == "cancelled" and 1 <= len(sweep.result.frame) < 8
    assert not sweep.controls["run"].disabled


@pytest.mark.alone  # its last live view must have seen requests complete (a starved 10 s window saw none)
def test_a_search_runs_from_the_panel_with_the_live_server_view(app):
    from workbench.measure.sweep.search.choice import search_names

    assert tuple(app["sweep"].controls["search"].options) == search_names()
    sweep = _sweep(app, label="searched", batch_sizes="1,4", concurrency="1,2,4")
    c = sweep.controls
    c["search"].value = "bisection"
    c["budget_ms"].value = 60_000.0
    task = sweep.start()
    assert task is not None, c["error"].value
    assert task.join(timeout=240) and task.state == "done", task.error_text
    log = sweep.result.record["search"]
    assert log["name"] == "bisection" and log["params"]["latency_budget_ms"] == 60_000.0
    assert 0 < log["measured_points"] == len(sweep.result.frame) < 6
    view = sweep.server_view  # read from the real server's statistics and metrics while points ran
    assert view is not None and view.model == "add_sub" and view.requests > 0 and view.executions > 0
    assert view.compute_ms > 0 and view.queue_ms >= 0 and view.avg_batch >= 1 and view.pending is not None
    shown = _text(c["server_view"].value)
    assert "queue" in shown and "compute" in shown and "pending requests" in shown and "executed batch size" in shown
    c["search"].value = "grid"
    c["budget_ms"].value = 0.0


def test_results_panel_opens_and_compares_saved_runs(app):
    panel = app["results"]
    paths = panel.scan()
    assert {Path(p).name for p in paths} >= {"first", "second"}
    run = panel.open(str(Path(app["sweep"].controls["runs_dir"].value) / "first"))
    assert run.status == "complete" and bytes(panel.controls["plot"].value).startswith(b"\x89PNG")
    assert "Best (highest throughput" in _text(panel.controls["best"].value)
    assert "Confidence: " in _text(panel.controls["best"].value)
    runs_dir = Path(app["sweep"].controls["runs_dir"].value)
    panel.controls["run_a"].value = str(runs_dir / "first")
    panel.controls["run_b"].value = str(runs_dir / "second")
    comparison = panel.compare()
    assert comparison is not None and len(comparison.table) >= 1
    assert "'second' vs 'first'" in _text(panel.controls["summary"].value)
    assert bytes(panel.controls["comparison_plot"].value).startswith(b"\x89PNG")
    panel.controls["run_b"].value = str(runs_dir / "first")
    assert panel.compare() is None and "same run" in _text(panel.controls["error"].value)


def test_sweep_refuses_to_start_without_a_server(tmp_path):
    app = Workbench(tmp_path / "repo")
    assert app["sweep"].start() is None
    shown = _text(app["sweep"].controls["error"].value)
    assert "start the server first" in shown and "write the model directory first" in shown
    app["sweep"].controls["allocations"].value = "2y1"
    assert "allocation '2y1' is malformed" in _text(app["sweep"].plan_link.problem_view("allocations").value)


def test_the_sweep_panel_hands_its_controls_over_as_one_settings_value(tmp_path):
    sweep = Workbench(tmp_path / "repo")["sweep"]
    for key, value in {"engine": "perf_analyzer", "perf_analyzer": " /opt/pa.sh ", "protocol": "http",
                       "window_s": 0.4, "stable_windows": 2, "max_windows": 5}.items():
        sweep.controls[key].value = value
    settings = sweep.settings()
    assert (settings.engine, settings.perf_analyzer, settings.protocol) == ("perf_analyzer", "/opt/pa.sh", "http")
    assert (settings.window_s, settings.stable_windows, settings.max_windows) == (0.4, 2, 5)
    sweep.controls["max_windows"].value = 1  # fewer than the stable windows: refused, named, nothing started
    said = "max windows must be a whole number >= stable windows (2), got 1"  # in the labels' words
    assert said in _text(sweep.measure_link.problem_view("max_windows").value)  # beside the field
    assert sweep.start() is None and said in _text(sweep.controls["error"].value)
    sweep.controls["window_s"].value = 0.0  # was clamped to 0.05 without a word
    assert sweep.controls["window_s"].value == 0.0
    assert "window (s) must be a positive number, got 0.0" in _text(sweep.measure_link.problem_view("window_s").value)


def test_the_perf_analyzer_engine_is_refused_inline_when_there_is_none(app, monkeypatch, tmp_path):
    monkeypatch.delenv("PERF_ANALYZER", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    sweep = _sweep(app, label="pa-missing", engine="perf_analyzer")
    try:
        assert sweep.start() is None
        assert "perf_analyzer" in _text(sweep.controls["error"].value)
        assert not (Path(sweep.controls["runs_dir"].value) / "pa-missing").exists()
    finally:
        sweep.controls["engine"].value = "workbench"


@pytest.mark.alone  # perf_analyzer must reach its stability
def test_the_sweep_panel_can_measure_with_perf_analyzer(app):
    """Triton's real perf_analyzer where one is available ($PERF_ANALYZER: .ci/run sets the shared wrapper)."""
    from workbench.measure.engine.perf_analyzer import PerfAnalyzerNotFound, find_perf_analyzer

    try:
        find_perf_analyzer()
    except PerfAnalyzerNotFound as err:
        pytest.skip(f"{err} (set PERF_ANALYZER to run it)")
    # a time limit: a run that cannot stabilise on a busy machine is retried with longer windows,
    # then kept as one unstable window, never dropped
    sweep = _sweep(app, label="pa-run", batch_sizes="2", engine="perf_analyzer", window_s=0.5, max_windows=10,
                   time_limit_s=60)
    try:
        task = sweep.start()
        assert task is not None, sweep.controls["error"].value
        assert task.join(timeout=300) and task.state == "done", task.error_text
        frame = sweep.result.frame
        assert frame["error"].isna().all() and frame["outputs_ok"].tolist() == [True], frame.to_dict("records")
        assert sweep.result.record["settings"]["engine"] == "perf_analyzer"
        assert sweep.result.record["engine"]["engine"] == "perf_analyzer"
        assert frame["engine"].tolist() == ["perf_analyzer"] and frame["requests"].tolist()[0] > 0
    finally:
        sweep.controls["engine"].value = "workbench"


def test_stop_leaves_no_server_process(app):
    panel = app["server"]
    pid = app.state.server.pid
    panel.controls["stop"].click()
    assert panel.ops.join(timeout=60) and panel.ops.task.state == "done", panel.ops.task.error_text
    assert not app.state.server.running
    assert not Path(f"/proc/{pid}").exists() or Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    assert not panel.controls["start"].disabled and panel.controls["stop"].disabled
    assert "not running" in _text(panel.controls["server_info"].value)


def test_the_sweep_panel_links_its_grid_to_one_sweep_plan(tmp_path):
    from workbench.coremap import Allocation, CoreRange

    sweep = Workbench(tmp_path / "repo")["sweep"]
    c = sweep.controls
    c["batch_sizes"].value = "1,2,8"
    c["allocations"].value = "1x1, 2x1"
    c["core_range"].value = "0:1"
    plan = sweep.plan()
    assert plan is sweep.plan_link.value
    assert plan.batch_sizes == (1, 2, 8) and plan.allocations == (Allocation(1, 1), Allocation(2, 1))
    assert plan.core_range == CoreRange(0, 1) and plan.concurrency == (1, 2)
    assert "12 point(s)" in _text(c["grid_size"].value)
    sweep.plan_link.update(concurrency=(4,), core_range=None)  # the logic value changes: the controls follow
    assert c["concurrency"].value == "4" and c["core_range"].value == ""
    assert "6 point(s)" in _text(c["grid_size"].value)
    c["concurrency"].value = "4,4"
    assert "concurrency: 4 is listed twice" in _text(sweep.plan_link.problem_view("concurrency").value)
    assert sweep.plan_link.value.concurrency == (4,) and "point(s)" not in _text(c["grid_size"].value)


def test_the_sweep_panel_links_its_strategy_to_the_search_choice_the_cli_builds(tmp_path):
    import argparse

    from workbench.cli.sweep import register, search_from_args
    from workbench.measure.sweep.search import SuccessiveHalving
    from workbench.measure.sweep.search.choice import SearchChoice

    sweep = Workbench(tmp_path / "repo")["sweep"]
    c = sweep.controls
    assert sweep.search() == SearchChoice() and sweep.search().strategy() is None  # the grid by default
    c["search"].value = "halving"
    assert "halving search needs a p99 latency budget" in _text(sweep.search_link.problem_view("name").value)
    assert sweep.start() is None and "needs a p99 latency budget" in _text(c["error"].value)
    c["budget_ms"].value = 20.0
    c["screen_window_ms"].value = "50"
    c["within"].value = "10"
    c["min_gain"].value = "7"  # kept for early-stop / hill-climb, ignored by halving
    choice = sweep.search()
    assert choice is sweep.search_link.value and c["search_problems"].value == ""
    assert choice == SearchChoice("halving", latency_budget_ms=20.0, min_gain=0.07, screen_window_s=0.05, within=0.1)
    strategy = choice.strategy()
    assert isinstance(strategy, SuccessiveHalving)
    assert strategy.params == {"latency_budget_ms": 20.0, "screen_window_s": 0.05, "within": 0.1, "keep": 2}
    # the command line builds the same strategy from the same values
    parser = register(argparse.ArgumentParser().add_subparsers())
    args = parser.parse_args(["model", "--out", "o", "--search", "halving", "--latency-budget-ms", "20", "--screen-window-ms", "50",
                              "--within", "10"])
    assert search_from_args(args).params == strategy.params
    with pytest.raises(ValueError, match="min_gain do\\(es\\) not apply to it"):
        search_from_args(parser.parse_args(["model", "--out", "o", "--search", "halving", "--latency-budget-ms", "20",
                                            "--min-gain", "7"]))
    c["search"].value = "hill-climb"  # screens as halving does: the same two fields, and min gain
    assert sweep.search().strategy().params == {"latency_budget_ms": 20.0, "screen_window_s": 0.05, "within": 0.1,
                                                "min_gain": 0.07}
    c["search"].value = "early-stop"
    assert sweep.search().strategy().params == {"latency_budget_ms": 20.0, "min_gain": 0.07, "tries": 1}
    c["tries"].value = "two"
    assert "tries: count 'two' is not a number" in _text(sweep.search_link.problem_view("tries").value)
    assert sweep.search_link.value.tries is None
    c["tries"].value = "2"
    c["budget_ms"].value = 0.0  # no budget: early stop runs without one, the best is the highest throughput
    assert sweep.search().latency_budget_ms is None and sweep.search().strategy().params["tries"] == 2
    sweep.search_link.update(name="bisection", latency_budget_ms=5.0)  # logic -> controls
    assert (c["search"].value, c["budget_ms"].value) == ("bisection", 5.0)


def test_a_model_that_fails_to_load_on_start_leaves_the_server_said_running(tmp_path):
    """Issue 43 item 7: a failed load on start marked the server "failed" (the start task failed),
    and the server line said "starting tritonserver" while the status said "loading ...". The
    server line now says the server runs and what happens to the model; the error names the model."""
    repository = tmp_path / "model_repository"
    (repository / "broken" / "1").mkdir(parents=True)  # a backend the server does not have: refused at once
    (repository / "broken" / "config.pbtxt").write_text('name: "broken"\nbackend: "no_such_backend"\nmax_batch_size: 0\n'
                                                        'input [{ name: "X" data_type: TYPE_FP32 dims: [1] }]\n'
                                                        'output [{ name: "Y" data_type: TYPE_FP32 dims: [1] }]\n')
    app = Workbench(repository)
    try:
        app.state.name = "broken"
        panel = app["server"]
        seen: list[str] = []
        panel.controls["server_info"].observe(lambda change: seen.append(_text(change["new"])), names="value")
        panel.controls["start"].click()
        assert panel.ops.join(timeout=180) and panel.ops.task.state == "done", panel.ops.task.error_text
        assert app.state.server.running
        error = _text(panel.controls["error"].value)
        assert "tritonserver is running; loading broken failed:" in error, error
        assert re.search(r"running\s+pid", _text(panel.controls["server_info"].value))
        loading = [line for line in seen if "loading broken" in line]
        assert loading and all(re.search(r"running\s+pid", line) and "starting" not in line for line in loading), seen
    finally:
        app.close()
