"""One writer per run folder: a sweep holds an exclusive lock on its folder from before it loads
anything until it ends, so a second sweep (or a resume) on the same folder is refused at once,
naming the holder, instead of loading variants over the first one and appending rows twice.

The lock is the kernel's (``flock`` on ``.sweep.lock`` in the folder): it ends with the process that
holds it, so a killed sweep leaves no stale lock behind (only an empty file, taken over by the next
sweep); the file says who holds it, and is removed when the sweep ends. A lock path that is a
symlink, FIFO, device or a second name of another file is refused, never written through
(`workbench.files.open_regular`).
"""

from __future__ import annotations

import fcntl
import json
import os
import sys
from pathlib import Path
from types import TracebackType

from workbench.files import NotRegularFile, open_regular
from workbench.measure.grid.plan import SweepError
from workbench.measure.grid.rows import now

__all__ = ["LOCK_FILE", "RunFolderLock"]

LOCK_FILE = ".sweep.lock"


class RunFolderLock:
    """``with RunFolderLock(out_dir):`` the folder is this process's to write (made if absent);
    SweepError names the pid and command of a sweep already writing it."""

    def __init__(self, out_dir: Path) -> None:
        self.path = Path(out_dir) / LOCK_FILE
        self._fd: int | None = None

    @classmethod
    def check_free(cls, out_dir: Path) -> None:
        """Refuse early (before a server starts) when a sweep holds ``out_dir``; creates nothing.
        The sweep itself still takes the lock: this only says it sooner."""
        path = Path(out_dir) / LOCK_FILE
        try:
            fd = open_regular(path, os.O_RDWR)  # as the sweep will: a second name of a file is refused too
        except NotRegularFile as err:
            raise SweepError(_unusable(path, err)) from None
        except OSError:
            return  # no lock file: nobody holds the folder
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise SweepError(_busy(path.parent, _holder(fd))) from None
        finally:
            os.close(fd)

    def __enter__(self) -> RunFolderLock:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = open_regular(self.path, os.O_RDWR | os.O_CREAT)
        except NotRegularFile as err:
            raise SweepError(_unusable(self.path, err)) from None
        except OSError as err:  # a folder in the lock's place, a read-only run folder
            raise SweepError(f"cannot take the lock {self.path} of the run folder: {err.strerror or err}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            raise SweepError(_busy(self.path.parent, holder)) from None
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps({"pid": os.getpid(), "command": " ".join(sys.argv), "since": now()}).encode())
        self._fd = fd
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if self._fd is not None:
            self.path.unlink(missing_ok=True)  # the folder keeps only the run (a new run may have moved it)
            os.close(self._fd)  # closing releases the lock
            self._fd = None


def _unusable(path: Path, err: NotRegularFile) -> str:
    return f"cannot take the lock {path} of the run folder: it {err.strerror}; remove it and start again"


def _busy(folder: Path, holder: str) -> str:
    return f"{folder} is being written by another sweep ({holder}); wait for it to end, or use another folder"


def _holder(fd: int) -> str:
    """``pid 4242: python -m workbench sweep ... since 2026-...`` from the lock file, as well as it reads."""
    try:
        info = json.loads(os.pread(fd, 65536, 0) or b"{}")
        return f"pid {info['pid']}: {info.get('command') or '?'}, since {info.get('since', '?')}"
    except (OSError, ValueError, KeyError, TypeError):
        return "holder unknown"
