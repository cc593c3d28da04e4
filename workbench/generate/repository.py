"""Write model directories so that nothing the user made is lost or left half-written.

Upstream gen_triton_model.py wrote straight into the target folder: a failure halfway left a
broken model that Triton would try to load, and a second run silently replaced hand edits. Here a
directory is built next to its destination and renamed into place in one step; an existing one is
refused unless asked, and then kept as a timestamped backup that is never deleted.
"""

from __future__ import annotations

import difflib
import errno
import hashlib
import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from google.protobuf import json_format

from workbench.generate.config import ConfigError, ModelConfig, from_text, read_config
from workbench.limits import LimitError, triton_version
from workbench.refusals import WorkbenchError

__all__ = [
    "RepositoryError",
    "FileSystemRefusal",
    "WriteResult",
    "FileContent",
    "Changes",
    "write_model_dir",
    "diff_model_dir",
    "compare_model_dir",
    "read_model_dir",
    "version_folders",
    "response_cache_models",
    "files_under",
]

# bytes and str are written as given (str as UTF-8); a Path is copied (a file, or a directory such as
# a TensorFlow SavedModel), so large compiled models never have to be held in memory.
FileContent = bytes | str | Path


class RepositoryError(WorkbenchError, ValueError):
    """A model directory that cannot be written as asked; the message names the path."""


class FileSystemRefusal(RepositoryError):
    """The file system refused the write (read-only, not a directory, another device, no space);
    nothing was written and no folder the write made is left behind."""


@dataclass(frozen=True)
class WriteResult:
    path: Path
    backup: Path | None  # where the previous directory went, when one was replaced
    unchanged: bool = False  # the directory already held exactly these files: nothing was written


@dataclass(frozen=True)
class Changes:
    """What writing ``files`` would change in the directory ``dest``: files added, removed and
    modified, the config fields dropped, added or changed (in config.pbtxt and configs/*.pbtxt),
    and the unified diff. ``fingerprint`` ties a confirmation to exactly this disk state and content."""

    dest: Path
    exists: bool
    added: tuple[str, ...]
    removed: tuple[str, ...]
    modified: tuple[str, ...]
    config_changes: tuple[str, ...]
    diff: str
    fingerprint: str

    @property
    def empty(self) -> bool:
        return not (self.added or self.removed or self.modified)

    def summary(self) -> str:
        """One line per change that matters: dropped files first, then config fields, then the rest."""
        if not self.exists:
            return f"{self.dest} is new"
        if self.empty:
            return f"{self.dest}: no changes"
        lines = [f"removes {rel}" for rel in self.removed] + list(self.config_changes)
        lines += [f"adds {rel}" for rel in self.added] + [f"changes {rel}" for rel in self.modified]
        return "\n".join(lines)

    def headline(self) -> str:
        parts = [
            f"{len(items)} file(s) {verb}"
            for verb, items in (("removed", self.removed), ("changed", self.modified), ("added", self.added))
            if items
        ]
        dropped = dict.fromkeys(
            re.split(r"[.\[]", c.split(" ", 2)[1])[0] for c in self.config_changes if c.startswith("drops ")
        )
        if dropped:
            parts.append("drops config fields in " + ", ".join(dropped))
        return "; ".join(parts)


def _checked_relative(rel: str) -> PurePosixPath:
    path = PurePosixPath(str(rel).replace(os.sep, "/"))
    if not str(rel).strip() or path.is_absolute() or ".." in path.parts or str(path) == ".":
        raise RepositoryError(f"file name {rel!r} must be a relative path inside the model directory")
    return path


def _check_files(files: Mapping[str, FileContent]) -> dict[PurePosixPath, FileContent]:
    checked = {}
    for rel, content in files.items():
        path = _checked_relative(rel)
        if isinstance(content, Path):
            if not content.exists():
                raise RepositoryError(f"{rel}: source {content} does not exist")
        elif not isinstance(content, (bytes, str)):
            raise RepositoryError(f"{rel}: content must be bytes, str or a Path, got {type(content).__name__}")
        checked[path] = content
    names = set(map(str, checked))
    for path in checked:
        for parent in path.parents:
            if str(parent) in names:
                raise RepositoryError(f"{path} cannot be written: {parent} is also given as a file")
    return checked


