"""Remote servers through their URLs only: two real tritonservers on 127.0.0.1 and 127.0.0.2,
started by this module as plain processes (the workbench never sees their TritonServer objects),
driven by `RunningServer` and `workbench remote`, checked and swept (one at a time: several are
refused, pointing to Ray), and left with the models they had loaded before.

Server A speaks gRPC over TLS (a self-signed certificate made here with openssl) with Triton's
``--grpc-restricted-protocol`` demanding a header for inference and model control, and plain HTTP
(the sweep's load generators speak neither TLS nor headers). Server B is plain, and reads the
repository the models are pushed to.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from workbench import generate, zoo
from workbench.served_outputs import check_served, eager_reference
from workbench.cli import main
from workbench.compiler import compile_model
from workbench.generate.config import read_config, spec_from_config, to_json
from workbench.generate.push import PushError, push_repository
from workbench.measure.store.results import load_run
from workbench.measure.engine.measure_settings import MeasureSettings
from workbench.measure.sweep import SweepError, SweepPlan, run_sweep
from workbench.server import ClientOptions, RunningServer, TritonServer
from workbench.server.remote import ParsedUrl, parse_server_url

pytestmark = pytest.mark.server

FAST = MeasureSettings(engine="workbench", protocol="http", window_s=0.2, max_windows=3, warmup_requests=5,
                       time_limit_s=None)
# Triton's restricted gRPC protocols want the header "triton-grpc-protocol-<key>" (its --help)
HEADER = {"triton-grpc-protocol-x-workbench-key": "s3cret"}


def _certificate(folder: Path) -> tuple[Path, Path]:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make the TLS certificate")
    key, cert = folder / "server.key", folder / "server.crt"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    return key, cert


def _generate(root: Path, name: str) -> Path:
    model = zoo.get("add_sub")
    artifact = compile_model(model.module, model.example_inputs(2), "cpu", out_dir=root / "compiled", name=name)
    settings = generate.GenerateSettings(
        triton_model_dir=str(root / "repo" / name), compiled_model=artifact.path, copy_compiled_model=True,
        target="cpu", neuron_core_range="0:1", max_batch_size=8, enable_dynamic_batching=True)
    generate.write(generate.render(settings))
    return root / "repo" / name


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """(model_dir, server A, server B, certificate): A serves the local repository with add_sub
    loaded under an override (2 instances) and 'keep' loaded; B's repository is empty until a push."""
    root = tmp_path_factory.mktemp("remote")
    model_dir = _generate(root, "add_sub")
    keep = root / "repo" / "keep"
    shutil.copytree(model_dir, keep)
    text = (keep / "config.pbtxt").read_text()
    assert 'name: "add_sub"' in text
    (keep / "config.pbtxt").write_text(text.replace('name: "add_sub"', 'name: "keep"', 1))
    key, cert = _certificate(root)
    (root / "b-repo").mkdir()
    restricted = "--grpc-restricted-protocol=inference,model-repository:x-workbench-key=s3cret"
    a = TritonServer(root / "repo", host="127.0.0.1",
                     extra_args=("--grpc-use-ssl=true", f"--grpc-server-cert={cert}", f"--grpc-server-key={key}",
                                 restricted))
    b = TritonServer(root / "b-repo", host="127.0.0.2")
    with a, b:
        setup = RunningServer(a.http_url, "http")
        base = read_config(model_dir)
        base.instance_group[0].count = 2
        setup.load("add_sub", config=base)
        setup.load("keep")
        setup.close()
        yield model_dir, a, b, cert


def _state(url: str, protocol: str = "http") -> dict:
    """The loaded models, each with its served instance count and parameters (what a sweep must
    leave as it found; an unloaded model reads "" or UNAVAILABLE in the index, both not loaded)."""
    server = RunningServer(url, protocol)
    try:
        out = {}
        for row in server.index():
            if row["state"] == "READY":
                served = server.model_config(row["name"])
                out[row["name"]] = {"count": served["instance_group"][0]["count"],
                                    "parameters": served.get("parameters")}
        return out
    finally:
        server.close()


def test_urls_name_protocol_and_tls():
    assert parse_server_url("grpcs://10.0.0.5:8001") == ParsedUrl("10.0.0.5:8001", "grpc", True)
    assert parse_server_url("10.0.0.5:8000") == ParsedUrl("10.0.0.5:8000", "http", False)  # bare: HTTP, as before
    assert parse_server_url("http://h:8000/").protocol == "http" and not parse_server_url("http://h:8000").ssl
    assert parse_server_url("h:8000", "http").hostport == "h:8000"
    with pytest.raises(ValueError, match="is grpc but protocol 'http'"):
        parse_server_url("grpc://h:8001", "http")
    with pytest.raises(ValueError, match="needs host:port"):
        parse_server_url("https://h/v2")
    with pytest.raises(ValueError, match="scheme must be one of"):
        parse_server_url("ftp://h:21")
    with pytest.raises(ValueError, match="apply to TLS only"):
        ClientOptions(insecure=True)
    with pytest.raises(ValueError, match="gRPC only"):
        RunningServer("https://h:8000", options=ClientOptions(ssl=True, private_key=__file__))


