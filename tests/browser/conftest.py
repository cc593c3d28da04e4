"""Fixtures for the real-browser tier: a JupyterLab server on 127.0.0.1 (token, free port) and
Debian's Chromium driven by Playwright (never a downloaded browser).

The server runs in its own process group; teardown shuts its kernels down through the REST API
(so their own cleanup runs and stops any tritonserver they started), then stops the group.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# What `bash dev.sh lab` passes to Lab (tests/browser/test_notebooks_clean.py holds dev.sh to it)
LAB_CONFIG = "--config=scripts/jupyter_server_config.py"
CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]


def chromium_path() -> str | None:
    explicit = os.environ.get("CHROMIUM")
    if explicit:
        return explicit if Path(explicit).exists() else None
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    return None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Lab:
    def __init__(self, url: str, token: str, process: subprocess.Popen, log: Path, work: Path,
                 command: list[str]) -> None:
        self.url, self.token, self.process, self.log, self.work = url, token, process, log, work
        self.command = command
        self.runs = REPO / "notebooks" / "runs"  # where the tutorials write (git-ignored; the fixture cleans up)
        self.opened: set[str] = set()  # the notebooks' names (stems): their runs folders are this lab's to clean

    def api(self, path: str, method: str = "GET") -> object:
        request = urllib.request.Request(f"{self.url}{path}", method=method,
                                         headers={"Authorization": f"token {self.token}"})
        with urllib.request.urlopen(request, timeout=10) as response:
            body = response.read()
        return json.loads(body) if body else None

    def page_url(self, notebook: str) -> str:
        self.opened.add(Path(notebook).stem)
        return f"{self.url}/lab/tree/{notebook}?token={self.token}"

    def run_all(self, page, notebook: str, timeout_ms: int, *, wait: bool = True) -> None:
        """Open ``notebook`` in ``page``, wait for its kernel and Run All; with ``wait``, return once
        every code cell has run (a number in each prompt, none pending)."""
        page.goto(self.page_url(notebook))
        page.wait_for_selector(".jp-Notebook", timeout=timeout_ms)
        page.wait_for_function("window.jupyterapp && window.jupyterapp.shell.currentWidget"
                               " && window.jupyterapp.shell.currentWidget.sessionContext"
                               " && window.jupyterapp.shell.currentWidget.sessionContext.session"
                               " && window.jupyterapp.shell.currentWidget.sessionContext.session.kernel",
                               timeout=timeout_ms)
        page.evaluate("window.jupyterapp.commands.execute('notebook:run-all-cells')")
        if wait:
            page.wait_for_function("""() => {
                const prompts = [...document.querySelectorAll('.jp-CodeCell .jp-InputArea-prompt')];
                return prompts.length > 0 && prompts.every(p => /\\[\\d+\\]/.test(p.textContent));
            }""", timeout=timeout_ms)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    """Keep each phase's report on the test item, so fixtures can tell whether the test failed."""
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report


@pytest.fixture(scope="module")
def chromium() -> str:
    path = chromium_path()
    if path is None:
        pytest.skip("no Chromium on this machine (apt-get install chromium); the browser tier needs one")
    return path


@pytest.fixture(scope="module")
def lab_root() -> Path:
    """The folder Lab serves (a module overrides it to serve a scratch folder)."""
    return REPO


# What the lab's environment may hold beyond a user's: Jupyter's own folders in a temp dir (this
# machine's Jupyter settings and kernels kept out, the venv's kernelspec found) and PYTHONPATH to the
# checkout (what dev.sh's `pip install -e .` gives). None of them is given to the app.
LAB_ISOLATION = ("JUPYTER_CONFIG_DIR", "JUPYTER_DATA_DIR", "JUPYTER_RUNTIME_DIR", "IPYTHONDIR",
                 "JUPYTERLAB_SETTINGS_DIR", "JUPYTER_PATH", "PYTHONPATH")


def user_environment() -> dict[str, str]:
    """The environment of a user's shell running `bash dev.sh lab`: this one without the
    workbench's variables (ENV_PREFIX: `bash dev.sh test` exports the vLLM environment's Python,
    which dev.sh lab does not), pytest's own, and those tests/conftest.py set for the test session
    (the shared folder's perf_analyzer wrapper: a user's app picks its own engine)."""
    from shared_folder import SET_FOR_THE_TESTS  # tests/shared_folder.py

    from workbench.system import ENV_PREFIX

    return {k: v for k, v in os.environ.items()
            if not k.startswith((ENV_PREFIX, "PYTEST_")) and k not in SET_FOR_THE_TESTS}


def given_beyond_a_user(pid: int) -> dict[str, str]:
    """What the environment of process ``pid`` (Lab, or a kernel it started) holds that a user's
    (`user_environment`) does not, or holds otherwise, leaving out `LAB_ISOLATION` and what Jupyter
    gives every kernel (``JPY_*``)."""
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    env = dict(item.decode(errors="replace").split("=", 1) for item in raw if b"=" in item)
    user = user_environment()
    return {k: v for k, v in env.items()
            if user.get(k) != v and k not in LAB_ISOLATION and not k.startswith("JPY_")}


