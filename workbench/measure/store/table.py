"""Tables for people: one renderer for every results table the workbench shows (the sweep tab, the
results tab, ``run.table()`` in a notebook, the run report).

A results frame's columns are snake_case names with the unit in a suffix and full float precision;
read as is, a row of one is 230-420 px tall (long ``note``/``served_by`` text wraps a word per line)
and throughput shows six decimals. Here a frame becomes a `Table` of values first -- short titles
with their units, numbers rounded to what they mean (a measured number to 3 significant digits,
a spread as one low-high range, a count whole, a ratio to 2 decimals, a flag as yes/no), long text
cut to one line with the whole of it as the cell's tooltip -- and then HTML, so a row is one line.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pandas as pd

from workbench.measure.llm.rows import PER_USER_MEANING, TOTAL_MEANING

__all__ = ["Cell", "Column", "Table", "readable_table", "table_html", "TABLE_CLASS", "TABLE_CSS", "SCROLL_CLASS"]

TABLE_CLASS = "workbench-table"
# Views whose content is meant to scroll inside them (logs, files, wide tables), in the app and the
# report; the browser tests allow their scrollbars and no other.
SCROLL_CLASS = "workbench-scroll"
# Cells never wrap: long text is cut with an ellipsis and kept whole in the tooltip (title).
TABLE_CSS = (
    f".{TABLE_CLASS}{{border-collapse:collapse;font-size:12px;font-variant-numeric:tabular-nums}}"
    f".{TABLE_CLASS} th,.{TABLE_CLASS} td{{padding:2px 8px;white-space:nowrap;border-bottom:1px solid #ddd}}"
    f".{TABLE_CLASS} th{{text-align:left;font-weight:600;border-bottom:1px solid #888}}"
    f".{TABLE_CLASS} td.num{{text-align:right}}"
    f".{TABLE_CLASS} td.text{{max-width:18em;overflow:hidden;text-overflow:ellipsis}}"
    f".{TABLE_CLASS} td.text[title]{{cursor:help;text-decoration:underline dotted #999}}"
)


@dataclass(frozen=True)
class Column:
    """A column as a person reads it: a short title, its unit (``""`` for none) and the full
    meaning as the header's tooltip."""

    title: str
    unit: str = ""
    meaning: str = ""

    @property
    def heading(self) -> str:
        return f"{self.title} ({self.unit})" if self.unit else self.title


@dataclass(frozen=True)
class Cell:
    """What a cell shows, its tooltip (the whole text, when it was cut) and whether it is a number."""

    text: str
    tooltip: str = ""
    number: bool = False


@dataclass(frozen=True)
class Table:
    """A results table as values: the structure every medium renders (`table_html`, the report)."""

    columns: tuple[Column, ...]
    rows: tuple[tuple[Cell, ...], ...]
    source: tuple[str, ...]  # the frame's column each column came from

    def text(self, row: int, source_column: str) -> str:
        return self.rows[row][self.source.index(source_column)].text


def _missing(value: Any) -> bool:
    return value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value))


def significant(value: Any, digits: int = 3) -> str:
    """A measured number to ``digits`` significant digits, never in exponent form (1234.5 -> 1230,
    0.012345 -> 0.0123): a sweep's spread is a few percent, so more digits say nothing."""
    if _missing(value):
        return ""
    value = float(value)
    if value == 0 or not math.isfinite(value):
        return f"{value:g}"
    decimals = digits - 1 - math.floor(math.log10(abs(value)))
    return f"{round(value, decimals):.{max(decimals, 0)}f}"


def _count(value: Any) -> str:
    return "" if _missing(value) else f"{float(value):.0f}"


def _ratio(value: Any) -> str:
    return "" if _missing(value) else f"x{float(value):.2f}"


def _percent(value: Any) -> str:
    return "" if _missing(value) else f"{float(value):.0%}"


def _known_count(value: Any) -> str:
    """A count where a negative number means "not kept" (the server's token count without metrics)."""
    return "" if _missing(value) or float(value) < 0 else _count(value)


def _fixed(decimals: int) -> Callable[[Any], str]:
    return lambda value: "" if _missing(value) else f"{float(value):.{decimals}f}"


def _flag(value: Any) -> str:
    if _missing(value):
        return ""
    if isinstance(value, str):
        value = value.strip().lower() == "true"
    return "yes" if value else "NO"


