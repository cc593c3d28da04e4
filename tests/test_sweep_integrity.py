"""No failed point passes as measured, no run folder is written twice at once, no foreign row is
resumed (issue 32). Real tritonservers and run folders; one server shared where the test allows.
"""

from __future__ import annotations

import errno
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from workbench.cli import main
from workbench.measure.lock import holder, lock_path, run_folder_lock
from workbench.measure.results import POINTS_FILE, ResultsError, load_run, read_points
from workbench.measure.resume import foreign_rows
from workbench.measure.settings import MeasureSettings
from workbench.measure.sweep import SweepError, SweepPlan, run_sweep
from workbench.server import TritonServer

FAST = MeasureSettings(engine="workbench", window_s=0.2, max_windows=3, warmup_requests=3, time_limit_s=None)
ONE = SweepPlan(batch_sizes=[1], allocations="1x1", concurrency=[1], core_range="0:0")


@pytest.fixture(scope="module")
def repo(tmp_path_factory, generate_cpu_model) -> Path:
    root = tmp_path_factory.mktemp("integrity")
    generate_cpu_model(root, "add_sub")
    generate_cpu_model(root, "mlp")
    return root / "repo"


# ---- a point that measured nothing ------------------------------------------------------------------

@pytest.mark.server
def test_a_point_whose_server_was_killed_is_an_error_and_resume_measures_it(repo, tmp_path):
    out = tmp_path / "run"
    slow = MeasureSettings(engine="workbench", window_s=0.5, max_windows=8, warmup_requests=3, time_limit_s=None)
    server = TritonServer(repo).start()
    try:
        def kill_while_measuring(done, total, message):
            if message.startswith(ONE.points(ONE.variants(_base(repo))[0])[0].label) and "loading" not in message \
                    and "waiting" not in message and server.running:
                os.killpg(server.pid, signal.SIGKILL)
                deadline = time.monotonic() + 10
                while server.running and time.monotonic() < deadline:
                    time.sleep(0.05)

        result = run_sweep(ONE, server, repo / "add_sub", out_dir=out, settings=slow, progress=kill_while_measuring)
    finally:
        server.stop()
    row = result.frame.iloc[0]
    assert not server.running
    assert isinstance(row["error"], str) and row["error"], row.to_dict()
    assert not (row["throughput"] > 0)  # no throughput passes as measured
    with TritonServer(repo) as again:
        resumed = run_sweep(ONE, again, repo / "add_sub", out_dir=out, settings=slow, resume=True)
    assert resumed.complete and resumed.record["sessions"][-1]["measured"] == 1
    assert resumed.frame.iloc[0]["error"] is None and resumed.frame.iloc[0]["throughput"] > 0
    assert len(load_run(out).frame) == 1


def _base(repo: Path):
    from workbench.generate.config import read_config

    return read_config(repo / "add_sub")


