"""The Neuron seam, driven by the FAKE SDK packages of tests/fake_neuron/.

torch-neuron, torch-neuronx and transformers-neuronx cannot be installed here and there is no
Neuron device, so every test in this file imports the FAKE ``torch_neuron`` / ``torch_neuronx`` /
``transformers_neuronx`` packages (``neuron_fakes`` fixture). They have the SDK's signatures and
return types (tests/test_fake_neuron_contract.py holds them to the table), record how they are
called and compute on the CPU. What is asserted is the workbench's side of the contract: the exact
trace calls and arguments per target, ``--target`` always (and ``cpu_backend=True`` without a
device), trn2's logical NeuronCore config, the analyzers' real report types, the CPU twin, the
missing-SDK messages, the isolated child's live log and that cancel kills the (fake) compiler
process. No number here says anything about Neuron performance.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from workbench import zoo
from workbench.compiler import (
    CompileError,
    MissingSDKError,
    NeuronArtifactError,
    analyze,
    compile_model,
    load_artifact,
    read_artifact,
)
from workbench.compiler import neuron as seam
from workbench.compiler.torchneuron import COMPILE_ONLY_DOC
from workbench.system import OUT_OF_SUPPORT, WrongSDKError
from workbench.compiler.tnx import SAMPLING_CLASSES, package_causal_lm, tiny_causal_lm
from workbench.tasks import Task

# the fakes stand in for Neuron modules with torch.jit.trace, which torch 2.x marks deprecated
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.fixture
def device(monkeypatch):
    """Pretend a Neuron device is present (the seam asks has_neuron_device; the fakes read
    FAKE_NEURON_DEVICE)."""
    monkeypatch.setattr(seam, "has_neuron_device", lambda: True)
    monkeypatch.setenv("FAKE_NEURON_DEVICE", "1")


@pytest.fixture
def torchneuron(neuron_fakes, monkeypatch):
    """The FAKE TorchNeuron (tests/fake_neuron/torchneuron) in place of the PyTorch/XLA fake, as on a
    Trn2/Trn3 image from Neuron 2.33 on; its accelerator stand-in is undone afterwards."""
    monkeypatch.syspath_prepend(str(Path(__file__).parent / "fake_neuron" / "torchneuron"))
    sys.modules.pop("torch_neuronx", None)
    import torch_neuronx

    assert torch_neuronx.__version__.startswith("2.14.")
    try:
        yield torch_neuronx
    finally:
        torch_neuronx.restore()
        torch._dynamo.reset()


def _mlp():
    model = zoo.get("mlp")
    return model.module, model.example_inputs(2)


def _calls(record, name):
    return [(args, kwargs) for called, args, kwargs in record.CALLS if called == name]


def test_inf2_without_device_uses_cpu_backend_and_target(tmp_path, neuron_fakes):
    module, inputs = _mlp()
    artifact = compile_model(module, inputs, "inf2", out_dir=tmp_path, name="m", isolate=False)

    (args, kwargs), = _calls(neuron_fakes, "torch_neuronx.trace")
    func, example = args
    assert func is module and isinstance(example, tuple)  # the documented type: a tuple
    assert [torch.equal(a, b) for a, b in zip(example, inputs)] == [True]
    assert kwargs["compiler_args"] == ["--target", "inf2"] and kwargs["cpu_backend"] is True
    assert kwargs["compiler_workdir"] is None
    assert [name for name, _, _ in neuron_fakes.CALLS] == [
        "torch_neuronx.trace", "torch_neuronx.dynamic_batch", "torch_neuronx.lazy_load"]  # lazy: loaded once
    import torch_neuronx

    assert torch_neuronx.IMPORT_ENV["NEURON_PLATFORM_TARGET_OVERRIDE"] == "inf2"  # set before the import

    assert artifact.target == "inf2" and not artifact.runs_on_cpu
    assert artifact.path == str(tmp_path / "m.inf2.pt") and artifact.compiler_args == ["--target", "inf2"]
    assert artifact.extra == {"cpu_backend": True, "has_device": False}
    assert artifact.cpu_artifact.path == str(tmp_path / "m.cpu.pt") and artifact.cpu_artifact.max_abs_diff == 0.0
    assert artifact.spec == zoo.get("mlp").spec
    assert "FAKE neuronx-cc compile --framework XLA --target inf2" in artifact.log
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "m.cpu.pt", "m.cpu.pt.workbench.json", "m.inf2.pt", "m.inf2.pt.workbench.json"]
    assert read_artifact(artifact.path) == artifact


def test_with_a_device_the_target_is_still_given(tmp_path, neuron_fakes, device):
    """The compiler would otherwise target the host's chip, which need not be the one asked for."""
    module, inputs = _mlp()
    compile_model(module, inputs, "inf2", out_dir=tmp_path, compiler_args="--auto-cast matmult",
                  compiler_workdir=tmp_path / "work", isolate=False)
    (_, kwargs), = _calls(neuron_fakes, "torch_neuronx.trace")
    assert kwargs["compiler_args"] == ["--auto-cast", "matmult", "--target", "inf2"]
    assert kwargs["cpu_backend"] is False and kwargs["compiler_workdir"] == str(tmp_path / "work")
    assert "NEURON_PLATFORM_TARGET_OVERRIDE" not in os.environ


