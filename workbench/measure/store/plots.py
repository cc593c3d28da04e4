"""Plots of a sweep: the axes people already read in Model Analyzer reports, drawn from the results
table alone so any saved run can be re-plotted from disk.

Every function returns a `matplotlib.figure.Figure` built without pyplot: no global figure state to
leak between notebook cells or threads, and it works under the Agg backend on a headless machine.
SVGs are written without a date and with a fixed hash salt, so re-plotting the same run gives the
same file (diff-able in git).
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterable
from pathlib import Path
from typing import Literal, TypedDict

import matplotlib
import matplotlib.lines
import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from workbench.measure.grid.rows import flag
from workbench.measure.store.results import Comparison, SweepResult, load_run

__all__ = [
    "latency_vs_batch",
    "throughput_vs_latency",
    "server_breakdown",
    "throughput_heatmap",
    "comparison_plot",
    "save_figure",
    "plot_run",
]

_BREAKDOWN = (
    ("queue_ms", "queue"),
    ("compute_input_ms", "compute input"),
    ("compute_infer_ms", "compute infer"),
    ("compute_output_ms", "compute output"),
    ("overhead_ms", "overhead"),
)
_LINESTYLES = ("-", "--", ":", "-.")


# Points one figure draws at most: past it the figure shows the highest-throughput ones (the table
# keeps every point). 2,000 points took 4 minutes to draw; 20,000 never ended (issue 47).
MAX_PLOTTED_POINTS = 200


def _measured(data: SweepResult | pd.DataFrame) -> pd.DataFrame:
    frame = data.frame if isinstance(data, SweepResult) else data
    return frame[frame["throughput"].notna()] if "throughput" in frame.columns else frame.iloc[0:0]


def _frame(data: SweepResult | pd.DataFrame) -> pd.DataFrame:
    """The measured points a figure draws: all of them, or the MAX_PLOTTED_POINTS with the highest
    throughput (in their order) when there are more, so a large run draws in bounded time."""
    frame = _measured(data)
    if len(frame) <= MAX_PLOTTED_POINTS:
        return frame
    return frame.loc[frame["throughput"].astype(float).nlargest(MAX_PLOTTED_POINTS).index.sort_values()]


def _sampled_note(data: SweepResult | pd.DataFrame) -> str:
    count = len(_measured(data))
    return f" ({MAX_PLOTTED_POINTS} highest-throughput of {count} points)" if count > MAX_PLOTTED_POINTS else ""


def literal(text: object) -> str:
    """``text`` as matplotlib shows it letter for letter: every ``$`` escaped, so a name or note
    holding ``$...$`` is never read as mathtext (which draws it as math, or fails the whole figure
    on an unbalanced or unknown command). Apply once, to text as the user typed it."""
    return str(text).replace("$", "\\$")


def _title(data: SweepResult | pd.DataFrame, what: str) -> str:
    what += _sampled_note(data)
    if isinstance(data, SweepResult) and data.record.model:
        return literal(f"{data.record.model}: {what}")
    return what


def _empty(fig: Figure, ax, message: str = "no measured points") -> Figure:
    ax.text(0.5, 0.5, message, ha="center", va="center", transform=ax.transAxes)
    ax.set_axis_off()
    return fig


def _colors(labels: Iterable[str]) -> dict[str, tuple]:
    cmap = matplotlib.colormaps["tab10"]
    return {label: cmap(i % 10) for i, label in enumerate(dict.fromkeys(labels))}


# A latency range wider than this (max / min) is drawn on a log axis: one outlier (a p99 of 275 ms
# against ten under 25 ms) then no longer squashes every other line onto the floor.
_WIDE_RANGE = 10.0


class _Beside(TypedDict):
    """matplotlib's legend keywords that place a legend beside the data, outside the axes."""

    loc: Literal["upper left"]
    bbox_to_anchor: tuple[float, float]
    borderaxespad: float


_OUTSIDE: _Beside = {"loc": "upper left", "bbox_to_anchor": (1.01, 1.0), "borderaxespad": 0.0}


