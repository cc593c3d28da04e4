"""The sweep panels' "on a Ray cluster" controls, shared by the tensor and the LLM sweep panel: the
checkbox, the Ray address, what a sweep on Ray cannot do (said before anything starts), the start
of `run_sweep_on_ray` as the panel's background task (Cancel ends the Ray tasks), and the nodes
view that follows the run record.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path

import ipywidgets as widgets

from workbench.measure.cluster.ray_kinds import measured_on_ray
from workbench.measure.cluster.ray_task import RAY_MISSING
from workbench.measure.engine.measure_settings import MeasureSettings
from workbench.measure.grid.plan import SweepPlan
from workbench.measure.llm.plan import LlmPlan
from workbench.measure.store.folder import read_record
from workbench.measure.store.results import ResultsError
from workbench.tasks import Task
from workbench.ui.background import TaskControls
from workbench.ui.layout import row
from workbench.ui.widget_values import error_list, ray_nodes_html

__all__ = ["RayControls", "grid_only", "ray_missing"]


def ray_missing() -> bool:
    """True where Ray is not installed (or ``sys.modules["ray"]`` is None: marked absent)."""
    try:
        return importlib.util.find_spec("ray") is None
    except ValueError:
        return True


def grid_only(strategy: str) -> str:
    """A search strategy refused on Ray (as ``workbench sweep --ray`` refuses ``--search``): each
    node measures its variant's whole grid."""
    return f"on a Ray cluster the whole grid is measured: strategy grid, not {strategy}"


class RayControls:
    """The checkbox, the address, the problem line beside them and the nodes view of one panel."""

    def __init__(self, style: dict) -> None:
        self.checkbox = widgets.Checkbox(
            value=False,
            description="on a Ray cluster",
            indent=False,
            tooltip="measure each variant as a Ray task on the cluster's nodes (the ray extra), not on the running server",
        )
        self.address = widgets.Text(
            description="Ray address",
            placeholder="default: RAY_ADDRESS or a local Ray",
            style=style,
            layout=widgets.Layout(width="420px", max_width="100%"),
        )
        self.problem = widgets.HTML()  # what stops a sweep on Ray here (Ray not installed), under the field
        self.nodes = widgets.HTML()  # a Ray sweep: the dashboard's address, each node's variants
        self.widget = widgets.VBox([row(self.checkbox, self.address), self.problem])
        # under the names a panel's ``controls`` gives them
        self.controls = {
            "ray": self.checkbox,
            "ray_address": self.address,
            "ray_problem": self.problem,
            "nodes": self.nodes,
        }
        self.checkbox.observe(lambda _change: self.clear(), names="value")

    @property
    def on(self) -> bool:
        return bool(self.checkbox.value)

    def clear(self) -> None:
        self.problem.value = ""

    def check(self) -> list[str]:
        """The problems of the cluster side (Ray not installed), shown beside the checkbox and returned."""
        problems = [RAY_MISSING] if self.on and ray_missing() else []
        self.problem.value = error_list(problems) if problems else ""
        return problems

    def start(
        self,
        run: TaskControls,
        plan: SweepPlan | LlmPlan,
        model_dir: Path,
        *,
        out_dir: Path,
        settings: MeasureSettings,
        label: str,
        on_done: Callable[[Task], None],
        on_progress: Callable[[int, int, str], None],
        load_timeout_s: float | None = None,
    ) -> Task:
        """Each variant a Ray task on the cluster (`run_sweep_on_ray`) in ``run``'s background task;
        Cancel sets its ``cancel``, which ends the tasks and their servers. ``load_timeout_s``: how
        long each variant's load may take (None: the sweep kind's own limit)."""
        # the Ray module (and ray with it) loads only when a sweep runs on Ray
        from workbench.measure.cluster import run_sweep_on_ray

        self.nodes.value = "<i>connecting to Ray</i>"
        return run.start(
            run_sweep_on_ray,
            plan,
            model_dir,
            out_dir=out_dir,
            settings=settings,
            address=self.address.value.strip() or None,
            label=label,
            load_timeout_s=load_timeout_s,
            on_done=on_done,
            on_progress=on_progress,
        )

    def show_nodes(self, out_dir: Path | None) -> None:
        """A Ray sweep's nodes, as its run record says them (nothing for a sweep on one server)."""
        try:
            record = read_record(out_dir) if out_dir is not None else {}
        except ResultsError:
            return  # not written yet
        if measured_on_ray(record):
            self.nodes.value = ray_nodes_html(record)
