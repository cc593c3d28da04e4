"""Resume (issue 17, point 3): a sweep killed at any point -- its server, then its parent process --
and resumed any number of times ends with exactly one row per point and the same keys and checked
outputs as an uninterrupted run; a resume against a changed model or config is refused naming what
changed, unless a new run is asked for. Real tritonservers, real run folders."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from workbench.measure.grid.rows import INT_COLUMNS, KEY_COLUMNS
from workbench.measure.llm.rows import LLM_INT_COLUMNS, LLM_KEY_COLUMNS
from workbench.measure.sweep.resume import (compact_points, fingerprint, fingerprint_changes, resumed_rows,
                                            unique_rows)
from workbench.measure.store.results import POINTS_FILE, load_run, read_points
from workbench.measure.engine.measure_settings import MeasureSettings
from workbench.measure.sweep import SweepError, SweepPlan, run_sweep
from workbench.server import ServerError, TritonServer

# resume is about rows, not figures: one short window a point (each window keeps both cores busy), up to
# two more where nothing completed in it (a starved machine)
FAST = MeasureSettings(engine="workbench", window_s=0.1, stable_windows=1, max_windows=3, min_latencies=5,
                       warmup_requests=3, time_limit_s=None)
# two variants of one instance each (a load of one stub is the cheapest): resume is about rows, not instances
PLAN = SweepPlan(batch_sizes=[1, 2], allocations="1x1,1x2", concurrency=[1], core_range="0:1")
KEYS = ["variant", "batch_size", "concurrency"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, generate_cpu_model):
    return generate_cpu_model(tmp_path_factory.mktemp("resume"))


def _lines(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / POINTS_FILE).read_text().splitlines()]


def _deterministic(rows) -> list[tuple]:
    return sorted((r["variant"], r["batch_size"], r["concurrency"], bool(r["outputs_ok"]), r.get("error") or None)
                  for r in rows)


def _kill_server_after(server: TritonServer, points: int):
    def progress(done, total, message):
        if done >= points and server.running:
            os.killpg(server.pid, signal.SIGKILL)
            deadline = time.monotonic() + 10
            while server.running and time.monotonic() < deadline:
                time.sleep(0.05)
    return progress


def test_unique_rows_and_compaction_keep_one_row_per_point(tmp_path):
    path = tmp_path / POINTS_FILE
    rows = [{"variant": "a", "batch_size": 1, "concurrency": 1, "error": None, "n": 1},
            {"variant": "b", "batch_size": 1, "concurrency": 1, "error": "boom", "n": 2},
            {"variant": "a", "batch_size": 1, "concurrency": 1, "error": "later failure", "n": 3},
            {"variant": "b", "batch_size": 1, "concurrency": 1, "error": None, "n": 4},
            {"variant": "c", "batch_size": 1, "concurrency": 1, "error": "never measured", "n": 5}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"torn')
    assert [r["n"] for r in unique_rows(rows)] == [1, 4, 5]
    compact_points(path)
    assert [r["n"] for r in read_points(path)] == [1, 4]  # failed points go: they are measured again
    first = path.read_text().splitlines()[0]
    assert first == json.dumps(rows[0])  # a kept row is kept byte for byte


def test_fingerprint_changes_name_what_changed():
    old = {"model_files": {"config.pbtxt": "1", "1/model.pt": "2", "1/old.txt": "3"}, "config": "c",
           "server_version": "2.51.0", "package_version": "0.1.0"}
    new = {"model_files": {"config.pbtxt": "1", "1/model.pt": "X", "1/new.txt": "4"}, "config": "d",
           "server_version": "2.52.0", "package_version": "0.1.0"}
    assert fingerprint_changes(old, new) == ["model file 1/model.pt changed", "model file 1/new.txt is new",
                                             "model file 1/old.txt is gone", "the model's config changed",
                                             "server version 2.51.0 -> 2.52.0"]
    assert fingerprint_changes(old, old) == [] and fingerprint_changes(None, new) == []


@pytest.mark.server
def test_a_sweep_killed_with_its_server_and_resumed_again_and_again_has_one_row_per_point(model_dir, tmp_path):
    out = tmp_path / "killed"
    for kill_after in (1, 2):  # the server dies under the sweep twice, at different points
        with TritonServer(model_dir.parent) as server:
            with pytest.raises(ServerError):
                run_sweep(PLAN, server, model_dir, out_dir=out, settings=FAST, resume=kill_after > 1,
                          progress=_kill_server_after(server, kill_after))
        assert load_run(out).status == "failed"
        assert sum(not r["error"] for r in _lines(out)) < PLAN.size  # the kill left points to measure
    # one live server for the uninterrupted run and the resumes: each resume is a run_sweep of its own
    # on the folder the killed ones left; the server's lifetime is no part of what a resume reads
    with TritonServer(model_dir.parent) as server:
        reference = run_sweep(PLAN, server, model_dir, out_dir=tmp_path / "whole", settings=FAST, restore=False)
        assert reference.complete and len(reference.frame) == PLAN.size
        for _ in range(3):  # resumed to the end, then again on a complete run
            result = run_sweep(PLAN, server, model_dir, out_dir=out, settings=FAST, resume=True, restore=False)
            assert result.complete
            lines = _lines(out)
            assert len(lines) == PLAN.size and len({tuple(r[k] for k in KEYS) for r in lines}) == PLAN.size
            assert len(result.frame) == PLAN.size
            assert _deterministic(lines) == _deterministic(reference.frame.to_dict("records"))
    assert result.record["sessions"][-1]["measured"] == 0


@pytest.mark.server
def test_a_sweep_whose_parent_is_killed_resumes_to_one_row_per_point(model_dir, tmp_path):
    """The CLI process is SIGKILLed once a point is on disk (its guard takes the server down);
    `--resume` twice then ends with one row per point and no tritonserver left behind."""
    out = tmp_path / "cli"
    args = [sys.executable, "-m", "workbench", "sweep", str(model_dir), "--batch-sizes", "1,2", "--allocations",
            "1x1,1x2", "--core-range", "0:1", "--concurrency", "1", "--window-ms", "100", "--stable-windows", "1",
            "--max-windows", "3", "--min-latencies", "5", "--warmup", "3", "--no-plots", "--engine", "workbench", "--time-limit-s", "0", "--out", str(out)]
    env = {**os.environ, "MPLBACKEND": "Agg"}
    parent = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and parent.poll() is None:
            if (out / POINTS_FILE).exists() and (out / POINTS_FILE).read_text().count("\n") >= 1:
                break
            time.sleep(0.05)
        assert parent.poll() is None, "the sweep ended before it could be killed"
        parent.send_signal(signal.SIGKILL)
    finally:
        parent.wait(30)
    assert 1 <= len(_lines(out)) < PLAN.size
    for _ in range(2):
        done = subprocess.run(args + ["--resume"], env=env, capture_output=True, text=True, timeout=400)
        assert done.returncode == 0, done.stderr
    lines = _lines(out)
    assert len(lines) == PLAN.size and len({tuple(r[k] for k in KEYS) for r in lines}) == PLAN.size
    assert all(r["outputs_ok"] for r in lines)
    assert load_run(out).complete


@pytest.mark.server
def test_a_resume_against_a_changed_model_or_config_is_refused_naming_what_changed(tmp_path, generate_cpu_model):
    model_dir = generate_cpu_model(tmp_path, "mlp", seed=0)
    out = tmp_path / "run"
    # one variant (one load) of two points: the cancel leaves one to measure; the refusal reads files, not loads
    plan = SweepPlan(batch_sizes=[1, 2], allocations="1x1", concurrency=[1], core_range="0:1")
    cancel = threading.Event()
    with TritonServer(model_dir.parent) as server:
        first = run_sweep(plan, server, model_dir, out_dir=out, settings=FAST, cancel=cancel, restore=False,
                          progress=lambda done, total, message: done >= 1 and cancel.set())
        assert first.status == "cancelled" and first.record["fingerprint"]["model_files"]
        before = (out / POINTS_FILE).read_bytes()

        generate_cpu_model(tmp_path, "mlp", seed=1)  # the same model regenerated with other weights
        with pytest.raises(SweepError, match=r"what it measured has changed \(model file 1/mlp\.cpu\.pt changed"):
            run_sweep(plan, server, model_dir, out_dir=out, settings=FAST, resume=True)
        assert (out / POINTS_FILE).read_bytes() == before

        generate_cpu_model(tmp_path, "mlp", seed=0)
        config = (model_dir / "config.pbtxt").read_text()
        (model_dir / "config.pbtxt").write_text(config.replace("max_batch_size: 8", "max_batch_size: 4"))
        with pytest.raises(SweepError, match="the model's config changed"):
            run_sweep(plan, server, model_dir, out_dir=out, settings=FAST, resume=True)

        fresh = run_sweep(plan, server, model_dir, out_dir=out, settings=FAST, new_run=True, restore=False)
    assert fresh.complete and len(fresh.frame) == plan.size
    kept = tmp_path / "run.replaced-1"
    assert (kept / POINTS_FILE).read_bytes() == before  # the old run is kept beside the new one
    assert fresh.record["sessions"][0]["reused"] == 0


# ---- issue 17, point 5: a corrupted run folder, a server that dies under the sweep ----------------

def _sweep_args(model_dir: Path, out: Path) -> list[str]:
    return ["sweep", str(model_dir), "--batch-sizes", "1,2", "--allocations", "1x1,1x2", "--core-range", "0:1",
            "--concurrency", "1", "--window-ms", "100", "--stable-windows", "1", "--max-windows", "3", "--min-latencies", "5", "--warmup", "3",
            "--no-plots",
            "--engine", "workbench", "--time-limit-s", "0", "--out", str(out)]


@pytest.mark.parametrize("damage, message", [
    (lambda out: (out / POINTS_FILE).write_text('{"variant": "1x1", "batch_size": 1, "concurrency": 1}\n'
                                                'not json\n{"variant": "1x1", "batch_size": 2, "concurrency": 1}\n'),
     f"{POINTS_FILE} line 2 is not a JSON row"),
    (lambda out: (out / POINTS_FILE).write_text('{"variant": "1x1", "batch_size": 1, "concurrency": 1}\n[1, 2]\n\n'),
     f"{POINTS_FILE} line 2 is not a point row"),
    (lambda out: (out / "run.json").write_text('{\n  "status": "failed",\n  oops\n}\n'), "run.json line 3 is not valid JSON"),
])
def test_a_corrupted_run_folder_is_named_before_a_server_starts(model_dir, tmp_path, capsys, monkeypatch, damage,
                                                                message):
    from workbench.cli import main

    out = tmp_path / "run"
    out.mkdir()
    (out / "run.json").write_text(json.dumps({"status": "failed", "settings": {}}))
    damage(out)
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    def no_server(self, *args, **kwargs):
        raise AssertionError("a server was started for a corrupted run folder")

    monkeypatch.setattr(TritonServer, "start", no_server)
    assert main(_sweep_args(model_dir, out) + ["--resume"]) == 2
    err = capsys.readouterr().err
    assert message in err and str(out) in err and "Traceback" not in err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # nothing rewritten


def _children_named(pid: int, name: str) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        comm = text[text.index("(") + 1:text.rindex(")")]
        if comm == name and int(text[text.rindex(")") + 2:].split()[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def kill_server_under_cli(args: list[str], out: Path) -> tuple[int, str]:
    """Run ``workbench ARGS`` (a sweep writing to ``out``), SIGKILL its tritonserver once a point is
    on disk, and return the sweep's exit code and stderr."""
    env = {**os.environ, "MPLBACKEND": "Agg"}
    sweep = subprocess.Popen([sys.executable, "-m", "workbench", *args], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and sweep.poll() is None:
            if (out / POINTS_FILE).exists() and (out / POINTS_FILE).read_text().count("\n") >= 1:
                break
            time.sleep(0.05)
        servers = _children_named(sweep.pid, "tritonserver")
        assert servers, "no tritonserver under the sweep"
        os.kill(servers[0], signal.SIGKILL)
        _, err = sweep.communicate(timeout=300)
    finally:
        if sweep.poll() is None:
            sweep.kill()
            sweep.wait(30)
    return sweep.returncode, err


@pytest.mark.server
def test_a_server_that_dies_under_the_sweep_ends_it_with_a_reason_and_its_log_tail(model_dir, tmp_path):
    out = tmp_path / "died"
    returncode, err = kill_server_under_cli(_sweep_args(model_dir, out), out)
    assert returncode == 1, err
    assert "Traceback" not in err
    reason = [line for line in err.splitlines() if line.startswith("workbench sweep: error: ")]
    assert len(reason) == 1 and "the server is not running (tritonserver exited with code -9)" in reason[0]
    assert "the measured points are kept" in reason[0] and "tritonserver log (last lines):" in err
    run = load_run(out)
    assert run.status == "failed" and len(run.frame) >= 1 and run.frame["outputs_ok"].iloc[0]


@pytest.mark.parametrize("key_columns, int_columns, point, other", [
    (KEY_COLUMNS, INT_COLUMNS, {"variant": "1x1", "batch_size": 1, "concurrency": 1},
     {"variant": "1x1", "batch_size": 2, "concurrency": 1}),
    (LLM_KEY_COLUMNS, LLM_INT_COLUMNS, {"variant": "seqs1-tp1-x1", "concurrency": 1, "request_rate": None},
     {"variant": "seqs1-tp1-x1", "concurrency": 4, "request_rate": None}),
], ids=["tensor", "llm"])
def test_both_sweeps_resume_through_one_check_that_words_each_sweeps_own_settings(tmp_path, key_columns, int_columns,
                                                                                   point, other):
    """The tensor and the LLM sweep resume through `resumed_rows`: the same refusals (another model,
    changed files or versions, a points file of another model or config) for both row types, the
    settings that differ in the words each sweep hands it. A real run folder on disk; no server."""
    out = tmp_path / "run"
    out.mkdir()
    measured = fingerprint(None, '{"name": "m"}', server_version="2.61.0", package_version="1.0")
    record = {"model": "m", "fingerprint": measured}
    digests = {point["variant"]: "d1"}
    good = {**point, "model": "m", "config_digest": "d1", "throughput": 10.0}
    failed = {**other, "model": "m", "config_digest": "d1", "error": "load failed: refused"}
    (out / POINTS_FILE).write_text("".join(json.dumps(r) + "\n" for r in (good, failed)))

    def resume(**changes):
        args = {"model": "m", "different": [], "measured": measured, "digests": digests, "record": record, **changes}
        return resumed_rows(out, args.pop("record"), key_columns=key_columns, int_columns=int_columns, **args)

    assert resume() == [good]  # the failed point is left out (measured again) and compacted away
    assert _lines(out) == [good]
    with pytest.raises(SweepError, match=r"in .*run with other settings \(output_tokens 8 -> 12\); use the same"):
        resume(different=["output_tokens 8 -> 12"])  # the sweep's own words, in the shared sentence
    with pytest.raises(SweepError, match=r"with other settings \(model 'm' -> 'n'; window_s 0.2 -> 0.5\)"):
        resume(model="n", different=["window_s 0.2 -> 0.5"])
    newer = fingerprint(None, '{"name": "m"}', server_version="2.62.0", package_version="1.0")
    with pytest.raises(SweepError, match=r"what it measured has changed \(server version 2.61.0 -> 2.62.0\)"):
        resume(measured=newer)
    with pytest.raises(SweepError, match=r"holds points of model 'm', not 'n'"):
        resume(model="n", record={"fingerprint": measured})  # a record that names no model: its rows do
    with pytest.raises(SweepError, match=rf"the config of variant\(s\) {point['variant']} differs"):
        resume(digests={point["variant"]: "d2"})
    assert _lines(out) == [good]  # a refusal leaves the run as it was
