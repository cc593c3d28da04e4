"""The local tritonserver: discovery, start/stop, ports, load/unload/reload, stats, metrics, logs.

Everything here runs the real tritonserver from the nvidia-pytriton wheel with tiny numpy-only
python-backend models written into tmp directories; requests go over real HTTP/gRPC.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import psutil
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from workbench.server import (
    ModelLoadError,
    PortInUseError,
    RunningServer,
    ServerError,
    ServerStartError,
    TritonNotFoundError,
    TritonServer,
    find_tritonserver,
)
from workbench.coremap import CoreRange
from workbench.server.discovery import python_backend_dir
from workbench.server.metrics import metric_value, parse_metrics
from workbench.server.control import config_to_json

ADD_ONE = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", (x + {delta}).astype(np.float32))]))
        return responses
"""

FAILS_TO_INITIALIZE = """
class TritonPythonModel:
    def initialize(self, args):
        raise RuntimeError("weights file missing: deliberate failure 7f3a")

    def execute(self, requests):
        return []
"""


def model_config(name: str, count: int = 1) -> model_config_pb2.ModelConfig:
    config = model_config_pb2.ModelConfig(name=name, backend="python", max_batch_size=8)
    config.input.add(name="X", data_type=model_config_pb2.TYPE_FP32, dims=[4])
    config.output.add(name="Y", data_type=model_config_pb2.TYPE_FP32, dims=[4])
    config.instance_group.add(count=count, kind=model_config_pb2.ModelInstanceGroup.KIND_CPU)
    return config


def write_model(repo: Path, name: str, source: str) -> Path:
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(text_format.MessageToString(model_config(name)))
    (repo / name / "1" / "model.py").write_text(source)
    return repo / name


def make_repo(root: Path) -> Path:
    repo = root / "repo"
    repo.mkdir(parents=True)
    write_model(repo, "add", ADD_ONE.format(delta=1))
    write_model(repo, "other", ADD_ONE.format(delta=2))
    write_model(repo, "broken", FAILS_TO_INITIALIZE)
    return repo


