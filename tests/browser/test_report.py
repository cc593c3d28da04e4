"""The run report (issue 31): `workbench report` on a real saved sweep and on a real backend
comparison writes one HTML file that Chromium opens with the network off and shows every plot,
the table, the best line and the reproduce call in; running that call measures the same grid again,
and the two runs compared are one report too.

Sweeps here are tiny (two batch sizes, short windows) on a real tritonserver; no timing is asserted.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from workbench.cli import main
from workbench.measure.sweep.compare_backends import compare_backends
from workbench.measure.grid.plan import SweepPlan
from workbench.measure.store.results import (POINTS_FILE, append_point, frame_from_rows, load_run, write_exports,
                                             write_record)
from workbench.measure.engine.measure_settings import MeasureSettings
from workbench.measure.sweep import run_sweep
from workbench.measure.sweep.reproduce import reproduce_lines
from workbench.server import TritonServer

from conftest import CHROMIUM_FLAGS, REPO  # tests/browser/conftest.py (rootdir-relative import, as pytest loads it)
from page_checks import LAYOUT_PROBLEMS, PAGE_OVERFLOW, TEXT_OVERLAPS  # the app's checks, on the report

pytestmark = [pytest.mark.browser, pytest.mark.server, pytest.mark.timeout(900)]

QUICK = MeasureSettings(engine="workbench", window_s=0.2, stable_windows=2, max_windows=2, warmup_requests=1,
                        time_limit_s=None, min_latencies=10)


@pytest.fixture(scope="module")
def runs(tmp_path_factory, generate_cpu_model):
    """A saved sweep of add_sub and a backend comparison (Python backend vs the PyTorch backend's
    Python-backend twin: the report reads either alike, and the twin needs no LibTorch build)."""
    root = tmp_path_factory.mktemp("report")
    python_dir = generate_cpu_model(root, "add_sub")
    archive = next(root.glob("compiled-*/add_sub*.pt"))
    assert main(["generate", "--backend", "pytorch", "--triton_model_dir", str(root / "repo" / "add_sub_pt"),
                 "--compiled_model", str(archive), "--max_batch_size", "8", "--instance-group-kind", "KIND_CPU"]) == 0
    with TritonServer(python_dir.parent, pytorch_backend=False) as server:
        sweep = run_sweep(SweepPlan(batch_sizes=(1, 2), allocations=("1x1",)), server, python_dir,
                          out_dir=root / "runs" / "sweep", settings=QUICK)
        compare_backends(SweepPlan(batch_sizes=(1,), allocations=("1x1",)), server,
                         [python_dir, root / "repo" / "add_sub_pt"], root / "runs" / "backends", settings=QUICK)
    return {"sweep": sweep.path, "backends": root / "runs" / "backends", "root": root}


@pytest.fixture(scope="module")
def offline_page(chromium):
    """A Chromium page with the network off; every request it makes is recorded."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_FLAGS, headless=True)
        try:
            context = browser.new_context(offline=True, viewport={"width": 1280, "height": 800})
            page = context.new_page()
            page.requests = []
            page.on("request", lambda request: page.requests.append(request.url))
            yield page
        finally:
            browser.close()


def _open(page, path: Path) -> dict:
    page.requests.clear()
    page.goto(path.as_uri())
    seen = page.evaluate("""() => ({
        plots: [...document.querySelectorAll('#plots figure.plot')].map(f => ({
            title: f.querySelector('figcaption').textContent,
            svg: !!f.querySelector('svg'), width: f.querySelector('svg').getBoundingClientRect().width})),
        tableRows: [...document.querySelectorAll('#tables table.workbench-table')].map(t => t.tBodies[0].rows.length),
        rowHeights: [...document.querySelectorAll('#tables table.workbench-table tbody tr')].map(
            r => r.getBoundingClientRect().height),
        lineHeight: parseFloat(getComputedStyle(document.querySelector('#tables td')).lineHeight) || 16,
        best: document.querySelector('#best').innerText,
        reproduce: [...document.querySelectorAll('#reproduce pre.reproduce')].map(p => p.textContent),
        unstable: document.querySelector('#unstable').innerText,
        facts: document.querySelector('#facts').innerText,
        images: [...document.querySelectorAll('img, link, script[src]')].length,
    })""")
    page.screenshot(path=str(path.with_suffix(".png")), full_page=True)
    assert [url for url in page.requests if not url.startswith("file://")] == [], "the report fetched something"
    # at 1280 px, as the app is checked: no sideways overflow, nothing cut off, no text over text
    body = page.locator("body").element_handle()
    problems = page.evaluate(PAGE_OVERFLOW) + page.evaluate(LAYOUT_PROBLEMS, body) + page.evaluate(TEXT_OVERLAPS, body)
    assert problems == [], f"{path.with_suffix('.png')}: {problems}"
    assert seen["images"] == 0, "nothing is linked: plots are inline SVG"
    assert all(h <= 3 * seen["lineHeight"] + 8 for h in seen["rowHeights"]), seen["rowHeights"]
    return seen


