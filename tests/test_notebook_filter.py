"""The tutorials' output rule lives in git, not in the reader's file (issue 43, #11: saved tutorials
reopened empty): scripts/strip_notebooks.py is the clean filter dev.sh sets up (``--install``,
.gitattributes), built on nbstripout.

For real, in a scratch git repository holding the repository's filter files and a tutorial: the
notebook as Run All leaves it is saved, the file on disk keeps every output, and git sees the
notebook as committed (``git diff`` through the filter, ``git status`` once Lab's post-save hook
refreshed the index); a checked cell whose fact really changed shows, and a commit stores the
outputs stripped but for the checked cells.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
MARK = "# NBVAL_CHECK_OUTPUT"
TUTORIAL = "notebooks/07-compare-runs.ipynb"
FILES = [".gitattributes", "scripts/strip_notebooks.py", "scripts/jupyter_server_config.py",
         "tests/nbval_sanitize.cfg", TUTORIAL]

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True).stdout


@pytest.fixture
def repo(tmp_path) -> Path:
    """A git repository with the filter's files and one tutorial committed, the filter installed
    as dev.sh installs it."""
    for name in FILES:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ROOT / name, tmp_path / name)
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@example.com", "add", ".")
    subprocess.run([sys.executable, "scripts/strip_notebooks.py", "--install"], cwd=tmp_path, check=True)
    _git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qm", "tutorial")
    return tmp_path


def _as_run_all_leaves_it(path: Path, checked_text: str | None = None) -> None:
    """Counts, timings, outputs (a stream, an image, a widget view) and widget state in every code
    cell; checked cells keep their stored output unless ``checked_text`` replaces it."""
    nb = nbformat.read(path, as_version=4)
    for count, cell in enumerate((c for c in nb.cells if c.cell_type == "code"), start=5):
        cell.execution_count = count
        cell.metadata["execution"] = {"iopub.execute_input": "2026-12-01T16:00:00.000000Z"}
        if cell.source.lstrip().startswith(MARK):
            if checked_text is not None:
                cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=checked_text)]
            continue
        cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="a reader's output\n"),
                        nbformat.v4.new_output("display_data", {"image/png": "iVBORw0KGgo=", "text/plain": "<Figure>"}),
                        nbformat.v4.new_output("display_data", {"application/vnd.jupyter.widget-view+json": {
                            "model_id": "ab12", "version_major": 2, "version_minor": 0}, "text/plain": "Workbench"})]
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {}, "version_major": 2,
                                                                           "version_minor": 0}}
    nb.metadata["language_info"]["version"] = "3.99.0"  # another machine's kernel
    nbformat.write(nb, path)


def _rule(repo: Path):
    """scripts/strip_notebooks.py of ``repo``, imported."""
    spec = importlib.util.spec_from_file_location(f"strip_notebooks_{repo.name}", repo / "scripts" / "strip_notebooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _saved_in_lab(repo: Path) -> None:
    """What Lab started with dev.sh's --config runs after a save: its post-save hook."""
    config = (repo / "scripts" / "jupyter_server_config.py").read_text()
    assert "FileContentsManager.post_save_hook" in config and "pre_save_hook" not in config
    _rule(repo).post_save_hook({"type": "notebook"}, str(repo / TUTORIAL), None)


def test_the_committed_tutorials_are_what_the_filter_stores():
    """Each tutorial in the repository is a fixed point of the clean filter."""
    rule = _rule(ROOT)
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        text = path.read_text()
        assert rule.clean(text, path.relative_to(ROOT).as_posix()) == text, f"{path.name} is not stored as the filter stores it"


def test_the_filter_as_git_runs_it_stores_the_same_without_jsonschemas_iri_checker():
    """git runs the filter once per tutorial it reads; importing jsonschema's IRI checker cost 1.4 of
    its 1.8 s. Run as git runs it, it imports jsonschema without lark (that checker's parser
    library) and stores what the module's clean does."""
    path = ROOT / TUTORIAL
    done = subprocess.run([sys.executable, "-X", "importtime", "scripts/strip_notebooks.py", "--clean", TUTORIAL],
                          cwd=ROOT, input=path.read_text(), capture_output=True, text=True, check=True)
    imported = {line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    assert "jsonschema" in imported and "lark" not in imported  # rfc3987_syntax's parser library
    assert done.stdout == _rule(ROOT).clean(path.read_text(), TUTORIAL)


def test_dev_sh_installs_the_filter_and_gitattributes_names_it():
    dev = (ROOT / "dev.sh").read_text()
    assert "scripts/strip_notebooks.py --install" in dev
    assert "notebooks/*.ipynb filter=tutorials" in (ROOT / ".gitattributes").read_text()


def test_run_all_and_save_keeps_the_outputs_on_disk_and_git_clean(repo):
    path = repo / TUTORIAL
    _as_run_all_leaves_it(path)
    _saved_in_lab(repo)
    on_disk = nbformat.read(path, as_version=4)
    assert sum("a reader's output" in str(c.get("outputs")) for c in on_disk.cells) >= 3  # the reader's file
    assert _git(repo, "diff", "--", TUTORIAL) == ""
    assert _git(repo, "status", "--porcelain") == ""


def test_a_changed_checked_fact_shows_and_a_commit_strips_the_rest(repo):
    path = repo / TUTORIAL
    _as_run_all_leaves_it(path, checked_text="a different fact\n")
    _saved_in_lab(repo)
    assert _git(repo, "status", "--porcelain") == f" M {TUTORIAL}\n"
    added = [line[1:].strip() for line in _git(repo, "diff", "--", TUTORIAL).splitlines()
             if line.startswith("+") and not line.startswith("+++")]
    assert added == ['"a different fact\\n"'], added  # the fact, and no reader's output
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qam", "fact")
    stored = nbformat.reads(_git(repo, "show", f"HEAD:{TUTORIAL}"), as_version=4)
    kept = [c for c in stored.cells if c.cell_type == "code" and c.outputs]
    assert kept and all(c.source.lstrip().startswith(MARK) and c.execution_count == 1 for c in kept)
    assert "widgets" not in stored.metadata and stored.metadata["language_info"]["version"] != "3.99.0"
    assert all(not c.metadata.get("execution") for c in stored.cells)
