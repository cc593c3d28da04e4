"""workbench.generate.pytorch_backend and templates/pytorch_runtime.py: Triton's PyTorch backend.

Golden files in tests/golden/pytorch_backend/ pin the config.pbtxt of every parameter, instance
kind and layout; they are rewritten only with WORKBENCH_REGENERATE_GOLDEN=1. The server tests run
the real tritonserver from the nvidia-pytriton wheel (it has no LibTorch backend, so the layouts
are served by the generated Python-backend twin) with real TorchScript archives, real state dicts
and a real torch.compile (inductor, which needs gcc), and compare with eager PyTorch in-process.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import tritonclient.http as httpclient
from tritonclient.grpc import model_config_pb2

from workbench.generate import pytorch_backend as ptb
from workbench.generate.config import from_text, parameters_of, read_config, to_text
from workbench.generate.repository import RepositoryError
from workbench.spec import ModelSpec

from test_libtorch_backend import _infer  # one HTTP helper for the twin and the real backend

GOLDEN = Path(__file__).parent / "golden" / "pytorch_backend"
REGENERATE = os.environ.get("WORKBENCH_REGENERATE_GOLDEN") == "1"

TS_SPEC = ModelSpec.parse(["INPUT__0,FP32,4", "INPUT__1,FP32,2"], ["OUTPUT__0,FP32,2", "OUTPUT__1,FP32,4"])
PT2_SPEC = ModelSpec.parse(["x,FP32,4"], ["relu,FP32,3", "total,FP32,1"])

# One non-default value per parameter: what a user would write to change the backend's behaviour.
TS_VALUES = {
    "DISABLE_OPTIMIZED_EXECUTION": "true",
    "INFERENCE_MODE": "false",
    "DISABLE_CUDNN": "true",
    "ENABLE_WEIGHT_SHARING": "true",
    "ENABLE_CACHE_CLEANING": "true",
    "INTER_OP_THREAD_COUNT": "1",
    "INTRA_OP_THREAD_COUNT": "2",
    "ENABLE_JIT_EXECUTOR": "false",
    "ENABLE_JIT_PROFILING": "false",
    "ENABLE_TENSOR_FUSER": "false",
}
PT2_VALUES = {
    "NUM_THREADS": "4",
    "NUM_INTEROP_THREADS": "2",
    "TORCH_COMPILE_OPTIONAL_PARAMETERS": {"backend": "inductor", "dynamic": False, "fullgraph": True},
    "EXECUTION_ENV_PATH": "$$TRITON_MODEL_DIRECTORY/pytorch_env.tar.gz",
}


def _golden_cases() -> dict[str, ptb.ModelConfig]:
    cases = {"torchscript_default": ptb.build_pytorch_config("ts_model", TS_SPEC)}
    for key, value in TS_VALUES.items():
        cases[f"torchscript_{key.lower()}"] = ptb.build_pytorch_config("ts_model", TS_SPEC, parameters={key: value})
    cases["torchscript_kind_gpu"] = ptb.build_pytorch_config("ts_model", TS_SPEC, instance_kind="KIND_GPU",
                                                             instance_count=2, gpus=[0, 1])
    cases["torchscript_kind_model"] = ptb.build_pytorch_config("ts_model", TS_SPEC, instance_kind="KIND_MODEL")
    cases["torchscript_batched"] = ptb.build_pytorch_config(
        "ts_model", TS_SPEC, max_batch_size=16, dynamic_batching=True, preferred_batch_sizes=[4, 8],
        max_queue_delay_us=100, instance_count=2)
    cases["torchscript_strings"] = ptb.build_pytorch_config(
        "ts_strings", ModelSpec.parse(["INPUT__0,BYTES,-1"], ["OUTPUT__0,BYTES,-1"]))
    cases["torchscript_strings_batched"] = ptb.build_pytorch_config(
        "ts_strings", ModelSpec.parse(["INPUT__0,BYTES,1"], ["OUTPUT__0,BYTES,1"]), max_batch_size=8)
    cases["pytorch2_default"] = ptb.build_pytorch_config("pt2_model", PT2_SPEC, layout=ptb.PYTORCH2)
    for key, value in PT2_VALUES.items():
        cases[f"pytorch2_{key.lower()}"] = ptb.build_pytorch_config(
            "pt2_model", PT2_SPEC, layout=ptb.PYTORCH2, parameters={key: value})
    twin_ts, _ = ptb.emulation_config(cases["torchscript_kind_gpu"], gpu_available=False)
    cases["twin_torchscript_kind_gpu"] = twin_ts
    twin_pt2, _ = ptb.emulation_config(cases["pytorch2_torch_compile_optional_parameters"], gpu_available=False)
    cases["twin_pytorch2_torch_compile"] = twin_pt2
    return cases


CASES = _golden_cases()


@pytest.mark.parametrize("case", sorted(CASES))
def test_config_matches_golden_file(case):
    text = to_text(CASES[case])
    path = GOLDEN / f"{case}.pbtxt"
    if REGENERATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert path.is_file(), f"{path} is missing; run with WORKBENCH_REGENERATE_GOLDEN=1 once and review it"
    assert text == path.read_text(encoding="utf-8")
    assert from_text(text) == CASES[case], "the golden text must parse back to the same config"


def test_every_parameter_has_a_golden_case():
    covered = set()
    for case in CASES.values():
        covered |= set(parameters_of(case))
    assert set(ptb.TORCHSCRIPT_PARAMETERS) <= covered
    assert set(ptb.PYTORCH2_PARAMETERS) <= covered


def test_golden_files_are_real_backend_configs():
    """The user-facing goldens pass the checker when read back from disk; the twins are Python-backend."""
    for case in CASES:
        cfg = read_config(GOLDEN / f"{case}.pbtxt")
        if case.startswith("twin_"):
            assert cfg.backend == "python" and not cfg.runtime
            assert parameters_of(cfg)["PYTORCH_LAYOUT"] in (ptb.TORCHSCRIPT, ptb.PYTORCH2)
        else:
            assert ptb.check_pytorch_config(cfg).backend == "pytorch"


def test_layouts_and_defaults():
    ts, pt2 = CASES["torchscript_default"], CASES["pytorch2_default"]
    assert (ts.runtime, ptb.layout_of(ts)) == ("", ptb.TORCHSCRIPT)
    assert (pt2.runtime, ptb.layout_of(pt2)) == ("model.py", ptb.PYTORCH2)
    assert ts.instance_group[0].kind == model_config_pb2.ModelInstanceGroup.KIND_CPU
    torch_compile = parameters_of(CASES["pytorch2_torch_compile_optional_parameters"])["TORCH_COMPILE_OPTIONAL_PARAMETERS"]
    assert json.loads(torch_compile) == {"backend": "inductor", "dynamic": False, "fullgraph": True}


@pytest.mark.parametrize("value", ["true", "FALSE", "On", "off", "1", "0"])
def test_boolean_spellings_libtorch_accepts(value):
    cfg = ptb.build_pytorch_config("m", TS_SPEC, parameters={"INFERENCE_MODE": value})
    assert parameters_of(cfg)["INFERENCE_MODE"] == value


def test_python_values_become_the_backend_spelling():
    cfg = ptb.build_pytorch_config("m", TS_SPEC, parameters={"INFERENCE_MODE": False, "INTRA_OP_THREAD_COUNT": 3})
    assert parameters_of(cfg) == {"INFERENCE_MODE": "false", "INTRA_OP_THREAD_COUNT": "3"}


@pytest.mark.parametrize("layout,key,value,expected", [
    (ptb.TORCHSCRIPT, "INFERENCE_MODE", "yes", "parameter INFERENCE_MODE = 'yes' is not a boolean"),
    (ptb.TORCHSCRIPT, "DISABLE_OPTIMIZED_EXECUTION", "", "parameter DISABLE_OPTIMIZED_EXECUTION = '' is not a boolean"),
    (ptb.TORCHSCRIPT, "ENABLE_JIT_PROFILING", "enabled", "parameter ENABLE_JIT_PROFILING = 'enabled' is not a boolean"),
    (ptb.TORCHSCRIPT, "INTRA_OP_THREAD_COUNT", "-1", "parameter INTRA_OP_THREAD_COUNT = -1 must be at least 1"),
    (ptb.TORCHSCRIPT, "INTER_OP_THREAD_COUNT", "0", "parameter INTER_OP_THREAD_COUNT = 0 must be at least 1"),
    (ptb.TORCHSCRIPT, "INTER_OP_THREAD_COUNT", "two", "parameter INTER_OP_THREAD_COUNT = 'two' is not an integer"),
    (ptb.TORCHSCRIPT, "INTRA_OP_THREADS", "2", "parameter INTRA_OP_THREADS is not read by the PyTorch backend"),
    (ptb.TORCHSCRIPT, "NUM_THREADS", "2", "parameter NUM_THREADS belongs to the PyTorch 2 layout"),
    (ptb.PYTORCH2, "INTRA_OP_THREAD_COUNT", "2", "parameter INTRA_OP_THREAD_COUNT belongs to the TorchScript layout"),
    (ptb.PYTORCH2, "NUM_THREADS", "-4", "parameter NUM_THREADS = -4 must be at least 1"),
    (ptb.PYTORCH2, "NUM_INTEROP_THREADS", "1.5", "parameter NUM_INTEROP_THREADS = '1.5' is not an integer"),
    (ptb.PYTORCH2, "TORCH_COMPILE_OPTIONAL_PARAMETERS", "{disable: true}",
     "TORCH_COMPILE_OPTIONAL_PARAMETERS is not valid JSON"),
    (ptb.PYTORCH2, "TORCH_COMPILE_OPTIONAL_PARAMETERS", "[1, 2]", "must be a JSON object"),
    (ptb.PYTORCH2, "TORCH_COMPILE_OPTIONAL_PARAMETERS", '{"model": "x"}', "unknown torch.compile option 'model'"),
    (ptb.PYTORCH2, "TORCH_COMPILE_OPTIONAL_PARAMETERS", '{"fullgraph": "yes"}', "'fullgraph' must be true/false, got \"yes\""),
    (ptb.PYTORCH2, "TORCH_COMPILE_OPTIONAL_PARAMETERS", '{"disable": 1}', "'disable' must be true/false, got 1"),
    (ptb.PYTORCH2, "TORCH_COMPILE_OPTIONAL_PARAMETERS", '{"dynamic": "auto"}', "'dynamic' must be true/false or null"),
    (ptb.PYTORCH2, "TORCH_COMPILE_OPTIONAL_PARAMETERS", '{"backend": 3}', "'backend' must be a string"),
    (ptb.PYTORCH2, "TORCH_COMPILE_OPTIONAL_PARAMETERS", '{"backend": " "}', "'backend' is empty"),
    (ptb.PYTORCH2, "TORCH_COMPILE_OPTIONAL_PARAMETERS", '{"options": [1]}', "'options' must be an object"),
    (ptb.PYTORCH2, "TORCH_COMPILE_OPTIONAL_PARAMETERS", '{"mode": "fast"}', "mode 'fast' is not one of default"),
    (ptb.PYTORCH2, "TORCH_COMPILE_OPTIONAL_PARAMETERS", '{"mode": "default", "options": {}}', "give 'mode' or 'options'"),
])
def test_invalid_parameter_values_name_the_key(layout, key, value, expected):
    spec = TS_SPEC if layout == ptb.TORCHSCRIPT else PT2_SPEC
    with pytest.raises(ptb.PyTorchConfigError) as err:
        ptb.build_pytorch_config("m", spec, layout=layout, parameters={key: value})
    assert expected in str(err.value)


def test_compile_modes_are_torchs_own():
    """torch 2.13's error for a bad mode lists its modes; "lite" is one of them (difference #30)."""
    from workbench.generate.pytorch_backend.layouts import TORCH_COMPILE_MODES, parameter_problems

    with pytest.raises(RuntimeError) as err:
        torch.compile(torch.nn.Identity(), mode="fastest")
    listed = str(err.value).split("should be one of:")[1]
    assert sorted(m.strip() for m in listed.split(",")) == sorted(TORCH_COMPILE_MODES)
    assert not parameter_problems("TORCH_COMPILE_OPTIONAL_PARAMETERS", '{"mode": "lite"}', ptb.PYTORCH2)


