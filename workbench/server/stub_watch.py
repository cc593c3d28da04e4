"""Ends a python-backend stub that a local tritonserver has given up on but waits for.

Triton 2.51's python backend gives a starting stub one second to beat its health flag
(stub_launcher.cc, ReceiveMessageFromStub). A stub that misses it (a machine starved for a
second, or the stub paused) is judged unhealthy, and the server then waits (waitpid) for that
stub to exit without ending it; the stub lives on, so the load never answers. While a load runs,
`StubWatch` looks at what the server's threads wait on (/proc/<pid>/task/*/syscall): a live child
stub waited on for ``patience_s`` is killed, as Triton's own forced path does, and the load then
fails with the server's reason, which the caller may try again.
"""

from __future__ import annotations

import os
import platform
import re
import signal
import threading
import time
from pathlib import Path
from types import TracebackType

# wait4's syscall number per machine (the kernel's unistd tables)
WAIT4 = {"x86_64": 61, "aarch64": 260}.get(platform.machine())

STUB_NAME = b"triton_python_backend_stub"
# what a load that failed so twice adds to Triton's reason
STUB_ENDED_NOTE = (
    " (twice a python-backend stub missed Triton's one-second health beat while starting and the server"
    " waited on it for ever; the workbench ended it: the machine may be starved of CPU)"
)


def waited_on(server_pid: int) -> set[int]:
    """The pids the server's threads are blocked waiting for (wait4 on a pid); empty where the
    kernel does not show a thread's system call to this process."""
    pids = set()
    for syscall in Path(f"/proc/{server_pid}/task").glob("*/syscall"):
        try:
            fields = syscall.read_text().split()
        except OSError:
            continue
        if len(fields) > 1 and fields[0] == str(WAIT4):
            pid = int(fields[1], 16)
            if pid > 0:
                pids.add(pid)
    return pids


def live_stub_of(server_pid: int, pid: int) -> bool:
    """Whether ``pid`` is a running (not zombie) python-backend stub the server started."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    state, ppid = stat[stat.rindex(")") + 2 :].split()[:2]
    return state not in ("Z", "X") and int(ppid) == server_pid and STUB_NAME in cmdline


def stubs_of_model(server_pid: int, model: str) -> list[int]:
    """The server's live stubs of ``model``'s instances (a stub's arguments name its instance,
    ``<model>_<group>_<k>``)."""
    instance = re.compile(re.escape(model).encode() + rb"_\d+_\d+")
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            args = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        pid = int(cmdline.parent.name)
        if any(instance.fullmatch(arg) for arg in args) and live_stub_of(server_pid, pid):
            found.append(pid)
    return found


def wait_for_stubs_gone(server_pid: int, model: str, timeout_s: float = 30.0, settle_s: float = 2.0) -> None:
    """Wait (at most ``timeout_s``) until no stub of ``model`` lives, then ``settle_s`` more: the
    backend tears a failed load's instances down after its stubs exit, and a load sent again at
    once would make instances of the same names (and shared-memory regions) beside them."""
    deadline = time.monotonic() + timeout_s
    while stubs_of_model(server_pid, model) and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(settle_s)


class StubWatch:
    """While open (``with StubWatch(pid):``), a thread ends each stub the server ``server_pid``
    has waited on for ``patience_s``; ``ended`` lists them."""

    def __init__(self, server_pid: int | None, patience_s: float = 5.0, poll_s: float = 0.5) -> None:
        self.server_pid = server_pid
        self.patience_s = patience_s
        self.poll_s = poll_s
        self.ended: list[int] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> StubWatch:
        if self.server_pid is not None and WAIT4 is not None:
            self._thread = threading.Thread(target=self._watch, name="stub-watch", daemon=True)
            self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _watch(self) -> None:
        assert self.server_pid is not None
        since: dict[int, float] = {}
        while not self._stop.wait(self.poll_s):
            now = time.monotonic()
            waited = {pid for pid in waited_on(self.server_pid) if live_stub_of(self.server_pid, pid)}
            since = {pid: since.get(pid, now) for pid in waited}
            for pid, first in since.items():
                if now - first >= self.patience_s and pid not in self.ended:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        continue
                    self.ended.append(pid)
