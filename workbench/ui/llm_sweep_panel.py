"""Sweep a vLLM-backend model in tokens: max_num_seqs x tensor-parallel degree x instances x
concurrency on the running server (`measure.llm.run_llm_sweep`, as ``workbench sweep`` does for
such a model), with the table, the best configuration under the SLO, the cheapest per million
output tokens, the Pareto front and TTFT/ITL against concurrency.

Its strategy control measures either every point until stable (``grid``) or, with the tensor
sweeps' adaptive walk, the points a heavier load's reading cannot rule out (``adaptive``), or each
variant's highest load meeting the SLO by bisection (``capacity``), each of those points until
decided (the effort rule, ``llm/slo_effort.py``, between its min and max windows), as
``workbench sweep --search grid|adaptive|capacity`` does; each row's ``stopped`` says why its windows ended,
and after an adaptive run the rule's verdicts and the points the search left out (and on what
reading) are listed in full under the answer.

With "on a Ray cluster" (`ray_controls`, as the tensor panel's) each variant is a Ray task on a node
with its own server (``workbench sweep --ray``): no running server is needed, only the grid is
measured, and the table names each row's node.

The sweep tab shows this panel instead of the tensor sweep when the model's backend streams tokens
(the backend switch's ``streams_tokens``). Like the tensor sweep, the live view re-reads the run
folder after each point: what it shows is what was saved.
"""

from __future__ import annotations

import html
import time
from functools import partial
from pathlib import Path

import ipywidgets as widgets

from workbench.measure.engine.measure_settings import MeasureSettings
from workbench.measure.engine.streaming import Slo
from workbench.measure.grid.plan import SweepError, parse_counts
from workbench.measure.llm.plan import LlmPlan
from workbench.measure.llm.result import LlmSweepResult, load_llm_run
from workbench.measure.llm.run import LLM_SETTINGS, LOAD_TIMEOUT_S, run_llm_sweep
from workbench.measure.llm.slo_effort import LlmSearch
from workbench.measure.store.cost import CPU, NEURON, measured_on, priced_types
from workbench.measure.store.results import ResultsError
from workbench.measure.sweep.search.effort import EffortRule
from workbench.measure.sweep.swept import check_out_dir
from workbench.ui.background import TaskControls
from workbench.ui.layout import description_style, hidden, plot_image, row, shown, table_view
from workbench.ui.links import Linked, WidgetGroup, comma_joined
from workbench.ui.ray_controls import RayControls, grid_only
from workbench.ui.shared_state import WorkbenchState
from workbench.ui.widget_values import error_list, frame_html, show_figure

__all__ = ["LlmSweepPanel", "PRICED"]

# the instance types a cost per million tokens can be given for (a price is known); a run is priced
# only as the hardware it was measured on (store/cost.py price_for_run), so a result narrows the list
PRICED = priced_types(CPU) + priced_types(NEURON)
PLOTS = ("Pareto front", "TTFT and ITL")
# the strategy control's choices: what a person reads -> `LlmSearch.name` (the CLI's --search)
STRATEGIES = (
    ("grid: each point until stable", "grid"),
    ("adaptive: points that cannot win left out, each until decided", "adaptive"),
    ("capacity: each variant's highest load meeting the SLO, by bisection", "capacity"),
)


def _slo_shown(slo: Slo) -> tuple[float, float]:
    return (slo.ttft_ms or 0.0, slo.itl_ms or 0.0)


def _slo_parsed(values: tuple[float, float]) -> Slo:
    """The SLO fields as an `Slo`: 0 leaves that limit out; below 0 is an error (never clamped)."""
    ttft, itl = values
    for what, value in (("TTFT", ttft), ("ITL", itl)):
        if value < 0:
            raise ValueError(f"{what} {value:g} ms is below 0; 0 leaves the limit out")
    return Slo(ttft_ms=ttft or None, itl_ms=itl or None)


