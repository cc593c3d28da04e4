"""LLM sweep exports carry vLLM bench's column names beside ours (issue 45), written to the real
results.csv / results.json by the folder I/O every run uses."""

from __future__ import annotations

import json

import pandas as pd

from workbench.measure.llm.bench_names import BENCH_NAMES, goodput_slo, with_bench_names
from workbench.measure.llm.result import llm_frame
from workbench.measure.llm.rows import LlmRow
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
