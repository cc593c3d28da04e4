"""Sweep batch sizes x core allocations x concurrency on the running server, with a live table and
plots, Cancel, and the best configuration under a p99 budget.

The sweep appends every measured point to its run folder, so the live view simply re-reads that
folder after each point: what the panel shows is exactly what was saved, and a cancelled run
keeps its finished points.
"""

from __future__ import annotations

import html
import time
from pathlib import Path

import ipywidgets as widgets

from workbench.measure import plots
from workbench.measure.results import ResultsError, SweepResult, load_run
from workbench.measure.perf_analyzer import PerfAnalyzerNotFound
from workbench.measure.plan import SweepError, SweepPlan
from workbench.measure.settings import ENGINES, MeasureError, MeasureSettings
from workbench.measure.sweep import run_sweep
from workbench.ui.background import TaskControls
from workbench.ui.render import error_list, figure_png, preformatted
from workbench.ui.state import WorkbenchState

PLOTS = {"latency vs batch": plots.latency_vs_batch, "throughput vs latency": plots.throughput_vs_latency,
         "server breakdown": plots.server_breakdown}


def table_html(result: SweepResult) -> str:
    """The readable columns of a run, floats rounded, under which engine measured it and why."""
    if result.frame.empty:
        return "<i>no points yet</i>"
    note = f"<div><i>{html.escape(result.engine_note)}</i></div>" if result.engine_note else ""
    return note + result.table().to_html(index=False, float_format=lambda v: f"{v:.2f}", na_rep="", border=0)


def best_html(result: SweepResult, budget_ms: float | None) -> str:
    return f"<div style='font-weight:bold'>{html.escape(result.describe_best(budget_ms))}</div>"


