"""Writing a file so that a reader, a crash or a full disk never leaves half of it: the content goes
to a temporary file beside it, is synced to disk, renamed over the old one, and the folder is synced
so the rename itself survives a crash. One helper for every file the workbench rewrites (run
records and exports, compiled artifacts and their records, compacted points); and one way to open
a file the workbench reads or appends to in a run folder or model directory, so a symlink, a FIFO
or a /dev link placed there can neither be written through, hang a read nor exhaust memory."""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from workbench.refusals import WorkbenchError

__all__ = [
    "atomic_write",
    "one_at_a_time",
    "strict_json",
    "NotRegularFile",
    "open_regular",
    "read_regular",
    "read_text",
    "append_regular",
    "READ_LIMIT",
]

# The largest file the workbench reads whole (records, configs, points): far above any real one,
# far below what would exhaust the machine.
READ_LIMIT = 256 * 2**20


class NotRegularFile(WorkbenchError, OSError):
    """A path the workbench will not read or write: a symlink, FIFO, device or folder where a plain
    file belongs, or a file past READ_LIMIT. An OSError, so existing handlers report it in one line."""

    def __init__(self, path: str | os.PathLike, reason: str, code: int = errno.EINVAL) -> None:
        super().__init__(code, reason, str(path))

    def __str__(self) -> str:
        return f"{self.filename}: {self.strerror}"


def open_regular(path: str | os.PathLike, flags: int = os.O_RDONLY, mode: int = 0o644) -> int:
    """A descriptor of ``path`` that is sure to be a regular file of its own: a symlink as the last
    part is not followed (O_NOFOLLOW), a FIFO does not block the open (O_NONBLOCK, then cleared),
    and the opened descriptor is checked (fstat), so nothing swapped in between is trusted. With
    O_CREAT a missing file is made; a hard link that also names another file is refused when
    writing, since truncating it would change that file too."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise NotRegularFile(
                path, "is a symbolic link; the workbench does not follow links here", errno.ELOOP
            ) from None
        if err.errno == errno.ENXIO:  # a FIFO opened for writing with no reader
            raise NotRegularFile(path, "is a FIFO, not a regular file") from None
        if err.errno == errno.EISDIR:
            raise NotRegularFile(path, "is a folder, not a regular file", errno.EISDIR) from None
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise NotRegularFile(path, f"is a {_kind(info.st_mode)}, not a regular file")
        if flags & (os.O_WRONLY | os.O_RDWR) and info.st_nlink > 1:
            raise NotRegularFile(path, f"has {info.st_nlink} hard links; writing it would change another file")
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_regular(path: str | os.PathLike, limit: int = READ_LIMIT) -> bytes:
    """The bytes of the regular file ``path`` (`open_regular`), refused past ``limit`` bytes."""
    fd = open_regular(path)
    with os.fdopen(fd, "rb") as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise NotRegularFile(path, f"is larger than {limit} bytes; not read", errno.EFBIG)
    return data


def read_text(path: str | os.PathLike, limit: int = READ_LIMIT) -> str:
    """`read_regular` decoded as UTF-8; bad bytes are a ValueError naming the file and the offset."""
    data = read_regular(path, limit)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise ValueError(
            f"{path}: line {line} is not UTF-8 text (byte {err.start}: {data[err.start : err.start + 1]!r})"
        ) from None


def append_regular(path: str | os.PathLike, text: str) -> None:
    """Append ``text`` to ``path`` (made if missing), never through a link or into a FIFO or device."""
    fd = open_regular(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    with os.fdopen(fd, "a", encoding="utf-8") as handle:
        handle.write(text)


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "folder"),
        (stat.S_ISFIFO, "FIFO"),
        (stat.S_ISCHR, "character device"),
        (stat.S_ISBLK, "block device"),
        (stat.S_ISSOCK, "socket"),
        (stat.S_ISLNK, "symbolic link"),
    ):
        if test(mode):
            return name
    return "special file"


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


# Nesting deeper than any record or engine argument the workbench reads; Python's reader would
# recurse past its stack on 30000 levels (RecursionError, a traceback).
MAX_JSON_DEPTH = 64
_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.S)


def strict_json(text: str | bytes, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """JSON as the standard has it: NaN and infinities (which Python's reader takes) are refused
    with ValueError, so nothing read can make a file the workbench writes invalid JSON; so are a key
    repeated in one object (the reader would keep the last silently) and nesting past ``max_depth``."""
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode("utf-8")
    if text.count("[") + text.count("{") > max_depth:
        depth = deepest = 0
        for bracket in re.findall(r"[\[\]{}]", _JSON_STRING.sub("", text)):
            depth += 1 if bracket in "[{" else -1
            deepest = max(deepest, depth)
        if deepest > max_depth:
            raise ValueError(f"nested {deepest} levels deep; at most {max_depth}")
    return json.loads(text, parse_constant=_not_a_number, object_pairs_hook=_unique_keys)


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in found:
            raise ValueError(f"key {key!r} is given twice in one object")
        found[key] = value
    return found


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
