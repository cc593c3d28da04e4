"""Watchdog that takes a tritonserver down with the process that started it.

Run as ``python guard.py SERVER_PID OWNER_PID SHM_PREFIX`` (by path, stdlib only, so it starts
fast and without importing the workbench). It waits on three things at once:

* the owner process exiting (a pidfd: fires when the whole process is gone, unlike
  PR_SET_PDEATHSIG, which fires when the starting *thread* ends, and notebook UIs start servers
  from worker threads),
* the server exiting (its python backend stubs share its process group and are killed with it),
* a line on stdin: ``release`` means the owner stopped the server itself, so just leave.

Stdin reaching EOF without ``release`` means the owner dropped its end (it died, or the
TritonServer object was garbage collected): the server goes too.

The guard leaves the owner's children as soon as it runs (it forks, the first process exits), so
whatever kills the owner's children with the owner cannot kill it before it acts: a Ray worker
ending (a task cancelled with force, its node lost) SIGKILLs its direct children, the server and,
were it one of them, the guard at once, leaving the server's stubs orphaned in its process group.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

SHM_DIR = Path("/dev/shm")


def remove_shm_regions(prefix: str) -> list[str]:
    """Delete the python backend's shared-memory files named ``<prefix>*``: left behind when a
    stub is SIGKILLed. The prefix is unique per server, so other servers' regions are untouched."""
    if not prefix or "/" in prefix:
        return []
    removed = []
    for path in SHM_DIR.glob(prefix + "*"):
        try:
            path.unlink()
            removed.append(path.name)
        except OSError:
            pass
    return removed


def group_stats(pgid: int) -> dict[int, list[str]]:
    """``{pid: /proc/<pid>/stat fields after "pid (comm) "}`` (state ppid pgrp ... utime stime ...,
    proc(5)) of the processes in group ``pgid`` that still run. Zombies do not count: where PID 1
    does not reap (some containers), a killed stub stays a zombie forever and kill(0) still finds it."""
    members = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2 :].split()
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            members[int(stat.parent.name)] = fields
    return members


def live_group_members(pgid: int) -> list[int]:
    """Pids in process group ``pgid`` that still run (zombies do not count)."""
    return list(group_stats(pgid))


def group_alive(pgid: int) -> bool:
    return bool(live_group_members(pgid))


def take_down(pgid: int, grace: float) -> None:
    """SIGTERM the server's group, SIGKILL whatever is left after ``grace`` seconds."""
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and group_alive(pgid):
        time.sleep(0.05)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _open_pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except ProcessLookupError:
        return None


def open_owner(owner_pid: int) -> int | None:
    """A pidfd of the owner, None if it is gone already. Called while the guard is still the
    owner's child: a pidfd opened after the owner died may name another process with its pid, and
    then the guard has been re-parented, which tells them apart."""
    owner_fd = _open_pidfd(owner_pid)
    if owner_fd is not None and os.getppid() != owner_pid:
        os.close(owner_fd)
        return None
    return owner_fd


def leave_the_owners_children() -> None:
    """Go on in a forked child, the first process exiting at once: the guard is then no child of
    the owner (re-parented to the nearest subreaper or init) and outlives a kill of the owner's
    children. It stays in the group the owner started it in, whose id is the first process's pid."""
    if os.fork() > 0:
        os._exit(0)


