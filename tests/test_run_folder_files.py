"""Every file the workbench reads or writes in a run folder or model directory is a regular file of
its own (issue 47, H1 and item 5): a ``.sweep.lock`` that is a symlink, a dangling symlink, a hard
link, a FIFO or a /dev link is refused in one line and whatever it points at stays untouched, for
tensor and LLM sweeps alike, from the command line and the Python call."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from bounded_worker import worker_fixture
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workbench.files import NotRegularFile, append_regular, open_regular, read_regular, read_text
from workbench.measure.grid.plan import SweepError
from workbench.measure.sweep.lock import LOCK_FILE, RunFolderLock

from vllm_model_dirs import vllm_model_dir

PRECIOUS = b"the user's own file\n"


def _victim(tmp_path: Path) -> Path:
    victim = tmp_path / "precious.txt"
    victim.write_bytes(PRECIOUS)
    return victim


def _planted(out: Path, how: str, victim: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    lock = out / LOCK_FILE
    if how == "symlink":
        lock.symlink_to(victim)
    elif how == "dangling":
        lock.symlink_to(victim.parent / "made-by-the-lock")
    elif how == "hardlink":
        os.link(victim, lock)
    elif how == "fifo":
        os.mkfifo(lock)
    return lock


KINDS = ["symlink", "dangling", "hardlink", "fifo"]


@pytest.mark.parametrize("how", KINDS)
def test_taking_a_planted_lock_is_refused_and_its_target_kept(tmp_path, how):
    victim = _victim(tmp_path)
    out = tmp_path / "run"
    lock = _planted(out, how, victim)
    with pytest.raises(SweepError, match=rf"cannot take the lock .*{LOCK_FILE}"):
        RunFolderLock.check_free(out)
    with pytest.raises(SweepError, match=rf"cannot take the lock .*{LOCK_FILE}"):
        with RunFolderLock(out):  # the check passed, then the link was swapped in: still refused
            pass
    assert victim.read_bytes() == PRECIOUS and os.path.lexists(lock)
    assert not (tmp_path / "made-by-the-lock").exists()


@pytest.mark.parametrize("resume", [False, True])
@pytest.mark.parametrize("how", ["symlink", "dangling"])
def test_a_tensor_sweep_refuses_a_symlinked_lock_before_anything(generate_cpu_model, tmp_path, capsys, how, resume):
    from workbench.cli import main

    model_dir = generate_cpu_model(tmp_path / "m")
    victim = _victim(tmp_path)
    out = tmp_path / "run"
    _planted(out, how, victim)
    code = main(["sweep", str(model_dir), "--batch-sizes", "1", "--allocations", "1x1", "--core-range", "0:1",
                 "--no-plots", "--out", str(out), *(["--resume"] if resume else [])])
    err = capsys.readouterr().err
    assert code == 2 and "is a symbolic link" in err and "Traceback" not in err
    assert victim.read_bytes() == PRECIOUS and sorted(p.name for p in out.iterdir()) == [LOCK_FILE]
    assert not (tmp_path / "made-by-the-lock").exists()


@pytest.mark.parametrize("resume", [False, True])
def test_an_llm_sweep_refuses_a_symlinked_lock_before_anything(tmp_path, capsys, resume):
    from workbench.cli import main
    from workbench.measure.llm import LlmPlan, run_llm_sweep

    llm_dir = vllm_model_dir(tmp_path, "llm", "cpu")
    victim = _victim(tmp_path)
    out = tmp_path / "run"
    _planted(out, "symlink", victim)
    code = main(["sweep", str(llm_dir), "--out", str(out), *(["--resume"] if resume else [])])
    err = capsys.readouterr().err
    assert code == 2 and "is a symbolic link" in err and len(err.strip().splitlines()) == 1
    with pytest.raises(SweepError, match="is a symbolic link"):
        run_llm_sweep(LlmPlan(), object(), llm_dir, out_dir=out, resume=resume)
    assert victim.read_bytes() == PRECIOUS and sorted(p.name for p in out.iterdir()) == [LOCK_FILE]


@pytest.mark.parametrize("how", ["symlink", "fifo", "dev", "folder"])
def test_reading_a_file_that_is_not_a_regular_one_is_refused_at_once(tmp_path, how):
    path = tmp_path / "points.jsonl"
    if how == "symlink":
        path.symlink_to(_victim(tmp_path))
    elif how == "fifo":
        os.mkfifo(path)  # a plain open() would wait for a writer for ever
    elif how == "dev":
        path.symlink_to("/dev/zero")  # a plain read() would fill the memory
    else:
        path.mkdir()
    with pytest.raises(NotRegularFile, match=r"points\.jsonl: is a"):
        read_regular(path)
    with pytest.raises(NotRegularFile):
        append_regular(path, "{}\n")
    assert how != "symlink" or (tmp_path / "precious.txt").read_bytes() == PRECIOUS


def test_a_regular_file_reads_and_appends_and_bad_bytes_name_the_line(tmp_path):
    path = tmp_path / "points.jsonl"
    append_regular(path, "{}\n")
    append_regular(path, "{\"a\": 1}\n")
    assert read_text(path) == "{}\n{\"a\": 1}\n"
    path.write_bytes(b"{}\n{\"a\": \"\xff\"}\n")
    with pytest.raises(ValueError, match=r"points\.jsonl: line 2 is not UTF-8 text \(byte 10"):
        read_text(path)
    with pytest.raises(NotRegularFile, match="larger than 4 bytes"):
        read_regular(path, limit=4)
    os.close(open_regular(path))


# ---- run files read back: damaged, foreign, unstamped or not regular (issue 47 item 5) -------------

worker = worker_fixture("run_files")


_READ = ("from workbench.measure.store.folder import read_points, read_record\n"
         "from workbench.measure.store.results import ResultsError\n"
         "try:\n    {call}\nexcept ResultsError as err:\n    print('refused:', err)\n")


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.one_of(st.binary(max_size=200), st.text(max_size=200).map(str.encode),
                      st.lists(st.dictionaries(st.sampled_from(["variant", "batch_size", "concurrency", "error", "x"]),
                                               st.one_of(st.integers(), st.text(max_size=5), st.none()), max_size=5),
                               max_size=4).map(lambda rows: "\n".join(json.dumps(r) for r in rows).encode())),
       which=st.sampled_from(["points", "record"]))
def test_any_bytes_in_a_run_file_read_or_are_refused_naming_the_file(worker, tmp_path, data, which):
    """Whatever a run file holds, reading it gives rows or one ResultsError naming the file (and
    the line where there is one), in bounded memory and time: never another exception."""
    folder = tmp_path / f"run{next(_runs)}"
    folder.mkdir()
    name = "points.jsonl" if which == "points" else "run.json"
    (folder / name).write_bytes(data)
    call = f"read_points({str(folder / name)!r})" if which == "points" else f"read_record({str(folder)!r})"
    rc, out, err = worker.api(_READ.format(call=call))
    assert rc == 0, err  # no exception escaped but ResultsError
    if out.startswith("refused:"):
        assert name in out and len(out.strip().splitlines()) == 1, out


_runs = iter(range(10 ** 9))


@pytest.mark.parametrize("name", ["run.json", "points.jsonl", "results.json"])
@pytest.mark.parametrize("how", ["fifo", "dev", "binary", "cut", "list"])
def test_report_of_a_hostile_run_folder_is_one_line_in_time(worker, tmp_path, name, how):
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "run.json").write_text(json.dumps({"model": "m", "kind": None, "label": "x"}))
    (folder / "points.jsonl").write_text("")
    target = folder / name
    target.unlink(missing_ok=True)
    if how == "fifo":
        os.mkfifo(target)
    elif how == "dev":
        target.symlink_to("/dev/zero")
    elif how == "binary":
        target.write_bytes(b'{"model": "\xff\xfe"}\n')
    elif how == "cut":
        target.write_text('{"model": "m",\n "label": ')
    else:
        target.write_text("[1, 2]\n")
    run = target if name == "results.json" else folder
    rc, _out, err = worker.cli("report", str(run), "--out", str(tmp_path / "report.html"))
    lines = err.strip().splitlines()
    if name == "points.jsonl" and how in ("cut", "list"):
        assert rc in (0, 2) and "Traceback" not in err, err  # a torn last line is dropped, as after a crash
        return
    assert rc == 2 and len(lines) == 1 and lines[0].startswith("workbench report: error: "), err
    assert name in lines[0] and "Traceback" not in err, err
    if how == "cut" and name == "run.json":
        assert "run.json line 2 is not valid JSON" in lines[0]
    if how == "binary" and name != "results.json":
        assert "line 1 is not UTF-8" in lines[0]


def _folder_with(tmp_path, rows):
    from workbench.measure.store.folder import points_text

    out = tmp_path / "run"
    out.mkdir()
    (out / "points.jsonl").write_text(points_text(rows))
    return out


def test_unstamped_points_are_measured_again_never_reused(tmp_path):
    from workbench.measure.sweep.resume import resumed_rows

    stamped = {"variant": "v", "batch_size": 1, "concurrency": 1, "error": None, "model": "m", "config_digest": "d1"}
    unstamped = [{**stamped, "concurrency": 2, "config_digest": None}, {**stamped, "concurrency": 4, "model": None},
                 {k: v for k, v in {**stamped, "concurrency": 8}.items() if k not in ("model", "config_digest")}]
    out = _folder_with(tmp_path, [stamped, *unstamped])
    kept = resumed_rows(out, {"model": "m"}, model="m", different=[], measured={}, digests={"v": "d1"})
    assert [row["concurrency"] for row in kept] == [1]


def test_a_point_of_another_model_json_under_the_same_name_is_refused(tmp_path):
    """The LLM variant's digest covers its model.json: same config, other engine arguments, other digest."""
    from workbench.measure.sweep.resume import resumed_rows
    from workbench.measure.sweep.swept import config_digest

    config = {"name": "llm", "backend": "vllm"}
    ours = config_digest(config, {"1/model.json": '{"model": "/a", "max_num_seqs": 4}'})
    theirs = config_digest(config, {"1/model.json": '{"model": "/b", "max_num_seqs": 4}'})
    assert ours != theirs and config_digest(config) not in (ours, theirs)
    row = {"variant": "v", "batch_size": 1, "concurrency": 1, "error": None, "model": "llm", "config_digest": theirs}
    out = _folder_with(tmp_path, [row])
    with pytest.raises(SweepError, match="the config of variant\\(s\\) v differs"):
        resumed_rows(out, {"model": "llm"}, model="llm", different=[], measured={}, digests={"v": ours})
