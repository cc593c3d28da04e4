"""The sweep: grid checks before anything runs, variant configs, and real sweeps on one real
tritonserver (the zoo's add_sub compiled for the CPU and generated with the shared model.py):
outputs checked at every point, cancel + resume without re-measuring, the `workbench sweep` CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from workbench.served_outputs import eager_reference
from workbench.coremap import Allocation
from workbench.cli import main
from workbench.generate.config import parameters_of, read_config
from workbench.measure.store.plots import plot_run
from workbench.measure.store.results import CSV_FILE, JSON_FILE, POINTS_FILE, RECORD_FILE, load_run
from workbench.measure.engine.measure_settings import MeasureError, MeasureSettings
from workbench.measure.sweep import (
    Batching,
    SweepError,
    SweepPlan,
    run_sweep,
    variant_config,
)
from workbench.server import TritonServer

DATA = Path(__file__).parent / "data" / "perf_analyzer"
# Short windows keep the suite quick; stability is reported, never asserted (busy shared machine).
FAST = MeasureSettings(engine="workbench", window_s=0.2, max_windows=3, warmup_requests=5, time_limit_s=None)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, generate_cpu_model):
    """add_sub traced for the CPU, generated with batching up to 8 over cores 0:1, CPU pinning on."""
    return generate_cpu_model(tmp_path_factory.mktemp("sweep"), cpu_affinity=True)


@pytest.fixture(scope="module")
def server(model_dir):
    with TritonServer(model_dir.parent) as running:
        running.load("add_sub")
        yield running


# ---- the grid, checked before anything runs ---------------------------------------------------


def test_allocations_that_do_not_fit_are_refused_up_front(model_dir, tmp_path):
    plan = SweepPlan(batch_sizes=[1], allocations="1x1,3x1,1x4", core_range="0:1")
    with pytest.raises(SweepError) as err:
        plan.variants(read_config(model_dir))
    message = str(err.value)
    assert "3x1 needs 3 core(s) but core range 0:1 has 2" in message
    assert "1x4 needs 4 core(s)" in message and "1x1 needs" not in message


def test_run_sweep_refuses_before_touching_server_or_disk(model_dir, tmp_path):
    out = tmp_path / "never"
    plan = SweepPlan(batch_sizes=[1], allocations=["3x1"], core_range="0:1")
    with pytest.raises(SweepError, match="3x1 needs 3"):
        run_sweep(plan, object(), model_dir, out_dir=out, reference=lambda arrays: arrays)
    assert not out.exists()


@pytest.mark.server
def test_a_model_outside_the_servers_repository_is_refused(server, model_dir, tmp_path):
    copy = tmp_path / "elsewhere" / "add_sub"
    copy.mkdir(parents=True)
    (copy / "config.pbtxt").write_text((model_dir / "config.pbtxt").read_text())
    plan = SweepPlan(batch_sizes=[1], allocations="1x1")
    with pytest.raises(SweepError, match="is not in the server's model repository"):
        run_sweep(plan, server, copy, out_dir=tmp_path / "run", reference=lambda arrays: arrays)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("kwargs, message", [
    (dict(batch_sizes=[1], allocations="2by1"), "allocation '2by1' is malformed"),
    (dict(batch_sizes=[1], allocations="0x1"), "instances must be a whole number >= 1"),
    (dict(batch_sizes=[1, 1], allocations="1x1"), "batch sizes: 1 is listed twice"),
    (dict(batch_sizes=[1], allocations="1x1,1x1"), "allocation 1x1 is listed twice"),
    (dict(batch_sizes=[1], allocations="1x1", concurrency=[0]), "concurrency: 0 must be at least 1"),
    (dict(batch_sizes=["x"], allocations="1x1"), "batch sizes: 'x' is not a whole number"),
    (dict(batch_sizes=[1], allocations="1x1", core_range="3:1"), "reversed"),
    (dict(batch_sizes=[1], allocations="1x1", parameters={"NEURON_CORE_END_INDEX": ["3"]}), "set by the sweep for each variant"),
    (dict(batch_sizes=[16], allocations="1x1", max_batch_size=8), "max_batch_size 8 is smaller than batch size 16"),
])
def test_bad_plans_name_the_bad_item(kwargs, message):
    with pytest.raises(SweepError, match=message):
        SweepPlan(**kwargs)


def test_variant_config_changes_only_what_the_sweep_controls(model_dir):
    base = read_config(model_dir)
    before = base.SerializeToString()
    cfg = variant_config(base, Allocation(2, 1), 0, batching=Batching(True, (4, 8), 100),
                         parameters={"NUM_THREADS_PER_CORE": "2"}, max_batch_size=16)
    assert base.SerializeToString() == before  # the user's config object is untouched
    assert cfg.instance_group[0].count == 2 and cfg.instance_group[0].kind == base.instance_group[0].kind
    params = parameters_of(cfg)
    assert (params["NEURON_CORE_START_INDEX"], params["NEURON_CORE_END_INDEX"]) == ("0", "1")
    assert params["NUM_THREADS_PER_CORE"] == "2"
    assert params["COMPILED_MODEL"] == parameters_of(base)["COMPILED_MODEL"]
    assert cfg.max_batch_size == 16
    assert list(cfg.dynamic_batching.preferred_batch_size) == [4, 8]
    assert cfg.dynamic_batching.max_queue_delay_microseconds == 100
    assert list(cfg.input) == list(base.input) and list(cfg.output) == list(base.output)
    off = variant_config(base, Allocation(1, 1), 0, batching=Batching(enabled=False))
    assert not off.HasField("dynamic_batching")


def test_variant_config_refuses_a_preferred_size_above_max_batch(model_dir):
    with pytest.raises(SweepError, match="preferred_batch_size 16 is larger than max_batch_size 8"):
        variant_config(read_config(model_dir), Allocation(1, 1), 0, batching=Batching(True, (16,)))


def test_plan_expands_the_grid_and_round_trips(model_dir):
    plan = SweepPlan(batch_sizes="1,4", allocations="1x1,2x1", concurrency=[1, 2], core_range="0:1",
                     batching=[None, Batching(True, (), 500)], parameters={"NUM_THREADS_PER_CORE": ["1", "2"]})
    variants = plan.variants(read_config(model_dir))
    assert len(variants) == 2 * 2 * 2 and plan.size == 8 * 2 * 2
    assert [v.label for v in variants][:3] == [
        "1x1 NUM_THREADS_PER_CORE=1", "1x1 NUM_THREADS_PER_CORE=2", "1x1 dyn delay=500us NUM_THREADS_PER_CORE=1"]
    assert SweepPlan.from_dict(json.loads(json.dumps(plan.to_dict()))) == plan


def test_plan_checks_batching_against_the_model(model_dir):
    base = read_config(model_dir)
    base.max_batch_size = 0
    base.ClearField("dynamic_batching")
    with pytest.raises(SweepError, match=r"max_batch_size 0 \(its dims include the batch dim\), so batch sizes \[1, 2\]"):
        SweepPlan(batch_sizes=[1, 2], allocations="1x1").variants(base)
    with pytest.raises(SweepError, match="max_batch_size 8 cannot be set by the sweep"):
        SweepPlan(batch_sizes=[1], allocations="1x1", max_batch_size=8).variants(base)
    with pytest.raises(SweepError, match="dyn delay=100us: dynamic batching needs max_batch_size > 0"):
        SweepPlan(batch_sizes=[1], allocations="1x1", batching=[Batching(True, (), 100)]).variants(base)
    assert SweepPlan(batch_sizes=[1], allocations="1x1").variants(base)[0].config.max_batch_size == 0
    plan = SweepPlan(batch_sizes=[4], allocations="1x1")
    assert plan.variants(read_config(model_dir))[0].config.max_batch_size == 8
    assert SweepPlan(batch_sizes=[16], allocations="1x1").variants(read_config(model_dir))[0].config.max_batch_size == 16


def test_cpu_range_beyond_this_machine_is_refused(model_dir):
    plan = SweepPlan(batch_sizes=[1], allocations="1x1", core_range="0:5")
    with pytest.raises(SweepError, match=r"includes CPU\(s\) 2-5 that this machine does not let the server use"):
        plan.variants(read_config(model_dir), available_cores={0, 1})


# ---- the settings and the row, one value each ------------------------------------------------


def test_settings_are_checked_once_naming_every_bad_value():
    with pytest.raises(MeasureError) as err:
        MeasureSettings(engine="locust", protocol="udp", window_s=0, stability=-1, max_windows=2,
                        warmup_requests=-1, seed=-1, rtol=-1)
    message = str(err.value)
    for part in ("engine must be one of auto, workbench, perf_analyzer, got 'locust'", "protocol 'udp' is not grpc or http",
                 "window_s must be a positive number, got 0", "stability must be a positive number, got -1",
                 "max_windows must be a whole number >= stable_windows (3), got 2", "warmup_requests must be",
                 "seed must be a whole number >= 0", "rtol must be >= 0"):
        assert part in message
    with pytest.raises(MeasureError, match="stable_windows must be a whole number >= 1, got True"):
        MeasureSettings(stable_windows=True)


def test_settings_round_trip_through_a_record_and_name_what_would_change_a_number():
    settings = MeasureSettings(engine="perf_analyzer", perf_analyzer=["/opt/pa.sh", "--x"],
                               window_s=np.float32(0.5), max_windows=np.int64(4))
    recorded = json.loads(json.dumps({"model": "add_sub", **settings.to_dict()}))  # as run.json holds them
    assert MeasureSettings.from_dict(recorded) == settings and settings.differences(recorded) == []
    assert replace(settings, perf_analyzer="/elsewhere/pa").differences(recorded) == []  # the same tool
    assert replace(settings, window_s=0.25, seed=3).differences(recorded) == ["window_s 0.5 -> 0.25", "seed 0 -> 3"]
    assert replace(settings, engine="workbench").differences({"engine": "perf_analyzer"}) == [
        "engine 'perf_analyzer' -> 'workbench'"]


def test_a_point_row_is_made_in_one_place_and_read_back_as_written(model_dir, tmp_path):
    from workbench.measure.engine.perf_analyzer import parse_csv
    from workbench.measure.grid.plan import Point
    from workbench.measure.store.results import COLUMNS, append_point, frame_from_rows, read_points
    from workbench.measure.grid.rows import PointRow

    (variant,) = SweepPlan(batch_sizes=[4], allocations="2x1", core_range="0:1").variants(read_config(model_dir))
    point = Point(variant, 4, 2)
    (measured,) = parse_csv(DATA / "concurrency_grpc_b4.csv")[:1]
    rows = [PointRow.from_perf_analyzer(point, measured, True, 0.0), PointRow.failed(point, "load failed: no")]
    assert [list(r.to_dict()) for r in rows] == [list(COLUMNS)] * 2
    by_pa, failed = rows
    assert by_pa.key == ("2x1", 4, 2) == failed.key and (by_pa.instances, by_pa.core_end) == (2, 1)
    assert (by_pa.throughput, by_pa.p50_ms, by_pa.p99_ms, by_pa.compute_infer_ms) == (17177, 0.205, 0.322, 0.048)
    assert by_pa.summary() == "17177.0 infer/s, p99 0.32 ms" and failed.summary() == "load failed: no"
    assert np.isnan(failed.throughput) and failed.outputs_ok is None and failed.measured_at
    for row in rows:
        append_point(tmp_path / POINTS_FILE, row.to_dict())
    back = [PointRow.from_dict(r) for r in read_points(tmp_path / POINTS_FILE)]
    pd.testing.assert_frame_equal(frame_from_rows(r.to_dict() for r in back),
                                  frame_from_rows(r.to_dict() for r in rows))


# ---- real sweeps on one server ----------------------------------------------------------------


@pytest.mark.server
def test_small_sweep_on_a_real_server(server, model_dir, tmp_path):
    """2 batch sizes x 2 allocations (1x1, 2x1 on cores 0:1): each variant really served, outputs
    checked, CSV/JSON/record/plots written and reloadable, the model left as configured."""
    seen_counts = {}

    def progress(done, total, message):
        if "batch" in message and "loading" not in message:
            allocation = message.split()[0]
            seen_counts[allocation] = server.model_config("add_sub")["instance_group"][0]["count"]

    eager, references = eager_reference(model_dir), []

    def reference(arrays):
        references.append(len(arrays[0]))
        return eager(arrays)

    plan = SweepPlan(batch_sizes=[1, 4], allocations="1x1,2x1", concurrency=[2], core_range="0:1")
    result = run_sweep(plan, server, model_dir, out_dir=tmp_path / "run", progress=progress, settings=FAST,
                       reference=reference)

    assert result.complete and seen_counts == {"1x1": 1, "2x1": 2}
    assert sorted(references) == [1, 4]  # the expected outputs are made once per batch size, not per point
    frame = result.frame
    assert list(zip(frame["allocation"], frame["batch_size"])) == [("1x1", 1), ("1x1", 4), ("2x1", 1), ("2x1", 4)]
    assert frame["outputs_ok"].tolist() == [True] * 4
    assert (frame["failures"] == 0).all() and (frame["throughput"] > 0).all()
    assert (frame["p99_ms"] >= frame["p50_ms"]).all()
    assert (frame["compute_infer_ms"] > 0).all() and (frame["avg_batch"] >= 1).all()
    assert frame.loc[frame["batch_size"] == 4, "avg_batch"].min() >= 4  # batch-4 requests execute as >= 4

    run_dir = tmp_path / "run"
    csv = pd.read_csv(run_dir / CSV_FILE)
    assert len(csv) == 4 and csv["throughput"].tolist() == pytest.approx(frame["throughput"].tolist())
    record = json.loads((run_dir / RECORD_FILE).read_text())
    assert record["status"] == "complete" and record["planned_points"] == 4
    assert record["server_version"] and record["machine"]["cpu_count"] >= 1 and record["packages"]["numpy"]
    assert record["started"] <= record["ended"] and record["plan"]["allocations"] == ["1x1", "2x1"]
    two = record["variants"]["2x1"]
    assert two["instance_group"][0]["count"] == 2 and two["parameters"]["NEURON_CORE_END_INDEX"]["string_value"] == "1"
    assert two["parameters"]["WORKBENCH_SWEEP_VARIANT"]["string_value"] == "2x1"
    assert record["variants"]["1x1"]["parameters"]["NEURON_CORE_END_INDEX"]["string_value"] == "0"
    assert json.loads((run_dir / JSON_FILE).read_text())["record"]["settings"]["window_s"] == 0.2

    again = load_run(run_dir)
    pd.testing.assert_frame_equal(again.frame, result.frame)
    assert again.settings == FAST  # measured as asked, and can be measured again the same way
    written = plot_run(again)
    assert all(path.stat().st_size > 0 for paths in written.values() for path in paths)
    assert result.best(latency_budget_ms=10_000) is not None
    assert server.model_config("add_sub")["instance_group"][0]["count"] == 1  # base config restored


@pytest.mark.server
def test_cancelled_sweep_resumes_without_measuring_again(server, model_dir, tmp_path):
    """Also the switch Triton would apply in place: after the cancel the base config (1 instance on
    0:1) is restored, and 2x1 differs from it only in instance count; the Python backend would give
    the new instance the old config, so the sweep must force a full reload."""
    out = tmp_path / "run"
    plan = SweepPlan(batch_sizes=[1], allocations="1x2,2x1", concurrency=[1], core_range="0:1")
    cancel = threading.Event()

    def stop_after_first(done, total, message):
        if done >= 1:
            cancel.set()

    first = run_sweep(plan, server, model_dir, out_dir=out, progress=stop_after_first, cancel=cancel, settings=FAST)
    assert first.status == "cancelled" and len(first.frame) == 1
    first_row = (out / POINTS_FILE).read_text().splitlines()[0]

    with pytest.raises(SweepError, match="already holds a sweep run"):
        run_sweep(plan, server, model_dir, out_dir=out, settings=FAST)
    with pytest.raises(SweepError, match="window_s 0.2 -> 0.5"):
        run_sweep(plan, server, model_dir, out_dir=out, resume=True, settings=replace(FAST, window_s=0.5))

    measured = []
    second = run_sweep(plan, server, model_dir, out_dir=out, resume=True,
                       progress=lambda d, t, m: measured.append(m), settings=FAST)
    assert second.complete
    lines = (out / POINTS_FILE).read_text().splitlines()
    assert len(lines) == 2 and lines[0] == first_row  # the first point is kept byte for byte
    assert second.frame["allocation"].tolist() == ["1x2", "2x1"]
    assert second.frame["outputs_ok"].tolist() == [True, True] and pd.isna(second.frame["error"]).all()
    assert not any(m.startswith("1x2 batch") or m == "loading 1x2" for m in measured)
    sessions = second.record["sessions"]
    assert [(s["status"], s["reused"], s["measured"]) for s in sessions] == [("cancelled", 0, 1), ("complete", 1, 1)]
    assert second.record["started"] == first.record["started"]


@pytest.mark.server
def test_refused_variants_and_wrong_outputs_are_recorded_not_hidden(server, model_dir, tmp_path):
    """A variant Triton cannot load becomes an error row and the sweep goes on; a point whose
    served outputs differ from the reference is measured but marked, and never named best."""
    def wrong(arrays):
        return [np.zeros_like(a) for a in eager_reference(model_dir)(arrays)]

    plan = SweepPlan(batch_sizes=[2], allocations="1x1", core_range="0:1",
                     parameters={"COMPILED_MODEL": ["1/missing.pt", "1/add_sub.cpu.pt"]})
    result = run_sweep(plan, server, model_dir, out_dir=tmp_path / "run", reference=wrong, settings=FAST)
    refused, served = result.frame.iloc[0], result.frame.iloc[1]
    assert "load failed" in refused["error"] and "missing.pt" in refused["error"]
    times = result.record["variant_times"]
    assert "missing.pt" in times[refused["variant"]]["error"] and "load_s" not in times[refused["variant"]]
    assert times[served["variant"]]["load_s"] > 0 and times[served["variant"]]["first_response_s"] > 0
    assert pd.isna(refused["throughput"])
    assert pd.isna(served["error"]) and served["throughput"] > 0
    assert not served["outputs_ok"] and served["max_abs_diff"] > 0.1
    assert result.complete and result.best() is None
    assert "none of 2 point(s) is usable" in result.describe_best()


@pytest.mark.server
def test_a_load_that_gets_no_answer_in_time_stops_the_loads_instead_of_waiting_for_each(server, model_dir, tmp_path):
    """A stub that hangs while it initializes would make every load wait forever: the sweep bounds
    each load, fails that variant's points naming the stuck load, and loads nothing after it.
    (A 0.05 s bound stands in for the hang: no stub starts that fast.)"""
    plan = SweepPlan(batch_sizes=[1, 2], allocations="1x1,2x1", core_range="0:1")
    try:
        result = run_sweep(plan, server, model_dir, out_dir=tmp_path / "run", settings=FAST, load_timeout_s=0.05)
        frame = result.frame
        assert len(frame) == 4 and frame["throughput"].isna().all()
        first, rest = frame[frame["allocation"] == "1x1"], frame[frame["allocation"] == "2x1"]
        assert all("got no answer within 0.05 s" in e and e.startswith("load failed") for e in first["error"])
        assert all(e.startswith("not loaded: the load of") for e in rest["error"])
    finally:
        server.load("add_sub")  # the module's server back as configured (waits out the load still running)


# ---- the command line ---------------------------------------------------------------------------


def _cli(*args, timeout=300):
    env = {**os.environ, "MPLBACKEND": "Agg"}
    return subprocess.run([sys.executable, "-m", "workbench", "sweep", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout, env=env)


@pytest.mark.server
def test_cli_runs_a_sweep_with_its_own_server(model_dir, tmp_path, capsys):
    out = tmp_path / "cli-run"
    done = _cli(model_dir, "--batch-sizes", "1,2", "--allocations", "1x1", "--core-range", "0:1",
                "--concurrency", "1", "--window-ms", "200", "--max-windows", "3", "--time-limit-s", "0",
                "--engine", "workbench", "--warmup", "5",
                "--out", out, "--latency-budget-ms", "10000")
    assert done.returncode == 0, done.stderr
    assert "throughput" in done.stdout and "Best (highest throughput with p99 <= 10000 ms" in done.stdout
    run = load_run(out)
    assert run.complete and run.frame["batch_size"].tolist() == [1, 2]
    assert run.frame["outputs_ok"].tolist() == [True, True]
    command = run.record["reproduce"]["command"]  # the command as typed, to run it again (workbench report)
    assert command.startswith(f"workbench sweep {model_dir} --batch-sizes 1,2 ") and f"--out {out}" in command
    assert "workbench.run_sweep(plan, server" in run.record["reproduce"]["python"]
    for name in ("latency_vs_batch", "throughput_vs_latency", "server_breakdown", "throughput_heatmap"):
        assert (out / "plots" / f"{name}.png").is_file() and (out / "plots" / f"{name}.svg").is_file()
    before = (out / POINTS_FILE).read_bytes()
    assert main(["sweep", str(model_dir), "--allocations", "2x1", "--core-range", "0:1", "--out", str(out)]) == 2
    assert "already holds a sweep run" in capsys.readouterr().err
    assert (out / POINTS_FILE).read_bytes() == before


def test_cli_refuses_a_bad_grid_before_starting_anything(model_dir, tmp_path, capsys):
    out = tmp_path / "never"
    code = main(["sweep", str(model_dir), "--allocations", "1x1,3x1", "--core-range", "0:1", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and "3x1 needs 3 core(s) but core range 0:1 has 2" in err
    assert "Traceback" not in err and not out.exists()
    assert main(["sweep", str(model_dir), "--param", "THREADS", "--out", str(out)]) == 2
    assert "--param 'THREADS': write KEY=V1,V2" in capsys.readouterr().err
    assert main(["sweep", str(model_dir), "--queue-delay-us", "100", "--preferred-batch-sizes", "4,x",
                 "--out", str(out)]) == 2
    assert "preferred batch sizes: 'x' is not a whole number" in capsys.readouterr().err
    assert main(["sweep", str(model_dir), "--window-ms", "0", "--out", str(out)]) == 2
    assert "window_s must be a positive number, got 0.0" in capsys.readouterr().err
    assert main(["sweep", str(model_dir.parent), "--out", str(out)]) == 2
    assert "is not a model directory (no config.pbtxt)" in capsys.readouterr().err


@pytest.mark.server
def test_cli_uses_a_running_server_with_url(server, model_dir, tmp_path, capsys):
    out = tmp_path / "url-run"
    code = main(["sweep", str(model_dir), "--url", server.grpc_url, "--allocations", "2x1", "--core-range", "0:1",
                 "--window-ms", "200", "--max-windows", "3", "--time-limit-s", "0", "--engine", "workbench",
                 "--warmup", "5", "--out", str(out), "--no-plots"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    run = load_run(out)
    assert run.complete and run.record["url"] == server.grpc_url and run.frame["outputs_ok"].tolist() == [True]
    assert not (out / "plots").exists()
    # the server is someone else's: still running, the model back on its own config
    assert server.running and server.model_config("add_sub")["instance_group"][0]["count"] == 1


def test_cli_says_when_perf_analyzer_is_missing_before_starting_anything(model_dir, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("PERF_ANALYZER", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # no perf_analyzer anywhere
    out = tmp_path / "pa-missing"
    assert main(["sweep", str(model_dir), "--engine", "perf_analyzer", "--out", str(out)]) == 2
    assert "perf_analyzer" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.server
@pytest.mark.alone  # perf_analyzer must reach its stability
def test_perf_analyzer_engine_fills_the_same_table(server, model_dir, tmp_path):
    """Triton's real perf_analyzer (where $PERF_ANALYZER or PATH has one: .ci/run sets the shared
    wrapper) measures the points; outputs are still checked and the rows land in the same columns."""
    from workbench.measure.engine.perf_analyzer import PerfAnalyzerNotFound, find_perf_analyzer

    try:
        find_perf_analyzer()
    except PerfAnalyzerNotFound as err:
        pytest.skip(f"{err} (set PERF_ANALYZER to run it)")
    plan = SweepPlan(batch_sizes=(1, 4), allocations="1x1", concurrency=(2,), core_range="0:1")
    settings = MeasureSettings(engine="perf_analyzer", window_s=0.5, max_windows=10, stability=0.5)
    result = run_sweep(plan, server, model_dir, out_dir=tmp_path / "pa-run", settings=settings, restore=False)
    frame = result.frame
    assert frame["error"].isna().all(), frame["error"].tolist()
    assert frame["outputs_ok"].tolist() == [True, True]
    assert (frame["throughput"] > 0).all() and (frame["p99_ms"] >= frame["p50_ms"]).all()
    assert result.record["settings"]["engine"] == "perf_analyzer"


def test_the_live_server_view_reads_queue_compute_pending_and_batch_from_a_real_server(server, model_dir):
    from workbench.served_outputs import connect, infer
    from workbench.generate.config import spec_from_config
    from workbench.measure.watch.live import ServerWatch

    spec = spec_from_config(read_config(model_dir))
    arrays = spec.example_inputs(2, seed=0)
    watch = ServerWatch(server, "add_sub")
    connection = connect(server.grpc_url, "grpc")
    try:
        for _ in range(5):
            infer(connection, "add_sub", spec, arrays)
        time.sleep(0.5)  # Triton counts a request in its statistics just after it answers
        view = watch.view()
        # five sequential requests of batch 2: five executions of two inferences, nothing left pending
        assert (view.model, view.requests, view.executions, view.avg_batch) == ("add_sub", 5, 5, 2.0)
        assert view.compute_ms > 0 and view.queue_ms >= 0 and view.pending == 0
        assert 0 <= view.queue_share < 1 and view.interval_s > 0
        assert watch.view().requests == 0 and watch.view().avg_batch is None  # nothing since the last view
        server.load("add_sub", config=read_config(model_dir))  # a reload (2.51 may start its statistics afresh)
        for _ in range(3):
            infer(connection, "add_sub", spec, arrays)
        time.sleep(0.5)
        assert watch.view().requests == 3
    finally:
        connection[1].close()


def test_cpu_times_follow_proc_stat():
    # the layout of proc(5): cpu<N> user nice system idle iowait irq softirq steal guest guest_nice
    text = "cpu  10 0 10 80 0 0 0 0 0 0\ncpu0 5 1 4 40 10 0 0 0 3 0\ncpu1 5 0 5 40 0 0 0 0 0 0\nintr 1 2\n"
    from workbench.measure.watch.cpu_use import cpu_times, format_busy

    assert cpu_times(text) == {0: (10, 60), 1: (10, 50)}  # busy leaves idle and iowait out; guest is inside user
    assert format_busy({1: 12.345, 0: 100.0}) == "0:100.0 1:12.3" and format_busy({}) is None


def test_each_point_records_how_busy_the_cpus_of_its_range_were(server, model_dir, tmp_path):
    plan = SweepPlan(batch_sizes=[1], allocations="1x1", concurrency=[1], core_range="0:1")
    burner = subprocess.Popen([sys.executable, "-c", "import os; os.sched_setaffinity(0, {0})\nwhile True: pass"])
    try:
        result = run_sweep(plan, server, model_dir, out_dir=tmp_path / "run", settings=FAST)
    finally:
        burner.kill()
        burner.wait()
    (busy,) = result.frame["cpu_busy"].tolist()
    shares = dict(item.split(":") for item in busy.split())
    assert set(shares) == {"0", "1"} and all(0 <= float(v) <= 100 for v in shares.values())
    assert float(shares["0"]) >= 90  # the burner held CPU 0 for the whole point
    assert json.loads((tmp_path / "run" / POINTS_FILE).read_text())["cpu_busy"] == busy


def test_the_live_view_reads_a_counter_that_went_down_as_restarted_statistics():
    """The branch a reload may take on a real server (its statistics start from zero): the view
    after the restart is the new counters themselves, never a negative difference. The counters
    have the layout of Triton's statistics extension (model_stats[].inference_stats.*.{count,ns})."""
    from workbench.measure.watch.live import ServerWatch

    def stats(success, executions, inferences, ns):
        timed = {key: {"count": success, "ns": ns} for key in ("queue", "compute_input", "compute_infer",
                                                               "compute_output")}
        return {"model_stats": [{"name": "m", "version": "1", "execution_count": executions,
                                 "inference_count": inferences, "inference_stats": {"success": {"count": success},
                                                                                    **timed}}]}

    class Answers:  # what a server's stats() returns, one answer per call; no metrics endpoint
        def __init__(self, *answers):
            self.answers = list(answers)

        def stats(self, model):
            return self.answers.pop(0)

        def metrics(self):
            raise OSError("no metrics endpoint")

    watch = ServerWatch(Answers(stats(10, 10, 20, 10_000_000), stats(3, 3, 6, 3_000_000)), "m")
    view = watch.view()
    assert (view.requests, view.executions, view.avg_batch, view.pending) == (3, 3, 2.0, None)
    assert view.queue_ms == 1.0 and view.compute_ms == 3.0
