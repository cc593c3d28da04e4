"""Tables for people (issue 31, defect 2): the sweep tab, the results tab and ``run.table()`` show short
titles with units, rounded numbers and one-line rows, long text (note, served_by) as a tooltip.

The HTML is parsed back (html.parser) so the assertions read what a browser gets; the row heights a
person sees are measured in Chromium by tests/browser/test_tabs.py.
"""

from __future__ import annotations

import re

import pandas as pd
from html.parser import HTMLParser

from workbench.measure.store.results import SweepResult, frame_from_rows
from workbench.measure.store.table import readable_table, significant
from workbench.ui.widget_values import table_html

from test_results import point

LONG_NOTE_ROWS = [
    point("1x1", 1, 1, throughput=123.456789, p99=10.123456, queue_ms=0.2, compute_infer_ms=2.0,
          throughput_low=120.111, throughput_high=126.999, p99_low_ms=9.87654, p99_high_ms=10.5555,
          send_delay_us=12.3456, client_cpu_us=45.6789, served_by="Python backend (model.py)"),
    point("1x1", 8, 1, throughput=1234.5678, p99=40.0, stable=False, windows=10, queue_ms=12.0,
          compute_infer_ms=4.0, throughput_low=1100.0, throughput_high=1300.0, p99_low_ms=35.0, p99_high_ms=45.0,
          send_delay_us=3.0, client_cpu_us=40.0,
          served_by="PyTorch backend through the workbench's Python-backend twin (no LibTorch backend here)"),
]


class _Cells(HTMLParser):
    def __init__(self):
        super().__init__()
        self.headers, self.rows, self.titles, self._in, self._text = [], [], [], None, ""

    def handle_starttag(self, tag, attrs):
        if tag == "tr":
            self.rows.append([])
        if tag in ("th", "td"):
            self._in, self._text = tag, ""
            self.titles.append(dict(attrs).get("title", ""))

    def handle_data(self, data):
        if self._in:
            self._text += data

    def handle_endtag(self, tag):
        if tag == "th":
            self.headers.append(self._text)
        elif tag == "td":
            self.rows[-1].append(self._text)
        if tag in ("th", "td"):
            self._in = None


def _parse(markup: str) -> _Cells:
    cells = _Cells()
    cells.feed(markup)
    return cells


def test_result_table_has_short_titles_with_units_and_no_snake_case():
    cells = _parse(table_html(SweepResult(frame_from_rows(LONG_NOTE_ROWS), {"label": "r"})))
    assert not [h for h in cells.headers if "_" in h], cells.headers
    assert "throughput (infer/s)" in cells.headers and "p99 (ms)" in cells.headers
    assert "send delay (µs)" in cells.headers and "95% range (infer/s)" in cells.headers
    assert "throughput_high" not in " ".join(cells.headers)  # the spread is one range column


def test_numbers_are_rounded_to_what_they_mean():
    cells = _parse(table_html(SweepResult(frame_from_rows(LONG_NOTE_ROWS), {"label": "r"})))
    column = cells.headers.index("throughput (infer/s)")
    body = [row for row in cells.rows if row]
    assert [row[column] for row in body] == ["123", "1230"]
    assert body[0][cells.headers.index("95% range (infer/s)")] == "120–127"
    assert body[0][cells.headers.index("p99 (ms)")] == "10.1"
    numbers = [text for row in body for text in row if re.fullmatch(r"[\d.–]+", text)]
    assert not [n for n in numbers if re.search(r"\.\d{4,}", n)], numbers  # never six decimals
    assert [significant(v) for v in (0.012345, 99.0, 5.6789)] == ["0.0123", "99.0", "5.68"]


def test_long_text_is_one_line_with_the_whole_text_as_tooltip():
    frame = frame_from_rows(LONG_NOTE_ROWS)
    table = SweepResult(frame, {"label": "r"}).table()
    assert "note" in table.columns and "served_by" in table.columns  # the columns that wrapped
    markup = table_html(SweepResult(frame, {"label": "r"}))
    cells = _parse(markup)
    body = [row for row in cells.rows if row]
    note = body[1][cells.headers.index("note")]
    assert len(note) <= 28 and note.endswith("…")
    whole = table["note"].iloc[1]
    assert any(t == whole for t in cells.titles), "the whole note is the cell's tooltip"
    assert "white-space:nowrap" in markup  # no cell wraps: a row is one line


def test_the_same_renderer_reads_any_frame():
    listing = readable_table(frame_from_rows(LONG_NOTE_ROWS)[["batch_size", "p99_ms"]])
    assert [c.heading for c in listing.columns] == ["batch", "p99 (ms)"]


def test_run_table_in_a_notebook_is_the_same_readable_table():
    table = SweepResult(frame_from_rows(LONG_NOTE_ROWS), {"label": "r"}).table()
    cells = _parse(table._repr_html_())
    assert "throughput (infer/s)" in cells.headers and not [h for h in cells.headers if "_" in h]
    assert type(table[["throughput"]]) is pd.DataFrame  # as data, a plain frame


def test_the_best_line_of_a_backend_comparison_names_the_backend():
    rows = [dict(row, variant=f"{row['served_by']}: 1x1") for row in LONG_NOTE_ROWS]
    text = SweepResult(frame_from_rows(rows), {"label": "r"}).describe_best()
    assert "served by PyTorch backend through the workbench's Python-backend twin" in text
    plain = SweepResult(frame_from_rows(LONG_NOTE_ROWS[:1]), {"label": "r"}).describe_best()
    assert "served by" not in plain
