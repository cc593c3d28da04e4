"""Plots of an LLM sweep, in ``store/plots.py``'s style (built without pyplot, legends beside the
data, saved with `store.plots.save_figure`): the Pareto front of output tokens/s per user against
total output tokens/s, and TTFT and ITL (p50 and p99) against concurrency, one line per variant.
"""

from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure

from workbench.measure.llm.answers import pareto_front, usable_rows
from workbench.measure.llm.rows import NOT_MEASURED
from workbench.measure.store.plots import _OUTSIDE, _colors, _empty, _latency_axis, _wrap, literal

__all__ = ["pareto_plot", "latency_vs_concurrency", "refused_rows"]


def refused_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows the streaming engine measured but refused (their error starts ``NOT_MEASURED``)
    whose figures are there to place."""
    if not len(frame) or "error" not in frame:
        return frame.iloc[0:0]
    refused = frame["error"].astype(str).str.startswith(NOT_MEASURED)
    placed = frame["output_tokens_per_s"].astype(float).notna() & frame["tokens_per_user_per_s"].astype(float).notna()
    return frame[refused & placed]


def _load_axis(frame: pd.DataFrame) -> tuple[str, str]:
    """The column the load is in and its axis title."""
    if frame["concurrency"].notna().any():
        return "concurrency", "concurrency (requests in flight)"
    return "request_rate", "request rate (requests/s)"


def pareto_plot(frame: pd.DataFrame, title: str = "") -> Figure:
    """Every usable point (output tokens/s per user against total output tokens/s), coloured by
    variant and marked with its load (``c=4``: concurrency 4; ``2/s``: 2 requests/s), with the
    Pareto front drawn through the points no other beats on both; points the engine refused
    (``rows.NOT_MEASURED``) as grey crosses, off the front."""
    fig = Figure(figsize=(8.5, 4.6), layout="constrained")
    ax = fig.add_subplot()
    usable = usable_rows(frame)
    if usable.empty:
        return _empty(fig, ax)
    colors = _colors(usable["variant"])
    load, _ = _load_axis(usable)
    for variant, group in usable.groupby("variant", sort=False):
        ax.scatter(
            group["output_tokens_per_s"].astype(float),
            group["tokens_per_user_per_s"].astype(float),
            color=colors[variant],
            label=_wrap(str(variant)),
            zorder=3,
        )
        for _, point in group.iterrows():
            mark = f"c={point[load]:g}" if load == "concurrency" else f"{point[load]:g}/s"
            ax.annotate(
                mark,
                (float(point["output_tokens_per_s"]), float(point["tokens_per_user_per_s"])),
                textcoords="offset points",
                xytext=(4, 4),
                fontsize="x-small",
            )
    refused = refused_rows(frame)  # figures read but refused: shown as such, never on the front
    if len(refused):
        ax.scatter(
            refused["output_tokens_per_s"].astype(float),
            refused["tokens_per_user_per_s"].astype(float),
            marker="x",
            color="#888888",
            label=f"{NOT_MEASURED}\n(its reason: the table)",
            zorder=3,
        )
    front = pareto_front(usable)
    ax.plot(
        front["output_tokens_per_s"].astype(float),
        front["tokens_per_user_per_s"].astype(float),
        color="black",
        linestyle="--",
        linewidth=1.2,
        label="Pareto front",
        zorder=2,
    )
    ax.set_xlabel("total output tokens/s (all users)")
    ax.set_ylabel(
        "output tokens/s per user\n(total / concurrency)"
        if load == "concurrency"
        else "output tokens/s per user\n(a request's pace)"
    )
    ax.set_title(literal(title) if title else "Pareto front")
    ax.grid(True, alpha=0.3)
    ax.legend(title="variant", fontsize="small", **_OUTSIDE)
    return fig


def latency_vs_concurrency(frame: pd.DataFrame, title: str = "") -> Figure:
    """TTFT (left) and ITL (right) against the load: p50 solid, p99 dashed, one colour per variant."""
    fig = Figure(figsize=(11, 4.2), layout="constrained")
    axes = fig.subplots(1, 2)
    usable = usable_rows(frame)
    if usable.empty:
        for ax in axes:
            _empty(fig, ax)
        return fig
    colors = _colors(usable["variant"])
    load, load_title = _load_axis(usable)
    for ax, metric, name in ((axes[0], "ttft", "time to first token"), (axes[1], "itl", "inter-token latency")):
        values = []
        for variant, group in usable.groupby("variant", sort=False):
            group = group.sort_values(load)
            x = group[load].astype(float)
            for pct, style in (("p50", "-"), ("p99", "--")):
                y = group[f"{metric}_{pct}_ms"].astype(float)
                values += list(y)
                ax.plot(x, y, linestyle=style, marker="o", color=colors[variant], label=_wrap(f"{variant} {pct}"))
        _latency_axis(ax, values)
        ax.set_xticks(sorted(usable[load].astype(float).unique()))  # the loads measured, not 1.5, 2.5
        ax.set_xlabel(load_title)
        ax.set_ylabel(f"{name} (ms)")
        ax.set_title(name)
        ax.grid(True, alpha=0.3)
    axes[1].legend(title="variant, percentile", fontsize="small", **_OUTSIDE)
    if title:
        fig.suptitle(literal(title))
    return fig