def test_tls_and_headers_reach_the_server(lab):
    model_dir, a, _, cert = lab
    url = f"grpcs://{a.grpc_url}"
    secure = RunningServer(url, options=ClientOptions(root_certificates=str(cert), ssl=True, headers=HEADER))
    try:
        assert secure.version == a.version and secure.options.ssl
        assert {"name": "keep", "version": "1", "state": "READY", "reason": ""} in secure.index()
        record = secure.describe()
        assert record["url"] == a.grpc_url and record["ssl"] and record["headers"] == list(HEADER)
        assert "s3cret" not in json.dumps(record)  # header values never go into a run record
        # the check over TLS with the header: served outputs match the compiled model run here
        config = read_config(model_dir)
        result = check_served(secure.url, "add_sub", spec_from_config(config), eager_reference(model_dir),
                              protocol="grpc", options=secure.options)
        assert result.ok, result.summary()
    finally:
        secure.close()
    # without the header Triton refuses model control; without TLS the call does not get through
    bare = RunningServer(url, options=ClientOptions(ssl=True, root_certificates=str(cert)))
    try:
        with pytest.raises(Exception, match="(?i)unavailable|permission|restricted|header"):
            bare.index()
    finally:
        bare.close()
    plain = RunningServer(a.grpc_url, "grpc")
    try:
        with pytest.raises(Exception):
            plain.index()
    finally:
        plain.close()


def test_the_cli_lists_loads_and_checks_a_remote(lab, capsys):
    model_dir, a, b, cert = lab
    secure = ["--root-certificates", str(cert), "--header", "triton-grpc-protocol-x-workbench-key=s3cret"]
    assert main(["remote", f"grpcs://{a.grpc_url}", *secure, "list"]) == 0
    out = capsys.readouterr().out
    assert f"tritonserver {a.version} at grpc://{a.grpc_url}" in out and "keep" in out and "READY" in out
    assert main(["remote", f"grpcs://{a.grpc_url}", *secure, "check", str(model_dir), "--batch-sizes", "1,3"]) == 0
    assert "served outputs match eager outputs for 'add_sub'" in capsys.readouterr().out
    # bad input is refused before anything is sent
    assert main(["remote", a.http_url, "--protocol", "http", "--header", "novalue", "list"]) == 2
    assert "header 'novalue': write NAME=VALUE" in capsys.readouterr().err
    assert main(["remote", "http://h:1", "--root-certificates", "/nonexistent.pem", "--ssl", "list"]) == 2
    assert "root_certificates file not found" in capsys.readouterr().err
    # load with a config override and unload, on B only: A is untouched
    before_a = _state(a.http_url)
    assert main(["remote", b.http_url, "push", str(model_dir.parent), str(Path(b.model_repository))]) == 0
    assert "pushed" in capsys.readouterr().out
    override_config = read_config(model_dir.parent / "keep")
    override_config.instance_group[0].count = 2
    assert main(["remote", f"http://{b.http_url}", "load", "keep", "--config", to_json(override_config)]) == 0
    assert _state(b.http_url)["keep"]["count"] == 2
    assert main(["remote", f"http://{b.http_url}", "unload", "keep"]) == 0
    assert "keep" not in _state(b.http_url)
    assert main(["remote", f"http://{b.http_url}", "load", "keep", "--config", '{"name": "keep", "bogus": 1}']) == 2
    assert "not a valid Triton ModelConfig" in capsys.readouterr().err
    assert _state(a.http_url) == before_a


