"""LLM sweep exports carry vLLM bench's column names beside ours (issue 45), written to the real
results.csv / results.json by the folder I/O every run uses; a point the streaming engine refused
is shown as such in the Pareto plot and left out of the answers."""

from __future__ import annotations

import json

import pandas as pd

from workbench.measure.llm.answers import best_under, pareto_front
from workbench.measure.llm.bench_names import BENCH_NAMES, goodput_slo, with_bench_names
from workbench.measure.llm.plots import pareto_plot
from workbench.measure.llm.result import llm_frame
from workbench.measure.llm.rows import NOT_MEASURED, LlmRow
from workbench.measure.store.folder import write_exports


def test_exports_give_vllm_bench_names_beside_ours(tmp_path):
    row = LlmRow(variant="v", max_num_seqs=1, tensor_parallel=1, instances=1, cores_per_instance=1, core_start=None,
                 core_end=None, concurrency=4, request_rate=None, input_tokens=16, output_tokens=8,
                 output_tokens_per_s=100.0, requests_per_s=12.5, ttft_p50_ms=80.0, ttft_p90_ms=90.0,
                 ttft_p99_ms=300.0, itl_p50_ms=20.0, itl_p90_ms=30.0, itl_p99_ms=60.0, e2e_p50_ms=400.0,
                 e2e_p99_ms=1040.0, goodput=0.8, goodput_per_s=10.0)
    slo = goodput_slo(200.0, 40.0)
    assert slo == "ttft:200 tpot:40" and goodput_slo(None, 40.0) == "tpot:40"
    csv_path, json_path = write_exports(tmp_path, with_bench_names(llm_frame([row.to_dict()]), slo), {"kind": "llm"})
    table = pd.read_csv(csv_path)
    assert table.loc[0, "p99_ttft_ms"] == 300.0 and table.loc[0, "median_tpot_ms"] == 20.0
    assert table.loc[0, "p99_e2el_ms"] == 1040.0 and table.loc[0, "request_goodput"] == 10.0
    assert table.loc[0, "output_throughput"] == 100.0 and table.loc[0, "goodput_slo"] == slo
    assert all(theirs in table.columns for theirs in BENCH_NAMES) and "ttft_p99_ms" in table.columns
    point = json.loads(json_path.read_text())["points"][0]
    assert point["p99_ttft_ms"] == 300.0 and point["goodput_slo"] == slo


def _row(variant: str, tokens_s: float, per_user: float, error: str | None = None) -> dict:
    return LlmRow(variant=variant, max_num_seqs=1, tensor_parallel=1, instances=1, cores_per_instance=1,
                  core_start=None, core_end=None, concurrency=2, request_rate=None, input_tokens=16, output_tokens=8,
                  output_tokens_per_s=tokens_s, requests_per_s=tokens_s / 8, tokens_per_user_per_s=per_user,
                  ttft_p50_ms=50.0, ttft_p90_ms=60.0, ttft_p99_ms=70.0, itl_p50_ms=10.0, itl_p90_ms=12.0,
                  itl_p99_ms=15.0, goodput=1.0, client_output_tokens=400, server_output_tokens=400, requests=50,
                  failures=0, stable=True, error=error).to_dict()


def test_a_refused_point_is_shown_as_such_never_as_good():
    refused = f"{NOT_MEASURED}: 1 of 50 request(s) ended with another token count than the max_tokens asked"
    frame = llm_frame([_row("good", 100.0, 40.0), _row("cut", 900.0, 900.0, refused)])
    fig = pareto_plot(frame)
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert any(text.startswith(NOT_MEASURED) for text in legend), legend
    crosses = [c for c in fig.axes[0].collections if c.get_label().startswith(NOT_MEASURED)]
    assert len(crosses) == 1 and crosses[0].get_offsets().tolist() == [[900.0, 900.0]]
    assert list(pareto_front(frame)["variant"]) == ["good"]  # the refused point is faster, and off the front
    assert best_under(frame)["variant"] == "good"
