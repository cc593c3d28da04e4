"""Layout rules every panel shares, so no label is cut off and no row scrolls sideways at 1280 px.

ipywidgets gives a Button a fixed width (its label is cut to "write model dir…"), a description a
fixed width (cut to "overwrite (keep b…") and an HBox no wrapping (a stray horizontal scrollbar
when its children are wider than the notebook). Buttons here size to their label, rows wrap, and
descriptions get the room their text needs.
"""

from __future__ import annotations

from typing import Any

import ipywidgets as widgets

from workbench.measure.store.table import SCROLL_CLASS  # views meant to scroll: one class for the app and the report

__all__ = [
    "SCROLL_CLASS",
    "row",
    "button",
    "description_style",
    "heading",
    "scroll_box",
    "hidden",
    "shown",
    "plot_image",
    "table_view",
]

# no width: a column stretches its rows, and a 100% width plus the widgets' margins overflows by 4 px
_ROW = dict(flex_flow="row wrap", align_items="center", grid_gap="4px 12px")


def row(*children: Any, **layout: Any) -> widgets.HBox:
    """Children side by side, wrapping onto the next line when the notebook is narrow."""
    return widgets.HBox(list(children), layout=widgets.Layout(**{**_ROW, **layout}))


def button(description: str, **kwargs: Any) -> widgets.Button:
    """A button as wide as its label (and icon), also in a column (which stretches its children)."""
    layout = kwargs.pop("layout", None) or widgets.Layout()
    layout.width = layout.width or "auto"
    layout.min_width = layout.min_width or "fit-content"
    layout.align_self = layout.align_self or "flex-start"
    return widgets.Button(description=description, layout=layout, **kwargs)


def description_style(width: str = "auto") -> dict:
    """A description sized to its text (``auto``) or at least ``width``, never cut off."""
    return {"description_width": width}


def heading(text: str) -> widgets.HTML:
    return widgets.HTML(f"<h4 style='margin:8px 0 2px 0'>{text}</h4>")


def scroll_box(max_height: str = "480px") -> widgets.Layout:
    """The layout of a view whose content can be long (a file, a log): it scrolls inside itself."""
    return widgets.Layout(max_height=max_height, overflow="auto", width="100%")


def hidden(widget: Any) -> Any:
    widget.layout.display = "none"
    return widget


def shown(widget: Any, visible: bool = True) -> Any:
    widget.layout.display = None if visible else "none"
    return widget


def plot_image() -> widgets.Image:
    """A PNG slot that takes no room until it has a picture (an empty Image is a broken-image icon);
    it never grows wider than the panel."""
    image = widgets.Image(format="png", layout=widgets.Layout(max_width="100%", height="auto", display="none"))
    image.observe(lambda change: shown(image, bool(change["new"])), names="value")
    return image


def table_view() -> widgets.HTML:
    """An HTML slot for a table: a table wider than the panel scrolls inside this box, not the page
    (an HTML widget otherwise grows to its table's width)."""
    view = widgets.HTML(layout=widgets.Layout(overflow="auto"))
    view.add_class(SCROLL_CLASS)
    return view
