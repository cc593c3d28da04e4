"""TensorFlow SavedModels: the spec comes from signature KEYS with the batch dim dropped; a real
SavedModel is written by the test. tensorflow-neuron(x) cannot be installed here, so the compile
tests import the FAKE ``tensorflow_neuronx`` / ``tensorflow_neuron`` of tests/fake_neuron (their
trace follows the SDK's _trace.py) and assert the calls the workbench makes and the SavedModel that
comes out. Skipped where TensorFlow is not installed."""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import sys

import numpy as np
import pytest

if importlib.util.find_spec("tensorflow") is None:
    pytest.skip("TensorFlow is an optional extra: pip install '.[tensorflow]'", allow_module_level=True)

from workbench.compiler import ArtifactError, MissingSDKError  # noqa: E402
from workbench.compiler.tensorflow import compile_saved_model, spec_from_saved_model  # noqa: E402
from workbench.spec import ModelSpec, SpecError  # noqa: E402


class _TensorFlow:
    """``tensorflow``, imported when a test first uses it: at collection it cost each pytest
    process (each xdist worker, the alone pass) 2.5 s of CPU."""

    def __getattr__(self, name):
        if name.startswith("_"):  # what pytest's collection looks for on every module global
            raise AttributeError(name)
        return getattr(importlib.import_module("tensorflow"), name)


tf = _TensorFlow()


def _scorer():
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

    return Scorer()


@pytest.fixture(scope="module")
def saved_model(tmp_path_factory):
    path = tmp_path_factory.mktemp("tf") / "scorer"
    module = _scorer()
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
def tf_fakes(neuron_fakes, monkeypatch):
    """The FAKE tensorflow_neuronx and tensorflow.neuron of tests/fake_neuron (their trace follows
    aws-neuron-tensorflow's _trace.py), importable here and in the compile child."""
    monkeypatch.delenv("NEURON_CC_FLAGS", raising=False)
    import tensorflow_neuron

    monkeypatch.setitem(sys.modules, "tensorflow.neuron", tensorflow_neuron)  # what tensorflow/neuron forwards to
    return neuron_fakes


def _traces(record):
    return [(args, kwargs) for name, args, kwargs in record.CALLS if name.endswith(".trace")]


def test_inf2_traces_the_signature_with_a_dict_of_its_keys(saved_model, tmp_path, tf_fakes):
    """The signature ConcreteFunction itself and a dict keyed by its input names: a list would reach it
    as ONE argument (SDK tracing API, "Arguments")."""
    artifact = compile_saved_model(saved_model, "inf2", out_dir=tmp_path, name="scorer", batch_size=3,
                                   compiler_args="--auto-cast matmult", isolate=False, batch_dim=False)
    (args, kwargs), = _traces(tf_fakes)
    func, example = args
    assert isinstance(func, tf.types.experimental.ConcreteFunction)
    assert isinstance(example, dict) and sorted(example) == ["features", "ids", "scale"]
    shapes = [example[k].shape.as_list() for k in sorted(example)]
    assert [s[1:] for s in shapes] == [[4], [3], []] and len({s[0] for s in shapes}) == 1
    assert kwargs["NEURON_CC_FLAGS"] == "--auto-cast matmult"  # no batch dim: no --dynamic-batch-size
    assert "NEURON_CC_FLAGS" not in os.environ  # restored
    dest = tmp_path / "scorer.inf2.savedmodel"
    assert artifact.path == str(dest) and (dest / "saved_model.pb").is_file()
    # the compiled SavedModel's own keys, read back (the SDK derives them from the example inputs)
    assert artifact.spec == spec_from_saved_model(dest, drop_batch_dim=False)
    assert [t.name for t in artifact.spec.inputs] == ["features", "ids", "scale"]
    assert [t.name for t in artifact.spec.outputs] == ["ids_out", "scores"]
    assert artifact.dynamic_batch is None and artifact.extra["signature_def_key"] == "serving_default"
    assert artifact.cpu_artifact.extra["signature_def_key"] == "serving_default"
    assert artifact.cpu_artifact.path == str(saved_model.resolve())
    rows = shapes[0][0]
    served = tf.saved_model.load(str(dest)).signatures["serving_default"]
    result = served(features=tf.ones([rows, 4]), ids=tf.ones([rows, 3], tf.int64), scale=tf.ones([rows]))
    np.testing.assert_allclose(result["scores"].numpy(), np.full((rows, 2), 4.0))


def test_a_batch_dim_asks_for_dynamic_batch_size(saved_model, tmp_path, tf_fakes):
    """tensorflow-neuron(x) keep the traced batch size unless NEURON_CC_FLAGS has --dynamic-batch-size."""
    artifact = compile_saved_model(saved_model, "inf2", out_dir=tmp_path, name="scorer", signature_def_key="plain",
                                   batch_size=3, compiler_args="--auto-cast matmult", isolate=False)
    (_, kwargs), = _traces(tf_fakes)
    assert kwargs["NEURON_CC_FLAGS"] == "--auto-cast matmult --dynamic-batch-size"
    assert artifact.compiler_args == ["--auto-cast", "matmult", "--dynamic-batch-size"] and artifact.dynamic_batch
    assert artifact.target == "inf2" and not artifact.runs_on_cpu
    assert artifact.spec == spec_from_saved_model(saved_model, signature_def_key="plain")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scorer.inf2.savedmodel", "scorer.inf2.savedmodel.workbench.json"]
    served = tf.saved_model.load(str(tmp_path / "scorer.inf2.savedmodel")).signatures["serving_default"]
    assert served(features=tf.ones([5, 4]))["doubled"].shape == [5, 4]  # another batch size serves


