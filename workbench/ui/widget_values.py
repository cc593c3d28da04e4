"""Turn plain results into things a widget can show without a frontend: highlighted HTML and PNG
bytes.

Rendering to values (an HTML string, PNG bytes) instead of displaying inside an ``Output``
context keeps every panel testable in plain pytest and safe to update from worker threads.
"""

from __future__ import annotations

import html
import io
from collections.abc import Mapping
from typing import Any

from pygments import highlight as _pygments_highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import get_lexer_by_name

from workbench.coremap import CoreMap
from workbench.measure.store.results import SweepResult, node_name
from workbench.measure.store.table import table_html as readable_table_html
from workbench.ui.layout import SCROLL_CLASS

# Inline styles: the HTML widget has no stylesheet for pygments' CSS classes.
_FORMATTER = HtmlFormatter(noclasses=True, style="default", nowrap=False)

_LEXERS = {"pbtxt": "protobuf", "python": "python", "bash": "bash", "text": "text", "diff": "diff"}


def highlight(text: str, language: str) -> str:
    """HTML for ``text`` coloured as ``language`` (``pbtxt``, ``python``, ``bash``, ``diff``, ``text``)."""
    lexer = get_lexer_by_name(_LEXERS.get(language, language))
    return _pygments_highlight(text, lexer, _FORMATTER)


def preformatted(text: str) -> str:
    """Plain text in a ``<pre>`` block, escaped (logs, core maps, error lists)."""
    return f"<pre style='margin:0'>{html.escape(text)}</pre>"


def error_list(problems: list[str]) -> str:
    """Inline validation messages: red, one per line; empty string when there are none."""
    if not problems:
        return ""
    items = "".join(f"<li>{html.escape(p)}</li>" for p in problems)
    return f"<ul style='color:#b00020;margin:0'>{items}</ul>"


def field_problem_html(problems: list[str]) -> str:
    """The messages shown directly under one control: red lines, no bullets (the control above is
    what they are about); empty string when there are none."""
    return "".join(f"<div style='color:#b00020;line-height:1.3'>{html.escape(p)}</div>" for p in problems)


_DPI, _SCALE = 90, 2  # drawn at twice the pixels it is shown at: sharp on a high-density screen


def figure_png(figure) -> bytes:
    """PNG bytes of a matplotlib Figure, for ``widgets.Image(value=...)``, at twice its shown size
    (`show_figure` sets that size). The workbench's plots are built without pyplot, so rendering them
    from a worker thread touches no global figure state."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=_DPI * _SCALE, bbox_inches="tight")
    return buffer.getvalue()


def show_figure(image, figure) -> None:
    """Put ``figure`` in an Image widget at its natural size (never wider than the panel): a PNG
    left to the page's width was stretched and blurry at 1920 px."""
    png = figure_png(figure)
    width = int.from_bytes(png[16:20], "big") // _SCALE  # the IHDR chunk's width
    image.layout.width = f"{width}px"
    image.value = png


def core_map_html(cmap: CoreMap) -> str:
    """A row of cells per core coloured by owning instance; idle cores are flagged in red."""
    palette = ["#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#76b7b2", "#edc948", "#9c755f", "#e15759"]
    owner = {core: k for k in range(cmap.instances) for core in cmap.cores(k)}
    cells = []
    for core in range(cmap.start, cmap.end + 1):
        if core in owner:
            colour, label = palette[owner[core] % len(palette)], f"i{owner[core]}"
        else:
            colour, label = "#ffffff", "idle"
        border = "2px dashed #b00020" if core not in owner else "1px solid #555"
        cells.append(
            f"<div title='core {core}' style='background:{colour};border:{border};padding:2px 6px;"
            f"min-width:2.5em;text-align:center;font-size:11px'>{core}<br>{label}</div>"
        )
    # cells wrap onto more rows: a 100-core range made one row that scrolled the whole panel sideways
    cells_html = f"<div class='workbench-core-map' style='display:flex;flex-wrap:wrap;gap:2px'>{''.join(cells)}</div>"
    return cells_html + preformatted(cmap.describe())