def test_the_cli_fails_a_run_with_a_failed_point(repo, tmp_path, capsys, monkeypatch):
    """A complete run with an error row exits 1 naming the point (no 'complete' and 0)."""
    from workbench.measure import sweep as sweep_module
    from workbench.measure.rows import PointRow

    def nothing_succeeded(target, point, settings, **kwargs):
        return PointRow.failed(point, "no request succeeded: 5 of 5 sent failed")

    monkeypatch.setattr(sweep_module, "measure_point", nothing_succeeded)
    rc = main(["sweep", str(repo / "add_sub"), "--batch-sizes", "1", "--allocations", "1x1", "--core-range", "0:0",
               "--concurrency", "1", "--engine", "workbench", "--window-ms", "200", "--max-windows", "3",
               "--no-plots", "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert rc == 1 and "1 of 1 point(s) failed" in err and "--resume measures them again" in err, err


# ---- one writer per run folder ------------------------------------------------------------------------

def _sweep_argv(model: Path, out: Path, *more: str) -> list[str]:
    return ["sweep", str(model), "--batch-sizes", "1,2,4", "--allocations", "1x1", "--core-range", "0:0",
            "--concurrency", "1,2", "--engine", "workbench", "--window-ms", "300", "--max-windows", "6",
            "--no-plots", "--out", str(out), *more]


@pytest.mark.server
def test_a_second_sweep_on_a_folder_is_refused_naming_the_first(repo, tmp_path, capsys, monkeypatch):
    out = tmp_path / "run"
    first = subprocess.Popen([sys.executable, "-m", "workbench", *_sweep_argv(repo / "add_sub", out)],
                             env={**os.environ, "MPLBACKEND": "Agg"}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
    try:
        deadline = time.monotonic() + 240
        while not lock_path(out).exists() and first.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert lock_path(out).exists(), first.communicate()[1]

        def no_server(self, *args, **kwargs):
            raise AssertionError("a server was started for a folder another sweep writes")

        monkeypatch.setattr(TritonServer, "start", no_server)
        for more in ([], ["--resume"]):
            assert main(_sweep_argv(repo / "add_sub", out, *more)) == 2
            err = capsys.readouterr().err.strip()
            assert len(err.splitlines()) == 1 and f"pid {first.pid}" in err and "workbench sweep" in err, err
        # through the API too, before the server object is even looked at
        with pytest.raises(SweepError, match=f"being written by another sweep: pid {first.pid}"):
            run_sweep(ONE, object(), repo / "add_sub", out_dir=out, settings=FAST, resume=True)
    finally:
        first.send_signal(signal.SIGINT)
        first.communicate(timeout=120)
    assert holder(out) is None  # the kernel drops the lock with its process, however it ended
    rows = read_points(out / POINTS_FILE)
    assert len(rows) == len({(r["variant"], r["batch_size"], r["concurrency"]) for r in rows})


def test_the_lock_is_exclusive_and_released(tmp_path):
    out = tmp_path / "run"
    with run_folder_lock(out):
        with pytest.raises(SweepError, match=f"pid {os.getpid()}"):
            with run_folder_lock(out):
                pass
    with run_folder_lock(out):  # free again once released, and no lock file left
        pass
    assert not lock_path(out).exists() and not out.exists()


def test_one_server_named_twice_is_refused_in_a_fan_out(repo, tmp_path):
    from workbench.measure.fanout import run_fanout
    from workbench.server import RunningServer

    servers = [RunningServer("127.0.0.1:8001", "grpc"), RunningServer("grpc://localhost:8001", "grpc")]
    with pytest.raises(SweepError, match="are one server"):
        run_fanout(ONE, servers, repo / "add_sub", out_dir=tmp_path / "fan", settings=FAST)


# ---- foreign rows ---------------------------------------------------------------------------------------

@pytest.mark.server
def test_resume_on_a_foreign_points_file_is_refused_naming_the_model(repo, tmp_path):
    with TritonServer(repo) as server:
        run_sweep(ONE, server, repo / "add_sub", out_dir=tmp_path / "add_sub", settings=FAST)
        run_sweep(ONE, server, repo / "mlp", out_dir=tmp_path / "mlp", settings=FAST)
        shutil.copy(tmp_path / "add_sub" / POINTS_FILE, tmp_path / "mlp" / POINTS_FILE)
        before = (tmp_path / "mlp" / POINTS_FILE).read_bytes()
        with pytest.raises(SweepError, match="measured on model 'add_sub', not 'mlp'"):
            run_sweep(ONE, server, repo / "mlp", out_dir=tmp_path / "mlp", settings=FAST, resume=True)
        assert (tmp_path / "mlp" / POINTS_FILE).read_bytes() == before  # nothing rewritten
        other = MeasureSettings(engine="workbench", window_s=0.3, max_windows=3, warmup_requests=3, time_limit_s=None)
        stamped = [json.loads(line) for line in (tmp_path / "add_sub" / POINTS_FILE).read_text().splitlines()]
        from workbench.measure.resume import fingerprint, row_stamp

        assert foreign_rows(stamped, row_stamp("add_sub", {"model_files": {}, "config": "x"},
                                               other.meaning()), POINTS_FILE)


def test_rows_that_carry_no_model_or_another_config_are_named():
    stamp = {"model": "m", "stamp": {"files": "f", "config": "c", "settings": "s"}}
    rows = [{"model": "m", "stamp": {"files": "f", "config": "c", "settings": "s"}},
            {"model": "m", "stamp": {"files": "f", "config": "other", "settings": "s"}},
            {"variant": "1x1"}]
    found = foreign_rows(rows, stamp, POINTS_FILE)
    assert found == [f"{POINTS_FILE} row 2 was measured with another config",
                     f"{POINTS_FILE} row 3 does not say which model it measured (written by hand or by an older "
                     "workbench)"]


# ---- hand-edited rows and a full disk ----------------------------------------------------------------------

@pytest.mark.parametrize("edit, words", [
    ('"throughput": Infinity', "throughput inf is not a finite number"),
    ('"throughput": NaN', "throughput nan is not a finite number"),
    ('"batch_size": "1"', "batch_size '1' is not a whole number"),
    ('"concurrency": true', "concurrency True is not a whole number"),
    ('"variant": 3', "variant 3 is not a string"),
])
def test_hand_edited_rows_are_refused_naming_the_line(tmp_path, edit, words):
    good = {"variant": "1x1", "batch_size": 1, "concurrency": 1, "throughput": 10.0}
    key = edit.split(":")[0].strip('"')
    row = json.dumps({k: v for k, v in good.items() if k != key})[:-1] + ", " + edit + "}"
    (tmp_path / POINTS_FILE).write_text(json.dumps(good) + "\n" + row + "\n" + json.dumps(good) + "\n")
    with pytest.raises(ResultsError, match="line 2: " + words.replace("(", r"\(")):
        read_points(tmp_path / POINTS_FILE)


def test_results_json_stays_strict_json(tmp_path):
    from workbench.measure.results import write_exports
    import pandas as pd

    frame = pd.DataFrame([{"variant": "1x1", "batch_size": 1, "concurrency": 1, "throughput": math.inf}])
    _csv, path = write_exports(tmp_path, frame, {})
    json.loads(path.read_text(), parse_constant=lambda name: pytest.fail(f"{name} in results.json"))


@pytest.mark.server
def test_a_full_disk_during_a_sweep_is_one_line_and_resume_completes(repo, tmp_path, capsys, monkeypatch):
    from workbench.measure import sweep as sweep_module

    out = tmp_path / "run"
    real_append = sweep_module.append_point
    appended = []

    def append_until_full(path, row):
        if appended:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        appended.append(row)
        real_append(path, row)

    monkeypatch.setattr(sweep_module, "append_point", append_until_full)
    argv = ["sweep", str(repo / "add_sub"), "--batch-sizes", "1,2", "--allocations", "1x1", "--core-range", "0:0",
            "--concurrency", "1", "--engine", "workbench", "--window-ms", "200", "--max-windows", "3",
            "--no-plots", "--out", str(out)]
    assert main(argv) == 1
    err = capsys.readouterr().err
    said = [line for line in err.replace("\r", "\n").splitlines() if line.startswith("workbench sweep:")]
    assert len(said) == 1 and "No space left on device" in said[0] and "--resume" in said[0], err
    assert "Traceback" not in err
    monkeypatch.setattr(sweep_module, "append_point", real_append)
    assert main(argv + ["--resume"]) == 0
    assert len(load_run(out).frame) == 2
