"""The generated model.py (workbench/generate/templates/python_model.py) on the cpu target.

Server tests write real model directories (config.pbtxt from workbench.generate.config, TorchScript models
traced or scripted here, the template copied as 1/model.py), load them into one real tritonserver
and compare what it serves with the same modules run in this process. The pure parts of the
template (core split, settings) are also imported directly: they must run outside Triton too.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import sys
import time
from pathlib import Path
from typing import List

import numpy as np
import pytest
import torch
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

import workbench
from workbench.generate.config import build_config, read_config, to_text
from workbench.coremap import CoreRangeError, split_cores
from workbench.server import ModelLoadError, TritonServer, find_tritonserver
from workbench.spec import ModelSpec

TEMPLATE = Path(workbench.__file__).parent / "generate" / "templates" / "python_model.py"
QUEUE_DELAY_US = 1_000_000  # long enough that a concurrent burst lands in shared execute() calls, even on a busy machine


# --- models (run by the server from TorchScript files, and here as the reference) -----------------

class AddSub(torch.nn.Module):
    def forward(self, a, b):
        return a + b, a - b  # a - b is asymmetric: swapped inputs would show


class TripleInt32(torch.nn.Module):
    """A single tensor, of a dtype (int32) other than the config's output dtype (INT64)."""

    def forward(self, x):
        return x * 3


class CountingDouble(torch.nn.Module):
    """Returns a list; the second output is how many forward calls this instance has made, so the
    test can see which requests shared one forward pass."""

    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x) -> List[torch.Tensor]:
        self.calls += 1
        return [x * 2, torch.full([x.shape[0], 1], self.calls, dtype=torch.int64)]


class RejectsNegative(torch.nn.Module):
    def forward(self, x):
        if bool((x < 0).any()):
            raise ValueError("negative input")
        return x + 1


def save_module(module, path: Path, example=None) -> Path:
    scripted = torch.jit.trace(module, example) if example is not None else torch.jit.script(module)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.jit.save(scripted, str(path))
    return path


def write_model(
    repo: Path,
    name: str,
    inputs: list[str],
    outputs: list[str],
    *,
    compiled_model: str = "model.pt",
    max_batch_size: int = 0,
    instance_count: int = 1,
    **parameters,
) -> Path:
    """A model directory as workbench.generate lays it out: config.pbtxt, 1/model.py, the model file.
    A parameter given as None is left out (as in upstream-generated directories)."""
    directory = repo / name
    (directory / "1").mkdir(parents=True, exist_ok=True)
    params = {"COMPILED_MODEL": compiled_model, "WORKBENCH_TARGET": "cpu", "WORKBENCH_FRAMEWORK": "pytorch"}
    params.update({key: str(value) for key, value in parameters.items()})
    params = {key: value for key, value in params.items() if parameters.get(key, "") is not None}
    cfg = build_config(
        name,
        ModelSpec.parse(inputs, outputs),
        max_batch_size=max_batch_size,
        dynamic_batching=max_batch_size > 0,
        max_queue_delay_us=QUEUE_DELAY_US if max_batch_size > 0 else None,
        instance_count=instance_count,
        parameters=params,
    )
    (directory / "config.pbtxt").write_text(to_text(cfg))
    shutil.copy(TEMPLATE, directory / "1" / "model.py")
    return directory


# --- client helpers ----------------------------------------------------------------------------

def burst(server: TritonServer, model: str, requests: list[dict[str, np.ndarray]]) -> list:
    """Send all requests at once; each result is an InferResult or the InferenceServerException."""
    client = httpclient.InferenceServerClient(server.http_url, concurrency=len(requests), network_timeout=300)
    try:
        handles = []
        for arrays in requests:
            inputs = []
            for name, array in arrays.items():
                tensor = httpclient.InferInput(name, list(array.shape), _wire(array.dtype))
                tensor.set_data_from_numpy(array)
                inputs.append(tensor)
            handles.append(client.async_infer(model, inputs))
        results = []
        for handle in handles:
            try:
                results.append(handle.get_result())
            except InferenceServerException as err:
                results.append(err)
        return results
    finally:
        client.close()


def _wire(dtype) -> str:
    return {"float32": "FP32", "int32": "INT32", "int64": "INT64"}[np.dtype(dtype).name]


def counts(server: TritonServer, model: str, requests: int) -> tuple[int, int]:
    """(rows served, execute() calls) from Triton's own statistics, once all ``requests`` are
    accounted for: Triton may update them just after the last response reaches the client."""
    previous = None
    for _ in range(300):
        stats = server.stats(model)["model_stats"][0]
        finished = sum(int(stats["inference_stats"][kind].get("count", 0)) for kind in ("success", "fail"))
        now = (int(stats.get("inference_count", 0)), int(stats.get("execution_count", 0)))
        if finished == requests and now == previous:
            return now
        previous = now
        time.sleep(0.1)
    raise AssertionError(f"statistics of {model} never settled: {stats}")


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("repository")


@pytest.fixture(scope="module")
def shared_server(repo):
    with TritonServer(repo) as running:
        yield running


@pytest.fixture
def server(shared_server):
    """The module's server; the models a test loaded are unloaded after it, so their stubs (torch,
    TensorFlow) do not pile up in memory."""
    yield shared_server
    for row in shared_server.index():
        if row["state"] == "READY":
            shared_server.unload(row["name"])