def _latency_axis(ax, values: Iterable[float], axis: str = "y") -> None:
    values = [v for v in values if np.isfinite(v) and v > 0]
    if values and max(values) / min(values) > _WIDE_RANGE:
        getattr(ax, f"set_{axis}scale")("log")
        plain_log_ticks(getattr(ax, f"get_{axis}axis")(), max(values) / min(values))


def plain_number(value: float, _position: object = None) -> str:
    """A tick label as a person writes the number: 0.2, 5, 1000 (never 2x10^-1 or 1.00)."""
    return np.format_float_positional(float(value), precision=6, trim="-")


def plain_log_ticks(axis, span: float) -> None:
    """Label a log axis at 1, 2 and 5 of each decade (at 1 alone past three decades) in plain
    numbers, minor ticks unlabelled: a range inside one decade (a p50 between 1 and 10 ms) still
    reads, and no tick says 2x10^-1."""
    subs = (1.0,) if span > 1000 else (1.0, 2.0, 5.0)
    axis.set_major_locator(LogLocator(base=10, subs=subs))
    axis.set_major_formatter(FuncFormatter(plain_number))
    axis.set_minor_formatter(NullFormatter())


def _unstable(frame: pd.DataFrame) -> pd.Series:
    """Points whose windows never agreed within the tolerance (the table says why)."""
    if "stable" not in frame.columns:
        return pd.Series(False, index=frame.index)
    return frame["stable"].map(lambda v: flag(v) is False).astype(bool)


def _mark_unstable(ax, frame: pd.DataFrame, x: str, y: str, colors: dict) -> bool:
    """Unstable points drawn hollow over their line; True when there were any."""
    unstable = frame[_unstable(frame)]
    for _, row in unstable.iterrows():
        ax.plot(
            [float(row[x])],
            [float(row[y])],
            marker="o",
            markersize=9,
            linestyle="none",
            markerfacecolor="white",
            markeredgecolor=colors[row["variant"]],
            markeredgewidth=1.5,
            zorder=3,
            label="_unstable",
        )
    return not unstable.empty


def _legend(ax, title: str, unstable: bool) -> None:
    handles, labels = ax.get_legend_handles_labels()
    if unstable:
        handles.append(
            matplotlib.lines.Line2D(
                [], [], marker="o", linestyle="none", markerfacecolor="white", markeredgecolor="black"
            )
        )
        labels.append("unstable point (see table)")
    ax.legend(handles, [_wrap(label) for label in labels], title=title, fontsize="small", **_OUTSIDE)


def _wrap(label: str, width: int = 28) -> str:
    """A legend or tick label on lines of at most ``width`` characters: one long backend name
    squeezed the plot to a third of the figure's width."""
    return "\n".join(textwrap.fill(line, width, break_long_words=True) for line in literal(label).split("\n"))


def _grouped_by(frame: pd.DataFrame) -> str:
    """What a line or colour stands for: the allocation, or the backend and allocation when the
    rows were served by several backends (a backend comparison's variants start with the backend)."""
    backends = "served_by" in frame.columns and frame["served_by"].dropna().nunique() > 1
    return "backend: allocation" if backends else "allocation"


def _spread(group: pd.DataFrame, value: str, low: str, high: str) -> np.ndarray | None:
    """The (2, n) error-bar extents of ``value`` from its ``low``/``high`` interval columns, or
    None where the run has no spread (runs that predate it, perf_analyzer's p99); a missing bound
    draws no bar for that point."""
    if low not in group.columns or high not in group.columns:
        return None
    centre = group[value].astype(float).to_numpy()
    below = centre - pd.to_numeric(group[low], errors="coerce").to_numpy(dtype=float)
    above = pd.to_numeric(group[high], errors="coerce").to_numpy(dtype=float) - centre
    if not (np.isfinite(below) | np.isfinite(above)).any():
        return None
    return np.clip(np.nan_to_num(np.vstack([below, above])), 0.0, None)


def _error_bars(
    ax, group: pd.DataFrame, x: str, y: str, color, xspread: tuple[str, str] | None, yspread: tuple[str, str] | None
) -> None:
    """The spread of each point (a 95% interval) as error bars, over the line already drawn."""
    xerr = _spread(group, x, *xspread) if xspread else None
    yerr = _spread(group, y, *yspread) if yspread else None
    if xerr is None and yerr is None:
        return
    ax.errorbar(
        group[x].astype(float),
        group[y].astype(float),
        xerr=xerr,
        yerr=yerr,
        fmt="none",
        ecolor=color,
        elinewidth=1,
        capsize=3,
        alpha=0.7,
    )


