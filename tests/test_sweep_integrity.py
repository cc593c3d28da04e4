"""A run folder holds what was measured and nothing else (issue 32: findings 3, 4, 5, 15): a
point where no request succeeded is an error that resume measures again; one sweep writes a folder
at a time; a resume refuses another model's points; hand-edited rows are read as numbers or refused;
Real tritonservers, real run folders."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from workbench.measure.sweep.lock import LOCK_FILE, RunFolderLock
from workbench.measure.sweep.resume import set_aside
from workbench.measure.store.results import POINTS_FILE, ResultsError, read_points, write_exports
from workbench.measure.engine.measure_settings import MeasureSettings
from workbench.measure.sweep import SweepError, SweepPlan, run_sweep
from workbench.server import ServerError, TritonServer

# one short window a point: these tests assert rows and refusals, not figures (each window keeps both cores busy)
# one short window a point, unless nothing completed in it (a starved machine): then up to two more
FAST = MeasureSettings(engine="workbench", window_s=0.1, stable_windows=1, max_windows=3, min_latencies=5,
                       warmup_requests=3, time_limit_s=None)
ONE = SweepPlan(batch_sizes=[1], allocations="1x1", concurrency=[1], core_range="0:1")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, generate_cpu_model):
    return generate_cpu_model(tmp_path_factory.mktemp("integrity"))


def _lines(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / POINTS_FILE).read_text().splitlines() if line.strip()]


@pytest.mark.server
def test_a_point_whose_server_was_killed_is_an_error_and_resume_measures_it_again(model_dir, tmp_path):
    """A one-variant grid: the server killed while the only point is measured. Before, the point was
    saved error-free with throughput 0 and the sweep said complete; now it is an error (or the sweep
    stops naming the dead server) and a resume measures it."""
    out = tmp_path / "run"
    # three windows of half a second: the kill after the first lands while the point is still measured
    slow = MeasureSettings(engine="workbench", window_s=0.5, max_windows=3, warmup_requests=3, time_limit_s=None)
    with TritonServer(model_dir.parent) as server:
        def kill_while_measuring(done, total, message):
            if "window" in message and server.running:
                os.killpg(server.pid, signal.SIGKILL)
        try:
            result = run_sweep(ONE, server, model_dir, out_dir=out, settings=slow, progress=kill_while_measuring)
            assert not result.complete or result.frame["error"].notna().all()
        except ServerError:
            pass
    rows = _lines(out) if (out / POINTS_FILE).exists() else []
    assert all(row["error"] for row in rows), rows  # nothing measured under a dead server passes as measured
    assert all(row["error"].startswith(("no request succeeded", "measure failed")) for row in rows), rows
    with TritonServer(model_dir.parent) as server:
        resumed = run_sweep(ONE, server, model_dir, out_dir=out, settings=slow, resume=True, restore=False)
    assert resumed.complete and resumed.record["sessions"][-1]["measured"] == 1
    (row,) = resumed.frame.to_dict("records")
    assert not row["error"] and row["outputs_ok"] and row["throughput"] > 0


def test_a_second_writer_of_a_run_folder_is_refused_naming_the_holder(tmp_path):
    """The lock is the kernel's: another process holding it makes the sweep refuse before anything."""
    out = tmp_path / "run"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from pathlib import Path; "
         "from workbench.measure.sweep.lock import RunFolderLock\n"
         "with RunFolderLock(Path(sys.argv[1])):\n    print('held', flush=True); time.sleep(60)", str(out)],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(SweepError, match=rf"being written by another sweep \(pid {holder.pid}: "):
            with RunFolderLock(out):
                pass
    finally:
        holder.kill()
        holder.wait(10)
    with RunFolderLock(out):  # the holder gone, its lock went with it
        pass
    assert list(out.iterdir()) == []  # the lock file goes when the sweep ends


def test_a_new_run_sets_the_old_one_aside_and_keeps_its_folder_locked(tmp_path):
    """--new-run moves the old run away while the sweep holds the folder: the held lock stays in
    the folder, so a second sweep started in that moment is still refused."""
    out = tmp_path / "run"
    out.mkdir()
    (out / POINTS_FILE).write_text('{"old": 1}\n')
    with RunFolderLock(out):
        kept = set_aside(out, keep=(LOCK_FILE,))
        assert kept == tmp_path / "run.replaced-1" and (kept / POINTS_FILE).read_text() == '{"old": 1}\n'
        assert [p.name for p in out.iterdir()] == [LOCK_FILE] and not (kept / LOCK_FILE).exists()
        with pytest.raises(SweepError, match="being written by another sweep"):
            RunFolderLock.check_free(out)
    assert list(out.iterdir()) == []


