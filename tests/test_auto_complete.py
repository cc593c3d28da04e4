"""A local server goes without Triton's auto-complete where no model needs it: with it on, each
Python-backend load started one more stub that changed nothing and cost about 1.3 s. A load of a
model that needs it (its model.py completes its config) turns it on first, restarting the server,
and what was loaded before is loaded again."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from workbench.server import TritonServer
from workbench.server.auto_complete import auto_complete_need, repository_need

STUB_START = "Starting Python backend stub"
# a model whose config names neither inputs nor outputs: its model.py declares them
COMPLETES_ITSELF = """import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(config):
        config.add_input({"name": "X", "data_type": "TYPE_FP32", "dims": [1]})
        config.add_output({"name": "Y", "data_type": "TYPE_FP32", "dims": [1]})
        return config

    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy())])
                for r in requests]
"""


def _self_completing(repo: Path, name: str = "echo") -> Path:
    model = repo / name
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text('backend: "python"\nmax_batch_size: 0\n')
    (model / "1" / "model.py").write_text(COMPLETES_ITSELF)
    return model


@pytest.fixture(scope="module")
def add_sub(tmp_path_factory, generate_cpu_model) -> Path:
    return generate_cpu_model(tmp_path_factory.mktemp("auto_complete"))


def test_a_generated_python_model_needs_no_auto_complete_and_others_say_why(add_sub, tmp_path):
    assert auto_complete_need(add_sub) is None and repository_need(add_sub.parent) is None
    echo = _self_completing(tmp_path / "repo")
    assert auto_complete_need(echo) == "its config does not declare both inputs and outputs"
    # a complete config does not help a model.py that completes it
    (echo / "config.pbtxt").write_text((add_sub / "config.pbtxt").read_text())
    assert auto_complete_need(echo) == "its model.py has an auto_complete_config"
    # an override's files are what the load uses, not the folder's
    model_py = (add_sub / "1" / "model.py").read_bytes()
    assert auto_complete_need(echo, files={"file:1/model.py": model_py}) is None
    assert auto_complete_need(add_sub, files={"file:1/model.py": COMPLETES_ITSELF.encode()}) is not None
    vllm = tmp_path / "repo" / "llm"
    vllm.mkdir()
    (vllm / "config.pbtxt").write_text('backend: "vllm"\n')
    assert auto_complete_need(vllm) == "its backend is vllm, not python"
    assert repository_need(tmp_path / "repo").startswith("echo: ")
    # with --model-config-name the server reads configs/<name>.pbtxt where there is one
    named = tmp_path / "named" / "add_sub"
    shutil.copytree(add_sub, named)
    (named / "configs").mkdir()
    (named / "configs" / "full.pbtxt").write_text((add_sub / "config.pbtxt").read_text())
    (named / "config.pbtxt").write_text('backend: "python"\n')
    assert auto_complete_need(named) == "its config does not declare both inputs and outputs"
    assert auto_complete_need(named, config_name="full") is None and repository_need(named.parent, "full") is None
    empty = tmp_path / "empty"
    empty.mkdir()
    assert repository_need(empty) == "the repository holds no model yet"


@pytest.mark.server
@pytest.mark.timeout(300)
def test_a_load_that_needs_auto_complete_turns_it_on_and_keeps_what_was_loaded(add_sub):
    repo = add_sub.parent
    with TritonServer(repo, log_verbose=1) as server:
        assert not server.auto_complete and "--disable-auto-complete-config" in server.log_tail(10_000)[0]
        with pytest.raises(ValueError, match="model name must be a non-empty string"):
            server.load("add_sub/1")  # refused as before, not taken for a model that needs auto-complete
        assert not server.auto_complete
        server.load("add_sub")
        instances = sum(group["count"] for group in server.model_config("add_sub")["instance_group"])
        assert sum(STUB_START in line for line in server.log_tail(10_000)) == instances  # no auto-complete stub
        first_pid = server.pid

        _self_completing(repo)
        try:
            server.load("echo")
            log = server.log_tail(10_000)
            assert server.auto_complete and server.pid != first_pid
            assert any("'echo' needs Triton's auto-complete (its config does not declare both inputs and outputs)"
                       in line for line in log), log[-20:]
            assert server.is_model_ready("add_sub") and server.is_model_ready("echo")
            client = httpclient.InferenceServerClient(server.http_url)
            x = httpclient.InferInput("X", [1], "FP32")
            x.set_data_from_numpy(np.array([2.5], dtype=np.float32))
            assert client.infer("echo", [x]).as_numpy("Y").tolist() == [2.5]  # the inputs auto-complete declared
            client.close()
        finally:
            shutil.rmtree(repo / "echo")


@pytest.mark.server
@pytest.mark.timeout(120)
def test_as_asked_the_server_keeps_auto_complete_on(add_sub):
    with TritonServer(add_sub.parent, auto_complete=True) as server:
        assert server.auto_complete and "--disable-auto-complete-config" not in server.log_tail(10_000)[0]
        server.load("add_sub")
        assert server.is_model_ready("add_sub")