def latency_vs_batch(data: SweepResult | pd.DataFrame) -> Figure:
    """p50 and p99 latency against batch size, one line per core allocation (variant); a second
    concurrency level gets its own line style in the same colour. p99 carries its spread."""
    frame = _frame(data)
    fig = Figure(figsize=(11, 4.2), layout="constrained")
    axes = fig.subplots(1, 2, sharey=True)
    if frame.empty:
        return _empty(fig, axes[0])
    colors = _colors(frame["variant"])
    levels = sorted(frame["concurrency"].unique())
    for ax, metric, name in ((axes[0], "p50_ms", "p50"), (axes[1], "p99_ms", "p99")):
        for (variant, concurrency), group in frame.groupby(["variant", "concurrency"], sort=False):
            group = group.sort_values("batch_size")
            label = variant if len(levels) == 1 else f"{variant}, concurrency {concurrency}"
            ax.plot(
                group["batch_size"],
                group[metric].astype(float),
                marker="o",
                color=colors[variant],
                linestyle=_LINESTYLES[levels.index(concurrency) % len(_LINESTYLES)],
                label=label,
            )
            if metric == "p99_ms":
                _error_bars(ax, group, "batch_size", metric, colors[variant], None, ("p99_low_ms", "p99_high_ms"))
        unstable = _mark_unstable(ax, frame, "batch_size", metric, colors)
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted(frame["batch_size"].unique()))
        ax.get_xaxis().set_major_formatter(FuncFormatter(plain_number))
        ax.get_xaxis().set_minor_formatter(NullFormatter())
        ax.set_xlabel("batch size (per request)")
        ax.set_title(f"{name} latency")
        ax.grid(True, alpha=0.3)
    axes[0].set_ylabel("latency (ms)")
    _latency_axis(axes[0], pd.concat([frame["p50_ms"], frame["p99_ms"]]).astype(float))  # shared by both
    _legend(axes[1], _grouped_by(frame), unstable)
    fig.suptitle(_title(data, "latency against batch size"))
    return fig


def throughput_vs_latency(data: SweepResult | pd.DataFrame) -> Figure:
    """Throughput against p99 latency: the curve Model Analyzer's summary shows (up and to the
    left is better). Each line is one variant's load curve: over concurrency for each batch size
    when several concurrency levels were measured, else over batch size. Error bars: each
    point's spread (95% intervals of throughput and p99)."""
    frame = _frame(data)
    fig = Figure(figsize=(8.5, 4.5), layout="constrained")
    ax = fig.subplots()
    if frame.empty:
        return _empty(fig, ax)
    colors = _colors(frame["variant"])
    by_concurrency = frame["concurrency"].nunique() > 1
    groups = ["variant", "batch_size"] if by_concurrency else ["variant"]
    for key, group in frame.groupby(groups, sort=False):
        variant = key[0]
        group = group.sort_values(["concurrency", "batch_size"])
        label = f"{variant}, batch {key[1]}" if by_concurrency else variant
        style = (
            _LINESTYLES[sorted(frame["batch_size"].unique()).index(key[1]) % len(_LINESTYLES)]
            if by_concurrency
            else "-"
        )
        ax.plot(
            group["p99_ms"].astype(float),
            group["throughput"].astype(float),
            marker="o",
            color=colors[variant],
            linestyle=style,
            label=label,
        )
        _error_bars(
            ax,
            group,
            "p99_ms",
            "throughput",
            colors[variant],
            ("p99_low_ms", "p99_high_ms"),
            ("throughput_low", "throughput_high"),
        )
        for _, row in group.iterrows():
            ax.annotate(
                f"c{int(row['concurrency'])}" if by_concurrency else f"b{int(row['batch_size'])}",
                (float(row["p99_ms"]), float(row["throughput"])),
                textcoords="offset points",
                xytext=(4, 4),
                fontsize="x-small",
            )
    unstable = _mark_unstable(ax, frame, "p99_ms", "throughput", colors)
    _latency_axis(ax, frame["p99_ms"].astype(float), axis="x")
    ax.set_xlabel("p99 latency (ms)")
    ax.set_ylabel("throughput (infer/s)")
    ax.grid(True, alpha=0.3)
    _legend(ax, _grouped_by(frame), unstable)
    ax.set_title(_title(data, "throughput against p99 latency"))
    return fig


