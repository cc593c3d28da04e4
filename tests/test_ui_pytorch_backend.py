"""The Workbench app takes a model through Triton's PyTorch backend headless, against a real
tritonserver: settings (backend dropdown) -> preview and write (model.pt) -> the server panel
serves it (the real LibTorch backend, found by the server's finder through
$WORKBENCH_LIBTORCH_BACKEND, where the shared build exists; the twin otherwise) and says which
backend served -> a sweep from the sweep panel whose rows say it too."""

from __future__ import annotations

import html
import re
import sys

import numpy as np
import pytest
import tritonclient.http as httpclient

from workbench.generate.config import read_config
from workbench.generate.pytorch_backend import SERVED_AS_LIBTORCH, SERVED_AS_PYTHON
from workbench.server.pytorch import ENV_VAR
from workbench.ui import Workbench

pytestmark = [pytest.mark.server, pytest.mark.timeout(900)]


def _text(value: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", " ", value))


@pytest.fixture(scope="module")
def backend_dir(pytorch_backend_or_twin):
    return pytorch_backend_or_twin


def test_settings_to_a_sweep_through_the_pytorch_backend(tmp_path, backend_dir, monkeypatch):
    if backend_dir:
        monkeypatch.setenv(ENV_VAR, str(backend_dir))
    else:
        monkeypatch.delenv(ENV_VAR, raising=False)
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
        assert app["preview"].write() is not None
        assert read_config(app.state.model_dir).backend == "pytorch"
        assert (app.state.model_dir / "1" / "model.pt").is_file()
        server = app["server"]
        server.controls["start"].click()
        assert server.ops.join(timeout=240) and server.ops.task.state == "done", server.ops.task.error_text
        table = _text(server.controls["models"].value)
        print(f"\n{app.state.server.served_by('add_sub')}", file=sys.stderr)
        assert re.search(r"add_sub\s+1\s+READY", table) and "served by" in table and served_as in table
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
    finally:
        app.close()
