"""What makes a resume honest: one row per point however often a run is resumed, and a
fingerprint of what was measured, so a resume against a changed model or config is refused.

The fingerprint holds a hash of every file of the model directory (and of a compiled model it
names outside it), a hash of the base config, and the workbench and server versions. Points are
identified by ``KEY_COLUMNS``; a point's row is its last error-free one, else its last.
`resumed_rows` is the one check both sweeps (tensor and LLM) resume through; each hands it the
settings that differ in its own words.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from workbench.files import atomic_write, open_regular
from workbench.measure.grid.plan import SweepError
from workbench.measure.grid.rows import INT_COLUMNS, KEY_COLUMNS
from workbench.measure.store.folder import POINTS_FILE, read_points, run_file_text

__all__ = [
    "fingerprint",
    "fingerprint_changes",
    "unique_rows",
    "compact_points",
    "set_aside",
    "resumed_rows",
    "stamped",
]

_CHUNK = 1 << 20


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    # a link's target is hashed when it is a regular file; a FIFO or device never (it would hang or never end)
    with os.fdopen(open_regular(os.path.realpath(path)), "rb") as handle:
        for block in iter(lambda: handle.read(_CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def _files(root: Path) -> dict[str, str]:
    """Relative path -> sha256 of every file under ``root`` (Python's ``__pycache__`` left out:
    it appears when Triton imports model.py)."""
    if root.is_file():
        return {root.name: _sha256(root)}
    return {
        p.relative_to(root).as_posix(): _sha256(p)
        for p in sorted(root.rglob("*"))
        if p.is_file() and "__pycache__" not in p.relative_to(root).parts
    }


def fingerprint(
    model_dir: Path | None,
    config_json: str,
    *,
    server_version: str,
    package_version: str,
    compiled_model: str | None = None,
) -> dict[str, Any]:
    """What a run measured: the model's files, its config, the workbench and the server."""
    files: dict[str, str] = {}
    if model_dir is not None:
        files = _files(model_dir)
        if compiled_model:
            compiled = Path(compiled_model)
            compiled = compiled if compiled.is_absolute() else model_dir / compiled
            if compiled.exists() and model_dir.resolve() not in compiled.resolve().parents:
                files.update(
                    {
                        f"{compiled_model}:{rel}" if compiled.is_dir() else compiled_model: digest
                        for rel, digest in _files(compiled).items()
                    }
                )
    return {
        "model_files": files,
        "config": hashlib.sha256(config_json.encode()).hexdigest(),
        "server_version": str(server_version),
        "package_version": str(package_version),
    }


def fingerprint_changes(old: dict[str, Any] | None, new: dict[str, Any]) -> list[str]:
    """What differs between two fingerprints, one phrase each (empty when the same). A run
    recorded before fingerprints existed has nothing to compare."""
    if not old:
        return []
    changes = []
    old_files, new_files = old.get("model_files", {}), new.get("model_files", {})
    for rel in sorted(set(old_files) | set(new_files)):
        if rel not in new_files:
            changes.append(f"model file {rel} is gone")
        elif rel not in old_files:
            changes.append(f"model file {rel} is new")
        elif old_files[rel] != new_files[rel]:
            changes.append(f"model file {rel} changed")
    if old.get("config") != new.get("config"):
        changes.append("the model's config changed")
    for key, what in (("server_version", "server version"), ("package_version", "workbench version")):
        if old.get(key) != new.get(key):
            changes.append(f"{what} {old.get(key)} -> {new.get(key)}")
    return changes


def _key(row: dict, key_columns: Sequence[str] = KEY_COLUMNS) -> tuple:
    return tuple(row.get(column) for column in key_columns)


def unique_rows(rows: Iterable[dict], key_columns: Sequence[str] = KEY_COLUMNS) -> list[dict]:
    """One row per point (``key_columns`` identify it), in the order points first appear: its last
    error-free row, else its last."""
    chosen: dict[tuple, dict] = {}
    for row in rows:
        key = _key(row, key_columns)
        if key not in chosen or not row.get("error") or chosen[key].get("error"):
            chosen[key] = row
    return list(chosen.values())


def compact_points(path: Path, key_columns: Sequence[str] = KEY_COLUMNS) -> None:
    """Rewrite ``points.jsonl`` (atomically, good lines byte for byte) keeping one error-free row
    per point: failed rows go, since their points are measured again and appended."""
    if not os.path.lexists(path):
        return
    lines = run_file_text(path).splitlines()
    keep: dict[tuple, str] = {}
    for line in lines:
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue  # a torn last line (read_points has refused any other bad line already)
        if isinstance(row, dict) and not row.get("error"):
            keep[_key(row, key_columns)] = line  # the last good row, where the point first appeared
    text = "".join(line + "\n" for line in keep.values())
    if text == "".join(line + "\n" for line in lines):
        return
    atomic_write(path, text)