def test_trn1_keeps_user_flags_and_adds_its_target(tmp_path, neuron_fakes):
    module, inputs = _mlp()
    compile_model(module, inputs, "trn1", out_dir=tmp_path, compiler_args=["--optlevel", "1"],
                  dynamic_batch_size=False, isolate=False)
    assert [name for name, _, _ in neuron_fakes.CALLS] == [
        "torch_neuronx.trace", "torch_neuronx.lazy_load"]  # no dynamic_batch unasked
    (_, kwargs), = _calls(neuron_fakes, "torch_neuronx.trace")
    assert kwargs["compiler_args"] == ["--optlevel", "1", "--target", "trn1"] and kwargs["cpu_backend"] is True
    assert os.environ["NEURON_PLATFORM_TARGET_OVERRIDE"] == "trn1"


@pytest.mark.parametrize("target", ["trn2", "trn3"])
def test_trn2_and_trn3_export_for_torchneuron_without_a_device(tmp_path, torchneuron, target):
    """No device: the program is exported (dim 0 dynamic) and nothing Neuron runs here; TorchNeuron
    compiles each shape on its first call on the Trn host."""
    module, inputs = _mlp()
    logged: list[str] = []
    artifact = compile_model(module, inputs, target, out_dir=tmp_path, name="m", isolate=False, log=logged.append)
    assert torchneuron.COMPILED == []
    assert artifact.target == target and artifact.path == str(tmp_path / f"m.{target}.pt")
    assert artifact.extra == {"format": "torch.export", "backend": "neuron", "has_device": False,
                              "compiled_example_shape": False, "lnc": 2}
    assert artifact.compiler_args == [] and artifact.dynamic_batch is True
    assert "compiles on the first call on the Trn host" in "\n".join(logged)
    # TorchNeuron's compile-only switch is not in any source read: said, with the page, not guessed
    assert f"compile-only mode is UNVERIFIED here (its switch is on {COMPILE_ONLY_DOC}" in "\n".join(logged)
    program = torch.export.load(artifact.path).module()  # the file is a torch.export program
    wide = torch.randn(8, *inputs[0].shape[1:])
    assert torch.allclose(program(wide), module(wide))
    assert torch.allclose(load_artifact(artifact, has_device=True)(*inputs), module(*inputs))
    assert read_artifact(artifact.path) == artifact


_DEVICE_COMPILE = """
import json, sys, torch
import torch_neuronx
from workbench import zoo
from workbench.compiler import compile_model, neuron
neuron.has_neuron_device = lambda: True  # the fake device (FAKE_NEURON_DEVICE=1)
model = zoo.get("mlp")
inputs = model.example_inputs(2)
artifact = compile_model(model.module, inputs, "trn2", out_dir=sys.argv[1], name="m", lnc=1, isolate=False)
print(json.dumps({"compiled": torch_neuronx.COMPILED, "extra": artifact.extra, "shape": list(inputs[0].shape)}))
"""