# column -> (title, unit, how its numbers read, meaning). Text columns have no formatter.
_KNOWN: dict[str, tuple[str, str, Callable[[Any], str] | None, str]] = {
    "server": ("server", "", None, "the server that measured the row"),
    "served_by": ("served by", "", None, "the Triton backend that served the variant"),
    "model": ("model", "", None, ""),
    "variant": ("variant", "", None, "allocation, batching and backend parameters"),
    "allocation": ("alloc", "", None, "instances x cores per instance"),
    "batching": ("batching", "", None, "dynamic batching settings"),
    "parameters": ("params", "", None, "the backend's parameters"),
    "batch_size": ("batch", "", _count, "requests' batch size"),
    "concurrency": ("conc", "", _count, "requests in flight"),
    "throughput": ("throughput", "infer/s", significant, "inferences per second"),
    "p50_ms": ("p50", "ms", significant, "median latency"),
    "p90_ms": ("p90", "ms", significant, ""),
    "p95_ms": ("p95", "ms", significant, ""),
    "p99_ms": ("p99", "ms", significant, "99th percentile latency"),
    "mean_ms": ("mean", "ms", significant, ""),
    "stable": ("stable", "", _flag, "the last 3 windows agreed within 10%"),
    "windows": ("windows", "", _count, "measurement windows"),
    "stopped": ("stopped", "", None, "why the point's windows ended: stable, a limit, or the effort rule's verdict"),
    "requests": ("requests", "", _count, "latencies pooled"),
    "failures": ("failed", "", _count, "failed requests"),
    "send_delay_us": ("send delay", "µs", significant, "the load generator's delay before each send"),
    "client_cpu_us": ("client CPU", "µs/req", significant, "the load generator's CPU per request"),
    "outputs_ok": ("outputs ok", "", _flag, "outputs matched the model's"),
    "avg_batch": ("exec batch", "", _fixed(1), "the batch size the server executed, on average"),
    "queue_ms": ("queue", "ms", significant, "time in the server's queue per request"),
    "compute_input_ms": ("in", "ms", significant, "server: input copy"),
    "compute_infer_ms": ("infer", "ms", significant, "server: the model's compute"),
    "compute_output_ms": ("out", "ms", significant, "server: output copy"),
    "overhead_ms": ("overhead", "ms", significant, "server: time outside queue and compute"),
    "engine": ("engine", "", None, "what measured the point"),
    "note": ("note", "", None, "what the server's statistics show about the point"),
    "warnings": ("warnings", "", None, ""),
    "error": ("error", "", None, ""),
    "label": ("run", "", None, ""),
    "status": ("status", "", None, ""),
    "points": ("points", "", _count, ""),
    "planned": ("planned", "", _count, ""),
    "started": ("started", "", None, ""),
    "ended": ("ended", "", None, ""),
    "best_throughput": ("best", "infer/s", significant, "the highest usable throughput"),
    "path": ("folder", "", None, ""),
    # an LLM sweep's rows (measure/llm/rows.py): measured in tokens
    "max_num_seqs": ("max seqs", "", _count, "vLLM's max_num_seqs: sequences batched at once"),
    "tensor_parallel": ("TP", "", _count, "tensor-parallel degree: cores per instance"),
    "instances": ("instances", "", _count, "model instances"),
    "request_rate": ("rate", "req/s", significant, "requests sent per second"),
    "output_tokens_per_s": ("output", "tok/s", significant, f"total output tokens/s: {TOTAL_MEANING}"),
    "tokens_per_user_per_s": ("per user", "tok/s", significant, f"output tokens/s per user: {PER_USER_MEANING}"),
    "requests_per_s": ("requests", "req/s", significant, "requests finished per second"),
    "ttft_p50_ms": ("TTFT p50", "ms", significant, "time to first token, median"),
    "ttft_p99_ms": ("TTFT p99", "ms", significant, "time to first token, 99th percentile"),
    "itl_p50_ms": ("ITL p50", "ms", significant, "inter-token latency, median"),
    "itl_p99_ms": ("ITL p99", "ms", significant, "inter-token latency, 99th percentile"),
    "goodput": ("goodput", "", _percent, "share of requests meeting the SLO"),
    "client_cpu_us_per_token": ("client CPU", "µs/tok", significant, "the load generator's CPU per output token"),
    "client_output_tokens": ("tokens (client)", "", _count, "output tokens the client received"),
    "server_output_tokens": ("tokens (server)", "", _known_count, "output tokens the server counted itself"),
    "usd_per_million_output_tokens": ("cost", "$/M tok", significant, "price per million output tokens"),
}
# Spread columns shown as one "low-high" range beside their number.
_RANGES = {
    "throughput_low": ("throughput_high", "95% range", "infer/s"),
    "p99_low_ms": ("p99_high_ms", "p99 95% range", "ms"),
    "output_tokens_per_s_low": ("output_tokens_per_s_high", "95% range", "tok/s"),
}
_HIDDEN = {high for high, _, _ in _RANGES.values()}
_TEXT_LIMIT = 28  # characters a text cell shows before it is cut (the rest is the tooltip)