def frame_html(frame) -> str:
    """A table for people (`workbench.measure.store.table`: short titles with units, rounded numbers, one-line
    rows with long text as tooltips) in a box that scrolls sideways by itself when the table is wider
    than the panel (the page around it never does)."""
    return readable_table_html(frame, scroll_class=SCROLL_CLASS)


def table_html(result: SweepResult) -> str:
    """The readable columns of a run under which engine measured it and why."""
    if result.frame.empty:
        return "<i>no points yet</i>"
    note = f"<div><i>{html.escape(result.engine_note)}</i></div>" if result.engine_note else ""
    return note + frame_html(result.table())


def best_html(result: SweepResult, budget_ms: float | None) -> str:
    return f"<div style='font-weight:bold'>{html.escape(result.describe_best(budget_ms))}</div>"


def server_view_html(view, label: str = "") -> str:
    """The server side of the point running now (a `measure.live.ServerView`): queue against
    compute time per request as one bar, pending requests and the executed batch size."""
    # the client's progress line, then the server's own statistics of the model: two sources, said apart
    client = f"<div>{html.escape(label)}</div>" if label else ""
    head = client + f"<b>server side of {html.escape(view.model)}</b> (its statistics, last {view.interval_s:.1f} s): "
    if not view.requests:
        return head + f"<i>no request of {html.escape(view.model)} finished in these {view.interval_s:.1f} s</i>"
    share = view.queue_share or 0.0
    bar = (
        f"<span style='display:inline-block;width:200px;height:10px;vertical-align:middle;border:1px solid #555;"
        f"background:linear-gradient(90deg,#e8a33d {share:.0%},#3d7de8 {share:.0%})'></span>"
    )
    pending = "n/a (no metrics)" if view.pending is None else f"{view.pending:g}"
    batch = "n/a" if view.avg_batch is None else f"{view.avg_batch:.2f}"
    return (
        head + f"queue {view.queue_ms:.2f} ms {bar} compute {view.compute_ms:.2f} ms per request; "
        f"pending requests {pending}; executed batch size {batch} "
        f"({view.requests} requests in {view.executions} executions)"
    )


def ray_nodes_html(record: Mapping[str, Any]) -> str:
    """A Ray sweep node by node, from its run record: the dashboard's address, then per node what it
    measured (whole variants, already in the run) and what it is measuring now (points of the
    variant so far, and its last word)."""
    dashboard = record.get("dashboard")
    if dashboard:
        link = html.escape(dashboard, quote=True)
        head = f"Ray dashboard: <a href='{link}' target='_blank'>{html.escape(dashboard)}</a>"
    else:
        head = "Ray dashboard: none on this cluster (Ray Core runs without it; ray[default] on the head brings it)"
    measured: dict[str, dict] = record.get("nodes") or {}
    running: dict[str, dict] = record.get("running") or {}
    nodes = list(measured) + [m["node"] for m in running.values() if m["node"] not in measured]
    rows = []
    for node in dict.fromkeys(nodes):
        entry = measured.get(node, {})
        address = entry.get("address") or next((m["address"] for m in running.values() if m["node"] == node), "")
        now = [
            f"{html.escape(label)}: {m['done']}/{m['total']} points ({html.escape(m['message'][-60:])})"
            for label, m in running.items()
            if m["node"] == node
        ]
        rows.append(
            f"<tr><td><code>{html.escape(node_name(node))}</code></td><td>{html.escape(address)}</td>"
            f"<td>{html.escape(', '.join(entry.get('variants', [])) or '-')}</td>"
            f"<td>{'<br>'.join(now) or 'idle'}</td></tr>"
        )
    if not rows:
        none = (
            "no node has started a variant yet" if record.get("status") == "running" else "no node measured a variant"
        )
        return f"<div>{head}</div><div><i>{none}</i></div>"
    table = (
        "<table><tr><th>node</th><th>address</th><th>measured</th><th>measuring now</th></tr>"
        + "".join(rows)
        + "</table>"
    )
    return f"<div>{head}</div>{table}"
