"""Open saved sweep runs and compare two: the table, the best configuration, plots, and B/A
ratios on the points both runs measured.

Everything is read back from run folders on disk, so runs from earlier sessions, other machines
or the command line are first-class here.
"""

from __future__ import annotations

import html
from pathlib import Path

import ipywidgets as widgets

from workbench.measure.llm.result import LlmComparison, LlmSweepResult, load_llm_run
from workbench.measure.store import plots
from workbench.measure.store.results import (
    Comparison,
    ResultsError,
    SweepResult,
    compare_runs,
    list_runs,
    load_run,
    record_kind,
)
from workbench.ui.layout import button, description_style, plot_image, row, table_view
from workbench.ui.shared_state import WorkbenchState
from workbench.ui.widget_values import best_html, error_list, frame_html, preformatted, show_figure, table_html


class ResultsPanel:
    """Run browser: pick a run to inspect, or two to compare (``comparison`` holds the last one)."""

    def __init__(self, state: WorkbenchState | None = None, *, runs_dir: str | Path | None = None) -> None:
        self.state = state if state is not None else WorkbenchState()
        self.run: SweepResult | LlmSweepResult | None = None
        self.comparison: Comparison | LlmComparison | None = None
        default_runs = Path(runs_dir) if runs_dir is not None else Path(self.state.repository).parent / "runs"
        style = description_style("110px")
        self.controls: dict[str, widgets.Widget] = {}
        c = self.controls
        c["runs_dir"] = widgets.Text(
            value=str(default_runs),
            description="runs folder",
            style=style,
            layout=widgets.Layout(width="560px", max_width="100%"),
        )
        c["scan"] = button("list runs", icon="search")
        c["runs"] = table_view()
        c["run"] = widgets.Dropdown(
            options=[], description="run", style=style, layout=widgets.Layout(width="560px", max_width="100%")
        )
        c["open"] = button("open", icon="folder-open")
        c["report"] = button("write report", icon="file-text", tooltip="one HTML file of this run that opens offline")
        c["report_path"] = widgets.HTML()
        c["budget_ms"] = widgets.FloatText(value=0.0, description="p99 budget (ms)", style=style)
        c["best"] = widgets.HTML()
        c["table"] = table_view()
        c["plot"] = plot_image()
        c["heatmap"] = plot_image()
        c["run_a"] = widgets.Dropdown(
            options=[], description="A (before)", style=style, layout=widgets.Layout(width="560px", max_width="100%")
        )
        c["run_b"] = widgets.Dropdown(
            options=[], description="B (after)", style=style, layout=widgets.Layout(width="560px", max_width="100%")
        )
        c["compare"] = button("compare B to A", icon="balance-scale")
        c["compare_report"] = button(
            "write comparison report", icon="file-text", tooltip="one HTML file of B against A that opens offline"
        )
        c["summary"] = widgets.HTML()
        c["comparison_table"] = table_view()
        c["comparison_plot"] = plot_image()
        c["error"] = widgets.HTML()
        c["scan"].on_click(lambda _b: self.scan())
        c["open"].on_click(lambda _b: self.open())
        c["compare"].on_click(lambda _b: self.compare())
        c["report"].on_click(lambda _b: self.write_report())
        c["compare_report"].on_click(lambda _b: self.write_report(compared=True))
        c["budget_ms"].observe(lambda _change: self._show_best(), names="value")
        for key in ("runs_dir", "run_a", "run_b"):  # an error about the picks goes once they change
            c[key].observe(lambda _change: setattr(c["error"], "value", ""), names="value")
        c["run"].observe(lambda change: change["new"] and self.open(change["new"]), names="value")
        self.state.observe(lambda _change: self.scan(), names="sweep")
        self.widget = widgets.VBox(
            [
                row(c["runs_dir"], c["scan"]),
                c["runs"],
                c["error"],
                widgets.HTML("<h4 style='margin:4px 0'>One run</h4>"),
                row(c["run"], c["open"], c["report"]),
                c["report_path"],
                c["budget_ms"],
                c["best"],
                c["table"],
                c["plot"],
                c["heatmap"],
                widgets.HTML("<h4 style='margin:4px 0'>Compare two runs</h4>"),
                c["run_a"],
                c["run_b"],
                row(c["compare"], c["compare_report"]),
                c["summary"],
                c["comparison_table"],
                c["comparison_plot"],
            ]
        )

    def _repr_mimebundle_(self, **kwargs):
        return self.widget._repr_mimebundle_(**kwargs)

    def scan(self) -> list[str]:
        """List the runs in the folder (newest first) and offer them in the pickers."""
        c = self.controls
        c["error"].value = ""
        folder = Path(c["runs_dir"].value.strip())
        if not folder.is_dir():
            c["runs"].value = f"<i>{html.escape(str(folder))} has no runs yet</i>"
            return []
        try:
            frame = list_runs(folder)
        except ResultsError as err:
            c["error"].value = error_list([str(err)])
            return []
        c["runs"].value = frame_html(frame.drop(columns=["path"]))
        options = {f"{row.label} ({row.status}, {row.points} points)": row.path for row in frame.itertuples()}
        paths = list(options.values())
        picks = {key: c[key].value for key in ("run", "run_a", "run_b")}
        defaults = {
            "run": paths[0] if paths else None,  # newest first
            "run_a": paths[1] if len(paths) >= 2 else None,
            "run_b": paths[0] if len(paths) >= 2 else None,
        }
        for key in ("run", "run_a", "run_b"):
            c[key].options = options  # this clears the pick: keep the user's while it is still listed
            c[key].value = picks[key] if picks[key] in paths else defaults[key]
        return paths

    def _budget(self) -> float | None:
        value = self.controls["budget_ms"].value
        return value if value and value > 0 else None

    def open(self, path: str | Path | None = None):
        """Show one run: best configuration, table and latency plot."""
        c = self.controls
        path = path if path is not None else c["run"].value
        if not path:
            c["error"].value = error_list(["pick a run (list runs first)"])
            return None
        try:
            self.run = load_llm_run(path) if record_kind(path) == "llm" else load_run(path)
        except ResultsError as err:
            self.run = None  # the last run's table and plots go: they are not this pick's
            c["table"].value = c["best"].value = c["report_path"].value = ""
            c["plot"].value = c["heatmap"].value = b""
            c["error"].value = error_list([str(err)])
            return None
        c["error"].value = ""
        if isinstance(self.run, LlmSweepResult):  # measured in tokens: its own table and plots
            c["table"].value = frame_html(self.run.table())
            show_figure(c["plot"], self.run.plot_pareto())
            show_figure(c["heatmap"], self.run.plot_latency())
        else:
            c["table"].value = table_html(self.run)
            show_figure(c["plot"], plots.throughput_vs_latency(self.run))
            show_figure(c["heatmap"], plots.throughput_heatmap(self.run))
        self._show_best()
        return self.run

    def _show_best(self) -> None:
        if isinstance(self.run, LlmSweepResult):
            self.controls["best"].value = f"<div style='font-weight:bold'>{html.escape(self.run.describe_best())}</div>"
        elif self.run is not None:
            self.controls["best"].value = best_html(self.run, self._budget())

    def compare(self):
        """Compare run B with run A on their common points."""
        c = self.controls
        a, b = c["run_a"].value, c["run_b"].value
        self.comparison = None  # the last comparison goes, whatever this one gives
        c["summary"].value = c["comparison_table"].value = ""
        c["comparison_plot"].value = b""
        if not a or not b:
            c["error"].value = error_list(["pick two runs to compare"])
            return None
        if a == b:
            c["error"].value = error_list(["A and B are the same run; pick two different runs"])
            return None
        try:
            self.comparison = compare_runs(a, b)
        except ResultsError as err:
            c["error"].value = error_list([str(err)])
            return None
        c["error"].value = ""
        c["summary"].value = preformatted(self.comparison.summary())
        c["comparison_table"].value = frame_html(self.comparison.table)
        if not isinstance(self.comparison, LlmComparison):  # LLM runs: the ratios in the table
            show_figure(c["comparison_plot"], plots.comparison_plot(self.comparison))
        return self.comparison

    def write_report(self, compared: bool = False) -> Path | None:
        """Write the open run's report (or, ``compared``, B's against A's) as one HTML file in the
        run's folder (`workbench.report.html.save_report`) and say where it went."""
        # start-up: a report's computation (pandas, matplotlib) loads when one is written
        from workbench.report.html import save_report

        c = self.controls
        c["report_path"].value = ""
        if compared:
            a, b = c["run_a"].value, c["run_b"].value
            if not a or not b or a == b:
                c["error"].value = error_list(["pick two different runs as A and B, then write their report"])
                return None
            runs = (a, b)
        else:
            if self.run is None:
                c["error"].value = error_list(["open a run first, then write its report"])
                return None
            runs = (self.run, None)
        llm = [
            run
            for run in runs
            if isinstance(run, LlmSweepResult) or (isinstance(run, str) and record_kind(run) == "llm")
        ]
        if llm:
            first = llm[0]  # an open run (loaded from its folder) or a run folder's path
            folder = first.path if isinstance(first, LlmSweepResult) else Path(str(first))
            held = (
                sorted(p.name + ("/" if p.is_dir() else "") for p in folder.iterdir())
                if folder is not None and folder.is_dir()
                else []
            )
            c["error"].value = error_list(
                [
                    f"a report of an LLM sweep is not written yet: its folder {folder} holds "
                    f"{', '.join(held) or 'nothing'}; this tab shows its table and plots"
                ]
            )
            return None
        try:
            path = save_report(*runs, latency_budget_ms=self._budget())
        except (ResultsError, OSError) as err:
            c["error"].value = error_list([f"the report was not written: {err}"])
            return None
        c["error"].value = ""
        c["report_path"].value = f"report written: <code>{html.escape(str(path))}</code> (one file; opens offline)"
        return path
