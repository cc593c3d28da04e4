"""The LLM sweep's effort mode on the tiny LLM through Triton's REAL vLLM backend: one variant at two
concurrencies, each point measured until the effort rule decides it against the best point so far
and the SLO; every row records its verdict and its output tokens/s interval, the run record keeps
the rule, and the answer states its confidence. Then, on the variant still loaded, a point held to
an impossibly tight ITL SLO stops after the rule's screen: it cannot win. Last, the app's LLM sweep
panel switched to "until decided" runs the same sweep and shows every row's verdict.

Shares the vLLM server of conftest's ``tiny_llm_server`` (one variant load, ~25 s on 2 cores);
skips, saying what is missing, without the vLLM environment.
"""

from __future__ import annotations

import html
import sys
import time

import pytest

from workbench import zoo
from workbench.measure.engine.measure_settings import MeasureSettings
from workbench.measure.engine.streaming import VLLM_TOKEN_METRIC, ModelTokenizer, Slo, build_prompts, measure_stream
from workbench.measure.engine.streaming.prompts import Lengths
from workbench.measure.llm import LlmPlan, run_llm_sweep
from workbench.measure.llm.rows import LlmRow
from workbench.measure.llm.run import COUNT_OUTPUT
from workbench.measure.llm.slo_effort import ITL_P99, pooled_text, slo_limits, stream_summaries
from workbench.measure.sweep.search.effort import RULE_REASON, STOP_KINDS, DecidedBy, EffortRule
from workbench.ui.llm_sweep_panel import LlmSweepPanel
from workbench.ui.shared_state import WorkbenchState

pytestmark = [pytest.mark.server, pytest.mark.slow, pytest.mark.timeout(600)]

SETTINGS = MeasureSettings(window_s=0.5, stable_windows=2, max_windows=4, time_limit_s=10.0, min_latencies=0)
RULE = EffortRule(min_windows=3, max_windows=5)
PLAN = LlmPlan(max_num_seqs=(4,), concurrency=(1, 4), input_tokens=16, output_tokens=8,
               slo=Slo(ttft_ms=5000.0, itl_ms=1000.0), prompts=8)


def test_an_effort_mode_sweep_records_verdicts_and_states_its_confidence(tiny_llm_server, tmp_path):
    server, model_dir = tiny_llm_server
    started = time.perf_counter()
    result = run_llm_sweep(PLAN, server, model_dir, out_dir=tmp_path / "run", settings=SETTINGS, restore=False,
                           effort=RULE)
    swept_s = time.perf_counter() - started
    print("\n" + result.table()[["variant", "concurrency", "output_tokens_per_s", "output_tokens_per_s_low",
                                 "output_tokens_per_s_high", "ttft_p99_ms", "itl_p99_ms", "stopped"]].to_string()
          + f"\n{result.describe_best()}\nswept in {swept_s:.1f} s", file=sys.stderr)
    assert result.complete and result.record["effort"] == {"min_windows": 3, "max_windows": 5}
    rows = result.frame.to_dict("records")
    assert [int(r["concurrency"]) for r in rows] == [1, 4]
    for row in rows:
        assert not row["error"] and row["server_output_tokens"] == row["client_output_tokens"] > 0
        kind = row["stopped"].split(" after ")[0]
        assert kind in STOP_KINDS, row["stopped"]
        assert RULE.min_windows <= row["windows"] <= RULE.max_windows
        assert f"after {int(row['windows'])} window(s)" in row["stopped"]
        assert row["output_tokens_per_s_low"] < row["output_tokens_per_s_high"]
    # the first point meets the loose SLO with no incumbent before it: a new incumbent, known as one;
    # its line states the row's own figures over all its requests, the rule's per-window reading after
    first = LlmRow.from_dict(rows[0])
    stated, named, reason = rows[0]["stopped"].partition(f"; {RULE_REASON}: ")
    assert named and stated == f"separated above after 3 window(s): {pooled_text(first)}"
    assert reason.startswith("throughput per-window mean ") and "no incumbent yet" in reason
    # the second is judged against it: its verdict names the incumbent's interval
    if rows[1]["stopped"].split(" after ")[0] in ("separated above", "separated below"):
        assert "seqs4-tp1-x1 at concurrency 1's [" in rows[1]["stopped"]
    found = result.answer()
    assert found.best is not None and found.runner_up is None  # one variant: no other configuration
    assert found.confidence.separable is True
    # the best point's TTFT p99: one number in its row, its decision line (before the rule's reason) and the Best line
    best = LlmRow.from_dict(next(r for r in rows if r["concurrency"] == found.best["concurrency"]))
    shown = f"TTFT p99 {best.ttft_p99_ms:.1f} ms"
    assert shown in best.stopped.partition(RULE_REASON)[0] and shown in result.describe_best()
    assert "Confidence: separable: no other configuration qualifies." in result.describe_best()