def test_every_problem_is_reported_at_once():
    with pytest.raises(ptb.PyTorchConfigError) as err:
        ptb.build_pytorch_config("m", TS_SPEC, parameters={"INFERENCE_MODE": "maybe", "INTRA_OP_THREAD_COUNT": "0"})
    assert "INFERENCE_MODE" in str(err.value) and "INTRA_OP_THREAD_COUNT" in str(err.value)


def test_instance_kinds():
    with pytest.raises(ptb.PyTorchConfigError, match="instance kind 'KIND_AUTO' is not one the PyTorch backend supports"):
        ptb.build_pytorch_config("m", TS_SPEC, instance_kind="KIND_AUTO")
    with pytest.raises(ptb.PyTorchConfigError, match=r"KIND_CPU cannot list gpus \[0\]"):
        ptb.build_pytorch_config("m", TS_SPEC, instance_kind="KIND_CPU", gpus=[0])
    # A hand-written config without `kind` reads back as KIND_AUTO, which Triton resolves itself.
    text = to_text(CASES["torchscript_default"]).replace("  kind: KIND_CPU\n", "")
    assert ptb.check_pytorch_config(from_text(text)).instance_group[0].kind == 0


def test_torchscript_names_must_be_indexed():
    bad = ModelSpec.parse(["x,FP32,4"], ["OUTPUT__0,FP32,2"])
    with pytest.raises(ptb.PyTorchConfigError, match="input 'x': PyTorch models need names of the form NAME__i"):
        ptb.build_pytorch_config("m", bad)
    gap = ModelSpec.parse(["INPUT__0,FP32,4", "INPUT__2,FP32,4"], ["OUTPUT__0,FP32,2"])
    with pytest.raises(ptb.PyTorchConfigError, match=r"input indices must cover 0..1: missing index \[1\]"):
        ptb.build_pytorch_config("m", gap)
    # The PyTorch 2 runtime passes inputs in config order, so any names work there.
    assert ptb.build_pytorch_config("m", bad, layout=ptb.PYTORCH2).input[0].name == "x"


