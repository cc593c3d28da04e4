"""A Ray task's node-local folder outlives a worker killed mid-variant: the next task on the node
removes it, and ends the server still running from it (its guard gone with the worker, as when the
worker dies between starting the server and the guard). No Ray needed: the folder rule is the node's."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

import pytest

from workbench.measure.cluster.ray_task import WORK_PREFIX, remove_work_folders_of
from workbench.server import TritonServer


def _gone_pid() -> int:
    """The pid of a process that has ended (a folder named by it is a killed worker's)."""
    probe = subprocess.Popen(["true"])
    probe.wait()
    return probe.pid


@pytest.mark.server
def test_a_killed_tasks_server_is_ended_and_its_folder_removed_by_the_next_task():
    folder = Path(tempfile.mkdtemp(prefix=f"{WORK_PREFIX}{_gone_pid()}-", dir=tempfile.gettempdir()))
    (folder / "repo").mkdir()
    server = TritonServer(folder / "repo", run_parent=folder).start()
    try:
        guard = server._guard.pid
        assert guard is not None
        os.kill(guard, signal.SIGKILL)  # the guard gone with its worker
        assert server._process.poll() is None  # nothing ends the server now but the next task
        assert remove_work_folders_of([], timeout_s=0.0) == []  # what a task's start (and a cancel) runs
        server._process.wait(timeout=15)  # ended, its group with it
        assert not folder.exists()
    finally:
        server.stop()
        shutil.rmtree(folder, ignore_errors=True)
