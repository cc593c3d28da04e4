"""The workbench in a real JupyterLab driven by a real Chromium (Debian's, through Playwright).

The quickstart notebook is run in the browser, then its workbench app is used the way a person
would: compile the zoo model, write the model directory from the preview, start the server and
wait for READY, run a one-point sweep and see its plot, stop the server. Skipped only where no
Chromium exists.
"""

from __future__ import annotations

from pathlib import Path

import re

import pytest

from app_page import button, open_tab, running_servers, workbench_of  # tests/browser/app_page.py

pytestmark = [pytest.mark.browser, pytest.mark.server, pytest.mark.timeout(420)]

NOTEBOOK = "notebooks/01-quickstart.ipynb"
WAIT_MS = 180_000


def _field(workbench, label: str):
    return workbench.locator(".widget-text:visible, .widget-inline-hbox:visible").filter(
        has=workbench.page.locator(f"label:text-is('{label}')")).locator("input").first


def test_notebook_panels_generate_serve_and_sweep(lab, page):
    lab.run_all(page, NOTEBOOK, WAIT_MS)  # returns once every code cell has run
    # and none failed
    assert page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']",
                        has_text="Traceback").count() == 0
    workbench = workbench_of(page)
    workbench.locator(".widget-tab").first.wait_for(timeout=WAIT_MS)

    # model: compile the default zoo model (add_sub) on the CPU
    button(workbench, "compile").click()
    workbench.get_by_text("add_sub: cpu pytorch artifact").first.wait_for(timeout=WAIT_MS)
    # the compile log was written from the worker thread and reached the browser
    compile_log = workbench.locator(".workbench-log:visible").first
    page.wait_for_function("el => el.textContent.includes('torch.jit.trace')", arg=compile_log.element_handle(),
                           timeout=WAIT_MS)

    # preview: the generated config.pbtxt is shown; write the directory
    open_tab(workbench, "preview")
    config = workbench.locator("textarea:visible").first
    config.wait_for(timeout=WAIT_MS)
    page.wait_for_function("""el => el.value.includes('name: "add_sub"')""", arg=config.element_handle(),
                           timeout=WAIT_MS)  # filled by the compile's worker thread
    config_text = config.input_value()
    assert 'backend: "python"' in config_text and "NEURON_CORE_START_INDEX" in config_text
    button(workbench, "write model directory").click()
    wrote = workbench.get_by_text(re.compile(r"^wrote /\S+/add_sub$")).first
    wrote.wait_for(timeout=WAIT_MS)
    model_dir = Path(wrote.inner_text().removeprefix("wrote "))
    assert (model_dir / "config.pbtxt").is_file() and lab.runs in model_dir.parents  # where a user's goes

    # server: start it; the current model is loaded and shown READY
    open_tab(workbench, "server")
    button(workbench, "start server").click()
    workbench.locator("td", has_text="READY").first.wait_for(timeout=WAIT_MS)
    assert workbench.locator("td", has_text="add_sub").count() >= 1
    server_log = workbench.locator(".workbench-log:visible").first  # followed from the server's log thread
    page.wait_for_function("el => el.textContent.includes('loading: add_sub')", arg=server_log.element_handle(),
                           timeout=WAIT_MS)

    # sweep: one point with short windows; the table, the best line and a plot appear
    open_tab(workbench, "sweep")
    for label, value in (("batch sizes", "1"), ("concurrency", "1"), ("window (s)", "0.2"),
                         ("stable windows", "2"), ("max windows", "3")):
        field = _field(workbench, label)
        field.fill(value)
        field.press("Tab")
    workbench.get_by_text("1 point(s)").first.wait_for(timeout=WAIT_MS)
    button(workbench, "run sweep").click()
    workbench.get_by_text("Best (highest throughput").first.wait_for(timeout=WAIT_MS)
    assert workbench.locator("table.workbench-table:visible td").count() > 0
    image = workbench.locator("img.widget-image:visible").first
    image.wait_for(timeout=WAIT_MS)
    page.wait_for_function("img => img.complete && img.naturalWidth > 100", arg=image.element_handle(),
                           timeout=WAIT_MS)

    # stop from the panel: nothing of this test's server is left running
    open_tab(workbench, "server")
    button(workbench, "stop server").click()
    workbench.get_by_text("not running").first.wait_for(timeout=WAIT_MS)
    assert running_servers(model_dir.parent) == []