def test_read_configs_may_use_libtorchs_other_naming_conventions():
    """Hand-written configs may name inputs after forward()'s arguments or rely on config order;
    LibTorch accepts both. Only all-indexed names with a hole are an error without the model."""
    text = to_text(CASES["torchscript_default"])
    by_argument = text.replace('"INPUT__0"', '"a"').replace('"INPUT__1"', '"b"')
    assert [i.name for i in ptb.check_pytorch_config(from_text(by_argument)).input] == ["a", "b"]
    holed = text.replace('"OUTPUT__1"', '"OUTPUT__2"')
    with pytest.raises(ptb.PyTorchConfigError, match=r"output indices \[0, 2\] of the NAME__i names must cover 0..1"):
        ptb.check_pytorch_config(from_text(holed))


def test_torchscript_inputs_must_fit_forward():
    scripted = torch.jit.script(AddSub().eval())
    three = ModelSpec.parse(["INPUT__0,FP32,4", "INPUT__1,FP32,2", "INPUT__2,FP32,2"], ["OUTPUT__0,FP32,2"])
    with pytest.raises(ptb.PyTorchConfigError, match=r"forward\(a, b\) takes 2 tensor\(s\) but the config declares 3"):
        ptb.torchscript_files(ptb.build_pytorch_config("m", three), scripted)
    only_a = ptb.ModelConfig()
    only_a.CopyFrom(CASES["torchscript_default"])
    del only_a.input[1]
    only_a.input[0].name = "a"
    with pytest.raises(ptb.PyTorchConfigError, match=r"forward\(a, b\) needs argument\(s\) \['b'\]"):
        ptb.torchscript_files(only_a, scripted)


def test_string_tensors_only_one_dimensional():
    two_d = ModelSpec.parse(["INPUT__0,BYTES,2x3"], ["OUTPUT__0,FP32,1"])
    with pytest.raises(ptb.PyTorchConfigError, match=r"input 'INPUT__0': TYPE_STRING tensors must be 1-D .* 2-D \[2, 3\]"):
        ptb.build_pytorch_config("m", two_d)
    batched_wide = ModelSpec.parse(["INPUT__0,BYTES,4"], ["OUTPUT__0,FP32,1"])
    with pytest.raises(ptb.PyTorchConfigError, match=r"2-D \[-1, 4\]; use dims: \[1\] with reshape"):
        ptb.build_pytorch_config("m", batched_wide, max_batch_size=4)
    batched = CASES["torchscript_strings_batched"]
    assert batched.input[0].HasField("reshape") and list(batched.input[0].reshape.shape) == []
    with pytest.raises(ptb.PyTorchConfigError, match="output 'OUTPUT__0': TYPE_STRING is not supported by the PyTorch 2"):
        ptb.build_pytorch_config("m", ModelSpec.parse(["x,FP32,4"], ["OUTPUT__0,BYTES,-1"]), layout=ptb.PYTORCH2)