def test_trn2_with_a_device_compiles_through_torch_compile_backend_neuron(tmp_path, torchneuron):
    """With a device, the example shape is compiled once through torch.compile(backend="neuron"),
    static. In a child: the fake's `neuron` device cannot be unregistered from a process."""
    env = {**os.environ, "FAKE_NEURON_DEVICE": "1",
           "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent / "fake_neuron" / "torchneuron"),
                                          os.environ["PYTHONPATH"], str(Path(__file__).parents[1])])}
    done = subprocess.run([sys.executable, "-c", _DEVICE_COMPILE, str(tmp_path)], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    (graph,) = result["compiled"]  # one graph: the example shape, static (weights are graph inputs too)
    assert graph[0] == result["shape"]
    assert result["extra"]["compiled_example_shape"] is True and result["extra"]["lnc"] == 1


def test_torchneuron_targets_refuse_the_xla_calls(tmp_path, torchneuron):
    """TorchNeuron has no trace/DataParallel/dynamic_batch/analyze, and the workbench never asks it for them."""
    for name in ("trace", "dynamic_batch", "DataParallel", "analyze", "lazy_load"):
        assert not hasattr(torchneuron, name), name
    module, inputs = _mlp()
    with pytest.raises(CompileError, match="torch_neuronx.trace is the PyTorch/XLA library's call.*trn2 compiles "
                                           "through TorchNeuron"):
        seam.neuronx_trace_arguments("trn2", None, None, has_device=True)
    with pytest.raises(CompileError, match="trn3 serves through TorchNeuron, which has no operator analyzer"):
        analyze(module, inputs, "trn3")
    with pytest.raises(CompileError, match=r"compiler args \['--auto-cast', 'matmult'\]: TorchNeuron compiles "
                                           "through torch.compile"):
        compile_model(module, inputs, "trn2", out_dir=tmp_path / "out", compiler_args="--auto-cast matmult -lnc 2")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("library, targets, message", [
    ("torchneuron", ("inf2", "trn1"), r"torch-neuronx 2.14.3.1\+fake is TorchNeuron, the native PyTorch backend: it "
                                      "runs on Trn2/Trn3 only"),
    ("neuron_fakes", ("trn2", "trn3"), r"torch-neuronx 2.9.0.2.15.32035\+fake is the PyTorch/XLA library.*no longer "
                                       "supports for inference on Trn2/Trn3 from release 2.34.0"),
])
def test_the_wrong_torch_neuronx_is_refused_before_any_work(tmp_path, request, library, targets, message):
    """torch-neuronx 2.14.x on inf2: "this is TorchNeuron, Trn2/Trn3 only"; the XLA 2.9 build on trn2/trn3:
    unsupported there from 2.34. Both before anything is written or any SDK call."""
    request.getfixturevalue(library)
    module, inputs = _mlp()
    for target in targets:
        with pytest.raises(WrongSDKError, match=f"compiling for {target}: {message}"):
            compile_model(module, inputs, target, out_dir=tmp_path / "out", isolate=False)
    assert not (tmp_path / "out").exists()
    import fake_neuron_record

    assert fake_neuron_record.CALLS == []


def test_the_fake_trace_fails_without_a_device_unless_cpu_backend(neuron_fakes, monkeypatch):
    """As the SDK: torch 2.x needs a device to trace (PJRT "num_devices > 0", aws-neuron-sdk #902/#910),
    unless cpu_backend=True with a --target; with a device the plain call works."""
    import torch_neuronx

    module, inputs = _mlp()
    with pytest.raises(RuntimeError, match=r"PJRT_Client_Create.*num_devices > 0"):
        torch_neuronx.trace(module, inputs, compiler_args=["--target", "inf2"])
    assert torch_neuronx.trace(module, inputs, compiler_args=["--target", "inf2"], cpu_backend=True)(*inputs).shape
    monkeypatch.setenv("FAKE_NEURON_DEVICE", "1")
    assert torch.equal(torch_neuronx.trace(module, inputs, compiler_args=["--target", "inf2"])(*inputs),
                       module(*inputs))


def test_a_graph_traced_at_batch_1_takes_only_batch_1_unless_dynamic_batching(tmp_path, neuron_fakes):
    """A NEFF takes one shape (trace page, "Dynamic Batching"): batch 8 into a batch-1 trace fails;
    with dynamic_batch (the seam's default) it works, also after save and load."""
    model = zoo.get("mlp")
    module, one, eight = model.module, model.example_inputs(1), model.example_inputs(8)
    fixed = compile_model(module, one, "inf2", out_dir=tmp_path, name="fixed", dynamic_batch_size=False,
                          isolate=False)
    loaded = load_artifact(fixed, has_device=True)
    assert torch.allclose(loaded(*one), module(*one))
    with pytest.raises((RuntimeError, torch.jit.Error), match=r"has shape \[8, .*compiled for \[1, "):
        loaded(*eight)
    dynamic = compile_model(module, one, "inf2", out_dir=tmp_path, name="dynamic", isolate=False)
    assert torch.allclose(load_artifact(dynamic, has_device=True)(*eight), module(*eight))


@pytest.mark.parametrize("target, options, message", [
    ("inf2", {"lnc": 2}, r"a logical NeuronCore config \(lnc=2\) is a trn2/trn3 setting; inf2 takes none"),
    ("trn1", {"compiler_args": ["--logical-nc-config", "2"]}, r"lnc=2 on trn1: neuronx-cc refuses it \(NCC_EARG001"),
    ("trn2", {"lnc": 3}, "lnc=3: trn2 runs at a logical NeuronCore config of 1 or 2"),
    ("trn3", {"lnc": 2, "compiler_args": "-lnc 1"}, "lnc=2 contradicts the compiler args' logical NeuronCore config 1"),
    ("trn2", {"compiler_args": "--lnc=4"}, "logical NeuronCore config '4'; use 1 or 2"),
    ("cpu", {"lnc": 1}, "lnc are Neuron compiler settings"),
])
def test_bad_logical_core_configs_are_refused_before_writing(tmp_path, neuron_fakes, target, options, message):
    module, inputs = _mlp()
    out = tmp_path / "out"
    with pytest.raises(CompileError, match=message):
        compile_model(module, inputs, target, out_dir=out, isolate=False, **options)
    assert neuron_fakes.CALLS == [] and not out.exists()


def test_lnc_1_on_trn1_is_what_neuronx_cc_accepts(tmp_path, neuron_fakes):
    """NCC_EARG001: "On trn1, only lnc=1 is supported" (SDK compiler/error-codes/EARG001.rst:18-21)."""
    module, inputs = _mlp()
    artifact = compile_model(module, inputs, "trn1", out_dir=tmp_path, compiler_args="-lnc 1", isolate=False)
    assert artifact.compiler_args == ["-lnc", "1", "--target", "trn1"] and "lnc" not in artifact.extra
    import torch_neuronx

    with pytest.raises(RuntimeError, match=r"\[NCC_EARG001\] On trn1, only lnc=1 is supported"):
        torch_neuronx.trace(module, inputs, compiler_args=["--target", "trn1", "-lnc", "2"], cpu_backend=True)
    with pytest.raises(RuntimeError, match="--target: invalid choice: 'inf9'"):
        torch_neuronx.trace(module, inputs, compiler_args=["--target", "inf9"], cpu_backend=True)
    with pytest.raises(RuntimeError, match="PyTorch/XLA inference is not supported on Trn2/Trn3"):
        torch_neuronx.trace(module, inputs, compiler_args=["--target", "trn2"], cpu_backend=True)


def test_a_given_matching_target_is_not_repeated():
    kwargs = seam.neuronx_trace_arguments("trn1", "--target=trn1n -O1", None, has_device=False)
    assert kwargs == {"compiler_args": ["--target=trn1n", "-O1"], "cpu_backend": True}
    assert seam.neuronx_trace_arguments("trn1", "--target trn1", None, has_device=True) == {
        "compiler_args": ["--target", "trn1"]}


def test_a_target_for_another_chip_is_refused_before_writing(tmp_path, neuron_fakes):
    module, inputs = _mlp()
    out = tmp_path / "out"
    with pytest.raises(CompileError, match="compiler args say --target trn1 but the target is inf2"):
        compile_model(module, inputs, "inf2", out_dir=out, compiler_args=["--target", "trn1"], isolate=False)
    with pytest.raises(CompileError, match="compiler args say --target inf2 but the target is trn1"):
        compile_model(module, inputs, "trn1", out_dir=out, compiler_args=["--target", "inf2"], isolate=False)
    assert neuron_fakes.CALLS == [] and not out.exists()
    with pytest.raises(CompileError, match="--target but give no value"):
        seam.neuronx_trace_arguments("inf2", ["--target"], None, has_device=False)


def test_the_fake_refuses_a_cpu_compile_without_a_target(neuron_fakes):
    """What the SDK does when --target is missing (the reason the seam always adds it)."""
    import torch_neuronx

    module, inputs = _mlp()
    with pytest.raises(RuntimeError, match='please supply compiler argument target.*Ex: "--target trn1"'):
        torch_neuronx.trace(module, inputs, cpu_backend=True)


def test_inf1_calls_torch_neuron_trace(tmp_path, neuron_fakes):
    model = zoo.get("bert", seq_len=16)
    inputs = model.example_inputs(2)
    artifact = compile_model(model.module, inputs, "inf1", out_dir=tmp_path, name="bert",
                             compiler_args=["--neuroncore-pipeline-cores", "4"], isolate=False)
    (args, kwargs), = _calls(neuron_fakes, "torch.neuron.trace")
    module, example = args
    assert module is model.module
    assert isinstance(example, tuple) and all(torch.equal(a, b) for a, b in zip(example, inputs))
    assert kwargs == {"compiler_args": ["--neuroncore-pipeline-cores", "4"], "dynamic_batch_size": True}
    assert artifact.target == "inf1" and artifact.compiler_args == ["--neuroncore-pipeline-cores", "4"]
    assert artifact.extra["cpu_backend"] is False and "cpu_fallback" not in artifact.extra
    assert f"inf1: NOTE {OUT_OF_SUPPORT['inf1']}" in artifact.log  # kept, and marked out of support


def test_inf1_without_a_batch_dim_asks_for_no_dynamic_batch(tmp_path, neuron_fakes):
    module, inputs = _mlp()
    compile_model(module, inputs, "inf1", out_dir=tmp_path, batch_dim=False, compiler_workdir=tmp_path / "w",
                  isolate=False)
    (_, kwargs), = _calls(neuron_fakes, "torch.neuron.trace")
    assert kwargs == {"compiler_args": [], "dynamic_batch_size": False, "compiler_workdir": str(tmp_path / "w")}


def test_inf1_cpu_trace_warning_follows_issue_827(neuron_fakes, caplog):
    """#827: a fully supported one-operator model still gets "returning a CPU trace", because the
    default minimum_segment_size=2 leaves no segment to place; two supported operators in a row do not."""
    import torch_neuron

    x = torch.randn(2, 4)
    with caplog.at_level("WARNING", logger="Neuron"):
        cpu_trace = torch.neuron.trace(torch.nn.Linear(4, 3).eval(), x)
    assert "No operator is placed on Neuron runtime; returning a CPU trace" in caplog.text
    assert cpu_trace(torch.randn(7, 4)).shape == (7, 3)  # a CPU trace: any batch
    caplog.clear()
    two = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU()).eval()
    with caplog.at_level("WARNING", logger="Neuron"):
        placed = torch.neuron.trace(two, x)
    assert "No operator is placed" not in caplog.text
    with pytest.raises((RuntimeError, torch.jit.Error), match=r"compiled for \[2, 4\]"):
        placed(torch.randn(7, 4))  # a Neuron graph without dynamic_batch_size: one shape
    with caplog.at_level("WARNING", logger="Neuron"):
        torch.neuron.trace(two, x, minimum_segment_size=3)
    assert "No operator is placed" in caplog.text
    assert torch_neuron.UNSUPPORTED == set()


