"""One writer per run folder: an exclusive lock held for as long as a sweep writes there.

Two sweeps on one folder (the same command twice, or one with ``--resume``) would each load their
variants over the other's and append duplicate rows. The lock is an ``flock`` on a file beside the
folder (``.<name>.lock``, so renaming the folder for ``--new-run`` keeps it locked), holding the
writer's pid and command; a second writer is refused naming them, before it loads anything. The
kernel drops the lock when its process dies, so a killed sweep never leaves its folder locked;
the file is removed when the writer ends (checked against its inode, so a racing writer never
locks a removed file).
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import os
import sys
from pathlib import Path
from typing import Callable, Iterator, ParamSpec, TypeVar

from workbench.measure.plan import SweepError

__all__ = ["lock_path", "holder", "check_free", "run_folder_lock", "holding_run_folder"]

P = ParamSpec("P")
R = TypeVar("R")


def lock_path(out_dir: str | Path) -> Path:
    out_dir = Path(out_dir).absolute()
    return out_dir.with_name(f".{out_dir.name}.lock")


def _command(pid: int, stored: str) -> str:
    try:  # the holder's own command line, as the kernel has it
        text = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace").strip()
    except OSError:
        text = ""
    return text or stored


def _describe(fd: int) -> str:
    try:
        data = json.loads(os.pread(fd, 65536, 0).decode("utf-8") or "{}")
    except (OSError, ValueError):
        data = {}
    pid = data.get("pid")
    if not isinstance(pid, int):
        return "another process (its pid is not written yet)"
    return f"pid {pid} ({_command(pid, str(data.get('command', '')))})"


def _refusal(out_dir: Path, who: str) -> SweepError:
    return SweepError(f"run folder {out_dir} is being written by another sweep: {who}; wait for it to end, or "
                      "use another folder")


def holder(out_dir: str | Path) -> str | None:
    """Who holds ``out_dir``'s lock (pid and command), or None when no one does. A probe only."""
    path = lock_path(out_dir)
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return _describe(fd)
    finally:
        os.close(fd)
    return None


def check_free(out_dir: str | Path) -> None:
    """SweepError naming the holder when another sweep writes ``out_dir`` (a probe, before a
    server is even started); `run_folder_lock` takes the lock itself."""
    who = holder(out_dir)
    if who is not None:
        raise _refusal(Path(out_dir), who)


@contextlib.contextmanager
def run_folder_lock(out_dir: str | Path) -> Iterator[None]:
    """Hold ``out_dir``'s lock for the block; SweepError naming the holder when another has it."""
    out_dir = Path(out_dir)
    path = lock_path(out_dir)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise SweepError(f"the run folder {out_dir} cannot be made: {err}") from None
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            who = _describe(fd)
            os.close(fd)
            raise _refusal(out_dir, who) from None
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:  # its holder removed it between our open and our lock
            same = False
        if same:
            break
        os.close(fd)
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps({"pid": os.getpid(), "command": " ".join(sys.argv)}).encode(), 0)
        yield
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)
        os.close(fd)  # closing drops the lock


def holding_run_folder(func: Callable[P, R]) -> Callable[P, R]:
    """Run ``func`` holding the lock of its ``out_dir`` keyword argument (`run_folder_lock`)."""
    @functools.wraps(func)
    def locked(*args: P.args, **kwargs: P.kwargs) -> R:
        with run_folder_lock(kwargs["out_dir"]):  # type: ignore[arg-type]
            return func(*args, **kwargs)
    return locked
