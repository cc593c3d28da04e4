"""`workbench generate --backend pytorch`: both layouts from the command line, refused before
anything is written when a value is wrong, previewed, diffed, written, and served by a real
tritonserver -- through Triton's real PyTorch backend where the shared build exists, through the
Python-backend twin otherwise (each serving test prints and asserts which one served)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import tritonclient.http as httpclient

from workbench.cli import generate as generate_cli
from workbench.generate import GenerateError, GenerateSettings, render, validate
from workbench.generate.config import parameters_of, read_config
from workbench.generate.pytorch_backend import SERVED_AS_LIBTORCH, SERVED_AS_PYTHON
from workbench.server import TritonServer

SPEC = ["--triton_input", "INPUT__0,FP32,4", "--triton_output", "OUTPUT__0,FP32,3", "--max_batch_size", "8"]
MODULE_SOURCE = """\
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 3)

    def forward(self, x):
        return torch.relu(self.linear(x))
"""


def run_generate(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="workbench", allow_abbrev=False)
    generate_cli.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["generate", *argv])
    return args.func(args)


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    """A TorchScript archive and a PyTorch 2 module with its state dict, of the same weights."""
    root = tmp_path_factory.mktemp("sources")
    (root / "net.py").write_text(MODULE_SOURCE)
    namespace: dict = {}
    exec(compile(MODULE_SOURCE, "net.py", "exec"), namespace)
    torch.manual_seed(3)
    net = namespace["Net"]().eval()
    torch.save(net.state_dict(), root / "weights.pt")
    torch.jit.trace(net, torch.zeros(1, 4)).save(str(root / "net.pt"))
    return {"root": root, "net": net}


def _ts(sources, repo: Path, *extra: str) -> list[str]:
    return ["--backend", "pytorch", "--triton_model_dir", str(repo / "ts"),
            "--compiled_model", str(sources["root"] / "net.pt"), *SPEC, *extra]


def _pt2(sources, repo: Path, *extra: str) -> list[str]:
    return ["--backend", "pytorch", "--runtime", "model.py", "--triton_model_dir", str(repo / "pt2"),
            "--compiled_model", str(sources["root"] / "net.py"), "--state-dict", str(sources["root"] / "weights.pt"),
            *SPEC, *extra]


# --- refused before anything is written -------------------------------------------------------

@pytest.mark.parametrize("extra, message", [
    (["--inference-mode", "yes"], "parameter INFERENCE_MODE = 'yes' is not a boolean"),
    (["--intra-op-thread-count", "0"], "INTRA_OP_THREAD_COUNT = 0 must be at least 1 thread"),
    (["--num-threads", "2"], "parameter NUM_THREADS belongs to the PyTorch 2 layout"),
    (["--neuron_core_range", "0:1"], "--neuron_core_range is for the Python backend's model.py"),
    (["--target", "inf2"], "Neuron models are served by the Python backend"),
    (["--parameter", "INFERENCE_MODE=true", "--inference-mode", "false"], "given both as a flag and with --parameter"),
])
def test_bad_torchscript_values_are_refused_naming_them(sources, tmp_path, capsys, extra, message):
    assert run_generate(_ts(sources, tmp_path, *extra)) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "ts").exists()


@pytest.mark.parametrize("extra, message", [
    (["--torch-compile-optional-parameters", '{"mode": "fastest"}'], "mode 'fastest' is not one of"),
    (["--torch-compile-optional-parameters", "{nope"], "TORCH_COMPILE_OPTIONAL_PARAMETERS is not valid JSON"),
    (["--inference-mode", "true"], "parameter INFERENCE_MODE belongs to the TorchScript layout"),
])
def test_bad_pytorch2_values_are_refused_naming_them(sources, tmp_path, capsys, extra, message):
    assert run_generate(_pt2(sources, tmp_path, *extra)) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "pt2").exists()


def test_the_wrong_file_for_the_layout_is_refused(sources, tmp_path, capsys):
    swapped = ["--backend", "pytorch", "--triton_model_dir", str(tmp_path / "ts"),
               "--compiled_model", str(sources["root"] / "weights.pt"), *SPEC]
    assert run_generate(swapped) == 2
    assert "is not a TorchScript archive" in capsys.readouterr().err
    assert not (tmp_path / "ts").exists()


def test_pytorch_flags_need_the_pytorch_backend(sources, tmp_path, capsys):
    argv = ["--triton_model_dir", str(tmp_path / "m"), "--compiled_model", "m.pt", "--target", "cpu", *SPEC]
    assert run_generate([*argv, "--inference-mode", "true"]) == 2
    assert "--inference-mode: parameter(s) of Triton's PyTorch backend; add --backend pytorch" in capsys.readouterr().err
    problems = validate(GenerateSettings(triton_model_dir=str(tmp_path / "m"), compiled_model="m.pt",
                                         target="cpu", runtime="model.py"))
    assert "--runtime is for Triton's PyTorch backend; add --backend pytorch" in problems
    assert not (tmp_path / "m").exists()


def test_settings_carry_the_choice_and_the_api_refuses_the_same(sources, tmp_path):
    settings = GenerateSettings(backend="pytorch", target="cpu", triton_model_dir=str(tmp_path / "ts"),
                                compiled_model=str(sources["root"] / "net.pt"),
                                triton_input=["INPUT__0,FP32,4"], triton_output=["OUTPUT__0,FP32,3"],
                                max_batch_size=8, parameters={"DISABLE_OPTIMIZED_EXECUTION": "maybe"})
    with pytest.raises(GenerateError, match="DISABLE_OPTIMIZED_EXECUTION = 'maybe' is not a boolean"):
        render(settings)
    settings.parameters = {"DISABLE_OPTIMIZED_EXECUTION": True}
    generated = render(settings)
    assert generated.config.backend == "pytorch" and generated.config.runtime == ""
    assert parameters_of(generated.config) == {"DISABLE_OPTIMIZED_EXECUTION": "true"}
    assert set(generated.files) == {"config.pbtxt", "1/model.pt"} and generated.core_map is None


# --- preview, write, diff --------------------------------------------------------------------

def test_dry_run_shows_the_layout_and_who_would_serve_it(sources, tmp_path, capsys):
    assert run_generate(_pt2(sources, tmp_path, "--num-threads", "1", "--dry-run")) == 0
    out, err = capsys.readouterr()
    assert 'runtime: "model.py"' in out and 'key: "NUM_THREADS"' in out
    assert "class Net(nn.Module)" in out  # the module's source is part of the preview
    assert "1/model.pt" in out
    assert "pytorch2 layout; a local server here serves it as:" in err
    assert not (tmp_path / "pt2").exists()


def test_write_then_changes_need_force_and_keep_the_old_directory(sources, tmp_path, capsys):
    assert run_generate(_ts(sources, tmp_path, "--inference-mode", "true")) == 0
    model_dir = tmp_path / "ts"
    assert parameters_of(read_config(model_dir)) == {"INFERENCE_MODE": "true"}
    assert (model_dir / "1" / "model.pt").read_bytes() == (sources["root"] / "net.pt").read_bytes()
    capsys.readouterr()
    assert run_generate(_ts(sources, tmp_path, "--inference-mode", "false")) == 2
    out, err = capsys.readouterr()
    assert '-    string_value: "true"' in out and '+    string_value: "false"' in out
    assert "already exists; nothing was written" in err
    assert parameters_of(read_config(model_dir)) == {"INFERENCE_MODE": "true"}
    assert run_generate(_ts(sources, tmp_path, "--inference-mode", "false", "--force")) == 0
    assert parameters_of(read_config(model_dir)) == {"INFERENCE_MODE": "false"}
    kept = capsys.readouterr().out.split("previous directory kept as ", 1)[1].split(")")[0]
    assert parameters_of(read_config(Path(kept))) == {"INFERENCE_MODE": "true"}


# --- served by a real tritonserver ------------------------------------------------------------

@pytest.fixture(scope="module")
def backend_dir(pytorch_backend_or_twin):
    return pytorch_backend_or_twin


@pytest.mark.server
@pytest.mark.timeout(900)
def test_both_layouts_generated_by_the_cli_are_served_and_match_eager(sources, tmp_path, backend_dir):
    repo = tmp_path / "repo"
    assert run_generate(_ts(sources, repo, "--intra-op-thread-count", "1", "--inference-mode", "true")) == 0
    assert run_generate(_pt2(sources, repo, "--num-threads", "1",
                             "--torch-compile-optional-parameters", '{"disable": true}')) == 0
    server = TritonServer(repo, pytorch_backend=backend_dir)
    try:
        server.start()
        x = np.random.default_rng(5).standard_normal((3, 4)).astype(np.float32)
        with torch.no_grad():
            expected = sources["net"](torch.from_numpy(x)).numpy()
        client = httpclient.InferenceServerClient(server.http_url, network_timeout=300.0)
        try:
            for name in ("ts", "pt2"):
                server.load(name)
                served = server.served_by(name)
                print(f"\n{served}", file=sys.stderr)
                wanted = SERVED_AS_LIBTORCH if backend_dir else SERVED_AS_PYTHON
                assert wanted in served, served
                item = httpclient.InferInput("INPUT__0", list(x.shape), "FP32")
                item.set_data_from_numpy(x)
                got = client.infer(name, [item]).as_numpy("OUTPUT__0")
                np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
            if backend_dir:
                assert server.model_config("ts")["backend"] == "pytorch"
        finally:
            client.close()
    finally:
        server.stop()


@pytest.mark.server
@pytest.mark.timeout(900)
def test_the_launcher_reads_the_config_the_server_serves_under_model_config_name(sources, tmp_path, backend_dir):
    """With --model-config-name=alt tritonserver reads configs/alt.pbtxt: the PyTorch-backend checks,
    the twin and the OMP_NUM_THREADS the launcher derives read that file too, not config.pbtxt."""
    from workbench.generate.config import to_text

    repo = tmp_path / "repo"
    assert run_generate(_ts(sources, repo, "--intra-op-thread-count", "1")) == 0
    alt = read_config(repo / "ts")
    alt.parameters["INTRA_OP_THREAD_COUNT"].string_value = "2"
    (repo / "ts" / "configs").mkdir()
    (repo / "ts" / "configs" / "alt.pbtxt").write_text(to_text(alt))
    server = TritonServer(repo, pytorch_backend=backend_dir, model_config_name="alt")
    try:
        server.start()
        server.load("ts")
        assert server.model_config("ts")["parameters"]["INTRA_OP_THREAD_COUNT"]["string_value"] == "2"
        if backend_dir:  # LibTorch's threads come from the server's environment, set from the served config
            environ = Path(f"/proc/{server.pid}/environ").read_bytes().split(b"\0")
            assert b"OMP_NUM_THREADS=2" in environ, [e for e in environ if e.startswith(b"OMP")]
        print(f"\n{server.served_by('ts')}", file=sys.stderr)
    finally:
        server.stop()