def test_wrong_backend_and_runtime_are_refused():
    cfg = ptb.ModelConfig()
    cfg.CopyFrom(CASES["torchscript_default"])
    cfg.backend, cfg.runtime = "onnxruntime", "libtorch_custom.so"
    problems = ptb.pytorch_problems(cfg)
    assert any("backend is 'onnxruntime'" in p for p in problems)
    assert any("runtime 'libtorch_custom.so' is not supported" in p for p in problems)


# --- writing the layouts ----------------------------------------------------------------------

class AddSub(torch.nn.Module):
    """Two inputs, two outputs, in index order: OUTPUT__0 = lin(a) + b, OUTPUT__1 = a - sum(b)."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 2)

    def forward(self, a, b):
        return self.lin(a) + b, a - b.sum(dim=-1, keepdim=True)


PT2_SOURCE = '''
import torch
from torch import nn


class TinyNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        y = self.fc(x)
        return torch.relu(y), y.sum(dim=1, keepdim=True)
'''


def _tiny_net():
    namespace: dict = {}
    exec(PT2_SOURCE, namespace)
    torch.manual_seed(7)
    return namespace["TinyNet"]().eval()


def test_torchscript_writer_refuses_eager_modules_and_state_dicts(tmp_path):
    cfg = CASES["torchscript_default"]
    with pytest.raises(ptb.PyTorchConfigError, match="AddSub is not TorchScript"):
        ptb.write_torchscript_model(tmp_path, cfg, AddSub())
    state = tmp_path / "weights.pt"
    torch.save(AddSub().state_dict(), state)
    with pytest.raises(ptb.PyTorchConfigError, match="is not a TorchScript archive"):
        ptb.write_torchscript_model(tmp_path, cfg, state)
    with pytest.raises(ptb.PyTorchConfigError, match="use pytorch2_files"):
        ptb.torchscript_files(CASES["pytorch2_default"], torch.jit.script(AddSub()))
    assert not (tmp_path / "ts_model").exists(), "nothing may be written when the input is refused"


def test_torchscript_writer_keeps_the_existing_directory(tmp_path):
    cfg = CASES["torchscript_default"]
    scripted = torch.jit.script(AddSub().eval())
    first = ptb.write_torchscript_model(tmp_path, cfg, scripted)
    assert (first.path / "1" / "model.pt").is_file() and read_config(first.path) == cfg
    (first.path / "notes.txt").write_text("mine")
    with pytest.raises(RepositoryError, match="already exists"):
        ptb.write_torchscript_model(tmp_path, cfg, scripted)
    second = ptb.write_torchscript_model(tmp_path, cfg, first.path / "1" / "model.pt", overwrite=True)
    assert second.backup is not None and (second.backup / "notes.txt").read_text() == "mine"


@pytest.mark.parametrize("source,state,expected", [
    ("import torch\nclass Net(torch.nn.Module)\n    pass\n", None, "line 2"),
    ("import torch\nx = 1\n", None, "defines no torch.nn.Module subclass"),
    ("import torch\nclass Net(torch.nn.Module):\n    def __init__(self, width):\n        super().__init__()\n",
     None, "class Net must be constructible without arguments"),
    ("import torch\nfrom torch.nn import Linear\nclass Net(torch.nn.Module):\n    pass\n",
     None, "which is the imported 'Linear', not the file's own Net"),
    ("import missing_package_xyz\n", None, "fails to import: ModuleNotFoundError"),
    (PT2_SOURCE, {"fc.weight": torch.zeros(2, 2)}, "model.pt does not fit class TinyNet"),
])
def test_pytorch2_writer_checks_the_module_before_writing(tmp_path, source, state, expected):
    with pytest.raises(ptb.PyTorchConfigError, match=re.escape(expected)):
        ptb.write_pytorch2_model(tmp_path, CASES["pytorch2_default"], source, state_dict=state)
    assert not (tmp_path / "pt2_model").exists()


def test_pytorch2_writer_refuses_a_pickled_module_as_weights(tmp_path):
    pickled = tmp_path / "whole_model.pt"
    torch.save(torch.nn.Linear(4, 3), pickled)  # the module object, not its state dict
    with pytest.raises(ptb.PyTorchConfigError, match="model.pt is not a state dict torch.load can read"):
        ptb.write_pytorch2_model(tmp_path / "repo", CASES["pytorch2_default"], PT2_SOURCE, state_dict=pickled)
    assert not (tmp_path / "repo").exists()


def test_pytorch2_layout_on_disk_and_eager_reference(tmp_path):
    net = _tiny_net()
    source = tmp_path / "tiny.py"
    source.write_text(PT2_SOURCE)
    result = ptb.write_pytorch2_model(tmp_path / "repo", CASES["pytorch2_default"], source, state_dict=net)
    version = result.path / "1"
    assert sorted(p.name for p in version.iterdir()) == ["model.pt", "model.py"]
    assert (version / "model.py").read_text() == PT2_SOURCE
    loaded = ptb.load_pytorch2_module(version)
    x = torch.randn(2, 4)
    with torch.no_grad():
        for got, want in zip(loaded(x), net(x)):
            torch.testing.assert_close(got, want)


# --- serving plan and twin ----------------------------------------------------------------------

def test_libtorch_layouts_read_the_backend_directory(tmp_path):
    assert ptb.libtorch_layouts(None) == ()
    assert ptb.libtorch_layouts(tmp_path) == ()
    (tmp_path / "pytorch").mkdir()
    assert ptb.libtorch_layouts(tmp_path) == (), "a pytorch/ folder without the library serves nothing natively"
    (tmp_path / "pytorch" / "libtriton_pytorch.so").write_bytes(b"")
    assert ptb.libtorch_layouts(tmp_path) == (ptb.TORCHSCRIPT,)
    (tmp_path / "pytorch" / "model.py").write_text("")
    (tmp_path / "python").mkdir()
    assert ptb.libtorch_layouts(tmp_path) == (ptb.TORCHSCRIPT,), "the PyTorch 2 runtime needs the python backend"
    (tmp_path / "python" / "libtriton_python.so").write_bytes(b"")
    assert ptb.libtorch_layouts(tmp_path) == (ptb.TORCHSCRIPT, ptb.PYTORCH2)
    (tmp_path / "pytorch" / "libtriton_pytorch.so").unlink()
    assert ptb.libtorch_layouts(tmp_path) == (ptb.PYTORCH2,)


def test_preview_says_which_backend_serves(tmp_path):
    cfg = CASES["torchscript_kind_gpu"]
    emulated = ptb.preview_serving(cfg, gpu_available=False)
    assert emulated.served_as == ptb.SERVED_AS_PYTHON == "Python backend emulating the PyTorch backend"
    assert "served as: Python backend emulating the PyTorch backend" in emulated.text()
    assert any(n.startswith("KIND_GPU instance group: no GPU on this machine, so Triton refuses to load it")
               for n in emulated.notes), emulated.notes
    assert "kind: KIND_GPU" in emulated.served_config_text, "the twin is not rewritten to KIND_CPU: Triton refuses both"
    assert 'backend: "python"' in emulated.served_config_text and 'backend: "pytorch"' in emulated.config_text
    (tmp_path / "pytorch").mkdir()
    (tmp_path / "pytorch" / "libtriton_pytorch.so").write_bytes(b"")
    real = ptb.preview_serving(cfg, backend_dir=tmp_path)
    assert real.served_as == ptb.SERVED_AS_LIBTORCH == "PyTorch backend (LibTorch)"
    assert real.served_config_text == real.config_text and "twin" not in real.text()
    assert f"backend directory {tmp_path}" in real.notes
    assert "KIND_GPU: Triton refuses it on a machine without a GPU" in real.notes
    # where users choose a backend for a sweep (every variant a reload): what a load costs on each
    assert any(n.startswith("load time: LibTorch loads the archive inside the server") for n in real.notes)
    assert any(n.startswith("load time: the twin runs in a Python backend stub") for n in emulated.notes)
    pt2 = ptb.preview_serving(CASES["pytorch2_default"], gpu_available=False)
    assert any(n.startswith("load time: the twin runs") for n in pt2.notes)


def test_plan_serving_real_backend_or_twin(tmp_path):
    repo, twins, backends = tmp_path / "repo", tmp_path / "twins", tmp_path / "backends"
    ptb.write_torchscript_model(repo, CASES["torchscript_default"], torch.jit.script(AddSub().eval()))
    (backends / "pytorch").mkdir(parents=True)
    (backends / "pytorch" / "libtriton_pytorch.so").write_bytes(b"")
    real = ptb.plan_serving(repo / "ts_model", backend_dir=backends, twin_repository=twins)
    assert (real.served_as, real.repository) == (ptb.SERVED_AS_LIBTORCH, repo)
    assert not twins.exists(), "the real backend needs no twin"
    twin = ptb.plan_serving(repo / "ts_model", twin_repository=twins)
    assert (twin.served_as, twin.repository) == (ptb.SERVED_AS_PYTHON, twins)
    assert "served as: Python backend emulating the PyTorch backend" in twin.describe()
    twin_dir = twins / "ts_model"
    assert (twin_dir / "1" / "model.py").read_bytes() == ptb.RUNTIME_TEMPLATE.read_bytes()
    assert (twin_dir / "1" / "model.pt").read_bytes() == (repo / "ts_model" / "1" / "model.pt").read_bytes()
    twin_cfg = read_config(twin_dir)
    assert parameters_of(twin_cfg)["PYTORCH_LAYOUT"] == "torchscript"
    assert read_config(repo / "ts_model") == CASES["torchscript_default"], "the user's directory is untouched"
    ptb.plan_serving(repo / "ts_model", twin_repository=twins)  # regenerating replaces the twin
    assert sorted(p.name for p in twins.iterdir()) == ["ts_model"], "no backups of derived twins pile up"


def test_twin_of_a_pytorch2_layout_keeps_the_version_folder(tmp_path):
    """The user's model.py moves aside for the runtime; weights and files it reads come along."""
    result = ptb.write_pytorch2_model(tmp_path / "repo", CASES["pytorch2_default"], PT2_SOURCE, state_dict=_tiny_net())
    (result.path / "1" / "labels.txt").write_text("cat\ndog\n")
    twin_dir, notes = ptb.write_emulation_twin(result.path, tmp_path / "twins", gpu_available=False)
    version = twin_dir / "1"
    assert sorted(p.name for p in version.iterdir()) == ["labels.txt", "model.pt", "model.py", "pytorch_module.py"]
    assert (version / "pytorch_module.py").read_text() == PT2_SOURCE
    assert (version / "model.py").read_bytes() == ptb.RUNTIME_TEMPLATE.read_bytes()
    assert parameters_of(read_config(twin_dir))["PYTORCH_MODEL_FILENAME"] == "pytorch_module.py"
    (result.path / "1" / "pytorch_module.py").write_text("")
    with pytest.raises(ptb.PyTorchConfigError, match="would clash with the twin's pytorch_module.py"):
        ptb.write_emulation_twin(result.path, tmp_path / "twins", gpu_available=False)