def test_inf1_trace_that_placed_nothing_on_neuron_is_flagged(tmp_path, neuron_fakes):
    import torch_neuron

    torch_neuron.UNSUPPORTED = {"aten::linear", "aten::relu"}
    module, inputs = _mlp()
    logged: list[str] = []
    artifact = compile_model(module, inputs, "inf1", out_dir=tmp_path, isolate=False, log=logged.append)
    assert artifact.extra["cpu_fallback"] is True
    assert any("No operator is placed on Neuron runtime" in line for line in logged)
    assert "inf1: WARNING nothing in this model was placed on a NeuronCore" in "\n".join(logged)


@pytest.mark.parametrize("target, module, packages", [
    ("inf1", "torch_neuron", "pip install torch-neuron==1.13.1.2.11.13.0 'neuron-cc[tensorflow]==1.24.0.0'"),
    ("inf2", "torch_neuronx", "pip install neuronx-cc==2.26.6360.0 torch-neuronx==2.9.0.2.15.32035 from the AWS"),
    ("trn1", "torch_neuronx", "pip install neuronx-cc==2.26.6360.0 torch-neuronx==2.9.0.2.15.32035 from the AWS"),
    ("trn2", "torch_neuronx", "pip install torch-neuronx==2.14.3.1 neuronx-cc==2.28.7631.0 nki==0.7.0 from the AWS"),
    ("trn3", "torch_neuronx", "pip install torch-neuronx==2.14.3.1 neuronx-cc==2.28.7631.0 nki==0.7.0 from the AWS"),
])
def test_missing_sdk_says_what_to_install_and_writes_nothing(tmp_path, monkeypatch, target, module, packages):
    monkeypatch.setitem(sys.modules, module, None)  # makes `import <module>` fail like a missing package
    module_, inputs = _mlp()
    out = tmp_path / "out"
    with pytest.raises(MissingSDKError) as info:
        compile_model(module_, inputs, target, out_dir=out)
    message = str(info.value)
    assert message.startswith(f"compiling for {target}: missing ")
    assert packages in message and f"import {module} failed" in message
    assert info.value.target == target
    assert not out.exists()


