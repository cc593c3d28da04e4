"""The run report from the results tab's buttons and the CLI, on hand-written saved runs (no server):
one HTML file in the run's folder, said where; bad input refused in the tab's words. The browser
test (tests/browser/test_report.py) opens reports of real sweeps offline."""

from __future__ import annotations

import re

from workbench.cli import main
from workbench.ui.results_panel import ResultsPanel

from test_results import KNOWN, point, save_run


def _runs(tmp_path):
    save_run(tmp_path / "a", KNOWN[:4] + [point("1x1", 8, 1, throughput=400, p99=30, stable=False, windows=10)],
             label="a", started="2026-11-29T19:00:00+00:00")
    save_run(tmp_path / "b", KNOWN[:4], label="b", started="2026-11-29T20:00:00+00:00")
    return tmp_path


def test_the_results_tab_writes_a_run_report_and_a_comparison_report(tmp_path):
    panel = ResultsPanel(runs_dir=_runs(tmp_path))
    assert panel.write_report() is None and "open a run first" in panel.controls["error"].value
    panel.scan()
    panel.open(str(tmp_path / "a"))
    path = panel.write_report()
    assert path == tmp_path / "a" / "report.html" and str(path) in panel.controls["report_path"].value
    text = path.read_text()
    assert text.count("<svg") == 4 and "<script" not in text and "src=" not in text
    assert "unstable after 10 windows" in text  # the unstable point explained
    panel.controls["run_a"].value, panel.controls["run_b"].value = str(tmp_path / "a"), str(tmp_path / "b")
    compared = panel.write_report(compared=True)
    assert compared == tmp_path / "b" / "report-vs-a.html" and "How the runs differ" in compared.read_text()
    panel.controls["run_b"].value = str(tmp_path / "a")
    assert panel.write_report(compared=True) is None and "two different runs" in panel.controls["error"].value


def test_workbench_report_refuses_a_folder_without_a_run(tmp_path, capsys):
    assert main(["report", str(tmp_path)]) == 2
    assert re.search(r"workbench report: error: .* holds no sweep run", capsys.readouterr().err)
    assert list(tmp_path.iterdir()) == []  # nothing written