def test_twin_notes_what_differs_from_libtorch():
    cfg = ptb.build_pytorch_config("m", TS_SPEC, instance_count=2, parameters={
        "INTRA_OP_THREAD_COUNT": 1, "ENABLE_WEIGHT_SHARING": True, "ENABLE_CACHE_CLEANING": True})
    twin, notes = ptb.emulation_config(cfg, gpu_available=False)
    assert any(n.startswith("INTRA_OP_THREAD_COUNT: the twin sets torch's threads in each instance's own process")
               and "OMP_NUM_THREADS" in n for n in notes), notes
    assert any("ENABLE_WEIGHT_SHARING is not emulated" in n for n in notes)
    assert "ENABLE_CACHE_CLEANING has no effect without a GPU" in notes
    assert parameters_of(twin)["INTRA_OP_THREAD_COUNT"] == "1"


# --- sweep variants -----------------------------------------------------------------------------

def test_sweep_variant_maps_friendly_settings_per_layout():
    ts = CASES["torchscript_default"]
    variant = ptb.sweep_variant(ts, {"threads": 2, "inference_mode": False, "optimized_execution": False,
                                     "instance_count": 3})
    assert parameters_of(variant) == {"INTRA_OP_THREAD_COUNT": "2", "INFERENCE_MODE": "false",
                                      "DISABLE_OPTIMIZED_EXECUTION": "true"}
    assert variant.instance_group[0].count == 3
    assert parameters_of(ts) == {}, "the base config is not modified"
    pt2 = CASES["pytorch2_torch_compile_optional_parameters"]
    off = ptb.sweep_variant(pt2, {"threads": 1, "torch_compile": False}, name="pt2_eager")
    assert off.name == "pt2_eager" and parameters_of(off)["NUM_THREADS"] == "1"
    assert json.loads(parameters_of(off)["TORCH_COMPILE_OPTIONAL_PARAMETERS"]) == {
        "backend": "inductor", "dynamic": False, "fullgraph": True, "disable": True}
    raw = ptb.sweep_variant(pt2, {"NUM_INTEROP_THREADS": 2})
    assert parameters_of(raw)["NUM_INTEROP_THREADS"] == "2"


