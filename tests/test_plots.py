"""Plots drawn from a results table (here a hand-written one saved to disk): what is drawn matches
the table, files are written as PNG and deterministic SVG, and nothing touches pyplot state."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from matplotlib.figure import Figure

from workbench.measure.store import plots
from workbench.measure.store.results import (
    POINTS_FILE,
    SweepResult,
    append_point,
    compare_runs,
    frame_from_rows,
    load_run,
    write_exports,
    write_record,
)


def rows():
    out = []
    for allocation, instances in (("1x1", 1), ("2x1", 2)):
        for batch in (1, 2, 4):
            for concurrency in (1, 2):
                out.append({
                    "variant": allocation, "allocation": allocation, "instances": instances,
                    "cores_per_instance": 1, "core_start": 0, "core_end": instances - 1,
                    "batching": "as configured", "parameters": "", "batch_size": batch,
                    "concurrency": concurrency, "throughput": 100.0 * batch * instances + concurrency,
                    "p50_ms": 1.0 * batch, "p90_ms": 1.5 * batch, "p95_ms": 1.8 * batch,
                    "p99_ms": 2.0 * batch / instances + concurrency, "mean_ms": 1.1 * batch, "stable": True,
                    "windows": 3, "requests": 100, "failures": 0, "outputs_ok": True, "max_abs_diff": 0.0,
                    "queue_ms": 0.25, "compute_input_ms": 0.5, "compute_infer_ms": 1.0 * batch,
                    "compute_output_ms": 0.125, "overhead_ms": 0.0625, "avg_batch": float(batch),
                    "error": None, "measured_at": "2026-11-29T19:00:00+00:00",
                })
    return out


@pytest.fixture
def saved_run(tmp_path):
    record = {"model": "add_sub", "status": "complete", "label": "cpu-run"}
    for row in rows():
        append_point(tmp_path / POINTS_FILE, row)
    write_record(tmp_path, record)
    write_exports(tmp_path, frame_from_rows(rows()), record)
    return tmp_path


def test_latency_lines_follow_the_table(saved_run):
    run = load_run(saved_run)
    fig = plots.latency_vs_batch(run)
    assert isinstance(fig, Figure)
    p99_axes = fig.axes[1]
    lines = {line.get_label(): line for line in p99_axes.get_lines()}
    assert set(lines) == {f"{a}, concurrency {c}" for a in ("1x1", "2x1") for c in (1, 2)}
    line = lines["2x1, concurrency 2"]
    assert list(line.get_xdata()) == [1, 2, 4]
    assert list(line.get_ydata()) == [3.0, 4.0, 6.0]  # p99 = 2*b/2 + 2


def test_throughput_vs_latency_draws_load_curves(saved_run):
    run = load_run(saved_run)
    fig = plots.throughput_vs_latency(run)  # two concurrency levels: one curve per allocation and batch
    lines = {line.get_label(): line for line in fig.axes[0].get_lines()}
    assert set(lines) == {f"{a}, batch {b}" for a in ("1x1", "2x1") for b in (1, 2, 4)}
    assert list(lines["2x1, batch 4"].get_ydata()) == [801.0, 802.0]  # concurrency 1 then 2
    one_level = run.frame[run.frame["concurrency"] == 1]
    fig = plots.throughput_vs_latency(one_level)  # one level: one curve per allocation over batch size
    lines = {line.get_label(): line for line in fig.axes[0].get_lines()}
    assert set(lines) == {"1x1", "2x1"} and list(lines["1x1"].get_ydata()) == [101.0, 201.0, 401.0]


def test_breakdown_stacks_server_times(saved_run):
    fig = plots.server_breakdown(load_run(saved_run))
    ax = fig.axes[0]
    bars = [patch for patch in ax.patches]
    assert len(bars) == 5 * 12  # five components for each of the 12 points
    # total height of the first point's stack = queue + input + infer + output + overhead
    first = [b for b in bars if abs(b.get_x() + b.get_width() / 2) < 1e-9]
    assert sum(b.get_height() for b in first) == pytest.approx(0.25 + 0.5 + 1.0 + 0.125 + 0.0625)


def test_heatmap_cells_are_best_throughput_over_concurrency(saved_run):
    fig = plots.throughput_heatmap(load_run(saved_run))
    grid = fig.axes[0].get_images()[0].get_array()
    expected = np.array([[102, 202, 402], [202, 402, 802]], dtype=float)
    np.testing.assert_array_equal(np.asarray(grid), expected)


def test_comparison_plot_bars_both_runs(saved_run):
    a = load_run(saved_run)
    b = SweepResult(a.frame.assign(throughput=a.frame["throughput"] * 2), {"label": "faster"})
    fig = plots.comparison_plot(compare_runs(a, b))
    heights = [p.get_height() for p in fig.axes[0].patches]
    assert len(heights) == 24
    assert heights[12:] == [2 * h for h in heights[:12]]


def test_empty_table_draws_a_message_not_an_error():
    fig = plots.latency_vs_batch(frame_from_rows([]))
    assert "no measured points" in fig.axes[0].texts[0].get_text()


def test_plot_run_from_disk_writes_png_and_deterministic_svg(saved_run, tmp_path_factory):
    written = plots.plot_run(saved_run)
    assert set(written) == {"latency_vs_batch", "throughput_vs_latency", "server_breakdown", "throughput_heatmap"}
    for paths in written.values():
        png, svg = paths
        assert png.read_bytes().startswith(b"\x89PNG")
        assert svg.read_text().lstrip().startswith("<?xml")
        assert "<dc:date>" not in svg.read_text()
    other = tmp_path_factory.mktemp("again")
    again = plots.plot_run(saved_run, other)
    for name in written:
        assert written[name][1].read_bytes() == again[name][1].read_bytes(), name


def test_plots_never_touch_pyplot(saved_run):
    code = (
        "import sys; from workbench.measure.store import plots;"
        f"plots.plot_run({str(saved_run)!r});"
        "assert 'matplotlib.pyplot' not in sys.modules, 'pyplot imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_an_outlier_gets_a_log_axis_unstable_points_are_hollow_and_legends_sit_outside():
    table = rows()
    table[0] = dict(table[0], p99_ms=275.0, stable=False)  # one p99 far above the rest, and unstable
    fig = plots.latency_vs_batch(frame_from_rows(table))
    p50_axes, p99_axes = fig.axes[:2]
    assert p99_axes.get_yscale() == "log" and p50_axes.get_yscale() == "log"  # shared y
    hollow = [line for line in p99_axes.get_lines() if line.get_label() == "_unstable"]
    assert len(hollow) == 1 and hollow[0].get_markerfacecolor() == "white"
    assert list(hollow[0].get_ydata()) == [275.0]
    legend = p99_axes.get_legend()
    assert "unstable point (see table)" in [t.get_text() for t in legend.get_texts()]
    fig.canvas.draw()  # the legend is placed beside the data, not over it
    assert legend.get_window_extent().x0 >= p99_axes.get_window_extent().x1
    calm = plots.latency_vs_batch(frame_from_rows(rows()))  # 1..11 ms: a linear axis reads best
    assert calm.axes[1].get_yscale() == "linear"
    assert plots.throughput_vs_latency(frame_from_rows(table)).axes[0].get_xscale() == "log"


def test_each_points_spread_is_drawn_as_error_bars(tmp_path):
    """A run with spread columns: throughput vs p99 gets bars in both directions, p99 vs batch in
    y, each as long as the interval; a run without them (older runs) draws none."""
    spread = [dict(r, throughput_low=r["throughput"] - 10, throughput_high=r["throughput"] + 30,
                   p99_low_ms=r["p99_ms"] - 0.5, p99_high_ms=r["p99_ms"] + 1.0) for r in rows()]
    frame = frame_from_rows(spread)
    fig = plots.throughput_vs_latency(frame[frame["concurrency"] == 1])
    bars = fig.axes[0].containers
    assert len(bars) == 2  # one per allocation
    assert bars[0].has_xerr and bars[0].has_yerr
    segments = [seg for collection in bars[0].lines[2] for seg in collection.get_segments()]
    lengths = sorted({round(float(np.ptp(seg[:, 0]) + np.ptp(seg[:, 1])), 6) for seg in segments})
    assert lengths == [1.5, 40.0]  # p99 0.5 below + 1.0 above; throughput 10 below + 30 above
    legend = {t.get_text() for t in fig.axes[0].get_legend().get_texts()}
    assert legend == {"1x1", "2x1"}
    fig = plots.latency_vs_batch(frame)
    assert len(fig.axes[1].containers) == 4 and not fig.axes[0].containers  # p99 only, one per line
    assert not plots.throughput_vs_latency(frame_from_rows(rows())).axes[0].containers
