"""The PyTorch backend's config parameters as one control: a field per key of the layout's table.

The control's ``value`` is the config's parameter dict as typed (``{"INFERENCE_MODE": "false"}``;
a blank field is left out, so the backend's default applies), which a settings link hands to
`GenerateSettings.parameters`; the logic layer (`pytorch_backend.layouts.parameter_problems`) checks
every value. Keys the fields do not show are kept as they are. ``layout`` picks which table's
fields are shown: TorchScript's (LibTorch) or the PyTorch 2 runtime's. Each field has a problem
view directly under it, where `show_problems` puts what the checks found about its key.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import ipywidgets as widgets
import traitlets

from workbench.generate.pytorch_backend.layouts import PYTORCH2, TORCHSCRIPT, parameter_table
from workbench.ui.layout import description_style, heading
from workbench.ui.links import field_problem_view, show_field_problems

__all__ = ["PyTorchParameters"]

_BOOL_CHOICES = (("(default)", ""), ("true", "true"), ("false", "false"))


class PyTorchParameters(traitlets.HasTraits):
    """One field per parameter of both layouts; only the current ``layout``'s are shown."""

    value = traitlets.Dict(help="config parameters as typed (blank fields left out)")
    layout = traitlets.Unicode(TORCHSCRIPT)

    def __init__(self) -> None:
        super().__init__()
        style = description_style("250px")
        self.fields: dict[str, dict[str, widgets.Widget]] = {}
        self.problem_views: dict[str, widgets.HTML] = {}  # parameter key -> the view under its field(s)
        boxes = {}
        for layout in (TORCHSCRIPT, PYTORCH2):
            controls = {}
            for key, parameter in parameter_table(layout).items():
                tip = f"{parameter.meaning} (default {parameter.default})"
                if parameter.kind == "bool":
                    control = widgets.Dropdown(
                        options=_BOOL_CHOICES,
                        description=key,
                        style=style,
                        tooltip=tip,
                        layout=widgets.Layout(width="380px"),
                    )
                else:
                    control = widgets.Text(
                        description=key,
                        placeholder=parameter.default,
                        tooltip=tip,
                        continuous_update=False,
                        style=style,
                        layout=widgets.Layout(width="640px" if parameter.kind == "json" else "380px", max_width="100%"),
                    )
                control.observe(lambda _change: self._edited(), names="value")
                controls[key] = control
            self.fields[layout] = controls
            views = {key: self.problem_views.setdefault(key, field_problem_view()) for key in controls}
            boxes[layout] = widgets.VBox(
                [
                    widgets.VBox([control, views[key]], layout=widgets.Layout(width="auto"))
                    for key, control in controls.items()
                ]
            )
        self._boxes = boxes
        self._quiet = False
        # the keys as config.pbtxt spells them (UPPER_SNAKE, Triton's PyTorch backend's), their meaning in each
        # field's tooltip; the vLLM fields carry vLLM's own engine-argument names (snake_case) under their heading
        self.widget = widgets.VBox(
            [
                heading(
                    "PyTorch backend parameters (config.pbtxt keys, as Triton's PyTorch "
                    "backend spells them; hover a field for its meaning)"
                ),
                boxes[TORCHSCRIPT],
                boxes[PYTORCH2],
            ]
        )
        self._show_layout()

    def show_problems(self, problems: Mapping[str, Sequence[str]]) -> None:
        """What the checks found per parameter key, each under its key's field (none: all cleared)."""
        for key, view in self.problem_views.items():
            show_field_problems(view, problems.get(key, ()))

    def keys(self) -> set[str]:
        """Every parameter key these fields stand for (both layouts)."""
        return {key for controls in self.fields.values() for key in controls}

    @traitlets.observe("layout")
    def _layout_changed(self, change) -> None:
        self._show_layout()
        self._quiet = True
        try:  # the hidden layout's fields are emptied: what is shown is all the value holds
            for control in self.fields[change["old"]].values():
                control.value = ""
        finally:
            self._quiet = False
        self._edited()

    def _show_layout(self) -> None:
        for layout, box in self._boxes.items():
            box.layout.display = None if layout == self.layout else "none"

    @traitlets.observe("value")
    def _value_changed(self, change) -> None:
        if self._quiet:
            return
        self._quiet = True
        try:
            for controls in self.fields.values():
                for key, control in controls.items():
                    shown = change["new"].get(key, "")
                    if isinstance(control, widgets.Dropdown) and shown not in [v for _label, v in control.options]:
                        control.options = (*control.options, (shown, shown))  # another spelling ("on", "1")
                    control.value = shown
        finally:
            self._quiet = False

    def _edited(self) -> None:
        if self._quiet:
            return
        shown = self.fields[self.layout]
        kept = {key: value for key, value in self.value.items() if key not in self.keys()}
        typed = {key: control.value for key, control in shown.items() if control.value}
        self._quiet = True
        try:
            self.value = {**kept, **typed}
        finally:
            self._quiet = False