def test_neuron_artifact_is_refused_without_a_device_and_loads_with_one(tmp_path, neuron_fakes):
    module, inputs = _mlp()
    artifact = compile_model(module, inputs, "inf2", out_dir=tmp_path, name="m", isolate=False)
    with pytest.raises(NeuronArtifactError, match=f"compiled for inf2 and runs only on a Neuron device.*"
                                                  f"use its CPU twin {tmp_path / 'm.cpu.pt'}"):
        load_artifact(artifact.path)
    loaded = load_artifact(artifact, has_device=True)  # imports the (fake) SDK first, then torch.jit.load
    assert torch.equal(loaded(*inputs), module(*inputs))
    assert isinstance(load_artifact(artifact.cpu_artifact), torch.jit.ScriptModule)


@pytest.fixture
def env_reporting_trace(neuron_fakes, monkeypatch):
    """The FAKE trace, also printing the override it sees to stderr (the child's stderr is logged)."""
    import torch_neuronx

    fake = torch_neuronx.trace

    def trace(func, example_inputs, **kwargs):
        print(f"override={os.environ.get('NEURON_PLATFORM_TARGET_OVERRIDE')}", file=sys.stderr, flush=True)
        return fake(func, example_inputs, **kwargs)

    monkeypatch.setattr(torch_neuronx, "trace", trace)
    return neuron_fakes