def _describe(name: str) -> tuple[str, str, Callable[[Any], str] | None, str]:
    """Title, unit, formatter and meaning of a column, also for suffixed ones (``throughput_a``,
    ``p99_ratio``) and columns this module does not know (their unit read from the name)."""
    if name in _KNOWN:
        return _KNOWN[name]
    if name.endswith("_ratio"):
        base = _describe(name.removesuffix("_ratio") + ("_ms" if name.startswith("p") else ""))
        return (base[0], "B/A", _ratio, f"{base[0]} of run B over run A")
    for suffix, mark in (("_a", " A"), ("_b", " B")):
        if name.endswith(suffix) and name.removesuffix(suffix) in _KNOWN:
            title, unit, fmt, meaning = _KNOWN[name.removesuffix(suffix)]
            return title + mark, unit, fmt, meaning
    for suffix, unit in (("_ms", "ms"), ("_us", "µs"), ("_s", "s")):
        if name.endswith(suffix):
            return name.removesuffix(suffix).replace("_", " "), unit, significant, ""
    return name.replace("_", " "), "", None, ""


def _text_cell(value: Any) -> Cell:
    if _missing(value):
        return Cell("")
    text = " ".join(str(value).split())
    if len(text) <= _TEXT_LIMIT:
        return Cell(text)
    return Cell(text[: _TEXT_LIMIT - 1].rstrip() + "…", tooltip=text)


def _value_cell(value: Any, formatter: Callable[[Any], str] | None) -> Cell:
    if formatter is None:
        if isinstance(value, float) and not _missing(value):
            return Cell(significant(value), number=True)
        return _text_cell(value) if not isinstance(value, (bool, int)) else Cell(str(value), number=True)
    return Cell(formatter(value), number=True)


def readable_table(frame: pd.DataFrame) -> Table:
    """``frame`` as a `Table` people read: titles with units, rounded numbers, one-line text cells."""
    columns, source, makers = [], [], []
    for name in frame.columns:
        if name in _HIDDEN:
            continue
        if name in _RANGES and _RANGES[name][0] in frame.columns:
            high, title, unit = _RANGES[name]
            columns.append(Column(title, unit, "a 95% interval over the pooled windows"))
            source.append(name)
            makers.append(
                lambda row, low=name, high=high: Cell(
                    "" if _missing(row[low]) else f"{significant(row[low])}–{significant(row[high])}", number=True
                )
            )
            continue
        title, unit, formatter, meaning = _describe(str(name))
        columns.append(Column(title, unit, meaning or str(name)))
        source.append(str(name))
        makers.append(lambda row, name=name, formatter=formatter: _value_cell(row[name], formatter))
    rows = tuple(tuple(make(row) for make in makers) for _, row in frame.iterrows())
    return Table(tuple(columns), rows, tuple(source))


def table_html(table: Table | pd.DataFrame, *, scroll_class: str = "") -> str:
    """A `Table` (or a frame, made one) as an HTML table whose rows are one line tall, inside a box
    that scrolls sideways by itself when the table is wider than its place."""
    if isinstance(table, pd.DataFrame):
        table = readable_table(table)
    head = "".join(
        f"<th title='{html.escape(c.meaning, quote=True)}'>{html.escape(c.heading)}</th>" for c in table.columns
    )
    body = []
    for row in table.rows:
        cells = []
        for cell in row:
            kind = "num" if cell.number else "text"
            tip = f" title='{html.escape(cell.tooltip, quote=True)}'" if cell.tooltip else ""
            cells.append(f"<td class='{kind}'{tip}>{html.escape(cell.text)}</td>")
        body.append(f"<tr>{''.join(cells)}</tr>")
    classes = " ".join(c for c in (scroll_class, "workbench-table-box") if c)
    return (
        f"<div class='{classes}' style='overflow-x:auto;max-width:100%'><style>{TABLE_CSS}</style>"
        f"<table class='{TABLE_CLASS}'><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table></div>"
    )
