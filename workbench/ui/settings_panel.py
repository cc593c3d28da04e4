"""Generation settings as widgets linked to one `GenerateSettings`, with a live per-instance core map.

Every control is linked to a field of ``link.value`` (a `GenerateSettings`) through the logic
layer's parser for it, so a bad core range, a preferred batch size above max_batch_size or a dims
typo shows up next to the controls before anything is written; the core map shows which cores each
instance gets and which stay idle while the user types. A compiled model published by the model
panel changes the settings, and the controls follow.
"""

from __future__ import annotations

import html
from pathlib import Path

import ipywidgets as widgets

from workbench import generate
from workbench.coremap import CoreRange, CoreRangeError
from workbench.generate import options
from workbench.generate.backends import BACKENDS, backend_of, switching_to, unread_fields
from workbench.generate.config import FRAMEWORKS, TARGETS, parameter_string
from workbench.generate.problem_words import FieldProblem, in_labels
from workbench.generate.pytorch_backend import PYTORCH
from workbench.generate.pytorch_backend.generate import layout_of_settings
from workbench.generate.settings import TNX_AMPS, at_least, optional_text, optional_whole, whole_numbers
from workbench.generate.vllm_backend import VLLM
from workbench.spec import ModelSpec, SpecError, tensors_from_rows
from workbench.ui.layout import description_style, heading, row
from workbench.ui.links import Linked, WidgetGroup, blank_if_none, comma_joined
from workbench.ui.pytorch_fields import PyTorchParameters
from workbench.ui.shared_state import WorkbenchState
from workbench.ui.tensor_table import TensorTable
from workbench.ui.vllm_fields import VllmFields
from workbench.ui.widget_values import core_map_html, error_list

_BATCHING_MODES = {
    "one model call per batch of requests": False,
    "one model call per request": True,  # upstream --disable_batch_requests_to_neuron
}


_BACKENDS = {backend.label: name for name, backend in BACKENDS.items()}
_RUNTIMES = {"TorchScript (model.pt)": "", "PyTorch 2 (runtime model.py)": "model.py"}

# control -> the GenerateSettings field it shows: greyed out for a backend that does not read it
_BACKEND_SPECIFIC_CONTROLS = {
    "copy_compiled_model": "copy_compiled_model",
    "core_range": "neuron_core_range",
    "compiled_model": "compiled_model",
    "max_batch_size": "max_batch_size",
    "dynamic_batching": "enable_dynamic_batching",
    "instance_count": "triton_model_instance_count",
    "threads_per_core": "threads_per_core",
    "batching_mode": "disable_batch_requests_to_neuron",
    "cpu_affinity": "cpu_affinity",
}

# the dynamic batcher's own fields: greyed out, and back to their defaults, without the dynamic batcher
# (each control is named as its GenerateSettings field)
_BATCHER_FIELDS = (
    "preserve_ordering",
    "priority_levels",
    "default_priority_level",
    "default_queue_policy",
    "priority_queue_policy",
)

# the fields the core map is made of
_CORE_FIELDS = ("neuron_core_range", "triton_model_instance_count", "threads_per_core")

_TNX_FIELDS = (  # control key (= GenerateSettings field), label, placeholder
    ("tnx_model_class", "model class", "e.g. LlamaForSampling"),
    ("tnx_batch_size", "batch size", "from the compile"),
    ("tnx_tp_degree", "tp degree", "the instance's cores"),
    ("tnx_n_positions", "n_positions", "from the compile"),
    ("tnx_sequence_length", "sequence length", "n_positions"),
    ("tnx_unroll", "unroll", "SDK default"),
)


def _shown(value: object) -> str:
    """A setting's value as a field shows it (blank: none)."""
    return "none" if value is None or value == "" else str(value)


def _rows(tensors) -> tuple:
    return tuple(t.row() for t in tensors)


def _rate_limiter(shown: tuple[str, int]) -> options.RateLimiter | None:
    resources, priority = shown
    return options.parse_rate_limiter(resources, at_least(0, "the priority is 0 or more")(priority))


