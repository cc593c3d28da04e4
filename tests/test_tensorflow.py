"""TensorFlow SavedModels: the spec comes from signature KEYS with the batch dim dropped; a real
SavedModel is written by the test. tensorflow-neuron(x) cannot be installed here, so the compile
tests inject FAKE ``tensorflow_neuronx`` / ``tensorflow.neuron`` modules (declared below) and
assert the calls the workbench makes. Skipped where TensorFlow is not installed."""

from __future__ import annotations

import json
import os
import sys
import types

import pytest

tf = pytest.importorskip("tensorflow", reason="TensorFlow is an optional extra: pip install '.[tensorflow]'")

from workbench.compiler import ArtifactError, MissingSDKError  # noqa: E402
from workbench.compiler.tensorflow import compile_saved_model, spec_from_saved_model  # noqa: E402
from workbench.spec import ModelSpec, SpecError  # noqa: E402


class Scorer(tf.Module):
    def __init__(self):
        super().__init__()
        self.weights = tf.Variable(tf.ones([4, 2]))

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="features"),
                                  tf.TensorSpec([None, 3], tf.int64, name="ids"),
                                  tf.TensorSpec([None], tf.float32, name="scale")])
    def serve(self, features, ids, scale):
        return {"scores": features @ self.weights * scale[:, None], "ids_out": ids * 2}

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="features")])
    def plain(self, features):
        return {"doubled": features * 2}


@pytest.fixture(scope="module")
def saved_model(tmp_path_factory):
    path = tmp_path_factory.mktemp("tf") / "scorer"
    module = Scorer()
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.serve, "plain": module.plain})
    return path


def test_spec_uses_signature_keys_and_drops_the_batch_dim(saved_model):
    spec = spec_from_saved_model(saved_model, signature_def_key="plain")
    assert spec == ModelSpec.parse(["features,FP32,4"], ["doubled,FP32,4"])
    full = spec_from_saved_model(saved_model, signature_def_key="plain", drop_batch_dim=False)
    assert full == ModelSpec.parse(["features,FP32,-1x4"], ["doubled,FP32,-1x4"])
    assert not any(":" in t.name for t in full.inputs + full.outputs)  # not graph names like features:0


def test_a_rank_one_input_cannot_lose_its_batch_dim(saved_model):
    with pytest.raises(SpecError, match="input 'scale' of signature 'serving_default' has dims \\[-1\\]"):
        spec_from_saved_model(saved_model)
    spec = spec_from_saved_model(saved_model, drop_batch_dim=False)
    assert [t.upstream() for t in spec.inputs] == ["features,FP32,-1x4", "ids,INT64,-1x3", "scale,FP32,-1"]
    assert [t.upstream() for t in spec.outputs] == ["ids_out,INT64,-1x3", "scores,FP32,-1x2"]


def test_unknown_signature_tag_or_folder_is_named(saved_model, tmp_path):
    with pytest.raises(SpecError, match="no signature 'predict' \\(has \\['plain', 'serving_default'\\]\\)"):
        spec_from_saved_model(saved_model, signature_def_key="predict")
    with pytest.raises(SpecError, match="no MetaGraph with tags 'serve,gpu' \\(has \\['serve'\\]\\)"):
        spec_from_saved_model(saved_model, tag_set="serve,gpu")
    with pytest.raises(ArtifactError, match="not a SavedModel folder"):
        spec_from_saved_model(tmp_path)


def test_cpu_uses_the_saved_model_as_is(saved_model):
    artifact = compile_saved_model(saved_model, signature_def_key="plain")
    assert artifact.path == str(saved_model.resolve()) and artifact.runs_on_cpu
    assert artifact.framework == "tensorflow" and artifact.extra["signature_def_key"] == "plain"
    sidecar = json.loads(artifact.sidecar.read_text())
    assert sidecar["spec"] == artifact.spec.to_dict() and sidecar["batch_dim"] is True
    with pytest.raises(ArtifactError, match="already exists"):
        compile_saved_model(saved_model, signature_def_key="plain")
    artifact.sidecar.unlink()


@pytest.fixture
def fake_tf_neuronx(monkeypatch):
    """FAKE tensorflow_neuronx: trace runs the function once on the example inputs and returns an
    object whose save() writes a real (CPU) SavedModel."""
    calls = []

    def trace(func, example_inputs):
        result = func(*example_inputs)
        calls.append({"flags": os.environ.get("NEURON_CC_FLAGS"), "inputs": [t.shape.as_list() for t in example_inputs],
                      "outputs": sorted(result)})
        module = tf.Module()
        module.func = tf.function(lambda features: {"doubled": features * 2},
                                  input_signature=[tf.TensorSpec([None, 4], tf.float32)])
        return types.SimpleNamespace(save=lambda path: tf.saved_model.save(module, path))

    fake = types.ModuleType("tensorflow_neuronx")
    fake.trace = trace
    monkeypatch.setitem(sys.modules, "tensorflow_neuronx", fake)
    monkeypatch.delenv("NEURON_CC_FLAGS", raising=False)
    return calls


