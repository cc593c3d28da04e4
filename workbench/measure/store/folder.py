"""A run folder on disk: ``points.jsonl`` (each point appended and synced the moment it is
measured, so a crash loses at most the point in flight and a resume knows what is done),
``run.json`` (the run record: versions, machine, plan, every variant's config, settings, sessions)
and the exports ``results.csv`` / ``results.json``, rewritten atomically after every point. Every
file is strict JSON both ways: NaN and infinities are written as null and refused when read.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from workbench.files import NotRegularFile, atomic_write, open_regular, read_text, strict_json
from workbench.measure.grid.rows import COLUMNS, INT_COLUMNS, KEY_COLUMNS
from workbench.measure.store.run_record import RunRecord
from workbench.refusals import WorkbenchError

__all__ = [
    "POINTS_FILE",
    "RECORD_FILE",
    "SCREENING_FILE",
    "CSV_FILE",
    "JSON_FILE",
    "ResultsError",
    "RunRecord",
    "read_record",
    "run_file_text",
    "frame_from_rows",
    "read_points",
    "append_point",
    "points_text",
    "write_exports",
    "write_record",
]

POINTS_FILE = "points.jsonl"
RECORD_FILE = "run.json"
# A search's short screening measurements: they chose what to measure in full and are no results.
SCREENING_FILE = "screening.jsonl"
CSV_FILE = "results.csv"
JSON_FILE = "results.json"


class ResultsError(WorkbenchError, ValueError):
    """A run folder or table that cannot be read or compared; the message names the file or column."""


def frame_from_rows(
    rows: Iterable[dict], columns: Sequence[str] = COLUMNS, int_columns: Sequence[str] = INT_COLUMNS
) -> pd.DataFrame:
    """The results table in its documented column order (extra columns kept at the end);
    ``columns``/``int_columns``: another row type's (an LLM sweep's ``LlmRow``)."""
    frame = pd.DataFrame(list(rows))
    for column in columns:
        if column not in frame.columns:
            frame[column] = None
    extra = [c for c in frame.columns if c not in columns]
    frame = frame[list(columns) + extra]
    for column in int_columns:
        if frame[column].notna().all():
            frame[column] = frame[column].astype("int64")
    return frame


def _dump_line(row: dict) -> str:
    """Strict JSON (NaN and infinities are not JSON): a number not measured is written as null."""
    clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in row.items()}
    return json.dumps(clean, sort_keys=True, default=str, allow_nan=False)


def points_text(rows: Iterable[dict]) -> str:
    """A whole points.jsonl's text: one strict-JSON row a line."""
    return "".join(_dump_line(row) + "\n" for row in rows)


