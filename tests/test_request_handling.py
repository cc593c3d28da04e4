"""Request handling in the two model.py templates, held to one rule and to the real PyTorch backend.

templates/python_model.py (the generated Python-backend model) and templates/pytorch_runtime.py
(the twin serving PyTorch-backend layouts where LibTorch is missing) are self-contained, so each
carries a copy of the request-reading code; the copies are checked equal here, and their NAME__i
rule against `workbench.spec.tensor_index`. On a real tritonserver a dynamic batch with one bad
request shows the behaviour each template owes its users: the generated model.py serves the good
requests and fails only the bad one (the workbench's own contract); the twin fails the batch,
because Triton's PyTorch backend does (libtorch.cc answers every response of a failed execution
with the error) -- compared request by request with the real LibTorch backend where it is
available ($WORKBENCH_LIBTORCH_BACKEND, or ../shared/tools/build_libtorch_backend.sh).
"""

from __future__ import annotations

import ast
import importlib.util
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import tritonclient.http as httpclient
from hypothesis import given, settings
from hypothesis import strategies as st
from tritonclient.utils import InferenceServerException

import workbench
from workbench import generate
from workbench.generate import pytorch_backend as ptb
from workbench.server import TritonServer, find_tritonserver
from workbench.spec import ModelSpec, SpecError, TensorSpec, tensor_index

ROOT = Path(__file__).resolve().parents[1]
TEMPLATES = Path(workbench.__file__).parent / "generate" / "templates"
PYTHON_MODEL, PYTORCH_RUNTIME = TEMPLATES / "python_model.py", TEMPLATES / "pytorch_runtime.py"
SHARED = ("RequestError", "tensor_index", "tensor_entry", "read_request", "error_response")

SPEC = ModelSpec.parse(["INPUT__0,FP32,2"], ["OUTPUT__0,FP32,2"])
ROWS = (1, 1, 2, 1, 1)  # five requests, six rows: with preferred_batch_size 6 they form exactly one batch
BAD = 2
QUEUE_DELAY_US = 30_000_000  # the batch closes when all six rows are in, long before this
STRICT_SOURCE = '''
import torch


class RejectsNegative(torch.nn.Module):
    def forward(self, x):
        if bool((x < 0).any()):
            raise ValueError("negative input")
        return x + 1
'''


class RejectsNegative(torch.nn.Module):
    def forward(self, x):
        if bool((x < 0).any()):
            raise ValueError("negative input")
        return x + 1


# --- the two copies, imported as the stub imports them ---------------------------------------------