def rng_inputs(sizes, seed=0, shape=(4,)):
    rng = np.random.default_rng(seed)
    return [
        {"INPUT__0": rng.standard_normal((n, *shape)).astype(np.float32),
         "INPUT__1": rng.standard_normal((n, *shape)).astype(np.float32)}
        for n in sizes
    ]


# --- server tests ------------------------------------------------------------------------------

@pytest.mark.server
@pytest.mark.parametrize("max_batch_size", [8, 0])
def test_concurrent_requests_match_eager_with_inputs_declared_out_of_order(server, repo, max_batch_size):
    """INPUT__1 and OUTPUT__1 are declared first: model.py must still pass inputs by their index."""
    name = f"addsub_b{max_batch_size}"
    dims = "4" if max_batch_size else "-1x4"
    save_module(AddSub(), repo / name / "model.pt", (torch.ones(2, 4), torch.ones(2, 4)))
    write_model(repo, name, [f"INPUT__1,FP32,{dims}", f"INPUT__0,FP32,{dims}"],
                [f"OUTPUT__1,FP32,{dims}", f"OUTPUT__0,FP32,{dims}"], max_batch_size=max_batch_size)
    server.load(name)
    requests = rng_inputs(range(1, 9))
    results = burst(server, name, requests)
    for arrays, result in zip(requests, results):
        assert not isinstance(result, Exception), result
        a, b = torch.from_numpy(arrays["INPUT__0"]), torch.from_numpy(arrays["INPUT__1"])
        plus, minus = AddSub()(a, b)
        np.testing.assert_allclose(result.as_numpy("OUTPUT__0"), plus.numpy(), rtol=1e-6)
        np.testing.assert_allclose(result.as_numpy("OUTPUT__1"), minus.numpy(), rtol=1e-6)
    served, executions = counts(server, name, len(requests))
    if max_batch_size:
        assert served == sum(range(1, 9))  # Triton counts rows when it batches
        assert executions < len(requests), f"the dynamic batcher never gave execute() several requests ({executions})"


@pytest.mark.server
def test_single_tensor_result_converted_to_config_dtype_and_absolute_path(server, repo, tmp_path):
    """The model returns one int32 tensor; the config says INT64. COMPILED_MODEL is absolute and
    outside the model folder, so it must be used as written."""
    outside = save_module(TripleInt32(), tmp_path / "elsewhere" / "triple.pt", (torch.ones(1, 3, dtype=torch.int32),))
    write_model(repo, "triple", ["INPUT__0,INT32,3"], ["OUTPUT__0,INT64,3"], compiled_model=str(outside),
                max_batch_size=4)
    server.load("triple")
    requests = [{"INPUT__0": np.arange(3 * n, dtype=np.int32).reshape(n, 3) - 4} for n in (1, 2, 3, 4)]
    for arrays, result in zip(requests, burst(server, "triple", requests)):
        assert not isinstance(result, Exception), result
        out = result.as_numpy("OUTPUT__0")
        assert out.dtype == np.int64
        np.testing.assert_array_equal(out, arrays["INPUT__0"].astype(np.int64) * 3)


@pytest.mark.server
@pytest.mark.parametrize("batch_requests", ["true", "false"])
def test_batched_mode_runs_one_forward_per_execute(server, repo, batch_requests):
    """With BATCH_REQUESTS=true the requests Triton hands over together share one forward (equal
    call counts); with false each request gets its own forward (all counts differ)."""
    name = f"counting_{batch_requests}"
    save_module(CountingDouble(), repo / name / "model.pt")
    write_model(repo, name, ["INPUT__0,FP32,4"], ["OUTPUT__0,FP32,4", "OUTPUT__1,INT64,1"],
                max_batch_size=8, BATCH_REQUESTS=batch_requests)
    server.load(name)
    requests = [{"INPUT__0": arrays["INPUT__0"]} for arrays in rng_inputs([1, 2, 1, 3, 1, 2], seed=3)]
    results = burst(server, name, requests)
    calls = []
    for arrays, result in zip(requests, results):
        assert not isinstance(result, Exception), result
        np.testing.assert_allclose(result.as_numpy("OUTPUT__0"), arrays["INPUT__0"] * 2, rtol=1e-6)
        column = result.as_numpy("OUTPUT__1")
        assert column.shape == (len(arrays["INPUT__0"]), 1) and len(set(column.ravel())) == 1
        calls.append(int(column[0, 0]))
    _, executions = counts(server, name, len(requests))
    assert executions < len(requests), f"the dynamic batcher never gave execute() several requests ({executions})"
    if batch_requests == "true":
        assert len(set(calls)) == executions, f"forward call numbers {calls} for {executions} execute() calls"
    else:
        assert sorted(calls) == list(range(1, len(requests) + 1)), f"forward call numbers {calls}"