def set_aside(out_dir: Path, keep: Iterable[str] = ()) -> Path:
    """Move a run folder's contents to ``<name>.replaced-<n>`` beside it (kept, never deleted), so a
    new run can start in ``out_dir``; returns where they went. The entries named in ``keep`` stay
    (the lock file of the sweep that is setting the folder aside: moving it with the rest would
    leave ``out_dir`` unlocked while that sweep writes it)."""
    n = 1
    while (target := out_dir.with_name(f"{out_dir.name}.replaced-{n}")).exists():
        n += 1
    target.mkdir()
    for entry in sorted(out_dir.iterdir()):
        if entry.name not in keep:
            os.rename(entry, target / entry.name)
    return target


def resumed_rows(
    out_dir: Path,
    record: Mapping[str, Any],
    *,
    model: str,
    different: Sequence[str],
    measured: Mapping[str, Any],
    digests: Mapping[str, str],
    key_columns: Sequence[str] = KEY_COLUMNS,
    int_columns: Sequence[str] = INT_COLUMNS,
) -> list[dict]:
    """The rows a resume keeps of the run in ``out_dir`` (its record ``record``): one per point,
    failed points left out (they are measured again), once the run is known to have measured what
    this session measures. Refused (SweepError, naming what differs) when:

    - ``different`` is not empty: the sweep's own settings that differ from the record's, one
      phrase each in that sweep's words (the tensor sweep's measurement settings and engine, the
      LLM sweep's lengths, SLO and prompts), or the record names another ``model``;
    - the record's fingerprint differs from ``measured``, this session's (`fingerprint`);
    - a saved row measured another model, or a variant whose config digest differs from the one
      in ``digests`` (a points file copied from another run).

    ``key_columns``/``int_columns``: the sweep's row type (an LLM sweep's are its own). The points
    file is compacted first (`compact_points`), so it holds one error-free row per point.
    """
    recorded = record.get("model")
    different = ([f"model {recorded!r} -> {model!r}"] if recorded is not None and recorded != model else []) + list(
        different
    )
    if different:
        raise SweepError(
            f"cannot resume the run in {out_dir} with other settings ({'; '.join(different)}); "
            "use the same settings or another folder"
        )
    changed = fingerprint_changes(record.get("fingerprint"), dict(measured))
    if changed:
        raise SweepError(
            f"cannot resume the run in {out_dir}: what it measured has changed ({'; '.join(changed)}); "
            "its points would not be comparable. Start a new run (new_run=True, --new-run: the old "
            "one is kept beside it) or use another folder"
        )
    points = out_dir / POINTS_FILE
    compact_points(points, key_columns)
    rows = [
        row
        for row in unique_rows(read_points(points, key_columns, int_columns), key_columns)
        if not row.get("error") and stamped(row)
    ]  # an unstamped row is measured again, never reused
    _refuse_foreign_rows(out_dir, rows, model, digests)
    return rows


def stamped(row: Mapping[str, Any]) -> bool:
    """Whether a saved row says what it measured (the model and its variant's digest), as every
    row a sweep writes does: one without is from elsewhere or hand-edited, and is not reused."""
    return bool(row.get("model")) and bool(row.get("config_digest"))


def _refuse_foreign_rows(out_dir: Path, rows: list[dict], model: str, digests: Mapping[str, str]) -> None:
    """Rows that say they measured another model, or another config of a variant, are not this
    run's points (a points file copied from another run): refused, naming the difference."""
    others = sorted({str(r["model"]) for r in rows if r.get("model") is not None and r["model"] != model})
    if others:
        raise SweepError(
            f"cannot resume the run in {out_dir}: its {POINTS_FILE} holds points of model "
            f"{', '.join(map(repr, others))}, not {model!r}; use another folder"
        )
    changed = sorted(
        {
            str(r["variant"])
            for r in rows
            if r.get("config_digest") is not None
            and r.get("variant") in digests
            and r["config_digest"] != digests[r["variant"]]
        }
    )
    if changed:
        raise SweepError(
            f"cannot resume the run in {out_dir}: the config of variant(s) {', '.join(changed)} "
            "differs from the one their saved points measured; use another folder"
        )
