"""A run report's contents, computed from saved runs into plain values (`Report`), before any medium:
what was measured and how (model, config, engine, windows, machine, versions), how to measure it
again, the best configuration under the budget, every plot (SVG), the table and the unstable points
explained. One run, two runs compared, and a backend comparison each become one `Report`;
`workbench.report.html.report_html` renders it into one self-contained file.
"""

from __future__ import annotations

import io
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import matplotlib

from workbench.measure.store import plots
from workbench.measure.store.notes import point_notes
from workbench.measure.store.results import (
    Comparison,
    ResultsError,
    RunRecord,
    SavedRun,
    SweepResult,
    compare_runs,
    load_run,
    load_saved,
)
from workbench.measure.store.table import Table, readable_table
from workbench.measure.sweep.reproduce import AGAIN_NOTE, reproduce_lines

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
    # a search's run: each point a bound decided, with its reading (empty: none); None: not a search
    bounded: tuple[str, ...] | None = None
    generated: str = field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))


def figure_svg(figure: matplotlib.figure.Figure) -> str:
    """The figure as an SVG element (vector, no date, a fixed hash salt: the same run gives the same text)."""
    buffer = io.StringIO()
    with matplotlib.rc_context({"svg.hashsalt": "workbench", "svg.fonttype": "none"}):
        figure.savefig(buffer, format="svg", metadata={"Date": None})
    text = buffer.getvalue()
    return text[text.index("<svg") :]


def load_any(path: str | Path) -> SavedRun:
    """A run folder (``run.json``) of any sweep kind, a ``results.json``, or a backend comparison's
    folder (its joined ``results.json`` when the folder has no run record of its own)."""
    path = Path(path)
    if path.is_dir() and not (path / "run.json").is_file() and (path / "results.json").is_file():
        return load_run(path / "results.json")
    return load_run(path) if path.is_file() else load_saved(path)