@pytest.mark.server
def test_failing_request_fails_alone_in_a_batch(server, repo):
    """The batched forward raises because of one request; model.py retries one by one so only that
    request fails."""
    save_module(RejectsNegative(), repo / "strict" / "model.pt")
    write_model(repo, "strict", ["INPUT__0,FP32,2"], ["OUTPUT__0,FP32,2"], max_batch_size=8)
    server.load("strict")
    requests = [{"INPUT__0": np.full((n, 2), n, dtype=np.float32)} for n in (1, 2, 3, 1, 2)]
    requests[2]["INPUT__0"][1, 0] = -1.0
    results = burst(server, "strict", requests)
    for position, (arrays, result) in enumerate(zip(requests, results)):
        if position == 2:
            assert isinstance(result, InferenceServerException)
            assert "negative input" in result.message()
        else:
            assert not isinstance(result, Exception), result
            np.testing.assert_array_equal(result.as_numpy("OUTPUT__0"), arrays["INPUT__0"] + 1)
    _, executions = counts(server, "strict", len(requests))
    assert executions < len(requests), f"the dynamic batcher never gave execute() several requests ({executions})"


@pytest.mark.server
def test_request_with_inconsistent_batch_dims_fails_alone(server, repo):
    """max_batch_size 0 with dims [-1, 4]: Triton accepts inputs with different dim 0, model.py must
    refuse that request with a clear message and serve the others."""
    save_module(AddSub(), repo / "addsub_plain" / "model.pt", (torch.ones(2, 4), torch.ones(2, 4)))
    write_model(repo, "addsub_plain", ["INPUT__0,FP32,-1x4", "INPUT__1,FP32,-1x4"],
                ["OUTPUT__0,FP32,-1x4", "OUTPUT__1,FP32,-1x4"])
    server.load("addsub_plain")
    requests = rng_inputs([2, 3, 1], seed=5)
    requests[1]["INPUT__1"] = requests[1]["INPUT__1"][:2]
    results = burst(server, "addsub_plain", requests)
    assert isinstance(results[1], InferenceServerException)
    assert "disagree on the batch size" in results[1].message() and "INPUT__1 has 2" in results[1].message()
    for position in (0, 2):
        assert not isinstance(results[position], Exception), results[position]
        np.testing.assert_allclose(results[position].as_numpy("OUTPUT__0"),
                                   requests[position]["INPUT__0"] + requests[position]["INPUT__1"], rtol=1e-6)


@pytest.mark.server
def test_two_instances_pin_the_cores_the_core_map_gives(server, repo):
    """instance_count 2 over cores 0:1 with CPU_AFFINITY: each stub process is pinned to its core
    (read from the kernel) and logs the thread count cores x NUM_THREADS_PER_CORE."""
    if not {0, 1} <= os.sched_getaffinity(0):
        pytest.skip("needs CPU cores 0 and 1 available to this process")
    save_module(AddSub(), repo / "pinned" / "model.pt", (torch.ones(2, 4), torch.ones(2, 4)))
    write_model(repo, "pinned", ["INPUT__0,FP32,4", "INPUT__1,FP32,4"], ["OUTPUT__0,FP32,4", "OUTPUT__1,FP32,4"],
                max_batch_size=4, instance_count=2, NEURON_CORE_START_INDEX=0, NEURON_CORE_END_INDEX=1,
                NUM_THREADS_PER_CORE=2, CPU_AFFINITY="true")
    server.load("pinned")
    core_map = split_cores(0, 1, 2, 2)
    stubs = _stub_processes(repo / "pinned" / "1" / "model.py")
    assert sorted(stubs) == ["pinned_0_0", "pinned_0_1"]
    log = "\n".join(server.log_tail(400))
    for name, pid in stubs.items():
        k = int(name.rsplit("_", 1)[1])
        assert os.sched_getaffinity(pid) == set(core_map.cores(k))
        assert (f"workbench instance {k}/2: target cpu framework pytorch cores {core_map.visible_cores(k)} "
                f"threads {core_map.threads()} cpu affinity {list(core_map.cores(k))}") in log
    requests = rng_inputs([1, 2, 3, 4], seed=7)
    for arrays, result in zip(requests, burst(server, "pinned", requests)):
        assert not isinstance(result, Exception), result
        np.testing.assert_allclose(result.as_numpy("OUTPUT__1"), arrays["INPUT__0"] - arrays["INPUT__1"], rtol=1e-6)


@pytest.mark.server
def test_cores_the_process_may_not_use_are_skipped_with_a_warning(server, repo):
    """A core range reaching past this machine's CPUs: the instance pins the cores it may use and
    says which it skipped, instead of failing to load."""
    last = max(os.sched_getaffinity(0))
    save_module(AddSub(), repo / "pinned_past" / "model.pt", (torch.ones(2, 4), torch.ones(2, 4)))
    write_model(repo, "pinned_past", ["INPUT__0,FP32,4", "INPUT__1,FP32,4"], ["OUTPUT__0,FP32,4", "OUTPUT__1,FP32,4"],
                max_batch_size=4, NEURON_CORE_START_INDEX=last, NEURON_CORE_END_INDEX=last + 1, CPU_AFFINITY="true")
    server.load("pinned_past")
    (pid,) = _stub_processes(repo / "pinned_past" / "1" / "model.py").values()
    assert os.sched_getaffinity(pid) == {last}
    log = "\n".join(server.log_tail(400))
    assert f"workbench instance 0: CPU core(s) [{last + 1}] are not available to this process" in log
    assert f"cpu affinity [{last}] model {repo / 'pinned_past' / 'model.pt'}" in log


class MatMul(torch.nn.Module):
    """Big enough for torch to run its intra-op thread pool."""

    def forward(self, x):
        return x @ x.t() @ x