def processes_using(path: Path) -> list[psutil.Process]:
    """Processes whose command line mentions ``path``: the server (--model-repository) and its
    stubs (model.py path). Other engineers' servers use other paths, so they never match."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if any(str(path) in arg for arg in proc.info["cmdline"] or []):
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return found


def wait_until(predicate, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return predicate()


def infer_add(url: str, model: str, batch: int) -> np.ndarray:
    client = httpclient.InferenceServerClient(url)
    try:
        x = httpclient.InferInput("X", [batch, 4], "FP32")
        x.set_data_from_numpy(np.arange(batch * 4, dtype=np.float32).reshape(batch, 4))
        return client.infer(model, [x]).as_numpy("Y")
    finally:
        client.close()


# ---- discovery ----------------------------------------------------------------------------


def test_finds_the_wheel_server_with_a_backend_dir_for_this_python(tmp_path, monkeypatch):
    monkeypatch.delenv("TRITONSERVER", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # no tritonserver on PATH
    install = find_tritonserver()
    assert install.source.startswith("nvidia-pytriton")
    assert install.binary.is_file() and os.access(install.binary, os.X_OK)
    stub = install.backend_dir / "python" / "triton_python_backend_stub"
    assert f"python_backend_stubs/{sys.version_info.major}.{sys.version_info.minor}/" in str(stub.resolve())
    assert (install.backend_dir / "python" / "libtriton_python.so").resolve().is_file()
    env = install.env({"LD_LIBRARY_PATH": "/already/there", "PATH": "/usr/bin"})
    libs = env["LD_LIBRARY_PATH"].split(os.pathsep)
    assert libs[-1] == "/already/there"
    assert libs[-2].endswith("nvidia_pytriton.libs")
    assert env["PATH"].split(os.pathsep)[0] == str(Path(sys.executable).parent)


def test_path_and_env_var_win_over_the_wheel(tmp_path, monkeypatch):
    root = tmp_path / "opt" / "tritonserver"
    (root / "bin").mkdir(parents=True)
    (root / "backends" / "python").mkdir(parents=True)
    (root / "TRITON_VERSION").write_text("2.59.0\n")
    binary = root / "bin" / "tritonserver"
    binary.write_text("#!/bin/sh\nexit 0\n")
    binary.chmod(0o755)
    monkeypatch.delenv("TRITONSERVER", raising=False)
    monkeypatch.setenv("PATH", str(root / "bin"))
    on_path = find_tritonserver()
    assert (on_path.source, on_path.binary, on_path.backend_dir, on_path.version) == (
        "PATH", binary, root / "backends", "2.59.0")
    assert on_path.env({"PATH": "/usr/bin"}) == {"PATH": "/usr/bin"}  # the container needs nothing extra
    monkeypatch.setenv("TRITONSERVER", str(binary))
    assert find_tritonserver().source == "$TRITONSERVER"


def test_bad_explicit_or_env_path_is_an_error_naming_it(tmp_path, monkeypatch):
    with pytest.raises(TritonNotFoundError, match="nowhere/tritonserver"):
        find_tritonserver(tmp_path / "nowhere" / "tritonserver")
    monkeypatch.setenv("TRITONSERVER", str(tmp_path / "missing-bin"))
    with pytest.raises(TritonNotFoundError, match=r"\$TRITONSERVER=.*missing-bin"):
        find_tritonserver()


def test_nothing_found_lists_what_was_tried(tmp_path):
    """A fresh interpreter where pytriton cannot be imported and PATH is empty."""
    code = (
        "import sys; sys.modules['pytriton'] = None\n"
        "from workbench.server.discovery import find_tritonserver, TritonNotFoundError\n"
        "try:\n    find_tritonserver()\nexcept TritonNotFoundError as e:\n    print(e)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITONSERVER"}
    env["PATH"] = str(tmp_path)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert "$TRITONSERVER (not set)" in out and "PATH (not found)" in out and "nvidia-pytriton" in out


def test_backend_dir_is_built_once_even_with_racing_builders(tmp_path):
    wheel_root = find_tritonserver().binary.parent.parent
    results: list[Path] = []
    threads = [threading.Thread(target=lambda: results.append(python_backend_dir(wheel_root, tmp_path))) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(results)) == 1
    built = results[0]
    assert sorted(os.listdir(built / "python")) == [
        "libtriton_python.so", "triton_python_backend_stub", "triton_python_backend_utils.py"]
    assert sorted(os.listdir(built.parent)) == [built.name]  # no staging leftovers
    # A stale entry (links to somewhere else) is replaced, not trusted.
    (built / "python" / "triton_python_backend_stub").unlink()
    (built / "python" / "triton_python_backend_stub").symlink_to(tmp_path / "elsewhere")
    assert python_backend_dir(wheel_root, tmp_path) == built
    assert (built / "python" / "triton_python_backend_stub").resolve().is_file()


# ---- arguments checked before anything runs --------------------------------------------------


def test_bad_arguments_fail_before_a_process_starts(tmp_path):
    with pytest.raises(FileNotFoundError, match="no-such-repo"):
        TritonServer(tmp_path / "no-such-repo")
    with pytest.raises(ValueError, match="http_port"):
        TritonServer(tmp_path, http_port=70000)
    with pytest.raises(ValueError, match="must differ"):
        TritonServer(tmp_path, http_port=18123, grpc_port=18123)
    with pytest.raises(ValueError, match="--model-control-mode"):
        TritonServer(tmp_path, extra_args=["--model-control-mode=poll"])
    with pytest.raises(ValueError, match="shm-region-prefix-name"):
        TritonServer(tmp_path, extra_args=["--backend-config=python,shm-region-prefix-name=x"])
    assert processes_using(tmp_path) == []


def test_the_response_cache_is_enabled_when_a_model_asks_with_the_wheels_cache_directory(tmp_path):
    """With the wheel, --cache-config alone makes the server fail to start (it looks for
    libtritoncache_local.so in /opt/tritonserver/caches): --cache-directory must come with it."""
    def model(name: str, text: str, rel: str = "config.pbtxt") -> None:
        (tmp_path / name / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name / rel).write_text(f'name: "{name}"\nbackend: "python"\n{text}')

    model("plain", "")
    server = TritonServer(tmp_path)
    assert server._cache_args() == [] and server.install.cache_dir is not None
    assert (server.install.cache_dir / "local" / "libtritoncache_local.so").is_file()
    model("cached_alt", "", "config.pbtxt")
    model("cached_alt", "response_cache { enable: true }", "configs/alt.pbtxt")
    assert server._cache_args() == []  # only configs/alt.pbtxt asks, and it is not the one served
    alt = TritonServer(tmp_path, model_config_name="alt")
    assert alt._cache_args() == [f"--cache-config=local,size={64 * 1024 * 1024}",
                                 f"--cache-directory={alt.install.cache_dir}"]
    model("cached", "response_cache { enable: true }")
    assert server._cache_args()[1] == f"--cache-directory={server.install.cache_dir}"
    assert TritonServer(tmp_path, response_cache=False)._cache_args() == []
    own = TritonServer(tmp_path, extra_args=["--cache-config=local,size=1024"])
    assert own._cache_args() == [f"--cache-directory={own.install.cache_dir}"]
    with pytest.raises(ValueError, match="model_config_name"):
        TritonServer(tmp_path, model_config_name="../x")


def test_config_to_json_accepts_proto_dict_and_json_and_names_bad_fields():
    proto = model_config("m", count=2)
    as_json = config_to_json(proto)
    assert config_to_json(as_json) == as_json
    assert '"count": 2' in as_json and '"KIND_CPU"' in as_json
    with pytest.raises(ValueError, match="instance_grup"):
        config_to_json({"name": "m", "instance_grup": [{"count": 2}]})
    with pytest.raises(ValueError, match="not valid JSON"):
        config_to_json("{name: m")
    with pytest.raises(TypeError, match="list"):
        config_to_json(["name", "m"])


def test_parse_metrics_reads_prometheus_text():
    text = (
        "# HELP nv_inference_count Number of inferences performed\n"
        "# TYPE nv_inference_count counter\n"
        'nv_inference_count{model="add",version="1"} 6\n'
        'nv_inference_count{model="other",version="1"} 2\n'
        "# HELP nv_cpu_utilization CPU utilization rate [0.0 - 1.0]\n"
        "# TYPE nv_cpu_utilization gauge\n"
        "nv_cpu_utilization 0.25\n"
    )
    metrics = parse_metrics(text)
    assert metric_value(metrics, "nv_inference_count_total", model="add") == 6.0
    assert metric_value(metrics, "nv_inference_count_total") == 8.0
    assert metric_value(metrics, "nv_cpu_utilization") == 0.25
    assert metric_value(metrics, "nv_gpu_utilization") is None


# ---- one shared server -------------------------------------------------------------------


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    return make_repo(tmp_path_factory.mktemp("server"))


@pytest.fixture(scope="module")
def server(repo, triton_server_module) -> TritonServer:
    return triton_server_module(repo)


@pytest.mark.server
def test_server_is_ready_on_loopback_with_its_own_ports(server, repo):
    assert server.running and server.version.count(".") == 2
    host, port = server.http_url.rsplit(":", 1)
    assert host == "127.0.0.1" and int(port) == server.ports["http"]
    assert len(set(server.ports.values())) == 3
    listening = {  # gRPC listens on an IPv6 socket as the v4-mapped ::ffff:127.0.0.1
        (c.laddr.ip.removeprefix("::ffff:"), c.laddr.port)
        for c in psutil.Process(server.pid).net_connections(kind="tcp")
        if c.status == psutil.CONN_LISTEN
    }
    assert {("127.0.0.1", p) for p in server.ports.values()} <= listening
    assert all(ip == "127.0.0.1" for ip, _ in listening)
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    assert grpc.is_server_live() and grpc.is_server_ready()
    assert "--model-control-mode=explicit" in psutil.Process(server.pid).cmdline()
    assert any("Started HTTPService at 127.0.0.1" in line for line in server.log_tail(50))


def settled_stats(server: TritonServer, model: str, success: int) -> dict:
    """The model's stats once ``success`` requests are counted: the python backend reports a
    request's statistics just after sending its response, so a read right after a reply can lag."""
    assert wait_until(lambda: server.stats(model)["model_stats"][0]["inference_stats"]["success"]["count"] >= success)
    return server.stats(model)["model_stats"][0]


