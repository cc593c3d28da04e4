"""Every tab of the workbench as a newcomer sees it, in a real JupyterLab and Chromium, at
1280x800 and 1920x1080 (issue 18): no label or button text cut off, no stray horizontal
scrollbar (logs and files scroll inside their own boxes), no broken image, no console error;
and what a person reads (issue 31): every table's rows at most 3 lines tall and its titles whole,
the server log's newest line in view, an error about an input gone once the input changes, a bad
setting's error directly under its field and gone once fixed.

The results tab opens and compares two saved runs (written here with the logic layer's own
writers, one with an outlier and unstable points), so its tables and plots are on screen.
Screenshots of every tab at both sizes are kept under the test's tmp dir (the path is printed).
"""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest

from app_page import button, open_tab, workbench_of  # tests/browser/app_page.py
from page_checks import LAYOUT_PROBLEMS, TEXT_OVERLAPS  # tests/browser/page_checks.py

from workbench.measure.store.results import POINTS_FILE, append_point, frame_from_rows, write_exports, write_record

pytestmark = [pytest.mark.browser, pytest.mark.timeout(600)]

TABS = ("model", "settings", "preview", "server", "sweep", "results")
VIEWPORTS = ((1280, 800), (1920, 1080))
WAIT_MS = 180_000
NOTEBOOK = "workbench.ipynb"



def _row(run: str, batch: int, concurrency: int, p99: float, stable: bool) -> dict:
    return {"variant": "1x1", "allocation": "1x1", "instances": 1, "cores_per_instance": 1, "core_start": 0,
            "core_end": 0, "batching": "as configured", "parameters": "", "batch_size": batch,
            "concurrency": concurrency, "throughput": 90.0 * batch + concurrency, "p50_ms": 2.0 + batch,
            "p90_ms": 3.0 + batch, "p95_ms": 3.5 + batch, "p99_ms": p99, "mean_ms": 2.5 + batch, "stable": stable,
            "windows": 3 if stable else 10, "requests": 200, "failures": 0, "outputs_ok": True,
            "max_abs_diff": 0.0, "queue_ms": 0.5, "compute_input_ms": 0.1, "compute_infer_ms": 1.5 * batch,
            "compute_output_ms": 0.1, "overhead_ms": 0.1, "avg_batch": float(batch), "error": None,
            "measured_at": f"2026-12-01T1{run}:00:00+00:00"}


def _save_run(folder: Path, label: str, outlier: bool) -> None:
    rows = [_row(label[-1], batch, concurrency, 275.0 if outlier and (batch, concurrency) == (4, 2) else 6.0 + batch,
                 stable=not (outlier and concurrency == 2))
            for batch in (1, 4, 8) for concurrency in (1, 2)]
    record = {"model": "add_sub", "status": "complete", "label": label}
    folder.mkdir(parents=True)
    for row in rows:
        append_point(folder / POINTS_FILE, row)
    write_record(folder, record)
    write_exports(folder, frame_from_rows(rows), record)


@pytest.fixture(scope="module")
def lab_root(tmp_path_factory) -> Path:
    """A scratch folder: a notebook showing the workbench, and two saved runs in its runs folder."""
    root = tmp_path_factory.mktemp("tabs")
    _save_run(root / "runs" / "run-1", "before-1", outlier=False)
    _save_run(root / "runs" / "run-2", "after-2", outlier=True)
    cells = [nbformat.v4.new_code_cell("from workbench.ui import Workbench\n"
                                       "app = Workbench(repository='model_repository')\n"
                                       "for n in range(300):\n    app['server'].log.append(f'log line {n}')\n"
                                       "app['server'].log.flush()\napp")]
    nbformat.write(nbformat.v4.new_notebook(cells=cells, metadata={"kernelspec": {
        "name": "python3", "display_name": "Python 3", "language": "python"}}), root / NOTEBOOK)
    return root


# Each visible table: rows taller than 3 lines (text wrapping a word per line), titles over 2 lines;
# buttons stretched far past their label; plots shown wider than their pixels (stretched, blurry).
_READING_PROBLEMS = """root => {
    const problems = [];
    for (const button of root.querySelectorAll('button.widget-button')) {
        if (button.offsetParent === null) continue;
        const range = document.createRange();
        range.selectNodeContents(button);
        const label = range.getBoundingClientRect().width, width = button.getBoundingClientRect().width;
        if (width > label + 80) problems.push(`button "${button.innerText}" is ${width}px wide for a ${label}px label`);
    }
    for (const img of root.querySelectorAll('img')) {
        if (img.offsetParent === null || !img.naturalWidth) continue;
        if (img.clientWidth > img.naturalWidth / 1.9 + 1)
            problems.push(`plot shown ${img.clientWidth}px wide from ${img.naturalWidth}px: blurry`);
    }
    for (const table of root.querySelectorAll('table')) {
        if (table.offsetParent === null || !table.tBodies.length) continue;
        const cell = table.querySelector('td');
        if (!cell) continue;
        const line = parseFloat(getComputedStyle(cell).lineHeight) || 1.2 * parseFloat(getComputedStyle(cell).fontSize);
        const pad = el => parseFloat(getComputedStyle(el).paddingTop) + parseFloat(getComputedStyle(el).paddingBottom) + 2;
        [...table.tBodies[0].rows].forEach((row, i) => {
            const height = row.getBoundingClientRect().height;
            if (height > 3 * line + pad(cell)) problems.push(`row ${i} of a table is ${height}px tall (a line is ${line}px)`);
        });
        for (const th of table.querySelectorAll('th')) {
            if (th.getBoundingClientRect().height > 2 * line + pad(th))
                problems.push(`title "${th.innerText}" wraps (${th.getBoundingClientRect().height}px, ${th.getBoundingClientRect().width}px wide)`);
        }
    }
    return problems;
}"""

