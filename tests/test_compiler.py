"""CPU tracing: every zoo model traced for real, artifacts and sidecars on disk, bad input refused
before anything is written, cancel and background tasks, operator counts."""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest
import torch
from torch import nn

from workbench import zoo
from workbench.compiler import (
    Artifact,
    ArtifactError,
    CompileError,
    analyze,
    compile_model,
    load_artifact,
    read_artifact,
)
from workbench.spec import ModelSpec, SpecError
from workbench.tasks import Cancelled, Task


@pytest.mark.parametrize("name", zoo.names())
def test_every_zoo_model_traces_and_matches_eager(tmp_path, name):
    model = zoo.get(name)
    logged: list[str] = []
    artifact = compile_model(model.module, model.example_inputs(2), out_dir=tmp_path, name=name, log=logged.append)

    assert artifact.path == str(tmp_path / f"{name}.cpu.pt")
    assert artifact.target == "cpu" and artifact.runs_on_cpu
    assert artifact.spec == model.spec
    assert artifact.max_abs_diff == 0.0
    assert artifact.dynamic_batch is True
    assert artifact.size_bytes == (tmp_path / f"{name}.cpu.pt").stat().st_size > 0
    assert artifact.sdk_versions["torch"] == torch.__version__
    assert artifact.operator_counts and all(k.startswith("aten::") for k in artifact.operator_counts)
    assert artifact.log.splitlines() == logged

    # the sidecar is what the generator reads: spec, batch_dim, target
    side = json.loads((tmp_path / f"{name}.cpu.pt.workbench.json").read_text())
    assert ModelSpec.from_dict(side["spec"]) == model.spec
    assert side["batch_dim"] is True and side["target"] == "cpu" and side["runs_on_cpu"] is True
    assert read_artifact(artifact.path) == artifact

    # the saved TorchScript gives the eager outputs at another batch size too
    loaded = load_artifact(artifact.path)
    inputs = model.example_inputs(5, seed=3)
    with torch.no_grad():
        got = loaded(*inputs)
    got = got if isinstance(got, tuple) else (got,)
    expected = model.eager([t.numpy() for t in inputs])
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g.numpy(), e, rtol=1e-5, atol=1e-5)


def test_artifact_json_round_trip_keeps_every_field(tmp_path):
    spec = ModelSpec.parse(["INPUT__0,FP32,4"], ["OUTPUT__0,FP32,2"])
    twin = Artifact(path=str(tmp_path / "m.cpu.pt"), target="cpu", spec=spec, max_abs_diff=0.0)
    neuron = Artifact(path=str(tmp_path / "m.inf2.pt"), target="inf2", spec=spec, compiler_args=["--target", "inf2"],
                      operator_counts={"aten::linear": 1}, extra={"cpu_backend": True}, cpu_artifact=twin)
    back = Artifact.from_json(neuron.to_json())
    assert back == neuron and back.cpu_artifact == twin and not back.runs_on_cpu
    with pytest.raises(ArtifactError, match="unknown keys \\['bogus'\\]"):
        Artifact.from_dict({**neuron.to_dict(), "bogus": 1})


def test_names_and_no_batch_dim(tmp_path):
    model = zoo.get("add_sub")
    artifact = compile_model(model.module, model.example_inputs(3), out_dir=tmp_path, name="named",
                             batch_dim=False, input_names=["A__0", "B__1"], output_names=["SUM__0", "DIFF__1"])
    assert artifact.spec == ModelSpec.parse(["A__0,FP32,3x4", "B__1,FP32,3x4"], ["SUM__0,FP32,3x4", "DIFF__1,FP32,3x4"])
    assert artifact.dynamic_batch is None  # no batch dim, nothing to check


class BakesBatch(nn.Module):
    """view(4, ...) freezes the batch size into the trace."""

    def forward(self, x):
        return (x * 2).view(4, -1)


def test_a_trace_that_bakes_its_batch_size_is_flagged(tmp_path):
    logged: list[str] = []
    artifact = compile_model(BakesBatch(), torch.ones(4, 3), out_dir=tmp_path, log=logged.append)
    assert artifact.dynamic_batch is False
    assert any("only works at batch 4" in line for line in logged)


