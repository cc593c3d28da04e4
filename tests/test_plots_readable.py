"""Every plot the app and the report draw reads cleanly (issue 31, defect 3): no text over other text
(`plot_check.text_overlaps`: tick labels, axis labels, titles, legends), on a plain sweep and on a
backend comparison with long backend names; the legend says what it groups by."""

from __future__ import annotations

import pytest

from workbench.measure.store import plots
from workbench.measure.store.plot_overlaps import text_overlaps
from workbench.measure.store.results import SweepResult, compare_runs, frame_from_rows

from test_plots import rows

PYTHON = "Python backend (model.py)"
TWIN = "PyTorch backend, Python-backend twin (torchscript layout)"


def _backends() -> SweepResult:
    out = []
    for backend in (PYTHON, TWIN):
        for row in rows():
            if row["allocation"] == "1x1":
                out.append({**row, "served_by": backend, "variant": f"{backend}: {row['variant']}",
                            "throughput": row["throughput"] * 40})
    return SweepResult(frame_from_rows(out), {"label": "backends", "model": "mlp vs mlp_pt"})


def _plain() -> SweepResult:
    frame = frame_from_rows([{**row, "throughput": row["throughput"] * 40} for row in rows()])
    return SweepResult(frame, {"label": "plain", "model": "mlp"})


DRAWN = [plots.latency_vs_batch, plots.throughput_vs_latency, plots.server_breakdown, plots.throughput_heatmap]


@pytest.mark.parametrize("draw", DRAWN, ids=lambda f: f.__name__)
@pytest.mark.parametrize("run", [_plain, _backends], ids=["sweep", "backends"])
def test_no_plot_text_overlaps(draw, run):
    assert text_overlaps(draw(run())) == []


def test_the_comparison_plot_reads_cleanly():
    a, b = _plain(), SweepResult(_plain().frame, {"label": "after"})
    assert text_overlaps(plots.comparison_plot(compare_runs(a, b))) == []


def test_the_checker_sees_a_legend_over_the_axis_and_labels_over_each_other():
    from matplotlib.figure import Figure

    fig = Figure(figsize=(3, 2))
    ax = fig.subplots()
    ax.plot(range(6), label="a long label for a line")
    ax.set_xticks(range(6), [f"label number {i}" for i in range(6)])
    ax.legend(loc="upper left", bbox_to_anchor=(-0.2, 1.0))
    found = text_overlaps(fig)
    assert any("x tick labels" in p for p in found) and any("legend covers" in p for p in found)


def test_a_backend_comparisons_legend_says_backend():
    fig = plots.throughput_vs_latency(_backends())
    legends = [ax.get_legend() for ax in fig.axes if ax.get_legend()] + list(fig.legends)
    assert any("backend" in legend.get_title().get_text() for legend in legends)


def _tick_labels(axis) -> list[str]:
    """The labels of the ticks a reader sees: inside the axis's view, not blank."""
    low, high = sorted(axis.get_view_interval())
    return [tick.label1.get_text() for tick in axis.get_major_ticks() + axis.get_minor_ticks()
            if low <= tick.get_loc() <= high and tick.label1.get_visible() and tick.label1.get_text()]


@pytest.mark.parametrize("scale", [1.0, 1 / 30], ids=["ms", "tenths of a ms"])
def test_log_latency_axes_label_their_ticks_in_plain_numbers(scale):
    """Issue 43 item 12: a p50 between 1 and 10 ms on a log axis (the p99 up to 60 ms made it log)
    had one labelled tick, and small latencies read "2x10^-1": at least three labelled ticks, each a
    plain number."""
    low = {1: 1.3, 2: 2.6, 4: 7.5}
    high = {1: 1.6, 2: 4.0, 4: 60.0}
    frame = frame_from_rows([{**row, "p50_ms": low[row["batch_size"]] * scale, "p99_ms": high[row["batch_size"]] * scale}
                             for row in rows()])
    fig = plots.latency_vs_batch(SweepResult(frame, {"label": "wide", "model": "mlp"}))
    fig.draw_without_rendering()  # tick labels are set when drawn
    axis = fig.axes[0].yaxis
    assert axis.get_scale() == "log"
    labels = _tick_labels(axis)
    assert len(labels) >= 3, labels
    for label in labels:
        float(label)  # "2x10^-1", "$\\mathdefault{...}$" would not parse
    assert all(label == plots.plain_number(float(label)) for label in labels), labels
    assert text_overlaps(fig) == []


def test_a_comparison_of_long_run_labels_keeps_its_title_and_legend_inside_the_figure():
    """Issue 43 item 12: the report's ratio plot had its title cut at the figure's edge."""
    a = SweepResult(_plain().frame, {"label": "cpu_baseline_before_changing_the_dynamic_batcher"})
    b = SweepResult(_plain().frame, {"label": "cpu_after_changing_the_dynamic_batcher_delay"})
    fig = plots.comparison_plot(compare_runs(a, b))
    assert text_overlaps(fig) == []
    assert "\n" in fig._suptitle.get_text()  # wrapped, not cut


def test_the_checker_sees_a_title_past_the_figures_edge():
    from matplotlib.figure import Figure

    fig = Figure(figsize=(3, 2), layout="constrained")
    fig.subplots().plot(range(3))
    fig.suptitle("a title far too long for a figure three inches wide, so its ends are cut off")
    assert any("runs past the figure's edge" in p for p in text_overlaps(fig))


def test_a_two_point_backend_comparison_keeps_its_title_whole_and_clear_of_the_legend():
    """Issue 43 item 12: notebook 08's server-time plot of two points had its title run past the
    figure's edge and under the legend."""
    run = _backends()
    two = SweepResult(run.frame[(run.frame["batch_size"] == 1) & (run.frame["concurrency"] == 1)],
                      {"label": "backends", "model": "add_sub vs add_sub_pt"})
    assert len(two.frame) == 2
    assert text_overlaps(plots.server_breakdown(two)) == []
