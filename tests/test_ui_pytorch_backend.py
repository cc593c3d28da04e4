"""The Workbench app takes a model through Triton's PyTorch backend headless, against a real
tritonserver: settings (backend dropdown) -> preview and write (model.pt) -> the server panel
serves it (the real LibTorch backend, found by the server's finder through
$WORKBENCH_LIBTORCH_BACKEND, where the shared build exists; the twin otherwise) and says which
backend served -> a sweep from the sweep panel whose rows say it too -> the sweep panel comparing it
with the same archive generated for the Python backend, over an inference-mode grid."""

from __future__ import annotations

import html
import re
import sys

import numpy as np
import pytest
import tritonclient.http as httpclient

from workbench import generate
from workbench.generate.config import read_config
from workbench.generate.pytorch_backend import SERVED_AS_LIBTORCH, SERVED_AS_PYTHON
from workbench.server.pytorch import ENV_VAR, PYTHON_BACKEND
from workbench.tutorial.backend_comparison import built_libtorch_backend
from workbench.ui import Workbench

pytestmark = [pytest.mark.server, pytest.mark.timeout(900)]


def _text(value: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", " ", value))


@pytest.fixture(scope="module")
def backend_dir(pytorch_backend_or_twin):
    return pytorch_backend_or_twin


@pytest.mark.alone  # a sweep from the panel, waited on with time limits: nothing beside it
def test_settings_to_a_sweep_through_the_pytorch_backend(tmp_path, backend_dir, monkeypatch):
    # as a user's lab: nothing set where notebook 08's build is cached (the preview and the server
    # must both find it: issue 43 saw the preview say "twin" and the server serve LibTorch)
    monkeypatch.delenv(ENV_VAR, raising=False)
    if backend_dir and built_libtorch_backend() is None:
        monkeypatch.setenv(ENV_VAR, str(backend_dir))
    served_as = SERVED_AS_LIBTORCH if backend_dir else SERVED_AS_PYTHON
    app = Workbench(tmp_path / "model_repository")
    try:
        model = app["model"]
        model.controls["zoo_model"].value = "add_sub"
        task = model.start_compile()
        assert task.join(timeout=120) and task.state == "done", task.error_text
        settings = app["settings"]
        settings.controls["backend"].value = "pytorch"
        settings.controls["instance_group_kind"].value = "KIND_CPU"
        settings.controls["pytorch_parameters"].fields["torchscript"]["INTRA_OP_THREAD_COUNT"].value = "1"
        assert app.state.settings_problems == [] and app.state.generated.config.backend == "pytorch"
        assert f"served here as: {served_as}" in _text(app["preview"].controls["model_py"].value)
        assert app["preview"].controls["tabs"].get_title(1) == "model files"  # a layout's files, no model.py
        assert app["preview"].write() is not None
        assert read_config(app.state.model_dir).backend == "pytorch"
        assert (app.state.model_dir / "1" / "model.pt").is_file()
        server = app["server"]
        server.controls["start"].click()
        assert server.ops.join(timeout=240) and server.ops.task.state == "done", server.ops.task.error_text
        table = _text(server.controls["models"].value)
        print(f"\n{app.state.server.served_by('add_sub')}", file=sys.stderr)
        assert re.search(r"add_sub\s+1\s+READY", table) and "served by" in table and served_as in table
        # the preview, refreshed for the started server, names the same backend
        assert f"served here as: {served_as}" in _text(app["preview"].controls["model_py"].value)
        client = httpclient.InferenceServerClient(app.state.server.http_url)
        try:
            a = np.arange(8, dtype=np.float32).reshape(2, 4)
            inputs = [httpclient.InferInput(n, [2, 4], "FP32") for n in ("INPUT__0", "INPUT__1")]
            for tensor in inputs:
                tensor.set_data_from_numpy(a)
            np.testing.assert_allclose(client.infer("add_sub", inputs).as_numpy("OUTPUT__0"), a + a)
        finally:
            client.close()
        sweep = app["sweep"]
        for key, value in {"batch_sizes": "1,2", "allocations": "1x1", "concurrency": "1", "window_s": 0.2,
                           "stable_windows": 2, "max_windows": 3, "time_limit_s": 0, "engine": "workbench",
                           "label": "pt"}.items():
            sweep.controls[key].value = value
        task = sweep.start()
        assert task is not None, sweep.controls["error"].value
        assert task.join(timeout=300) and task.state == "done", task.error_text
        frame = sweep.result.frame
        assert len(frame) == 2 and frame["outputs_ok"].all(), frame[["variant", "error"]]
        assert set(frame["served_by"]) == {f"{served_as}, torchscript layout"}
        assert all(bytes(image.value).startswith(b"\x89PNG") for image in sweep.controls["plots"].children)
        # the same archive generated for the Python backend beside it, compared from the sweep panel
        # with an inference-mode grid on the PyTorch-backend model (what `workbench sweep --compare` does)
        generate.write(generate.render(generate.GenerateSettings(
            triton_model_dir=str(app.state.repository / "add_sub_py"), compiled_model=app.state.artifact.path,
            copy_compiled_model=True, target="cpu", neuron_core_range="0:0", max_batch_size=8)))
        sweep.controls["compare"].value = ["add_sub_py"]
        sweep.controls["backend_grid"].value = "inference_mode=on,off"
        sweep.controls["batch_sizes"].value = "2"
        sweep.controls["label"].value = "cmp"
        assert sweep.backends().grid == {"inference_mode": (True, False)}
        task = sweep.start()
        assert task is not None, sweep.controls["error"].value
        assert task.join(timeout=400) and task.state == "done", task.error_text
        frame = sweep.result.frame
        print(f"compared: {sweep.comparison.backends}", file=sys.stderr)
        assert sweep.comparison.backends == [f"{served_as}, torchscript layout", PYTHON_BACKEND]
        assert frame["error"].isna().all() and frame["outputs_ok"].all(), frame[["variant", "error"]]
        pt = frame[frame["model"] == "add_sub"]
        assert set(pt["served_by"]) == {f"{served_as}, torchscript layout"}
        assert sorted(pt["parameters"]) == ["INFERENCE_MODE=false", "INFERENCE_MODE=true"]
        assert set(frame[frame["model"] == "add_sub_py"]["served_by"]) == {PYTHON_BACKEND}
        assert (sweep.result.path / "results.csv").is_file() and sweep.result.path.name == "cmp"
        assert f"{served_as}, torchscript layout [" in html.unescape(sweep.controls["best"].value)
        assert "served by" in _text(sweep.controls["table"].value)
    finally:
        app.close()