def test_push_is_atomic_and_refuses_to_overwrite(lab, tmp_path):
    model_dir, _, _, _ = lab
    dest = tmp_path / "served"
    (first,) = push_repository(model_dir, dest)
    assert (first.path / "config.pbtxt").read_bytes() == (model_dir / "config.pbtxt").read_bytes()
    assert sorted(p.name for p in dest.iterdir()) == ["add_sub"]  # no staging folder left behind
    (first.path / "config.pbtxt").write_text("# edited there\n")
    with pytest.raises(PushError, match="already exists; nothing was written"):
        push_repository(model_dir.parent, dest)
    assert not (dest / "keep").exists() and (first.path / "config.pbtxt").read_text() == "# edited there\n"
    results = push_repository(model_dir.parent, dest, overwrite=True)
    backup = next(r.backup for r in results if r.path.name == "add_sub")
    assert (backup / "config.pbtxt").read_text() == "# edited there\n"  # the edit is kept, not lost
    outside = tmp_path / "outside" / "m"
    outside.mkdir(parents=True)
    (outside / "config.pbtxt").write_text('name: "m"\nbackend: "python"\nparameters { key: "COMPILED_MODEL" '
                                          'value { string_value: "/elsewhere/model.pt" } }\n')
    with pytest.raises(PushError, match="outside the model directory"):
        push_repository(outside, dest)


def test_a_sweep_on_a_remote_records_it_and_restores_its_models(lab, tmp_path):
    model_dir, a, b, cert = lab
    before_a, before_b = _state(a.http_url), _state(b.http_url)
    server = RunningServer(f"http://{a.http_url}")
    plan = SweepPlan(batch_sizes=[2], allocations="1x1,2x1", core_range="0:1")
    try:
        result = run_sweep(plan, server, model_dir, out_dir=tmp_path / "run", settings=FAST)
    finally:
        server.close()
    assert result.complete and len(result.frame) == 2 and result.frame["outputs_ok"].map(bool).all()
    record = load_run(tmp_path / "run").record
    assert record["url"] == a.http_url and record["server_version"] == a.version
    assert record["server"] == {"name": a.http_url, "url": a.http_url, "protocol": "http", "version": a.version,
                                "remote": True, "ssl": False, "headers": []}
    assert record["sessions"][-1]["restored"] == ["loaded add_sub"]
    # add_sub is back on its 2-instance override (not the config on disk), 'keep' and B untouched
    assert _state(a.http_url) == before_a and before_a["add_sub"]["count"] == 2
    assert _state(b.http_url) == before_b
    # the load generators reach no TLS/header server: refused before anything loads
    secure = RunningServer(f"grpcs://{a.grpc_url}", options=ClientOptions(ssl=True, root_certificates=str(cert),
                                                                          headers=HEADER))
    with pytest.raises(SweepError, match="needs TLS or headers"):
        run_sweep(plan, secure, model_dir, out_dir=tmp_path / "never", settings=replace(FAST, protocol="grpc"))
    secure.close()
    assert _state(a.http_url) == before_a


def test_a_sweep_unloads_a_model_that_was_not_loaded(lab, tmp_path):
    model_dir, a, b, _ = lab
    push_repository(model_dir, b.model_repository, overwrite=True)
    before_b = _state(b.http_url)
    assert "add_sub" not in before_b
    server = RunningServer(b.http_url, "http")
    plan = SweepPlan(batch_sizes=[1], allocations="1x1", core_range="0:0")
    try:
        result = run_sweep(plan, server, model_dir, out_dir=tmp_path / "b-run", settings=FAST)
    finally:
        server.close()
    assert result.complete and result.record["sessions"][-1]["restored"] == ["unloaded add_sub"]
    assert _state(b.http_url) == before_b


def test_several_urls_are_refused_pointing_to_ray_before_anything_is_asked(lab, tmp_path, capsys):
    """The thread fan-out over --url servers is retired: two URLs (both live servers) are refused in
    one line naming --ray, before either server is asked anything or the run folder is made; from
    Python, a list of servers is refused naming run_sweep_on_ray."""
    model_dir, a, b, _ = lab
    before_a, before_b = _state(a.http_url), _state(b.http_url)
    out = tmp_path / "two"
    code = main(["sweep", str(model_dir), "--url", a.http_url, "--url", b.http_url, "--protocol", "http",
                 "--out", str(out), "--no-plots"])
    err = capsys.readouterr().err
    assert code == 2
    assert "--url given 2 times: a sweep measures one running server" in err and "--ray ADDRESS" in err
    assert len(err.strip().splitlines()) == 1 and not out.exists()
    assert _state(a.http_url) == before_a and _state(b.http_url) == before_b
    servers = [RunningServer(a.http_url, "http"), RunningServer(b.http_url, "http")]
    try:
        with pytest.raises(SweepError, match=r"run_sweep measures one server; .*\.run_sweep_on_ray"):
            run_sweep(SweepPlan(batch_sizes=[1], allocations="1x1"), servers, model_dir, out_dir=out, settings=FAST)
    finally:
        for server in servers:
            server.close()
    assert not out.exists()


