"""Run a compile in a child process of its own: output streamed to a log, cancel kills it all.

Compilers (neuronx-cc, neuron-cc, TensorFlow's) run for minutes, start processes of their own and
may hang; a notebook must stay responsive and cancel must really stop them. Each compile runs in
a child with its own process group, its stdout/stderr go to a file that is streamed line by line
to the caller's ``log``, and cancel (or an error in the caller) kills the whole group.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from workbench.compiler.cpu import CompileError
from workbench.tasks import check_cancel

__all__ = ["run_isolated", "run_command_isolated", "exit_with_parent"]

Log = Callable[[str], None]


def run_isolated(
    work: Callable[[], None],
    *,
    log: Log | None = None,
    cancel: Any = None,
    on_tick: Callable[[float], None] | None = None,
    poll_seconds: float = 0.2,
    kill_grace_seconds: float = 5.0,
) -> None:
    """Run ``work()`` in a forked child with its own process group and its output streamed to ``log``.

    Cancel (or any error in the caller) kills the child's whole group, so a compiler the SDK
    started in a subprocess goes with it. A failure in the child is raised here as CompileError
    carrying the child's traceback.
    """
    with tempfile.TemporaryDirectory(prefix="workbench-compile-") as tmp:
        log_path, error_path = Path(tmp, "log.txt"), Path(tmp, "error.txt")
        log_path.touch()

        def child() -> None:  # never returns into the caller's code
            code = 1
            try:
                os.setsid()
                exit_with_parent(os.getppid())
                fd = os.open(log_path, os.O_WRONLY | os.O_APPEND)
                os.dup2(fd, 1)
                os.dup2(fd, 2)
                sys.stdout = os.fdopen(1, "w", buffering=1, closefd=False)
                sys.stderr = os.fdopen(2, "w", buffering=1, closefd=False)
                handler = logging.StreamHandler(sys.stderr)
                handler.setLevel(logging.INFO)
                handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
                logging.getLogger().addHandler(handler)
                work()
                code = 0
            except BaseException:
                with contextlib.suppress(BaseException):
                    error_path.write_text(traceback.format_exc())
            finally:
                with contextlib.suppress(BaseException):
                    sys.stdout.flush()
                    sys.stderr.flush()
                os._exit(code)

        pid = _fork_from_fresh_thread(child)
        _supervise(
            pid,
            log_path,
            error_path,
            log=log,
            cancel=cancel,
            on_tick=on_tick,
            poll_seconds=poll_seconds,
            kill_grace_seconds=kill_grace_seconds,
        )


def run_command_isolated(
    argv: Sequence[str],
    *,
    error_path: Path,
    log: Log | None = None,
    cancel: Any = None,
    env: dict[str, str] | None = None,
    poll_seconds: float = 0.2,
    kill_grace_seconds: float = 5.0,
) -> None:
    """`run_isolated` for a fresh interpreter: for runtimes that cannot survive a fork (TensorFlow).

    The command writes its traceback to ``error_path`` when it fails.
    """
    with tempfile.TemporaryDirectory(prefix="workbench-compile-") as tmp:
        log_path = Path(tmp, "log.txt")
        with open(log_path, "wb") as out:
            process = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=env,
            )
        code = -1
        try:
            code = _supervise(
                process.pid,
                log_path,
                error_path,
                log=log,
                cancel=cancel,
                poll_seconds=poll_seconds,
                kill_grace_seconds=kill_grace_seconds,
            )
        finally:
            process.returncode = code  # _supervise reaped it; Popen must not wait for it again


def _supervise(
    pid: int,
    log_path: Path,
    error_path: Path,
    *,
    log: Log | None,
    cancel: Any,
    on_tick: Callable[[float], None] | None = None,
    poll_seconds: float,
    kill_grace_seconds: float,
) -> int:
    """Stream the child's log file to ``log`` until it exits; kill its group on cancel or error.

    Returns the exit code; raises CompileError (with the child's traceback) when it is not 0.
    """
    status = None
    pending = ""
    started = time.monotonic()
    with open(log_path, errors="replace") as reader:

        def drain() -> None:
            nonlocal pending
            pending += reader.read()
            *lines, pending = pending.split("\n")
            if log is not None:
                for line in lines:
                    log(line)

        try:
            while status is None:
                done, raw = os.waitpid(pid, os.WNOHANG)
                if done:
                    status = raw
                    break
                drain()
                check_cancel(cancel)
                if on_tick is not None:
                    on_tick(time.monotonic() - started)
                time.sleep(poll_seconds)
        finally:
            if status is None:
                status = _kill_group(pid, kill_grace_seconds)
            drain()
            if pending and log is not None:
                log(pending)
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        detail = error_path.read_text().strip() if error_path.is_file() else ""
        last = detail.splitlines()[-1] if detail else f"exit status {code}"
        raise CompileError(f"the compile process failed: {last}" + (f"\n{detail}" if detail else ""))
    return code


def exit_with_parent(parent: int) -> None:
    """In the child: if the caller dies (killed, crashed), take the whole group down with it."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os.killpg(0, signal.SIGKILL)

    threading.Thread(target=watch, name="workbench-parent-watch", daemon=True).start()


def _fork_from_fresh_thread(child: Callable[[], None]) -> int:
    """Fork from a thread that has never run an OpenMP region.

    GNU OpenMP keeps a per-thread pool of worker threads; a child forked from a thread that used
    one (torch's matmuls do) waits forever on workers that do not exist in the child. A new
    thread has no pool, so the child builds a fresh one.
    """
    forked: dict[str, int] = {}

    def fork() -> None:
        pid = os.fork()
        if pid == 0:
            child()
        forked["pid"] = pid

    thread = threading.Thread(target=fork, name="workbench-fork")
    thread.start()
    thread.join()
    return forked["pid"]


def _kill_group(pid: int, grace: float) -> int:
    """SIGTERM the child's process group, SIGKILL it after ``grace`` seconds; return the wait status."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            _reap_group(pid)
            return status
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    _reap_group(pid)
    return status


def _reap_group(pgid: int) -> None:
    """Grandchildren (the compiler) may outlive the child's exit: kill what is left of the group."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
