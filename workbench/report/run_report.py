"""A run report's contents, computed from saved runs into plain values (`Report`), before any medium:
what was measured and how (model, config, engine, windows, machine, versions), how to measure it
again, the best configuration under the budget, every plot (SVG), the table and the unstable points
explained. One run, two runs compared, and a backend comparison each become one `Report`;
`workbench.report.html.report_html` renders it into one self-contained file.
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Mapping

import matplotlib

from workbench.measure.store import plots
from workbench.measure.store.notes import point_notes
from workbench.measure.store.results import Comparison, ResultsError, SweepResult, compare_runs, load_run
from workbench.report.reproduce import AGAIN_NOTE, reproduce_lines
from workbench.report.table import Table, readable_table

__all__ = ["Facts", "Plot", "Report", "run_report", "comparison_report", "load_any", "figure_svg"]


@dataclass(frozen=True)
class Facts:
    """A titled list of (what, value) lines: "Measured how", "Machine", "Versions"..."""

    title: str
    lines: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Plot:
    title: str
    svg: str  # an <svg> element, no XML prologue: it is embedded as is


@dataclass(frozen=True)
class Report:
    """Everything a report shows, as values (the structure every renderer reads)."""

    title: str
    subtitle: str
    best: str
    reproduce: tuple[tuple[str, str], ...]  # (kind, text): ("command", ...), ("python", ...)
    reproduce_note: str
    facts: tuple[Facts, ...]
    plots: tuple[Plot, ...]
    tables: tuple[tuple[str, Table], ...]
    unstable: tuple[str, ...]
    differences: tuple[str, ...] = ()
    generated: str = field(default_factory=lambda: datetime.now(timezone.utc).isoformat(timespec="seconds"))


def figure_svg(figure: matplotlib.figure.Figure) -> str:
    """The figure as an SVG element (vector, no date, a fixed hash salt: the same run gives the same text)."""
    buffer = io.StringIO()
    with matplotlib.rc_context({"svg.hashsalt": "workbench", "svg.fonttype": "none"}):
        figure.savefig(buffer, format="svg", metadata={"Date": None})
    text = buffer.getvalue()
    return text[text.index("<svg"):]


def load_any(path: str | Path) -> SweepResult:
    """A run folder (``run.json``), a ``results.json``, or a backend comparison's folder (its joined
    ``results.json`` when the folder has no run record of its own)."""
    path = Path(path)
    if path.is_dir() and not (path / "run.json").is_file() and (path / "results.json").is_file():
        return load_run(path / "results.json")
    return load_run(path)


def _text(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "not recorded"
    if isinstance(value, (list, tuple)):
        return ", ".join(str(v) for v in value)
    if isinstance(value, Mapping):
        return "; ".join(f"{k} {v}" for k, v in value.items())
    return str(value)


def _sub_records(run: SweepResult) -> list[dict]:
    """A backend comparison's sub-runs' records (each model's own run.json), else [the run's]."""
    runs = run.record.get("runs") or {}
    records = []
    for folder in runs.values():
        try:
            records.append(load_run(folder).record)
        except (ResultsError, OSError):
            continue
    return records or [run.record]


def _facts(run: SweepResult) -> tuple[Facts, ...]:
    records = _sub_records(run)
    first = records[0]
    settings = first.get("settings") or {}
    engine = first.get("engine") or {}
    plan = first.get("plan") or {}
    config = first.get("base_config") or {}
    measured = [("label", run.label), ("status", run.status if run.record.get("status") else first.get("status", "")),
                ("started", _text(first.get("started"))), ("ended", _text(first.get("ended")))]
    models = [(f"model {r.get('model')}", f"{r.get('model_dir')} (backend {(r.get('base_config') or {}).get('backend', '?')}"
               f", served by {_text(sorted(set((r.get('served_by') or {}).values())) or None)})") for r in records]
    grid = [("batch sizes", _text(plan.get("batch_sizes"))), ("allocations", _text(plan.get("allocations"))),
            ("concurrency", _text(plan.get("concurrency"))), ("core range", _text(plan.get("core_range"))),
            ("backend parameters", _text(plan.get("parameters") or None)),
            ("points", f"{len(run.frame)} measured of {sum(r.get('planned_points') or 0 for r in records)} planned"),
            ("max batch size", _text(config.get("max_batch_size") or config.get("maxBatchSize")))]
    how = [("engine", f"{engine.get('engine', 'not recorded')}: {engine.get('reason', '')}".rstrip(": ")),
           ("protocol", _text(settings.get("protocol"))),
           ("windows", f"{_text(settings.get('window_s'))} s each, stable when the last {_text(settings.get('stable_windows'))}"
                       f" agree within {_pct(settings.get('stability'))}, at most {_text(settings.get('max_windows'))}"
                       f" windows before they lengthen, time limit {_text(settings.get('time_limit_s'))} s"),
           ("latencies per point", f"at least {_text(settings.get('min_latencies'))}"),
           ("warm-up requests", _text(settings.get("warmup_requests"))), ("input seed", _text(settings.get("seed"))),
           ("output check", f"rtol {_text(settings.get('rtol'))}, atol {_text(settings.get('atol'))}"),
           ("server", f"Triton {_text(first.get('server_version'))} at {_text(first.get('url'))}")]
    machine = [(k.replace("_", " "), _text(v)) for k, v in (first.get("machine") or {}).items()]
    versions = [(k, _text(v)) for k, v in (first.get("packages") or {}).items()]
    return (Facts("What was measured", tuple(measured + models + grid)), Facts("How", tuple(how)),
            Facts("Machine", tuple(machine) or (("machine", "not recorded"),)),
            Facts("Versions", tuple(versions) or (("packages", "not recorded"),)))


def _pct(value: Any) -> str:
    try:
        return f"{float(value) * 100:g}%"
    except (TypeError, ValueError):
        return "not recorded"


def _unstable(run: SweepResult) -> tuple[str, ...]:
    frame = run.frame
    if frame.empty or "stable" not in frame.columns:
        return ()
    notes = point_notes(frame)
    flags = frame["stable"].map(lambda v: str(v).strip().lower() in ("false", "0"))
    return tuple(f"{row['variant']}, batch {int(row['batch_size'])}, concurrency {int(row['concurrency'])}: {notes[i]}"
                 for i, row in frame[flags].iterrows())


def _best(run: SweepResult, budget_ms: float | None) -> str:
    """The best configuration's sentence (in a backend comparison it names the backend that won)."""
    return run.describe_best(budget_ms)