def test_a_point_past_an_impossibly_tight_itl_slo_cannot_win_after_the_screen(tiny_llm_server):
    """Measured on whatever variant of the tiny LLM the server holds (no reload): each request's
    inter-token gap is far above 0.001 ms, so the rule stops the point after its 3-window screen."""
    server, model_dir = tiny_llm_server
    prompts = build_prompts(ModelTokenizer(zoo.tiny_llm().path), 4, Lengths(16), Lengths(8), seed=0)
    until = DecidedBy(RULE, None, slo_limits(Slo(ttft_ms=5000.0, itl_ms=0.001)), stream_summaries)
    started = time.perf_counter()
    result = measure_stream(server.grpc_url, model_dir.name, prompts, SETTINGS, concurrency=2,
                            counts_from=server, token_metric=VLLM_TOKEN_METRIC, count_output=COUNT_OUTPUT,
                            until=until)
    print(f"\n{result.stopped} ({time.perf_counter() - started:.1f} s)", file=sys.stderr)
    assert result.windows == RULE.min_windows and result.pooled_windows == RULE.min_windows
    assert result.stopped.startswith(f"cannot win after 3 window(s): {ITL_P99} ")
    assert "is past the 0.001 ms limit" in result.stopped
    assert not any(w.startswith("not stable") for w in result.warnings)  # the rule decided, not stability
    assert result.output_tokens_per_s_low < result.output_tokens_per_s < result.output_tokens_per_s_high


def test_the_panel_switched_to_until_decided_shows_each_points_verdict(tiny_llm_server, tmp_path):
    """The LLM sweep panel with its strategy on ``adaptive`` runs PLAN's grid through the real vLLM
    backend (one variant load, ~35 s here): the run keeps the panel's rule, and each row's verdict
    is in the table (cut to a line, whole as its tooltip) and whole under the answer."""
    server, model_dir = tiny_llm_server
    panel = LlmSweepPanel(WorkbenchState(model_dir.parent, name=model_dir.name, server=server), runs_dir=tmp_path)
    c = panel.controls
    for control, value in (("max_num_seqs", "4"), ("concurrency", "1,4"), ("input_tokens", 16), ("output_tokens", 8),
                           ("slo_ttft_ms", 5000.0), ("slo_itl_ms", 1000.0), ("window_s", SETTINGS.window_s),
                           ("time_limit_s", SETTINGS.time_limit_s), ("search", "adaptive"),
                           ("effort_max_windows", RULE.max_windows)):
        c[control].value = value
    assert panel.effort() == RULE
    started = time.perf_counter()
    task = panel.start()
    assert task is not None, c["error"].value
    assert task.join(timeout=400) and task.state == "done", task.error_text
    print(f"\npanel swept in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    result = panel.result
    assert result.complete, (result.status, result.record["sessions"][-1], result.frame[["concurrency", "error", "stopped"]].to_dict("records"))
    assert result.record["effort"] == {"min_windows": 3, "max_windows": 5}
    rows = result.frame.to_dict("records")
    assert [int(r["concurrency"]) for r in rows] == [1, 4]
    for row in rows:
        assert not row["error"] and row["stopped"].split(" after ")[0] in STOP_KINDS, row["stopped"]
        assert f"title='{html.escape(row['stopped'], quote=True)}'" in c["table"].value
        level = f"concurrency {int(row['concurrency'])}"
        assert html.escape(f"{row['variant']} at {level}: {row['stopped']}") in c["best"].value
    assert rows[0]["stopped"].startswith("separated above after 3 window(s)")  # the first point: no incumbent
    assert "Confidence: separable" in c["best"].value