@pytest.mark.parametrize("settings,expected", [
    ({"inference_mode": False}, "sweep setting 'inference_mode' does not exist for the pytorch2 layout"),
    ({"threads": 0}, "parameter NUM_THREADS = 0 must be at least 1"),
    ({"speed": "max"}, "sweep setting 'speed' is neither a pytorch2 parameter"),
    ({"torch_compile": {"mode": "turbo"}}, "mode 'turbo' is not one of"),
])
def test_sweep_variant_errors(settings, expected):
    with pytest.raises(ptb.PyTorchConfigError, match=re.escape(expected)):
        ptb.sweep_variant(CASES["pytorch2_default"], settings)


def test_sweep_grid_feeds_the_sweep_plan():
    ts, pt2 = CASES["torchscript_default"], CASES["pytorch2_torch_compile_optional_parameters"]
    assert ptb.sweep_grid(ts, {"threads": [1, 2], "inference_mode": [True, False]}) == {
        "INTRA_OP_THREAD_COUNT": ("1", "2"), "INFERENCE_MODE": ("true", "false")}
    compile_grid = ptb.sweep_grid(pt2, {"torch_compile": [True, False]})["TORCH_COMPILE_OPTIONAL_PARAMETERS"]
    assert [json.loads(v)["disable"] for v in compile_grid] == [False, True]
    with pytest.raises(ptb.PyTorchConfigError, match="parameter INTRA_OP_THREAD_COUNT = 0 must be at least 1"):
        ptb.sweep_grid(ts, {"threads": [2, 0]})
    with pytest.raises(ptb.PyTorchConfigError, match="with the sweep's allocations"):
        ptb.sweep_grid(ts, {"instance_count": [1, 2]})


def test_variant_label():
    assert ptb.variant_label({"torch_compile": False, "threads": 2}) == "threads=2,torch_compile=off"


# --- the real server --------------------------------------------------------------------------

class Upper(torch.nn.Module):
    """Strings in, strings out: LibTorch passes a 1-D TYPE_STRING tensor as a List[str]."""

    def forward(self, words: list[str]) -> list[str]:
        return [word.upper() + "!" for word in words]