def test_inf2_compiles_through_tensorflow_neuronx(saved_model, tmp_path, fake_tf_neuronx):
    artifact = compile_saved_model(saved_model, "inf2", out_dir=tmp_path, name="scorer", signature_def_key="plain",
                                   batch_size=3, compiler_args="--auto-cast matmult", isolate=False)
    call, = fake_tf_neuronx
    assert call == {"flags": "--auto-cast matmult", "inputs": [[3, 4]], "outputs": ["doubled"]}
    assert "NEURON_CC_FLAGS" not in os.environ  # restored
    dest = tmp_path / "scorer.inf2.savedmodel"
    assert artifact.path == str(dest) and (dest / "saved_model.pb").is_file()
    assert artifact.target == "inf2" and not artifact.runs_on_cpu and artifact.compiler_args == ["--auto-cast",
                                                                                                 "matmult"]
    assert artifact.cpu_artifact.path == str(saved_model.resolve())
    assert artifact.spec == spec_from_saved_model(saved_model, signature_def_key="plain")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scorer.inf2.savedmodel", "scorer.inf2.savedmodel.workbench.json"]


def test_inf1_uses_tensorflow_neuron(saved_model, tmp_path, monkeypatch):
    calls = []
    fake = types.ModuleType("tensorflow.neuron")  # FAKE tensorflow-neuron (Inf1)
    fake.trace = lambda func, inputs: calls.append(len(inputs)) or types.SimpleNamespace(
        save=lambda path: os.makedirs(path))
    monkeypatch.setitem(sys.modules, "tensorflow.neuron", fake)
    compile_saved_model(saved_model, "inf1", out_dir=tmp_path, signature_def_key="plain", isolate=False)
    assert calls == [1] and (tmp_path / "scorer.inf1.savedmodel").is_dir()


def test_missing_tensorflow_neuronx_says_what_to_install(saved_model, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorflow_neuronx", None)
    with pytest.raises(MissingSDKError, match="compiling for tensorflow-inf2: missing tensorflow-neuronx; "
                                              "pip install tensorflow-neuronx from the AWS Neuron pip repository"):
        compile_saved_model(saved_model, "inf2", out_dir=tmp_path / "out", signature_def_key="plain")
    assert not (tmp_path / "out").exists()


FAKE_TF_NEURONX = '''
"""FAKE tensorflow_neuronx for workbench tests: importable by the compile child from PYTHONPATH."""
import os
import sys
import time

import tensorflow as tf


def trace(func, example_inputs):
    print(f"fake tensorflow_neuronx: {len(example_inputs)} input(s), flags={os.environ.get('NEURON_CC_FLAGS')}",
          flush=True)
    if os.environ.get("FAKE_TFNX_HANG"):
        with open(os.environ["FAKE_TFNX_HANG"], "w") as handle:
            handle.write(str(os.getpid()))
        time.sleep(300)
    func(*example_inputs)
    module = tf.Module()
    module.f = tf.function(lambda x: {"doubled": x * 2}, input_signature=[tf.TensorSpec([None, 4], tf.float32)])

    class Traced:
        def save(self, path):
            tf.saved_model.save(module, path)

    return Traced()
'''


@pytest.fixture
def fake_tfnx_on_path(tmp_path, monkeypatch):
    """Put the FAKE tensorflow_neuronx module where both this process and the compile child import it."""
    fakes = tmp_path / "fakes"
    fakes.mkdir()
    (fakes / "tensorflow_neuronx.py").write_text(FAKE_TF_NEURONX)
    monkeypatch.syspath_prepend(str(fakes))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(fakes), os.environ.get("PYTHONPATH")])))
    monkeypatch.delitem(sys.modules, "tensorflow_neuronx", raising=False)
    yield
    sys.modules.pop("tensorflow_neuronx", None)


def test_isolated_tf_compile_runs_in_a_fresh_interpreter(saved_model, tmp_path, fake_tfnx_on_path):
    logged: list[str] = []
    artifact = compile_saved_model(saved_model, "inf2", out_dir=tmp_path / "out", signature_def_key="plain",
                                   compiler_args=["--auto-cast", "none"], log=logged.append)
    assert "fake tensorflow_neuronx: 1 input(s), flags=--auto-cast none" in logged
    assert (tmp_path / "out" / "scorer.inf2.savedmodel" / "saved_model.pb").is_file()
    assert artifact.log.splitlines()[-1].startswith("inf2: saved ")


def test_cancelled_tf_compile_kills_the_child_and_leaves_nothing(saved_model, tmp_path, fake_tfnx_on_path,
                                                               monkeypatch):
    import threading
    import time

    pid_file = tmp_path / "child.pid"
    monkeypatch.setenv("FAKE_TFNX_HANG", str(pid_file))
    cancel = threading.Event()
    errors: list[BaseException] = []

    def run():
        try:
            compile_saved_model(saved_model, "inf2", out_dir=tmp_path / "out", signature_def_key="plain",
                                cancel=cancel)
        except BaseException as err:  # noqa: BLE001 - the test inspects it
            errors.append(err)

    worker = threading.Thread(target=run)
    worker.start()
    deadline = time.monotonic() + 120
    while not pid_file.exists() and worker.is_alive() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert pid_file.exists(), errors
    cancel.set()
    worker.join(60)
    assert not worker.is_alive()
    assert type(errors[0]).__name__ == "Cancelled"
    assert not os.path.exists(f"/proc/{int(pid_file.read_text())}")
    assert not (tmp_path / "out").exists()  # made by the compile, removed with its staging folder
