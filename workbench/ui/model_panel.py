"""Pick a model (zoo entry, your own ``nn.Module``, or a file) and a target, then compile it with a
live log, progress and a working Cancel.

The compile runs in a worker thread (`TaskControls`), so the notebook stays responsive and Cancel
reaches the compiler; what this machine can compile for comes from `workbench.compiler.detect`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import ipywidgets as widgets

from workbench import zoo
from workbench.compiler import TARGETS, Artifact, ArtifactError, compile_model, detect, read_artifact
from workbench.generate.settings import at_least
from workbench.ui.background import LogView, TaskControls
from workbench.ui.layout import button, description_style, row
from workbench.ui.links import field_problem_view, show_field_problems
from workbench.ui.shared_state import WorkbenchState
from workbench.ui.widget_values import error_list, preformatted

_SOURCES = {"zoo": "example zoo", "module": "my nn.Module", "file": "a file (.pt / SavedModel)"}


def _target_label(target: str, system) -> str:
    if target == "cpu":
        return "cpu (serve here)"
    if not system.can_compile(target):
        return f"{target} (SDK not installed here)"
    return f"{target} (compile here, serve on a Neuron host)" if not system.has_device else target


class ModelPanel:
    """The model step. ``module``/``example_inputs`` offer a model built in Python; the compiled
    `Artifact` goes to ``state.artifact`` (a file picked by path to ``state.model_file``)."""

    def __init__(
        self,
        state: WorkbenchState | None = None,
        *,
        module: Any = None,
        example_inputs: Any = None,
        artifacts_dir: str | Path | None = None,
        system=None,
    ) -> None:
        self.state = state if state is not None else WorkbenchState()
        if module is not None:
            self.state.module = module
        self.example_inputs = example_inputs
        self.system = system if system is not None else detect()
        sources = {label: key for key, label in _SOURCES.items() if key != "module" or self.state.module is not None}
        default_dir = (
            Path(artifacts_dir) if artifacts_dir is not None else Path(self.state.repository).parent / "compiled"
        )
        style = description_style("120px")
        self.controls: dict[str, widgets.Widget] = {}
        c = self.controls
        c["source"] = widgets.ToggleButtons(
            options=sources, value="module" if self.state.module is not None else "zoo", style={"button_width": "auto"}
        )  # each as wide as its label
        c["zoo_model"] = widgets.Dropdown(
            options=zoo.names(),
            value="add_sub" if "add_sub" in zoo.names() else None,
            description="zoo model",
            style=style,
        )
        c["zoo_description"] = widgets.HTML()
        c["file_path"] = widgets.Text(
            description="model file",
            placeholder="/path/model.pt or SavedModel folder",
            style=style,
            layout=widgets.Layout(width="560px", max_width="100%"),
        )
        c["use_file"] = button("use this file", icon="folder-open")
        c["name"] = widgets.Text(value=self.state.name, description="name", style=style)
        c["target"] = widgets.Dropdown(
            options={_target_label(t, self.system): t for t in TARGETS},
            value=self.system.default_target,
            description="target",
            style=style,
            layout=widgets.Layout(width="460px", max_width="100%"),
        )
        # a plain number field: 0 is an error beside it, never clamped to 1 without a word
        c["example_batch"] = widgets.IntText(value=1, description="example batch", style=style)
        c["example_batch_problem"] = field_problem_view()
        c["example_batch"].observe(lambda _change: self._check_example_batch(), names="value")
        c["artifacts_dir"] = widgets.Text(
            value=str(default_dir),
            description="compile into",
            style=style,
            layout=widgets.Layout(width="560px", max_width="100%"),
        )
        c["overwrite"] = widgets.Checkbox(
            value=False, description="replace an earlier compile of this name", indent=False
        )
        c["system"] = widgets.HTML(preformatted(self.system.describe()))
        self.compile = TaskControls("compile", run_tooltip="trace/compile in the background")
        c["compile"], c["cancel"] = self.compile.run_button, self.compile.cancel_button
        c["progress"], c["status"] = self.compile.progress, self.compile.status
        self.log = LogView(height="220px", placeholder="compile log: it appears here as the compiler writes it")
        c["log"] = self.log.widget
        c["result"] = widgets.HTML()
        c["use_cpu_twin"] = button(
            "serve the CPU twin here",
            icon="exchange",
            layout=widgets.Layout(display="none"),
            tooltip="the Neuron artifact runs only on a Neuron host",
        )
        c["compile"].on_click(lambda _b: self.start_compile())
        c["use_file"].on_click(lambda _b: self.use_file())
        c["use_cpu_twin"].on_click(lambda _b: self._use_cpu_twin())
        c["source"].observe(lambda _change: self._show_source(), names="value")
        c["zoo_model"].observe(lambda _change: self._zoo_changed(), names="value")
        self._zoo_box = widgets.VBox([c["zoo_model"], c["zoo_description"]])
        self._module_box = widgets.HTML()
        self._file_box = row(c["file_path"], c["use_file"])
        self._compile_box = widgets.VBox(
            [
                row(c["name"], c["target"], widgets.VBox([c["example_batch"], c["example_batch_problem"]])),
                row(c["artifacts_dir"], c["overwrite"]),
                self.compile.widget,
                c["log"],
            ]
        )
        self._source_box = widgets.VBox()
        self.widget = widgets.VBox(
            [
                widgets.HTML("<b>This machine</b>"),
                c["system"],
                widgets.HTML("<b>Model</b>"),
                c["source"],
                self._source_box,
                c["result"],
                c["use_cpu_twin"],
            ]
        )
        self._zoo_changed()
        self._show_source()

    def _repr_mimebundle_(self, **kwargs):
        return self.widget._repr_mimebundle_(**kwargs)

    def _show_source(self) -> None:
        source = self.controls["source"].value
        if source == "file":
            self._source_box.children = [self._file_box]
            return
        if source == "module":
            missing = (
                ""
                if self.example_inputs is not None
                else "\nno example_inputs given: pass ModelPanel(..., example_inputs=...)"
            )
            self._module_box.value = preformatted(f"your module: {type(self.state.module).__name__}{missing}")
            self._source_box.children = [self._module_box, self._compile_box]
        else:
            self._source_box.children = [self._zoo_box, self._compile_box]

    def _zoo_changed(self) -> None:
        name = self.controls["zoo_model"].value
        if name is None:
            return
        self.controls["zoo_description"].value = preformatted(zoo.get(name).description)
        self.controls["name"].value = name

    # --- compile ---------------------------------------------------------------------------------

    def _model_and_inputs(self) -> tuple[Any, Any]:
        if self.controls["source"].value == "module":
            if self.example_inputs is None:
                raise ValueError("no example inputs for your module: ModelPanel(state, module=m, example_inputs=(x,))")
            return self.state.module, self.example_inputs
        entry = zoo.get(self.controls["zoo_model"].value)
        batch = self._check_example_batch()
        if batch is None:
            raise ValueError(f"example batch: {self.controls['example_batch'].value} is less than 1")
        return entry.module, entry.example_inputs(batch)

    def _check_example_batch(self) -> int | None:
        """The example batch, or None with the problem shown directly under its field."""
        try:
            batch = at_least(1, "the traced example holds at least one sample")(self.controls["example_batch"].value)
        except ValueError as err:
            show_field_problems(self.controls["example_batch_problem"], [f"example batch: {err}"])
            return None
        show_field_problems(self.controls["example_batch_problem"], [])
        return batch

    def start_compile(self):
        """Start compiling in the background; returns the `Task` (None when the inputs are bad)."""
        c = self.controls
        c["result"].value = ""
        c["use_cpu_twin"].layout.display = "none"
        name = c["name"].value.strip()
        try:
            if not name:
                raise ValueError("give the model a name")
            module, inputs = self._model_and_inputs()
        except (ValueError, KeyError) as err:
            c["result"].value = error_list([str(err)])
            return None
        self.log.clear()
        return self.compile.start(
            compile_model,
            module,
            inputs,
            c["target"].value,
            out_dir=c["artifacts_dir"].value.strip(),
            name=name,
            overwrite=c["overwrite"].value,
            log=self.log.append,
            on_done=lambda task: self._compiled(task, module, name),
        )

    def _compiled(self, task, module, name: str) -> None:
        c = self.controls
        if task.state != "done":
            if task.state == "failed":
                c["result"].value = error_list([f"compile failed: {task.error}"])
            return
        artifact: Artifact = task.result
        c["result"].value = preformatted(artifact.describe())
        self.state.module = module
        self.state.name = name
        self.state.model_file = ""
        self.state.artifact = artifact
        if not artifact.runs_on_cpu and artifact.cpu_artifact is not None and not self.system.has_device:
            c["use_cpu_twin"].layout.display = None

    def _use_cpu_twin(self) -> None:
        twin = self.state.artifact.cpu_artifact if self.state.artifact is not None else None
        if twin is not None:
            self.state.artifact = twin
            self.controls["result"].value = preformatted(twin.describe())
            self.controls["use_cpu_twin"].layout.display = "none"

    # --- a file --------------------------------------------------------------------------------

    def use_file(self) -> None:
        """Take a compiled file by path: with its compile record the tensors come along; without,
        the settings panel asks for them (a SavedModel folder is read by the generator)."""
        c = self.controls
        text = c["file_path"].value.strip()
        path = Path(text).expanduser()
        if not text or not path.exists():
            c["result"].value = error_list([f"model file {text!r} does not exist"])
            return
        try:
            artifact = read_artifact(path)
        except ArtifactError:
            artifact = None
        self.state.module = None
        if artifact is not None:
            self.state.artifact = artifact
            c["result"].value = preformatted(artifact.describe())
            return
        self.state.artifact = None
        self.state.framework = "tensorflow" if path.is_dir() else "pytorch"
        self.state.model_file = str(path.resolve())
        kind = "SavedModel folder" if path.is_dir() else "TorchScript file"
        c["result"].value = preformatted(
            f"{kind} {path.resolve()} (no compile record): fill in its inputs and "
            "outputs in the settings" + (" or leave them empty to read the signature" if path.is_dir() else "")
        )