def _thread_affinities(pid: int) -> dict[int, set[int]]:
    """thread id -> the CPUs the kernel lets it run on, for every thread of process ``pid``."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            out[int(tid)] = os.sched_getaffinity(int(tid))
        except ProcessLookupError:
            pass  # ended meanwhile
    return out


@pytest.mark.server
def test_pinning_moves_the_compute_threads_and_leaves_the_stubs_own_threads_alone(server, repo):
    """CPU_AFFINITY pins the thread that runs the model and the intra-op pool torch starts from it;
    the stub's own threads (health check, IPC) keep the server's CPUs, so a busy core cannot make
    them miss the health check during initialize (which hangs r24.10's load for good)."""
    allowed = os.sched_getaffinity(0)
    if len(allowed) < 2:
        pytest.skip("needs two CPUs: one to pin, one the stub's own threads keep")
    core = min(allowed)
    save_module(MatMul(), repo / "pinned_pool" / "model.pt", (torch.ones(64, 64),))
    write_model(repo, "pinned_pool", ["INPUT__0,FP32,64x64"], ["OUTPUT__0,FP32,64x64"], NEURON_CORE_START_INDEX=core,
                NEURON_CORE_END_INDEX=core, NUM_THREADS_PER_CORE=2, CPU_AFFINITY="true")
    server.load("pinned_pool")
    (pid,) = _stub_processes(repo / "pinned_pool" / "1" / "model.py").values()
    before = _thread_affinities(pid)
    x = np.random.default_rng(3).standard_normal((64, 64)).astype(np.float32)
    for result in burst(server, "pinned_pool", [{"INPUT__0": x}] * 3):
        assert not isinstance(result, Exception), result
        np.testing.assert_allclose(result.as_numpy("OUTPUT__0"), x @ x.T @ x, rtol=1e-3, atol=1e-3)
    after = _thread_affinities(pid)
    stubs_own = {tid for tid, cpus in before.items() if cpus == server_cpus(pid)}
    pinned = {tid for tid, cpus in after.items() if cpus == {core}}
    started = set(after) - set(before)  # threads the first forward started: torch's intra-op pool
    assert pid in pinned, "the stub's main thread (which loads and runs the model) is not on its core"
    assert started and started <= pinned, f"torch's pool threads {started} did not inherit the pin: {after}"
    assert stubs_own, f"every thread of the stub was pinned to core {core}: {after}"
    assert not stubs_own & pinned


def server_cpus(pid: int) -> set[int]:
    """The CPUs tritonserver (the stub's parent) may use: what an unpinned stub thread keeps."""
    parent = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    return os.sched_getaffinity(parent)


def _stub_processes(model_py: Path) -> dict[str, int]:
    """instance name -> pid of the python backend stubs running ``model_py`` (the stub's command
    line is: stub, model.py path, ..., instance name, runtime)."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().decode().split("\0")
        except OSError:
            continue
        if len(argv) > 3 and argv[0].endswith("triton_python_backend_stub") and argv[1] == str(model_py):
            found[argv[-3] if argv[-1] == "" else argv[-2]] = int(entry)
    return found


@pytest.mark.server
@pytest.mark.parametrize(
    ("name", "inputs", "parameters", "message"),
    [
        ("bad_path", ["INPUT__0,FP32,4"], {"COMPILED_MODEL": "missing.pt"}, "COMPILED_MODEL 'missing.pt' not found"),
        ("bad_names", ["x,FP32,4"], {}, "input 'x': PyTorch models need names of the form NAME__i"),
        ("bad_range", ["INPUT__0,FP32,4"], {"NEURON_CORE_START_INDEX": 3, "NEURON_CORE_END_INDEX": 1},
         "core range 3:1 is reversed"),
        ("bad_target", ["INPUT__0,FP32,4"], {"WORKBENCH_TARGET": "gpu"}, "WORKBENCH_TARGET = 'gpu' is not one of"),
        ("bad_flag", ["INPUT__0,FP32,4"], {"BATCH_REQUESTS": "maybe"}, "BATCH_REQUESTS = 'maybe' must be"),
        ("no_sdk", ["INPUT__0,FP32,4"], {"WORKBENCH_TARGET": "inf1"},
         "target inf1 with framework pytorch needs the Python package 'torch_neuron'"),
    ],
)
def test_bad_settings_fail_the_load_with_a_clear_message(server, repo, name, inputs, parameters, message):
    save_module(TripleInt32(), repo / name / "model.pt", (torch.ones(1, 3, dtype=torch.int32),))
    write_model(repo, name, inputs, ["OUTPUT__0,FP32,4"], max_batch_size=2, **parameters)
    with pytest.raises(ModelLoadError) as caught:
        server.load(name)
    assert message in str(caught.value)


THP_MODE = Path("/sys/kernel/mm/transparent_hugepage/enabled")


def _huge_page_advised_mb(pid: int) -> list[float]:
    """Sizes (MB) of the mappings of ``pid`` madvised for transparent huge pages (VmFlags "hg")."""
    sizes = []
    for block in re.split(r"\n(?=[0-9a-f]+-[0-9a-f]+ )", Path(f"/proc/{pid}/smaps").read_text()):
        flags = re.search(r"VmFlags:(.*)", block)
        if flags and "hg" in flags.group(1).split():
            sizes.append(int(re.search(r"\nSize:\s+(\d+) kB", block).group(1)) / 1024)
    return sizes


@pytest.mark.server
def test_cpu_weights_go_in_huge_pages_unless_the_server_turns_it_off(repo, monkeypatch):
    """model.py sets THP_MEM_ALLOC_ENABLE=1 before torch is imported, so the 4 MB weight is madvised
    for 2 MB pages in the stub; a THP_MEM_ALLOC_ENABLE=0 given to the server is kept (no such mapping)."""
    if not THP_MODE.is_file() or "[never]" in THP_MODE.read_text():
        pytest.skip("the kernel's transparent huge pages are off (or absent)")
    monkeypatch.delenv("THP_MEM_ALLOC_ENABLE", raising=False)
    torch.manual_seed(0)
    linear = torch.nn.Linear(1024, 1024).eval()  # a 4 MB weight
    save_module(linear, repo / "huge_pages" / "model.pt", (torch.ones(1, 1024),))
    write_model(repo, "huge_pages", ["INPUT__0,FP32,1024"], ["OUTPUT__0,FP32,1024"], max_batch_size=4)
    x = np.random.default_rng(5).standard_normal((3, 1024)).astype(np.float32)
    advised = {}
    for setting, env in (("default", {}), ("off", {"THP_MEM_ALLOC_ENABLE": "0"})):
        with TritonServer(repo, env=env) as own:
            own.load("huge_pages")
            (result,) = burst(own, "huge_pages", [{"INPUT__0": x}])
            assert not isinstance(result, Exception), result
            with torch.no_grad():
                np.testing.assert_allclose(result.as_numpy("OUTPUT__0"), linear(torch.from_numpy(x)).numpy(),
                                           rtol=1e-5, atol=1e-5)
            (pid,) = _stub_processes(repo / "huge_pages" / "1" / "model.py").values()
            advised[setting] = _huge_page_advised_mb(pid)
    assert any(mb >= 4 for mb in advised["default"]), f"no mapping of >= 4 MB madvised for huge pages: {advised}"
    assert not any(mb >= 4 for mb in advised["off"]), f"THP_MEM_ALLOC_ENABLE=0 was not kept: {advised}"


def tf_add_sub(path: Path):
    """A TF2 SavedModel whose serving signature takes keys a, b and returns keys sum, diff."""
    tf = pytest.importorskip("tensorflow")

    class AddSubTF(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="a"),
                                      tf.TensorSpec([None, 4], tf.float32, name="b")])
        def serve(self, a, b):
            return {"sum": a + b, "diff": a - b}

    module = AddSubTF()
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.serve})


def tf_requests(sizes, seed):
    rng = np.random.default_rng(seed)
    return [{"a": rng.standard_normal((n, 4)).astype(np.float32), "b": rng.standard_normal((n, 4)).astype(np.float32)}
            for n in sizes]


@pytest.mark.server
def test_tensorflow_savedmodel_fed_by_signature_keys(server, repo):
    """Config names are the signature keys, in any order; one signature call per batch."""
    tf_add_sub(repo / "tf_addsub" / "saved")
    write_model(repo, "tf_addsub", ["b,FP32,4", "a,FP32,4"], ["diff,FP32,4", "sum,FP32,4"], compiled_model="saved",
                max_batch_size=8, WORKBENCH_FRAMEWORK="tensorflow")
    server.load("tf_addsub")
    requests = tf_requests([1, 2, 3, 4, 5], seed=9)
    for arrays, result in zip(requests, burst(server, "tf_addsub", requests)):
        assert not isinstance(result, Exception), result
        np.testing.assert_allclose(result.as_numpy("sum"), arrays["a"] + arrays["b"], rtol=1e-6)
        np.testing.assert_allclose(result.as_numpy("diff"), arrays["a"] - arrays["b"], rtol=1e-6)
    _, executions = counts(server, "tf_addsub", len(requests))
    assert executions < len(requests), f"the dynamic batcher never gave execute() several requests ({executions})"


@pytest.mark.server
def test_tensorflow_config_names_must_be_signature_keys(server, repo):
    tf_add_sub(repo / "tf_misnamed" / "saved")
    write_model(repo, "tf_misnamed", ["a,FP32,4", "x:0,FP32,4"], ["sum,FP32,4"], compiled_model="saved",
                max_batch_size=8, WORKBENCH_FRAMEWORK="tensorflow")
    with pytest.raises(ModelLoadError) as caught:
        server.load("tf_misnamed")
    assert "must be the signature 'serving_default' keys: inputs ['a', 'b']" in str(caught.value)


@pytest.mark.server
def test_causal_lm_on_cpu_generates_greedily(server, repo):
    """The transformers_neuronx framework on the cpu target: the save_pretrained folder that
    compiler/tnx.py packages, served with transformers; requests asking for different lengths are
    generated separately, equal ones together; without the optional sequence_length input the
    length is TNX_SEQUENCE_LENGTH."""
    pytest.importorskip("transformers")
    from workbench.compiler.tnx import package_causal_lm, tiny_causal_lm

    model = tiny_causal_lm("gpt2", vocab_size=64, hidden_size=16, layers=1, max_positions=32)
    package_causal_lm(model, "cpu", out_dir=repo / "lm_cpu", name="checkpoint")
    write_model(repo, "lm_cpu", ["input_ids,INT64,-1", "sequence_length,INT64,1"], ["output_ids,INT64,-1"],
                compiled_model="checkpoint", max_batch_size=4, WORKBENCH_FRAMEWORK="transformers_neuronx",
                TNX_N_POSITIONS=32, TNX_SEQUENCE_LENGTH=16)
    cfg = read_config(repo / "lm_cpu")
    cfg.input[1].optional = True
    (repo / "lm_cpu" / "config.pbtxt").write_text(to_text(cfg))
    server.load("lm_cpu")
    rng = np.random.default_rng(4)
    requests = [{"input_ids": rng.integers(2, 64, size=(rows, 4)).astype(np.int64),
                 "sequence_length": np.full((rows, 1), length, dtype=np.int64)}
                for rows, length in ((1, 9), (2, 12), (1, 9), (2, 40), (1, 0))]
    del requests[-1]["sequence_length"]
    for arrays, result in zip(requests, burst(server, "lm_cpu", requests)):
        assert not isinstance(result, Exception), result
        asked = int(arrays["sequence_length"][0, 0]) if "sequence_length" in arrays else 16
        length = min(asked, 16)  # capped at TNX_SEQUENCE_LENGTH
        ids = torch.from_numpy(arrays["input_ids"])
        with torch.inference_mode():
            expected = model.generate(ids, attention_mask=torch.ones_like(ids), max_length=length,
                                      min_length=length, do_sample=False, pad_token_id=1).numpy()
        np.testing.assert_array_equal(result.as_numpy("output_ids"), expected)


# --- the template imported directly ------------------------------------------------------------

@pytest.fixture(scope="module")
def template():
    """The template as a module, importing the real triton_python_backend_utils the server uses."""
    utils_dir = str(find_tritonserver().backend_dir / "python")
    sys.path.insert(0, utils_dir)
    try:
        spec = importlib.util.spec_from_file_location("workbench_python_model_under_test", TEMPLATE)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(utils_dir)


def test_template_is_self_contained():
    """Copied into Triton containers without this package: top-level imports are the standard
    library, numpy and triton_python_backend_utils; frameworks are imported inside the seam."""
    import ast

    tree = ast.parse(TEMPLATE.read_text())
    top = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            top |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            top.add(node.module.split(".")[0])
    assert top - set(sys.stdlib_module_names) == {"numpy", "triton_python_backend_utils"}
    every = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    every |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert not [name for name in every if name.split(".")[0] == "workbench"]


def test_core_split_equals_coremap(template):
    """model.py keeps its own copy of the split (it runs where workbench is not installed)."""
    checked = 0
    for start in range(0, 5):
        for end in range(-1, 20):
            for instances in range(0, 10):
                for threads in (0, 1, 3):
                    try:
                        expected = split_cores(start, end, instances, threads)
                    except CoreRangeError as err:
                        with pytest.raises(template.SettingsError) as caught:
                            template.split_cores(start, end, instances, threads)
                        assert str(caught.value) == str(err)
                        continue
                    cpi, per_instance_threads = template.split_cores(start, end, instances, threads)
                    assert (cpi, per_instance_threads) == (expected.cores_per_instance, expected.threads())
                    for k in range(instances):
                        cores = template.instance_cores(start, cpi, k)
                        assert cores == list(expected.cores(k))
                        assert template.visible_cores(cores) == expected.visible_cores(k)
                    checked += 1
    assert checked > 500


def _settings_config(**parameters):
    return {
        "name": "m",
        "max_batch_size": 0,
        "instance_group": [{"count": parameters.pop("count", 1), "kind": "KIND_MODEL"}],
        "parameters": {key: {"string_value": str(value)} for key, value in parameters.items()},
    }


def test_upstream_directory_defaults(template, tmp_path):
    """A directory written by upstream gen_triton_model.py: no WORKBENCH_* parameters. Without the
    Neuron SDK installed the target falls back to cpu; a file means pytorch, a SavedModel folder
    tensorflow; BATCH_REQUESTS defaults to true."""
    (tmp_path / "model.pt").write_bytes(b"x")
    (tmp_path / "saved" / "v").mkdir(parents=True)
    (tmp_path / "saved" / "saved_model.pb").write_bytes(b"x")
    upstream = dict(NEURON_CORE_START_INDEX=0, NEURON_CORE_END_INDEX=7, NUM_THREADS_PER_CORE=1, count=3)
    settings = template.read_settings(_settings_config(COMPILED_MODEL="model.pt", **upstream), str(tmp_path), "m_0_2")
    assert settings["framework"] == "pytorch" and settings["target"] == "cpu"
    assert settings["instance"] == 2 and settings["cores"] == [4, 5] and settings["threads"] == 2
    assert settings["batch_requests"] is True and settings["cpu_affinity"] is False
    assert settings["path"] == str(tmp_path / "model.pt")
    saved = template.read_settings(_settings_config(COMPILED_MODEL="saved", **upstream), str(tmp_path), "m_0_0")
    assert saved["framework"] == "tensorflow"


def test_tables_equal_the_workbench_ones(template):
    """model.py runs where the workbench is not installed, so it keeps copies of these tables."""
    from workbench import system
    from workbench.compiler import tnx
    from workbench.generate import settings

    assert template.TARGETS == system.TARGETS and template.NEURON_TARGETS == system.NEURON_TARGETS
    assert template.FRAMEWORK_TARGETS == system.FRAMEWORK_TARGETS
    assert template.FRAMEWORKS == tuple(system.FRAMEWORK_TARGETS)  # what WORKBENCH_FRAMEWORK may say
    assert template.TNX_AMPS == settings.TNX_AMPS  # what the generator offers is what model.py accepts
    assert template.SAMPLING_CLASSES == tnx.SAMPLING_CLASSES
    assert template.STOPS_AT_EOS == tnx.STOPS_AT_EOS and template.NOT_SERIALIZABLE == tnx.NOT_SERIALIZABLE
    assert set(template.LOADERS) == {(t, f) for f, targets in system.FRAMEWORK_TARGETS.items() for t in targets}


@pytest.mark.parametrize(("parameters", "upstream", "threads", "num_workers"), [
    ({}, False, 2, None),  # absent: the SDK's DataParallel default (2 x cores)
    ({"NUM_THREADS_PER_CORE": ""}, False, 2, None),
    ({"NUM_THREADS_PER_CORE": "1"}, False, 2, 2),  # asked for: cores x 1
    ({"NUM_THREADS_PER_CORE": "3"}, False, 6, 6),
    ({"NUM_THREADS_PER_CORE": "1"}, True, 2, None),  # upstream writes "1" whether asked or not
    ({"NUM_THREADS_PER_CORE": "2"}, True, 4, 4),
])
def test_num_threads_per_core_sets_workers_only_when_asked(template, tmp_path, parameters, upstream, threads,
                                                            num_workers):
    (tmp_path / "model.pt").write_bytes(b"x")
    ours = {} if upstream else {"WORKBENCH_TARGET": "inf2", "WORKBENCH_FRAMEWORK": "pytorch"}
    config = _settings_config(COMPILED_MODEL="model.pt", NEURON_CORE_START_INDEX=2, NEURON_CORE_END_INDEX=3,
                              **ours, **parameters)
    settings = template.read_settings(config, str(tmp_path), "m_0_0")
    assert (settings["threads"], settings["num_workers"]) == (threads, num_workers)


def test_upstream_inf1_compiled_model_is_relative_to_the_working_directory(template, tmp_path, monkeypatch):
    """Upstream's inf1 model.py opened COMPILED_MODEL as written; its --inf2 one joined it with the model
    folder (gen_triton_model.py; README: "When using the --inf2 option, the --compiled_model path should
    be provided relative to the triton model directory")."""
    model_dir, server_dir = tmp_path / "model", tmp_path / "server"
    (server_dir / "traced").mkdir(parents=True)
    (server_dir / "traced" / "m.pt").write_bytes(b"x")
    model_dir.mkdir()
    monkeypatch.chdir(server_dir)
    config = _settings_config(COMPILED_MODEL="traced/m.pt")
    monkeypatch.setattr(template, "_infer_target", lambda framework: "inf1")
    assert template.read_settings(config, str(model_dir), "m_0_0")["path"] == str(server_dir / "traced" / "m.pt")
    monkeypatch.setattr(template, "_infer_target", lambda framework: "inf2")
    with pytest.raises(template.SettingsError, match="relative paths are resolved against the model folder"):
        template.read_settings(config, str(model_dir), "m_0_0")
    ours = _settings_config(COMPILED_MODEL="traced/m.pt", WORKBENCH_TARGET="inf1")  # ours: always the model folder
    with pytest.raises(template.SettingsError, match=f"looked at {model_dir / 'traced' / 'm.pt'}"):
        template.read_settings(ours, str(model_dir), "m_0_0")


def test_trn2_serves_pytorch_only(template, tmp_path):
    (tmp_path / "model.pt").write_bytes(b"x")
    (tmp_path / "hf").mkdir()
    trn2 = template.read_settings(_settings_config(COMPILED_MODEL="model.pt", WORKBENCH_TARGET="trn2",
                                                   WORKBENCH_FRAMEWORK="pytorch"), str(tmp_path), "m_0_0")
    # from Neuron 2.34 trn2/trn3 serve through TorchNeuron, not the PyTorch/XLA loader
    assert template.LOADERS[(trn2["target"], trn2["framework"])] is template.load_pytorch_torchneuron
    assert template.LOADERS[("trn3", "pytorch")] is template.load_pytorch_torchneuron
    for framework, compiled in (("tensorflow", "model.pt"), ("transformers_neuronx", "hf")):
        with pytest.raises(template.SettingsError, match=f"{framework} runs on .* \\(or cpu\\), not trn2"):
            template.read_settings(_settings_config(COMPILED_MODEL=compiled, WORKBENCH_TARGET="trn2",
                                                    WORKBENCH_FRAMEWORK=framework), str(tmp_path), "m_0_0")


def test_transformers_neuronx_class_follows_the_checkpoint(template, tmp_path):
    """No TNX_MODEL_CLASS: the SDK's class for the checkpoint's model_type (NeuronAutoModelForCausalLM's
    table); EOS ids are read from its config.json."""
    import json

    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "config.json").write_text(json.dumps({"model_type": "gpt2", "eos_token_id": 50256}))
    config = _settings_config(COMPILED_MODEL="hf", WORKBENCH_FRAMEWORK="transformers_neuronx", WORKBENCH_TARGET="cpu")
    tnx = template.read_settings(config, str(tmp_path), "m_0_0")["tnx"]
    assert tnx["model_class"] == "GPT2ForSamplingWithContextBroadcasting" and tnx["stops_at_eos"] is False
    assert tnx["eos_token_ids"] == [50256]
    (tmp_path / "hf" / "config.json").write_text(json.dumps({"model_type": "mistral", "eos_token_id": [2, 7]}))
    tnx = template.read_settings(config, str(tmp_path), "m_0_0")["tnx"]
    assert tnx["model_class"] == "MistralForSampling" and tnx["stops_at_eos"] and tnx["eos_token_ids"] == [2, 7]
    (tmp_path / "hf-neuron").mkdir()
    gptj = _settings_config(COMPILED_MODEL="hf", WORKBENCH_FRAMEWORK="transformers_neuronx", WORKBENCH_TARGET="inf2",
                            TNX_MODEL_CLASS="GPTJForSampling", TNX_COMPILED_DIR="hf-neuron", NEURON_CORE_END_INDEX=1)
    with pytest.raises(template.SettingsError, match="GPTJForSampling cannot load saved graphs"):
        template.read_settings(gptj, str(tmp_path), "m_0_0")


@pytest.mark.parametrize(
    ("parameters", "instance", "message"),
    [
        ({}, "m_0_0", "COMPILED_MODEL is missing or empty"),
        ({"COMPILED_MODEL": "model.pt", "NUM_THREADS_PER_CORE": "two"}, "m_0_0", "NUM_THREADS_PER_CORE = 'two' is not an integer"),
        ({"COMPILED_MODEL": "model.pt", "NEURON_CORE_END_INDEX": 1, "count": 3}, "m_0_0", "cannot give 3 instances"),
        ({"COMPILED_MODEL": "model.pt", "NEURON_CORE_END_INDEX": 1, "count": 2}, "m", "does not end in _<index>"),
        ({"COMPILED_MODEL": "model.pt", "NEURON_CORE_END_INDEX": 3, "count": 2}, "m_0_2", "gives index 2"),
        ({"COMPILED_MODEL": "model.pt", "WORKBENCH_FRAMEWORK": "onnx"}, "m_0_0", "WORKBENCH_FRAMEWORK = 'onnx'"),
        ({"COMPILED_MODEL": "model.pt", "WORKBENCH_FRAMEWORK": "transformers_neuronx", "WORKBENCH_TARGET": "inf1"},
         "m_0_0", "not inf1"),
        ({"COMPILED_MODEL": "model.pt", "WORKBENCH_FRAMEWORK": "transformers_neuronx", "WORKBENCH_TARGET": "inf2",
          "TNX_TP_DEGREE": 4, "NEURON_CORE_END_INDEX": 1}, "m_0_0", "TNX_TP_DEGREE = 4 needs more cores than the 2"),
        ({"COMPILED_MODEL": "model.pt", "WORKBENCH_FRAMEWORK": "transformers_neuronx", "TNX_AMP": "fp8"},
         "m_0_0", "TNX_AMP = 'fp8'"),
        ({"COMPILED_MODEL": "model.pt", "WORKBENCH_FRAMEWORK": "transformers_neuronx", "TNX_N_POSITIONS": 64,
          "TNX_SEQUENCE_LENGTH": 128}, "m_0_0", "TNX_SEQUENCE_LENGTH = 128 exceeds TNX_N_POSITIONS = 64"),
    ],
)
def test_bad_settings_are_named(template, tmp_path, parameters, instance, message):
    (tmp_path / "model.pt").write_bytes(b"x")
    with pytest.raises(template.SettingsError) as caught:
        template.read_settings(_settings_config(**parameters), str(tmp_path), instance)
    assert message in str(caught.value)


def test_tensor_parallel_degree_only_limits_neuron_targets(template, tmp_path):
    """On the cpu target the same folder serves with transformers; TNX_TP_DEGREE is not a core count there."""
    (tmp_path / "hf").mkdir()
    config = _settings_config(COMPILED_MODEL="hf", WORKBENCH_FRAMEWORK="transformers_neuronx", WORKBENCH_TARGET="cpu",
                              TNX_TP_DEGREE=8)
    assert template.read_settings(config, str(tmp_path), "m_0_0")["tnx"]["tp_degree"] == 8


def test_batch_dim_rule(template):
    """Requests are concatenated only along a real batch dim: max_batch_size > 0, or every tensor
    declares a variable leading dim and has more dims ([-1, 4])."""
    def layout(max_batch_size, dims):
        tensor = {"data_type": "TYPE_FP32", "dims": dims}
        config = {"max_batch_size": max_batch_size, "input": [dict(tensor, name="INPUT__0")],
                  "output": [dict(tensor, name="OUTPUT__0")]}
        return template.Layout(config, "pytorch")

    assert layout(8, [4]).batched and layout(8, [4]).inputs[0]["dims"] == [-1, 4]
    assert layout(0, [-1, 4]).batched
    assert not layout(0, [4]).batched and not layout(0, [-1]).batched and not layout(0, [2, 4]).batched
