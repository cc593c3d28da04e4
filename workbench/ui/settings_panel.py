"""Generation settings as widgets, with a live per-instance core map.

Every edit rebuilds one `GenerateSettings` and checks it with `workbench.generate.validate`, so a
bad core range, a preferred batch size above max_batch_size or a dims typo shows up next to the
control before anything is written; the core map shows which cores each instance gets and which
stay idle while the user types.
"""

from __future__ import annotations

import html
from pathlib import Path

import ipywidgets as widgets

from workbench import generate
from workbench.generate.config import FRAMEWORKS, TARGETS
from workbench.generate.settings import TNX_AMPS
from workbench.coremap import CoreRange, CoreRangeError
from workbench.spec import ModelSpec, SpecError, TensorSpec
from workbench.ui.render import core_map_html, error_list
from workbench.ui.state import WorkbenchState
from workbench.ui.tensor_table import TensorTable

_BATCHING_MODES = {
    "one model call per batch of requests": False,
    "one model call per request": True,  # upstream --disable_batch_requests_to_neuron
}


_TNX_FIELDS = (  # control key (= GenerateSettings field), label, placeholder
    ("tnx_model_class", "model class", "e.g. LlamaForSampling"),
    ("tnx_batch_size", "batch size", "from the compile"),
    ("tnx_tp_degree", "tp degree", "the instance's cores"),
    ("tnx_n_positions", "n_positions", "from the compile"),
    ("tnx_sequence_length", "sequence length", "n_positions"),
    ("tnx_unroll", "unroll", "SDK default"),
)


def _tnx_value(key: str, label: str, text: str):
    """Blank -> None (use the recorded or default value); the class stays text; the rest are whole numbers."""
    text = text.strip()
    if not text or key == "tnx_model_class":
        return text or None
    try:
        return int(text)
    except ValueError:
        raise SpecError(f"transformers-neuronx {label}: {text!r} is not a whole number") from None


def _parse_sizes(text: str) -> list[int]:
    sizes = []
    for part in text.replace(" ", ",").split(","):
        if not part:
            continue
        try:
            sizes.append(int(part))
        except ValueError:
            raise SpecError(f"preferred batch sizes: {part!r} is not a whole number (write e.g. 4,8)") from None
    return sizes