def test_isolated_compile_streams_the_child_log(tmp_path, env_reporting_trace):
    module, inputs = _mlp()
    logged: list[str] = []
    artifact = compile_model(module, inputs, "inf2", out_dir=tmp_path, log=logged.append)  # isolate=True
    assert "FAKE neuronx-cc compile --framework XLA --target inf2" in logged  # child stdout
    assert "override=inf2" in logged  # child stderr, env set before the import
    assert env_reporting_trace.CALLS == []  # the calls happened in the child, not here
    assert torch.equal(load_artifact(artifact, has_device=True)(*inputs), module(*inputs))


def test_isolated_failure_is_reported_and_cleaned_up(tmp_path, neuron_fakes, monkeypatch):
    import torch_neuronx

    def broken(*args, **kwargs):
        print("fake neuronx-cc: starting", flush=True)
        raise RuntimeError("PJRT_Client_Create Init: error condition !(num_devices > 0)")

    monkeypatch.setattr(torch_neuronx, "trace", broken)
    module, inputs = _mlp()
    logged: list[str] = []
    with pytest.raises(CompileError, match="num_devices > 0") as info:
        compile_model(module, inputs, "inf2", out_dir=tmp_path, log=logged.append)
    assert "Traceback" in str(info.value)
    assert "fake neuronx-cc: starting" in logged
    assert list(tmp_path.iterdir()) == []  # the CPU twin written before the failure is removed too


def test_an_unsupported_operator_fails_the_compile_like_neuronx_cc(tmp_path, neuron_fakes):
    import torch_neuronx

    torch_neuronx.UNSUPPORTED = {"aten::relu"}
    module, inputs = _mlp()
    with pytest.raises(CompileError, match="unsupported operator\\(s\\) \\['aten::relu'\\]"):
        compile_model(module, inputs, "inf2", out_dir=tmp_path / "out", isolate=False)
    assert not (tmp_path / "out").exists()


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split(") ")[1].startswith("Z")  # exited, waiting to be reaped by init
    except FileNotFoundError:
        return True


