"""The foundation path end to end, as a user runs it: `workbench quickstart` in a fresh folder.

A real trace, a real model directory, a real tritonserver, concurrent requests of batch sizes 1..8
with dynamic batching on, compared with eager outputs; then the overwrite guard and the backup.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.server


def _workbench(*args, cwd):
    return subprocess.run([sys.executable, "-m", "workbench", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600)


def _servers_using(path: Path) -> list[str]:
    """Command lines of live processes that mention ``path`` (our server and its stubs)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if str(path) in cmd and ("tritonserver" in cmd or "triton_python_backend_stub" in cmd):
            found.append(cmd)
    return found


def test_quickstart_cli_serves_and_matches_then_guards_the_directory(tmp_path):
    work = tmp_path / "qs"
    first = _workbench("quickstart", "--workdir", str(work), cwd=tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "served outputs match eager outputs for 'add_sub': 8 concurrent requests, batch sizes [1, 2, 3, 4, 5, 6, 7, 8]" in first.stdout
    model_dir = work / "model_repository" / "add_sub"
    assert (model_dir / "config.pbtxt").is_file() and (model_dir / "1" / "model.py").is_file()
    assert (work / "tritonserver.log").read_text().count("successfully loaded 'add_sub'") == 1
    assert _servers_using(work) == []

    # a second run must not touch the user's directory
    (model_dir / "config.pbtxt").write_text((model_dir / "config.pbtxt").read_text() + "# my edit\n")
    second = _workbench("quickstart", "--workdir", str(work), cwd=tmp_path)
    assert second.returncode == 2
    assert "already exists; nothing was written" in second.stderr and "Traceback" not in second.stderr
    assert (model_dir / "config.pbtxt").read_text().endswith("# my edit\n")

    # --force replaces it and keeps the edited one as a backup
    third = _workbench("quickstart", "--workdir", str(work), "--force", cwd=tmp_path)
    assert third.returncode == 0, third.stdout + third.stderr
    assert sorted(p.name for p in (work / "model_repository").iterdir()) == ["add_sub"]
    backups = sorted((work / "model_repository.backups").glob("add_sub.bak-*"))
    assert len(backups) == 1 and (backups[0] / "config.pbtxt").read_text().endswith("# my edit\n")
    assert "previous directory kept as" in third.stdout
    assert _servers_using(work) == []
