"""The app's sweep tab for a vLLM-backend model: the LLM sweep panel and its errors beside their
fields. A real sweep from the panel, through Triton's real vLLM backend, is run where a person
runs it: in JupyterLab and Chromium (tests/browser/test_vllm_app.py).
"""

from __future__ import annotations

import html
import re

import pytest

from workbench.generate.settings import GenerateSettings
from workbench.generate.vllm_backend import VllmSettings
from workbench.measure.grid.plan import SweepError
from workbench.measure.llm.slo_effort import LLM_SEARCHES
from workbench.measure.sweep.search.effort import EffortRule
from workbench.ui.app import Workbench
from workbench.ui.llm_sweep_panel import STRATEGIES, LlmSweepPanel
from workbench.ui.shared_state import WorkbenchState


def test_the_sweep_tab_follows_the_backend_of_the_settings(tmp_path):
    app = Workbench(tmp_path / "repo")
    assert app.sweep_tab.children == (app.panels["sweep"].widget,)
    tensor = app.state.settings
    app.state.settings = GenerateSettings(triton_model_dir=str(tmp_path / "repo" / "llm"), backend="vllm",
                                          backend_settings=VllmSettings(model=str(tmp_path)))
    assert app.sweep_tab.children == (app.panels["llm sweep"].widget,)
    app.state.settings = None  # invalid settings for a moment: the tab stays as it was
    assert app.sweep_tab.children == (app.panels["llm sweep"].widget,)
    app.state.settings = tensor or GenerateSettings(triton_model_dir=str(tmp_path / "repo" / "mlp"))
    assert app.sweep_tab.children == (app.panels["sweep"].widget,)


@pytest.mark.parametrize("control, bad, message", [
    ("input_tokens", -3, "input tokens -3: give a whole number of tokens >= 1"),
    ("max_num_seqs", "1,x", "max seqs: 'x' is not a whole number"),
    ("slo_ttft_ms", -5.0, "SLO: TTFT -5 ms is below 0; 0 leaves the limit out"),
])
def test_a_bad_value_is_said_beside_its_field_and_nothing_runs(tmp_path, control, bad, message):
    panel = LlmSweepPanel(WorkbenchState(tmp_path / "repo"))
    good = panel.controls[control].value
    panel.controls[control].value = bad
    field = {"slo_ttft_ms": "slo"}.get(control, control)
    assert html.escape(message) in panel.plan_link.problem_view(field).value
    assert panel.plan_link.value.size == 4  # the last good grid stands, nothing clamped
    assert panel.start() is None and html.escape(message) in panel.controls["error"].value
    panel.controls[control].value = good
    assert panel.plan_link.problem_view(field).value == "" and panel.plan_link.problems == []


def test_a_load_timeout_that_is_not_seconds_above_0_is_refused_and_nothing_runs(tmp_path):
    panel = LlmSweepPanel(WorkbenchState(tmp_path / "repo"))
    assert panel.controls["load_timeout_s"].value == 300.0  # run_llm_sweep's own, as `workbench sweep` has it
    panel.controls["load_timeout_s"].value = 0.0
    assert panel.start() is None
    assert "load timeout (s): 0 must be seconds above 0 (at most a day)" in panel.controls["error"].value


def test_the_strategy_switch_builds_the_effort_rule_the_sweep_is_given(tmp_path):
    """grid: no rule (each point until stable, the grid's window cap shown); adaptive: the rule of
    the min and max windows shown in its place, the CLI's ``--search`` names and rule defaults."""
    panel = LlmSweepPanel(WorkbenchState(tmp_path / "repo"))
    c = panel.controls
    assert [value for _text, value in STRATEGIES] == list(LLM_SEARCHES)
    assert c["search"].value == "grid" and panel.effort() is None
    assert [box.layout.display for box in panel._rule_fields] == ["none", "none"]
    assert panel._grid_cap.layout.display is None
    c["search"].value = "adaptive"
    assert panel.effort() == EffortRule()  # the rule's defaults, as `workbench sweep --search adaptive`
    assert [box.layout.display for box in panel._rule_fields] == [None, None]
    assert panel._grid_cap.layout.display == "none"  # the rule replaces the grid's window cap
    c["min_windows"].value, c["effort_max_windows"].value = 4, 7
    assert panel.effort() == EffortRule(min_windows=4, max_windows=7)
    assert "4 point(s), each measured until decided (4 to 7 windows)" in c["grid_size"].value
    c["search"].value = "grid"
    assert panel.effort() is None and c["grid_size"].value == "<i>4 point(s)</i>"


