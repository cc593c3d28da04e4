"""The Neuron seam, driven by FAKE SDK modules.

torch-neuron, torch-neuronx and transformers-neuronx cannot be installed here and there is no
Neuron device, so every test in this file injects FAKE ``torch_neuron`` / ``torch_neuronx`` /
``transformers_neuronx`` modules into ``sys.modules``. The fakes record how they are called and
return plain CPU TorchScript as a stand-in for a NEFF-backed module. What is asserted is the
workbench's side of the contract: the exact trace calls and arguments per target, the
no-device rule (``cpu_backend=True`` + ``--target``), the CPU twin, the missing-SDK messages, the
isolated child's live log and that cancel kills the (fake) compiler process. No number here says
anything about Neuron performance.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
import time
import types

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
from workbench.compiler.tnx import package_causal_lm, tiny_causal_lm
from workbench.tasks import Task

# the fakes stand in for Neuron modules with torch.jit.trace, which torch 2.x marks deprecated
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.fixture
def no_override(monkeypatch):
    monkeypatch.delenv("NEURON_PLATFORM_TARGET_OVERRIDE", raising=False)


@pytest.fixture
def device(monkeypatch):
    """Pretend a Neuron device is present (the seam asks has_neuron_device)."""
    monkeypatch.setattr(seam, "has_neuron_device", lambda: True)


@pytest.fixture
def fake_neuronx(monkeypatch, no_override):
    """FAKE torch_neuronx: records calls; trace returns a CPU torch.jit.trace stand-in."""
    calls: list[tuple] = []
    fake = types.ModuleType("torch_neuronx")
    fake.__doc__ = "FAKE torch_neuronx for tests"

    def trace(func, example_inputs, *rest, **kwargs):
        calls.append(("trace", func, example_inputs, rest, kwargs))
        print(f"fake neuronx-cc: compiler_args={kwargs.get('compiler_args')} cpu_backend={kwargs.get('cpu_backend')}",
              flush=True)
        print(f"fake neuronx-cc: override={os.environ.get('NEURON_PLATFORM_TARGET_OVERRIDE')}", file=sys.stderr,
              flush=True)
        return torch.jit.trace(func, example_inputs)

    def dynamic_batch(traced):
        calls.append(("dynamic_batch", traced))
        return traced

    def analyze_fn(func, example_inputs, **kwargs):
        calls.append(("analyze", func, example_inputs, kwargs))
        return {"support_percentage": 50.0, "supported_operators": {"aten::linear": 2},
                "unsupported_operators": ["aten::relu"]}

    fake.trace, fake.dynamic_batch, fake.analyze = trace, dynamic_batch, analyze_fn
    monkeypatch.setitem(sys.modules, "torch_neuronx", fake)
    return calls


@pytest.fixture
def fake_neuron(monkeypatch):
    """FAKE torch_neuron + torch.neuron namespace (what ``import torch_neuron`` registers)."""
    calls: list[tuple] = []
    monkeypatch.setitem(sys.modules, "torch_neuron", types.ModuleType("torch_neuron"))

    def trace(model, example_inputs, **kwargs):
        calls.append(("trace", model, example_inputs, kwargs))
        return torch.jit.trace(model, tuple(example_inputs))

    def analyze_model(model, example_inputs):
        calls.append(("analyze_model", model, example_inputs))
        logging.getLogger("Neuron").warning("The following operations are currently supported: aten::linear")
        logging.getLogger("Neuron").warning("66.67% of all operations (including primitives) (2 of 3) are supported")

    monkeypatch.setattr(torch, "neuron", types.SimpleNamespace(trace=trace, analyze_model=analyze_model),
                        raising=False)
    return calls


def _mlp():
    model = zoo.get("mlp")
    return model.module, model.example_inputs(2)


def test_inf2_without_device_uses_cpu_backend_and_target(tmp_path, fake_neuronx):
    module, inputs = _mlp()
    artifact = compile_model(module, inputs, "inf2", out_dir=tmp_path, name="m", isolate=False)

    (kind, func, example, rest, kwargs), (kind2, traced) = fake_neuronx
    assert kind == "trace" and func is module and rest == ()
    assert [torch.equal(a, b) for a, b in zip(example, inputs)] == [True]
    assert kwargs == {"compiler_args": ["--target", "inf2"], "cpu_backend": True}
    assert kind2 == "dynamic_batch"
    assert os.environ["NEURON_PLATFORM_TARGET_OVERRIDE"] == "inf2"

    assert artifact.target == "inf2" and not artifact.runs_on_cpu
    assert artifact.path == str(tmp_path / "m.inf2.pt") and artifact.compiler_args == ["--target", "inf2"]
    assert artifact.extra == {"cpu_backend": True, "has_device": False}
    assert artifact.cpu_artifact.path == str(tmp_path / "m.cpu.pt") and artifact.cpu_artifact.max_abs_diff == 0.0
    assert artifact.spec == zoo.get("mlp").spec
    assert "fake neuronx-cc: compiler_args=['--target', 'inf2'] cpu_backend=True" in artifact.log
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "m.cpu.pt", "m.cpu.pt.workbench.json", "m.inf2.pt", "m.inf2.pt.workbench.json"]
    assert read_artifact(artifact.path) == artifact


def test_inf2_with_device_passes_no_cpu_backend(tmp_path, fake_neuronx, device):
    module, inputs = _mlp()
    compile_model(module, inputs, "inf2", out_dir=tmp_path, compiler_args="--auto-cast matmult",
                  compiler_workdir=tmp_path / "work", isolate=False)
    assert fake_neuronx[0][4] == {"compiler_args": ["--auto-cast", "matmult"],
                                  "compiler_workdir": str(tmp_path / "work")}
    assert "NEURON_PLATFORM_TARGET_OVERRIDE" not in os.environ


def test_trn1_keeps_user_flags_and_adds_its_target(tmp_path, fake_neuronx):
    module, inputs = _mlp()
    compile_model(module, inputs, "trn1", out_dir=tmp_path, compiler_args=["--optlevel", "1"],
                  dynamic_batch_size=False, isolate=False)
    assert [c[0] for c in fake_neuronx] == ["trace"]  # no dynamic_batch when not asked
    assert fake_neuronx[0][4] == {"compiler_args": ["--optlevel", "1", "--target", "trn1"], "cpu_backend": True}
    assert os.environ["NEURON_PLATFORM_TARGET_OVERRIDE"] == "trn1"


def test_a_given_matching_target_is_not_repeated():
    kwargs = seam.neuronx_trace_arguments("trn1", "--target=trn1n -O1", None, has_device=False)
    assert kwargs == {"compiler_args": ["--target=trn1n", "-O1"], "cpu_backend": True}


def test_a_target_for_another_chip_is_refused_before_writing(tmp_path, fake_neuronx):
    module, inputs = _mlp()
    out = tmp_path / "out"
    with pytest.raises(CompileError, match="compiler args say --target trn1 but the target is inf2"):
        compile_model(module, inputs, "inf2", out_dir=out, compiler_args=["--target", "trn1"], isolate=False)
    assert fake_neuronx == [] and not out.exists()
    with pytest.raises(CompileError, match="--target but give no value"):
        seam.neuronx_trace_arguments("inf2", ["--target"], None, has_device=False)


def test_inf1_calls_torch_neuron_trace(tmp_path, fake_neuron):
    model = zoo.get("bert", seq_len=16)
    inputs = model.example_inputs(2)
    artifact = compile_model(model.module, inputs, "inf1", out_dir=tmp_path, name="bert",
                             compiler_args=["--neuroncore-pipeline-cores", "4"], isolate=False)
    (kind, module, example, kwargs), = fake_neuron
    assert kind == "trace" and module is model.module
    assert isinstance(example, list) and all(torch.equal(a, b) for a, b in zip(example, inputs))
    assert kwargs == {"compiler_args": ["--neuroncore-pipeline-cores", "4"], "dynamic_batch_size": True}
    assert artifact.target == "inf1" and artifact.compiler_args == ["--neuroncore-pipeline-cores", "4"]
    assert artifact.extra["cpu_backend"] is False


def test_inf1_without_a_batch_dim_asks_for_no_dynamic_batch(tmp_path, fake_neuron):
    module, inputs = _mlp()
    compile_model(module, inputs, "inf1", out_dir=tmp_path, batch_dim=False, compiler_workdir=tmp_path / "w",
                  isolate=False)
    assert fake_neuron[0][3] == {"compiler_args": [], "dynamic_batch_size": False,
                                 "compiler_workdir": str(tmp_path / "w")}


@pytest.mark.parametrize("target, module, packages", [
    ("inf1", "torch_neuron", "pip install torch-neuron neuron-cc from the AWS Neuron pip repository"),
    ("inf2", "torch_neuronx", "pip install torch-neuronx neuronx-cc from the AWS Neuron pip repository"),
    ("trn1", "torch_neuronx", "pip install torch-neuronx neuronx-cc from the AWS Neuron pip repository"),
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


def test_neuron_artifact_is_refused_without_a_device_and_loads_with_one(tmp_path, fake_neuronx):
    module, inputs = _mlp()
    artifact = compile_model(module, inputs, "inf2", out_dir=tmp_path, name="m", isolate=False)
    with pytest.raises(NeuronArtifactError, match=f"compiled for inf2 and runs only on a Neuron device.*"
                                                  f"use its CPU twin {tmp_path / 'm.cpu.pt'}"):
        load_artifact(artifact.path)
    loaded = load_artifact(artifact, has_device=True)  # imports the (fake) SDK first, then torch.jit.load
    assert torch.equal(loaded(*inputs), module(*inputs))
    assert isinstance(load_artifact(artifact.cpu_artifact), torch.jit.ScriptModule)


def test_isolated_compile_streams_the_child_log(tmp_path, fake_neuronx):
    module, inputs = _mlp()
    logged: list[str] = []
    artifact = compile_model(module, inputs, "inf2", out_dir=tmp_path, log=logged.append)  # isolate=True
    assert "fake neuronx-cc: compiler_args=['--target', 'inf2'] cpu_backend=True" in logged  # child stdout
    assert "fake neuronx-cc: override=inf2" in logged  # child stderr, env set before the import
    assert fake_neuronx == []  # the calls happened in the child, not here
    assert torch.equal(load_artifact(artifact, has_device=True)(*inputs), module(*inputs))


def test_isolated_failure_is_reported_and_cleaned_up(tmp_path, fake_neuronx, monkeypatch):
    def broken(*args, **kwargs):
        print("fake neuronx-cc: starting", flush=True)
        raise RuntimeError("PJRT_Client_Create Init: error condition !(num_devices > 0)")

    monkeypatch.setattr(sys.modules["torch_neuronx"], "trace", broken)
    module, inputs = _mlp()
    logged: list[str] = []
    with pytest.raises(CompileError, match="num_devices > 0") as info:
        compile_model(module, inputs, "inf2", out_dir=tmp_path, log=logged.append)
    assert "Traceback" in str(info.value)
    assert "fake neuronx-cc: starting" in logged
    assert list(tmp_path.iterdir()) == []  # the CPU twin written before the failure is removed too


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split(") ")[1].startswith("Z")  # exited, waiting to be reaped by init
    except FileNotFoundError:
        return True


def test_cancel_kills_the_compiler_process(tmp_path, fake_neuronx, monkeypatch):
    pid_file = tmp_path / "compiler.pid"

    def slow(*args, **kwargs):
        compiler = subprocess.Popen([sys.executable, "-c", "import time; print('fake compiler running', flush=True);"
                                     " time.sleep(300)"])
        pid_file.write_text(str(compiler.pid))
        compiler.wait()

    monkeypatch.setattr(sys.modules["torch_neuronx"], "trace", slow)
    module, inputs = _mlp()
    logged: list[str] = []
    out = tmp_path / "out"
    task = Task(compile_model, module, inputs, "inf2", out_dir=out, log=logged.append).start()
    deadline = time.monotonic() + 120
    while not pid_file.exists() and task.running and time.monotonic() < deadline:
        time.sleep(0.1)
    assert pid_file.exists(), task.error_text
    compiler_pid = int(pid_file.read_text())
    task.cancel()
    assert task.join(timeout=60)
    assert task.state == "cancelled", task.error_text
    deadline = time.monotonic() + 30
    while not _gone(compiler_pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _gone(compiler_pid)
    assert "fake compiler running" in logged
    assert list(out.iterdir()) == [] if out.exists() else True


def test_neuron_operator_reports(fake_neuronx, fake_neuron):
    module, inputs = _mlp()
    report = analyze(module, inputs, "inf2")
    assert report.support_percentage == 50.0 and report.unsupported == ["aten::relu"]
    assert report.operator_counts == {"aten::linear": 2, "aten::relu": 1}  # from the CPU trace
    assert [c[0] for c in fake_neuronx] == ["analyze"]
    frame = report.to_frame().set_index("operator")
    assert frame.loc["aten::relu", "supported"] == False and frame.loc["aten::linear", "supported"] == True  # noqa: E712

    report = analyze(module, inputs, "inf1")
    assert report.support_percentage == 66.67
    assert "66.67% of all operations" in report.log
    assert fake_neuron[0][0] == "analyze_model" and isinstance(fake_neuron[0][2], list)


@pytest.fixture
def fake_tnx(monkeypatch, no_override):
    """FAKE transformers_neuronx with a LlamaForSampling that records its lifecycle."""
    calls: list[tuple] = []

    class LlamaForSampling:
        @classmethod
        def from_pretrained(cls, path, **kwargs):
            calls.append(("from_pretrained", sorted(os.listdir(path)), kwargs))
            return cls()

        def cpu_compile(self):
            calls.append(("cpu_compile",))

        def to_neuron(self):
            calls.append(("to_neuron",))

        def save(self, directory):
            calls.append(("save",))
            os.makedirs(directory)
            with open(os.path.join(directory, "graph.neff"), "w") as handle:
                handle.write("fake")

    fake = types.ModuleType("transformers_neuronx")
    fake.LlamaForSampling = LlamaForSampling
    monkeypatch.setitem(sys.modules, "transformers_neuronx", fake)
    return calls


def test_tnx_without_device_cpu_compiles_and_saves(tmp_path, fake_tnx):
    pytest.importorskip("transformers")
    artifact = package_causal_lm(tiny_causal_lm("llama"), "inf2", out_dir=tmp_path, name="lm", tp_degree=2,
                                 has_device=False)
    (kind, files, kwargs), compile_call, save_call = fake_tnx
    assert kind == "from_pretrained" and "config.json" in files
    assert kwargs == {"batch_size": 1, "tp_degree": 2, "n_positions": 64, "amp": "f32"}
    assert compile_call == ("cpu_compile",) and save_call == ("save",)
    assert os.environ["NEURON_PLATFORM_TARGET_OVERRIDE"] == "inf2"
    assert (tmp_path / "lm-neuron" / "graph.neff").is_file() and (tmp_path / "lm" / "config.json").is_file()
    assert artifact.extra["model_class"] == "LlamaForSampling" and artifact.extra["compiled_dir"] == str(
        tmp_path / "lm-neuron")
    assert artifact.cpu_artifact.path == artifact.path and artifact.cpu_artifact.target == "cpu"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lm", "lm-neuron", "lm.workbench.json"]


def test_tnx_with_device_goes_to_neuron(tmp_path, fake_tnx):
    pytest.importorskip("transformers")
    package_causal_lm(tiny_causal_lm("llama"), "trn1", out_dir=tmp_path, tp_degree=1, amp="bf16", has_device=True)
    assert [c[0] for c in fake_tnx] == ["from_pretrained", "to_neuron", "save"]
    assert fake_tnx[0][2]["amp"] == "bf16"


def test_tnx_bad_settings_and_missing_sdk(tmp_path, fake_tnx, monkeypatch):
    pytest.importorskip("transformers")
    model = tiny_causal_lm("llama")
    with pytest.raises(ValueError, match="tp_degree 3 must divide the model's 2 attention heads"):
        package_causal_lm(model, "inf2", out_dir=tmp_path, tp_degree=3)
    with pytest.raises(ValueError, match="transformers-neuronx target 'inf1'"):
        package_causal_lm(model, "inf1", out_dir=tmp_path)
    monkeypatch.setitem(sys.modules, "transformers_neuronx", None)
    with pytest.raises(MissingSDKError, match="missing transformers-neuronx, neuronx-cc; pip install "
                                              "transformers-neuronx neuronx-cc from the AWS Neuron pip repository"):
        package_causal_lm(model, "inf2", out_dir=tmp_path)
    assert fake_tnx == [] and list(tmp_path.iterdir()) == []


def test_the_seam_refuses_unknown_targets():
    with pytest.raises(ValueError, match="unknown Neuron target 'inf3'"):
        seam.import_sdk("inf3")
    assert threading.active_count() >= 1