@pytest.mark.server
def test_load_serves_and_stats_grow_by_what_was_sent(server):
    server.load("add")
    assert {"name": "add", "version": "1", "state": "READY", "reason": ""} in server.index()
    before = server.stats("add")["model_stats"][0]
    out = infer_add(server.http_url, "add", batch=2)
    np.testing.assert_array_equal(out, np.arange(8, dtype=np.float32).reshape(2, 4) + 1)
    infer_add(server.http_url, "add", batch=3)
    infer_add(server.http_url, "add", batch=1)
    after = settled_stats(server, "add", before["inference_stats"]["success"]["count"] + 3)
    assert after["inference_count"] - before["inference_count"] == 6
    assert after["execution_count"] - before["execution_count"] == 3
    assert after["inference_stats"]["success"]["count"] - before["inference_stats"]["success"]["count"] == 3
    metrics = server.metrics()
    assert metric_value(metrics, "nv_inference_count_total", model="add") == after["inference_count"]


@pytest.mark.server
def test_load_failure_carries_tritons_reason_and_the_log(server):
    with pytest.raises(ModelLoadError) as info:
        server.load("broken")
    err = info.value
    assert err.model == "broken"
    assert "deliberate failure 7f3a" in err.reason
    assert "deliberate failure 7f3a" in str(err)
    assert any("deliberate failure 7f3a" in line for line in err.log_lines)
    row = next(m for m in server.index() if m["name"] == "broken")
    assert row["state"] == "UNAVAILABLE" and "deliberate failure 7f3a" in row["reason"]


