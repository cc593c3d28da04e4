"""Sweep batch sizes x core allocations x concurrency on the running server, with a live table and
plots, Cancel, and the best configuration under a p99 budget; optionally over the PyTorch backend's
own settings and against the same model generated for another backend (`measure.backends`, as
``workbench sweep --compare/--backend-param``).

The sweep appends every measured point to its run folder, so the live view simply re-reads that
folder after each point: what the panel shows is exactly what was saved, and a cancelled run
keeps its finished points.
"""

from __future__ import annotations

import dataclasses
import time
from functools import partial
from pathlib import Path

import ipywidgets as widgets

from workbench.coremap import CoreRange, parse_allocations
from workbench.generate.backends import model_target
from workbench.generate.pytorch_backend.sweep import backend_grid_text, parse_backend_grid
from workbench.measure.engine.measure_settings import ENGINES, PROTOCOLS, MeasureError, MeasureSettings
from workbench.measure.grid.plan import SweepError, SweepPlan, parse_counts
from workbench.measure.store import plots
from workbench.measure.store.results import ResultsError, SweepResult, load_run
from workbench.measure.sweep import run_sweep
from workbench.measure.sweep.compare_backends import BackendComparison, BackendSweep, compare_backends, run_folders
from workbench.measure.sweep.preflight import preflight
from workbench.measure.sweep.search.choice import (
    SearchChoice,
    parse_budget_ms,
    parse_optional_count,
    parse_optional_ms,
    parse_percent,
    search_names,
)
from workbench.measure.watch.live import ServerView, ServerWatch
from workbench.targets import output_tolerances
from workbench.ui.background import TaskControls
from workbench.ui.layout import button, description_style, hidden, plot_image, row, shown, table_view
from workbench.ui.links import Linked, blank_if_none, comma_joined
from workbench.ui.ray_controls import RayControls, grid_only
from workbench.ui.shared_state import WorkbenchState
from workbench.ui.widget_values import (
    best_html,
    error_list,
    preformatted,
    server_view_html,
    show_figure,
    table_html,
)

# Tab titles short enough for a tab (a longer one was cut to "throughput vs latenc")
PLOTS = {
    "latency": plots.latency_vs_batch,
    "throughput": plots.throughput_vs_latency,
    "server time": plots.server_breakdown,
    "heat map": plots.throughput_heatmap,
}


def _ray_problems(checked) -> list[str]:
    """What a sweep on Ray cannot measure (said before anything starts, as `workbench sweep --ray` says it)."""
    problems = []
    if checked.search is not None:
        problems.append(grid_only(checked.search.name))
    if checked.backends is not None and checked.backends.active:
        problems.append("backend settings and compared models are measured on the running server, not on Ray")
    return problems


def _percent_text(fraction: float | None) -> str:
    return "" if fraction is None else f"{fraction * 100:g}"


def _ms_text(seconds: float | None) -> str:
    return "" if seconds is None else f"{seconds * 1000:g}"