def _write_one(root: Path, rel: PurePosixPath, content: FileContent) -> None:
    target = root.joinpath(*rel.parts)
    target.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, Path):
        if content.is_dir():
            shutil.copytree(content, target, symlinks=False)
        else:
            shutil.copy2(content, target)
    else:
        target.write_bytes(content.encode("utf-8") if isinstance(content, str) else content)


def backup_folder(dest: str | Path) -> Path:
    """Where replaced versions of ``dest`` are kept: ``<repository>.backups/`` beside the model
    repository, never inside it (a default-mode tritonserver tries to load every folder of its
    repository, and fails to start on a backup there; measured on Triton 2.51)."""
    repository = Path(dest).resolve().parent
    return repository.parent / f"{repository.name}.backups"


def _backup_name(dest: Path) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    folder = backup_folder(dest)
    candidate = folder / f"{dest.name}.bak-{stamp}"
    n = 1
    while candidate.exists():
        candidate = folder / f"{dest.name}.bak-{stamp}-{n}"
        n += 1
    return candidate


def _make_folder(folder: Path, made: list[Path]) -> None:
    """``mkdir -p folder``, noting each folder it creates (outermost first)."""
    missing = [p for p in [folder, *folder.parents] if not p.exists()][::-1]
    for path in missing:
        path.mkdir()
        made.append(path)


def _remove_empty(made: list[Path]) -> None:
    for path in reversed(made):
        try:
            path.rmdir()
        except OSError:
            pass


def _refusal(dest: Path, err: OSError) -> str:
    where = f" ({err.filename})" if err.filename else ""
    hint: dict[int | None, str] = {
        errno.EXDEV: "; the backup folder is on another device: move the repository, or write elsewhere",
        errno.EROFS: "; the file system is read-only",
        errno.ENOTDIR: "; a part of the path is a file",
    }
    return f"cannot write {dest}: {err.strerror or err}{where}{hint.get(err.errno, '')}; nothing was written"


def write_model_dir(
    dest: str | Path, files: Mapping[str, FileContent], *, overwrite: bool = False, confirm: Changes | None = None
) -> WriteResult:
    """Write ``files`` (relative path -> content) as the directory ``dest``, all or nothing.

    An existing ``dest`` holding exactly these files is left alone (``unchanged``). One that would
    change is refused unless ``overwrite``, or ``confirm`` is the `Changes` the caller reviewed
    (`compare_model_dir`) and the disk still matches it; then it is moved to
    ``<repository>.backups/<name>.bak-YYYYmmdd-HHMMSS[-n]`` (kept for good, see `backup_folder`)
    before the new directory takes its place.
    """
    dest = Path(dest)
    checked = _check_files(files)
    if not dest.name or dest.name in (".", ".."):
        raise RepositoryError(f"{dest}: give a model directory path whose last part is the model name")
    if dest.exists() and not dest.is_dir():
        raise FileSystemRefusal(f"{dest} exists and is not a directory; nothing was written")
    held = _held_models(dest)
    if held:  # never replaced whole, --force or not: its other models would go with it
        raise RepositoryError(
            f"{dest} is a model repository (it holds {', '.join(held)}), not a model directory; "
            "nothing was written. Write the model into it as DIR/NAME (--name NAME)"
        )
    if dest.exists() and (confirm is not None or not overwrite):
        changes = compare_model_dir(dest, files)
        if confirm is not None and confirm.fingerprint != changes.fingerprint:
            raise RepositoryError(
                f"{dest} or the files to write changed since those changes were reviewed; nothing "
                "was written. Review the changes again and confirm those"
            )
        if changes.empty:
            return WriteResult(dest, None, unchanged=True)
        if confirm is None:
            raise RepositoryError(
                f"{dest} already exists; nothing was written. Writing would change it ({changes.headline()}): "
                "review the changes and write with confirm=<those changes>, or overwrite it (--force / "
                "overwrite=True); the old directory is kept as a timestamped backup"
            )
    made: list[Path] = []  # folders this write creates, removed again if it fails
    try:
        _make_folder(dest.parent, made)
        staging = Path(tempfile.mkdtemp(prefix=f".{dest.name}.tmp-", dir=dest.parent))
    except OSError as err:
        _remove_empty(made)
        raise FileSystemRefusal(_refusal(dest, err)) from None
    try:
        for rel, content in checked.items():
            _write_one(staging, rel, content)
        os.chmod(staging, 0o755)  # mkdtemp makes it private; a served model directory is not
        backup = None
        if dest.exists():
            backup = _backup_name(dest)
            _make_folder(backup.parent, made)
            os.rename(dest, backup)
        try:
            os.rename(staging, dest)
        except BaseException:
            if backup is not None:
                os.rename(backup, dest)
            raise
    except BaseException as err:
        shutil.rmtree(staging, ignore_errors=True)
        _remove_empty(made)
        if isinstance(err, OSError):
            raise FileSystemRefusal(_refusal(dest, err)) from None
        raise
    return WriteResult(dest, backup)


