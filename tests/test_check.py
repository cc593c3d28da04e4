"""check_served and run_sweep with model-specific inputs: the BERT-style zoo model takes token-type
ids that must be 0 or 1, so the spec's random INT64 inputs cannot exercise it; `inputs=` can."""

import numpy as np
import pytest

from workbench import zoo
from workbench.served_outputs import check_served, connect, infer
from workbench.compiler import compile_model
from workbench.generate import GenerateSettings, render, write
from workbench.measure.engine.measure_settings import MeasureSettings
from workbench.measure.sweep import SweepPlan, run_sweep
from workbench.server import TritonServer

pytestmark = pytest.mark.server


@pytest.fixture(scope="module")
def bert_served(tmp_path_factory):
    work = tmp_path_factory.mktemp("check")
    model = zoo.get("bert", seq_len=16)
    artifact = compile_model(model.module, model.example_inputs(2), "cpu", out_dir=work / "artifacts", name="bert")
    generated = render(GenerateSettings(triton_model_dir=str(work / "repo" / "bert"), compiled_model=str(artifact.path),
                                        copy_compiled_model=True, target="cpu", max_batch_size=4,
                                        enable_dynamic_batching=True, max_queue_delay_microseconds=2000))
    write(generated)
    with TritonServer(work / "repo") as server:
        server.load("bert")
        yield server, model, generated, work


def test_model_inputs_make_the_check_meaningful(bert_served):
    server, model, generated, _ = bert_served
    result = check_served(server.grpc_url, "bert", generated.spec, model.eager, batch_sizes=(1, 2, 3, 4),
                          inputs=model.example_inputs)
    assert result.ok, result.summary()
    assert sorted({r.batch_size for r in result.rows}) == [1, 2, 3, 4] and len(result.rows) == 8

    # the spec's random ids include token types > 1: the served model rejects them, and the
    # check reports which request failed instead of raising
    blind = check_served(server.grpc_url, "bert", generated.spec, model.eager, batch_sizes=(1,))
    assert not blind.ok and "MISMATCH" in blind.summary() and "request 0" in blind.summary()


def test_single_infer_matches_eager(bert_served):
    server, model, generated, _ = bert_served
    arrays = [np.asarray(a) for a in model.example_inputs(3, seed=7)]
    connection = connect(server.http_url, "http")
    try:
        served = infer(connection, "bert", generated.spec, arrays)
    finally:
        connection[1].close()
    for got, want in zip(served, model.eager(arrays)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_sweep_uses_the_model_inputs(bert_served):
    server, model, generated, work = bert_served
    plan = SweepPlan(batch_sizes=(2,), allocations="1x1", concurrency=(1,), core_range="0:0")
    result = run_sweep(plan, server, generated.dest, out_dir=work / "sweep", inputs=model.example_inputs,
                       reference=model.eager,
                       settings=MeasureSettings(engine="workbench", window_s=0.2, stable_windows=2, max_windows=2,
                                               time_limit_s=None))
    row = result.frame.iloc[0]
    assert bool(row["outputs_ok"]) and int(row["failures"]) == 0, row.to_dict()