class SettingsPanel:
    """Inputs/outputs, batching, cores and instances for one model. Every edit publishes
    ``state.settings`` and ``state.generated`` (None while invalid; ``problems`` says why)."""

    def __init__(self, state: WorkbenchState | None = None) -> None:
        self.state = state if state is not None else WorkbenchState()
        self.problems: list[str] = []
        self._auto_items: tuple[list[str], list[str]] | None = None
        self._building = True
        c = self.controls = {}
        wide = widgets.Layout(width="420px")
        style = {"description_width": "170px"}
        # Text fields update on Enter/blur (each update validates and renders the model); the core
        # fields update as typed, so the core map is live.
        on_enter = {"style": style, "continuous_update": False}
        live = {"style": style, "continuous_update": True}
        c["name"] = widgets.Text(value=self.state.name, description="model name", layout=wide, **on_enter)
        c["compiled_model"] = widgets.Text(value="", description="compiled model",
                                           placeholder="path of the .pt / SavedModel",
                                           layout=widgets.Layout(width="640px"), **on_enter)
        c["copy_compiled_model"] = widgets.Checkbox(value=True, description="copy it into the model directory",
                                                    indent=False)
        c["target"] = widgets.Dropdown(options=TARGETS, value=self.state.target, description="target", style=style)
        c["framework"] = widgets.Dropdown(options=FRAMEWORKS, value=self.state.framework, description="framework",
                                          style=style)
        c["inputs"] = TensorTable("input", on_change=self._changed)
        c["outputs"] = TensorTable("output", on_change=self._changed)
        c["max_batch_size"] = widgets.BoundedIntText(value=0, min=0, max=1_000_000, description="max batch size",
                                                     style=style)
        c["dynamic_batching"] = widgets.Checkbox(value=False, description="dynamic batching", indent=False)
        c["preferred_batch_sizes"] = widgets.Text(value="", description="preferred batch sizes",
                                                  placeholder="e.g. 4,8", **on_enter)
        c["max_queue_delay_us"] = widgets.Text(value="", description="max queue delay (µs)", placeholder="e.g. 100",
                                               **on_enter)
        c["core_range"] = widgets.Text(value="0:0", description="core range a:b", **live)
        c["instance_count"] = widgets.BoundedIntText(value=1, min=1, max=1024, description="instances", **live)
        # 0 leaves NUM_THREADS_PER_CORE out: the SDK's DataParallel workers on Neuron, 1 thread per core on the cpu
        c["threads_per_core"] = widgets.BoundedIntText(value=0, min=0, max=64, description="threads per core",
                                                       tooltip="0: the default (Neuron SDK's workers; 1 on the cpu)",
                                                       **live)
        c["batching_mode"] = widgets.Dropdown(options=list(_BATCHING_MODES), description="batching mode", style=style,
                                              layout=widgets.Layout(width="520px"))
        c["cpu_affinity"] = widgets.Checkbox(value=False, description="pin CPU instances to their cores",
                                             indent=False)
        # transformers-neuronx sampling settings: blank means "what the compile recorded, else model.py's default"
        for key, label, hint in _TNX_FIELDS:
            c[key] = widgets.Text(value="", description=label, placeholder=hint, **on_enter)
        c["tnx_amp"] = widgets.Dropdown(options=("", *TNX_AMPS), value="", description="amp", style=style)
        c["core_map"] = widgets.HTML()
        c["problems"] = widgets.HTML()
        c["warnings"] = widgets.HTML()
        for key in ("name", "compiled_model", "copy_compiled_model", "target", "framework", "dynamic_batching",
                    "preferred_batch_sizes", "max_queue_delay_us", "core_range", "instance_count",
                    "threads_per_core", "batching_mode", "cpu_affinity", "tnx_amp", *(f[0] for f in _TNX_FIELDS)):
            c[key].observe(lambda _change: self._changed(), names="value")
        c["max_batch_size"].observe(self._batch_size_changed, names="value")
        self.widget = widgets.VBox([
            widgets.HTML("<h4 style='margin:4px 0'>Model</h4>"),
            widgets.HBox([c["name"], c["target"], c["framework"]]),
            widgets.HBox([c["compiled_model"], c["copy_compiled_model"]]),
            c["inputs"].widget, c["outputs"].widget,
            widgets.HTML("<h4 style='margin:4px 0'>Batching</h4>"),
            widgets.HBox([c["max_batch_size"], c["dynamic_batching"]]),
            widgets.HBox([c["preferred_batch_sizes"], c["max_queue_delay_us"]]),
            c["batching_mode"],
            widgets.HTML("<h4 style='margin:4px 0'>Cores and instances</h4>"),
            widgets.HBox([c["core_range"], c["instance_count"], c["threads_per_core"]]),
            c["cpu_affinity"], c["core_map"],
        ])
        self.tnx_box = widgets.VBox([
            widgets.HTML("<h4 style='margin:4px 0'>transformers-neuronx sampling</h4>"),
            widgets.HBox([c["tnx_model_class"], c["tnx_batch_size"], c["tnx_tp_degree"]]),
            widgets.HBox([c["tnx_n_positions"], c["tnx_sequence_length"], c["tnx_unroll"], c["tnx_amp"]]),
        ])
        self.widget.children += (self.tnx_box, c["problems"], c["warnings"])
        self.state.observe(self._artifact_changed, names="artifact")
        self.state.observe(self._model_file_changed, names="model_file")
        self.state.observe(lambda change: self._set_quietly("name", change["new"]), names="name")
        self.state.observe(lambda change: self._set_quietly("target", change["new"]), names="target")
        self.state.observe(lambda change: self._set_quietly("framework", change["new"]), names="framework")
        self._building = False
        if self.state.artifact is not None:
            self._artifact_changed({"new": self.state.artifact})
        else:
            self._changed()

    def _repr_mimebundle_(self, **kwargs):
        return self.widget._repr_mimebundle_(**kwargs)

    # --- filling from the model step -------------------------------------------------------------

    def _set_quietly(self, key: str, value) -> None:
        if self.controls[key].value != value:
            self.controls[key].value = value

    def _spec_items(self, spec: ModelSpec, batch_dim: bool) -> tuple[list[str], list[str]]:
        """The compiled model's tensors as config dims: Triton adds the batch dim when batching,
        otherwise the config carries it as -1."""
        if self.controls["max_batch_size"].value == 0 and batch_dim:
            spec = spec.with_batch_dim(-1)
        return [t.upstream() for t in spec.inputs], [t.upstream() for t in spec.outputs]

    def _fill_tensors(self, items: tuple[list[str], list[str]]) -> None:
        self._building = True
        try:
            self.controls["inputs"].set_tensors(TensorSpec.parse(i) for i in items[0])
            self.controls["outputs"].set_tensors(TensorSpec.parse(i) for i in items[1])
        finally:
            self._building = False
        self._auto_items = items

    def _artifact_changed(self, change) -> None:
        artifact = change["new"]
        if artifact is None:
            return
        self._building = True
        try:
            self.controls["compiled_model"].value = str(artifact.path)
            self.controls["target"].value = artifact.target
            self.controls["framework"].value = artifact.framework
            if artifact.batch_dim and self.controls["max_batch_size"].value == 0:
                # a model traced with a batch dim starts batchable rather than with batching off
                self.controls["max_batch_size"].value = 8
        finally:
            self._building = False
        self._fill_tensors(self._spec_items(artifact.spec, artifact.batch_dim))
        self._changed()

    def _model_file_changed(self, change) -> None:
        """A model file picked by path (no compile record): the user fills in the tensors."""
        path = change["new"]
        if path:
            self._set_quietly("compiled_model", str(path))

    def _batch_size_changed(self, _change) -> None:
        artifact = self.state.artifact
        if artifact is not None and self._auto_items is not None and self._current_items() == self._auto_items:
            self._fill_tensors(self._spec_items(artifact.spec, artifact.batch_dim))
        self._changed()

    def _current_items(self) -> tuple[list[str], list[str]]:
        def items(table: TensorTable) -> list[str]:
            return [f"{r.name.value.strip()},{r.dtype.value},{r.dims.value.strip()}" for r in table.rows]
        return items(self.controls["inputs"]), items(self.controls["outputs"])

    # --- settings out ----------------------------------------------------------------------------

    def build_settings(self) -> generate.GenerateSettings:
        """The settings the controls describe; a SpecError names a malformed control value."""
        c = self.controls
        delay_text = c["max_queue_delay_us"].value.strip()
        try:
            delay = int(delay_text) if delay_text else None
        except ValueError:
            raise SpecError(f"max queue delay: {delay_text!r} is not a whole number of microseconds") from None
        inputs = [t.upstream() for t in c["inputs"].tensors()]  # a bad row is named by its number
        outputs = [t.upstream() for t in c["outputs"].tensors()]
        name = c["name"].value.strip()
        return generate.GenerateSettings(
            triton_model_dir=str(Path(self.state.repository) / name) if name else "",
            name=name or None,
            compiled_model=c["compiled_model"].value.strip(),
            copy_compiled_model=c["copy_compiled_model"].value,
            framework=c["framework"].value,
            target=c["target"].value,
            triton_input=inputs,
            triton_output=outputs,
            neuron_core_range=c["core_range"].value.strip(),
            triton_model_instance_count=c["instance_count"].value,
            threads_per_core=c["threads_per_core"].value or None,
            max_batch_size=c["max_batch_size"].value,
            enable_dynamic_batching=c["dynamic_batching"].value,
            preferred_batch_size=_parse_sizes(c["preferred_batch_sizes"].value),
            max_queue_delay_microseconds=delay,
            disable_batch_requests_to_neuron=_BATCHING_MODES[c["batching_mode"].value],
            cpu_affinity=c["cpu_affinity"].value,
            tnx_amp=c["tnx_amp"].value or None,
            **{key: _tnx_value(key, label, c[key].value) for key, label, _hint in _TNX_FIELDS},
        )

    def _show_core_map(self) -> None:
        c = self.controls
        try:
            core_map = CoreRange.parse(c["core_range"].value).split(c["instance_count"].value,
                                                                 c["threads_per_core"].value or 1)
            c["core_map"].value = core_map_html(core_map)
        except CoreRangeError as err:
            c["core_map"].value = error_list([f"core map: {err}"])

    def _changed(self) -> None:
        if self._building:
            return
        c = self.controls
        c["preferred_batch_sizes"].disabled = c["max_queue_delay_us"].disabled = not c["dynamic_batching"].value
        c["cpu_affinity"].disabled = c["target"].value != "cpu"
        self.tnx_box.layout.display = None if c["framework"].value == "transformers_neuronx" else "none"
        self._show_core_map()
        generated = None
        try:
            settings = self.build_settings()
            generated = generate.render(settings)
            problems = []
        except SpecError as err:
            settings, problems = None, [str(err)]
        except generate.GenerateError as err:
            problems = err.problems
        self.problems = problems
        c["problems"].value = error_list(problems)
        warnings = generated.warnings if generated is not None else []
        c["warnings"].value = "".join(f"<div style='color:#a05a00'>warning: {html.escape(w)}</div>" for w in warnings)
        name = c["name"].value.strip()
        if name and name != self.state.name:
            self.state.name = name
        self.state.target, self.state.framework = c["target"].value, c["framework"].value
        self.state.settings = settings if generated is not None else None
        self.state.generated = generated
