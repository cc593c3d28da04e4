"""What nbval's run of the tutorials also checks, cell by cell: a figure is shown as an image.

A Matplotlib figure that IPython cannot draw reaches the reader as its repr,
``<Figure size 850x460 with 1 Axes>``; nbval-lax compares only the ``# NBVAL_CHECK_OUTPUT`` cells,
so without this every other cell could print that and pass.
"""

from __future__ import annotations

import re

import pytest

FIGURE_TEXT = re.compile(r"<(?:matplotlib\.figure\.)?Figure size \d+x\d+ with \d+ Axes>")


def figure_texts(outputs: list) -> list[str]:
    """The outputs of one executed cell that show a figure as text (display data with no image,
    or printed)."""
    found = []
    for out in outputs or []:
        data = out.get("data") or {}
        text = data.get("text/plain", "") if not any(k.startswith("image/") for k in data) else ""
        text += out.get("text", "")
        found += FIGURE_TEXT.findall(text)
    return found


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    result = yield
    shown_as_text = figure_texts(getattr(item, "test_outputs", None))
    if shown_as_text:
        pytest.fail(f"{item.name}: a figure reached the reader as text, not an image: {shown_as_text[0]}")
    return result
