"""Text that a person cannot read in a plot: tick labels printed over each other, a legend over an
axis's ticks or labels, a title over a label. matplotlib knows every text's extent once the figure is
drawn; this lists the overlaps (empty when the figure reads cleanly), for the tests of every plot the
workbench draws. Marks on the data (point annotations, heat-map cell values) are not checked: they sit
where their data is.
"""

from __future__ import annotations

from itertools import combinations
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.text import Text
from matplotlib.transforms import Bbox

__all__ = ["text_overlaps"]

_SLACK = 1.0  # pixels two boxes may share (anti-aliased edges touch)


def _box(artist, renderer) -> Bbox | None:
    if not artist.get_visible() or (isinstance(artist, Text) and not artist.get_text().strip()):
        return None
    box = artist.get_window_extent(renderer)
    return None if box.width <= 0 or box.height <= 0 else box


def _overlap(a: Bbox, b: Bbox) -> bool:
    return (min(a.x1, b.x1) - max(a.x0, b.x0) > _SLACK) and (min(a.y1, b.y1) - max(a.y0, b.y0) > _SLACK)


def _name(text: Text) -> str:
    return repr(" ".join(text.get_text().split()))


def text_overlaps(figure: Figure) -> list[str]:
    """Every pair of texts that overlap: tick labels of one axis, axis labels and titles (the
    figure's too) against tick labels, and any legend against any of them (its own texts aside);
    and every title, axis label or legend that runs past the figure's edge (cut off where it is
    shown; tick labels are placed on every tick, drawn or not, so they are left out)."""
    if figure.canvas is None or not hasattr(figure.canvas, "get_renderer"):
        FigureCanvasAgg(figure)
    canvas: Any = figure.canvas  # an Agg canvas or one of its kind: has get_renderer (ensured above)
    canvas.draw()
    renderer = canvas.get_renderer()
    problems: list[str] = []
    labels: list[tuple[str, Bbox]] = []  # every axis text, for the legends
    for ax in figure.axes:
        if not ax.get_visible() or not ax.axison:
            continue
        for axis, name in ((ax.xaxis, "x"), (ax.yaxis, "y")):
            if not axis.get_visible():  # a twin's shared axis: drawn by the other axes
                continue
            low, high = sorted(axis.get_view_interval())
            span = (high - low) * 1e-9
            drawn = [
                t.label1
                for t in axis.get_major_ticks() + axis.get_minor_ticks()
                if low - span <= t.get_loc() <= high + span and t.label1.get_visible() and t.label1.get_text()
            ]
            # the labels of ticks inside the view: the drawn ones
            ticks = [(t, box) for t in drawn if (box := _box(t, renderer)) is not None]
            problems += [
                f"{name} tick labels {_name(a)} and {_name(b)} overlap"
                for (a, ba), (b, bb) in combinations(ticks, 2)
                if _overlap(ba, bb)
            ]
            labels += [(f"{name} tick label {_name(t)}", b) for t, b in ticks]
            box = _box(axis.label, renderer)
            if box is not None:
                labels.append((f"{name} axis label {_name(axis.label)}", box))
        box = _box(ax.title, renderer)
        if box is not None:
            labels.append((f"title {_name(ax.title)}", box))
    suptitle = getattr(figure, "_suptitle", None)  # fig.suptitle's Text (matplotlib keeps it there)
    if suptitle is not None and (box := _box(suptitle, renderer)) is not None:
        labels.append((f"figure title {_name(suptitle)}", box))
    for (na, ba), (nb, bb) in combinations(labels, 2):
        if _overlap(ba, bb) and not ("tick label" in na and "tick label" in nb):  # ticks: checked per axis
            problems.append(f"{na} and {nb} overlap")
    legends = [ax.get_legend() for ax in figure.axes] + list(figure.legends)
    for legend in filter(None, legends):
        box = _box(legend, renderer)
        if box is None:
            continue
        problems += [f"the legend covers the {name}" for name, other in labels if _overlap(box, other)]
        labels.append(("legend", box))
        for ax in figure.axes:  # a legend inside the plot area hides data
            if _overlap(box, ax.get_window_extent(renderer)) and legend.axes is not ax and legend not in figure.legends:
                problems.append("the legend lies over another plot's area")
    edge = figure.bbox  # a text past the figure's edge is cut off where the figure is shown
    problems += [
        f"the {name} runs past the figure's edge"
        for name, box in labels
        if "tick label" not in name
        and (box.x0 < edge.x0 - 1 or box.x1 > edge.x1 + 1 or box.y0 < edge.y0 - 1 or box.y1 > edge.y1 + 1)
    ]
    return problems