class SweepPanel:
    """Grid inputs and the run; ``result`` is the last `SweepResult` (also ``state.sweep``)."""

    def __init__(self, state: WorkbenchState | None = None, *, runs_dir: str | Path | None = None) -> None:
        self.state = state if state is not None else WorkbenchState()
        self.result: SweepResult | None = None
        self.comparison: BackendComparison | None = None  # the last backend comparison (its joined table is result)
        self._live_dirs: list[Path] = []
        self.server_view: ServerView | None = None  # the server side of the point running, last read
        self._watches: dict[str, ServerWatch | None] = {}  # model measured -> its server-side watch
        self._out_dir: Path | None = None
        self._last_plot = self._last_view = 0.0
        default_runs = Path(runs_dir) if runs_dir is not None else Path(self.state.repository).parent / "runs"
        style = description_style("150px")
        self.controls: dict[str, widgets.Widget] = {}
        c = self.controls
        on_enter = {"style": style, "continuous_update": False}  # validated on Enter/blur, not per keystroke
        c["batch_sizes"] = widgets.Text(description="batch sizes", **on_enter)
        c["allocations"] = widgets.Text(
            description="allocations", placeholder="INSTANCESxCORES, e.g. 1x1,2x1", **on_enter
        )
        c["concurrency"] = widgets.Text(description="concurrency", **on_enter)
        c["core_range"] = widgets.Text(description="core range a:b", placeholder="from the config", **on_enter)
        # plain number fields: a value out of range is an error beside the field (MeasureSettings' own
        # check), never clamped into range without a word
        c["window_s"] = widgets.FloatText(
            step=0.1,
            description="window (s)",
            style=style,
            tooltip="one measurement window in seconds (the CLI's --window-ms / 1000)",
        )
        c["max_windows"] = widgets.IntText(description="max windows", style=style)
        c["stable_windows"] = widgets.IntText(description="stable windows", style=style)
        c["time_limit_s"] = widgets.FloatText(
            step=5,
            description="time limit (s)",
            style=style,
            tooltip="seconds a point may keep measuring until it is stable (0: stop after max windows)",
        )
        c["protocol"] = widgets.Dropdown(options=PROTOCOLS, description="protocol", style=style)
        c["engine"] = widgets.Dropdown(
            options=ENGINES,
            description="measured by",
            style=style,
            tooltip="auto: perf_analyzer where it runs here, else the built-in load generator",
        )
        c["perf_analyzer"] = widgets.Text(
            description="perf_analyzer",
            style=style,
            placeholder="path or wrapper (default $PERF_ANALYZER, PATH)",
            layout=widgets.Layout(width="560px", max_width="100%"),
        )
        # the grid and how each point is measured: one logic value each, every control linked to a field
        self.plan_link: Linked[SweepPlan] = Linked(
            SweepPlan(batch_sizes=(1, 4), allocations=parse_allocations("1x1"), concurrency=(1, 2))
        )
        self.plan_link.link(
            "batch_sizes", c["batch_sizes"], parse=partial(parse_counts, what="batch sizes"), show=comma_joined
        )
        self.plan_link.link("allocations", c["allocations"], parse=parse_allocations, show=comma_joined)
        self.plan_link.link(
            "concurrency", c["concurrency"], parse=partial(parse_counts, what="concurrency"), show=comma_joined
        )
        self.plan_link.link("core_range", c["core_range"], parse=CoreRange.parse_optional, show=blank_if_none)
        self.measure_link: Linked[MeasureSettings] = Linked(
            MeasureSettings(window_s=0.5, stable_windows=3, max_windows=10)
        )
        for key in ("engine", "protocol", "window_s", "stable_windows", "max_windows"):
            self.measure_link.link(key, c[key])
        self.measure_link.link("perf_analyzer", c["perf_analyzer"], show=blank_if_none)
        self.measure_link.link("time_limit_s", c["time_limit_s"], parse=lambda s: s or None, show=lambda s: s or 0)
        # backends: the PyTorch backend's settings swept, other models of the repository compared (one BackendSweep)
        c["backend_grid"] = widgets.Text(
            description="backend settings",
            placeholder="e.g. threads=1,2; inference_mode=on,off",
            tooltip="PyTorch-backend settings to sweep: threads, interop_threads, "
            "inference_mode, optimized_execution (TorchScript), torch_compile (PyTorch 2)",
            layout=widgets.Layout(width="520px", max_width="100%"),
            **on_enter,
        )
        c["compare"] = widgets.TagsInput(
            allowed_tags=[],
            allow_duplicates=False,
            placeholder="model name",
            tooltip="other models of this repository measured with the same grid "
            "(the same model generated for another backend)",
        )
        c["compare_label"] = widgets.Label("compare with")
        self.backend_link: Linked[BackendSweep] = Linked(BackendSweep())
        self.backend_link.link(
            "grid", c["backend_grid"], parse=parse_backend_grid, show=backend_grid_text, label="backend settings"
        )
        self.backend_link.link("compare", c["compare"], parse=tuple, show=list, label="compare with")
        self.backend_link.on_change = lambda _changed: self._show_grid_size()
        c["runs_dir"] = widgets.Text(
            value=str(default_runs),
            description="runs folder",
            style=style,
            layout=widgets.Layout(width="560px", max_width="100%"),
        )
        c["label"] = widgets.Text(value="", description="run label", placeholder="default: model-time", style=style)
        c["budget_ms"] = widgets.FloatText(
            value=0.0, description="p99 budget (ms)", style=style, tooltip="0 = no budget: the highest throughput wins"
        )
        # the strategy: one SearchChoice (what `workbench sweep --search` builds), its fields linked
        c["search"] = widgets.Dropdown(
            options=search_names(),
            description="strategy",
            style=style,
            tooltip="grid: every point; bisection, hill-climb, halving and adaptive need a p99 budget",
        )
        c["min_gain"] = widgets.Text(
            description="min gain (%)",
            placeholder="default",
            style=style,
            tooltip="early-stop / hill-climb: the gain that keeps a walk going",
        )
        c["tries"] = widgets.Text(
            description="tries",
            placeholder="default 1",
            style=style,
            tooltip="early-stop: steps without that gain before a walk ends",
        )
        c["screen_window_ms"] = widgets.Text(
            description="screen window (ms)",
            placeholder="default 200",
            style=style,
            tooltip="halving / hill-climb: the short window every cell is screened with first",
        )
        c["within"] = widgets.Text(
            description="within (%)",
            placeholder="default 30",
            style=style,
            tooltip="halving / hill-climb: cells screened this close to the best screen are measured in full",
        )
        self.search_link: Linked[SearchChoice] = Linked(SearchChoice())
        self.search_link.link("name", c["search"])
        self.search_link.link("latency_budget_ms", c["budget_ms"], parse=parse_budget_ms, show=lambda v: v or 0.0)
        self.search_link.link("min_gain", c["min_gain"], parse=parse_percent, show=_percent_text, label="min gain")
        self.search_link.link("tries", c["tries"], parse=parse_optional_count, show=blank_if_none, label="tries")
        self.search_link.link(
            "screen_window_s", c["screen_window_ms"], parse=parse_optional_ms, show=_ms_text, label="screen window"
        )
        self.search_link.link("within", c["within"], parse=parse_percent, show=_percent_text, label="within")
        c["search_problems"] = widgets.HTML()
        self.search_link.on_change = lambda _changed: self._show_search()
        c["grid_size"] = widgets.HTML()
        # on a Ray cluster: each variant a Ray task with its own tritonserver on its node (measure/cluster)
        self.ray = RayControls(style)
        c.update(self.ray.controls)
        self.run = TaskControls("run sweep", run_tooltip="measure every point of the grid on the running server")
        c["run"], c["cancel"], c["progress"], c["status"] = (
            self.run.run_button,
            self.run.cancel_button,
            self.run.progress,
            self.run.status,
        )
        c["error"] = widgets.HTML()
        c["server_view"] = widgets.HTML()
        c["table"] = table_view()
        c["best"] = widgets.HTML()
        c["plots"] = hidden(widgets.Tab(children=[plot_image() for _ in PLOTS]))  # shown with the first result
        for index, title in enumerate(PLOTS):
            c["plots"].set_title(index, title)
        c["export"] = button(
            "export plots",
            icon="download",
            disabled=True,
            tooltip="write PNG and SVG of every plot into the run folder",
        )
        c["exported"] = widgets.HTML()
        c["run"].on_click(lambda _b: self.start())
        c["export"].on_click(lambda _b: self.export())
        for control in c.values():  # an error said about the inputs goes once they change
            if isinstance(control, widgets.ValueWidget) and not isinstance(control, (widgets.HTML, widgets.Image)):
                control.observe(lambda _change: self._inputs_changed(), names="value")
        self.plan_link.on_change = lambda _changed: self._show_grid_size()
        # each linked control with its problem view directly under it (`Linked.field`)
        plan, measure, search, backend = (
            self.plan_link.field,
            self.measure_link.field,
            self.search_link.field,
            self.backend_link.field,
        )
        self.widget = widgets.VBox(
            [
                row(plan("batch_sizes"), plan("allocations"), plan("concurrency")),
                row(plan("core_range"), measure("protocol"), search("latency_budget_ms")),
                row(search("name"), search("min_gain"), search("tries"), search("screen_window_s"), search("within")),
                c["search_problems"],
                row(measure("window_s"), measure("stable_windows"), measure("max_windows"), measure("time_limit_s")),
                row(measure("engine"), measure("perf_analyzer")),
                row(backend("grid"), c["compare_label"], backend("compare")),
                row(c["runs_dir"], c["label"]),
                self.ray.widget,
                c["grid_size"],
                self.run.widget,
                c["nodes"],
                c["server_view"],
                c["error"],
                c["best"],
                c["table"],
                c["plots"],
                row(c["export"], c["exported"]),
            ]
        )
        self._show_grid_size()

    def _repr_mimebundle_(self, **kwargs):
        return self.widget._repr_mimebundle_(**kwargs)

    def plan(self) -> SweepPlan:
        """The grid the controls describe (``plan_link.value``); SweepError names every bad control value."""
        if self.plan_link.problems:
            raise SweepError("; ".join(self.plan_link.problems))
        return self.plan_link.value

    def settings(self) -> MeasureSettings:
        """How to measure, as the controls say (``measure_link.value``); MeasureError names the bad value."""
        if self.measure_link.problems:
            raise MeasureError("; ".join(self.measure_link.problems))
        return self.measure_link.value

    def _settings_for(self, model_dir: Path) -> MeasureSettings:
        """How to measure ``model_dir``: the controls' settings, outputs checked at the tolerance of
        where the model runs (`targets.output_tolerances`)."""
        settings = self.settings()
        if not (model_dir / "config.pbtxt").is_file():
            return settings
        tolerances = output_tolerances(model_target(model_dir))
        return dataclasses.replace(settings, rtol=tolerances["rtol"], atol=tolerances["atol"])

    def backends(self) -> BackendSweep:
        """The backend settings and models to compare (``backend_link.value``); SweepError names a bad value."""
        if self.backend_link.problems:
            raise SweepError("; ".join(self.backend_link.problems))
        return self.backend_link.value

    def _show_grid_size(self) -> None:
        problems = self.plan_link.problems + self.backend_link.problems  # each also shown beside its field
        backends = self.backend_link.value
        size = f"{self.plan_link.value.size} point(s)"
        if backends.grid:
            size += f" x {backends.grid_points} backend variant(s) on a PyTorch-backend model"
        if backends.compare:
            size += f", for each of {1 + len(backends.compare)} models"
        self.controls["grid_size"].value = (
            error_list(self.plan_link.unplaced_problems + self.backend_link.unplaced_problems)
            if problems
            else f"<i>{size}</i>"
        )

    def search(self) -> SearchChoice:
        """The strategy the controls describe (``search_link.value``); SweepError names every bad value."""
        if self.search_link.problems:
            raise SweepError("; ".join(self.search_link.problems))
        return self.search_link.value

    def _show_search(self) -> None:
        self.controls["search_problems"].value = error_list(self.search_link.unplaced_problems)
        self._show_best()

    def _budget(self) -> float | None:
        return self.search_link.value.latency_budget_ms

    # --- running ---------------------------------------------------------------------------------

    def start(self):
        """Start the sweep in the background; returns the Task, or None with the reason shown."""
        c = self.controls
        c["error"].value = c["exported"].value = ""
        server, model_dir = self.state.server, self.state.model_dir
        checked = preflight(
            model_dir,
            plan=self.plan,
            settings=lambda: self._settings_for(model_dir),
            search=lambda: self.search().strategy(),
            backends=self.backends,
        )
        on_ray = self.ray.on
        missing = self.ray.check()  # shown beside the checkbox (nothing unless on Ray)
        problems = _ray_problems(checked) if on_ray else []
        if not on_ray and (server is None or not server.running):
            problems.append("start the server first (server panel)")
        problems += checked.problems
        plan, settings, search, backends = checked.plan, checked.settings, checked.search, checked.backends
        if missing or problems or plan is None or settings is None or backends is None:  # None: a problem says why
            c["error"].value = error_list(problems)
            return None
        label = c["label"].value.strip() or f"{self.state.name}-{time.strftime('%Y%m%d-%H%M%S')}"
        out_dir = self._out_dir = Path(c["runs_dir"].value.strip()) / label
        self.result = self.comparison = None
        c["table"].value, c["best"].value, c["server_view"].value, c["nodes"].value = "", "", "", ""
        self._clear_plots()  # a previous run's plots never stand beside this run's table (nor after its failure)
        c["export"].disabled = True
        if on_ray:
            return self._start_on_ray(plan, settings, label, out_dir)
        # the server side of the models measured (a backend comparison: each backend's model in turn)
        measured = [Path(d).name for d in backends.model_dirs(model_dir)] if backends.active else [self.state.name]
        self._watches = dict.fromkeys(measured)
        for name in measured:
            try:
                self._watches[name] = ServerWatch(server, name)
            except Exception:  # noqa: BLE001 - no statistics yet (not loaded): watched from its first load
                continue

        def live(_done: int, _total: int, message: str) -> None:
            self._refresh_live(message)

        if backends.active:
            dirs = backends.model_dirs(model_dir)
            self._live_dirs = list(run_folders(dirs, out_dir).values())
            return self.run.start(
                compare_backends,
                plan,
                server,
                dirs,
                out_dir,
                backend_grid=backends.grid,
                settings=settings,
                label=label,
                on_done=self._finished,
                on_progress=live,
            )
        self._live_dirs = [out_dir]
        return self.run.start(
            run_sweep,
            plan,
            server,
            model_dir,
            out_dir=out_dir,
            label=label,
            settings=settings,
            search=search,
            on_done=self._finished,
            on_progress=live,
        )

    def _start_on_ray(self, plan: SweepPlan, settings: MeasureSettings, label: str, out_dir: Path):
        """Each variant a Ray task on the cluster; the nodes view and the table follow the run folder."""
        self._watches = {}  # no server here to watch: each node's own serves its variant
        self._live_dirs = [out_dir]
        return self.ray.start(
            self.run,
            plan,
            self.state.model_dir,
            out_dir=out_dir,
            settings=settings,
            label=label,
            on_done=self._finished,
            on_progress=lambda _done, _total, message: self._refresh_live(message),
        )

    def _refresh_server(self, message: str) -> None:
        """The server side of the running point, at most once a second (statistics + metrics)."""
        if time.monotonic() - self._last_view < 1.0:
            return
        self._last_view = time.monotonic()
        views = []
        for name, watch in self._watches.items():
            try:
                if watch is None:  # no statistics yet (not loaded): watched from its first load
                    self._watches[name] = ServerWatch(self.state.server, name)
                    continue
                views.append(watch.view())
            except Exception:  # noqa: BLE001 - the model is reloading: read again at the next report
                continue
        if not views:
            return
        self.server_view = max(views, key=lambda view: view.requests)  # the model being measured now
        self.controls["server_view"].value = server_view_html(self.server_view, label=message)

    def _refresh_live(self, message: str = "") -> None:
        """Re-read the run folder after a progress report: each finished point has been saved."""
        self._refresh_server(message)
        self.ray.show_nodes(self._out_dir)
        result = self._latest_run()
        if result is None:
            return
        if len(result.frame) == (0 if self.result is None else len(self.result.frame)):
            return
        self.result = result
        self.controls["table"].value = table_html(result)
        if time.monotonic() - self._last_plot > 2.0:  # drawing is the slow part: at most every 2 s
            self._draw(result)

    def _latest_run(self) -> SweepResult | None:
        """The run saved so far of the model measured last (the last run folder begun), if any."""
        for folder in reversed(self._live_dirs):
            try:
                return load_run(folder)
            except ResultsError:
                continue  # its run record is not written yet
        return None

    def _finished(self, task) -> None:
        c = self.controls
        if task.state == "failed":
            c["error"].value = error_list([f"sweep failed: {task.error}"])
        result = task.result
        if isinstance(result, BackendComparison):
            self.comparison, result = result, result.result()
        if result is None:
            result = self._latest_run()
        self.ray.show_nodes(self._out_dir)
        if result is None:
            return
        self.result = result
        self.state.sweep = result
        c["table"].value = table_html(result)
        self._draw(result)
        self._show_best()
        c["export"].disabled = result.path is None

    def _inputs_changed(self) -> None:
        if not self.run.running:
            self.controls["error"].value = ""

    def _clear_plots(self) -> None:
        for image in self.controls["plots"].children:
            image.value = b""
        hidden(self.controls["plots"])

    def _draw(self, result: SweepResult) -> None:
        self._last_plot = time.monotonic()
        for image, draw in zip(self.controls["plots"].children, PLOTS.values()):
            show_figure(image, draw(result))
        shown(self.controls["plots"])

    def _show_best(self) -> None:
        if self.result is not None:
            summary = preformatted(self.comparison.summary()) if self.comparison is not None else ""
            self.controls["best"].value = best_html(self.result, self._budget()) + summary

    def export(self) -> dict | None:
        """Write every plot (PNG + SVG) into the run folder; the CSV/JSON tables are already there."""
        if self.result is None or self.result.path is None:
            return None
        written = plots.plot_run(self.result)
        files = [str(p) for paths in written.values() for p in paths]
        tables = [str(self.result.path / name) for name in ("results.csv", "results.json")]
        self.controls["exported"].value = preformatted("\n".join(tables + files))
        return written