def test_without_the_flag_other_batch_sizes_fail_as_on_neuron(saved_model, tmp_path, tf_fakes):
    import tensorflow_neuronx

    loaded = tf.saved_model.load(str(saved_model))
    compiled = tensorflow_neuronx.trace(loaded.signatures["plain"], {"features": tf.ones([3, 4])})
    assert compiled.on_neuron_ratio == 0.0  # the SDK's formula on a graph without NeuronOp
    compiled.save(str(tmp_path / "fixed"))
    served = tf.saved_model.load(str(tmp_path / "fixed")).signatures["serving_default"]
    assert served(features=tf.ones([3, 4]))["doubled"].shape == [3, 4]
    with pytest.raises(tf.errors.InvalidArgumentError, match="compiled for batch 3"):
        served(features=tf.ones([5, 4]))


def test_extract_weights_is_not_combined_with_dynamic_batch_size(saved_model, tmp_path, tf_fakes):
    artifact = compile_saved_model(saved_model, "inf2", out_dir=tmp_path, signature_def_key="plain",
                                   compiler_args=["--extract-weights", "inf2.xlarge"], isolate=False)
    assert artifact.compiler_args == ["--extract-weights", "inf2.xlarge"] and artifact.dynamic_batch is False
    from workbench.compiler import CompileError

    with pytest.raises(CompileError, match="--dynamic-batch-size and --extract-weights do not work together"):
        compile_saved_model(saved_model, "inf2", out_dir=tmp_path / "b", signature_def_key="plain",
                            compiler_args="--extract-weights inf2.xlarge --dynamic-batch-size", isolate=False)
    assert not (tmp_path / "b").exists()


def test_the_fake_follows_the_sdk_argument_rules(tf_fakes):
    """A list is ONE argument and a tuple positional for a Python function (_func_to_concrete_func):
    the mistake the old call made."""
    import tensorflow_neuronx

    def two(a, b):
        return {"sum": a + b}

    x, y = tf.ones([2, 4]), tf.ones([2, 4])
    assert tensorflow_neuronx.trace(two, (x, y)).on_neuron_ratio == 0.0
    with pytest.raises(TypeError):
        tensorflow_neuronx.trace(two, [x, y])  # two(x_and_y_list): b missing
    constant = tf.function(lambda: {"c": tf.ones([2])}).get_concrete_function()
    assert tensorflow_neuronx.trace(constant, ()) is constant  # no input placeholder: returned uncompiled


def test_inf1_uses_tensorflow_neuron(saved_model, tmp_path, tf_fakes):
    artifact = compile_saved_model(saved_model, "inf1", out_dir=tmp_path, signature_def_key="plain", isolate=False)
    assert [name for name, _, _ in tf_fakes.CALLS] == ["tensorflow.neuron.trace"]
    assert (tmp_path / "scorer.inf1.savedmodel" / "saved_model.pb").is_file() and artifact.target == "inf1"


def test_trn2_is_not_a_tensorflow_target(saved_model, tmp_path):
    with pytest.raises(ValueError, match="unknown target 'trn2'; use one of cpu, inf1, inf2, trn1"):
        compile_saved_model(saved_model, "trn2", out_dir=tmp_path)


def test_missing_tensorflow_neuronx_says_what_to_install(saved_model, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorflow_neuronx", None)
    with pytest.raises(MissingSDKError, match="compiling for tensorflow-inf2: missing tensorflow-neuronx; "
                                              "pip install tensorflow-neuronx==2.10.1.2.1.0 .* from the AWS Neuron "
                                              "pip repository.*TensorFlow on Neuron is out of support"):
        compile_saved_model(saved_model, "inf2", out_dir=tmp_path / "out", signature_def_key="plain")
    assert not (tmp_path / "out").exists()


@pytest.fixture
def fake_tfnx_on_path(tf_fakes, tmp_path, monkeypatch):
    """The FAKE tensorflow_neuronx, also importable by the compile child (PYTHONPATH), with a hook
    that can make its trace hang so cancel can be tested."""
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(
        "import os, time\n"
        "if os.environ.get('FAKE_TFNX_HANG'):\n"
        "    import tensorflow_neuronx\n"
        "    _trace = tensorflow_neuronx.trace\n"
        "    def trace(func, example_inputs, subgraph_builder_function=None):\n"
        "        open(os.environ['FAKE_TFNX_HANG'], 'w').write(str(os.getpid()))\n"
        "        time.sleep(300)\n"
        "    tensorflow_neuronx.trace = trace\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(hook), os.environ["PYTHONPATH"]]))
    return tf_fakes


def test_isolated_tf_compile_runs_in_a_fresh_interpreter(saved_model, tmp_path, fake_tfnx_on_path):
    logged: list[str] = []
    artifact = compile_saved_model(saved_model, "inf2", out_dir=tmp_path / "out", signature_def_key="plain",
                                   compiler_args=["--auto-cast", "none"], log=logged.append)
    assert "inf2: 0.0% of the operators run on Neuron (on_neuron_ratio)" in logged  # printed by the child
    assert artifact.compiler_args == ["--auto-cast", "none", "--dynamic-batch-size"]
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
