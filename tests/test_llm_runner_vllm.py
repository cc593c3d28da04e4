"""The LLM sweep through the one runner every sweep kind shares, on Triton's REAL vLLM backend:
an interrupted LLM sweep resumes through the same code as a tensor one (one row per point, the
measured points kept), and `workbench report` writes one LLM run and two LLM runs compared.
Shares conftest's ``tiny_llm_server``; skips, saying what is missing, without the vLLM environment."""

from __future__ import annotations

import threading

import pytest

from workbench.cli import main
from workbench.measure.engine.measure_settings import MeasureSettings
from workbench.measure.engine.streaming import Slo
from workbench.measure.llm import LlmPlan, run_llm_sweep
from workbench.measure.store.results import list_runs, load_saved
from workbench.measure.store.run_record import RECORD_VERSION

pytestmark = [pytest.mark.server, pytest.mark.slow, pytest.mark.timeout(1500)]

SETTINGS = MeasureSettings(window_s=1.0, stable_windows=2, max_windows=3, time_limit_s=4.0, min_latencies=0)
PLAN = LlmPlan(max_num_seqs=(4,), tensor_parallel=(1,), concurrency=(1, 2), input_tokens=16, output_tokens=8,
               slo=Slo(ttft_ms=5000.0, itl_ms=1000.0), prompts=4)


@pytest.fixture(scope="module")
def two_runs(tiny_llm_server, tmp_path_factory):
    """Run A: cancelled after its first point, then resumed; run B: the same plan measured whole."""
    server, model_dir = tiny_llm_server
    root = tmp_path_factory.mktemp("llm_runner")
    cancel = threading.Event()

    def cancel_after_first(done, total, message):
        if done >= 1:
            cancel.set()

    cancelled = run_llm_sweep(PLAN, server, model_dir, out_dir=root / "a", settings=SETTINGS, restore=False,
                              progress=cancel_after_first, cancel=cancel)
    resumed = run_llm_sweep(PLAN, server, model_dir, out_dir=root / "a", settings=SETTINGS, restore=False,
                            resume=True)
    other = run_llm_sweep(PLAN, server, model_dir, out_dir=root / "b", settings=SETTINGS, restore=False,
                          label="again")
    return root, cancelled, resumed, other


def test_an_interrupted_llm_sweep_resumes_to_one_row_per_point(two_runs):
    root, cancelled, resumed, _ = two_runs
    assert cancelled.status == "cancelled" and len(cancelled.frame) == 1
    assert resumed.complete, resumed.record.sessions
    assert sorted(resumed.frame["concurrency"]) == [1, 2] and resumed.frame["error"].isna().all()
    first, second = resumed.record.sessions
    assert (first["status"], first["measured"], first["reused"]) == ("cancelled", 1, 0)
    assert (second["status"], second["measured"], second["reused"]) == ("complete", 1, 1)
    # the run record: typed and versioned, read back by kind through the store
    saved = load_saved(root / "a")
    assert saved.record.kind == "llm" and saved.record.version == RECORD_VERSION and saved.record.input_tokens["mean"] == 16
    assert type(saved).__name__ == "LlmSweepResult" and len(saved.frame) == 2
    listed = list_runs(root).set_index("label")
    assert listed.loc["a", "status"] == "complete" and listed.loc["a", "points"] == 2


def test_workbench_report_writes_one_llm_run(two_runs):
    root, _, resumed, _ = two_runs
    assert main(["report", str(root / "a")]) == 0
    html = (root / "a" / "report.html").read_text(encoding="utf-8")
    assert "an LLM sweep measured in tokens" in html and "seqs4-tp1-x1" in html
    assert html.count("<svg") >= 2  # the Pareto front and latency against load
    assert "Pareto front" in html and "Best (highest output tokens/s" in html
    assert "run_llm_sweep(plan, server" in html and "TTFT p99 &lt;= 5000 ms" in html
    for column in ("output (tok/s)", "per user (tok/s)", "TTFT p99 (ms)", "ITL p99 (ms)", "tokens (server)"):
        assert f">{column}</th>" in html, column


def test_workbench_report_compares_two_llm_runs(two_runs):
    root, _, _, _ = two_runs
    assert main(["report", str(root / "a"), str(root / "b")]) == 0
    html = (root / "b" / "report-vs-a.html").read_text(encoding="utf-8")
    assert "Comparison: again against a" in html
    assert "2 common point(s)" in html and "output tokens/s x" in html
    assert html.count("<svg") >= 4  # each run's two figures


def test_a_tensor_run_and_an_llm_run_are_not_compared(two_runs, tmp_path, capsys):
    root, _, _, _ = two_runs
    tensor = tmp_path / "tensor"
    tensor.mkdir()
    (tensor / "run.json").write_text('{"label": "t", "status": "complete"}\n')
    assert main(["report", str(root / "a"), str(tensor)]) == 2
    err = capsys.readouterr().err
    assert "one is an LLM sweep measured in tokens, the other a tensor sweep measured in inferences" in err