def test_user_model_keeps_its_training_mode(tmp_path):
    model = zoo.get("mlp").module.train()
    compile_model(model, torch.ones(2, 16), out_dir=tmp_path)
    assert model.training


class ReturnsDict(nn.Module):
    def forward(self, x):
        return {"y": x}


class ReturnsStr(nn.Module):
    def forward(self, x):
        return "nope"


@pytest.mark.parametrize(
    "model, inputs, kwargs, error, match",
    [
        (nn.Identity(), [[1, 2]], {}, SpecError, "example input 0: expected a torch.Tensor"),
        (nn.Identity(), [], {}, SpecError, "example_inputs is empty"),
        (ReturnsDict(), torch.ones(2, 3), {}, SpecError, "returns a dict \\(keys \\['y'\\]\\)"),
        (ReturnsStr(), torch.ones(2, 3), {}, SpecError, "returns str"),
        (zoo.get("add_sub").module, (torch.ones(2, 4), torch.ones(3, 4)), {}, SpecError,
         "input INPUT__1 has batch dim 3 but the first input has 2"),
        (nn.Identity(), torch.ones(5), {}, SpecError, "input INPUT__0 has shape \\[5\\]: with batch_dim=True"),
        (nn.Identity(), torch.ones(2, 3), {"input_names": ["A", "B"]}, SpecError, "2 input name\\(s\\)"),
        (nn.Linear(3, 2), torch.ones(2, 4), {}, CompileError, "fails on its example inputs"),
        (nn.Identity(), torch.ones(2, 3), {"target": "gpu"}, ValueError, "unknown target 'gpu'"),
        (nn.Identity(), torch.ones(2, 3), {"name": "../escape"}, ArtifactError, "artifact name '../escape'"),
        (nn.Identity(), torch.ones(2, 3), {"compiler_args": ["-O2"]}, CompileError, "the cpu target takes none"),
    ],
)
def test_bad_input_is_named_and_nothing_is_written(tmp_path, model, inputs, kwargs, error, match):
    out = tmp_path / "out"
    with pytest.raises(error, match=match):
        compile_model(model, inputs, out_dir=out, **kwargs)
    assert not out.exists() or list(out.iterdir()) == []


def test_existing_files_are_never_overwritten(tmp_path):
    mine = tmp_path / "mlp.cpu.pt"
    mine.write_bytes(b"the user's own file")
    model = zoo.get("mlp")
    with pytest.raises(ArtifactError, match="mlp.cpu.pt already exist"):
        compile_model(model.module, model.example_inputs(2), out_dir=tmp_path, name="mlp")
    assert mine.read_bytes() == b"the user's own file"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mlp.cpu.pt"]
    artifact = compile_model(model.module, model.example_inputs(2), out_dir=tmp_path, name="mlp", overwrite=True)
    assert load_artifact(artifact)  # really replaced by TorchScript
    with pytest.raises(ArtifactError, match="is a file, not a folder"):
        compile_model(model.module, model.example_inputs(2), out_dir=mine, name="x")


def test_cancelled_compile_leaves_nothing(tmp_path):
    cancel = threading.Event()
    seen: list[tuple] = []

    def progress(done, total, message):
        seen.append((done, total, message))
        if done == 2:  # after the trace, before saving
            cancel.set()

    model = zoo.get("mlp")
    with pytest.raises(Cancelled):
        compile_model(model.module, model.example_inputs(2), out_dir=tmp_path, name="m", progress=progress,
                      cancel=cancel)
    assert [s[0] for s in seen] == [0, 1, 2]
    assert list(tmp_path.iterdir()) == []


def test_compile_runs_as_a_background_task(tmp_path):
    model = zoo.get("cnn")
    progress: list[tuple] = []
    task = Task(compile_model, model.module, model.example_inputs(2), "cpu", out_dir=tmp_path, name="cnn",
                on_progress=lambda *p: progress.append(p)).start()
    assert task.join(timeout=120)
    assert task.state == "done", task.error_text
    assert isinstance(task.result, Artifact) and (tmp_path / "cnn.cpu.pt").is_file()
    assert progress[-1] == (1, 1, f"done: {tmp_path / 'cnn.cpu.pt'}")
    assert [p[0] for p in progress[:4]] == [0, 1, 2, 3]