def _text(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "not recorded"
    if isinstance(value, (list, tuple)):
        return ", ".join(str(v) for v in value)
    if isinstance(value, Mapping):
        return "; ".join(f"{k} {v}" for k, v in value.items())
    return str(value)


def _sub_records(run: SweepResult) -> list[RunRecord]:
    """A backend comparison's sub-runs' records (each model's own run.json), else [the run's]."""
    runs = run.record.get("runs") or {}
    records = []
    for name, folder in runs.items():
        # where it was written, else beside the comparison's own record (a folder moved or copied whole)
        tries = [Path(folder)] + ([Path(run.path) / name] if run.path is not None else [])
        for where in tries:
            try:
                records.append(load_run(where).record)
                break
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
    measured = [
        ("label", run.label),
        ("status", run.status if run.record.get("status") else first.get("status", "")),
        ("started", _text(first.get("started"))),
        ("ended", _text(first.get("ended"))),
    ]
    models = [
        (
            f"model {r.get('model')}",
            f"{r.get('model_dir')} (backend {(r.get('base_config') or {}).get('backend', '?')}"
            f", served by {_text(sorted(set((r.get('served_by') or {}).values())) or None)})",
        )
        for r in records
    ]
    grid = [
        ("batch sizes", _text(plan.get("batch_sizes"))),
        ("allocations", _text(plan.get("allocations"))),
        ("concurrency", _text(plan.get("concurrency"))),
        ("core range", _text(plan.get("core_range"))),
        ("backend parameters", _text(plan.get("parameters") or None)),
        ("points", f"{len(run.frame)} measured of {sum(r.get('planned_points') or 0 for r in records)} planned"),
        ("max batch size", _text(config.get("max_batch_size") or config.get("maxBatchSize"))),
    ]
    how = [
        ("engine", f"{engine.get('engine', 'not recorded')}: {engine.get('reason', '')}".rstrip(": ")),
        ("protocol", _text(settings.get("protocol"))),
        (
            "windows",
            _said(
                "{} s each, stable when the last {} agree within {}, at most {} windows before they lengthen",
                settings.get("window_s"),
                settings.get("stable_windows"),
                _pct(settings.get("stability")),
                settings.get("max_windows"),
            )
            + (
                ""
                if "time_limit_s" not in settings
                else ", no time limit"
                if settings["time_limit_s"] is None
                else f", time limit {settings['time_limit_s']} s"
            ),
        ),
        ("latencies per point", _said("at least {}", settings.get("min_latencies"))),
        ("warm-up requests", _text(settings.get("warmup_requests"))),
        ("input seed", _text(settings.get("seed"))),
        ("output check", _said("rtol {}, atol {}", settings.get("rtol"), settings.get("atol"))),
        ("server", _said("Triton {} at {}", first.get("server_version"), first.get("url"))),
    ]
    machine = [(k.replace("_", " "), _text(v)) for k, v in (first.get("machine") or {}).items()]
    versions = [(k, _text(v)) for k, v in (first.get("packages") or {}).items()]
    return (
        Facts("What was measured", tuple(measured + models + grid)),
        Facts("How", tuple(how)),
        Facts("Machine", tuple(machine) or (("machine", "not recorded"),)),
        Facts("Versions", tuple(versions) or (("packages", "not recorded"),)),
    )


def _said(template: str, *values: Any) -> str:
    """``template`` filled with ``values``; "not recorded" alone when one of them is (never "at least
    not recorded" or "Triton not recorded at not recorded")."""
    texts = [_text(value) for value in values]
    return "not recorded" if "not recorded" in texts else template.format(*texts)


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
    return tuple(
        f"{row['variant']}, batch {int(row['batch_size'])}, concurrency {int(row['concurrency'])}: {notes[i]}"
        for i, row in frame[flags].iterrows()
    )


def _best(run: SweepResult, budget_ms: float | None) -> str:
    """The best configuration's sentence (in a backend comparison it names the backend that won)."""
    return run.describe_best(budget_ms)


def _plots(run: SweepResult) -> list[Plot]:
    drawers: list[tuple[str, Callable]] = [
        ("Throughput against p99 latency", plots.throughput_vs_latency),
        ("Latency against batch size", plots.latency_vs_batch),
        ("Server-side time per request", plots.server_breakdown),
        ("Throughput by batch size and allocation", plots.throughput_heatmap),
    ]
    return [Plot(title, figure_svg(draw(run))) for title, draw in drawers]


def _budget(run: SweepResult, budget_ms: float | None) -> float | None:
    return budget_ms if budget_ms is not None else run.record.get("latency_budget_ms")


def _kind_facts(run: SavedRun, tag: str = "") -> tuple[Facts, ...]:
    return tuple(Facts(title + tag, tuple(lines)) for title, lines in run.report_sections().facts)


def _kind_report(run: SavedRun) -> Report:
    """The report of a run of another kind than the tensor sweep: its own sections (`SavedRun.report_sections`)."""
    sections = run.report_sections()
    return Report(
        title=f"Run report: {run.record.model or run.label}",
        subtitle=f"{run.what} {run.label!r}, {run.status}, {len(run.frame)} point(s)",
        best=run.describe_best(),
        reproduce=tuple(sections.again),
        reproduce_note=AGAIN_NOTE,
        facts=_kind_facts(run),
        plots=tuple(Plot(title, figure_svg(figure)) for title, figure in sections.figures),
        tables=(("Every point", readable_table(run.table())),),
        unstable=tuple(sections.unstable),
    )


def _kind_comparison_report(a: SavedRun, b: SavedRun) -> Report:
    """Run B against run A of another kind than the tensor sweep, compared in that kind's terms."""
    comparison = compare_runs(a, b)
    name_a, name_b = _names(a, b)
    sections = {name: run.report_sections() for run, name in ((a, name_a), (b, name_b))}
    summary = comparison.summary().splitlines()
    return Report(
        title=f"Comparison: {name_b} against {name_a}",
        subtitle=summary[-1] if summary else f"{len(comparison.table)} common point(s); ratios are B/A",
        best=f"A: {a.describe_best()}\nB: {b.describe_best()}",
        reproduce=tuple(
            (f"{kind} ({tag})", text)
            for tag, name in (("A", name_a), ("B", name_b))
            for kind, text in sections[name].again
        ),
        reproduce_note=AGAIN_NOTE,
        facts=_kind_facts(a, f" (A: {name_a})")[:2] + _kind_facts(b, f" (B: {name_b})"),
        plots=tuple(
            Plot(f"{title} ({name})", figure_svg(figure))
            for name in (name_a, name_b)
            for title, figure in sections[name].figures
        ),
        tables=(
            ("Common points, B/A", readable_table(comparison.table)),
            (f"A: {name_a}", readable_table(a.table())),
            (f"B: {name_b}", readable_table(b.table())),
        ),
        unstable=tuple(f"A: {line}" for line in sections[name_a].unstable)
        + tuple(f"B: {line}" for line in sections[name_b].unstable),
        differences=tuple(comparison.differences()) + tuple(summary),
    )


def run_report(run: SavedRun | str | Path, latency_budget_ms: float | None = None) -> Report:
    """The report of one run (a sweep of any kind, or a backend comparison's joined run)."""
    run = run if isinstance(run, SavedRun) else load_any(run)
    if not isinstance(run, SweepResult):
        return _kind_report(run)
    budget = _budget(run, latency_budget_ms)
    backends = run.record.get("runs")
    kind = "backend comparison" if backends else "sweep"
    subtitle = f"{kind} {run.label!r}, {run.status}, {len(run.frame)} point(s)" + (
        f"; p99 budget {budget:g} ms" if budget is not None else "; no latency budget (the highest throughput)"
    )
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
        bounded=_bounded(run),
    )