@pytest.mark.parametrize("control, field, bad, message", [
    ("min_windows", "min_windows", 1, "min windows 1 must be a whole number >= 2 (an interval needs two)"),
    ("effort_max_windows", "max_windows", 2, "max windows 2 must be a whole number >= min windows (3)"),
])
def test_a_bad_window_count_of_the_rule_is_said_beside_its_field_and_nothing_runs(tmp_path, control, field, bad,
                                                                                   message):
    panel = LlmSweepPanel(WorkbenchState(tmp_path / "repo"))
    c = panel.controls
    c["search"].value = "adaptive"
    c[control].value = bad
    view = panel.search_link.problem_view(field)
    assert html.escape(message) in view.value and view.layout.display is None
    assert panel.search_link.value.effort() == EffortRule()  # the last good rule stands, nothing clamped
    assert "1 problem(s) shown in red beside their fields above" in c["grid_size"].value
    with pytest.raises(SweepError, match=re.escape(message)):
        panel.effort()
    assert panel.start() is None and html.escape(message) in c["error"].value
    assert panel.run.task is None  # nothing ran
    c["search"].value = "grid"  # the grid does not use the rule's windows: no problem left
    assert panel.search_link.problems == [] and panel.effort() is None
    c["search"].value = "adaptive"  # chosen again, the bad count is said again (beside the switch)
    assert html.escape(message) in panel.search_link.problem_view("name").value


def test_the_strategy_switch_names_the_search_the_sweep_is_given(tmp_path):
    """adaptive and capacity: the `LlmSearch` passed to run_llm_sweep as ``search``, with the rule's
    windows shown beside it and the size line saying which points each leaves out."""
    from workbench.measure.llm.slo_effort import LlmSearch

    panel = LlmSweepPanel(WorkbenchState(tmp_path / "repo"))
    c = panel.controls
    assert panel.search() == LlmSearch()
    c["search"].value = "capacity"
    c["effort_max_windows"].value = 6
    assert panel.search() == LlmSearch("capacity", max_windows=6) and panel.effort() == EffortRule(3, 6)
    assert [box.layout.display for box in panel._rule_fields] == [None, None]
    assert "at most 4 point(s), each measured until decided (3 to 6 windows); each variant's loads bisected " \
           "for the highest meeting the SLO" in c["grid_size"].value
    c["search"].value = "adaptive"
    assert "those a heavier load's reading rules out are left out" in c["grid_size"].value
    c["min_windows"].value = 1
    with pytest.raises(SweepError, match="min windows 1 must be a whole number >= 2"):
        panel.search()


def test_a_cpu_run_is_priced_only_as_a_cpu_instance_and_at_the_users_price(tmp_path):
    """Issue 43: the price list offered only inf1/inf2/trn1 for tokens measured on the CPU. A CPU
    run's answer names a CPU instance with the price's date and source, the list offers CPU types
    only, and the user's own price replaces the list's."""
    from test_llm_sweep import ROWS, _result

    panel = LlmSweepPanel(WorkbenchState(repository=str(tmp_path / "repo")))
    panel.result = _result(ROWS, target="cpu")
    panel._show_best()
    c = panel.controls
    assert c["price_as"].options and all(name.startswith(("m7", "c7")) for name in c["price_as"].options)
    shown = html.unescape(c["best"].value)
    assert f"Cheapest per million output tokens on {c['price_as'].value} at $" in shown
    assert "2026-12-06: https://aws.amazon.com/ec2/pricing/on-demand/" in shown
    assert not re.search(r"inf[12]|trn[12]", shown)
    c["price_usd"].value = 0.2
    assert "at $0.2/h (user, as given" in html.unescape(c["best"].value)
    c["price_usd"].value = -1.0
    assert "must be a positive number of USD per hour" in html.unescape(c["best"].value)


def test_the_panel_shows_one_ttft_p99_for_a_point_in_its_best_line_decision_line_and_table(tmp_path):
    """Issue 43, where a person reads it: after an adaptive run the panel's Best line, the point's
    decision line under it and the table's TTFT p99 cell give the point's one TTFT p99 (over all its
    requests); the per-window mean the rule judged on appears only after "the rule's reason"."""
    from types import SimpleNamespace

    from test_llm_effort import decided_run

    from workbench.measure.store.table import significant
    from workbench.measure.sweep.search.effort import RULE_REASON

    result, pooled_p99, _ = decided_run()
    panel = LlmSweepPanel(WorkbenchState(repository=str(tmp_path / "repo")))
    panel._finished(SimpleNamespace(state="done", result=result, error=None))
    c = panel.controls
    lines = re.findall(r"<div[^>]*>(.*?)</div>", c["best"].value)
    best = html.unescape(next(line for line in lines if line.startswith("Best (")))
    decision = html.unescape(next(line for line in lines if line.startswith("seqs4-tp1-x1 at concurrency 4: ")))
    stated, _, reason = decision.partition(f"; {RULE_REASON}: ")
    shown = f"TTFT p99 {pooled_p99:.1f} ms"
    assert re.search(r"TTFT p99 [0-9.]+ ms", best).group(0) == shown  # the best point's, first
    assert re.findall(r"TTFT p99 [0-9.]+ ms", stated) == [shown] and "205.0 output tok/s, 95% [200.0, 210.0]" in stated
    assert "TTFT p99 per-window mean 135.0 ms" in reason and "per-window" not in stated
    heads = re.findall(r"<th[^>]*>(.*?)</th>", c["table"].value)
    first_row = re.findall(r"<td[^>]*>(.*?)</td>", c["table"].value.split("<tbody>")[1].split("</tr>")[0])
    ttft_cell = first_row[next(i for i, h in enumerate(heads) if html.unescape(h).startswith("TTFT p99"))]
    assert ttft_cell == significant(pooled_p99) == significant(float(shown.split()[2]))
