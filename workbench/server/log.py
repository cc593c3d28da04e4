"""A server's log: the file tritonserver writes, read back, tailed, followed and summarised on failure.

The file lives in the server's run directory, which ``stop()`` removes; the last lines are kept
in memory then, so ``tail`` and failure reports still answer after the server is gone.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from workbench.server.errors import ServerError

__all__ = ["ServerLog", "gpu_probe_note"]

_KEEP_LOG_LINES = 2000
_ERROR_LINE = re.compile(r"^E\d{4} ")  # Triton's glog-style prefix: severity, month, day
# What a GPU-enabled tritonserver build (the wheel's, the container's) prints at start on a host
# without an NVIDIA driver: it probes CUDA, NVML and DCGM, finds none, and serves on the CPU.
_GPU_PROBES = re.compile(
    r"CUDA driver version is insufficient|CUDA memory pool disabled|"
    r"CudaDriverHelper has not been initialized|Failed to initialize NVML|DCGM unable to start"
)


def gpu_probe_note(line: str) -> str | None:
    """Why a log line is harmless on this host, when it is one of tritonserver's GPU probes
    failing on a host with no NVIDIA driver (None otherwise, and on a host that has one)."""
    if not _GPU_PROBES.search(line) or Path("/dev/nvidiactl").exists():
        return None
    return "expected without an NVIDIA GPU: tritonserver probes for one at start, then serves on the CPU"


class ServerLog:
    """The output of one server process (``path``), and its last lines once the file is gone."""

    def __init__(self) -> None:
        self.path: Path | None = None
        self._kept: list[str] = []

    def start(self, path: Path) -> None:
        """A new process writes to ``path`` from now on."""
        self.path = path
        self._kept = []

    def keep_and_forget(self) -> None:
        """Keep the last lines in memory: the file is about to be removed."""
        if self.path is not None:
            self._kept = self.lines()[-_KEEP_LOG_LINES:]
            self.path = None

    def note(self, text: str) -> None:
        """Add a line of the workbench's own to the log (why it restarted the server, say)."""
        if self.path is not None:
            with open(self.path, "a", encoding="utf-8") as log:
                log.write(text.rstrip("\n") + "\n")

    def lines(self) -> list[str]:
        if self.path is None:
            return list(self._kept)
        try:
            return self.path.read_text(errors="replace").splitlines()
        except FileNotFoundError:
            return list(self._kept)

    def size(self) -> int:
        """Bytes written so far: a mark to read what a later call wrote (``lines_since``)."""
        try:
            return self.path.stat().st_size if self.path is not None else 0
        except FileNotFoundError:
            return 0

    def lines_since(self, offset: int, name: str, limit: int = 30) -> list[str]:
        """Errors, warnings and lines about ``name`` written after ``offset``."""
        if self.path is None:
            return []
        with open(self.path, "rb") as log:
            log.seek(offset)
            lines = log.read().decode(errors="replace").splitlines()
        # Triton's log prefix is the severity letter; keep errors, warnings and lines about the model.
        keep = [
            line
            for line in lines
            if line[:1] in ("E", "W") or name in line or "Traceback" in line or line.startswith(" ")
        ]
        return keep[-limit:]

    def failure_report(self, tail: int = 20) -> str:
        """Triton's error lines, then the last lines: enough to see why without the whole log
        (a bad flag makes Triton print its whole usage text after the one line that matters)."""
        lines = self.lines()
        usage = next((i for i, line in enumerate(lines) if line.startswith("Usage: tritonserver")), None)
        if usage is not None:
            lines = lines[:usage]
        errors = [line for line in lines if _ERROR_LINE.match(line) or "unrecognized option" in line]
        report = ""
        if errors:
            report += "Errors:\n" + "\n".join(errors[-15:]) + "\n"
        return report + "Last log lines:\n" + "\n".join(lines[-tail:])

    def tail(self, n: int = 50) -> list[str]:
        """The last ``n`` lines (kept after the file is removed)."""
        return self.lines()[-n:] if n > 0 else []

    def follow(
        self,
        alive: Callable[[], bool],
        *,
        from_start: bool = False,
        stop: threading.Event | None = None,
        poll_interval: float = 0.2,
    ) -> Iterator[str]:
        """Yield lines as they are written, until ``stop`` is set or ``alive()`` is false and the
        file is drained. Lines written after this call are all seen, however late the iteration
        starts (in a thread, say): the position is taken here, not at first use."""
        if self.path is None:
            raise ServerError("the server has not been started")
        log = open(self.path, "rb")  # an open handle keeps reading after the file is deleted
        if not from_start:
            log.seek(0, os.SEEK_END)
        return _follow(log, alive, stop, poll_interval)

    def follow_in_thread(
        self, callback: Callable[[str], None], alive: Callable[[], bool], *, from_start: bool = False
    ) -> threading.Event:
        """Call ``callback(line)`` from a daemon thread for each new line; set the returned event
        to stop following."""
        stop = threading.Event()
        lines = self.follow(alive, from_start=from_start, stop=stop)

        def run() -> None:
            for line in lines:
                callback(line)

        threading.Thread(target=run, name="workbench-triton-log", daemon=True).start()
        return stop


def _follow(
    log: BinaryIO, alive: Callable[[], bool], stop: threading.Event | None, poll_interval: float
) -> Iterator[str]:
    with log:
        partial = b""
        while stop is None or not stop.is_set():
            chunk = log.readline()
            if chunk:
                partial += chunk
                if partial.endswith(b"\n"):
                    yield partial.decode(errors="replace").rstrip("\n")
                    partial = b""
                continue
            if not alive():
                if partial:
                    yield partial.decode(errors="replace")
                return
            time.sleep(poll_interval)
