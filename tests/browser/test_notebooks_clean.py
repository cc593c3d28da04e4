"""Using the tutorials in Lab leaves the repository as git has it (issue 18) and the reader's file
as the reader saved it (issue 43, #11): git's clean filter (scripts/strip_notebooks.py, which
`bash dev.sh lab|test` installs) strips a tutorial where git reads it, and Lab started as dev.sh
starts it (its --config) refreshes git's index after a save.

For real: the quickstart is run with Run All in Chromium and saved with Lab's own save command;
every tutorial is saved through the server's contents API with the outputs, widget state, counts
and timings a run leaves. After each save the file holds the outputs and ``git status`` is what it
was. Each file is put back as it was afterwards (and the index told), so a run leaves no dirty
checkout.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.browser, pytest.mark.timeout(600)]

NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))
MARK = "# NBVAL_CHECK_OUTPUT"
WAIT_MS = 300_000


def test_dev_sh_lab_starts_lab_with_the_config_the_tests_use(lab):
    dev = (REPO / "dev.sh").read_text()
    lab_line = next(line for line in dev.splitlines() if "jupyter\" lab" in line)
    config = next(arg for arg in lab.command if arg.startswith("--config="))
    assert config in lab_line
    settings = (REPO / config.removeprefix("--config=")).read_text()
    assert "FileContentsManager.post_save_hook" in settings and "pre_save_hook" not in settings


@pytest.fixture(scope="module", autouse=True)
def git_filter() -> None:
    """The clean filter the README's commands install (dev.sh: strip_notebooks.py --install)."""
    found = subprocess.run(["git", "config", "filter.tutorials.clean"], cwd=REPO, capture_output=True, text=True, check=False)
    assert found.stdout.strip(), "no git filter 'tutorials' in this checkout: bash dev.sh lab (or test) installs it"


def _put_back(path: Path, before: bytes) -> None:
    """``path`` as it was, and git's index told its size again (strip_notebooks.refresh_index)."""
    path.write_bytes(before)
    subprocess.run(["git", "update-index", "--", str(path)], cwd=REPO, check=True)


def _git_status(path: Path) -> str:
    return subprocess.run(["git", "status", "--porcelain", "--", str(path)], cwd=REPO, capture_output=True,
                          text=True, check=True).stdout


def _put(lab, api_path: str, content: dict) -> None:
    body = json.dumps({"type": "notebook", "format": "json", "content": content}).encode()
    request = urllib.request.Request(f"{lab.url}/api/contents/{api_path}", data=body, method="PUT",
                                     headers={"Authorization": f"token {lab.token}",
                                              "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        assert response.status in (200, 201)


def _as_run_leaves_it(content: dict) -> dict:
    """The notebook as Run All leaves it: every code cell counted and with outputs (stream, a
    widget view, a result, an image), timings in the metadata, the widget state saved; checked
    cells reproduce their stored output (what nbval holds them to)."""
    count = 0
    for cell in content["cells"]:
        if cell["cell_type"] != "code":
            continue
        count += 1
        cell["execution_count"] = count
        cell["metadata"]["execution"] = {"iopub.execute_input": "2026-12-01T16:00:00.000000Z"}
        cell["metadata"]["ExecuteTime"] = {"end_time": "2026-12-01T16:00:01.000Z"}
        if "".join(cell["source"]).lstrip().startswith(MARK):
            continue
        cell["outputs"] = [
            {"output_type": "stream", "name": "stdout", "text": "a run's output\n"},
            {"output_type": "display_data", "metadata": {},
             "data": {"application/vnd.jupyter.widget-view+json": {"model_id": "ab12", "version_major": 2,
                                                                   "version_minor": 0},
                      "text/plain": "Workbench(...)"}},
            {"output_type": "execute_result", "execution_count": count, "metadata": {},
             "data": {"text/plain": "42", "image/png": "iVBORw0KGgo="}},
        ]
    content["metadata"]["widgets"] = {"application/vnd.jupyter.widget-state+json": {
        "state": {"ab12": {"model_name": "VBoxModel"}}, "version_major": 2, "version_minor": 0}}
    content["metadata"]["language_info"]["version"] = "3.99.0"  # another machine's kernel
    return content


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_saving_a_run_tutorial_through_lab_leaves_it_as_git_has_it(lab, path):
    before, status = path.read_bytes(), _git_status(path)
    api_path = path.relative_to(REPO).as_posix()
    try:
        _put(lab, api_path, _as_run_leaves_it(json.loads(before)))
        assert "a run's output" in path.read_text(), f"saving {path.name} in Lab dropped the reader's outputs"
        assert _git_status(path) == status
    finally:
        _put_back(path, before)


def test_a_notebook_outside_the_tutorials_is_saved_with_its_outputs(lab):
    scratch = REPO / "build" / "scratch-save-test.ipynb"  # build/ is ignored by git
    scratch.parent.mkdir(exist_ok=True)
    try:
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1 + 1", execution_count=1, outputs=[
            nbformat.v4.new_output("execute_result", {"text/plain": "2"}, execution_count=1)])])
        _put(lab, scratch.relative_to(REPO).as_posix(), json.loads(nbformat.writes(nb)))
        saved = nbformat.read(scratch, as_version=4)
        assert saved.cells[0].outputs[0]["data"]["text/plain"] == "2"  # a user's own work is kept whole
    finally:
        scratch.unlink(missing_ok=True)