def _plots(run: SweepResult) -> list[Plot]:
    drawers: list[tuple[str, Callable]] = [
        ("Throughput against p99 latency", plots.throughput_vs_latency), ("Latency against batch size", plots.latency_vs_batch),
        ("Server-side time per request", plots.server_breakdown), ("Throughput by batch size and allocation", plots.throughput_heatmap)]
    return [Plot(title, figure_svg(draw(run))) for title, draw in drawers]


def _budget(run: SweepResult, budget_ms: float | None) -> float | None:
    return budget_ms if budget_ms is not None else run.record.get("latency_budget_ms")


def run_report(run: SweepResult | str | Path, latency_budget_ms: float | None = None) -> Report:
    """The report of one run (a sweep, or a backend comparison's joined run)."""
    run = run if isinstance(run, SweepResult) else load_any(run)
    budget = _budget(run, latency_budget_ms)
    backends = run.record.get("runs")
    kind = "backend comparison" if backends else "sweep"
    subtitle = f"{kind} {run.label!r}, {run.status}, {len(run.frame)} point(s)" + (
        f"; p99 budget {budget:g} ms" if budget is not None else "; no latency budget (the highest throughput)")
    note = run.engine_note
    table = readable_table(run.table())
    return Report(
        title=f"Run report: {run.record.get('model') or run.label}",
        subtitle=subtitle + (f"; {note}" if note else ""),
        best=_best(run, budget),
        reproduce=tuple(reproduce_lines(run.record, run.path)),
        reproduce_note=AGAIN_NOTE,
        facts=_facts(run),
        plots=tuple(_plots(run)),
        tables=(("Every point", table),),
        unstable=_unstable(run),
    )


def _names(a: SweepResult, b: SweepResult) -> tuple[str, str]:
    """How the report calls the two runs: their labels, with their folders where the labels are the
    same (a run measured again keeps its label)."""
    if a.label != b.label:
        return a.label, b.label
    first, second = (f"{run.label} [{Path(run.path).name if run.path else '?'}]" for run in (a, b))
    return first, second


def comparison_report(a: SweepResult | str | Path, b: SweepResult | str | Path,
                      latency_budget_ms: float | None = None) -> Report:
    """Run B against run A in one report: how they differ, B/A ratios, each run's best, facts and plots."""
    a = a if isinstance(a, SweepResult) else load_any(a)
    b = b if isinstance(b, SweepResult) else load_any(b)
    comparison: Comparison = compare_runs(a, b)
    budget = _budget(a, latency_budget_ms)
    name_a, name_b = _names(a, b)
    facts = tuple(Facts(f"{facts.title} (A: {name_a})", facts.lines) for facts in _facts(a)[:2]) + tuple(
        Facts(f"{facts.title} (B: {name_b})", facts.lines) for facts in _facts(b))
    plots_ = [Plot(f"{name_b} against {name_a}", figure_svg(plots.comparison_plot(comparison)))]
    plots_ += [Plot(f"Throughput against p99 latency ({name})", figure_svg(plots.throughput_vs_latency(run)))
               for run, name in ((a, name_a), (b, name_b))]
    return Report(
        title=f"Comparison: {name_b} against {name_a}",
        subtitle=comparison.summary().splitlines()[-1] if comparison.table.empty else
        f"{len(comparison.table)} common point(s); ratios are B/A",
        best=f"A: {_best(a, budget)}\nB: {_best(b, budget)}",
        reproduce=tuple((f"{kind} (A)", text) for kind, text in reproduce_lines(a.record, a.path)) + tuple(
            (f"{kind} (B)", text) for kind, text in reproduce_lines(b.record, b.path)),
        reproduce_note=AGAIN_NOTE,
        facts=facts,
        plots=tuple(plots_),
        tables=(("Common points, B/A", readable_table(comparison.table)), (f"A: {name_a}", readable_table(a.table())),
                (f"B: {name_b}", readable_table(b.table()))),
        unstable=tuple(f"A: {line}" for line in _unstable(a)) + tuple(f"B: {line}" for line in _unstable(b)),
        differences=tuple(comparison.differences()) + tuple(comparison.summary().splitlines()),
    )

