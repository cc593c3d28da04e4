"""No tritonserver or python backend stub outlives the Python process that started it.

Each test runs a real child Python process that starts a real server (from a worker thread that
then ends, as notebook UIs do), loads a numpy model so a stub exists, and reports the pids. The
test then kills something and checks, by the server's unique repository path (other engineers'
servers run at the same time), that nothing of that server is left.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import psutil
import pytest

from test_server import make_repo, processes_using, wait_until

pytestmark = pytest.mark.server

CHILD = textwrap.dedent(
    """
    import gc, json, sys, threading, time
    from workbench.server import TritonServer

    repo, mode = sys.argv[1], sys.argv[2]
    box = {}

    def start():
        server = TritonServer(repo).start()
        server.load("add")
        box["server"] = server

    worker = threading.Thread(target=start)
    worker.start()
    worker.join()  # the starting thread is gone from here on
    server = box.pop("server")
    stubs = [p for p in __import__("psutil").Process(server.pid).children()]
    report = {"server": server.pid, "guard": server._guard.pid, "stubs": [p.pid for p in stubs],
              "shm_prefix": server.shm_prefix, "run_dir": str(server.run_dir)}
    if mode == "drop":
        del server
        gc.collect()
    print(json.dumps(report), flush=True)
    if mode == "exit":
        sys.exit(0)  # no stop(): the interpreter's exit must stop it
    time.sleep(600)
    """
)


def start_child(tmp_path: Path, mode: str = "keep") -> tuple[subprocess.Popen[str], dict, Path]:
    repo = make_repo(tmp_path)
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    child = subprocess.Popen(
        [sys.executable, str(script), str(repo), mode], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    ready, _, _ = select.select([child.stdout], [], [], 120)
    if not ready:
        child.kill()
        child.wait()
        raise AssertionError("child did not start a server within 120 s: " + child.stderr.read())
    line = child.stdout.readline()
    if not line:
        child.wait()
        raise AssertionError("child failed: " + child.stderr.read())
    return child, json.loads(line), repo


def server_processes(repo: Path, child: subprocess.Popen[str]) -> list[psutil.Process]:
    """The server and its stubs (the child's own command line names the repository too)."""
    return [p for p in processes_using(repo) if p.pid != child.pid]


def shm_regions(prefix: str) -> list[str]:
    return [name for name in os.listdir("/dev/shm") if name.startswith(prefix)]


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.fixture
def cleanup():
    """Kill whatever a failed test leaves, by pid (never by name)."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_sigkill_of_the_starting_process_takes_server_and_stubs_down(tmp_path, cleanup):
    child, info, repo = start_child(tmp_path)
    cleanup += [child.pid, info["server"], info["guard"]]
    try:
        # The thread that started the server has ended: the server must still be running
        # (PR_SET_PDEATHSIG alone would have killed it here).
        assert not gone(info["server"]) and info["stubs"]
        assert {p.pid for p in server_processes(repo, child)} == {info["server"], *info["stubs"]}
        assert shm_regions(info["shm_prefix"])
        child.send_signal(signal.SIGKILL)
        child.wait(10)
        assert wait_until(lambda: server_processes(repo, child) == [], timeout=20), server_processes(repo, child)
        assert wait_until(lambda: gone(info["guard"]), timeout=10)
        assert shm_regions(info["shm_prefix"]) == []
    finally:
        child.kill()
        child.wait()


def test_stubs_exit_when_tritonserver_itself_is_sigkilled(tmp_path, cleanup):
    """What the python backend stub does on its own when its server dies abruptly (it checks
    its parent and exits), and the guard, seeing the server gone, finishes the job and leaves."""
    child, info, repo = start_child(tmp_path)
    cleanup += [child.pid, info["server"], info["guard"]]
    try:
        os.kill(info["server"], signal.SIGKILL)
        assert wait_until(lambda: all(gone(pid) for pid in info["stubs"]), timeout=20)
        assert wait_until(lambda: gone(info["guard"]), timeout=10)
        assert wait_until(lambda: server_processes(repo, child) == [], timeout=10), server_processes(repo, child)
        assert shm_regions(info["shm_prefix"]) == []
        assert child.poll() is None  # the owner is untouched
    finally:
        child.kill()
        child.wait()


def test_killing_the_owners_children_with_it_leaves_no_stub(tmp_path, cleanup):
    """What a Ray worker does when its task is cancelled with force or its node is lost: it SIGKILLs
    its direct children, then ends. The guard is none of them, so it still takes the server's group
    (the orphaned stubs) down and removes the shared memory, and says so in its log."""
    child, info, repo = start_child(tmp_path)
    cleanup += [child.pid, info["server"], info["guard"]]
    try:
        direct = psutil.Process(child.pid).children()
        assert info["guard"] not in {p.pid for p in direct}
        for process in direct:
            process.kill()
        child.kill()
        child.wait(10)
        assert wait_until(lambda: server_processes(repo, child) == [], timeout=20), server_processes(repo, child)
        assert wait_until(lambda: gone(info["guard"]), timeout=10)
        assert shm_regions(info["shm_prefix"]) == []
        said = (Path(info["run_dir"]) / "guard.log").read_text()
        assert "guard: server-exited" in said or "guard: owner-gone" in said, said
    finally:
        child.kill()
        child.wait()


def test_terminating_the_guard_takes_the_server_with_it(tmp_path, cleanup):
    child, info, repo = start_child(tmp_path)
    cleanup += [child.pid, info["server"], info["guard"]]
    try:
        os.kill(info["guard"], signal.SIGTERM)
        assert wait_until(lambda: server_processes(repo, child) == [], timeout=20), server_processes(repo, child)
        assert shm_regions(info["shm_prefix"]) == []
    finally:
        child.kill()
        child.wait()


def test_a_dropped_server_object_does_not_leak_its_process(tmp_path, cleanup):
    """A TritonServer nobody references any more cannot be stopped by anyone: it goes away."""
    child, info, repo = start_child(tmp_path, mode="drop")
    cleanup += [child.pid, info["server"], info["guard"]]
    try:
        assert wait_until(lambda: server_processes(repo, child) == [], timeout=20), server_processes(repo, child)
        assert child.poll() is None
    finally:
        child.kill()
        child.wait()


def test_a_normal_interpreter_exit_without_stop_stops_the_server(tmp_path, cleanup):
    child, info, repo = start_child(tmp_path, mode="exit")
    cleanup += [child.pid, info["server"], info["guard"]]
    assert child.wait(60) == 0
    assert wait_until(lambda: server_processes(repo, child) == [], timeout=20), server_processes(repo, child)
    assert not Path(info["run_dir"]).exists()  # stopped by the exit hook itself, not only by the guard
