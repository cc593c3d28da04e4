"""Where the app, notebook 09 and the tests find the vLLM environment and Triton's vLLM backend
(workbench/server/vllm_env.py), and what each says when a part is missing, in words that name the
README's set-up (issue 43: the app said "give TritonServer(vllm_backend=...)" and, once told the
backend, failed with "No module named 'vllm'", while notebook 09 served the same model).

Real files and processes: the checkout's environment is pointed at temp folders, the set-up
script's lock is held by the real ``flock`` command, the real set-up script answers ``--ready``,
and the server for a vLLM model is made (not started) from the real vLLM environment where the
machine has one.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from workbench.server import vllm_env
from workbench.server.errors import ServerError
from workbench.server.vllm_backend import ENV_BACKEND, ENV_PYTHON, serving_here

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def checkout(tmp_path, monkeypatch) -> Path:
    """The checkout's vLLM environment, lock and log at temp paths, nothing named by a variable."""
    for name in (ENV_PYTHON, ENV_BACKEND, vllm_env.SHARED_ENV):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(vllm_env, "VLLM_VENV", tmp_path / ".venv-vllm")
    monkeypatch.setattr(vllm_env, "SETUP_LOCK", tmp_path / ".venv-vllm.lock")
    monkeypatch.setattr(vllm_env, "SETUP_LOG", tmp_path / ".venv-vllm.log")
    return tmp_path


def _venv(root: Path, *, stamped: bool) -> Path:
    """A folder shaped like a vLLM environment: bin/python (this interpreter), the set-up stamp."""
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "python").symlink_to(sys.executable)
    if stamped:
        (root / vllm_env.SETUP_STAMP).write_text("pins\n")
    return root / "bin" / "python"


def test_without_the_environment_the_app_says_which_part_and_how_dev_sh_lab_makes_it(checkout):
    here = vllm_env.vllm_here()
    assert not here.ready and here.python is None
    assert here.reason.startswith(f"the vLLM environment is not set up ({checkout / '.venv-vllm'} is absent")
    assert "`bash dev.sh lab` sets it up in the background" in here.reason
    (checkout / "repo").mkdir()
    with pytest.raises(ServerError, match="the vLLM environment is not set up"):
        vllm_env.server_for_vllm(checkout / "repo")
    assert serving_here() == f"not servable here: {here.reason}"  # the preview's words
    _venv(checkout / ".venv-vllm", stamped=False)  # made, but the set-up did not finish
    (checkout / ".venv-vllm.log").write_text("ERROR: no matching distribution\n")
    reason = vllm_env.vllm_here().reason
    assert "is absent or incomplete" in reason and f"the last attempt's log: {checkout / '.venv-vllm.log'}" in reason


@pytest.mark.skipif(shutil.which("flock") is None, reason="needs util-linux's flock")
def test_while_dev_sh_sets_it_up_the_app_says_so(checkout):
    lock = checkout / ".venv-vllm.lock"
    holder = subprocess.Popen(["flock", str(lock), "sleep", "30"], start_new_session=True)  # its sleep holds it too
    try:
        deadline = time.monotonic() + 20
        while not vllm_env._setting_up():
            assert time.monotonic() < deadline, "flock did not take the lock"
            time.sleep(0.1)
        assert vllm_env.vllm_here().reason.startswith("the vLLM environment is being set up (.venv-vllm/")
    finally:
        os.killpg(holder.pid, signal.SIGKILL)
        holder.wait()
    assert not vllm_env._setting_up()


def test_a_set_up_environment_without_the_shared_folder_names_the_folder(checkout, monkeypatch):
    python = _venv(checkout / ".venv-vllm", stamped=True)
    monkeypatch.setenv(vllm_env.SHARED_ENV, str(checkout / "no-shared"))
    here = vllm_env.vllm_here()
    assert here.python == python.absolute() and here.backend_dir is None
    assert f"{checkout / 'no-shared' / 'tools' / 'vllm_backend_here.sh'} is absent" in here.reason
    assert "put it beside the checkout as ../shared" in here.reason