class SweepPanel:
    """Grid inputs and the run; ``result`` is the last `SweepResult` (also ``state.sweep``)."""

    def __init__(self, state: WorkbenchState | None = None, *, runs_dir: str | Path | None = None) -> None:
        self.state = state if state is not None else WorkbenchState()
        self.result: SweepResult | None = None
        self._out_dir: Path | None = None
        self._last_plot = 0.0
        default_runs = Path(runs_dir) if runs_dir is not None else Path(self.state.repository).parent / "runs"
        style = {"description_width": "150px"}
        c = self.controls = {}
        on_enter = {"style": style, "continuous_update": False}  # validated on Enter/blur, not per keystroke
        c["batch_sizes"] = widgets.Text(value="1,4", description="batch sizes", **on_enter)
        c["allocations"] = widgets.Text(value="1x1", description="allocations",
                                        placeholder="INSTANCESxCORES, e.g. 1x1,2x1", **on_enter)
        c["concurrency"] = widgets.Text(value="1,2", description="concurrency", **on_enter)
        c["core_range"] = widgets.Text(value="", description="core range a:b", placeholder="from the config",
                                       **on_enter)
        c["window_s"] = widgets.BoundedFloatText(value=1.0, min=0.05, max=60, step=0.1, description="window (s)",
                                                 style=style)
        c["max_windows"] = widgets.BoundedIntText(value=10, min=1, max=100, description="max windows", style=style)
        c["stable_windows"] = widgets.BoundedIntText(value=3, min=1, max=20, description="stable windows", style=style)
        c["time_limit_s"] = widgets.BoundedFloatText(value=30.0, min=0, max=3600, step=5, description="time limit (s)",
                                                     style=style, tooltip="seconds a point may keep measuring until it "
                                                     "is stable (0: stop after max windows)")
        c["protocol"] = widgets.Dropdown(options=("grpc", "http"), description="protocol", style=style)
        c["engine"] = widgets.Dropdown(options=ENGINES, value="auto", description="measured by", style=style,
                                       tooltip="auto: perf_analyzer where it runs here, else the built-in load generator")
        c["perf_analyzer"] = widgets.Text(value="", description="perf_analyzer", style=style,
                                          placeholder="path or wrapper (default $PERF_ANALYZER, PATH)")
        c["runs_dir"] = widgets.Text(value=str(default_runs), description="runs folder", style=style,
                                     layout=widgets.Layout(width="560px"))
        c["label"] = widgets.Text(value="", description="run label", placeholder="default: model-time", style=style)
        c["budget_ms"] = widgets.FloatText(value=0.0, description="p99 budget (ms)", style=style,
                                           tooltip="0 = no budget: the highest throughput wins")
        c["grid_size"] = widgets.HTML()
        self.run = TaskControls("run sweep", run_tooltip="measure every point of the grid on the running server")
        c["run"], c["cancel"], c["progress"], c["status"] = (self.run.run_button, self.run.cancel_button,
                                                             self.run.progress, self.run.status)
        c["error"] = widgets.HTML()
        c["table"] = widgets.HTML()
        c["best"] = widgets.HTML()
        c["plots"] = widgets.Tab(children=[widgets.Image(format="png") for _ in PLOTS])
        for index, title in enumerate(PLOTS):
            c["plots"].set_title(index, title)
        c["export"] = widgets.Button(description="export plots", icon="download", disabled=True,
                                     tooltip="write PNG and SVG of every plot into the run folder")
        c["exported"] = widgets.HTML()
        c["run"].on_click(lambda _b: self.start())
        c["export"].on_click(lambda _b: self.export())
        c["budget_ms"].observe(lambda _change: self._show_best(), names="value")
        for key in ("batch_sizes", "allocations", "concurrency", "core_range"):
            c[key].observe(lambda _change: self._show_grid_size(), names="value")
        self.widget = widgets.VBox([
            widgets.HBox([c["batch_sizes"], c["allocations"], c["concurrency"]]),
            widgets.HBox([c["core_range"], c["protocol"], c["budget_ms"]]),
            widgets.HBox([c["window_s"], c["stable_windows"], c["max_windows"], c["time_limit_s"]]),
            widgets.HBox([c["engine"], c["perf_analyzer"]]),
            widgets.HBox([c["runs_dir"], c["label"]]),
            c["grid_size"], self.run.widget, c["error"], c["best"], c["table"], c["plots"],
            widgets.HBox([c["export"], c["exported"]]),
        ])
        self._show_grid_size()

    def _repr_mimebundle_(self, **kwargs):
        return self.widget._repr_mimebundle_(**kwargs)

    def plan(self) -> SweepPlan:
        """The grid as the controls describe it; SweepError names the bad control value."""
        c = self.controls
        return SweepPlan(batch_sizes=c["batch_sizes"].value, allocations=c["allocations"].value,
                         concurrency=c["concurrency"].value, core_range=c["core_range"].value.strip() or None)

    def settings(self) -> MeasureSettings:
        """How to measure, as the controls say; MeasureError names the bad control value."""
        c = self.controls
        return MeasureSettings(engine=c["engine"].value, perf_analyzer=c["perf_analyzer"].value.strip() or None,
                               protocol=c["protocol"].value, window_s=c["window_s"].value,
                               stable_windows=c["stable_windows"].value, max_windows=c["max_windows"].value,
                               time_limit_s=c["time_limit_s"].value or None)

    def _show_grid_size(self) -> None:
        try:
            plan = self.plan()
        except SweepError as err:
            self.controls["grid_size"].value = error_list([str(err)])
            return
        self.controls["grid_size"].value = f"<i>{plan.size} point(s)</i>"

    def _budget(self) -> float | None:
        value = self.controls["budget_ms"].value
        return value if value and value > 0 else None

    # --- running ---------------------------------------------------------------------------------

    def start(self):
        """Start the sweep in the background; returns the Task, or None with the reason shown."""
        c = self.controls
        c["error"].value = c["exported"].value = ""
        server, model_dir = self.state.server, self.state.model_dir
        problems = []
        if server is None or not server.running:
            problems.append("start the server first (server panel)")
        if not (model_dir / "config.pbtxt").is_file():
            problems.append(f"{model_dir} has no config.pbtxt: write the model directory first (preview panel)")
        try:
            plan = self.plan()
        except SweepError as err:
            plan = None
            problems.append(str(err))
        try:
            settings = self.settings()
            settings.engine_command()
        except (MeasureError, PerfAnalyzerNotFound) as err:
            problems.append(str(err))
        if problems:
            c["error"].value = error_list(problems)
            return None
        label = c["label"].value.strip() or f"{self.state.name}-{time.strftime('%Y%m%d-%H%M%S')}"
        self._out_dir = Path(c["runs_dir"].value.strip()) / label
        self.result = None
        c["table"].value, c["best"].value = "", ""
        c["export"].disabled = True
        return self.run.start(
            run_sweep, plan, server, model_dir, out_dir=self._out_dir, label=label, settings=settings,
            on_done=self._finished, on_progress=lambda _done, _total, _message: self._refresh_live(),
        )

    def _refresh_live(self) -> None:
        """Re-read the run folder after a progress report: each finished point has been saved."""
        if self._out_dir is None:
            return
        try:
            result = load_run(self._out_dir)
        except ResultsError:
            return  # the run record is not written yet
        if len(result.frame) == (0 if self.result is None else len(self.result.frame)):
            return
        self.result = result
        self.controls["table"].value = table_html(result)
        if time.monotonic() - self._last_plot > 2.0:  # drawing is the slow part: at most every 2 s
            self._draw(result)

    def _finished(self, task) -> None:
        c = self.controls
        if task.state == "failed":
            c["error"].value = error_list([f"sweep failed: {task.error}"])
        result = task.result
        if result is None and self._out_dir is not None:
            try:
                result = load_run(self._out_dir)
            except ResultsError:
                result = None
        if result is None:
            return
        self.result = result
        self.state.sweep = result
        c["table"].value = table_html(result)
        self._draw(result)
        self._show_best()
        c["export"].disabled = result.path is None

    def _draw(self, result: SweepResult) -> None:
        self._last_plot = time.monotonic()
        for image, draw in zip(self.controls["plots"].children, PLOTS.values()):
            image.value = figure_png(draw(result))

    def _show_best(self) -> None:
        if self.result is not None:
            self.controls["best"].value = best_html(self.result, self._budget())

    def export(self) -> dict | None:
        """Write every plot (PNG + SVG) into the run folder; the CSV/JSON tables are already there."""
        if self.result is None or self.result.path is None:
            return None
        written = plots.plot_run(self.result)
        files = [str(p) for paths in written.values() for p in paths]
        tables = [str(self.result.path / name) for name in ("results.csv", "results.json")]
        self.controls["exported"].value = preformatted("\n".join(tables + files))
        return written