# Where the newest line of the server log is, against its scrolling box.
_NEWEST_LOG_LINE = """root => {
    const box = [...root.querySelectorAll('.workbench-log .workbench-scroll')].find(b => b.offsetParent !== null);
    const pre = box.querySelector('pre');
    const walker = document.createTreeWalker(pre, NodeFilter.SHOW_TEXT);
    let text = null;
    while (walker.nextNode()) if (walker.currentNode.textContent.includes('log line')) text = walker.currentNode;
    if (text === null) return {text: pre.innerText.slice(-200)};
    const range = document.createRange();
    const at = text.textContent.lastIndexOf('log line');
    range.setStart(text, at); range.setEnd(text, text.textContent.length);
    const line = range.getBoundingClientRect(), frame = box.getBoundingClientRect();
    return {text: range.toString(), top: line.top, bottom: line.bottom, boxTop: frame.top, boxBottom: frame.bottom,
            preScrolls: pre.scrollHeight > pre.clientHeight + 1};
}"""


def test_every_tab_reads_whole_at_two_sizes(lab, browser_page, tmp_path):
    page = browser_page
    console: list[str] = []
    page.on("console", lambda msg: msg.type == "error" and console.append(msg.text))
    page.on("pageerror", lambda err: console.append(f"page error: {err}"))
    page.set_viewport_size({"width": VIEWPORTS[0][0], "height": VIEWPORTS[0][1]})
    lab.run_all(page, NOTEBOOK, WAIT_MS, wait=False)
    workbench = workbench_of(page)
    workbench.locator(".widget-tab").first.wait_for(timeout=WAIT_MS)

    # the results tab with both runs listed, the newest opened, and the two compared
    open_tab(workbench, "results")
    button(workbench, "list runs").click()
    workbench.get_by_text("after-2").first.wait_for(timeout=WAIT_MS)
    workbench.locator("table.workbench-table:visible td").first.wait_for(timeout=WAIT_MS)
    # the run with unstable points: its table has the long note column
    workbench.locator(".widget-dropdown:has(label:text-is('run')) select").first.select_option(
        label="after-2 (complete, 6 points)")
    workbench.get_by_text("unstable after 10 windows").first.wait_for(timeout=WAIT_MS)
    button(workbench, "compare").click()
    workbench.locator("img:visible").nth(1).wait_for(timeout=WAIT_MS)

    # an error about an input is shown until the input changes
    open_tab(workbench, "sweep")
    button(workbench, "run sweep").click()
    error = workbench.get_by_text("start the server first").first
    error.wait_for(timeout=WAIT_MS)
    batch_sizes = workbench.locator(".widget-text:has(label:text-is('batch sizes')) input").first
    batch_sizes.fill("1,2")
    batch_sizes.press("Enter")  # the field sends its value on Enter
    error.wait_for(state="detached", timeout=10_000)

    # a bad number is said directly under its field, in its label's words, and goes once fixed
    open_tab(workbench, "settings")
    max_batch = workbench.locator(".widget-inline-hbox:has(label:text-is('max batch size')) input").first
    max_batch.fill("-4")
    max_batch.press("Enter")
    said = workbench.get_by_text("max batch size: -4 is less than 0").first
    said.wait_for(state="visible", timeout=10_000)
    field, message = max_batch.bounding_box(), said.bounding_box()
    below = message["y"] - (field["y"] + field["height"])
    assert -1 <= below <= 150, f"the error is {below:.0f}px below its field ({field}, {message})"
    assert max_batch.input_value() == "-4"  # what was typed stays: nothing clamped
    max_batch.fill("4")
    max_batch.press("Enter")
    said.wait_for(state="detached", timeout=10_000)

    shots, problems = [], []
    for width, height in VIEWPORTS:
        page.set_viewport_size({"width": width, "height": height})
        for tab in TABS:
            open_tab(workbench, tab)
            page.wait_for_timeout(600)  # layout and images settle
            page.wait_for_function("""root => [...root.querySelectorAll('img')].filter(i => i.offsetParent)
                                      .every(i => i.complete)""", arg=workbench.element_handle(), timeout=WAIT_MS)
            shot = tmp_path / f"{width}x{height}-{tab}.png"
            workbench.locator(".widget-tab").first.scroll_into_view_if_needed()
            page.screenshot(path=str(shot))  # what the user sees at this size
            shots.append(shot)
            found = page.evaluate(LAYOUT_PROBLEMS, workbench.element_handle())
            found += page.evaluate(TEXT_OVERLAPS, workbench.element_handle())
            found += page.evaluate(_READING_PROBLEMS, workbench.element_handle())
            if tab == "server":
                log = page.evaluate(_NEWEST_LOG_LINE, workbench.element_handle())
                if log["text"] != "log line 299" or log.get("bottom", 1e9) > log["boxBottom"] + 1 or log["top"] < log["boxTop"] - 1:
                    found.append(f"the newest log line is out of view: {log}")
                if log.get("preScrolls"):
                    found.append("the log's <pre> scrolls inside its box")
            problems += [f"{width}x{height} {tab}: {problem}" for problem in found]
    print(f"screenshots of every tab: {tmp_path}")
    (tmp_path / "problems.json").write_text(json.dumps(problems, indent=1))
    assert len(shots) == len(TABS) * len(VIEWPORTS) and all(s.stat().st_size > 1000 for s in shots)
    assert problems == []
    assert console == []
