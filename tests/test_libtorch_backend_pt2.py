"""Triton's real PyTorch backend's PyTorch 2 layout (``runtime: "model.py"``) against the twin:
rows #11, #14, #19 and #20 of the difference table (see tests/test_libtorch_backend.py, whose
fixture and helpers this module shares: a real-backend and a twin server on one repository)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_libtorch_backend import _both, _infer, servers  # noqa: F401  (servers: the shared fixture)

from workbench.generate import pytorch_backend as ptb
from workbench.generate.config import to_text
from workbench.server.errors import ModelLoadError
from workbench.spec import ModelSpec

# The first test here may build the backend (about 2 min on 2 idle cores, 15 on a crowded box).
pytestmark = [pytest.mark.server, pytest.mark.timeout(1800)]

# --- the PyTorch 2 layout: #11, #14, #19, #20 ------------------------------------------------------

PT2_SOURCE = '''
import torch


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.fc(x), (x * 10).long()
'''
PT2_SPEC = ModelSpec.parse(["x,FP32,4"], ["y,FP32,4", "k,FP32,4"])


def test_pytorch2_layout_alike_on_both(servers):
    """A state dict under the runtime's file rule (net.py -> net.pt, #19), torch.compile off, and
    an INT64 result for an FP32 output sent as INT64 on both (#14)."""
    torch.manual_seed(1)
    exec_ns: dict = {}
    exec(PT2_SOURCE, exec_ns)
    net = exec_ns["Net"]().eval()
    cfg = ptb.build_pytorch_config("pt2_net", PT2_SPEC, layout=ptb.PYTORCH2, max_batch_size=4,
                                   parameters={"TORCH_COMPILE_OPTIONAL_PARAMETERS": {"disable": True}})
    version = servers["repo"] / "pt2_net" / "1"
    version.mkdir(parents=True)
    cfg.default_model_filename = "net.py"
    (version / "net.py").write_text(PT2_SOURCE)
    torch.save(net.state_dict(), version / "net.pt")
    (servers["repo"] / "pt2_net" / "config.pbtxt").write_text(to_text(cfg))
    x = np.random.default_rng(2).standard_normal((2, 4)).astype(np.float32)
    with torch.no_grad():
        y, k = net(torch.from_numpy(x))
    for label, server in _both(servers):
        server.load("pt2_net")
        got = _infer(server, "pt2_net", {"x": x}, ["y", "k"])
        np.testing.assert_allclose(got["y"], y.numpy(), rtol=1e-6, atol=1e-6)
        assert got["k"].dtype == np.int64, f"{label}: {got['k'].dtype}"
        np.testing.assert_array_equal(got["k"], k.numpy())
        server.unload("pt2_net")
    real = servers["real"]
    assert "pytorch2 layout" in real.served_by("pt2_net") and real.served_by("pt2_net").startswith(
        f"pt2_net: {ptb.SERVED_AS_LIBTORCH}")


def test_20_inductor_follows_the_stub_locale(servers):
    """Inductor on the real PyTorch 2 runtime loads only when the stub's site-packages give it a
    UTF-8 locale (a .pth: CI's venv has the shared script's); without it the launcher refuses
    with the fix instead of letting the load fail with UnicodeDecodeError."""
    from workbench.generate.pytorch_backend.real_backend import stub_locale_is_utf8

    real = servers["real"]
    torch.manual_seed(1)
    cfg = ptb.build_pytorch_config("pt2_inductor", ModelSpec.parse(["x,FP32,4"], ["y,FP32,4"]), layout=ptb.PYTORCH2,
                                   parameters={"TORCH_COMPILE_OPTIONAL_PARAMETERS": {"backend": "inductor"}})
    source = PT2_SOURCE.replace(", (x * 10).long()", "")
    exec_ns: dict = {}
    exec(source, exec_ns)
    # saved weights: without them each process would build its own random Linear
    ptb.write_pytorch2_model(servers["repo"], cfg, source, state_dict=exec_ns["Net"]().state_dict())
    preview = ptb.preview_serving(cfg, backend_dir=real.pytorch.backend.backend_dir)
    if not stub_locale_is_utf8(real.pytorch.stub_python()):
        assert any("starts with the C locale" in note for note in preview.notes), preview.notes
        with pytest.raises(ModelLoadError, match="UnicodeDecodeError.*add a .pth file"):
            real.load("pt2_inductor")
        assert real.running
        return
    assert any("gets a UTF-8 locale here" in note for note in preview.notes), preview.notes
    real.load("pt2_inductor")
    got = _infer(real, "pt2_inductor", {"x": np.ones(4, np.float32)}, ["y"])["y"]
    want = ptb.eager_module(servers["repo"] / "pt2_inductor")(torch.ones(4)).detach().numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    real.unload("pt2_inductor")


def test_11_kind_model_without_parameters_is_refused_on_both(servers):
    cfg = ptb.build_pytorch_config("pt2_noparam", ModelSpec.parse(["x,FP32,4"], ["y,FP32,4"]), layout=ptb.PYTORCH2,
                                   instance_kind="KIND_MODEL",
                                   parameters={"TORCH_COMPILE_OPTIONAL_PARAMETERS": {"disable": True}})
    ptb.write_pytorch2_model(servers["repo"], cfg, "import torch\n\n\nclass Twice(torch.nn.Module):\n"
                                                   "    def forward(self, x):\n        return x * 2\n")
    for _, server in _both(servers):
        with pytest.raises(ModelLoadError, match="Cannot determine model device"):
            server.load("pt2_noparam")
        assert server.running


def test_18_a_lone_torchscript_archive_under_the_pytorch2_runtime_is_generated_and_served_by_both(servers):
    """Row 18: runtime "model.py" with only <v>/model.pt, a TorchScript archive. The real runtime
    torch.jit.loads it (src/model.py _get_model_path); `workbench generate` now writes this layout,
    with a warning, and the twin serves it too. Same outputs as the archive in this process."""
    from workbench.generate import GenerateSettings, render, write

    torch.manual_seed(5)
    source = PT2_SOURCE.replace(", (x * 10).long()", "")
    exec_ns: dict = {}
    exec(source, exec_ns)
    archive = servers["repo"].parent / "pt2_jit_source.pt"
    torch.jit.trace(exec_ns["Net"]().eval(), torch.zeros(1, 4)).save(str(archive))
    generated = render(GenerateSettings(
        triton_model_dir=str(servers["repo"] / "pt2_jit"), backend="pytorch", target="cpu", runtime="model.py",
        compiled_model=str(archive), triton_input=["x,FP32,4"], triton_output=["y,FP32,4"], max_batch_size=4,
        instance_group_kind="KIND_CPU", parameters={"TORCH_COMPILE_OPTIONAL_PARAMETERS": '{"disable": true}'}))
    assert sorted(generated.files) == ["1/model.pt", "config.pbtxt"]
    assert any("torch.jit.load" in warning for warning in generated.warnings)
    write(generated)
    x = np.random.default_rng(3).standard_normal((3, 4)).astype(np.float32)
    with torch.no_grad():
        want = torch.jit.load(str(archive))(torch.from_numpy(x)).numpy()
    for label, server in _both(servers):
        server.load("pt2_jit")
        got = _infer(server, "pt2_jit", {"x": x}, ["y"])["y"]
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6, err_msg=label)
        served = server.served_by("pt2_jit")
        print(f"\n{served}")
        expected = ptb.SERVED_AS_LIBTORCH if label == "real" else ptb.SERVED_AS_PYTHON
        assert served.startswith(f"pt2_jit: {expected}") and served.endswith("pytorch2 layout"), served
        server.unload("pt2_jit")
