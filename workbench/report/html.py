"""A `Report` as one self-contained HTML file: styles inline, every plot an inline SVG, no script,
no link to fetch, so it opens offline in any browser and can be mailed or attached to an issue.

Each part has an id the tests (and readers' links) find it by: ``best``, ``reproduce``, ``plots``,
``tables``, ``bounded`` (a search's run), ``unstable``, ``differences``, ``facts``.
"""

from __future__ import annotations

import html
from pathlib import Path

from workbench import __version__
from workbench.files import atomic_write
from workbench.measure.store.table import SCROLL_CLASS, table_html
from workbench.report.run_report import Report

__all__ = ["report_html", "write_report", "save_report"]

_CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:24px auto;max-width:1200px;padding:0 16px;
color:#222;line-height:1.4}
h1{font-size:22px;margin:0 0 4px 0}h2{font-size:17px;margin:28px 0 8px 0;border-bottom:1px solid #ccc}
.subtitle{color:#555;margin:0 0 16px 0}
#best p{font-weight:600;background:#eef6ee;border-left:4px solid #3a7d44;padding:8px 12px;margin:4px 0}
pre{background:#f5f5f5;border:1px solid #ddd;padding:8px 12px;overflow-x:auto;font-size:12px}
pre.reproduce{white-space:pre-wrap;overflow-wrap:anywhere}
.facts{display:grid;grid-template-columns:repeat(auto-fill,minmax(min(360px,100%),1fr));gap:8px 24px}
.facts>div{min-width:0;overflow-wrap:anywhere}
.facts table{border-collapse:collapse;font-size:13px}.facts th{text-align:left;padding:1px 12px 1px 0;
color:#555;font-weight:normal;vertical-align:top;width:35%}.facts td{padding:1px 0}
figure{margin:12px 0}figure svg{max-width:100%;height:auto}figcaption{font-weight:600;margin-bottom:4px}
.note{color:#555;font-size:13px}
"""


def _facts_html(report: Report) -> str:
    blocks = []
    for facts in report.facts:
        rows = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in facts.lines)
        blocks.append(
            f"<div><h3 style='font-size:14px;margin:8px 0 4px 0'>{html.escape(facts.title)}</h3>"
            f"<table>{rows}</table></div>"
        )
    return f"<div class='facts'>{''.join(blocks)}</div>"


def _reproduce_html(report: Report) -> str:
    if not report.reproduce:
        return "<p>The run record holds no model directory or plan to measure it again from.</p>"
    parts = [
        f"<h3 style='font-size:14px;margin:8px 0 4px 0'>{html.escape(kind)}</h3>"
        f"<pre class='reproduce' data-kind='{html.escape(kind, quote=True)}'>{html.escape(text)}</pre>"
        for kind, text in report.reproduce
    ]
    return "".join(parts) + f"<p class='note'>{html.escape(report.reproduce_note)}</p>"


def report_html(report: Report) -> str:
    """The whole report as one HTML document."""
    best = "".join(f"<p>{html.escape(line)}</p>" for line in report.best.splitlines())
    plots = "".join(
        f"<figure class='plot'><figcaption>{html.escape(p.title)}</figcaption>{p.svg}</figure>" for p in report.plots
    )
    tables = "".join(
        f"<h3 style='font-size:14px;margin:12px 0 4px 0'>{html.escape(title)}</h3>"
        + table_html(table, scroll_class=SCROLL_CLASS)
        for title, table in report.tables
    )
    unstable = (
        "<p>Every point's windows agreed (stable).</p>"
        if not report.unstable
        else "<p class='note'>Their last windows did not agree within the stability limit; the numbers are over "
        "every measured window, read them with their spread. What the server's statistics show:</p><ul>"
        + "".join(f"<li>{html.escape(line)}</li>" for line in report.unstable)
        + "</ul>"
    )
    differences = (
        ""
        if not report.differences
        else "<section id='differences'><h2>How the runs differ</h2><ul>"
        + "".join(f"<li>{html.escape(line)}</li>" for line in report.differences)
        + "</ul></section>"
    )
    bounded = (
        ""
        if report.bounded is None
        else "<section id='bounded'><h2>Left out by a bound</h2>"
        + (
            "<p>The search left no point out by a bound.</p>"
            if not report.bounded
            else f"<p class='note'>{len(report.bounded)} point(s) the search did not measure: a measured point's "
            "reading decided each (p99 grows with the load: a lighter point past the budget condemns a heavier "
            "one; throughput grows with the load: a heavier point's interval caps a lighter one's).</p><ul>"
            + "".join(f"<li>{html.escape(line)}</li>" for line in report.bounded)
            + "</ul>"
        )
        + "</section>"
    )
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">
<title>{html.escape(report.title)}</title><style>{_CSS}</style></head>
<body>
<h1>{html.escape(report.title)}</h1>
<p class="subtitle">{html.escape(report.subtitle)}</p>
<section id="best"><h2>Best configuration</h2>{best}</section>
{differences}
<section id="reproduce"><h2>Measure it again</h2>{_reproduce_html(report)}</section>
<section id="plots"><h2>Plots</h2><p class="note">Error bars: each point's 95% interval over its measured
windows. Hollow markers: unstable points (below).</p>{plots}</section>
<section id="tables"><h2>Table</h2><p class="note">Hover a cut-off cell or a column title for the whole text.</p>
{tables}</section>
{bounded}
<section id="unstable"><h2>Unstable points</h2>{unstable}</section>
<section id="facts"><h2>What was measured and how</h2>{_facts_html(report)}</section>
<p class="note">Written {html.escape(report.generated)} by triton-neuron-workbench {__version__}.</p>
</body></html>
"""


def write_report(report: Report, path: str | Path) -> Path:
    """Write the report's HTML to ``path`` atomically (a half-written report never replaces a whole one)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, report_html(report))
    return path


def save_report(run, other=None, path: str | Path | None = None, latency_budget_ms: float | None = None) -> Path:
    """Write the report of ``run`` (a `SweepResult` or a run folder), or of ``other`` against ``run``
    when given (B against A), as one HTML file; default ``<folder>/report.html`` (B's folder for a
    comparison: ``report-vs-<A>.html``). Returns its path."""
    # start-up: a report's computation (pandas, matplotlib) loads when one is written
    from workbench.measure.store.results import SavedRun
    from workbench.report.run_report import comparison_report, load_any, run_report

    run = run if isinstance(run, SavedRun) else load_any(run)
    if other is None:
        report, home, name = run_report(run, latency_budget_ms), run.path, "report.html"
    else:
        other = other if isinstance(other, SavedRun) else load_any(other)
        report, home = comparison_report(run, other, latency_budget_ms), other.path
        name = f"report-vs-{Path(run.path).name if run.path else run.label}.html"
    if path is None:
        if home is None:
            raise ValueError("this result has no folder; give the report's path")
        path = Path(home) / name
    return write_report(report, path)