def test_an_assembled_backend_is_found_without_running_the_script_again(checkout, monkeypatch):
    python = _venv(checkout / ".venv-vllm", stamped=True)
    shared = checkout / "shared"
    (shared / "tools").mkdir(parents=True)
    (shared / "tools" / "vllm_backend_here.sh").write_text("echo 'must not run' >&2; exit 3\n")
    monkeypatch.setenv(vllm_env.SHARED_ENV, str(shared))
    assert "must not run" in vllm_env.vllm_here().reason  # not assembled yet: the script ran and failed
    assert vllm_env.vllm_here(assemble=False).backend_dir == checkout / ".venv-vllm" / vllm_env.BACKEND_FOLDER
    built = checkout / ".venv-vllm" / vllm_env.BACKEND_FOLDER
    built.mkdir()
    (built / ".complete").write_text("")
    assert vllm_env.vllm_here() == vllm_env.VllmHere(python.absolute(), built)


def test_the_set_up_script_answers_ready_without_setting_anything_up(tmp_path):
    venv = tmp_path / "venv"
    done = subprocess.run(["bash", str(ROOT / "scripts" / "vllm_env.sh"), "--ready", str(venv)], capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 1 and not venv.exists()
    dev = (ROOT / "dev.sh").read_text()
    assert "nohup bash scripts/vllm_env.sh >.venv-vllm.log" in dev  # dev.sh lab: in the background


def test_a_second_checkout_links_the_shared_environment_at_once(vllm_python, tmp_path):
    """The set-up script keeps one environment per pin set in the user's cache and links each
    checkout's .venv-vllm to it: a new clone (a CI run's) is set up in a moment, not two minutes.
    Run where this session's vLLM environment is such a shared one (a clone `bash dev.sh test` set
    up), on a second checkout that has none: it links it, installs nothing, and ``--ready`` says so."""
    shared = vllm_python.parent.parent.resolve()  # the folder, not the interpreter bin/python links to
    if not shared.parent.name == "vllm-env" or os.environ.get("WORKBENCH_VLLM_VENV"):
        pytest.skip(f"this session's vLLM environment ({shared}) is not a shared one (a .venv-vllm folder "
                    "set up in the checkout before environments were shared)")
    checkout = tmp_path / "clone"
    (checkout / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "vllm_env.sh", checkout / "scripts")
    env = {k: v for k, v in os.environ.items() if k != "WORKBENCH_VLLM_VENV"}
    env["XDG_CACHE_HOME"] = str(shared.parent.parent.parent)  # as this session's set-up had it
    started = time.monotonic()
    done = subprocess.run(["bash", str(checkout / "scripts" / "vllm_env.sh")], capture_output=True, text=True,
                          timeout=60, check=False, env=env)
    took = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    link = checkout / ".venv-vllm"
    assert link.is_symlink() and link.resolve() == shared.resolve()
    assert Path(done.stdout.strip()) == shared / "bin" / "python" and took < 10, (done.stdout, took)
    assert "setting up" not in done.stderr  # nothing installed
    ready = subprocess.run(["bash", str(checkout / "scripts" / "vllm_env.sh"), "--ready"], capture_output=True,
                           text=True, timeout=60, check=False, env=env)
    assert ready.returncode == 0 and ready.stdout == done.stdout


def test_the_apps_server_for_a_vllm_model_is_the_one_notebook_09_starts(vllm_python, vllm_backend_dir, monkeypatch,
                                                                       tmp_path):
    """With the real vLLM environment named as dev.sh test names it, the server the app makes
    (not started) serves vLLM models from that environment and the backend assembled in it."""
    monkeypatch.setenv(ENV_PYTHON, str(vllm_python))
    server = vllm_env.server_for_vllm(tmp_path)
    assert server.vllm.backend is not None and server.vllm.backend.python == Path(vllm_python).absolute()
    assert server.vllm.backend.backend_dir == vllm_backend_dir.resolve()
    assert server.vllm.refusals() == []
    assert serving_here().startswith(f"served here by Triton's vLLM backend at {vllm_backend_dir}")


def test_the_server_tab_names_the_missing_part_for_a_vllm_model_and_starts_nothing(checkout):
    """The app's words, beside its start button: which part is missing and the command that makes it."""
    import html

    from workbench.ui import Workbench

    app = Workbench(checkout / "model_repository")
    app["settings"].controls["name"].value = "tiny_llm"
    model_dir = checkout / "model_repository" / "tiny_llm"
    model_dir.mkdir(parents=True)
    (model_dir / "config.pbtxt").write_text('name: "tiny_llm"\nbackend: "vllm"\n')
    panel = app["server"]
    panel.start()
    shown = html.unescape(panel.controls["error"].value)
    assert "cannot start a server for the vLLM model tiny_llm: the vLLM environment is not set up" in shown
    assert "`bash dev.sh lab` sets it up in the background" in shown
    assert panel.server is None or not panel.server.running
