"""Why a point looks surprising, in the words of the server's own statistics: an unstable point,
or a p50 that falls as the batch grows. Plain arithmetic on a results table (no measuring).

The numbers are Triton's per-request averages the sweep recorded (queue, compute, executed
batch); a note says what they show, never a cause they cannot show.
"""

from __future__ import annotations

import math

import pandas as pd

__all__ = ["point_notes"]

_GROUP = ("variant", "batching", "parameters", "concurrency")


def _num(row: pd.Series, column: str) -> float:
    try:
        value = float(row.get(column))
    except (TypeError, ValueError):
        return math.nan
    return value


def _compute(row: pd.Series) -> float:
    return sum(
        v
        for v in (_num(row, c) for c in ("compute_input_ms", "compute_infer_ms", "compute_output_ms"))
        if not math.isnan(v)
    )


def _unstable_note(row: pd.Series) -> str:
    queue, compute, p50 = _num(row, "queue_ms"), _compute(row), _num(row, "p50_ms")
    windows, batch = _num(row, "windows"), _num(row, "avg_batch")
    text = "unstable"
    if not math.isnan(windows):
        text += f" after {windows:.0f} windows"
    if math.isnan(queue) or math.isnan(p50):
        return text + " (no server statistics recorded)"
    text += f": in the server queue {queue:.2f} ms + compute {compute:.2f} ms of p50 {p50:.2f} ms"
    if not math.isnan(batch):
        text += f", executed batch {batch:.1f}"
    if queue > compute:
        text += "; requests waited longer than they computed (the load outruns the instances)"
    elif queue + compute < 0.5 * p50:
        text += "; most of the time is outside the server (client, network, a busy machine)"
    return text


def _falling_note(row: pd.Series, first: pd.Series) -> str:
    return (
        f"p50 below batch {first['batch_size']:.0f}'s ({_num(first, 'p50_ms'):.2f} ms): compute "
        f"{_compute(row):.2f} vs {_compute(first):.2f} ms, queue {_num(row, 'queue_ms'):.2f} vs "
        f"{_num(first, 'queue_ms'):.2f} ms, executed batch {_num(row, 'avg_batch'):.1f} vs "
        f"{_num(first, 'avg_batch'):.1f}"
    )


def point_notes(frame: pd.DataFrame) -> pd.Series:
    """One note per row ("" when nothing is surprising), aligned with ``frame``'s index."""
    notes = pd.Series("", index=frame.index, dtype=object)
    if frame.empty or "p50_ms" not in frame.columns:
        return notes
    group = [c for c in _GROUP if c in frame.columns]
    measured = frame[frame["p50_ms"].notna()]
    for _, rows in measured.groupby(group, sort=False, dropna=False) if group else [(None, measured)]:
        rows = rows.sort_values("batch_size")
        first = rows.iloc[0]
        for index, row in rows.iloc[1:].iterrows():
            if _num(row, "p50_ms") < _num(first, "p50_ms"):
                notes[index] = _falling_note(row, first)
    for index, row in measured.iterrows():
        if str(row.get("stable")).strip().lower() in ("false", "0"):
            notes[index] = "; ".join(filter(None, [_unstable_note(row), notes[index]]))
    return notes
