"""Widgets linked to the fields of one logic value, both ways, in the spirit of HyperSpy's
``link_traits``: a panel keeps no second copy of what the user typed.

Widget -> field: the widget's value goes through the logic layer's parser for that field
(`CoreRange.parse`, `parse_allocations`, `tensors_from_rows`...). A parse error is kept in
``problems`` under the field, never raised into the widget's callback, and the field keeps its last
good value. Field -> widget: ``update(field=...)`` (e.g. the model panel published an artifact)
changes the value and every linked widget shows the new field.

The value is a dataclass (`GenerateSettings`, `SweepPlan`, `MeasureSettings`); it is rebuilt with
`dataclasses.replace`, so a frozen one checks itself as a whole and an error there is a problem too.
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any, Callable, Generic, Iterator, TypeVar

__all__ = ["Linked", "WidgetGroup", "comma_joined", "blank_if_none"]

T = TypeVar("T")
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


@dataclasses.dataclass
class _Link:
    widget: Any
    parse: Callable[[Any], Any]
    show: Callable[[Any], Any]
    label: str


class Linked(Generic[T]):
    """One logic value and the widgets linked to its fields.

    ``value`` is the last value the linked widgets described in full; while ``problems`` is not
    empty, some widget shows text that ``value`` does not hold (the field kept its last good value).
    ``derive(fields)`` returns fields computed from others (the model directory from the name),
    ``on_change(names)`` runs once after each change with the names of the fields that changed.
    """

    def __init__(self, value: T, *, derive: Callable[[dict], dict] | None = None,
                 on_change: Callable[[set[str]], None] | None = None) -> None:
        self._value = value
        self._fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        self._links: dict[str, _Link] = {}
        self._field_problems: dict[str, str] = {}
        self._value_problem = ""
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

    def link(self, name: str, widget: Any, *, parse: Callable[[Any], Any] | None = None,
             show: Callable[[Any], Any] | None = None, label: str = "") -> Any:
        """Link ``widget.value`` to the field ``name``: the widget shows the field now, and each
        edit is parsed into it. ``label`` prefixes the parse error ("--neuron_core_range: ...")."""
        if name not in self._fields:
            raise KeyError(f"{type(self._value).__name__} has no field {name!r}")
        link = _Link(widget, parse or _same, show or _same, label)
        self._links[name] = link
        with self._quietly():
            widget.value = link.show(self._fields[name])
        widget.observe(lambda change: self._edited(name, change["new"]), names="value")
        return widget

    def update(self, **fields: Any) -> None:
        """Logic -> widgets: set fields (already values, nothing to parse) and show them."""
        changed = {name for name, value in fields.items() if name in self._fields
                   and (self._fields[name] != value or name in self._field_problems)}
        unknown = set(fields) - set(self._fields)
        if unknown:
            raise KeyError(f"{type(self._value).__name__} has no field(s) {sorted(unknown)}")
        if not changed:
            return
        for name in changed:
            self._fields[name] = fields[name]
            self._field_problems.pop(name, None)
        self._rebuild()
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
            self._field_problems[name] = f"{link.label}: {err}" if link.label else str(err)
            self._notify({name})
            return
        self._field_problems.pop(name, None)
        self._fields[name] = parsed
        self._rebuild()
        self._notify({name})

    def _rebuild(self) -> None:
        if self._derive is not None:
            self._fields.update(self._derive(dict(self._fields)))
        try:
            self._value = dataclasses.replace(self._value, **self._fields)
        except _PARSE_ERRORS as err:
            self._value_problem = str(err)
        else:
            self._value_problem = ""
            # what the value made of the fields (normalised) is what the next edit starts from
            self._fields = {f.name: getattr(self._value, f.name) for f in dataclasses.fields(self._value)}

    def _notify(self, changed: set[str]) -> None:
        if self.on_change is not None:
            self.on_change(changed)