def _warmup(shown: tuple[int, str]) -> list[options.Warmup]:
    count, data = shown
    return options.warmup_samples(at_least(0, "0 means no warm-up")(count), data)


class SettingsPanel:
    """Inputs/outputs, batching, cores and instances for one model. ``link.value`` is the
    `GenerateSettings` the controls describe; every edit publishes ``state.settings`` and
    ``state.generated`` (None while invalid; ``problems`` and ``state.settings_problems`` say why)."""

    def __init__(self, state: WorkbenchState | None = None) -> None:
        self.state = state if state is not None else WorkbenchState()
        self.problems: list[str] = []
        self._auto_tensors: tuple | None = None  # what the compiled model filled in
        # the user's values a backend switch reset (a field the chosen backend does not read): given back
        # when a backend that reads it is chosen again
        self._set_aside: dict[str, object] = {}
        self.controls: dict[str, widgets.Widget] = {}
        c = self.controls
        wide = widgets.Layout(width="420px")
        style = description_style("170px")
        # Text fields update on Enter/blur (each update validates and renders the model); the core
        # fields update as typed, so the core map is live.
        on_enter = {"style": style, "continuous_update": False}
        live = {"style": style, "continuous_update": True}
        c["name"] = widgets.Text(description="model name", layout=wide, **on_enter)
        c["compiled_model"] = widgets.Text(
            description="compiled model",
            placeholder="path of the .pt / SavedModel",
            layout=widgets.Layout(width="640px", max_width="100%"),
            **on_enter,
        )
        c["copy_compiled_model"] = widgets.Checkbox(
            description="copy it into the model directory", indent=False, layout=widgets.Layout(width="auto")
        )
        c["target"] = widgets.Dropdown(options=TARGETS, description="target", style=style)
        c["framework"] = widgets.Dropdown(options=FRAMEWORKS, description="framework", style=style)
        c["backend"] = widgets.Dropdown(
            options=_BACKENDS, description="Triton backend", style=style, layout=widgets.Layout(width="420px")
        )
        c["runtime"] = widgets.Dropdown(
            options=_RUNTIMES, description="PyTorch layout", style=style, layout=widgets.Layout(width="420px")
        )
        c["state_dict"] = widgets.Text(
            description="state dict (PyTorch 2)",
            placeholder="torch.save(state_dict) file",
            layout=widgets.Layout(width="640px", max_width="100%"),
            **on_enter,
        )
        c["pytorch_parameters"] = PyTorchParameters()
        c["vllm"] = VllmFields()
        c["inputs"] = TensorTable("input")
        c["outputs"] = TensorTable("output")
        c["max_batch_size"] = widgets.IntText(description="max batch size", style=style)
        c["dynamic_batching"] = widgets.Checkbox(
            description="dynamic batching", indent=False, layout=widgets.Layout(width="auto")
        )
        c["preferred_batch_sizes"] = widgets.Text(
            description="preferred batch sizes", placeholder="e.g. 4,8", **on_enter
        )
        c["max_queue_delay_us"] = widgets.Text(description="max queue delay (µs)", placeholder="e.g. 100", **on_enter)
        c["core_range"] = widgets.Text(description="core range a:b", **live)
        c["instance_count"] = widgets.IntText(description="instances", **live)
        # 0 leaves NUM_THREADS_PER_CORE out: the SDK's DataParallel workers on Neuron, 1 thread per core on the cpu
        c["threads_per_core"] = widgets.IntText(
            description="threads per core", tooltip="0: the default (Neuron SDK's workers; 1 on the cpu)", **live
        )
        c["batching_mode"] = widgets.Dropdown(
            options=_BATCHING_MODES,
            description="batching mode",
            style=style,
            layout=widgets.Layout(width="520px", max_width="100%"),
        )
        c["cpu_affinity"] = widgets.Checkbox(
            description="pin CPU instances to their cores", indent=False, layout=widgets.Layout(width="auto")
        )
        # transformers-neuronx sampling settings: blank means "what the compile recorded, else model.py's default"
        for key, label, hint in _TNX_FIELDS:
            c[key] = widgets.Text(description=label, placeholder=hint, **on_enter)
        c["tnx_amp"] = widgets.Dropdown(options=("", *TNX_AMPS), description="amp", style=style)
        # Triton config fields (model_config.proto); blank or 0 leaves a field out
        c["instance_group_kind"] = widgets.Dropdown(
            options=("KIND_MODEL", "KIND_CPU", "KIND_AUTO"), description="instance kind", style=style
        )
        c["rate_limiter_resources"] = widgets.Text(
            description="rate limiter resources", placeholder="e.g. R1:1,R2:2", **on_enter
        )
        c["rate_limiter_priority"] = widgets.IntText(value=0, description="rate limiter priority", style=style)
        c["preserve_ordering"] = widgets.Checkbox(
            value=False, description="preserve ordering", indent=False, layout=widgets.Layout(width="auto")
        )
        c["priority_levels"] = widgets.IntText(value=0, description="priority levels", style=style)
        c["default_priority_level"] = widgets.IntText(value=0, description="default priority", style=style)
        c["default_queue_policy"] = widgets.Text(
            description="default queue policy",
            placeholder="e.g. max_queue_size=16,timeout_action=REJECT",
            layout=widgets.Layout(width="640px", max_width="100%"),
            **on_enter,
        )
        c["priority_queue_policy"] = widgets.Text(
            description="priority queue policies",
            placeholder="e.g. 2:max_queue_size=4; 1:timeout_action=DELAY",
            layout=widgets.Layout(width="640px", max_width="100%"),
            **on_enter,
        )
        c["optional_inputs"] = widgets.Text(description="optional inputs", placeholder="e.g. INPUT__1", **on_enter)
        c["warmup"] = widgets.IntText(
            value=0,
            description="warm-up runs",
            style=style,
            tooltip="runs of a sample built from the inputs before READY (0: none)",
        )
        c["warmup_data"] = widgets.Dropdown(options=("zero", "random"), description="warm-up data", style=style)
        c["response_cache"] = widgets.Checkbox(
            value=False, description="response cache", indent=False, layout=widgets.Layout(width="auto")
        )
        c["version_policy"] = widgets.Text(
            description="version policy",
            placeholder="e.g. latest:2, all, specific:1,3",
            layout=widgets.Layout(width="460px", max_width="100%"),
            **on_enter,
        )
        c["core_map"] = widgets.HTML()
        c["switch_notice"] = widgets.HTML()  # what the last backend switch changed and why
        c["problems"] = widgets.HTML()
        c["warnings"] = widgets.HTML()

        start = generate.GenerateSettings(
            name=self.state.name, target=self.state.target, framework=self.state.framework, copy_compiled_model=True
        )
        self.link: Linked[generate.GenerateSettings] = Linked(start, derive=self._model_dir)
        link = self.link.link
        link("name", c["name"], parse=optional_text, show=blank_if_none)
        link("compiled_model", c["compiled_model"])
        link("copy_compiled_model", c["copy_compiled_model"])
        link("target", c["target"])
        link("framework", c["framework"])
        link("backend", c["backend"])
        link("runtime", c["runtime"])
        link("state_dict", c["state_dict"])
        link(
            "parameters",
            c["pytorch_parameters"],
            label="backend parameters",
            show=lambda params: {k: parameter_string(v) for k, v in params.items()},
        )
        link("backend_settings", c["vllm"], parse=VllmFields.parse_shown, show=c["vllm"].show_settings)
        link(
            "triton_input", c["inputs"], parse=lambda rows: tensors_from_rows(rows, "input"), show=_rows, label="inputs"
        )
        link(
            "triton_output",
            c["outputs"],
            parse=lambda rows: tensors_from_rows(rows, "output"),
            show=_rows,
            label="outputs",
        )
        link("max_batch_size", c["max_batch_size"], parse=at_least(0, "0 turns batching off"))
        link("enable_dynamic_batching", c["dynamic_batching"])
        link(
            "preferred_batch_size",
            c["preferred_batch_sizes"],
            parse=whole_numbers,
            show=comma_joined,
            label="preferred batch sizes",
        )
        link(
            "max_queue_delay_microseconds",
            c["max_queue_delay_us"],
            parse=optional_whole,
            show=blank_if_none,
            label="max queue delay",
        )
        link("neuron_core_range", c["core_range"], parse=CoreRange.parse, show=str, label="core range")
        link("triton_model_instance_count", c["instance_count"], parse=at_least(1))
        link(
            "threads_per_core",
            c["threads_per_core"],
            parse=lambda n: at_least(0, "0 takes the default")(n) or None,
            show=lambda n: n or 0,
        )
        link("disable_batch_requests_to_neuron", c["batching_mode"])
        link("cpu_affinity", c["cpu_affinity"])
        for key, label, _hint in _TNX_FIELDS:
            link(
                key,
                c[key],
                parse=optional_text if key == "tnx_model_class" else optional_whole,
                show=blank_if_none,
                label=f"transformers-neuronx {label}",
            )
        link("tnx_amp", c["tnx_amp"], parse=optional_text, show=blank_if_none)
        # the Triton config fields: the text spellings are options.py's, both ways
        link("instance_group_kind", c["instance_group_kind"])
        link(
            "rate_limiter",
            WidgetGroup(c["rate_limiter_resources"], c["rate_limiter_priority"]),
            parse=_rate_limiter,
            show=options.rate_limiter_text,
            label="rate limiter",
        )
        link("preserve_ordering", c["preserve_ordering"])
        link("priority_levels", c["priority_levels"], parse=at_least(0, "0 means none"))
        link("default_priority_level", c["default_priority_level"], parse=at_least(0))
        link(
            "default_queue_policy",
            c["default_queue_policy"],
            parse=options.parse_optional_queue_policy,
            show=options.queue_policy_text,
            label="default queue policy",
        )
        link(
            "priority_queue_policy",
            c["priority_queue_policy"],
            parse=options.parse_priority_queue_policies,
            show=options.priority_queue_policies_text,
            label="priority queue policies",
        )
        link("optional_inputs", c["optional_inputs"], parse=options.parse_names, show=comma_joined)
        link(
            "model_warmup",
            WidgetGroup(c["warmup"], c["warmup_data"]),
            parse=_warmup,
            show=options.warmup_text,
            label="warm-up",
        )
        link("response_cache", c["response_cache"], parse=lambda on: True if on else None, show=bool)
        link("version_policy", c["version_policy"], parse=options.parse_optional_version_policy, show=blank_if_none)

        # each control with its problem view directly under it (`Linked.field`)
        f, view = self.link.field, self.link.problem_view
        self.widget = widgets.VBox(
            [
                heading("Model"),
                row(f("name"), f("target"), f("framework")),
                row(f("compiled_model"), f("copy_compiled_model")),
                c["inputs"].widget,
                view("triton_input"),
                c["outputs"].widget,
                view("triton_output"),
            ],
            layout=widgets.Layout(width="100%"),
        )
        self.pytorch_box = widgets.VBox(
            [
                f("runtime"),
                f("state_dict"),
                c["pytorch_parameters"].widget,
                view("parameters"),
            ]
        )
        self.widget.children += (
            heading("Triton backend"),
            f("backend"),
            c["switch_notice"],
            self.pytorch_box,
            c["vllm"].widget,
            heading("Batching"),
            row(f("max_batch_size"), f("enable_dynamic_batching")),
            row(f("preferred_batch_size"), f("max_queue_delay_microseconds")),
            f("disable_batch_requests_to_neuron"),
            heading("Cores and instances"),
            row(f("neuron_core_range"), f("triton_model_instance_count"), f("threads_per_core")),
            f("cpu_affinity"),
            c["core_map"],
            heading("Triton config"),
            row(f("instance_group_kind"), f("rate_limiter")),
            row(f("preserve_ordering"), f("priority_levels"), f("default_priority_level")),
            f("default_queue_policy"),
            f("priority_queue_policy"),
            row(f("optional_inputs"), f("model_warmup")),
            row(f("response_cache"), f("version_policy")),
        )
        self.tnx_box = widgets.VBox(
            [
                heading("transformers-neuronx sampling"),
                row(f("tnx_model_class"), f("tnx_batch_size"), f("tnx_tp_degree")),
                row(f("tnx_n_positions"), f("tnx_sequence_length"), f("tnx_unroll"), f("tnx_amp")),
            ]
        )
        self.widget.children += (self.tnx_box, c["problems"], c["warnings"])
        # backend name -> its own controls, shown only while it is chosen, and its parameter control
        self._backend_boxes = {
            PYTORCH.name: (self.pytorch_box, c["pytorch_parameters"]),
            VLLM.name: (c["vllm"].widget, c["vllm"]),
        }
        self.state.observe(self._artifact_changed, names="artifact")
        self.state.observe(self._model_file_changed, names="model_file")
        for name in ("name", "target", "framework"):
            self.state.observe(lambda change: self.link.update(**{change["name"]: change["new"]}), names=name)
        self.link.on_change = self._changed
        # choosing the tiny LLM names the model after it (notebook 09's tiny_llm), not the last model
        c["vllm"].observe(self._llm_chosen, names="chosen_name")
        if self.state.artifact is not None:
            self._artifact_changed({"new": self.state.artifact})
        else:
            self._show()

    def _repr_mimebundle_(self, **kwargs):
        return self.widget._repr_mimebundle_(**kwargs)

    @property
    def settings(self) -> generate.GenerateSettings:
        """The settings the controls describe (``problems`` says what keeps them from being valid)."""
        return self.link.value

    def build_settings(self) -> generate.GenerateSettings:
        """The settings the controls describe; a SpecError names every control that does not parse."""
        if self.link.problems:
            raise SpecError("; ".join(self.link.problems))
        return self.link.value

    def _model_dir(self, fields: dict) -> dict:
        """The model directory follows the name: ``<repository>/<name>``."""
        name = fields["name"]
        return {"triton_model_dir": str(Path(self.state.repository) / name) if name else ""}

    # --- filling from the model step -------------------------------------------------------------

    def _tensors_for(self, spec: ModelSpec, batch_dim: bool, max_batch_size: int) -> dict:
        """The compiled model's tensors as config dims: Triton adds the batch dim when batching,
        otherwise the config carries it as -1."""
        if max_batch_size == 0 and batch_dim:
            spec = spec.with_batch_dim(-1)
        return {"triton_input": spec.inputs, "triton_output": spec.outputs}

    def _artifact_changed(self, change) -> None:
        artifact = change["new"]
        if artifact is None:
            return
        max_batch_size = self.link.value.max_batch_size
        if artifact.batch_dim and max_batch_size == 0:
            max_batch_size = 8  # a model traced with a batch dim starts batchable rather than with batching off
        tensors = self._tensors_for(artifact.spec, artifact.batch_dim, max_batch_size)
        self._auto_tensors = (tensors["triton_input"], tensors["triton_output"])
        self.link.update(
            compiled_model=str(artifact.path),
            target=artifact.target,
            framework=artifact.framework,
            max_batch_size=max_batch_size,
            **tensors,
        )

    def _refill_tensors(self) -> None:
        """max_batch_size changed: tensors still as the compiled model filled them in follow it."""
        artifact, settings = self.state.artifact, self.link.value
        if artifact is None or self._auto_tensors != (settings.triton_input, settings.triton_output):
            return
        tensors = self._tensors_for(artifact.spec, artifact.batch_dim, settings.max_batch_size)
        self._auto_tensors = (tensors["triton_input"], tensors["triton_output"])
        self.link.update(**tensors)

    # --- settings out ----------------------------------------------------------------------------

    def _changed(self, changed: set[str]) -> None:
        # the parameter fields follow the layout (a change there comes back here as "parameters")
        self.controls["pytorch_parameters"].layout = layout_of_settings(self.link.value)
        if "max_batch_size" in changed:
            self._refill_tensors()
        if "enable_dynamic_batching" in changed and not self.link.value.enable_dynamic_batching:
            defaults = generate.GenerateSettings(target=self.link.value.target)
            self.link.update(**{name: getattr(defaults, name) for name in _BATCHER_FIELDS})
        if "backend" in changed:
            self._switch_backend()
        self._show()

    def _switch_backend(self) -> None:
        """The other backends' fields (greyed out or hidden now) would only be refused or carried
        unread: back to their defaults, and a target the backend serves (LibTorch: this machine's
        CPU). What the user had set there is set aside and given back when a backend that reads it
        is chosen again; the notice under the dropdown says both, in the labels of the fields."""
        settings = self.link.value
        backend = backend_of(settings)
        hidden = {
            key
            for name, (_box, params) in self._backend_boxes.items()
            if name != settings.backend
            for key in params.keys()
        }
        parameters = {key: value for key, value in settings.parameters.items() if key not in hidden}
        switched = {
            **self.controls["vllm"].switching(settings),
            **switching_to(backend, settings),
            **({"parameters": parameters} if parameters != settings.parameters else {}),
        }
        defaults = generate.GenerateSettings(target=switched.get("target", settings.target))
        aside, back = [], []
        moved = switched.get("target", settings.target) != settings.target  # said, not given back: the model's
        for name, value in switched.items():
            if name in ("backend_settings", "parameters", "target") or str(getattr(settings, name)) == str(value):
                continue
            if str(value) == str(getattr(defaults, name)):  # a reset: the user's value kept
                self._set_aside[name] = getattr(settings, name)
                aside.append(name)
            else:  # given back (the vLLM fields keep theirs): nothing left to give back later
                self._set_aside.pop(name, None)
                back.append(name)
        unread = set(unread_fields(backend))
        restore = {
            name: value for name, value in self._set_aside.items() if name not in switched and name not in unread
        }
        for name in restore:
            del self._set_aside[name]
        self.link.update(**switched, **restore)
        labels, now = self.link.labels, self.link.value

        def said(name: str, before: object, after: object) -> str:
            label = labels.get(name, name)
            short = all(not isinstance(v, (tuple, list, dict)) and len(_shown(v)) <= 24 for v in (before, after))
            return f"{label} {_shown(before)} -> {_shown(after)}" if short else label

        lines = []
        if moved:
            lines.append(
                f"{backend.label} serves target {', '.join(backend.targets)} here: "
                f"{said('target', settings.target, now.target)}"
            )
        unread_here = [said(name, self._set_aside[name], getattr(now, name)) for name in aside]
        if unread_here:
            lines.append(f"{backend.label} does not read {', '.join(unread_here)}")
        if aside:
            lines.append("your values are kept: choosing a backend that reads them gives them back")
        if back or restore:
            lines.append(
                "given back: "
                + ", ".join(
                    f"{labels.get(name, name)} {_shown(getattr(now, name))}"
                    if len(_shown(getattr(now, name))) <= 24
                    else labels.get(name, name)
                    for name in back + list(restore)
                )
            )
        self.controls["switch_notice"].value = "".join(
            f"<div style='color:#555'><i>{html.escape(line)}</i></div>" for line in lines
        )

    def _placed(
        self, found: list[FieldProblem], settings: generate.GenerateSettings
    ) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
        """The generator's problems by the field shown beside ("": the summary, for a problem about
        no field or a field in a hidden box), and those about one shown PyTorch parameter by key."""
        hidden = set()
        if settings.backend != PYTORCH.name:
            hidden |= {"runtime", "state_dict", "parameters"}  # self.pytorch_box's fields
        if settings.framework != "transformers_neuronx":
            hidden |= {key for key, _label, _hint in _TNX_FIELDS} | {"tnx_amp"}  # self.tnx_box's fields
        if settings.backend == VLLM.name:
            hidden |= {"compiled_model"}  # greyed out: the vLLM fields show the model folder's problems
        parameters = self.controls["pytorch_parameters"]
        shown_keys = set() if "parameters" in hidden else set(parameters.fields[parameters.layout])
        by_field: dict[str, list[str]] = {}
        by_parameter: dict[str, list[str]] = {}
        for problem in found:
            if problem.key in shown_keys:
                by_parameter.setdefault(problem.key, []).append(problem.message)
            else:
                by_field.setdefault("" if problem.field in hidden else problem.field, []).append(problem.message)
        return by_field, by_parameter

    def _model_file_changed(self, change: dict) -> None:
        if change["new"]:
            self.link.update(compiled_model=change["new"])

    def _llm_chosen(self, change: dict) -> None:
        if change["new"]:
            self.link.update(name=change["new"])

    def _show_core_map(self, blocked: bool) -> None:
        """The cores each instance gets; nothing while a core field has a problem (said beside it)."""
        settings = self.link.value
        if blocked or not isinstance(settings.neuron_core_range, CoreRange):  # not a range: said beside it
            self.controls["core_map"].value = "<i>core map: once the core fields above are fixed</i>"
            return
        try:
            core_map = settings.neuron_core_range.split(
                settings.triton_model_instance_count, settings.threads_per_core or 1
            )
        except CoreRangeError as err:
            self.controls["core_map"].value = error_list([f"core map: {err}"])
            return
        self.controls["core_map"].value = core_map_html(core_map)

    def _show(self) -> None:
        c, settings = self.controls, self.link.value
        for key in ("preferred_batch_sizes", "max_queue_delay_us", *_BATCHER_FIELDS):
            c[key].disabled = not settings.enable_dynamic_batching  # dynamic batcher fields
        unread = unread_fields(backend_of(settings))
        for key, name in _BACKEND_SPECIFIC_CONTROLS.items():
            c[key].disabled = name in unread
        c["cpu_affinity"].disabled = "cpu_affinity" in unread or settings.target != "cpu"
        for name, (box, _params) in self._backend_boxes.items():
            box.layout.display = None if settings.backend == name else "none"
        c["core_map"].layout.display = "none" if "neuron_core_range" in unread else None
        self.tnx_box.layout.display = None if settings.framework == "transformers_neuronx" else "none"
        generated, checked, labels = None, [], self.link.labels
        # a vLLM field that does not parse blocks generating, also after a backend switch gave the
        # settings its last good values (they are not what the field shows)
        own = list(c["vllm"].value.problems) if settings.backend == VLLM.name else []
        if not self.link.problems and not own:
            try:
                generated = generate.render(settings)
            except generate.GenerateError as err:
                checked = err.problems
        found = in_labels(c["vllm"].routed(checked, settings), labels)  # beside the vLLM fields too
        by_field, by_parameter = self._placed(found, settings)
        self.link.show_checks({name: messages for name, messages in by_field.items() if name})
        c["pytorch_parameters"].show_problems(by_parameter)
        self._show_core_map(any(self.link.problem(name) or name in by_field for name in _CORE_FIELDS))
        problems = self.link.problems + [p for p in own if p not in self.link.problems] + [f.message for f in found]
        placed_by_vllm = c["vllm"].placed  # beside the vLLM fields already
        unplaced = self.link.unplaced_problems + [m for m in by_field.get("", []) if m not in placed_by_vllm]
        beside = len(problems) - len(unplaced)
        self.problems = problems
        c["problems"].value = error_list(
            unplaced + ([f"{beside} problem(s) shown in red beside their fields above"] if beside else [])
        )
        # a warning about a vLLM field goes beside it, in that screen's words; the rest here
        rest = c["vllm"].warned(list(generated.warnings) if generated is not None else [], settings)
        warnings = [w.message for w in in_labels(rest, labels)]
        c["warnings"].value = "".join(f"<div style='color:#a05a00'>warning: {html.escape(w)}</div>" for w in warnings)
        if settings.name and settings.name != self.state.name:
            self.state.name = settings.name
        self.state.target, self.state.framework = settings.target, settings.framework
        self.state.settings = settings if generated is not None else None
        self.state.settings_problems = problems
        self.state.generated = generated