def test_cpu_operator_report_counts_aten_kinds():
    model = zoo.get("mlp")
    report = analyze(model.module, model.example_inputs(2))
    assert report.target == "cpu" and report.support_percentage is None
    assert report.operator_counts == {"aten::linear": 2, "aten::relu": 1}
    frame = report.to_frame()
    assert list(frame["operator"]) == ["aten::linear", "aten::relu"] and list(frame["count"]) == [2, 1]


# ---- compile -> generate -> serve on a real tritonserver -> compare with eager ----------------


@pytest.fixture(scope="module")
def served_zoo(tmp_path_factory):
    """Every zoo model traced for the CPU, generated from its sidecar (max_batch_size 8, dynamic
    batching) and loaded on one real tritonserver."""
    from workbench import generate
    from workbench.server import TritonServer

    root = tmp_path_factory.mktemp("served_zoo")
    models = {name: zoo.get(name, **({"seq_len": 128} if name == "bert" else {})) for name in zoo.names()}
    for name, model in models.items():
        artifact = compile_model(model.module, model.example_inputs(2), out_dir=root / "compiled", name=name)
        settings = generate.GenerateSettings(
            triton_model_dir=str(root / "repo" / name), compiled_model=artifact.path, copy_compiled_model=True,
            target="cpu", max_batch_size=8, enable_dynamic_batching=True)
        generate.write(generate.render(settings))
    names = list(models)
    if "causal_lm" in models:  # the same LM packaged for the sampling model.py
        from workbench.compiler.tnx import package_causal_lm

        lm = package_causal_lm(models["causal_lm"].hf_model, out_dir=root / "compiled", name="lm")
        settings = generate.GenerateSettings(
            triton_model_dir=str(root / "repo" / "lm_sampling"), compiled_model=lm.path, copy_compiled_model=True,
            framework="transformers_neuronx", target="cpu", max_batch_size=4, enable_dynamic_batching=True,
            tnx_sequence_length=12)
        generate.write(generate.render(settings))
        names.append("lm_sampling")
    with TritonServer(root / "repo") as server:
        for name in names:
            server.load(name)
        yield server, models


@pytest.mark.server
@pytest.mark.parametrize("name", zoo.names())
def test_served_zoo_model_matches_eager(served_zoo, name):
    from concurrent.futures import ThreadPoolExecutor

    from workbench.served_outputs import connect, infer
    from workbench.generate.config import read_config, spec_from_config

    server, models = served_zoo
    model = models[name]
    config = read_config(server.model_repository / name)
    assert config.max_batch_size == 8 and spec_from_config(config) == model.spec  # dims came from the sidecar

    requests = [[t.numpy() for t in model.example_inputs(size, seed=size)] for size in (1, 2, 3, 5)]

    def send(arrays):
        connection = connect(server.grpc_url)
        try:
            return infer(connection, name, model.spec, arrays)
        finally:
            connection[1].close()

    with ThreadPoolExecutor(max_workers=len(requests)) as pool:  # concurrent, so requests get batched together
        served = list(pool.map(send, requests))
    for arrays, outputs in zip(requests, served):
        expected = model.eager(arrays)
        assert len(outputs) == len(expected)
        for got, want in zip(outputs, expected):
            assert got.shape == want.shape and got.dtype == want.dtype
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.server
def test_packaged_causal_lm_is_served_by_the_sampling_model(served_zoo):
    pytest.importorskip("transformers")
    from workbench.served_outputs import connect, infer
    from workbench.compiler.tnx import LM_SPEC

    server, models = served_zoo
    hf_model = models["causal_lm"].hf_model
    ids = models["causal_lm"].example_inputs(2, seed=7)[0][:, :5]
    connection = connect(server.grpc_url)
    try:
        (served,) = infer(connection, "lm_sampling", LM_SPEC, [ids.numpy()])
    finally:
        connection[1].close()
    with torch.no_grad():
        expected = hf_model.generate(ids, attention_mask=torch.ones_like(ids), max_length=12, min_length=12,
                                     do_sample=False, pad_token_id=1)
    assert served.shape == (2, 12)
    np.testing.assert_array_equal(served, expected.numpy())
