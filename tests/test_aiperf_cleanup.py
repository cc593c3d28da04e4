"""benchmarks/_aiperf.py ends an interrupted AIPerf's whole process group without raising itself: a
group gone already (its leader reaped before the interrupt was handled) and a group that ignores
SIGTERM (killed after the grace) both end quietly, so the caller sees the interrupt, not cleanup's
ProcessLookupError. Real processes, each in its own session as AIPerf is started."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from _aiperf import end_group, run_aiperf  # noqa: E402


def test_a_group_gone_already_ends_without_an_error():
    process = subprocess.Popen(["true"], start_new_session=True)
    process.wait()  # reaped: no process has its group id any more (os.killpg would raise ProcessLookupError)
    end_group(process)
    assert process.returncode == 0


def _gone(pid: int, within_s: float = 10.0) -> bool:
    """Whether process ``pid`` ended within ``within_s`` (a zombie has ended: its parent reaps it)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False


@pytest.mark.alone
def test_a_group_that_ignores_sigterm_is_killed_after_the_grace():
    # the leader and a child in its group both ignore SIGTERM (an ignored signal stays ignored in children)
    script = "trap '' TERM; sleep 60 & echo $!; wait"
    process = subprocess.Popen(["sh", "-c", script], start_new_session=True, stdout=subprocess.PIPE, text=True)
    child = int(process.stdout.readline())
    started = time.monotonic()
    end_group(process, grace_s=0.5)
    assert process.returncode == -signal.SIGKILL and time.monotonic() - started < 10
    assert _gone(child)  # killed with its group
    process.stdout.close()


def test_an_interrupted_run_raises_the_interrupt_and_leaves_no_process(tmp_path):
    """Ctrl-C while AIPerf runs: the KeyboardInterrupt reaches the caller, the group is ended."""
    def interrupt(_signum, _frame):
        raise KeyboardInterrupt

    log = tmp_path / "aiperf.log"
    before = signal.signal(signal.SIGUSR1, interrupt)
    timer = threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGUSR1))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            run_aiperf(["sh", "-c", "sleep 60 & echo $!; wait"], log)
    finally:
        timer.cancel()
        signal.signal(signal.SIGUSR1, before)
    assert _gone(int(log.read_text().split()[0]))
