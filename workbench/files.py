"""Writing a file so that a reader, a crash or a full disk never leaves half of it: the content goes
to a temporary file beside it, is synced to disk, renamed over the old one, and the folder is synced
so the rename itself survives a crash. One helper for every file the workbench rewrites (run
records and exports, compiled artifacts and their records, compacted points)."""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = ["atomic_write", "one_at_a_time", "strict_json"]


def atomic_write(path: str | os.PathLike, data: bytes | str) -> None:
    """Replace ``path`` with ``data`` (text is written as UTF-8): readers see the old or the new
    content, never a mix; on any failure the old file is left and the temporary one removed."""
    path = Path(path)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(payload)
            handle.flush()
            os.chmod(tmp, _mode_for(path))  # mkstemp's 0600 would hide a shared record from others
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _sync_folder(path.parent)


@contextmanager
def one_at_a_time(lock_file: str | os.PathLike) -> Iterator[None]:
    """Run the block while holding the kernel's exclusive lock on ``lock_file`` (made if absent), so
    processes that make the same shared thing (a backend directory a script assembles) take turns
    instead of writing it at once; a waiting process then finds it made. The lock ends with the
    process, even one killed."""
    path = Path(lock_file)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def strict_json(text: str | bytes) -> Any:
    """JSON as the standard has it: NaN and infinities (which Python's reader takes) are refused
    with ValueError, so nothing read can make a file the workbench writes invalid JSON."""
    return json.loads(text, parse_constant=_not_a_number)


def _not_a_number(word: str) -> float:
    raise ValueError(f"{word} is not a JSON number")


def _mode_for(path: Path) -> int:
    """The mode a plain write would give: the old file's where it exists, else 0666 less the umask."""
    try:
        return path.stat().st_mode & 0o7777
    except OSError:
        umask = os.umask(0o022)
        os.umask(umask)
        return 0o666 & ~umask


def _sync_folder(folder: Path) -> None:
    """Make a rename in ``folder`` durable (POSIX: fsync the directory; not possible everywhere)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems do not sync directories; the rename itself is still atomic
    finally:
        os.close(fd)