PT2_COMPILE = {"backend": "inductor", "dynamic": False}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """One tritonserver for the module, serving a PyTorch 2 layout (state dict + torch.compile), a
    TorchScript layout (inputs declared out of index order) and a TorchScript string model, each
    planned against the server's real backend directory."""
    from workbench.server import TritonServer, find_tritonserver

    root = tmp_path_factory.mktemp("pytorch_backend")
    repo, twins = root / "model_repository", root / "served"
    net = _tiny_net()
    pt2_cfg = ptb.build_pytorch_config("tiny_pt2", PT2_SPEC, layout=ptb.PYTORCH2, max_batch_size=8,
                                       parameters={"NUM_THREADS": 2, "TORCH_COMPILE_OPTIONAL_PARAMETERS": PT2_COMPILE})
    ptb.write_pytorch2_model(repo, pt2_cfg, PT2_SOURCE, state_dict=net)
    torch.manual_seed(3)
    add_sub = torch.jit.script(AddSub().eval())
    swapped = ModelSpec.parse(["INPUT__1,FP32,2", "INPUT__0,FP32,4"], ["OUTPUT__1,FP32,4", "OUTPUT__0,FP32,2"])
    ts_cfg = ptb.build_pytorch_config("add_sub_ts", swapped, max_batch_size=8, parameters={
        "INTRA_OP_THREAD_COUNT": 1, "INFERENCE_MODE": False, "DISABLE_OPTIMIZED_EXECUTION": True})
    ptb.write_torchscript_model(repo, ts_cfg, add_sub)
    by_argument = ptb.ModelConfig()
    by_argument.CopyFrom(ts_cfg)
    by_argument.name = "add_sub_args"
    for entry, name in zip(by_argument.input, ("b", "a")):
        entry.name = name
    ptb.write_torchscript_model(repo, by_argument, add_sub)
    str_cfg = ptb.build_pytorch_config("upper_ts", ModelSpec.parse(["INPUT__0,BYTES,-1"], ["OUTPUT__0,BYTES,-1"]))
    ptb.write_torchscript_model(repo, str_cfg, torch.jit.script(Upper()))

    backend_dir = find_tritonserver().backend_dir
    plans = {name: ptb.plan_serving(repo / name, backend_dir=backend_dir, twin_repository=twins)
             for name in ("tiny_pt2", "add_sub_ts", "add_sub_args", "upper_ts")}
    assert len({plan.repository for plan in plans.values()}) == 1
    server = TritonServer(next(iter(plans.values())).repository)
    server.start()
    try:
        yield {"server": server, "plans": plans, "net": net, "add_sub": add_sub, "ts_cfg": ts_cfg}
    finally:
        server.stop()


def _log_since(server, start: int) -> list[str]:
    return server.log_tail(1_000_000)[start:]


def _emulation_line(server, start: int, model: str) -> str:
    """The model's settings line, logged by its instance since ``start``: the stub's log messages
    reach the server's log after the load is answered, so it is waited for (10 s at most)."""
    deadline = time.monotonic() + 10
    while True:
        lines = _log_since(server, start)
        found = [line for line in lines if f"PyTorch emulation of '{model}'" in line]
        if found or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert found, f"no settings line for {model} in the server log:\n" + "\n".join(lines[-30:])
    return found[-1]


@pytest.mark.server
def test_pytorch2_layout_with_state_dict_and_torch_compile_matches_eager(served):
    """Inductor compiles inside the model instance (gcc is on this machine) on the first request."""
    server, plan = served["server"], served["plans"]["tiny_pt2"]
    import shutil

    assert shutil.which("gcc"), "torch.compile's inductor backend needs a C compiler"
    assert plan.served_as == ptb.SERVED_AS_PYTHON, "the wheel's tritonserver has no LibTorch backend"
    start = len(server.log_tail(1_000_000))
    server.load("tiny_pt2")
    line = _emulation_line(server, start, "tiny_pt2")
    assert "layout=pytorch2" in line and "intra_op_threads=2" in line and "module_class=TinyNet" in line
    assert re.search(r'torch_compile=\{\\?"backend\\?":\\?"inductor\\?",\\?"dynamic\\?":false\}', line), line
    x = np.random.default_rng(1).standard_normal((3, 4)).astype(np.float32)
    got = _infer(server, "tiny_pt2", {"x": x}, ["relu", "total"])
    with torch.no_grad():
        relu, total = served["net"](torch.from_numpy(x))
    np.testing.assert_allclose(got["relu"], relu.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got["total"], total.numpy(), rtol=1e-5, atol=1e-5)
    assert server.model_config("tiny_pt2")["backend"] == "python"
    server.unload("tiny_pt2")


BRANCHY_SOURCE = """
import torch


class Branchy(torch.nn.Module):
    def forward(self, x):
        if x.sum() > 0:  # data-dependent branch: a graph break for torch.compile
            return x + 1
        return x - 1
"""


@pytest.mark.server
def test_torch_compile_options_are_honoured(served, tmp_path):
    """fullgraph=true makes torch.compile refuse a graph break, so the request fails with dynamo's
    reason; the sweep's torch_compile=off variant of the same model serves the eager result."""
    from tritonclient.utils import InferenceServerException

    server, twins = served["server"], served["plans"]["tiny_pt2"].repository
    spec = ModelSpec.parse(["x,FP32,4"], ["y,FP32,4"])
    cfg = ptb.build_pytorch_config("branchy", spec, layout=ptb.PYTORCH2,
                                   parameters={"TORCH_COMPILE_OPTIONAL_PARAMETERS": {"fullgraph": True}})
    ptb.write_pytorch2_model(tmp_path, cfg, BRANCHY_SOURCE)
    ptb.plan_serving(tmp_path / "branchy", twin_repository=twins)
    server.load("branchy")
    x = np.arange(4, dtype=np.float32)
    with pytest.raises(InferenceServerException, match="Data-dependent branching"):
        _infer(server, "branchy", {"x": x}, ["y"])
    eager, _ = ptb.emulation_config(ptb.sweep_variant(cfg, {"torch_compile": False}), gpu_available=False)
    server.load("branchy", config=eager)
    np.testing.assert_array_equal(_infer(server, "branchy", {"x": x}, ["y"])["y"], x + 1)
    np.testing.assert_array_equal(_infer(server, "branchy", {"x": -x - 1}, ["y"])["y"], -x - 2)
    server.unload("branchy")


@pytest.mark.server
def test_torchscript_layout_passes_inputs_by_index(served):
    """The config lists INPUT__1 before INPUT__0 (and OUTPUT__1 first); the index decides."""
    server = served["server"]
    start = len(server.log_tail(1_000_000))
    server.load("add_sub_ts")
    line = _emulation_line(server, start, "add_sub_ts")
    assert "layout=torchscript" in line and "intra_op_threads=1" in line
    assert "inference_mode=False" in line and "optimized_execution=False" in line
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((2, 4)).astype(np.float32), rng.standard_normal((2, 2)).astype(np.float32)
    got = _infer(server, "add_sub_ts", {"INPUT__1": b, "INPUT__0": a}, ["OUTPUT__0", "OUTPUT__1"])
    _assert_matches_add_sub(got, served["add_sub"], a, b)


