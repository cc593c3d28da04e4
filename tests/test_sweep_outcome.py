"""A sweep that measured nothing usable is a failed run (issue 47, item 6), whatever its kind: its
server died, every point failed, or no point was measured. The run record says "failed" and why,
`workbench sweep` exits non-zero, and `--resume` measures what is missing. Real tritonservers, a
real vLLM backend for the LLM kind."""

from __future__ import annotations

import os
import signal
import time

import pytest
from test_resume import kill_server_under_cli

from workbench.measure.engine.measure_settings import MeasureSettings
from workbench.measure.engine.streaming import Slo
from workbench.cli.llm_sweep import sweep_exit
from workbench.measure.store.results import load_run, load_saved
from workbench.measure.sweep import SweepPlan, run_sweep
from workbench.server import ServerError, TritonServer

# one short window a point: these tests assert a run's status and rows, not figures
# one short window a point, unless nothing completed in it (a starved machine): then up to two more
FAST = MeasureSettings(engine="workbench", window_s=0.1, stable_windows=1, max_windows=3, min_latencies=5,
                       warmup_requests=3, time_limit_s=None)
ONE_VARIANT = SweepPlan(batch_sizes=[1, 2], allocations="1x1", concurrency=[1, 2], core_range="0:1")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, generate_cpu_model):
    return generate_cpu_model(tmp_path_factory.mktemp("outcome"))


def _failure(run) -> str:
    return run.record.sessions[-1].get("failure") or ""


@pytest.mark.server
def test_a_one_variant_sweep_whose_server_dies_fails_and_the_resume_measures_the_rest(model_dir, tmp_path):
    """One variant: no reload notices the dead server, so every later point fails on its own; the
    run is failed (not complete), and a resume on a new server measures only what is missing."""
    out = tmp_path / "run"

    with TritonServer(model_dir.parent) as server:
        def kill_after_first(done, total, message):
            if done >= 1 and server.running:
                os.killpg(server.pid, signal.SIGKILL)
                deadline = time.monotonic() + 10
                while server.running and time.monotonic() < deadline:
                    time.sleep(0.05)
        try:
            result = run_sweep(ONE_VARIANT, server, model_dir, out_dir=out, settings=FAST,
                               progress=kill_after_first)
            assert sweep_exit(result) == 1
        except ServerError:
            pass  # said as an error by the caller: the record still says failed
    run = load_run(out)
    assert run.status == "failed" and _failure(run), run.record.sessions
    good_before = int(run.frame["error"].isna().sum())
    assert 1 <= good_before < ONE_VARIANT.size
    with TritonServer(model_dir.parent) as server:
        resumed = run_sweep(ONE_VARIANT, server, model_dir, out_dir=out, settings=FAST, resume=True, restore=False)
    assert resumed.complete and sweep_exit(resumed) == 0
    assert len(resumed.frame) == ONE_VARIANT.size and resumed.frame["error"].isna().all()
    session = resumed.record.sessions[-1]
    assert session["reused"] == good_before and session["measured"] == ONE_VARIANT.size - good_before


@pytest.mark.server
def test_the_cli_exits_non_zero_when_a_one_variant_sweeps_server_is_killed(model_dir, tmp_path):
    out = tmp_path / "cli"
    args = ["sweep", str(model_dir), "--batch-sizes", "1,2", "--allocations", "1x1", "--core-range", "0:1",
            "--concurrency", "1,2", "--window-ms", "200", "--max-windows", "3", "--warmup", "3", "--no-plots",
            "--engine", "workbench", "--time-limit-s", "0", "--out", str(out)]
    returncode, err = kill_server_under_cli(args, out)
    assert returncode == 1, err
    assert "Traceback" not in err and "--resume" in err
    assert load_run(out).status == "failed"


LLM_SETTINGS = MeasureSettings(window_s=1.0, stable_windows=2, max_windows=3, time_limit_s=4.0, min_latencies=0)


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_an_llm_sweep_that_measured_nothing_is_failed(tiny_llm_server, tmp_path):
    """Every variant skipped (tensor-parallel 2 on a machine whose CPU engine cannot bind it): nothing
    is loaded or measured, and the run says so instead of "complete"."""
    from workbench.measure.llm import LlmPlan, run_llm_sweep
    from workbench.measure.llm.plan import numa_nodes

    if numa_nodes() >= 2:
        pytest.skip("this machine can run tensor-parallel 2: the variant would be measured")
    server, model_dir = tiny_llm_server
    plan = LlmPlan(max_num_seqs=(1,), tensor_parallel=(2,), concurrency=(1,), input_tokens=16, output_tokens=8,
                   slo=Slo(ttft_ms=5000.0, itl_ms=1000.0), prompts=4)
    result = run_llm_sweep(plan, server, model_dir, out_dir=tmp_path / "run", settings=LLM_SETTINGS, restore=False)
    assert result.status == "failed" and _failure(result) == "no point was measured"
    assert sweep_exit(result) == 1 and load_saved(tmp_path / "run").status == "failed"


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_an_llm_sweep_whose_every_point_failed_is_failed_and_resumes_the_missing_points(
        vllm_python, vllm_backend_dir, tmp_path):
    """Every point fails (a 1 s load bound no vLLM engine meets); the run is failed, naming the
    first error, and a resume with the default bound on a new server measures them all."""
    from vllm_model_dirs import TINY_LLM, tiny_llm_repository

    from workbench.measure.llm import LlmPlan, run_llm_sweep

    repo = tiny_llm_repository(tmp_path / "repo")
    plan = LlmPlan(max_num_seqs=(1,), tensor_parallel=(1,), concurrency=(1, 2), input_tokens=16, output_tokens=8,
                   slo=Slo(ttft_ms=5000.0, itl_ms=1000.0), prompts=4)
    out = tmp_path / "run"
    for load_timeout_s in (1.0, 600.0):
        server = TritonServer(repo, vllm_backend=vllm_backend_dir, vllm_python=vllm_python, pytorch_backend=False)
        try:
            server.start(timeout=180)
            result = run_llm_sweep(plan, server, repo / TINY_LLM, out_dir=out, settings=LLM_SETTINGS,
                                   load_timeout_s=load_timeout_s, resume=out.exists(), restore=False)
        finally:
            server.stop()
        if load_timeout_s == 1.0:
            assert result.status == "failed" and sweep_exit(result) == 1
            assert _failure(result).startswith("every point failed (2 point(s)); first: load failed"), _failure(result)
            assert result.frame["error"].notna().all()
    assert result.complete and sweep_exit(result) == 0, result.record.sessions
    assert len(result.frame) == 2 and result.frame["error"].isna().all()
    assert result.record.sessions[-1]["measured"] == 2 and result.record.sessions[-1]["reused"] == 0