def watch(server_pid: int, owner_fd: int | None, shm_prefix: str, grace: float = 3.0) -> str:
    """Block until the owner (``owner_fd``: `open_owner`) or the server goes; returns what happened
    (for the guard's log)."""
    server_fd = _open_pidfd(server_pid)
    outcome = "owner-gone"
    if owner_fd is not None and server_fd is not None:
        fds = [owner_fd, server_fd, sys.stdin.fileno()]
        stdin_buffer = b""
        while True:
            readable, _, _ = select.select(fds, [], [])
            if owner_fd in readable:
                outcome = "owner-gone"
                break
            if server_fd in readable:
                outcome = "server-exited"
                break
            chunk = os.read(sys.stdin.fileno(), 1024)
            if not chunk:
                outcome = "owner-closed"
                break
            stdin_buffer += chunk
            if b"release" in stdin_buffer:
                return "released"
    elif server_fd is None:
        outcome = "server-exited"
    if outcome == "server-exited":
        # The server is gone; its stubs exit on their own within a second, but make sure.
        try:
            os.killpg(server_pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    else:
        take_down(server_pid, grace)
    remove_shm_regions(shm_prefix)
    return outcome


def main(argv: list[str]) -> int:
    server_pid, owner_pid, shm_prefix = int(argv[0]), int(argv[1]), argv[2]
    grace = float(argv[3]) if len(argv) > 3 else 3.0
    # Ctrl-C in the owner's terminal must not kill the guard before the server; a SIGTERM aimed
    # at the guard takes the server down with it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)

    def on_term(signum: int, frame: object) -> None:
        take_down(server_pid, grace)
        remove_shm_regions(shm_prefix)
        os._exit(0)

    signal.signal(signal.SIGTERM, on_term)
    owner_fd = open_owner(owner_pid)
    leave_the_owners_children()
    outcome = watch(server_pid, owner_fd, shm_prefix, grace)
    print(f"guard: {outcome}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))


def end_process_group(process: subprocess.Popen[bytes], timeout: float) -> None:
    """Stop a server started as a process-group leader: SIGTERM, ``timeout`` seconds to exit, then
    SIGKILL to the whole group (it outlives its leader while any stub lives, so its id stays ours to
    kill) until no member is left."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    _reap(process, 10.0)
    deadline = time.monotonic() + 10.0
    while group_alive(process.pid) and time.monotonic() < deadline:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            return
        time.sleep(0.05)


def _reap(process: subprocess.Popen[bytes], seconds: float) -> None:
    """Wait (at most ``seconds``) for a killed ``process`` to be reaped. A KeyboardInterrupt that
    landed inside an earlier ``Popen.poll()`` can leave Popen's wait lock held, so that
    ``process.wait()`` would block for ever: past the bounded wait, reap it with waitpid directly."""
    deadline = time.monotonic() + seconds
    try:
        process.wait(min(seconds, 2.0))  # a killed process is reaped at once, unless the lock is held
        return
    except subprocess.TimeoutExpired:
        pass
    while time.monotonic() < deadline:
        try:
            pid, status = os.waitpid(process.pid, os.WNOHANG)
        except ChildProcessError:  # reaped already (by Popen, after all)
            return
        if pid == process.pid:
            process.returncode = os.waitstatus_to_exitcode(status)
            return
        time.sleep(0.05)


class Guard:
    """The owner's hold on its server's guard: the pipe the guard reads (``stdin``) and the process
    group it runs in, whose id is the pid of the process the owner started (that one leaves at
    once: `leave_the_owners_children`), so the guard is found and waited for by its group."""

    def __init__(self, launched: subprocess.Popen[bytes]) -> None:
        self.launched = launched
        self.stdin = launched.stdin
        self.group = launched.pid

    def wait_detached(self, seconds: float) -> None:
        """Wait (at most ``seconds``) for the process started to leave, the guard going on as no
        child of the owner; reaped here, not left a zombie child of the owner."""
        try:
            self.launched.wait(seconds)
        except subprocess.TimeoutExpired:
            pass

    @property
    def pid(self) -> int | None:
        """The guard's own pid (None once it has left)."""
        self.wait_detached(10.0)
        members = live_group_members(self.group)
        return members[0] if members else None


def start_guard(server_pid: int, shm_prefix: str, log: IO[bytes]) -> Guard:
    """A guard (this file, run by path) for the server ``server_pid`` this process started."""
    launched = subprocess.Popen(
        [sys.executable, "-I", __file__, str(server_pid), str(os.getpid()), shm_prefix],
        stdin=subprocess.PIPE,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    return Guard(launched)


def release_guard(guard: Guard) -> None:
    """Tell the guard process the server was stopped on purpose, and wait for it to leave."""
    try:
        if guard.stdin is not None:
            guard.stdin.write(b"release\n")
            guard.stdin.close()
    except (OSError, ValueError):  # the guard already left (server exited) or pipe closed
        pass
    guard.wait_detached(10.0)
    if guard.launched.returncode is None:
        guard.launched.kill()
        guard.launched.wait()
    deadline = time.monotonic() + 10.0
    while group_alive(guard.group) and time.monotonic() < deadline + 5.0:
        if time.monotonic() > deadline:  # still there: alive members keep the group's id ours to kill
            try:
                os.killpg(guard.group, signal.SIGKILL)
            except ProcessLookupError:
                return
        time.sleep(0.05)