def _point_labels(frame: pd.DataFrame) -> list[str]:
    return [
        f"{_wrap(v, 32)}\nb{int(b)} c{int(c)}"
        for v, b, c in zip(frame["variant"], frame["batch_size"], frame["concurrency"])
    ]


def _label_points(ax, x, labels: list[str], fontsize: str = "small") -> None:
    """Point labels under the bars, upright when they are wider than a bar's room (a slanted label's
    box still reaches its neighbour's)."""
    widest = max((len(line) for label in labels for line in label.split("\n")), default=0)
    turned = widest > 9
    ax.set_xticks(
        x,
        labels,
        fontsize=fontsize,
        rotation=90 if turned else 0,
        ha="right" if turned else "center",
        va="center" if turned else "top",
        rotation_mode="anchor",
    )


def server_breakdown(data: SweepResult | pd.DataFrame) -> Figure:
    """Per point, where a request's time went inside the server (stacked, ms per request), with
    throughput on a second axis."""
    frame = _frame(data)
    fig = Figure(figsize=(max(6.0, 0.9 * len(frame) + 2), 4.8), layout="constrained")
    ax = fig.subplots()
    if frame.empty:
        return _empty(fig, ax)
    x = np.arange(len(frame))
    bottom = np.zeros(len(frame))
    for column, name in _BREAKDOWN:
        values = pd.to_numeric(frame[column], errors="coerce").fillna(0.0).to_numpy(dtype=float)
        ax.bar(x, values, bottom=bottom, label=name)
        bottom += values
    _label_points(ax, x, _point_labels(frame))
    ax.set_ylabel("server time per request (ms)")
    twin = ax.twinx()
    twin.plot(x, frame["throughput"].astype(float), color="black", marker="D", linestyle="none", label="throughput")
    twin.set_ylabel("throughput (infer/s)")
    twin.set_ylim(bottom=0)
    handles, labels = ax.get_legend_handles_labels()
    more, more_labels = twin.get_legend_handles_labels()
    # beside the figure, past the throughput axis (beside the plot it covered that axis' ticks)
    fig.legend(handles + more, labels + more_labels, fontsize="small", loc="outside right lower")  # below the title
    # over the whole figure, wrapped to it: over the axes alone a few points' narrow plot pushed the title
    # past the figure's left edge and into the legend beside it (notebook 08, issue 43)
    fig.suptitle(_wrap(_title(data, "server-side time per request"), int(fig.get_figwidth() * 72 / 7.5)))
    return fig


def throughput_heatmap(data: SweepResult | pd.DataFrame) -> Figure:
    """Throughput by batch size (columns) and allocation (rows); with several concurrency levels
    each cell shows the best of them."""
    frame = _frame(data)
    fig = Figure(
        figsize=(7, 1.2 + 0.6 * max(1, frame["variant"].nunique() if not frame.empty else 1)), layout="constrained"
    )
    ax = fig.subplots()
    if frame.empty:
        return _empty(fig, ax)
    grid = frame.pivot_table(index="variant", columns="batch_size", values="throughput", aggfunc="max", sort=False)
    grid = grid.reindex(index=list(dict.fromkeys(frame["variant"])), columns=sorted(grid.columns))
    image = ax.imshow(grid.to_numpy(dtype=float), aspect="auto", cmap="viridis")
    ax.set_xticks(range(len(grid.columns)), [str(c) for c in grid.columns])
    ax.set_yticks(range(len(grid.index)), [literal(label) for label in grid.index])
    ax.set_xlabel("batch size (per request)")
    ax.set_ylabel("allocation")
    finite = grid.to_numpy(dtype=float)
    middle = np.nanmean(finite) if np.isfinite(finite).any() else 0.0
    for (i, j), value in np.ndenumerate(finite):
        if np.isfinite(value):
            ax.text(
                j,
                i,
                f"{value:.0f}",
                ha="center",
                va="center",
                fontsize="small",
                color="white" if value < middle else "black",
            )
    fig.colorbar(image, ax=ax, label="throughput (infer/s)")
    best_of = " (best over concurrency)" if frame["concurrency"].nunique() > 1 else ""
    fig.suptitle(_title(data, f"throughput{best_of}"))  # above the colour bar too, whose top tick it met
    return fig