class LlmSweepPanel:
    """The LLM sweep's inputs and run; ``result`` is the last `LlmSweepResult` (also ``state.sweep``)."""

    def __init__(self, state: WorkbenchState | None = None, *, runs_dir: str | Path | None = None) -> None:
        self.state = state if state is not None else WorkbenchState()
        self.result: LlmSweepResult | None = None
        self._out_dir: Path | None = None
        self._last_plot = 0.0
        default_runs = Path(runs_dir) if runs_dir is not None else Path(self.state.repository).parent / "runs"
        style = description_style("150px")
        on_enter = {"style": style, "continuous_update": False}
        self.controls: dict[str, widgets.Widget] = {}
        c = self.controls
        c["max_num_seqs"] = widgets.Text(
            description="max seqs", tooltip="vLLM's max_num_seqs of each variant", **on_enter
        )
        c["tensor_parallel"] = widgets.Text(
            description="tensor-parallel",
            tooltip="cores per instance; on the CPU a degree above the NUMA nodes is generated, checked and skipped",
            **on_enter,
        )
        c["instances"] = widgets.Text(description="instances", **on_enter)
        c["concurrency"] = widgets.Text(description="concurrency", tooltip="requests in flight", **on_enter)
        c["input_tokens"] = widgets.IntText(
            description="input tokens", tooltip="prompt length in the model's tokens", style=style
        )
        c["output_tokens"] = widgets.IntText(
            description="output tokens", tooltip="tokens per answer (end of sequence ignored)", style=style
        )
        c["slo_ttft_ms"] = widgets.FloatText(
            description="SLO TTFT p99 (ms)", style=style, tooltip="time to first token; 0: no limit"
        )
        c["slo_itl_ms"] = widgets.FloatText(
            description="SLO ITL p99 (ms)", style=style, tooltip="inter-token latency; 0: no limit"
        )
        self.plan_link: Linked[LlmPlan] = Linked(
            LlmPlan(max_num_seqs=(1, 4), concurrency=(1, 4), input_tokens=16, output_tokens=16)
        )
        for name, what in (
            ("max_num_seqs", "max seqs"),
            ("tensor_parallel", "tensor-parallel"),
            ("instances", "instances"),
            ("concurrency", "concurrency"),
        ):
            self.plan_link.link(name, c[name], parse=partial(parse_counts, what=what), show=comma_joined)
        self.plan_link.link("input_tokens", c["input_tokens"], show=lambda lengths: lengths.mean)
        self.plan_link.link("output_tokens", c["output_tokens"], show=lambda lengths: lengths.mean)
        self.plan_link.link(
            "slo", WidgetGroup(c["slo_ttft_ms"], c["slo_itl_ms"]), parse=_slo_parsed, show=_slo_shown, label="SLO"
        )
        self.plan_link.on_change = lambda _changed: self._inputs_changed()
        # how long each point is measured: windows of streamed requests until two agree (LLM_SETTINGS' defaults)
        c["window_s"] = widgets.FloatText(description="window (s)", style=style)
        c["max_windows"] = widgets.IntText(description="max windows", style=style)
        c["time_limit_s"] = widgets.FloatText(
            description="time limit (s)", style=style, tooltip="seconds a point may keep measuring until it is stable"
        )
        # how long a variant's load (a vLLM engine start) may take: `workbench sweep --timeout`
        c["load_timeout_s"] = widgets.FloatText(
            value=LOAD_TIMEOUT_S,
            description="load timeout (s)",
            style=style,
            tooltip="seconds a variant's load (its vLLM engine's start) may take before the sweep stops waiting",
        )
        self.measure_link: Linked[MeasureSettings] = Linked(LLM_SETTINGS)
        for name in ("window_s", "max_windows"):
            self.measure_link.link(name, c[name])
        self.measure_link.link("time_limit_s", c["time_limit_s"], parse=lambda s: s or None, show=lambda s: s or 0)
        self.measure_link.on_change = lambda _changed: self._inputs_changed()
        # how long each point is measured, as one LlmSearch: until stable (the windows above) or until
        # decided by the effort rule between its own min and max windows (shown only when chosen)
        c["search"] = widgets.Dropdown(
            options=STRATEGIES,
            description="strategy",
            style=style,
            tooltip="grid: every point measured until stable; adaptive: the points a heavier load's "
            "reading cannot rule out, each measured until decided against the best point so far and the SLO; "
            "capacity: per variant the highest load meeting the SLO, by bisection, each level until decided",
        )
        c["min_windows"] = widgets.IntText(
            description="min windows",
            style=style,
            tooltip="adaptive, capacity: no verdict before this many windows (2 at least: an interval needs two)",
        )
        c["effort_max_windows"] = widgets.IntText(
            description="max windows",
            style=style,
            tooltip="adaptive, capacity: a point still undecided after this many "
            "windows stops (cap reached); the time limit still holds",
        )
        self.search_link: Linked[LlmSearch] = Linked(LlmSearch())
        self.search_link.link("name", c["search"])
        self.search_link.link("min_windows", c["min_windows"])
        self.search_link.link("max_windows", c["effort_max_windows"])
        self.search_link.on_change = lambda _changed: self._inputs_changed()
        c["price_as"] = widgets.Dropdown(
            options=PRICED,
            value=PRICED[0],
            description="price as",
            style=style,
            tooltip="the instance whose on-demand price the cost per million output "
            "tokens is worked out at (the share of its cores a configuration holds); "
            "only instances of the hardware the run was measured on",
        )
        c["price_usd"] = widgets.FloatText(
            value=0.0,
            description="your price ($/h)",
            style=style,
            tooltip="your on-demand price per hour for that instance; 0: the "
            "workbench's price list (its date and source are shown)",
        )
        c["runs_dir"] = widgets.Text(
            value=str(default_runs),
            description="runs folder",
            style=style,
            layout=widgets.Layout(width="560px", max_width="100%"),
        )
        c["label"] = widgets.Text(value="", description="run label", placeholder="default: model-llm-time", style=style)
        # on a Ray cluster: each variant a Ray task with its own tritonserver on its node (measure/cluster)
        self.ray = RayControls(style)
        c.update(self.ray.controls)
        c["ray"].observe(lambda _change: self.search_link.show_checks({}), names="value")
        self.run = TaskControls("run LLM sweep", run_tooltip="measure every point in tokens on the running server")
        c["run"], c["cancel"], c["progress"], c["status"] = (
            self.run.run_button,
            self.run.cancel_button,
            self.run.progress,
            self.run.status,
        )
        c["grid_size"] = widgets.HTML()
        c["error"] = widgets.HTML()
        c["best"] = widgets.HTML()
        c["table"] = table_view()
        c["plots"] = hidden(widgets.Tab(children=[plot_image() for _ in PLOTS]))
        for index, title in enumerate(PLOTS):
            c["plots"].set_title(index, title)
        c["run"].on_click(lambda _b: self.start())
        for name in ("price_as", "price_usd"):
            c[name].observe(lambda _change: self._show_best(), names="value")
        f = self.plan_link.field
        # the boxes (control + problem view) shown or hidden with the strategy
        self._rule_fields = [self.search_link.field(name) for name in ("min_windows", "max_windows")]
        self._grid_cap = self.measure_link.field("max_windows")
        self.widget = widgets.VBox(
            [
                widgets.HTML(
                    "<b>LLM sweep</b>: this model is served by Triton's vLLM backend, so it is measured in "
                    "tokens (time to first token, inter-token latency, output tokens/s, goodput under the SLO)."
                ),
                row(f("max_num_seqs"), f("tensor_parallel"), f("instances"), f("concurrency")),
                row(f("input_tokens"), f("output_tokens")),
                f("slo"),
                row(self.search_link.field("name"), *self._rule_fields),
                row(self.measure_link.field("window_s"), self._grid_cap, self.measure_link.field("time_limit_s")),
                c["load_timeout_s"],
                row(c["price_as"], c["price_usd"]),
                row(c["runs_dir"], c["label"]),
                self.ray.widget,
                c["grid_size"],
                self.run.widget,
                c["nodes"],
                c["error"],
                c["best"],
                c["table"],
                c["plots"],
            ]
        )
        self._inputs_changed()

    def _repr_mimebundle_(self, **kwargs):
        return self.widget._repr_mimebundle_(**kwargs)

    def plan(self) -> LlmPlan:
        """The grid the controls describe; SweepError names every bad control value."""
        if self.plan_link.problems:
            raise SweepError("; ".join(self.plan_link.problems))
        return self.plan_link.value

    def effort(self) -> EffortRule | None:
        """``run_llm_sweep``'s ``effort`` as the strategy controls say: None for the grid, else the
        `EffortRule`; SweepError names every bad control value."""
        if self.search_link.problems:
            raise SweepError("; ".join(self.search_link.problems))
        return self.search_link.value.effort()

    def search(self) -> LlmSearch:
        """``run_llm_sweep``'s ``search`` as the strategy controls say; SweepError names every bad value."""
        if self.search_link.problems:
            raise SweepError("; ".join(self.search_link.problems))
        return self.search_link.value

    def _inputs_changed(self) -> None:
        c = self.controls
        if not self.run.running:
            c["error"].value = ""
            self.search_link.show_checks({})  # a strategy refused on Ray: said again at the next start
        search = self.search_link.value
        adaptive = search.name != "grid"  # a search: each point until decided, by the rule's windows
        # the rule's windows only where they count; the grid's window cap, which the rule replaces, only
        # for the grid (or while it is wrong: its problem stays in sight)
        for box in self._rule_fields:
            shown(box, adaptive)
        shown(self._grid_cap, not adaptive or self.measure_link.problem_view("max_windows").layout.display != "none")
        problems = self.plan_link.problems + self.measure_link.problems + self.search_link.problems
        decided = adaptive and not self.search_link.problems
        how = (
            f", each measured until decided ({search.min_windows} to {search.max_windows} windows); "
            + (
                "those a heavier load's reading rules out are left out"
                if search.name == "adaptive"
                else "each variant's loads bisected for the highest meeting the SLO"
            )
            if decided
            else ""
        )
        c["grid_size"].value = (
            f"<i>{len(problems)} problem(s) shown in red beside their fields above</i>"
            if problems
            else f"<i>{'at most ' if decided else ''}{self.plan_link.value.size} point(s){how}</i>"
        )

    # --- running ---------------------------------------------------------------------------------

    def start(self):
        """Start the sweep in the background; returns the Task, or None with the reasons shown."""
        c = self.controls
        c["error"].value = ""
        server, model_dir = self.state.server, self.state.model_dir
        on_ray = self.ray.on  # each node starts its own server: none asked for here
        missing = self.ray.check()  # shown beside the checkbox (nothing unless on Ray)
        strategy = self.search_link.value.name
        refused = {"name": [grid_only(strategy)]} if on_ray and strategy != "grid" else {}
        self.search_link.show_checks(refused)  # beside the strategy, its effort rule with it
        problems = (
            [] if on_ray or (server is not None and server.running) else ["start the server first (server panel)"]
        )
        problems += self.plan_link.problems + self.measure_link.problems + self.search_link.problems
        load_timeout_s = c["load_timeout_s"].value
        if not 0 < load_timeout_s <= 24 * 3600:
            problems.append(f"load timeout (s): {load_timeout_s:g} must be seconds above 0 (at most a day)")
        if not (model_dir / "config.pbtxt").is_file():
            problems.append(f"write the model directory first (preview panel): {model_dir} has no config.pbtxt")
        if missing or refused or problems:
            c["error"].value = error_list(problems)
            return None
        label = c["label"].value.strip() or f"{self.state.name}-llm-{time.strftime('%Y%m%d-%H%M%S')}"
        out_dir = Path(c["runs_dir"].value.strip()) / label
        try:
            check_out_dir(out_dir, False)  # a folder holding a run is refused now, not shown as this run
        except SweepError as err:
            c["error"].value = error_list([f"run label: {err}"])
            return None
        self._out_dir = out_dir
        self.result = None
        c["table"].value = c["best"].value = c["nodes"].value = ""
        for image in c["plots"].children:
            image.value = b""
        hidden(c["plots"])
        if on_ray:
            return self.ray.start(
                self.run,
                self.plan_link.value,
                model_dir,
                out_dir=out_dir,
                settings=self.measure_link.value,
                label=label,
                load_timeout_s=load_timeout_s,
                on_done=self._finished,
                on_progress=lambda _done, _total, _message: self._refresh_live(),
            )
        return self.run.start(
            run_llm_sweep,
            self.plan_link.value,
            server,
            model_dir,
            out_dir=self._out_dir,
            settings=self.measure_link.value,
            label=label,
            search=self.search(),
            load_timeout_s=load_timeout_s,
            on_done=self._finished,
            on_progress=lambda _done, _total, _message: self._refresh_live(),
        )

    def _saved(self) -> LlmSweepResult | None:
        try:
            return load_llm_run(self._out_dir) if self._out_dir is not None else None
        except ResultsError:
            return None  # its run record is not written yet

    def _refresh_live(self) -> None:
        self.ray.show_nodes(self._out_dir)
        result = self._saved()
        if result is None or (self.result is not None and len(result.frame) == len(self.result.frame)):
            return
        self.result = result
        self.controls["table"].value = frame_html(result.table())
        if time.monotonic() - self._last_plot > 2.0:  # drawing is the slow part
            self._draw(result)

    def _finished(self, task) -> None:
        c = self.controls
        if task.state == "failed":
            c["error"].value = error_list([f"LLM sweep failed: {task.error}"])
        self.ray.show_nodes(self._out_dir)
        result = task.result if isinstance(task.result, LlmSweepResult) else self._saved()
        if result is None:
            return
        self.result = self.state.sweep = result
        c["table"].value = frame_html(result.table())
        self._draw(result)
        self._show_best()

    def _draw(self, result: LlmSweepResult) -> None:
        self._last_plot = time.monotonic()
        if result.usable().empty:
            return
        for image, figure in zip(self.controls["plots"].children, (result.plot_pareto(), result.plot_latency())):
            show_figure(image, figure)
        shown(self.controls["plots"])

    def _show_best(self) -> None:
        if self.result is None:
            return
        c = self.controls
        matching = priced_types(measured_on(self.result.record))
        if tuple(c["price_as"].options) != matching:
            c["price_as"].options = matching  # another hardware's types are never offered for this run
        instance, own = c["price_as"].value, c["price_usd"].value
        lines = [
            self.result.describe_best(),
            self.result.describe_cheapest(instance, prices={instance: own} if own else None),
        ]
        c["best"].value = "".join(
            f"<div style='font-weight:bold'>{html.escape(line)}</div>" for line in lines
        ) + _verdicts_html(self.result)


def _verdicts_html(result: LlmSweepResult) -> str:
    """An adaptive run's verdicts under the answer, whole (the table's ``stopped`` column cuts them
    to a line), and what its search left out and why, as ``workbench sweep`` prints them; "" for a grid run."""
    lines = result.verdicts() + result.search_lines()
    return "".join(f"<div class='workbench-verdict'>{html.escape(line)}</div>" for line in lines)
