"""Widgets linked to the fields of one logic value, both ways, in the spirit of HyperSpy's
``link_traits``: a panel keeps no second copy of what the user typed.

Widget -> field: the widget's value goes through the logic layer's parser for that field
(`CoreRange.parse`, `parse_allocations`, `tensors_from_rows`...). A parse error is kept in
``problems`` under the field, never raised into the widget's callback, and the field keeps its last
good value. Field -> widget: ``update(field=...)`` (e.g. the model panel published an artifact)
changes the value and every linked widget shows the new field.

The value is a dataclass (`GenerateSettings`, `SweepPlan`, `MeasureSettings`); it is rebuilt with
`dataclasses.replace`, so a frozen one checks itself as a whole and an error there is a problem too.

Every linked field has its own problem view (`problem_view`, or `field` for the widget with its view
directly under it): a person reads an error beside the control it is about, in the words of that
control's label, and sees it go once the input is fixed. A panel that checks the value as a whole
(the generator's checks) hands what it found per field to `show_checks`, shown in the same views.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import ipywidgets as widgets
from ipywidgets.widgets.widget_description import DescriptionWidget

from workbench.ui.layout import row
from workbench.ui.widget_values import field_problem_html
from workbench.wording import names_in_labels

__all__ = [
    "Linked",
    "WidgetGroup",
    "FIELD_PROBLEM_CLASS",
    "field_problem_view",
    "show_field_problems",
    "comma_joined",
    "blank_if_none",
]

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

T = TypeVar("T", bound="DataclassInstance")
_PARSE_ERRORS = (ValueError, TypeError)  # what the logic parsers raise for bad text (SpecError, SweepError...)


def _same(value: Any) -> Any:
    return value


def comma_joined(values: Any) -> str:
    """``(1, 4, 8)`` as a text field shows it: ``1,4,8``."""
    return ",".join(str(v) for v in values)


def blank_if_none(value: Any) -> Any:
    """An optional field as a text field shows it: blank for None."""
    return "" if value is None else str(value)


class WidgetGroup:
    """Several widgets that together show one field (a rate limiter's resources and priority): its
    ``value`` is the tuple of theirs, so `Linked.link` takes it like one widget."""

    def __init__(self, *widgets: Any) -> None:
        self.widgets = widgets

    @property
    def value(self) -> tuple:
        return tuple(widget.value for widget in self.widgets)

    @value.setter
    def value(self, values: tuple) -> None:
        for widget, value in zip(self.widgets, values):
            widget.value = value

    def observe(self, handler: Callable[[dict], None], names: str = "value") -> None:
        for widget in self.widgets:
            widget.observe(lambda _change: handler({"name": "value", "new": self.value}), names=names)


# the class of every field's problem view (the browser test finds them by it)
FIELD_PROBLEM_CLASS = "workbench-field-problem"


def field_problem_view() -> widgets.HTML:
    """An empty, room-less HTML slot as wide as the control above it: ``width: 0`` keeps a long
    message from widening its column (and the row it sits in), ``min-width: 100%`` lets it wrap
    at the control's width (no side margins: a widget's 2 px each side would overflow the 100%)."""
    view = widgets.HTML(layout=widgets.Layout(width="0", min_width="100%", margin="0 0 2px 0", display="none"))
    view.add_class(FIELD_PROBLEM_CLASS)
    return view


def show_field_problems(view: widgets.HTML, problems: Sequence[str]) -> None:
    """Put ``problems`` in a `field_problem_view` (hidden again when there are none)."""
    view.value = field_problem_html(list(problems))
    view.layout.display = None if problems else "none"


def _label_of(widget: Any) -> str:
    """The text a person sees beside a control: its description (the first one of a group)."""
    if isinstance(widget, WidgetGroup):
        widget = widget.widgets[0]
    if isinstance(widget, DescriptionWidget):
        return widget.description
    return ""


@dataclasses.dataclass
class _Link:
    widget: Any
    parse: Callable[[Any], Any]
    show: Callable[[Any], Any]
    label: str
    view: widgets.HTML


class Linked(Generic[T]):
    """One logic value and the widgets linked to its fields.

    ``value`` is the last value the linked widgets described in full; while ``problems`` is not
    empty, some widget shows text that ``value`` does not hold (the field kept its last good value).
    ``derive(fields)`` returns fields computed from others (the model directory from the name),
    ``on_change(names)`` runs once after each change with the names of the fields that changed.
    """

    def __init__(
        self,
        value: T,
        *,
        derive: Callable[[dict], dict] | None = None,
        on_change: Callable[[set[str]], None] | None = None,
    ) -> None:
        self._value = value
        self._fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        self._links: dict[str, _Link] = {}
        self._field_problems: dict[str, str] = {}
        self._value_problem = ""
        self._value_problem_field = ""  # the field whose change the value refused
        self._checked: dict[str, list[str]] = {}  # show_checks: what a whole-value check found per field
        self._quiet = False
        self._derive = derive
        self.on_change = on_change
        if derive is not None:
            self._rebuild()

    @property
    def value(self) -> T:
        return self._value

    @property
    def problems(self) -> list[str]:
        """One message per field whose widget does not parse (in link order), then what the
        value itself refused; empty when the widgets describe ``value`` exactly."""
        problems = [self._field_problems[name] for name in self._links if name in self._field_problems]
        return problems + ([self._value_problem] if self._value_problem else [])

    def problem(self, name: str) -> str:
        """The parse problem of one field ("" when its widget parses)."""
        return self._field_problems.get(name, "")

    @property
    def labels(self) -> dict[str, str]:
        """Field name -> the label of its control, for every linked field that has one."""
        return {name: link.label for name, link in self._links.items() if link.label}

    def link(
        self,
        name: str,
        widget: Any,
        *,
        parse: Callable[[Any], Any] | None = None,
        show: Callable[[Any], Any] | None = None,
        label: str = "",
    ) -> Any:
        """Link ``widget.value`` to the field ``name``: the widget shows the field now, and each
        edit is parsed into it. ``label`` (default: the widget's description, what a person reads
        beside it) prefixes the parse error ("instances: -3 is less than 1 ...")."""
        if name not in self._fields:
            raise KeyError(f"{type(self._value).__name__} has no field {name!r}")
        link = _Link(widget, parse or _same, show or _same, label or _label_of(widget), field_problem_view())
        self._links[name] = link
        with self._quietly():
            widget.value = link.show(self._fields[name])
        widget.observe(lambda change: self._edited(name, change["new"]), names="value")
        return widget

    def problem_view(self, name: str) -> widgets.HTML:
        """The view of field ``name``'s problems, to place directly under its control (empty and
        taking no room while there are none)."""
        return self._links[name].view

    def field(self, name: str) -> widgets.VBox:
        """The control of field ``name`` (a group's controls in a row) with its problem view
        directly under it: what a panel lays out in place of the bare control."""
        widget = self._links[name].widget
        shown = row(*widget.widgets) if isinstance(widget, WidgetGroup) else widget
        if not isinstance(shown, widgets.Widget):
            raise TypeError(f"{name}: lay out its control and problem_view({name!r}) yourself")
        return widgets.VBox([shown, self.problem_view(name)], layout=widgets.Layout(width="auto"))

    def show_checks(self, problems: Mapping[str, Sequence[str]]) -> None:
        """Show what a check of the whole value found (field name -> messages in the controls'
        words) beside those fields; the last call's findings replace the one before."""
        self._checked = {name: list(found) for name, found in problems.items() if found}
        self._show_problems()

    @property
    def unplaced_problems(self) -> list[str]:
        """`problems` shown beside no control (a refusal of the value with no linked field to blame)."""
        if self._value_problem and self._value_problem_field not in self._links:
            return [self._value_problem]
        return []

    def update(self, **fields: Any) -> None:
        """Logic -> widgets: set fields (already values, nothing to parse) and show them."""
        changed = {
            name
            for name, value in fields.items()
            if name in self._fields and (self._fields[name] != value or name in self._field_problems)
        }
        unknown = set(fields) - set(self._fields)
        if unknown:
            raise KeyError(f"{type(self._value).__name__} has no field(s) {sorted(unknown)}")
        if not changed:
            return
        for name in changed:
            self._fields[name] = fields[name]
            self._field_problems.pop(name, None)
        self._rebuild(min(changed & set(self._links), default=""))
        with self._quietly():
            for name in changed & set(self._links):
                link = self._links[name]
                link.widget.value = link.show(self._fields[name])
        self._notify(changed)

    # ---- internals ------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _quietly(self) -> Iterator[None]:
        quiet, self._quiet = self._quiet, True
        try:
            yield
        finally:
            self._quiet = quiet

    def _edited(self, name: str, shown: Any) -> None:
        if self._quiet:
            return
        link = self._links[name]
        try:
            parsed = link.parse(shown)
        except _PARSE_ERRORS as err:
            said = str(err)  # a parser told what it reads ("batch sizes: ...") already names it
            self._field_problems[name] = (
                f"{link.label}: {said}" if link.label and not said.startswith(link.label) else said
            )
            self._checked.pop(name, None)  # said about the text before this edit
            self._notify({name})
            return
        self._field_problems.pop(name, None)
        self._checked.pop(name, None)
        self._fields[name] = parsed
        self._rebuild(name)
        self._notify({name})

    def _rebuild(self, blamed: str = "") -> None:
        """The value made of the fields again; a refusal of it is shown beside ``blamed`` (the
        field whose change brought it)."""
        if self._derive is not None:
            self._fields.update(self._derive(dict(self._fields)))
        before = self._value_problem
        try:
            self._value = dataclasses.replace(self._value, **self._fields)
        except _PARSE_ERRORS as err:
            self._value_problem = names_in_labels(str(err), self.labels)  # in the words of the controls
            if self._value_problem != before or self._value_problem_field not in self._links:
                # the field whose change made the value wrong (or wrong anew); an edit that leaves the
                # same refusal standing does not move it
                self._value_problem_field = blamed or self._value_problem_field
        else:
            self._value_problem, self._value_problem_field = "", ""
            # what the value made of the fields (normalised) is what the next edit starts from
            self._fields = {f.name: getattr(self._value, f.name) for f in dataclasses.fields(self._value)}

    def _show_problems(self) -> None:
        for name, link in self._links.items():
            shown = [self._field_problems[name]] if name in self._field_problems else []
            if self._value_problem and self._value_problem_field == name:
                shown.append(self._value_problem)
            shown += self._checked.get(name, [])
            show_field_problems(link.view, shown)

    def _notify(self, changed: set[str]) -> None:
        self._show_problems()
        if self.on_change is not None:
            self.on_change(changed)
