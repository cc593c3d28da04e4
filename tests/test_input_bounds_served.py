"""What the bounds accept, loaded on the real backends here (issue 32): warm-up, queue policies
and the rate limiter at their limits on the Python backend, thread counts up to int32 on Triton's
real LibTorch backend (where ../shared builds it). Each is generated through the CLI, loaded on a
shared server, answered, and the server is still running afterwards (a count past int32 once
aborted tritonserver through LibTorch's std::stoi, taking every loaded model with it).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import tritonclient.http as httpclient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workbench import zoo
from workbench.cli import main
from workbench.compiler import compile_model
from workbench.limits import field_range, thread_count_limit
from workbench.server import TritonServer

pytestmark = [pytest.mark.server, pytest.mark.timeout(900)]

FEW = settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
_names = iter(f"m{i}" for i in range(10 ** 6))


def _answers(server, name: str, batch: int = 2) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        inputs = []
        for key in ("INPUT__0", "INPUT__1"):
            item = httpclient.InferInput(key, [batch, 4], "FP32")
            item.set_data_from_numpy(np.ones((batch, 4), np.float32))
            inputs.append(item)
        result = client.infer(name, inputs)
        assert result.as_numpy("OUTPUT__0").shape == (batch, 4)
    finally:
        client.close()


@pytest.fixture(scope="module")
def python_lab(tmp_path_factory):
    root = tmp_path_factory.mktemp("served_bounds")
    model = zoo.get("add_sub")
    compiled = compile_model(model.module, model.example_inputs(2), "cpu", out_dir=root / "compiled", name="add_sub")
    (root / "repo").mkdir()
    with TritonServer(root / "repo") as server:
        yield server, root / "repo", Path(compiled.path)


def _generate_and_load(lab, *flags: str) -> str:
    server, repo, compiled = lab
    name = next(_names)
    assert main(["generate", "--compiled_model", str(compiled), "--copy-compiled-model", "--target", "cpu",
                 "--triton_model_dir", str(repo / name), "--max_batch_size", "8", *flags]) == 0
    server.load(name)
    _answers(server, name)
    server.unload(name)
    assert server.running
    return name


@FEW
@given(count=st.sampled_from([0, 1, 3]), batch=st.sampled_from([1, 8]))
def test_accepted_warmups_load_and_answer(python_lab, count, batch):
    _generate_and_load(python_lab, "--warmup", str(count), "--warmup-batch-size", str(batch))


@FEW
@given(size=st.sampled_from([0, 1, field_range("ModelQueuePolicy", "max_queue_size")[1]]),
       timeout=st.sampled_from([0, 1000, field_range("ModelQueuePolicy", "default_timeout_microseconds")[1]]))
def test_accepted_queue_policies_load_and_answer(python_lab, size, timeout):
    _generate_and_load(python_lab, "--enable_dynamic_batching", "--priority-levels", "2", "--default-priority-level",
                       "1", "--default-queue-policy", f"max_queue_size={size}",
                       "--priority-queue-policy", f"2:max_queue_size={size},default_timeout_microseconds={timeout}")


@FEW
@given(count=st.sampled_from([0, 1, 2 ** 32 - 1]), priority=st.sampled_from([0, 7, 2 ** 32 - 1]))
def test_accepted_rate_limiters_load_and_answer(python_lab, count, priority):
    _generate_and_load(python_lab, "--rate-limiter-resource", f"R:{count}", "--rate-limiter-priority", str(priority))


class AddSub(torch.nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor):
        return a + b, a - b


@pytest.mark.parametrize("key", ["INTRA_OP_THREAD_COUNT", "INTER_OP_THREAD_COUNT"])
@pytest.mark.parametrize("count", [1, thread_count_limit().value])
def test_thread_counts_up_to_the_hosts_limit_load_on_the_real_libtorch_backend(libtorch_backend_dir, tmp_path, key,
                                                                              count):
    """At the bound the generated config loads and answers; past it generate refuses
    (tests/test_input_bounds.py), where LibTorch's thread pool (EAGAIN) or std::stoi would abort
    the server."""
    torchscript = tmp_path / "add_sub.pt"
    torch.jit.trace(AddSub(), (torch.zeros(1, 4), torch.zeros(1, 4))).save(str(torchscript))
    repo = tmp_path / "repo"
    flag = "--" + key.lower().replace("_", "-")
    assert main(["generate", "--backend", "pytorch", "--compiled_model", str(torchscript), "--copy-compiled-model",
                 "--triton_input", "INPUT__0,FP32,4", "INPUT__1,FP32,4", "--triton_output", "OUTPUT__0,FP32,4",
                 "OUTPUT__1,FP32,4", "--max_batch_size", "8", "--triton_model_dir", str(repo / "threads"),
                 flag, str(count)]) == 0
    with TritonServer(repo, pytorch_backend=libtorch_backend_dir) as server:
        server.load("threads")
        _answers(server, "threads")
        assert server.running