@pytest.fixture(scope="module")
def templates():
    utils_dir = str(find_tritonserver().backend_dir / "python")
    sys.path.insert(0, utils_dir)
    try:
        loaded = {}
        for path in (PYTHON_MODEL, PYTORCH_RUNTIME):
            spec = importlib.util.spec_from_file_location(f"workbench_template_{path.stem}", path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            loaded[path.stem] = module
        return loaded
    finally:
        sys.path.remove(utils_dir)


def _shared_definitions(path: Path) -> dict[str, str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {node.name: ast.unparse(node) for node in tree.body
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name in SHARED}


def test_request_reading_is_the_same_code_in_both_templates():
    """Docstrings included: a change to one copy must be made to the other."""
    python_model, runtime = _shared_definitions(PYTHON_MODEL), _shared_definitions(PYTORCH_RUNTIME)
    assert sorted(python_model) == sorted(SHARED) == sorted(runtime)
    for name in SHARED:
        assert python_model[name] == runtime[name], f"{name} differs between the two templates"


@pytest.mark.parametrize("name, index", [
    ("INPUT__0", 0), ("OUTPUT__12", 12), ("x__007", 7), ("__3", 3), ("a_b__1", 1),
    # libtorch.cc splits at the first "__" and wants digits after it; upstream's model.py agrees
    ("a__1__2", None), ("a___0", None), ("INPUT__0x", None), ("INPUT__-1", None), ("INPUT__ 1", None),
    ("INPUT_0", None), ("INPUT0", None), ("INPUT__١", None), ("INPUT__²", None),
    ("INPUT__", None),  # LibTorch's atoi would read 0 here; this package says the name has no index
])
def test_tensor_index_rule(templates, name, index):
    assert tensor_index(name) == index
    if name.isascii() and " " not in name:
        assert TensorSpec(name, "FP32", (1,)).index == index
    else:  # the one tensor-name rule (limits.TENSOR_NAME_RULE) takes ASCII names without spaces only
        with pytest.raises(SpecError, match="bad tensor name"):
            TensorSpec(name, "FP32", (1,))
    for module in templates.values():
        assert module.tensor_index(name) == index


@settings(max_examples=400, deadline=None)
@given(st.one_of(
    st.text(alphabet=st.sampled_from("ab_09٣²x -"), max_size=10),
    st.builds(lambda stem, sep, rest: stem + sep + rest, st.text(max_size=4),
              st.sampled_from(["_", "__", "___", "____"]), st.text(alphabet="0123456789_x", max_size=4)),
    st.text(max_size=10),
))
def test_template_copies_of_tensor_index_follow_spec(templates, name):
    expected = tensor_index(name)
    for stem, module in templates.items():
        assert module.tensor_index(name) == expected, f"{stem}.tensor_index({name!r})"


class _Input:
    """The two methods pb_utils.get_input_tensor_by_name and read_request call on a request input."""

    def __init__(self, name: str, array: np.ndarray):
        self._name, self._array = name, array

    def name(self) -> str:
        return self._name

    def as_numpy(self) -> np.ndarray:
        return self._array


class _Request:
    def __init__(self, **arrays: np.ndarray):
        self._inputs = [_Input(name, array) for name, array in arrays.items()]

    def inputs(self) -> list[_Input]:
        return self._inputs


ENTRIES = [{"name": "x", "data_type": "TYPE_FP32", "dims": [2]},
           {"name": "y", "data_type": "TYPE_INT64", "dims": [3], "optional": True},
           {"name": "words", "data_type": "TYPE_STRING", "dims": [1], "reshape": {}}]
F32, I64 = np.float32, np.int64


@pytest.mark.parametrize("arrays, message", [
    ({"y": np.zeros((1, 3), I64)}, "input 'x' is missing"),
    ({"x": np.zeros((1, 2), np.float64)}, "input 'x' has dtype float64, expected float32"),
    ({"x": np.zeros((1, 2, 1), F32)}, "input 'x' has shape [1, 2, 1], expected [-1, 2]"),
    ({"x": np.zeros((1, 3), F32)}, "input 'x' has shape [1, 3], expected [-1, 2]"),
    ({"x": np.zeros((2, 2), F32), "y": np.zeros((3, 3), I64)}, "inputs disagree on the batch size (dim 0): x has 2, y has 3"),
    ({"x": np.zeros((2, 2), F32), "words": np.array([[b"a"], [b"b"]], dtype=object)},
     "input 'words' has shape [2, 1], expected [-1]"),  # a reshape to [] is what the backend receives
])
def test_bad_requests_get_the_same_words_from_both_templates(templates, arrays, message):
    for stem, module in templates.items():
        specs = [module.tensor_entry(entry, 8) for entry in ENTRIES[:2] + ([ENTRIES[2]] if "words" in arrays else [])]
        with pytest.raises(module.RequestError) as caught:
            module.read_request(_Request(**arrays), specs, True)
        assert str(caught.value) == message, stem


def test_a_good_request_is_read_in_config_order(templates):
    for module in templates.values():
        specs = [module.tensor_entry(entry, 8) for entry in ENTRIES]
        x, words = np.ones((2, 2), F32), np.array([b"a", b"b"], dtype=object)
        arrays = module.read_request(_Request(words=words, x=x), specs, True)
        assert arrays[0] is x and arrays[1] is None and arrays[2] is words  # y is optional and absent
        assert [spec["dims"] for spec in specs] == [[-1, 2], [-1, 3], [-1]]


# --- a batch with one bad request on a real tritonserver --------------------------------------------

def _requests(bad: bool = True) -> list[np.ndarray]:
    requests = [np.full((rows, 2), position + 1, dtype=np.float32) for position, rows in enumerate(ROWS)]
    if bad:
        requests[BAD][-1, 0] = -1.0
    return requests


def _burst(server: TritonServer, model: str, requests: list[np.ndarray]) -> list:
    """All requests at once; each result is the output array or the InferenceServerException."""
    client = httpclient.InferenceServerClient(server.http_url, concurrency=len(requests), network_timeout=300)
    try:
        pending = []
        for array in requests:
            item = httpclient.InferInput("INPUT__0", list(array.shape), "FP32")
            item.set_data_from_numpy(array)
            pending.append(client.async_infer(model, [item]))
        results = []
        for handle in pending:
            try:
                results.append(handle.get_result().as_numpy("OUTPUT__0"))
            except InferenceServerException as err:
                results.append(err)
        return results
    finally:
        client.close()


def _executions(server: TritonServer, model: str, requests: int) -> int:
    """execute() calls so far, read once Triton has counted all ``requests``."""
    for _ in range(300):
        stats = server.stats(model)["model_stats"][0]
        done = sum(int(stats["inference_stats"][kind].get("count", 0)) for kind in ("success", "fail"))
        if done >= requests:
            return int(stats.get("execution_count", 0))
        time.sleep(0.1)
    raise AssertionError(f"statistics of {model} never counted {requests} requests: {stats}")


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """One server: the generated Python-backend model and the twins of both PyTorch-backend layouts,
    each batching exactly the six rows of ROWS."""
    root = tmp_path_factory.mktemp("request_handling")
    served_repo, user_repo = root / "served", root / "model_repository"
    served_repo.mkdir()
    strict = torch.jit.script(RejectsNegative())
    torch.jit.save(strict, str(root / "strict.pt"))
    generate.write(generate.render(generate.GenerateSettings(
        triton_model_dir=str(served_repo / "strict_python"), compiled_model=str(root / "strict.pt"), target="cpu",
        triton_input=[t.upstream() for t in SPEC.inputs], triton_output=[t.upstream() for t in SPEC.outputs],
        max_batch_size=8, enable_dynamic_batching=True, preferred_batch_size=[sum(ROWS)],
        max_queue_delay_microseconds=QUEUE_DELAY_US)))
    batching = dict(max_batch_size=8, dynamic_batching=True, preferred_batch_sizes=[sum(ROWS)],
                    max_queue_delay_us=QUEUE_DELAY_US)
    ptb.write_torchscript_model(user_repo, ptb.build_pytorch_config("strict_torchscript", SPEC, **batching), strict)
    pt2 = ptb.build_pytorch_config("strict_pytorch2", SPEC, layout=ptb.PYTORCH2, **batching,
                                   parameters={"TORCH_COMPILE_OPTIONAL_PARAMETERS": {"disable": True}})
    ptb.write_pytorch2_model(user_repo, pt2, STRICT_SOURCE)
    for name in ("strict_torchscript", "strict_pytorch2"):
        plan = ptb.plan_serving(user_repo / name, twin_repository=served_repo)
        assert plan.served_as == ptb.SERVED_AS_PYTHON
    with TritonServer(served_repo) as server:
        for name in ("strict_python", "strict_torchscript", "strict_pytorch2"):
            server.load(name)
        yield {"server": server, "user_repo": user_repo}


@pytest.mark.server
def test_generated_model_fails_only_the_bad_request_of_a_batch(served):
    server = served["server"]
    requests = _requests()
    results = _burst(server, "strict_python", requests)
    for position, (array, result) in enumerate(zip(requests, results)):
        if position == BAD:
            assert isinstance(result, InferenceServerException), result
            assert result.message().startswith("inference failed: ") and "negative input" in result.message()
        else:
            assert not isinstance(result, Exception), result
            np.testing.assert_array_equal(result, array + 1)
    assert _executions(server, "strict_python", len(requests)) == 1, "the five requests were not one batch"


@pytest.mark.server
@pytest.mark.parametrize("model", ["strict_torchscript", "strict_pytorch2"])
def test_twin_fails_the_whole_batch_as_the_pytorch_backend_does(served, model):
    server = served["server"]
    before = _executions(server, model, 0)
    results = _burst(server, model, _requests())
    assert all(isinstance(result, InferenceServerException) for result in results), results
    (message,) = {result.message() for result in results}
    assert "negative input" in message
    if model == "strict_torchscript":
        assert message.startswith("PyTorch execute failure: The following operation failed in the TorchScript")
    else:  # the PyTorch 2 runtime lets the exception leave execute(); the Python backend words it
        assert message.startswith("Failed to process the request(s) for model 'strict_pytorch2_0_0'")
    assert _executions(server, model, len(ROWS)) == before + 1, "the five requests were not one batch"
    good = _requests(bad=False)
    for array, result in zip(good, _burst(server, model, good)):
        assert not isinstance(result, Exception), result
        np.testing.assert_array_equal(result, array + 1)


@pytest.mark.server
def test_twin_answers_each_request_as_the_real_libtorch_backend(served, libtorch_backend_dir):
    """The same TorchScript model directory on the real backend: every response equal, word for word."""
    backend = libtorch_backend_dir
    real = TritonServer(served["user_repo"], pytorch_backend=backend)
    with real:
        assert ptb.plan_serving(served["user_repo"] / "strict_torchscript", backend_dir=backend).served_as \
            == ptb.SERVED_AS_LIBTORCH
        real.load("strict_torchscript")
        assert real.model_config("strict_torchscript")["backend"] == "pytorch"
        answers = {}
        for bad in (True, False):
            answers[bad] = [_burst(server, "strict_torchscript", _requests(bad)) for server in (real, served["server"])]

    def outcome(result):
        return result.message() if isinstance(result, Exception) else result.tolist()

    for bad, (from_libtorch, from_twin) in answers.items():
        assert [outcome(r) for r in from_twin] == [outcome(r) for r in from_libtorch], f"batch with a bad request: {bad}"