@pytest.mark.server
def test_loading_a_model_that_does_not_exist_says_so(server):
    with pytest.raises(ModelLoadError, match="no_such_model") as info:
        server.load("no_such_model")
    assert any("not found" in line for line in info.value.log_lines)


@pytest.mark.server
def test_bad_config_is_rejected_before_triton_sees_it(server):
    before = server.index()
    size = server.log_path.stat().st_size
    with pytest.raises(ValueError, match="max_batch_sise"):
        server.load("other", config={"name": "other", "max_batch_sise": 4})
    with pytest.raises(ValueError, match="files need a config"):
        server.load("other", files={"1/model.py": b""})
    assert server.index() == before and server.log_path.stat().st_size == size


@pytest.mark.server
def test_reload_with_more_instances_keeps_serving_and_counting(server):
    server.load("add")
    infer_add(server.http_url, "add", batch=2)
    before = settled_stats(server, "add", 1)
    assert before["inference_count"] == 2
    server.reload("add", config=model_config("add", count=2))
    assert next(m for m in server.index() if m["name"] == "add")["state"] == "READY"
    assert [g["count"] for g in server.model_config("add")["instance_group"]] == [2]
    assert server.model_config("add", as_proto=True).instance_group[0].count == 2
    infer_add(server.http_url, "add", batch=4)
    # An instance-only change is applied in place, so the counters keep running.
    after = settled_stats(server, "add", 2)
    assert after["inference_count"] == 6
    server.reload("add", config=config_to_json(model_config("add")))
    assert [g["count"] for g in server.model_config("add")["instance_group"]] == [1]


@pytest.mark.server
def test_load_with_override_files_serves_the_new_code(server):
    server.load("other", config=model_config("other"), files={"1/model.py": ADD_ONE.format(delta=100).encode()})
    out = infer_add(server.http_url, "other", batch=1)
    np.testing.assert_array_equal(out, np.arange(4, dtype=np.float32).reshape(1, 4) + 100)


@pytest.mark.server
def test_unload_waits_until_the_model_is_gone(server):
    server.load("add")
    server.unload("add")
    row = next(m for m in server.index() if m["name"] == "add")
    assert row["state"] == "UNAVAILABLE"
    assert not server.is_model_ready("add")
    server.load("add")  # leave it loaded for the other tests
    assert server.is_model_ready("add")


