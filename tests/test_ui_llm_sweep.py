"""The app's sweep tab for a vLLM-backend model: the LLM sweep panel, its errors beside their fields,
and a real sweep of the tiny LLM through Triton's real vLLM backend (conftest's shared
``tiny_llm_server``) whose table, best and cheapest lines and plots are what a person reads.
"""

from __future__ import annotations

import dataclasses
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


@pytest.mark.server
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_an_llm_sweep_from_the_panel_shows_tokens_the_best_and_the_cheapest(tiny_llm_server, tmp_path):
    server, model_dir = tiny_llm_server
    state = WorkbenchState(model_dir.parent, name=model_dir.name)
    state.server = server
    panel = LlmSweepPanel(state, runs_dir=tmp_path / "runs")
    c = panel.controls
    c["max_num_seqs"].value, c["concurrency"].value = "4", "1,2"
    c["input_tokens"].value, c["output_tokens"].value = 8, 8
    c["slo_ttft_ms"].value, c["slo_itl_ms"].value = 5000.0, 1000.0
    c["window_s"].value, c["max_windows"].value, c["time_limit_s"].value = 0.5, 3, 3.0
    c["price_as"].value = "inf2.xlarge"
    assert panel.plan_link.problems == [] and panel.measure_link.problems == []
    task = panel.start()
    assert task is not None
    assert panel.run.join(800)
    assert task.state == "done", (task.error, c["error"].value)
    result = panel.result
    assert result is state.sweep and result.complete and len(result.frame) == 2
    # the table a person reads: titles with units, the client's and the server's token counts side by side
    table = c["table"].value
    for title in ("output (tok/s)", "TTFT p99 (ms)", "ITL p99 (ms)", "tokens (client)", "tokens (server)", "goodput"):
        assert title in table
    for row in result.frame.to_dict("records"):
        assert row["server_output_tokens"] == row["client_output_tokens"] > 0
    best = c["best"].value
    assert "Best (highest output tokens/s with TTFT p99 &lt;= 5000 ms and ITL p99 &lt;= 1000 ms" in best
    assert "Cheapest per million output tokens on inf2.xlarge" in best and "per million output tokens" in best
    assert c["plots"].layout.display != "none"
    assert all(bytes(image.value).startswith(b"\x89PNG") for image in c["plots"].children)
    c["price_as"].value = "trn1.2xlarge"  # another price: the cheapest line follows at once
    assert "Cheapest per million output tokens on trn1.2xlarge" in c["best"].value
    assert server.is_model_ready(model_dir.name)  # the model is loaded again as written
    assert dataclasses.is_dataclass(panel.plan_link.value)