def test_run_all_and_save_in_the_browser_leaves_the_quickstart_as_git_has_it(lab, browser_page):
    page, path = browser_page, REPO / "notebooks" / "01-quickstart.ipynb"
    before, status = path.read_bytes(), _git_status(path)
    errors: list[str] = []
    page.on("pageerror", lambda err: errors.append(str(err)))
    try:
        lab.run_all(page, "notebooks/01-quickstart.ipynb", WAIT_MS)
        outputs = page.locator(".jp-OutputArea-output").count()
        assert outputs > 3  # the run left outputs in the page, which the saved file keeps
        saved_at = path.stat().st_mtime_ns
        page.evaluate("window.jupyterapp.commands.execute('docmanager:save')")
        deadline = time.monotonic() + 60
        while path.stat().st_mtime_ns == saved_at:
            assert time.monotonic() < deadline, "Lab did not save the notebook in 60 s"
            time.sleep(0.2)
        time.sleep(0.5)  # the write is atomic, but let a slow box finish renaming
        saved = nbformat.read(path, as_version=4)
        assert sum(len(c.get("outputs", [])) for c in saved.cells) > 3  # the reader's file keeps them
        assert _git_status(path) == status
        assert subprocess.run(["git", "diff", "--quiet", "--", str(path)], cwd=REPO, check=False).returncode == 0
        assert page.locator(".jp-OutputArea-output").count() == outputs  # the open notebook keeps them
        assert not errors, errors
    finally:
        _put_back(path, before)


# Whether the notebook in view has changes Lab would save, once its kernel has started and Lab has
# written the kernel's facts (kernelspec, language_info) into the notebook's metadata.
_OPEN_AND_SETTLED = """path => {
    const panel = window.jupyterapp && window.jupyterapp.shell.currentWidget;
    if (!panel || !panel.context || panel.context.path !== path || !panel.sessionContext) return false;
    const kernel = panel.sessionContext.session && panel.sessionContext.session.kernel;
    return kernel && kernel.status === 'idle' && panel.model.getMetadata('language_info')
        && panel.model.getMetadata('language_info').version ? true : false;
}"""
_DIRTY = """() => {
    const panel = window.jupyterapp.shell.currentWidget;
    return {dirty: panel.model.dirty, kernelspec: panel.model.getMetadata('kernelspec'),
            language_info: panel.model.getMetadata('language_info')};
}"""


def test_every_tutorial_opens_with_nothing_to_save(lab, browser_page):
    """Issue 31 #13: the tutorials opened marked unsaved (a dot on the tab, a "save?" on close)
    before anything was touched: Lab writes the running kernel's kernelspec and language_info into
    the notebook as it opens, and what git stored differed (display name "Python 3", a bare
    language_info), so each one was an edit. Opened, kernel started, nothing is unsaved."""
    page, dirty = browser_page, {}
    for path in NOTEBOOKS:
        api_path = path.relative_to(REPO).as_posix()
        page.goto(lab.page_url(api_path) + "&reset")  # this notebook alone (no restored tabs)
        page.wait_for_function(_OPEN_AND_SETTLED, arg=api_path, timeout=120_000)
        page.wait_for_timeout(1000)  # Lab's metadata updates land after the kernel's info reply
        state = page.evaluate(_DIRTY)
        if state["dirty"]:
            dirty[path.name] = state
        for session in lab.api("/api/sessions") or []:  # one kernel at a time on a small machine
            lab.api(f"/api/sessions/{session['id']}", method="DELETE")
    assert dirty == {}