def comparison_plot(comparison: Comparison) -> Figure:
    """Two runs side by side at their common points: throughput and p99 latency."""
    table = comparison.table
    fig = Figure(figsize=(max(7.0, 0.8 * len(table) + 3), 6.5), layout="constrained")
    axes = fig.subplots(2, 1, sharex=True)
    if table.empty:
        return _empty(fig, axes[0], "the two runs share no points")
    x = np.arange(len(table))
    width = 0.4
    a, b = literal(comparison.a.label), literal(comparison.b.label)
    for ax, metric, unit in ((axes[0], "throughput", "infer/s"), (axes[1], "p99_ms", "ms")):
        ax.bar(x - width / 2, table[f"{metric}_a"].astype(float), width, label=a)
        ax.bar(x + width / 2, table[f"{metric}_b"].astype(float), width, label=b)
        ax.set_ylabel(f"{metric.replace('_ms', '')} ({unit})")
        ax.grid(True, axis="y", alpha=0.3)
    tops = np.fmax(table["throughput_a"].astype(float), table["throughput_b"].astype(float))
    if np.isfinite(tops).any():
        axes[0].set_ylim(0, float(np.nanmax(tops)) * 1.12)  # the ratio labels above the tallest bars stay inside
    for i, (ratio, top) in enumerate(zip(table["throughput_ratio"].astype(float), tops)):
        axes[0].annotate(
            f"x{ratio:.2f}", (i, top), xytext=(0, 2), textcoords="offset points", ha="center", fontsize="medium"
        )
    _latency_axis(axes[1], pd.concat([table["p99_ms_a"], table["p99_ms_b"]]).astype(float))
    handles, labels = axes[0].get_legend_handles_labels()
    axes[0].legend(handles, [_wrap(label) for label in labels], fontsize="medium", **_OUTSIDE)
    axes[1].set_xticks(x, _point_labels(table), fontsize="medium")
    # long run labels: the title wraps within the figure instead of running past its edge (cut off)
    width = int(fig.get_figwidth() * 72 / 7.5)  # characters of a 12 pt title per line, about
    fig.suptitle(_wrap(f"{b} vs {a} (labels: throughput ratio {b}/{a})", width))
    return fig


def save_figure(fig: Figure, stem: str | Path, formats: Iterable[str] = ("png", "svg")) -> list[Path]:
    """Write ``stem.png`` and ``stem.svg``; the SVG is byte-identical when the figure is."""
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    paths = []
    with matplotlib.rc_context({"svg.hashsalt": "workbench"}):
        for fmt in formats:
            path = stem.with_name(f"{stem.name}.{fmt}")
            metadata = {"Date": None} if fmt in ("svg", "pdf") else {"Software": None}
            fig.savefig(path, format=fmt, metadata=metadata, dpi=110)
            paths.append(path)
    return paths


def plot_run(run: SweepResult | str | Path, out_dir: str | Path | None = None) -> dict[str, list[Path]]:
    """Draw and save every plot of a run (default: ``<run folder>/plots``); returns name -> files."""
    run = run if isinstance(run, SweepResult) else load_run(run)
    if out_dir is None:
        if run.path is None:
            raise ValueError("this result has no folder; give out_dir")
        out_dir = run.path / "plots"
    out_dir = Path(out_dir)
    figures = {
        "latency_vs_batch": latency_vs_batch(run),
        "throughput_vs_latency": throughput_vs_latency(run),
        "server_breakdown": server_breakdown(run),
        "throughput_heatmap": throughput_heatmap(run),
    }
    return {name: save_figure(fig, out_dir / name) for name, fig in figures.items()}