@pytest.mark.server
def test_follow_log_sees_new_lines_from_a_thread(server):
    server.load("other")
    seen: list[str] = []
    stop = server.follow_log_in_thread(seen.append)
    try:
        server.unload("other")
        assert wait_until(lambda: any("successfully unloaded 'other'" in line for line in seen))
    finally:
        stop.set()
    assert not any("Started HTTPService" in line for line in seen)  # it started at the end
    first = next(server.follow_log(from_start=True))
    assert first.startswith("$ ") and f"--model-repository={server.model_repository}" in first


@pytest.mark.server
def test_works_from_worker_threads(server):
    """Notebook UIs call the server from worker threads: each gets its own HTTP client."""
    results: list[object] = []

    def work() -> None:
        try:
            results.append([m["name"] for m in server.index()])
        except BaseException as err:
            results.append(err)

    threads = [threading.Thread(target=work) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(results) == 3 and all(isinstance(r, list) and "add" in r for r in results)


@pytest.mark.server
@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_a_server_started_elsewhere_is_driven_by_the_same_client(server, protocol):
    """RunningServer: no process or log of ours, the same model-control calls over either protocol."""
    url = server.grpc_url if protocol == "grpc" else server.http_url
    remote = RunningServer(url, protocol)
    try:
        assert remote.version == server.version and remote.server_metadata()["name"] == "triton"
        remote.load("other", config=model_config("other", count=2))
        assert remote.is_model_ready("other") and server.is_model_ready("other")
        assert remote.model_config("other")["instance_group"][0]["count"] == 2
        assert remote.model_config("other", as_proto=True).instance_group[0].count == 2
        assert next(m for m in remote.index() if m["name"] == "other") == \
            {"name": "other", "version": "1", "state": "READY", "reason": ""}
        assert [m["name"] for m in remote.stats("other")["model_stats"]] == ["other"]
        with pytest.raises(ModelLoadError, match="deliberate failure 7f3a") as info:
            remote.load("broken")
        assert "deliberate failure 7f3a" in info.value.reason and info.value.log_lines == []
        remote.unload("other")
        assert not server.is_model_ready("other")
        other = "http" if protocol == "grpc" else "grpc"
        with pytest.raises(ValueError, match=f"was given as {protocol}; measure with protocol='{protocol}'"):
            getattr(remote, f"{other}_url")
        with pytest.raises(ServerError, match="no metrics URL"):
            remote.metrics()
    finally:
        remote.close()


# ---- lifecycle: ports, several servers, stop -----------------------------------------------


@pytest.mark.server
def test_taken_port_is_a_clear_error_and_nothing_starts(tmp_path):
    repo = make_repo(tmp_path)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        taken = sock.getsockname()[1]
        server = TritonServer(repo, grpc_port=taken)
        with pytest.raises(PortInUseError, match=f"grpc port {taken} on 127.0.0.1 is already in use"):
            server.start()
    assert not server.running and processes_using(repo) == []


@pytest.mark.server
def test_a_free_port_taken_before_triton_binds_it_is_retried(tmp_path, monkeypatch):
    """Engineers and notebooks start servers at the same time: a port picked as free can be
    taken before Triton binds it. The picker is rigged to hand out a port a real socket holds."""
    import workbench.server.ports as ports_module

    repo = make_repo(tmp_path)
    picks = []
    real_pick = ports_module.find_free_port
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        taken = sock.getsockname()[1]

        def pick(host: str = "127.0.0.1") -> int:
            picks.append(taken if not picks else real_pick(host))
            return picks[-1]

        monkeypatch.setattr(ports_module, "find_free_port", pick)
        with TritonServer(repo) as server:
            assert taken not in server.ports.values()
            assert any(f"'127.0.0.1:{taken}' already in use" in line for line in server.log_tail(500))
            assert server.index() == [] or all(m["state"] != "READY" for m in server.index())
    assert processes_using(repo) == []


@pytest.mark.server
def test_two_servers_at_once_then_stop_leaves_nothing(tmp_path, triton_server):
    repo_a, repo_b = make_repo(tmp_path / "a"), make_repo(tmp_path / "b")
    a = triton_server(repo_a)
    b = triton_server(repo_b)
    assert not set(a.ports.values()) & set(b.ports.values())
    assert a.shm_prefix != b.shm_prefix
    a.load("add")
    b.load("add")
    a_regions = [p for p in os.listdir("/dev/shm") if p.startswith(a.shm_prefix)]
    assert a_regions, "the python backend should use this server's shm prefix"
    assert infer_add(a.http_url, "add", 1)[0, 0] == 1.0
    assert infer_add(b.http_url, "add", 1)[0, 0] == 1.0
    stubs_a = [p for p in processes_using(repo_a) if p.pid != a.pid]
    assert stubs_a and all(os.getpgid(p.pid) == a.pid for p in stubs_a)
    a_pid, run_dir = a.pid, a.run_dir
    a.stop()
    assert not psutil.pid_exists(a_pid) or psutil.Process(a_pid).status() == psutil.STATUS_ZOMBIE
    assert processes_using(repo_a) == []
    assert not [p for p in os.listdir("/dev/shm") if p.startswith(a.shm_prefix)]
    assert not run_dir.exists()
    assert any("successfully unloaded 'add'" in line for line in a.log_tail(200))  # finalize ran
    assert b.running and infer_add(b.http_url, "add", 1)[0, 0] == 1.0
    a.stop()  # twice is fine
    with pytest.raises(ServerError, match="not running"):
        a.index()


@pytest.mark.server
def test_an_exception_inside_with_stops_everything(tmp_path):
    repo = make_repo(tmp_path)
    with pytest.raises(KeyError, match="boom"):
        with TritonServer(repo) as server:
            server.load("add")
            assert len(processes_using(repo)) == 2  # server + one stub
            raise KeyError("boom")
    assert processes_using(repo) == []
    assert not server.running


KILLS_ITS_SERVER = """
import os
import signal


class TritonPythonModel:
    def initialize(self, args):
        os.kill(os.getppid(), signal.SIGKILL)  # the stub's parent is tritonserver: a backend crash

    def execute(self, requests):
        return []
"""


@pytest.mark.server
def test_a_server_that_dies_during_a_load_is_reported_and_cleaned_up(tmp_path):
    repo = make_repo(tmp_path)
    write_model(repo, "crash", KILLS_ITS_SERVER)
    with TritonServer(repo) as server:
        with pytest.raises(ServerError, match="tritonserver died while loading 'crash'") as info:
            server.load("crash")
        assert not isinstance(info.value, ModelLoadError)
        assert "exited with code -9" in str(info.value)
        assert wait_until(lambda: processes_using(repo) == [], timeout=20), processes_using(repo)
        with pytest.raises(ServerError, match="not running"):
            server.index()
    assert not [p for p in os.listdir("/dev/shm") if p.startswith(server.shm_prefix)]


@pytest.mark.server
def test_a_server_that_cannot_start_reports_its_log(tmp_path):
    repo = make_repo(tmp_path)
    server = TritonServer(repo, extra_args=["--no-such-flag-xyz=1"])
    with pytest.raises(ServerStartError, match="no-such-flag-xyz"):
        server.start(timeout=60)
    assert processes_using(repo) == []
    assert server.run_dir is None


@pytest.mark.server
def test_start_can_be_cancelled_and_reports_progress(tmp_path):
    from workbench.tasks import Cancelled

    repo = make_repo(tmp_path)
    cancel = threading.Event()
    cancel.set()
    server = TritonServer(repo)
    with pytest.raises(Cancelled):
        server.start(cancel=cancel)
    assert processes_using(repo) == [] and not server.running
    seen: list[tuple[int, int, str]] = []
    server.start(progress=lambda d, t, m: seen.append((d, t, m)))  # the same object starts after a cancel
    try:
        assert seen[-1][:2] == (1, 1) and server.http_url in seen[-1][2]
    finally:
        server.stop()


# ---- docker preview --------------------------------------------------------------------------


def test_docker_run_passes_exactly_the_devices_holding_the_cores(tmp_path):
    from workbench.deploy.docker import DEFAULT_IMAGE, docker_run_command, neuron_devices

    # inf1: 4 cores per device, so cores 51-52 sit on devices 12 and 13 (the Neuron container guide's example).
    assert neuron_devices(CoreRange(51, 52), instance_type="inf1.24xlarge") == [12, 13]
    assert neuron_devices(CoreRange(0, 1), instance_type="inf2.xlarge") == [0]
    assert neuron_devices(CoreRange(2, 5), instance_type="trn1.32xlarge") == [1, 2]
    assert neuron_devices(CoreRange(4, 7), instance_type="trn2") == [1]
    assert neuron_devices(CoreRange(3, 3), cores_per_device=8) == [0]
    run = docker_run_command(tmp_path / "repo", CoreRange(5, 9), instance_type="inf2.24xlarge", load_models=["bert"])
    argv = list(run.argv)
    assert argv[:3] == ["docker", "run", "--rm"]
    assert [argv[i + 1] for i, a in enumerate(argv) if a == "--device"] == ["/dev/neuron2", "/dev/neuron3", "/dev/neuron4"]
    assert "--shm-size=1g" in argv and ["--ulimit", "memlock=-1"] == argv[argv.index("--ulimit"):argv.index("--ulimit") + 2]
    assert ["-p", "127.0.0.1:8000:8000", "-p", "127.0.0.1:8001:8001", "-p", "127.0.0.1:8002:8002"] == [
        a for i, a in enumerate(argv) if a == "-p" or (i and argv[i - 1] == "-p")]
    assert ["-v", f"{tmp_path / 'repo'}:/models"] == argv[argv.index("-v"):argv.index("-v") + 2]
    image_at = argv.index(DEFAULT_IMAGE)
    assert argv[image_at + 1:] == ["tritonserver", "--model-repository=/models", "--model-control-mode=explicit",
                                   "--load-model=bert"]
    assert run.command.split() == argv  # nothing here needs quoting
    assert run.pretty.replace("\\\n", "").split() == argv
    everything = docker_run_command("/srv/repo", CoreRange(0, 1), instance_type="inf2", image="my/triton-neuron:1",
                                    http_port=9000, publish_address="0.0.0.0")
    assert "'--load-model=*'" in everything.command  # quoted for the shell
    assert "0.0.0.0:9000:8000" in everything.argv and everything.image == "my/triton-neuron:1"


def test_docker_run_rejects_what_the_host_cannot_do():
    from workbench.coremap import CoreRangeError
    from workbench.deploy.docker import docker_run_command

    with pytest.raises(CoreRangeError, match=r"inf2.xlarge has cores 0..1"):
        docker_run_command("/r", CoreRange(0, 3), instance_type="inf2.xlarge")
    with pytest.raises(CoreRangeError, match="malformed"):
        docker_run_command("/r", CoreRange.parse("0-3"), instance_type="inf2")  # refused where the text enters
    with pytest.raises(ValueError, match="unknown Neuron instance type 'p4d.24xlarge'"):
        docker_run_command("/r", CoreRange(0, 1), instance_type="p4d.24xlarge")
    with pytest.raises(ValueError, match="instance_type .* or cores_per_device"):
        docker_run_command("/r", CoreRange(0, 1))
    with pytest.raises(ValueError, match="contradicts inf1"):
        docker_run_command("/r", CoreRange(0, 1), instance_type="inf1", cores_per_device=2)
    with pytest.raises(ValueError, match="metrics_port"):
        docker_run_command("/r", CoreRange(0, 1), instance_type="inf2", metrics_port=0)
    with pytest.raises(ValueError, match="'../x'"):
        docker_run_command("/r", CoreRange(0, 1), instance_type="inf2", load_models=["../x"])


def test_docker_run_for_a_cpu_target_pins_cpus_instead_of_devices():
    from workbench.deploy.docker import docker_run_command

    run = docker_run_command("/r", CoreRange(2, 5), instance_type="cpu")
    assert run.devices == () and "--cpuset-cpus=2-5" in run.argv
    assert not any(a.startswith("/dev/neuron") for a in run.argv)


# ---- workbench serve -----------------------------------------------------------------------


def read_until(stream, marker: str, timeout: float = 120.0) -> list[str]:
    """Lines of ``stream`` up to the one containing ``marker`` (read in a thread: select() on a
    buffered pipe misses lines already read into the buffer)."""
    import queue

    lines: "queue.Queue[str | None]" = queue.Queue()

    def pump() -> None:
        for line in stream:
            lines.put(line.rstrip("\n"))
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=1.0)
        except queue.Empty:
            continue
        if line is None:
            break
        seen.append(line)
        if marker in line:
            return seen
    raise AssertionError(f"{marker!r} not seen; got: {seen}")


