"""The app's sweep tab for a vLLM-backend model: the LLM sweep panel and its errors beside their
fields. A real sweep from the panel, through Triton's real vLLM backend, is run where a person
runs it: in JupyterLab and Chromium (tests/browser/test_vllm_app.py).
"""

from __future__ import annotations

import html

import pytest

from workbench.generate.settings import GenerateSettings
from workbench.generate.vllm_backend import VllmSettings
from workbench.ui.app import Workbench
from workbench.ui.llm_sweep_panel import LlmSweepPanel
from workbench.ui.state import WorkbenchState


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