def _strict(value: Any) -> Any:
    """``value`` with every NaN or infinity (anywhere in it) as None, so it is strict JSON."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _strict(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_strict(v) for v in value]
    return value


def run_file_text(path: Path) -> str:
    """A run file's text, read only when it is a regular file (`workbench.files.read_text`: no
    symlink followed, no FIFO, no device) of bounded size; ResultsError names the file and, for
    bytes that are not UTF-8, the line."""
    try:
        return read_text(path)
    except OSError as err:
        raise ResultsError(f"{path}: {err.strerror or err}; a run file must be a regular file") from None
    except ValueError as err:
        raise ResultsError(f"{err}; fix or remove it") from None


def _point_row(path: Path, number: int, row: dict, int_columns: Sequence[str]) -> dict:
    """``row`` with its whole-number columns as integers; a value that is not one is an error
    naming the line (a hand-edited ``"batch_size": "1"`` would otherwise count as another point)."""
    for column in int_columns:
        value = row.get(column)
        if value is None or isinstance(value, bool):
            continue
        if isinstance(value, int):
            continue
        try:
            whole = int(str(value).strip())
        except ValueError:
            raise ResultsError(
                f"{path} line {number}: {column} {value!r} is not a whole number; fix or remove the line"
            ) from None
        row[column] = whole
    return row


def read_points(
    path: str | Path, key_columns: Sequence[str] = KEY_COLUMNS, int_columns: Sequence[str] = INT_COLUMNS
) -> list[dict]:
    """Rows of a points.jsonl file. A torn last line (a crash while appending) is dropped; a bad
    line anywhere else is an error naming the line. ``key_columns``/``int_columns``: another row
    type's (an LLM sweep's)."""
    path = Path(path)
    if not os.path.lexists(path):
        return []
    lines = run_file_text(path).splitlines()
    rows = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = strict_json(line)
        except ValueError as err:  # JSONDecodeError, or Infinity/NaN (not JSON: results.json must stay strict)
            if number == len(lines) and isinstance(err, json.JSONDecodeError):
                break
            why = "" if isinstance(err, json.JSONDecodeError) else f" ({err})"
            raise ResultsError(f"{path} line {number} is not a JSON row{why}; fix or remove it") from None
        missing = [c for c in key_columns if c not in row] if isinstance(row, dict) else list(key_columns)
        if missing:
            raise ResultsError(f"{path} line {number} is not a point row (no {', '.join(missing)}); fix or remove it")
        rows.append(_point_row(path, number, row, int_columns))
    return rows


def append_point(path: str | Path, row: dict) -> None:
    """Append one row and sync it to disk before the sweep moves on."""
    path = Path(path)
    try:
        fd = open_regular(path, os.O_RDWR | os.O_CREAT | os.O_APPEND)  # never through a link, into a FIFO
    except NotRegularFile as err:
        raise ResultsError(str(err)) from None
    with os.fdopen(fd, "r+b") as handle:
        handle.seek(0)
        data = handle.read()
        if data and not data.endswith(b"\n"):  # a torn row from a crash: drop it (read_points did)
            handle.truncate(data.rfind(b"\n") + 1)
        handle.write((_dump_line(row) + "\n").encode("utf-8"))
        handle.flush()
        os.fsync(handle.fileno())


def read_record(path: str | Path) -> RunRecord:
    """A run folder's record (``run.json``), of any version (`RunRecord.from_dict`); ResultsError
    says what is wrong with it: missing, not JSON (at which line), or not an object."""
    path = Path(path)
    record_path = path / RECORD_FILE
    if not os.path.lexists(record_path):
        raise ResultsError(f"{path} holds no sweep run (no {RECORD_FILE})")
    text = run_file_text(record_path)
    try:
        record = strict_json(text)
    except json.JSONDecodeError as err:
        raise ResultsError(
            f"{record_path} line {err.lineno} is not valid JSON ({err.msg}); fix it or start a new run (--new-run)"
        ) from None
    except (ValueError, RecursionError) as err:  # NaN, a repeated key, nested too deep
        raise ResultsError(
            f"{record_path} is not a run record ({err}); fix it or start a new run (--new-run)"
        ) from None
    if not isinstance(record, dict):
        raise ResultsError(f"{record_path} line 1 is not a run record (a JSON object)")
    try:
        return RunRecord.from_dict(record)
    except TypeError as err:  # a known field of the wrong shape the dataclass cannot take
        raise ResultsError(f"{record_path} is not a run record ({err})") from None


def write_record(out_dir: str | Path, record: RunRecord | Mapping[str, Any]) -> Path:
    """Write the run record (`RunRecord.to_dict`; a mapping is read as one first) atomically."""
    path = Path(out_dir) / RECORD_FILE
    atomic_write(
        path,
        json.dumps(
            _strict(RunRecord.from_dict(record).to_dict()), indent=2, sort_keys=True, default=str, allow_nan=False
        )
        + "\n",
    )
    return path


def write_exports(out_dir: str | Path, frame: pd.DataFrame, record: RunRecord | Mapping[str, Any]) -> tuple[Path, Path]:
    """results.csv (the table) and results.json (record + rows, readable on its own)."""
    out_dir = Path(out_dir)
    csv_path, json_path = out_dir / CSV_FILE, out_dir / JSON_FILE
    atomic_write(csv_path, frame.to_csv(index=False))
    rows = [json.loads(_dump_line(r)) for r in frame.astype(object).where(frame.notna(), None).to_dict("records")]
    document = _strict({"record": RunRecord.from_dict(record).to_dict(), "points": rows})
    atomic_write(json_path, json.dumps(document, indent=2, sort_keys=True, default=str, allow_nan=False) + "\n")
    return csv_path, json_path