def _assert_matches_add_sub(got, module, a, b):
    """Served OUTPUT__0/1 equal the eager module's outputs for the same inputs."""
    with torch.no_grad():
        out0, out1 = module(torch.from_numpy(a), torch.from_numpy(b))
    np.testing.assert_allclose(got["OUTPUT__0"], out0.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got["OUTPUT__1"], out1.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.server
def test_torchscript_inputs_by_forward_argument_name(served):
    """LibTorch's first naming rule: inputs named after forward()'s arguments, in any order."""
    server = served["server"]
    server.load("add_sub_args")
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((1, 4)).astype(np.float32), rng.standard_normal((1, 2)).astype(np.float32)
    got = _infer(server, "add_sub_args", {"a": a, "b": b}, ["OUTPUT__0", "OUTPUT__1"])
    _assert_matches_add_sub(got, served["add_sub"], a, b)
    server.unload("add_sub_args")


@pytest.mark.server
def test_torchscript_strings_travel_as_lists(served):
    server = served["server"]
    server.load("upper_ts")
    words = np.array([b"triton", "pytorch".encode()], dtype=np.object_)
    got = _infer(server, "upper_ts", {"INPUT__0": words}, ["OUTPUT__0"])
    assert got["OUTPUT__0"].tolist() == [b"TRITON!", b"PYTORCH!"]
    server.unload("upper_ts")


@pytest.mark.server
def test_gathered_requests_get_their_own_outputs(served):
    """With dynamic batching the runtime concatenates requests of different batch sizes into one
    forward() and splits the outputs back: each response must match its own inputs."""
    server, base = served["server"], served["ts_cfg"]
    twin_cfg, _ = ptb.emulation_config(base, gpu_available=False)
    twin_cfg.dynamic_batching.max_queue_delay_microseconds = 200_000
    server.load("add_sub_ts", config=twin_cfg)
    rng = np.random.default_rng(6)
    requests = [(rng.standard_normal((n, 4)).astype(np.float32), rng.standard_normal((n, 2)).astype(np.float32))
                for n in (1, 2, 4)]
    client = httpclient.InferenceServerClient(server.http_url, concurrency=len(requests), network_timeout=300.0)
    try:
        pending = []
        for a, b in requests:
            inputs = [httpclient.InferInput("INPUT__0", list(a.shape), "FP32"),
                      httpclient.InferInput("INPUT__1", list(b.shape), "FP32")]
            inputs[0].set_data_from_numpy(a)
            inputs[1].set_data_from_numpy(b)
            pending.append(client.async_infer("add_sub_ts", inputs))
        answers = [p.get_result() for p in pending]
    finally:
        client.close()
    for (a, b), answer in zip(requests, answers):
        with torch.no_grad():
            out0, out1 = served["add_sub"](torch.from_numpy(a), torch.from_numpy(b))
        np.testing.assert_allclose(answer.as_numpy("OUTPUT__0"), out0.numpy(), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(answer.as_numpy("OUTPUT__1"), out1.numpy(), rtol=1e-5, atol=1e-5)
    batches = server.stats("add_sub_ts")["model_stats"][0]["batch_stats"]
    # Only a gathered execution has batch size 3, 5, 6 or 7 (earlier tests sent batches of 2).
    assert {int(row["batch_size"]) for row in batches} & {3, 5, 6, 7}, f"requests were never gathered: {batches}"


@pytest.mark.server
def test_sweep_over_thread_counts_on_the_twin(served, tmp_path):
    """The sweep engine runs a grid from sweep_grid on the twin: two INTRA_OP_THREAD_COUNT
    variants, each loaded as a config override, outputs checked at every point against eager."""
    from workbench.measure.engine.measure_settings import MeasureSettings
    from workbench.measure.sweep import SweepPlan, run_sweep

    server, plan = served["server"], served["plans"]["add_sub_ts"]
    grid = ptb.sweep_grid(served["ts_cfg"], {"threads": [1, 2]})
    sweep = SweepPlan(batch_sizes=(2,), allocations=("1x1",), core_range="0:0", parameters=grid)

    def reference(inputs):
        with torch.no_grad():
            return [t.numpy() for t in served["add_sub"](*(torch.from_numpy(a) for a in inputs))]

    start = len(server.log_tail(1_000_000))
    # restore=False: putting back the config an earlier test loaded would start one more twin stub (~3 s of
    # CPU) for nothing asserted here; every test here loads the config it serves (test_sweep covers restore)
    result = run_sweep(sweep, server, plan.repository / "add_sub_ts", out_dir=tmp_path / "run", reference=reference,
                       settings=MeasureSettings(engine="workbench", window_s=0.2, stable_windows=2, max_windows=2,
                                                warmup_requests=1, time_limit_s=None), restore=False)
    frame = result.frame
    assert sorted(frame["parameters"]) == ["INTRA_OP_THREAD_COUNT=1", "INTRA_OP_THREAD_COUNT=2"]
    assert frame["error"].isna().all() and frame["outputs_ok"].all(), frame[["parameters", "error", "outputs_ok"]]
    lines = [line for line in _log_since(server, start) if "PyTorch emulation of 'add_sub_ts'" in line]
    assert any("intra_op_threads=1" in line for line in lines) and any("intra_op_threads=2" in line for line in lines)
