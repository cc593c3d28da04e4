"""An editable table of tensors (name, dtype, dims), one row per input or output.

Rows are plain widgets so tests can set them; ``tensors()`` parses them into `TensorSpec`s and
names the bad row, so a typo is reported before anything is generated.
"""

from __future__ import annotations

from typing import Callable, Iterable

import ipywidgets as widgets

from workbench.spec import TRITON_DTYPES, SpecError, TensorSpec


class TensorRow:
    def __init__(self, table: "TensorTable", name: str, dtype: str, dims: str) -> None:
        self.name = widgets.Text(value=name, continuous_update=False, placeholder="INPUT__0",
                                 layout=widgets.Layout(width="180px"))
        self.dtype = widgets.Dropdown(options=TRITON_DTYPES, value=dtype, layout=widgets.Layout(width="100px"))
        self.dims = widgets.Text(value=dims, continuous_update=False, placeholder="4x384 (-1 = variable)",
                                 layout=widgets.Layout(width="180px"))
        self.remove_button = widgets.Button(icon="trash", tooltip="remove this row",
                                            layout=widgets.Layout(width="40px"))
        self.remove_button.on_click(lambda _b: table.remove(self))
        for control in (self.name, self.dtype, self.dims):
            control.observe(lambda _change: table.changed(), names="value")
        self.widget = widgets.HBox([self.name, self.dtype, self.dims, self.remove_button])


class TensorTable:
    """Rows of tensors for one kind (``"input"`` or ``"output"``); ``on_change`` fires on any edit."""

    def __init__(self, kind: str, on_change: Callable[[], None] | None = None) -> None:
        self.kind = kind
        self.rows: list[TensorRow] = []
        self._on_change = on_change
        self._quiet = False
        self.add_button = widgets.Button(description=f"add {kind}", icon="plus")
        self.add_button.on_click(lambda _b: self.add())
        self._rows_box = widgets.VBox()
        header = widgets.HTML(f"<b>{kind}s</b> (name, dtype, dims without the batch dim when batching)")
        self.widget = widgets.VBox([header, self._rows_box, self.add_button])

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

    def set_tensors(self, tensors: Iterable[TensorSpec]) -> None:
        """Replace every row (e.g. with the compiled model's spec), firing one change at the end."""
        self._quiet = True
        try:
            self.rows = [TensorRow(self, t.name, t.dtype, "x".join(str(d) for d in t.dims)) for t in tensors]
        finally:
            self._quiet = False
        self._refresh()

    def tensors(self) -> list[TensorSpec]:
        """The rows as TensorSpecs; a SpecError names the row (``input row 2``) and what is wrong."""
        out = []
        for number, row in enumerate(self.rows, start=1):
            item = f"{row.name.value.strip()},{row.dtype.value},{row.dims.value.strip()}"
            try:
                out.append(TensorSpec.parse(item))
            except SpecError as err:
                raise SpecError(f"{self.kind} row {number}: {err}") from None
        return out

    def changed(self) -> None:
        if not self._quiet and self._on_change is not None:
            self._on_change()

    def _refresh(self) -> None:
        self._rows_box.children = [row.widget for row in self.rows]
        self.changed()