def _bounded(run: SweepResult) -> tuple[str, ...] | None:
    """Each point the run's search left out by a bound, as a line with its reading (None: the
    run is not a search's)."""
    if run.record.search is None and run.record.bounded is None:
        return None
    return tuple(point.describe() for point in run.record.bounded or ())


def _names(a: SavedRun, b: SavedRun) -> tuple[str, str]:
    """How the report calls the two runs: their labels, with their folders where the labels are the
    same (a run measured again keeps its label)."""
    if a.label != b.label:
        return a.label, b.label
    first, second = (f"{run.label} [{Path(run.path).name if run.path else '?'}]" for run in (a, b))
    return first, second


def comparison_report(
    a: SavedRun | str | Path, b: SavedRun | str | Path, latency_budget_ms: float | None = None
) -> Report:
    """Run B against run A in one report: how they differ, B/A ratios, each run's best, facts and plots."""
    a = a if isinstance(a, SavedRun) else load_any(a)
    b = b if isinstance(b, SavedRun) else load_any(b)
    if not (isinstance(a, SweepResult) and isinstance(b, SweepResult)):
        return _kind_comparison_report(a, b)
    comparison: Comparison = compare_runs(a, b)
    budget = _budget(a, latency_budget_ms)
    name_a, name_b = _names(a, b)
    facts = tuple(Facts(f"{facts.title} (A: {name_a})", facts.lines) for facts in _facts(a)[:2]) + tuple(
        Facts(f"{facts.title} (B: {name_b})", facts.lines) for facts in _facts(b)
    )
    plots_ = [Plot(f"{name_b} against {name_a}", figure_svg(plots.comparison_plot(comparison)))]
    plots_ += [
        Plot(f"Throughput against p99 latency ({name})", figure_svg(plots.throughput_vs_latency(run)))
        for run, name in ((a, name_a), (b, name_b))
    ]
    return Report(
        title=f"Comparison: {name_b} against {name_a}",
        subtitle=comparison.summary().splitlines()[-1]
        if comparison.table.empty
        else f"{len(comparison.table)} common point(s); ratios are B/A",
        best=f"A: {_best(a, budget)}\nB: {_best(b, budget)}",
        reproduce=tuple((f"{kind} (A)", text) for kind, text in reproduce_lines(a.record, a.path))
        + tuple((f"{kind} (B)", text) for kind, text in reproduce_lines(b.record, b.path)),
        reproduce_note=AGAIN_NOTE,
        facts=facts,
        plots=tuple(plots_),
        tables=(
            ("Common points, B/A", readable_table(comparison.table)),
            (f"A: {name_a}", readable_table(a.table())),
            (f"B: {name_b}", readable_table(b.table())),
        ),
        unstable=tuple(f"A: {line}" for line in _unstable(a)) + tuple(f"B: {line}" for line in _unstable(b)),
        differences=tuple(comparison.differences()) + tuple(comparison.summary().splitlines()),
    )