@pytest.mark.server
def test_two_sweeps_on_one_folder_the_second_is_refused_before_it_loads_anything(model_dir, tmp_path, capsys):
    from workbench.cli import main

    out = tmp_path / "run"
    args = [sys.executable, "-m", "workbench", "sweep", str(model_dir), "--batch-sizes", "1", "--allocations", "1x1",
            "--core-range", "0:1", "--concurrency", "1,2", "--window-ms", "200", "--max-windows", "3", "--warmup", "3",
            "--no-plots", "--engine", "workbench", "--time-limit-s", "0", "--out", str(out)]
    first = subprocess.Popen(args, env={**os.environ, "MPLBACKEND": "Agg"}, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not (out / ".sweep.lock").exists() and time.monotonic() < deadline and first.poll() is None:
            time.sleep(0.05)
        assert first.poll() is None, "the first sweep ended before the second could start"
        code = main(args[3:] + ["--resume"])
        err = capsys.readouterr().err
        assert code == 2 and "is being written by another sweep" in err and "Traceback" not in err
        assert len(err.strip().splitlines()) == 1
    finally:
        first.wait(300)
    assert first.returncode == 0
    lines = _lines(out)
    assert len(lines) == 2 and len({(r["variant"], r["batch_size"], r["concurrency"]) for r in lines}) == 2


@pytest.mark.server
def test_a_resume_on_another_models_points_is_refused_naming_the_model(tmp_path, generate_cpu_model):
    add_sub = generate_cpu_model(tmp_path, "add_sub")
    mlp = generate_cpu_model(tmp_path, "mlp", seed=0)  # beside it, in one repository: one server serves both
    assert add_sub.parent == mlp.parent
    with TritonServer(add_sub.parent) as server:
        run_sweep(ONE, server, add_sub, out_dir=tmp_path / "add_sub_run", settings=FAST, restore=False)
        run_sweep(ONE, server, mlp, out_dir=tmp_path / "mlp_run", settings=FAST, restore=False)
        copied = (tmp_path / "add_sub_run" / POINTS_FILE).read_bytes()
        (tmp_path / "mlp_run" / POINTS_FILE).write_bytes(copied)
        with pytest.raises(SweepError, match=r"holds points of model 'add_sub', not 'mlp'"):
            run_sweep(ONE, server, mlp, out_dir=tmp_path / "mlp_run", settings=FAST, resume=True)
    assert (tmp_path / "mlp_run" / POINTS_FILE).read_bytes() == copied  # nothing reused, nothing rewritten


def test_hand_edited_rows_are_numbers_or_refused(tmp_path):
    path = tmp_path / POINTS_FILE
    path.write_text('{"variant": "1x1", "batch_size": "1", "concurrency": 1, "throughput": 10.0}\n'
                    '{"variant": "1x1", "batch_size": 1, "concurrency": 1, "throughput": 12.0}\n')
    rows = read_points(path)
    assert [r["batch_size"] for r in rows] == [1, 1]  # one point, not two
    path.write_text('{"variant": "1x1", "batch_size": 1, "concurrency": 1, "throughput": Infinity}\n'
                    '{"variant": "1x1", "batch_size": 2, "concurrency": 1}\n')
    with pytest.raises(ResultsError, match=r"line 1 is not a JSON row \(Infinity is not a JSON number\)"):
        read_points(path)
    path.write_text('{"variant": "1x1", "batch_size": "one", "concurrency": 1}\n')
    with pytest.raises(ResultsError, match=r"line 1: batch_size 'one' is not a whole number"):
        read_points(path)


def test_results_json_is_strict_json_whatever_the_frame_holds(tmp_path):
    import pandas as pd

    frame = pd.DataFrame([{"variant": "1x1", "batch_size": 1, "concurrency": 1, "throughput": float("inf"),
                           "p99_ms": float("nan")}])
    _, json_path = write_exports(tmp_path, frame, {"note": float("-inf")})
    document = json.loads(json_path.read_text(), parse_constant=lambda word: pytest.fail(f"{word} in results.json"))
    assert document["points"][0]["throughput"] is None and document["record"]["note"] is None
