"""An editable table of tensors (name, dtype, dims), one row per input or output.

The table's ``value`` is its rows as typed, ``(name, dtype, dims text)``: what a settings link
hands to `workbench.spec.tensors_from_rows`, and what it sets to show tensors it was given.
"""

from __future__ import annotations

import ipywidgets as widgets
import traitlets

from workbench.spec import TRITON_DTYPES
from workbench.ui.layout import button


class TensorRow:
    def __init__(self, table: TensorTable, name: str, dtype: str, dims: str) -> None:
        self.name = widgets.Text(
            value=name, continuous_update=False, placeholder="INPUT__0", layout=widgets.Layout(width="180px")
        )
        self.dtype = widgets.Dropdown(
            options=TRITON_DTYPES,
            value=dtype if dtype in TRITON_DTYPES else "FP32",
            layout=widgets.Layout(width="100px"),
        )
        self.dims = widgets.Text(
            value=dims,
            continuous_update=False,
            placeholder="4x384 (-1 = variable)",
            layout=widgets.Layout(width="180px"),
        )
        self.remove_button = widgets.Button(
            icon="trash", tooltip="remove this row", layout=widgets.Layout(width="40px")
        )
        self.remove_button.on_click(lambda _b: table.remove(self))
        for control in (self.name, self.dtype, self.dims):
            control.observe(lambda _change: table.changed(), names="value")
        self.widget = widgets.HBox([self.name, self.dtype, self.dims, self.remove_button])

    @property
    def typed(self) -> tuple[str, str, str]:
        return self.name.value, self.dtype.value, self.dims.value


class TensorTable(traitlets.HasTraits):
    """Rows of tensors for one kind (``"input"`` or ``"output"``); ``value`` follows every edit."""

    value = traitlets.Tuple(help="the rows as typed: (name, dtype, dims text) each")

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind
        self.rows: list[TensorRow] = []
        self._syncing = False
        self.add_button = button(f"add {kind}", icon="plus")
        self.add_button.on_click(lambda _b: self.add())
        self._rows_box = widgets.VBox()
        header = widgets.HTML(f"<b>{kind}s</b> (name, dtype, dims without the batch dim when batching)")
        self.widget = widgets.VBox([header, self._rows_box, self.add_button])
        self.observe(self._value_set, names="value")

    def add(self, name: str = "", dtype: str = "FP32", dims: str = "") -> TensorRow:
        if not name:
            name = f"{self.kind.upper()}__{len(self.rows)}"
        row = TensorRow(self, name, dtype, dims)
        self.rows.append(row)
        self._refresh()
        return row

    def remove(self, row: TensorRow) -> None:
        self.rows.remove(row)
        self._refresh()

    def changed(self) -> None:
        """A row was edited: ``value`` follows (and with it whatever is linked to the table)."""
        if self._syncing:
            return
        self.value = tuple(row.typed for row in self.rows)

    def _value_set(self, change) -> None:
        """``value`` set from outside: rebuild the rows to show it."""
        if tuple(row.typed for row in self.rows) == tuple(change["new"]):
            return
        self._syncing = True
        try:
            self.rows = [TensorRow(self, *typed) for typed in change["new"]]
        finally:
            self._syncing = False
        self._rows_box.children = [row.widget for row in self.rows]

    def _refresh(self) -> None:
        self._rows_box.children = [row.widget for row in self.rows]
        self.changed()
