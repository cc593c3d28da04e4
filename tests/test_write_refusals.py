"""Writes that replace a directory (issue 17, point 4): every path in the new config stays valid
after --force, and file-system refusals (not a directory, another device) exit with status 2 and a
message, leaving nothing behind. Real files; the cross-device case on this machine's /dev/shm
mount (a tmpfs whose parent, /dev, is another file system)."""

from __future__ import annotations

import argparse
import os
import shutil
import uuid
from pathlib import Path

import pytest

from workbench.cli import generate as generate_cli
from workbench.generate.config import parameters_of, read_config


def run_generate(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="workbench", allow_abbrev=False)
    generate_cli.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["generate", *argv])
    return args.func(args)


def _flags(compiled: str, dest: Path) -> list[str]:
    return ["--target", "cpu", "--compiled_model", compiled, "--triton_input", "INPUT__0,FP32,-1x4",
            "--triton_output", "OUTPUT__0,FP32,-1x4", "--triton_model_dir", str(dest)]


def test_force_keeps_an_absolute_path_inside_the_directory_valid(tmp_path):
    artifact = tmp_path / "model.pt"
    artifact.write_bytes(b"weights")
    dest = tmp_path / "repo" / "m"
    assert run_generate(_flags(str(artifact), dest) + ["--copy-compiled-model"]) == 0
    inside = dest / "1" / "model.pt"
    assert inside.read_bytes() == b"weights"
    # the config now names the model by an absolute path inside the directory it replaces
    assert run_generate(_flags(str(inside), dest) + ["--force"]) == 0
    named = Path(parameters_of(read_config(dest))["COMPILED_MODEL"])
    assert named == inside and named.read_bytes() == b"weights"  # carried into the new directory
    backups = list((tmp_path / "repo.backups").iterdir())
    assert len(backups) == 1 and (backups[0] / "1" / "model.pt").read_bytes() == b"weights"
    assert run_generate(_flags(str(inside), dest) + ["--force"]) == 0  # and again: still valid
    assert Path(parameters_of(read_config(dest))["COMPILED_MODEL"]).read_bytes() == b"weights"


def test_a_path_through_a_file_exits_2_and_creates_nothing(tmp_path, capsys):
    (tmp_path / "afile").write_text("x")
    dest = tmp_path / "afile" / "repo" / "m"
    assert run_generate(_flags("/opt/m.pt", dest) + ["--for-other-machine"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"cannot write {dest}: Not a directory" in err[0] and "nothing was written" in err[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]
    (tmp_path / "target").write_text("x")  # the model directory itself is a file
    assert run_generate(_flags("/opt/m.pt", tmp_path / "target") + ["--for-other-machine", "--force"]) == 2
    assert "exists and is not a directory" in capsys.readouterr().err


def test_new_folders_are_removed_when_the_write_fails(tmp_path, capsys):
    dest = tmp_path / "new" / "deeper" / "m"
    assert run_generate(_flags("/opt/m.pt", dest) + ["--for-other-machine", "--copy-compiled-model"]) == 2
    assert list(tmp_path.iterdir()) == []  # the check refused it before any folder was made
    source = tmp_path / "model.pt"
    source.mkdir()
    (source / "unreadable").symlink_to(tmp_path / "missing")  # copytree fails on the dangling link
    assert run_generate(_flags(str(source), dest) + ["--copy-compiled-model"]) == 2
    assert "cannot write" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.pt"]


@pytest.mark.skipif(not Path("/dev/shm").is_dir() or os.stat("/dev/shm").st_dev == os.stat("/dev").st_dev,
                    reason="needs /dev/shm on its own file system")
def test_a_backup_on_another_device_exits_2_and_keeps_the_directory(tmp_path, capsys):
    backups = Path("/dev/shm.backups")
    existed = backups.exists()
    dest = Path("/dev/shm") / f"wb-refusal-{uuid.uuid4().hex[:8]}"
    try:
        assert run_generate(_flags("/opt/m.pt", dest) + ["--for-other-machine"]) == 0
        before = {p.relative_to(dest): p.read_bytes() for p in dest.rglob("*") if p.is_file()}
        assert run_generate(_flags("/opt/other.pt", dest) + ["--for-other-machine", "--force"]) == 2
        err = capsys.readouterr().err
        assert "Invalid cross-device link" in err and "the backup folder is on another device" in err
        assert {p.relative_to(dest): p.read_bytes() for p in dest.rglob("*") if p.is_file()} == before
        assert not any(p.name.startswith(f".{dest.name}.tmp-") for p in dest.parent.iterdir())
        assert backups.exists() == existed  # no empty backup folder left in /dev
    finally:
        shutil.rmtree(dest, ignore_errors=True)
        if not existed and backups.is_dir() and not any(backups.iterdir()):
            backups.rmdir()
