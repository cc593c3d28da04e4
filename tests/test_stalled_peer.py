"""A peer that accepts and never answers, one that answers 200 and then stalls, one that streams
without end (issue 32): every ``workbench remote`` command and ``sweep --url`` ends within its
``--timeout`` with one line naming the URL, the call and the bound; a load is never reported as
done when the server did not say so.
"""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import pytest

from workbench.cli import main

pytestmark = pytest.mark.alone  # each call must end within its timeout

TIMEOUT = 1.0
SLACK = 4.0  # connection set-up, the client's own start, a crowded machine


class Peer:
    """A bounded local listener on 127.0.0.1: ``silent`` reads and never answers, ``half`` answers
    an HTTP 200 with one byte of its body, ``stream`` sends an endless body."""

    def __init__(self, mode: str) -> None:
        self.mode, self.stop, self.held = mode, threading.Event(), []
        self.socket = socket.create_server(("127.0.0.1", 0))
        self.socket.settimeout(0.2)
        self.port = self.socket.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.socket.accept()
            except OSError:
                continue
            self.held.append(conn)
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        try:
            conn.settimeout(0.5)
            if self.mode == "silent":
                return
            with_body = b"HTTP/1.1 200 OK\r\nContent-Length: 1000000000\r\n\r\n"
            conn.recv(65536)
            conn.sendall(with_body + b"{")
            while self.mode == "stream" and not self.stop.is_set():
                conn.sendall(b" " * 4096)
                time.sleep(0.01)
        except OSError:
            pass

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=5)
        for conn in self.held:
            conn.close()
        self.socket.close()




@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    from workbench import generate, zoo
    from workbench.compiler import compile_model

    root = tmp_path_factory.mktemp("stalled")
    model = zoo.get("add_sub")
    artifact = compile_model(model.module, model.example_inputs(2), "cpu", out_dir=root / "compiled", name="add_sub")
    generate.write(generate.render(generate.GenerateSettings(
        triton_model_dir=str(root / "repo" / "add_sub"), compiled_model=artifact.path, copy_compiled_model=True,
        target="cpu", neuron_core_range="0:0", max_batch_size=8)))
    return root / "repo" / "add_sub"


def _one_line_within(argv: list[str], capsys) -> tuple[int, str]:
    started = time.monotonic()
    rc = main(argv)
    took = time.monotonic() - started
    captured = capsys.readouterr()
    text = (captured.err + captured.out).strip()
    assert took < TIMEOUT + SLACK, f"{argv} took {took:.1f}s"
    assert rc != 0 and len(text.splitlines()) == 1 and "Traceback" not in text, text
    return rc, text


# an HTTP answer on a gRPC port is refused at once (HTTP/2 expected): gRPC meets the silent peer only
@pytest.mark.parametrize("scheme, mode", [("http://", "silent"), ("http://", "half"), ("http://", "stream"),
                                          ("grpc://", "silent")])
@pytest.mark.parametrize("action", [["list"], ["load", "m"], ["unload", "m"]])
def test_every_remote_call_ends_within_its_timeout(scheme, mode, action, capsys):
    peer = Peer(mode)
    url = f"{scheme}127.0.0.1:{peer.port}"
    try:
        _rc, text = _one_line_within(["remote", url, "--timeout", str(TIMEOUT), *action], capsys)
    finally:
        peer.close()
    assert url in text and f"{TIMEOUT:g}s (--timeout)" in text
    assert "loaded m" not in text


@pytest.mark.parametrize("scheme", ["http://", "grpc://"])
def test_remote_check_ends_within_its_timeout_as_failed_not_mismatch(model_dir, scheme, capsys):
    peer = Peer("silent")
    try:
        _rc, text = _one_line_within(["remote", f"{scheme}127.0.0.1:{peer.port}", "--timeout", str(TIMEOUT),
                                      "check", str(model_dir), "--batch-sizes", "1,2"], capsys)
    finally:
        peer.close()
    assert text.startswith("FAILED for 'add_sub'") and "MISMATCH" not in text
    assert f"no answer within {TIMEOUT:g}s (--timeout)" in text


@pytest.mark.parametrize("scheme", ["http://", "grpc://"])
def test_a_sweep_on_a_stalled_url_ends_within_its_timeout(model_dir, tmp_path, scheme, capsys):
    peer = Peer("silent")
    try:
        _rc, text = _one_line_within(["sweep", str(model_dir), "--url", f"{scheme}127.0.0.1:{peer.port}",
                                      "--protocol", scheme[:-3], "--timeout", str(TIMEOUT), "--batch-sizes", "1",
                                      "--concurrency", "1",
                                      "--engine", "workbench", "--out", str(tmp_path / "run"), "--no-plots"], capsys)
    finally:
        peer.close()
    assert f"127.0.0.1:{peer.port}" in text and f"no answer within {TIMEOUT:g}s (--timeout)" in text
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("argv", [
    ["remote", "127.0.0.1:99999", "list"],
    ["remote", "grpc://127.0.0.1:99999", "list"],
    ["remote", "127.0.0.1:1", "--timeout", "0", "list"],
    ["remote", "127.0.0.1:1", "--timeout", "nan", "list"],
    ["sweep", "MODEL", "--url", "http://127.0.0.1:1", "--protocol", "grpc", "--out", "OUT"],
    ["sweep", "MODEL", "--url", "127.0.0.1:99999", "--out", "OUT"],
])
def test_bad_ports_and_timeouts_are_one_line(argv, model_dir, tmp_path, capsys):
    argv = [str(model_dir) if a == "MODEL" else str(tmp_path / "run") if a == "OUT" else a for a in argv]
    rc, text = _one_line_within(argv, capsys)
    assert rc == 2 and any(w in text for w in ("not a TCP port", "--timeout must be", "protocol 'grpc' was asked")), text
    assert not (tmp_path / "run").exists()


def test_a_closed_port_is_one_line(model_dir, tmp_path, capsys):
    with socket.create_server(("127.0.0.1", 0)) as s:
        port = s.getsockname()[1]
    for argv in (["remote", f"127.0.0.1:{port}", "list"],
                 ["sweep", str(model_dir), "--url", f"127.0.0.1:{port}", "--protocol", "http", "--out",
                  str(tmp_path / "run"), "--engine", "workbench"]):
        _rc, text = _one_line_within(argv, capsys)
        assert "cannot reach the server" in text