def test_the_server_panel_connects_to_a_url_and_never_stops_that_server(lab):
    from workbench.ui.server_panel import ServerPanel

    _, a, _, _ = lab
    panel = ServerPanel()
    panel.connect("ftp://nowhere:1")
    assert "scheme must be one of" in panel.controls["error"].value and panel.server is None
    panel.connect(f"http://{a.http_url}")
    assert panel.ops.join(60)
    assert isinstance(panel.server, RunningServer) and panel.server.url == a.http_url
    assert f"Triton {a.version} at http://{a.http_url}" in panel.controls["server_info"].value
    assert panel.controls["stop"].description == "disconnect" and not panel.controls["load"].disabled
    assert any(row["name"] == "keep" and row["state"] == "READY" for row in panel.refresh())
    panel.stop()
    assert panel.server is None and a.running and "keep" in _state(a.http_url)
    panel.close()


def test_the_server_panel_line_does_not_ask_a_remote_on_every_redraw(lab):
    """The server line is redrawn on every click; a remote that went away must not turn the line
    into "Triton ?" (nor make each click wait on the network): its version is asked once."""
    from workbench.ui.server_panel import ServerPanel

    _, a, _, _ = lab
    proxy = _TlsProxy(a.http_url)
    panel = ServerPanel()
    try:
        panel.connect(proxy.url)
        assert panel.ops.join(60) and isinstance(panel.server, RunningServer), panel.controls["error"].value
        proxy.close()
        panel.server.close()  # its open connections go; a new one is refused
        with pytest.raises(Exception):
            panel.server.index()
        panel._show()
        assert f"connected</b> to Triton {a.version} at http://{proxy.url}" in panel.controls["server_info"].value
    finally:
        proxy.close()
        panel.close()


def test_remote_help_does_not_load_torch():
    code = ("import sys\nfrom workbench.cli import main\ntry:\n    main(['remote', '--help'])\n"
            "except SystemExit as done:\n    assert done.code == 0\nassert 'torch' not in sys.modules\n"
            "assert 'tritonclient' not in sys.modules, 'workbench.server imported its clients eagerly'\nprint('ok')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("ok") and "grpcs://" in done.stdout and "--header" in done.stdout


class _TlsProxy:
    """An HTTPS endpoint in front of a server's plain HTTP port (Triton's HTTP server has no TLS of
    its own; production puts a proxy or load balancer there), so the HTTP TLS path is real.
    Without ``cert``, a plain TCP forwarder: a remote server that can be taken away."""

    def __init__(self, target: str, cert: Path | None = None, key: Path | None = None) -> None:
        import socket
        import ssl

        self.context = None
        if cert is not None:
            self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            self.context.load_cert_chain(cert, key)
        self.target = target.rsplit(":", 1)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"127.0.0.1:{self.listener.getsockname()[1]}"
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        import socket

        while not self.closed:
            try:
                raw, _ = self.listener.accept()
                client = self.context.wrap_socket(raw, server_side=True) if self.context else raw
            except OSError:  # closed, or a client that refused our certificate
                continue
            upstream = socket.create_connection((self.target[0], int(self.target[1])))
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    @staticmethod
    def _pump(src, dst) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                try:
                    sock.close()
                except OSError:
                    pass

    def close(self) -> None:
        import socket

        self.closed = True
        try:
            self.listener.shutdown(socket.SHUT_RDWR)  # wakes the accept; a close alone leaves it listening
        except OSError:
            pass
        self.listener.close()


def test_http_over_tls_checks_the_certificate(lab):
    _, a, _, cert = lab
    proxy = _TlsProxy(a.http_url, cert, cert.with_name("server.key"))
    try:
        trusted = RunningServer(f"https://{proxy.url}", options=ClientOptions(ssl=True, root_certificates=str(cert)))
        assert trusted.version == a.version and any(r["name"] == "keep" for r in trusted.index())
        assert trusted.describe()["ssl"] is True
        trusted.close()
        untrusted = RunningServer(f"https://{proxy.url}")  # the system CAs do not know our certificate
        with pytest.raises(Exception, match="(?i)certificate"):
            untrusted.version
        untrusted.close()
        # the certificate names 127.0.0.1: "localhost" fails the hostname check unless insecure
        by_name = "localhost:" + proxy.url.rsplit(":", 1)[1]
        wrong_name = RunningServer(f"https://{by_name}", options=ClientOptions(ssl=True, root_certificates=str(cert)))
        with pytest.raises(Exception, match="(?i)hostname|match"):
            wrong_name.version
        wrong_name.close()
        unchecked = RunningServer(f"https://{by_name}", options=ClientOptions(ssl=True, root_certificates=str(cert),
                                                                             insecure=True))
        assert unchecked.version == a.version
        unchecked.close()
    finally:
        proxy.close()
