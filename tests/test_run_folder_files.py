"""Every file the workbench reads or writes in a run folder or model directory is a regular file of
its own (issue 47, H1 and item 5): a ``.sweep.lock`` that is a symlink, a dangling symlink, a hard
link, a FIFO or a /dev link is refused in one line and whatever it points at stays untouched, for
tensor and LLM sweeps alike, from the command line and the Python call."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

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