def test_cancel_kills_the_compiler_process(tmp_path, neuron_fakes, monkeypatch):
    import torch_neuronx

    pid_file = tmp_path / "compiler.pid"

    def slow(*args, **kwargs):
        compiler = subprocess.Popen([sys.executable, "-c", "import time; print('fake compiler running', flush=True);"
                                     " time.sleep(300)"])
        pid_file.write_text(str(compiler.pid))
        compiler.wait()

    monkeypatch.setattr(torch_neuronx, "trace", slow)
    module, inputs = _mlp()
    logged: list[str] = []
    out = tmp_path / "out"
    task = Task(compile_model, module, inputs, "inf2", out_dir=out, log=logged.append).start()
    deadline = time.monotonic() + 120
    while not pid_file.exists() and task.running and time.monotonic() < deadline:
        time.sleep(0.1)
    assert pid_file.exists(), task.error_text
    compiler_pid = int(pid_file.read_text())
    # the pid is known before the child's interpreter has started; on a busy box wait for its line
    while "fake compiler running" not in logged and task.running and time.monotonic() < deadline:
        time.sleep(0.1)
    assert "fake compiler running" in logged, logged
    task.cancel()
    assert task.join(timeout=60)
    assert task.state == "cancelled", task.error_text
    deadline = time.monotonic() + 30
    while not _gone(compiler_pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _gone(compiler_pid)
    assert "fake compiler running" in logged
    assert list(out.iterdir()) == [] if out.exists() else True


@pytest.mark.parametrize("target", ["inf2", "trn1"])
def test_neuronx_operator_report_reads_the_sdk_types(neuron_fakes, target):
    """torch_neuronx.analyze: "66.67%" and a list of per-node dicts; unsupported ones show as such."""
    import torch_neuronx

    torch_neuronx.UNSUPPORTED = {"aten::relu"}
    module, inputs = _mlp()
    report = analyze(module, inputs, target)
    assert report.support_percentage == pytest.approx(66.67, abs=0.01) and report.unsupported == ["aten::relu"]
    assert report.raw["support_percentage"] == "66.67%"
    assert [entry["kind"] for entry in report.raw["unsupported_operators"]] == ["aten::relu"]
    assert set(report.raw["unsupported_operators"][0]) == {"kind", "failureAt", "call", "opGraph"}
    assert report.operator_counts == {"aten::linear": 2, "aten::relu": 1}  # from the CPU trace
    (args, _), = _calls(neuron_fakes, "torch_neuronx.analyze")
    assert isinstance(args[1], tuple)  # a non-tuple would be taken as ONE argument
    frame = report.to_frame().set_index("operator")
    assert frame.loc["aten::relu", "supported"] == False and frame.loc["aten::linear", "supported"] == True  # noqa: E712
    assert "of arithmetic operations (2 of 3) are supported" in report.log
    assert report.log.startswith(f"NOTE torch_neuronx.analyze checks operators for trn1 whatever the target ({target})")


def test_inf1_operator_report_reads_the_returned_dict_and_the_log(neuron_fakes, monkeypatch):
    """torch.neuron.analyze_model logs at INFO on the "Neuron" logger (which must be lowered for the
    call and restored) and returned a dict in SDK 1.x; both carry the unsupported names."""
    import torch_neuron

    torch_neuron.UNSUPPORTED = {"aten::relu"}
    neuron_logger = logging.getLogger("Neuron")
    monkeypatch.setattr(neuron_logger, "level", logging.WARNING)
    module, inputs = _mlp()
    report = analyze(module, inputs, "inf1")
    assert report.support_percentage == pytest.approx(66.67, abs=0.01) and report.unsupported == ["aten::relu"]
    assert report.raw["supported_operators"] == ["aten::linear"]  # the SDK's set, made JSON-safe
    assert "66.67% of all operations (including primitives) (2 of 3) are supported" in report.log
    assert neuron_logger.level == logging.WARNING
    frame = report.to_frame().set_index("operator")
    assert frame.loc["aten::relu", "supported"] == False  # noqa: E712
    (args, _), = _calls(neuron_fakes, "torch.neuron.analyze_model")
    assert isinstance(args[1], list)  # the SDK tutorial's call form: example_inputs=[...]

    monkeypatch.setattr(torch.neuron, "analyze_model", lambda model, example_inputs: torch_neuron.analyze_model(
        model, example_inputs) and None)  # an SDK that only logs
    only_logged = analyze(module, inputs, "inf1")
    assert only_logged.support_percentage == pytest.approx(66.67, abs=0.01) and only_logged.unsupported == ["aten::relu"]


def test_analyze_without_neuronx_cc_raises_the_sdk_error(neuron_fakes, monkeypatch):
    monkeypatch.setitem(sys.modules, "neuronxcc", None)
    module, inputs = _mlp()
    with pytest.raises(RuntimeError, match="neuronx-cc is not installed"):
        analyze(module, inputs, "inf2")


# --- transformers-neuronx --------------------------------------------------------------------------

def test_the_class_table_is_the_sdks(neuron_fakes):
    import transformers_neuronx

    assert SAMPLING_CLASSES["gpt2"] == "GPT2ForSamplingWithContextBroadcasting"
    assert all(getattr(transformers_neuronx, name, None) is not None for name in SAMPLING_CLASSES.values())
    assert not hasattr(transformers_neuronx, "GPT2ForSampling")


def test_tnx_without_device_cpu_compiles_and_saves(tmp_path, neuron_fakes):
    pytest.importorskip("transformers")
    artifact = package_causal_lm(tiny_causal_lm("llama"), "inf2", out_dir=tmp_path, name="lm", tp_degree=2,
                                 has_device=False)
    names = [name for name, _, _ in neuron_fakes.CALLS]
    assert names == ["LlamaForSampling.from_pretrained", "LlamaForSampling.cpu_compile", "LlamaForSampling.save"]
    (args, kwargs), = _calls(neuron_fakes, "LlamaForSampling.from_pretrained")
    assert args[0] == str(tmp_path / ".lm.staging" / "checkpoint")  # the checkpoint, before it is moved
    assert kwargs == {"batch_size": 1, "tp_degree": 2, "n_positions": 64, "amp": "f32"}
    import transformers_neuronx

    assert transformers_neuronx.IMPORT_ENV["NEURON_PLATFORM_TARGET_OVERRIDE"] == "inf2"  # set before the import
    assert (tmp_path / "lm-neuron" / "FAKE-neff-graphs.txt").is_file() and (tmp_path / "lm" / "config.json").is_file()
    assert artifact.extra["model_class"] == "LlamaForSampling" and artifact.extra["compiled_dir"] == str(
        tmp_path / "lm-neuron")
    assert artifact.cpu_artifact.path == artifact.path and artifact.cpu_artifact.target == "cpu"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lm", "lm-neuron", "lm.workbench.json"]


def test_tnx_with_device_goes_to_neuron(tmp_path, neuron_fakes):
    pytest.importorskip("transformers")
    package_causal_lm(tiny_causal_lm("llama"), "trn1", out_dir=tmp_path, tp_degree=1, amp="bf16", has_device=True)
    assert [name for name, _, _ in neuron_fakes.CALLS] == [
        "LlamaForSampling.from_pretrained", "LlamaForSampling.to_neuron", "LlamaForSampling.save"]
    assert _calls(neuron_fakes, "LlamaForSampling.from_pretrained")[0][1]["amp"] == "bf16"
    assert "NEURON_PLATFORM_TARGET_OVERRIDE" not in os.environ


def test_gpt2_uses_the_context_broadcasting_class_with_one_prompt_per_row(tmp_path, neuron_fakes):
    pytest.importorskip("transformers")
    artifact = package_causal_lm(tiny_causal_lm("gpt2"), "inf2", out_dir=tmp_path, name="g", batch_size=4,
                                 tp_degree=2, has_device=False)
    assert artifact.extra["model_class"] == "GPT2ForSamplingWithContextBroadcasting"
    (_, kwargs), = _calls(neuron_fakes, "GPT2ForSamplingWithContextBroadcasting.from_pretrained")
    assert kwargs["batch_size"] == 4 and kwargs["prompt_batch_size"] == 4


@pytest.mark.parametrize("model_class", ["GPTJForSampling", "GPTNeoXForSampling"])
def test_classes_without_serialization_are_packaged_uncompiled(tmp_path, neuron_fakes, model_class):
    """GPT-J and GPT-NeoX have no cpu_compile and no save: nothing is asked of them without a device,
    and with one the graphs are compiled (to check them) but not saved."""
    pytest.importorskip("transformers")
    import transformers_neuronx

    cls = getattr(transformers_neuronx, model_class)
    assert not any(hasattr(cls, name) for name in ("save", "load", "cpu_compile"))
    logged: list[str] = []
    artifact = package_causal_lm(tiny_causal_lm("llama"), "inf2", out_dir=tmp_path, name="a",
                                 model_class=model_class, has_device=False, log=logged.append)
    assert neuron_fakes.CALLS == [] and "compiled_dir" not in artifact.extra
    assert any("packaged uncompiled, model.py compiles it on the Neuron host at load time" in line for line in logged)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "a.workbench.json"]
    with_device = package_causal_lm(tiny_causal_lm("llama"), "inf2", out_dir=tmp_path, name="b",
                                    model_class=model_class, has_device=True)
    assert [name for name, _, _ in neuron_fakes.CALLS] == [f"{model_class}.from_pretrained", f"{model_class}.to_neuron"]
    assert "compiled_dir" not in with_device.extra and not (tmp_path / "b-neuron").exists()