@pytest.fixture(scope="module")
def lab(tmp_path_factory, chromium, lab_root) -> Lab:
    """JupyterLab started as `bash dev.sh lab` starts it (its --config), serving ``lab_root``, in
    a user's environment (`user_environment`; only `LAB_ISOLATION` added): the app finds the vLLM
    environment, the backends and the runs folder as it does for a user. Tutorials write their
    runs into the checkout's git-ignored notebooks/runs/; the folders a test's runs add there are
    removed at teardown.

    Checkpoints go to the temp dir and autosave is off; a saved tutorial keeps its outputs and git
    sees it stripped (the clean filter dev.sh installs; the config's post-save hook).
    """
    work = tmp_path_factory.mktemp("lab")
    user_settings = {  # no autosave; no news toast that could cover the widgets being clicked
        ("docmanager-extension", "plugin"): {"autosave": False},
        ("apputils-extension", "notification"): {"fetchNews": "false", "checkForUpdates": False},
    }
    for (extension, plugin), values in user_settings.items():
        folder = work / "lab-settings" / "@jupyterlab" / extension
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{plugin}.jupyterlab-settings").write_text(json.dumps(values))
    port, token = _free_port(), secrets.token_hex(16)
    env = user_environment()
    env.update(JUPYTER_CONFIG_DIR=str(work / "config"), JUPYTER_DATA_DIR=str(work / "data"),
               JUPYTER_RUNTIME_DIR=str(work / "runtime"), IPYTHONDIR=str(work / "ipython"),
               JUPYTERLAB_SETTINGS_DIR=str(work / "lab-settings"),
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    # Kernels must find the venv's kernelspec (the data dir above hides the user one only).
    env["JUPYTER_PATH"] = os.pathsep.join(filter(None, [str(Path(sys.prefix) / "share" / "jupyter"),
                                                        env.get("JUPYTER_PATH")]))
    command = [sys.executable, "-m", "jupyter", "lab", LAB_CONFIG, "--no-browser", "--ip=127.0.0.1", f"--port={port}",
               f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={lab_root}",
               "--LabApp.expose_app_in_browser=True", "--LabApp.news_url=",
               "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
               "--ServerApp.port_retries=0", f"--FileCheckpoints.root_dir={work / 'checkpoints'}"]
    if os.getuid() == 0:
        command.append("--allow-root")
    runs = REPO / "notebooks" / "runs"  # Lab.runs
    runs_before = set(runs.glob("*/*"))
    log = work / "lab.log"
    with open(log, "wb") as log_file:
        process = subprocess.Popen(command, env=env, stdout=log_file, stderr=subprocess.STDOUT,
                                   cwd=REPO, start_new_session=True)
    server = Lab(f"http://127.0.0.1:{port}", token, process, log, work, command)
    try:
        deadline = time.monotonic() + 90
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"jupyter lab exited with {process.returncode}:\n{log.read_text()[-3000:]}")
            try:
                server.api("/api/status")
                break
            except (urllib.error.URLError, ConnectionError, OSError):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"jupyter lab did not answer in 90 s:\n{log.read_text()[-3000:]}")
                time.sleep(0.5)
        yield server
    finally:
        _stop_lab(server)
        # only the runs of notebooks this lab opened: nbval runs the tutorials on other workers meanwhile,
        # and their run folders (a served model repository among them) are theirs
        for added in set(runs.glob("*/*")) - runs_before:
            if added.parent.name in server.opened:
                shutil.rmtree(added, ignore_errors=True)


def _stop_lab(server: Lab) -> None:
    try:
        for kernel in server.api("/api/kernels") or []:
            server.api(f"/api/kernels/{kernel['id']}", method="DELETE")
    except (urllib.error.URLError, OSError):
        pass
    for sig, wait in ((signal.SIGTERM, 20), (signal.SIGKILL, 10)):
        try:
            os.killpg(server.process.pid, sig)
        except ProcessLookupError:
            break
        try:
            server.process.wait(wait)
            break
        except subprocess.TimeoutExpired:
            continue


@pytest.fixture(scope="module")
def browser_page(chromium):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_FLAGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            yield page
        finally:
            browser.close()


@pytest.fixture
def page(request, lab, browser_page, tmp_path):
    """The browser page of a test driving Lab; after a failure the screenshot, the page text and
    Lab's log are printed (tests that use ``browser_page`` alone keep their own failure output)."""
    yield browser_page
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        shot = tmp_path / "failure.png"
        try:
            browser_page.screenshot(path=str(shot), full_page=True)
            text = "\n".join(browser_page.locator(".jp-OutputArea-output").all_text_contents())[-4000:]
        except Exception as err:  # the browser itself may be the problem
            text = f"(page unavailable: {err})"
        print(f"screenshot: {shot}\n--- page text ---\n{text}\n--- lab log ---\n{lab.log.read_text()[-4000:]}")
