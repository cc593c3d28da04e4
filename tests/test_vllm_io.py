"""The vLLM backend's inputs and outputs read from its model.py (workbench/server/vllm_io.py), so
that a local server serves vLLM models without Triton's auto-complete and its extra stub, which
imports vLLM on every load.

The truth is the backend's own ``auto_complete_config``, run as Triton's auto-complete stub runs
it: the backend's model.py imported in the vLLM environment, given Triton's ``ModelConfig`` from
the backend's own ``triton_python_backend_utils``. A backend whose auto-complete is not the shape
read here keeps Triton's auto-complete (shown on edited copies of the real model.py). The shared
server of the vLLM tests runs without auto-complete: tests/test_streaming_vllm.py checks it.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from google.protobuf import json_format
from vllm_model_dirs import TINY_LLM, tiny_llm_repository

from workbench.generate.config import ModelConfig, read_config
from workbench.server.auto_complete import auto_complete_need
from workbench.server.vllm_io import declared_io

# what Triton's auto-complete stub does with a model.py: its class's auto_complete_config on the
# config JSON, through the backend's own ModelConfig (triton_python_backend_utils.py)
_RUN_AUTO_COMPLETE = """
import json, sys
backend = sys.argv[1]
sys.path[:0] = [backend + "/python", backend + "/vllm"]
import triton_python_backend_utils as pb_utils
import model
config = pb_utils.ModelConfig(sys.stdin.read())
model.TritonPythonModel.auto_complete_config(config)
print(json.dumps(config.as_dict()))
"""


def _as_triton_sends_it(config) -> str:
    """The config JSON a stub receives: proto field names, empty lists and zeros included."""
    return json.dumps(json_format.MessageToDict(config, preserving_proto_field_name=True,
                                                always_print_fields_with_no_presence=True))


def _io(data: dict) -> tuple[list, list, bool, int]:
    """The inputs, outputs, policy and batch size of a config JSON, as Triton's protobuf reads them."""
    config = json_format.ParseDict(data, ModelConfig(), ignore_unknown_fields=True)
    return (sorted((i.SerializeToString(deterministic=True) for i in config.input)),
            sorted((o.SerializeToString(deterministic=True) for o in config.output)),
            config.model_transaction_policy.decoupled, config.max_batch_size)


def test_the_workbench_completes_a_vllm_config_as_the_backends_own_auto_complete(vllm_python, vllm_backend_dir,
                                                                                 tmp_path):
    io = declared_io(vllm_backend_dir / "vllm" / "model.py")
    assert io is not None, "the vLLM backend's auto-complete is no longer the shape vllm_io reads"
    config = read_config(tiny_llm_repository(tmp_path / "repo") / TINY_LLM / "config.pbtxt")
    assert not config.input and not config.output  # the generated config leaves them to auto-complete
    env = {**os.environ, "LC_ALL": "C.UTF-8", "LANG": "C.UTF-8"}
    done = subprocess.run([str(vllm_python), "-c", _RUN_AUTO_COMPLETE, str(vllm_backend_dir)],
                          input=_as_triton_sends_it(config), capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    by_backend = json.loads(done.stdout.strip().splitlines()[-1])
    ours = json.loads(_as_triton_sends_it(io.complete(config)))
    assert _io(ours) == _io(by_backend)
    assert {i["name"] for i in by_backend["input"]} >= {"text_input", "stream", "sampling_parameters"}
    # a config that declares one of them keeps its own, as the backend's does
    config.input.add(name="text_input", data_type="TYPE_STRING", dims=[1], optional=True)
    done = subprocess.run([str(vllm_python), "-c", _RUN_AUTO_COMPLETE, str(vllm_backend_dir)],
                          input=_as_triton_sends_it(config), capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert _io(json.loads(_as_triton_sends_it(io.complete(config)))) == _io(json.loads(done.stdout.splitlines()[-1]))


def test_a_config_the_backends_auto_complete_refuses_is_left_to_it(vllm_python, vllm_backend_dir, tmp_path):
    """A vLLM config that batches: the backend's auto-complete refuses it (it sets max_batch_size 0),
    so the workbench does not complete it either, and a server turns Triton's auto-complete on for
    it, which says why in the backend's words."""
    io = declared_io(vllm_backend_dir / "vllm" / "model.py")
    model_dir = tiny_llm_repository(tmp_path / "repo") / TINY_LLM
    config = read_config(model_dir / "config.pbtxt")
    assert io is not None and io.completes(config)
    config.max_batch_size = 8
    env = {**os.environ, "LC_ALL": "C.UTF-8", "LANG": "C.UTF-8"}
    done = subprocess.run([str(vllm_python), "-c", _RUN_AUTO_COMPLETE, str(vllm_backend_dir)],
                          input=_as_triton_sends_it(config), capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode != 0 and "configuration specified max_batch_size 8" in done.stderr, done.stderr[-2000:]
    assert not io.completes(config)
    assert auto_complete_need(model_dir, config, vllm_io=io).startswith("its vLLM config batches or is not decoupled")


def _backend_copy(tmp_path: Path, vllm_backend_dir: Path, edit) -> Path:
    text = (vllm_backend_dir / "vllm" / "model.py").read_text()
    edited = edit(text)
    assert edited != text, "the edit found nothing to change in the backend's model.py"
    model_py = tmp_path / "vllm" / "model.py"
    model_py.parent.mkdir(parents=True)
    model_py.write_text(edited)
    return model_py


@pytest.mark.parametrize("edit", [
    pytest.param(lambda t: t.replace("        # Outputs expected by the backend.",
                                     "        if os.environ.get('X'):\n"
                                     "            inputs.append({'name': 'x', 'data_type': 'TYPE_STRING', 'dims': [1]})\n"
                                     "        # Outputs expected by the backend.", 1),
                 id="an input added at run time"),
    pytest.param(lambda t: t.replace("auto_complete_model_config.set_max_batch_size(0)",
                                     "auto_complete_model_config.set_max_batch_size(8)", 1),
                 id="another max_batch_size"),
    pytest.param(lambda t: t.replace("cls._auto_complete_inputs_and_outputs(auto_complete_model_config)",
                                     "cls._auto_complete_inputs_and_outputs(auto_complete_model_config)\n"
                                     "        cls._more(auto_complete_model_config)", 1),
                 id="one more step"),
    pytest.param(lambda t: t.replace("def _auto_complete_inputs_and_outputs", "def _fill", 1),
                 id="the filling function renamed"),
])
def test_a_backend_that_decides_otherwise_keeps_tritons_auto_complete(vllm_backend_dir, tmp_path, edit):
    assert declared_io(vllm_backend_dir / "vllm" / "model.py") is not None
    model_py = _backend_copy(tmp_path, vllm_backend_dir, edit)
    assert declared_io(model_py) is None
    model_dir = tiny_llm_repository(tmp_path / "repo") / TINY_LLM
    assert auto_complete_need(model_dir, vllm_io=declared_io(model_py)) == "its backend is vllm, not python"
    assert auto_complete_need(model_dir, vllm_io=declared_io(vllm_backend_dir / "vllm" / "model.py")) is None