@pytest.mark.server
def test_serve_command_serves_until_ctrl_c_and_leaves_nothing(tmp_path):
    repo = make_repo(tmp_path)
    proc = subprocess.Popen(
        [sys.executable, "-m", "workbench", "serve", "--model-repository", str(repo), "--load", "add"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        lines = read_until(proc.stdout, "Ctrl-C to stop")
        http = next(line.split()[1] for line in lines if line.strip().startswith("HTTP"))
        assert any(line.split()[:3] == ["add", "v1", "READY"] for line in lines), lines
        assert any(line.split()[:2] == ["broken", "v-"] for line in lines), lines
        assert infer_add(http, "add", 1)[0, 0] == 1.0
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0, proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert [p for p in processes_using(repo) if p.pid != proc.pid] == []


@pytest.mark.server
def test_serve_command_fails_clearly_when_a_model_does_not_load(tmp_path):
    repo = make_repo(tmp_path)
    result = subprocess.run(
        [sys.executable, "-m", "workbench", "serve", "--model-repository", str(repo), "--load", "broken"],
        capture_output=True, text=True, timeout=180,
    )
    assert result.returncode == 1
    assert "model 'broken' failed to load" in result.stderr and "deliberate failure 7f3a" in result.stderr
    assert processes_using(repo) == []


def test_serve_command_prints_the_docker_run(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "workbench", "serve", "--model-repository", str(tmp_path), "--docker", "4:7",
         "--instance-type", "inf1.6xlarge", "--load", "bert", "--http-port", "9000"],
        capture_output=True, text=True, timeout=120, check=True,
    )
    text = result.stdout
    assert "--device /dev/neuron1" in text and "/dev/neuron0" not in text and "/dev/neuron2" not in text
    assert "127.0.0.1:9000:8000" in text and "--load-model=bert" in text
    assert processes_using(tmp_path) == []


def test_docker_run_for_a_generated_model_uses_its_cores_target_and_name(tmp_path):
    from workbench.generate import GenerateSettings, render
    from workbench.deploy.docker import docker_run_for_model

    generated = render(GenerateSettings(
        triton_model_dir=str(tmp_path / "repo" / "resnet"), compiled_model="model.pt", target="inf2",
        neuron_core_range="2:5", triton_model_instance_count=2, triton_input=["INPUT__0,FP32,3x224x224"],
        triton_output=["OUTPUT__0,FP32,1000"], for_other_machine=True,
    ))
    run = docker_run_for_model(generated)
    assert run.devices == (1, 2) and run.cores == range(2, 6)
    assert f"{tmp_path / 'repo'}:/models" in run.argv and run.argv[-1] == "--load-model=resnet"
    on_host = docker_run_for_model(generated, repository="/home/ubuntu/models", instance_type="trn1.32xlarge")
    assert "/home/ubuntu/models:/models" in on_host.argv and on_host.devices == (1, 2)
    assert not (tmp_path / "repo").exists()  # a preview writes nothing


@pytest.mark.alone
def test_a_server_group_is_ended_even_when_an_interrupt_left_popens_wait_lock_held():
    """A KeyboardInterrupt that lands inside Popen.poll(), between its lock's acquire and its try,
    leaves Popen's wait lock held; a plain process.wait() then blocks for ever (CI saw `workbench
    serve` hang 60 s after Ctrl-C). The group is still killed and reaped, within bounded time."""
    import time as _time

    from workbench.server.guard import end_process_group

    proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
    assert proc._waitpid_lock.acquire(False)  # what the interrupted poll() leaves behind
    started = _time.monotonic()
    end_process_group(proc, timeout=0.5)
    assert _time.monotonic() - started < 10
    assert proc.returncode in (-signal.SIGTERM, -signal.SIGKILL)  # reaped with waitpid, its status recorded
    with pytest.raises(ProcessLookupError):
        os.killpg(proc.pid, 0)  # no member of the group is left
