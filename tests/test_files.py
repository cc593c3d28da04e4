"""One atomic write for every file the workbench rewrites (issue 29): whole or not at all, and with
the permissions a plain write would give (a run record is meant to be shared)."""

from __future__ import annotations

import os
import stat

import pytest

from workbench.files import atomic_write


def _mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_new_file_gets_the_umasks_mode_and_an_old_one_keeps_its_own(tmp_path):
    old = os.umask(0o022)
    try:
        atomic_write(tmp_path / "new.json", "{}\n")
        assert _mode(tmp_path / "new.json") == 0o644 and (tmp_path / "new.json").read_text() == "{}\n"
        kept = tmp_path / "kept.json"
        kept.write_text("old")
        kept.chmod(0o640)
        atomic_write(kept, b"new")
        assert _mode(kept) == 0o640 and kept.read_bytes() == b"new"
    finally:
        os.umask(old)


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "run.json"
    path.write_text("whole")
    with pytest.raises(TypeError):
        atomic_write(path, 12345)  # not text or bytes: fails inside the write
    assert path.read_text() == "whole" and sorted(p.name for p in tmp_path.iterdir()) == ["run.json"]