def _held_models(folder: Path) -> list[str]:
    """The model directories (``NAME/config.pbtxt``) right inside ``folder``, up to three named."""
    try:
        found = sorted(f"{child.name}/" for child in folder.iterdir() if (child / "config.pbtxt").is_file())
    except OSError:
        return []
    return found[:3] + (["..."] if len(found) > 3 else [])


def _content_bytes(content: FileContent) -> bytes:
    """A file's content as bytes (a directory is compared by listing: `_expand`)."""
    if isinstance(content, Path):
        return content.read_bytes()
    return content.encode("utf-8") if isinstance(content, str) else content


def _expand(files: Mapping[str, FileContent]) -> dict[str, bytes]:
    """Flatten Path directories into their files so both sides of a diff list single files."""
    flat: dict[str, bytes] = {}
    for rel, content in _check_files(files).items():
        if isinstance(content, Path) and content.is_dir():
            for inner in files_under(content):
                flat[str(rel / inner)] = (content / inner).read_bytes()
        else:
            flat[str(rel)] = _content_bytes(content)
    return flat


def files_under(root: Path) -> list[str]:
    """Relative paths of the files under ``root``, sorted, through symlinked folders too (a package
    linked into a model folder is the user's as much as a copied one; pathlib's rglob skips it),
    without the ``__pycache__`` Python leaves next to a loaded model.py."""
    found: list[str] = []
    for folder, dirs, names in os.walk(root, followlinks=True):
        rel = PurePosixPath(Path(folder).relative_to(root).as_posix())
        above = {os.path.realpath(root.joinpath(*rel.parts[:n])) for n in range(len(rel.parts))}
        if os.path.realpath(folder) in above:  # a link back up the tree
            dirs[:] = []
            continue
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        found += [str(rel / name) for name in names if os.path.isfile(os.path.join(folder, name))]
    return sorted(found)


def _on_disk(dest: Path) -> dict[str, bytes]:
    if not dest.is_dir():
        return {}
    return {rel: (dest / rel).read_bytes() for rel in files_under(dest)}


def _text(data: bytes) -> list[str] | None:
    try:
        return data.decode("utf-8").splitlines(keepends=True)
    except UnicodeDecodeError:
        return None


def _unified(rel: str, before: bytes | None, after: bytes | None) -> str:
    a_name = f"a/{rel}" if before is not None else "/dev/null"
    b_name = f"b/{rel}" if after is not None else "/dev/null"
    a_text = _text(before) if before is not None else []
    b_text = _text(after) if after is not None else []
    if a_text is None or b_text is None:
        return f"Binary files {a_name} and {b_name} differ\n"
    lines = list(difflib.unified_diff(a_text, b_text, a_name, b_name))
    return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)


def diff_model_dir(dest: str | Path, files: Mapping[str, FileContent]) -> str:
    """Unified diff from what is on disk at ``dest`` to what ``write_model_dir`` would write,
    including new and removed files; empty when they are the same."""
    return compare_model_dir(dest, files).diff


def _flat(config: ModelConfig) -> dict[str, object]:
    """A config as {dotted.path: value}; inputs, outputs and instance groups keyed by their name."""
    out: dict[str, object] = {}

    def walk(prefix: str, value: object) -> None:
        if isinstance(value, dict):
            if not value:
                out[prefix] = "{}"
            for key, inner in value.items():
                walk(f"{prefix}.{key}" if prefix else key, inner)
        elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            for position, inner in enumerate(value):
                walk(f"{prefix}[{inner.get('name', position)}]", inner)
        else:
            out[prefix] = value

    walk("", json_format.MessageToDict(config, preserving_proto_field_name=True))
    return out