def test_tnx_bad_settings_and_missing_sdk(tmp_path, neuron_fakes, monkeypatch):
    pytest.importorskip("transformers")
    model = tiny_causal_lm("llama")
    with pytest.raises(ValueError, match="tp_degree 3 must divide the model's 2 attention heads"):
        package_causal_lm(model, "inf2", out_dir=tmp_path, tp_degree=3)
    with pytest.raises(ValueError, match="transformers-neuronx target 'inf1'"):
        package_causal_lm(model, "inf1", out_dir=tmp_path)
    with pytest.raises(ValueError, match="transformers-neuronx target 'trn2'"):  # tnx never supported trn2
        package_causal_lm(model, "trn2", out_dir=tmp_path)
    with pytest.raises(ValueError, match="transformers_neuronx has no class 'GPT2ForSampling'"):
        package_causal_lm(model, "inf2", out_dir=tmp_path, model_class="GPT2ForSampling")
    monkeypatch.setitem(sys.modules, "transformers_neuronx", None)
    with pytest.raises(MissingSDKError, match="missing transformers-neuronx, neuronx-cc; pip install "
                                              "transformers-neuronx==0.13.1315 'transformers==4.48.\\*'"):
        package_causal_lm(model, "inf2", out_dir=tmp_path)
    assert neuron_fakes.CALLS == [] and list(tmp_path.iterdir()) == []


def test_the_seam_refuses_unknown_targets():
    with pytest.raises(ValueError, match="unknown Neuron target 'inf3'"):
        seam.import_sdk("inf3")