def test_a_comparison_of_runs_with_long_names_reads_whole_at_1280_px(offline_page, tmp_path):
    """Issue 43 item 12: a comparison report was 1354 px wide in a 1280 px window, its model path
    printed over the next column's "protocol" and its ratio plot's title cut. Two saved runs with
    long labels and a long model path (no spaces to wrap at), written by the logic layer's writers."""
    from test_plots import rows  # tests/test_plots.py: a plain sweep's rows

    model_dir = "/home/newcomer/projects/triton_neuron_workbench_tutorials/model_repository/my_bert_base_classifier"
    folders = []
    for label, scale in (("cpu_baseline_before_changing_the_dynamic_batcher", 1.0),
                         ("cpu_after_changing_the_dynamic_batcher_delay", 1.1)):
        folder = tmp_path / label
        folder.mkdir()
        points = [{**row, "throughput": row["throughput"] * scale} for row in rows()]
        record = {"model": "my_bert_base_classifier", "model_dir": model_dir, "status": "complete", "label": label}
        for point in points:
            append_point(folder / POINTS_FILE, point)
        write_record(folder, record)
        write_exports(folder, frame_from_rows(points), record)
        folders.append(folder)
    assert main(["report", str(folders[0]), str(folders[1])]) == 0
    seen = _open(offline_page, folders[1] / f"report-vs-{folders[0].name}.html")
    assert len(seen["plots"]) == 3 and seen["tableRows"][0] == len(rows())


def test_report_of_a_saved_sweep_opens_offline_with_everything(runs, offline_page, capsys):
    assert main(["report", str(runs["sweep"])]) == 0
    path = runs["sweep"] / "report.html"
    assert f"wrote {path}" in capsys.readouterr().out
    seen = _open(offline_page, path)
    assert [p["title"] for p in seen["plots"]] == ["Throughput against p99 latency", "Latency against batch size",
                                                    "Server-side time per request",
                                                    "Throughput by batch size and allocation"]
    assert all(p["svg"] and p["width"] > 300 for p in seen["plots"])
    assert seen["tableRows"] == [len(load_run(runs["sweep"]).frame)] == [2]
    assert " ".join(seen["best"].split()).startswith("Best configuration Best (highest throughput")
    (python,) = seen["reproduce"]
    assert "workbench.run_sweep(" in python and str(runs["root"] / "repo" / "add_sub") in python
    assert "Machine" in seen["facts"] and "tritonclient" in seen["facts"] and "engine" in seen["facts"]


def test_report_of_a_backend_comparison_names_the_winning_backend(runs, offline_page):
    assert main(["report", str(runs["backends"])]) == 0
    seen = _open(offline_page, runs["backends"] / "report.html")
    assert len(seen["plots"]) == 4 and all(p["svg"] for p in seen["plots"])
    assert seen["tableRows"] == [2]  # one point per backend
    assert "served by " in seen["best"]
    assert seen["reproduce"] and "compare_backends(" in seen["reproduce"][-1]


def test_the_reproduce_call_measures_the_same_grid_and_the_two_runs_compare(runs, offline_page, tmp_path):
    (python,) = [text for kind, text in reproduce_lines(load_run(runs["sweep"]).record, runs["sweep"])
                 if kind == "python"]
    again = tmp_path / "again"
    script = python.replace(repr(str(runs["sweep"])), repr(str(again)))
    assert script != python
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    first, second = load_run(runs["sweep"]), load_run(again)
    keys = ["variant", "batch_size", "concurrency"]
    assert sorted(map(tuple, second.frame[keys].values.tolist())) == sorted(map(tuple, first.frame[keys].values.tolist()))
    assert second.record["plan"] == first.record["plan"] and second.record["settings"] == first.record["settings"]
    assert main(["report", str(runs["sweep"]), str(again)]) == 0
    seen = _open(offline_page, again / "report-vs-sweep.html")
    assert seen["plots"][0]["title"] == "sweep [again] against sweep [sweep]" and len(seen["plots"]) == 3
    assert seen["tableRows"][0] == 2 and seen["best"].count("Best") >= 2