def _config_changes(rel: str, before: bytes, after: bytes) -> list[str]:
    try:
        old, new = (_flat(from_text(data.decode("utf-8"), source=rel)) for data in (before, after))
    except (ConfigError, UnicodeDecodeError):
        return []
    where = "" if rel == "config.pbtxt" else f" ({rel})"
    found = []
    for key in sorted(set(old) | set(new)):
        if key not in new:
            found.append(f"drops {key}{where} (was {json.dumps(old[key])})")
        elif key not in old:
            found.append(f"adds {key}{where} = {json.dumps(new[key])}")
        elif old[key] != new[key]:
            found.append(f"changes {key}{where}: {json.dumps(old[key])} -> {json.dumps(new[key])}")
    return found or [f"rewrites {rel} with the same ModelConfig (its layout and comments change)"]


def compare_model_dir(dest: str | Path, files: Mapping[str, FileContent]) -> Changes:
    """What `write_model_dir` would change at ``dest``: files, config fields, the diff."""
    dest = Path(dest)
    old, new = _on_disk(dest), _expand(files)
    added: list[str] = []
    removed: list[str] = []
    modified: list[str] = []
    config_changes: list[str] = []
    chunks: list[str] = []
    digest = hashlib.sha256()
    for rel in sorted(set(old) | set(new)):
        before, after = old.get(rel), new.get(rel)
        for part in (rel.encode(), before, after):
            digest.update(b"-" if part is None else hashlib.sha256(part).digest())
        if before == after:
            continue
        (added if before is None else removed if after is None else modified).append(rel)
        if before is not None and after is not None and (rel == "config.pbtxt" or rel.startswith("configs/")):
            config_changes += _config_changes(rel, before, after)
        chunks.append(_unified(rel, before, after))
    return Changes(
        dest,
        dest.is_dir(),
        tuple(added),
        tuple(removed),
        tuple(modified),
        tuple(config_changes),
        "".join(chunks),
        digest.hexdigest(),
    )


def read_model_dir(path: str | Path) -> tuple[ModelConfig, dict[str, Path]]:
    """The config of a model directory and its other files (relative path -> file on disk)."""
    path = Path(path)
    if not path.is_dir():
        raise RepositoryError(f"{path} is not a model directory")
    config = read_config(path / "config.pbtxt")
    files = {rel: path / rel for rel in files_under(path) if rel != "config.pbtxt"}
    return config, files


def version_folders(model_dir: str | Path) -> list[Path]:
    """The folders of ``model_dir`` that Triton loads as versions, lowest first: those whose name is
    the version Triton reads from it (`workbench.limits.triton_version`; ``01`` is skipped, and
    ``1.5`` -- read as 1 -- is not a version folder but a load the guard refuses)."""
    found = []
    for p in Path(model_dir).iterdir():
        try:
            version = triton_version(p.name) if p.is_dir() else None
        except LimitError:
            continue
        if version is not None and version >= 0 and str(version) == p.name:
            found.append(p)
    return sorted(found, key=lambda p: int(p.name))


def served_config_path(model_dir: str | Path, config_name: str | None = None) -> Path:
    """The config file tritonserver reads for a model directory: ``configs/<config_name>.pbtxt``
    when the server runs with ``--model-config-name=<config_name>`` and the file exists, else
    config.pbtxt."""
    model_dir = Path(model_dir)
    if config_name and (model_dir / "configs" / f"{config_name}.pbtxt").is_file():
        return model_dir / "configs" / f"{config_name}.pbtxt"
    return model_dir / "config.pbtxt"


def response_cache_models(repository: str | Path, config_name: str | None = None) -> list[str]:
    """Models in ``repository`` whose config asks for the response cache (``response_cache {enable:
    true}``): the one tritonserver would read, ``configs/<config_name>.pbtxt`` when it exists, else
    config.pbtxt. A config that does not parse is skipped (Triton reports it at load)."""
    found = []
    root = Path(repository)
    for model in sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []:
        path = served_config_path(model, config_name)
        try:
            if path.is_file() and read_config(path).response_cache.enable:
                found.append(model.name)
        except ConfigError:
            continue
    return found
