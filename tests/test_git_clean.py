"""The README's `Workbench()` recipe in a new notebook leaves git clean (issue 31, defect 10): every
folder the app writes by default, from notebooks/ and from the repository root, is ignored."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from workbench.generate.repository import backup_folder
from workbench.ui import Workbench

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(), reason="needs git and a checkout")
@pytest.mark.parametrize("where", ["notebooks", "."])
def test_what_workbench_writes_by_default_is_ignored_by_git(where, monkeypatch):
    monkeypatch.chdir(ROOT / where)
    app = Workbench()
    written = [Path(app.state.repository), backup_folder(Path(app.state.repository) / "a_model"),
               Path(app["model"].controls["artifacts_dir"].value), Path(app["sweep"].controls["runs_dir"].value),
               Path(app["results"].controls["runs_dir"].value)]
    for folder in written:
        probe = (ROOT / where / folder / "x" / "file.txt").resolve().relative_to(ROOT)
        ignored = subprocess.run(["git", "check-ignore", "--no-index", "-q", str(probe)], cwd=ROOT)
        assert ignored.returncode == 0, f"{probe} would show in git status after Workbench() in {where}/"
