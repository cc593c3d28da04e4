"""`TritonServer`: one local tritonserver process that a notebook can start, drive and stop.

Why it looks like this:

* Explicit model control only, so the workbench decides what is loaded (load/unload/reload with a
  config override instead of restarts).
* Free ports by default and a per-server shared-memory prefix for the python backend, so several
  servers (several engineers, several notebooks) run side by side.
* The server runs in its own process group (its python backend stubs join it) watched by a small
  guard process (``guard.py``): when the Python process that started it dies, even by SIGKILL,
  the guard takes the whole group down. ``stop()`` does the same on purpose.
* Output goes to a log file in a per-server run directory: ``log_tail`` / ``follow_log`` read it,
  and load or start failures quote it.
"""

from __future__ import annotations

import atexit
import errno
import itertools
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import weakref
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

from google.protobuf import json_format
from tritonclient.grpc import model_config_pb2
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from workbench.server import guard as guard_module
from workbench.server.discovery import TritonInstall, find_tritonserver
from workbench.server.metrics import parse_metrics
from workbench.tasks import Cancelled

__all__ = [
    "ServerError",
    "ServerStartError",
    "PortInUseError",
    "ModelLoadError",
    "TritonServer",
    "find_free_port",
]

Progress = Callable[[int, int, str], None]

# Flags the server object owns: letting extra_args set them would break ports, cleanup or control.
_OWNED_FLAGS = (
    "--model-repository", "--model-store", "--model-control-mode",
    "--http-port", "--grpc-port", "--metrics-port",
    "--http-address", "--grpc-address", "--metrics-address",
)
_PORT_IN_USE_MARKERS = ("already in use", "address in use", "failed to add port")
_KEEP_LOG_LINES = 2000
_EXIT_TIMEOUT_SECS = 3
_ERROR_LINE = re.compile(r"^E\d{4} ")  # Triton's glog-style prefix: severity, month, day
_counter = itertools.count()
_running: "weakref.WeakSet[TritonServer]" = weakref.WeakSet()


class ServerError(RuntimeError):
    """Something went wrong with the server process; the message quotes its log."""


class ServerStartError(ServerError):
    """The server exited or never became ready."""


class PortInUseError(ServerError):
    """A requested port is taken; the message names it."""


class ModelLoadError(ServerError):
    """Triton refused to load a model. ``reason`` is Triton's reason from the repository index,
    ``log_lines`` the server log lines written during the load."""

    def __init__(self, model: str, message: str, reason: str, log_lines: list[str]) -> None:
        self.model, self.reason, self.log_lines = model, reason, log_lines
        text = f"model {model!r} failed to load: {reason or message}"
        if message and message not in text:
            text += f"\nTriton said: {message}"
        if log_lines:
            text += "\nServer log during the load:\n" + "\n".join(log_lines)
        super().__init__(text)


def find_free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on right now (the kernel's choice)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _check_port_free(host: str, port: int, what: str) -> None:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as err:
            if err.errno in (errno.EADDRINUSE, errno.EACCES):
                raise PortInUseError(f"{what} port {port} on {host} is already in use") from None
            raise


def _validate_port(value: int | None, what: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65535:
        raise ValueError(f"{what} must be an integer port between 1 and 65535, got {value!r}")
    return value


def config_to_json(config: Any) -> str:
    """A model config as the JSON string Triton's load-with-override expects.

    Accepts a ``model_config_pb2.ModelConfig``, a dict or a JSON string; dicts and strings are
    checked against the ModelConfig schema first so a typo fails here, naming the field.
    """
    if isinstance(config, model_config_pb2.ModelConfig):
        message = config
    else:
        if isinstance(config, (str, bytes)):
            try:
                data = json.loads(config)
            except json.JSONDecodeError as err:
                raise ValueError(f"config is not valid JSON: {err}") from None
        elif isinstance(config, Mapping):
            data = dict(config)
        else:
            raise TypeError(f"config must be a ModelConfig, a dict or a JSON string, not {type(config).__name__}")
        if not isinstance(data, dict):
            raise ValueError("config JSON must be an object")
        message = model_config_pb2.ModelConfig()
        try:
            json_format.ParseDict(data, message)
        except json_format.ParseError as err:
            raise ValueError(f"config is not a valid Triton ModelConfig: {err}") from None
    return json_format.MessageToJson(message, preserving_proto_field_name=True, indent=None)


def _files_for_load(files: Mapping[str, bytes | str | os.PathLike[str]]) -> dict[str, bytes]:
    """``{"1/model.py": bytes | path}`` -> ``{"file:1/model.py": bytes}`` (tritonclient base64s it)."""
    out: dict[str, bytes] = {}
    for key, value in files.items():
        rel = key[len("file:"):] if key.startswith("file:") else key
        if not rel or rel.startswith("/") or ".." in Path(rel).parts:
            raise ValueError(f"file key {key!r} must be a relative path inside the model directory, e.g. '1/model.py'")
        if isinstance(value, bytes):
            out["file:" + rel] = value
        elif isinstance(value, (str, os.PathLike)):
            path = Path(value)
            if not path.is_file():
                raise FileNotFoundError(f"file for {rel!r} not found: {path}")
            out["file:" + rel] = path.read_bytes()
        else:
            raise TypeError(f"file {rel!r} must be bytes or a path, not {type(value).__name__}")
    return out


def _hostport(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class TritonServer:
    """A tritonserver process with explicit model control.

    ``http_url`` and ``grpc_url`` are ``host:port`` (what tritonclient's clients take);
    ``metrics_url`` is the full Prometheus URL. Use as a context manager, or call ``start()`` and
    ``stop()``; the process never outlives this Python process.
    """

    def __init__(
        self,
        model_repository: str | os.PathLike[str],
        *,
        binary: str | os.PathLike[str] | None = None,
        host: str = "127.0.0.1",
        http_port: int | None = None,
        grpc_port: int | None = None,
        metrics_port: int | None = None,
        log_verbose: int = 0,
        extra_args: tuple[str, ...] | list[str] = (),
        env: Mapping[str, str] | None = None,
    ) -> None:
        repo = Path(model_repository).expanduser()
        if not repo.is_dir():
            raise FileNotFoundError(f"model repository {repo} is not a directory")
        self.model_repository = repo.resolve()
        self.host = host
        self._requested_ports = {
            "http": _validate_port(http_port, "http_port"),
            "grpc": _validate_port(grpc_port, "grpc_port"),
            "metrics": _validate_port(metrics_port, "metrics_port"),
        }
        given = [p for p in self._requested_ports.values() if p is not None]
        if len(given) != len(set(given)):
            raise ValueError(f"http, grpc and metrics ports must differ, got {self._requested_ports}")
        if not isinstance(log_verbose, int) or log_verbose < 0:
            raise ValueError(f"log_verbose must be a non-negative integer, got {log_verbose!r}")
        self.log_verbose = log_verbose
        extra = [str(a) for a in extra_args]
        for arg in extra:
            flag = arg.split("=", 1)[0]
            if flag in _OWNED_FLAGS:
                raise ValueError(f"extra_args may not set {flag}: TritonServer sets it (use the keyword argument)")
            if "shm-region-prefix-name" in arg:
                raise ValueError(f"extra_args may not set {arg!r}: each server gets its own shm prefix")
        self.extra_args = tuple(extra)
        self.extra_env = dict(env or {})
        self.install: TritonInstall = find_tritonserver(binary)
        self.ports: dict[str, int] = {}
        self.shm_prefix = f"wb-{os.getpid()}-{next(_counter)}-{secrets.token_hex(3)}-"
        self.run_dir: Path | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._owner_pid = os.getpid()
        self._guard: subprocess.Popen[bytes] | None = None
        self._log_file: Path | None = None
        self._final_log: list[str] = []
        self._version: str | None = self.install.version
        self._lock = threading.RLock()
        self._local = threading.local()
        self._clients: list[httpclient.InferenceServerClient] = []
        self._clients_lock = threading.Lock()

    # ---- addresses -------------------------------------------------------------------------

    def _port(self, which: str) -> int:
        if which not in self.ports:
            raise ServerError("the server has not been started")
        return self.ports[which]

    @property
    def http_url(self) -> str:
        return _hostport(self.host, self._port("http"))

    @property
    def grpc_url(self) -> str:
        return _hostport(self.host, self._port("grpc"))

    @property
    def metrics_url(self) -> str:
        return f"http://{_hostport(self.host, self._port('metrics'))}/metrics"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def version(self) -> str:
        """Triton's release, from the running server's metadata."""
        if self._version is None:
            self._version = str(self._client().get_server_metadata()["version"])
        return self._version

    @property
    def log_path(self) -> Path | None:
        return self._log_file

    def command(self) -> list[str]:
        """The tritonserver command line (ports must be chosen, i.e. after ``start``)."""
        args = [
            str(self.install.binary),
            f"--model-repository={self.model_repository}",
            "--model-control-mode=explicit",
            f"--http-address={self.host}",
            f"--http-port={self._port('http')}",
            f"--grpc-address={self.host}",
            f"--grpc-port={self._port('grpc')}",
            f"--metrics-address={self.host}",
            f"--metrics-port={self._port('metrics')}",
            f"--log-verbose={self.log_verbose}",
            f"--backend-config=python,shm-region-prefix-name={self.shm_prefix}",
        ]
        # Triton waits up to this long on SIGTERM for clients' keep-alive connections to close
        # (default 30 s: a notebook's open client made every stop take 30 s). stop() unloads the
        # models first, so the wait has nothing left to protect.
        if not any(a.startswith("--exit-timeout-secs") for a in self.extra_args):
            args.append(f"--exit-timeout-secs={_EXIT_TIMEOUT_SECS}")
        if self.install.backend_dir is not None:
            args.append(f"--backend-directory={self.install.backend_dir}")
        return args + list(self.extra_args)

    # ---- lifecycle -------------------------------------------------------------------------

    def __enter__(self) -> "TritonServer":
        if not self.running:
            self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(
        self,
        timeout: float = 120.0,
        *,
        progress: Progress | None = None,
        cancel: threading.Event | None = None,
    ) -> "TritonServer":
        """Start the server and wait until it is ready. Free ports are picked for any port not
        given; if another process grabs one in between, it retries with new ones."""
        with self._lock:
            if self.running:
                raise ServerError(f"server already running (pid {self.pid})")
            for name, port in self._requested_ports.items():
                if port is not None:
                    _check_port_free(self.host, port, name)
            self.run_dir = Path(tempfile.mkdtemp(prefix="workbench-triton-"))
            self._log_file = self.run_dir / "tritonserver.log"
            self._final_log = []
            attempts = 1 if all(p is not None for p in self._requested_ports.values()) else 3
            for attempt in range(attempts):
                self.ports = self._pick_ports()
                try:
                    self._spawn()
                    self.wait_ready(timeout, progress=progress, cancel=cancel)
                except ServerStartError as err:
                    retry = attempt + 1 < attempts and self._lost_port_race()
                    self._stop_process(timeout=10)
                    if retry:
                        continue
                    self._cleanup_run_dir()
                    raise err
                except BaseException:
                    self.stop()
                    raise
                self._owner_pid = os.getpid()
                _running.add(self)
                return self
            raise AssertionError("unreachable")

    def _pick_ports(self) -> dict[str, int]:
        """The requested ports, and distinct free ones for the rest."""
        taken = {p for p in self._requested_ports.values() if p is not None}
        ports = {}
        for name, port in self._requested_ports.items():
            while port is None or (port in taken and port != self._requested_ports[name]):
                port = find_free_port(self.host)
            taken.add(port)
            ports[name] = port
        return ports

    def _spawn(self) -> None:
        assert self._log_file is not None
        env = self.install.env()
        env.update(self.extra_env)
        with open(self._log_file, "ab") as log:
            log.write(("$ " + " ".join(self.command()) + "\n").encode())
            log.flush()
            self._process = subprocess.Popen(
                self.command(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=self.run_dir,
                start_new_session=True,  # own process group: stubs join it, one killpg ends all
            )
        with open(self.run_dir / "guard.log", "ab") as guard_log:  # type: ignore[operator]
            self._guard = subprocess.Popen(
                [sys.executable, "-I", guard_module.__file__, str(self._process.pid), str(os.getpid()), self.shm_prefix],
                stdin=subprocess.PIPE,
                stdout=guard_log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        # A TritonServer nobody references can never be stopped: closing the guard's pipe when
        # it is collected makes the guard take the server down (Popen keeps its pipe open otherwise).
        weakref.finalize(self, self._guard.stdin.close)  # type: ignore[union-attr]

    def _lost_port_race(self) -> bool:
        text = "\n".join(self.log_tail(40)).lower()
        return any(marker in text for marker in _PORT_IN_USE_MARKERS)

    def wait_ready(
        self,
        timeout: float = 120.0,
        *,
        progress: Progress | None = None,
        cancel: threading.Event | None = None,
    ) -> None:
        """Block until the server answers ready; ServerStartError (with the log) if it exits or
        the timeout passes; Cancelled if ``cancel`` is set."""
        deadline = time.monotonic() + timeout
        started = time.monotonic()
        # Short timeouts: if the port was grabbed by something else, it may accept and never answer.
        probe = httpclient.InferenceServerClient(self.http_url, connection_timeout=2.0, network_timeout=2.0)
        try:
            while True:
                if cancel is not None and cancel.is_set():
                    raise Cancelled("server start cancelled")
                if self._process is None or self._process.poll() is not None:
                    code = None if self._process is None else self._process.returncode
                    raise ServerStartError(f"tritonserver exited with code {code} before becoming ready.\n" + self._failure_report())
                try:
                    # Triton opens the metrics port last; a ready server whose metrics() fails would surprise.
                    if probe.is_server_ready() and self._metrics_listening():
                        break
                except Exception:  # refused / reset / timed out while the server is still coming up
                    pass
                if time.monotonic() > deadline:
                    raise ServerStartError(f"tritonserver not ready after {timeout:.0f}s.\n" + self._failure_report())
                if progress is not None:
                    progress(0, 1, f"waiting for tritonserver ({time.monotonic() - started:.0f}s)")
                time.sleep(0.1)
        finally:
            probe.close()
        if progress is not None:
            progress(1, 1, f"tritonserver ready at {self.http_url}")

    def _metrics_listening(self) -> bool:
        if any(a.replace(" ", "=") in ("--allow-metrics=false", "--allow-metrics=0") for a in self.extra_args):
            return True
        try:
            socket.create_connection((self.host, self._port("metrics")), timeout=1).close()
        except OSError:
            return False
        return True

    def stop(self, timeout: float = 30.0) -> None:
        """Graceful SIGTERM (Triton unloads its models), SIGKILL of the whole group after
        ``timeout``; stubs included. Safe to call twice."""
        with self._lock:
            self._stop_process(timeout)
            self._cleanup_run_dir()
            _running.discard(self)

    def _unload_all(self, timeout: float) -> None:
        """Unload every model through the API so each one's finalize() runs even when Triton's
        exit timeout then cuts its shutdown short. Bounded by ``timeout``, even on a hung server."""
        deadline = time.monotonic() + timeout
        client = httpclient.InferenceServerClient(
            self.http_url, connection_timeout=min(5.0, timeout), network_timeout=max(timeout, 1.0)
        )

        def busy() -> list[str]:
            rows = client.get_model_repository_index()
            return [r["name"] for r in rows if r.get("state") in ("READY", "LOADING", "UNLOADING")]

        try:
            for name in busy():
                client.unload_model(name)
            while time.monotonic() < deadline and busy():
                time.sleep(0.1)
        except Exception:  # a hung or dying server: the signals in _stop_process still stop it
            pass
        finally:
            client.close()

    def _stop_process(self, timeout: float) -> None:
        if self.running:
            self._unload_all(timeout / 2)
        self._close_clients()
        process = self._process
        if process is not None:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(timeout)
                except subprocess.TimeoutExpired:
                    pass
            # The group outlives its leader while any stub lives, so its id stays ours to kill.
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            process.wait()
            self._wait_group_gone(process.pid, 10.0)
            self._process = None  # only now: an interrupted stop() can be called again
        guard = self._guard
        if guard is not None:
            try:
                if guard.stdin is not None:
                    guard.stdin.write(b"release\n")
                    guard.stdin.close()
            except (OSError, ValueError):  # the guard already left (server exited) or pipe closed
                pass
            try:
                guard.wait(10)
            except subprocess.TimeoutExpired:
                guard.kill()
                guard.wait()
            self._guard = None
        guard_module.remove_shm_regions(self.shm_prefix)

    @staticmethod
    def _wait_group_gone(pgid: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while guard_module.group_alive(pgid) and time.monotonic() < deadline:
            try:
                os.killpg(pgid, signal.SIGKILL)
            except ProcessLookupError:
                return
            time.sleep(0.05)

    def _cleanup_run_dir(self) -> None:
        if self.run_dir is None:
            return
        self._final_log = self._read_log_lines()[-_KEEP_LOG_LINES:]
        shutil.rmtree(self.run_dir, ignore_errors=True)
        self.run_dir = None
        self._log_file = None

    # ---- protocol --------------------------------------------------------------------------

    def _client(self) -> httpclient.InferenceServerClient:
        """One tritonclient HTTP client per thread: it is gevent-based and must stay on the
        thread that made it (notebook UIs call from worker threads)."""
        client = getattr(self._local, "client", None)
        if client is None or getattr(self._local, "url", None) != self.http_url:
            client = httpclient.InferenceServerClient(self.http_url, connection_timeout=10.0, network_timeout=120.0)
            self._local.client, self._local.url = client, self.http_url
            with self._clients_lock:
                self._clients.append(client)
        return client

    def _close_clients(self) -> None:
        with self._clients_lock:
            clients, self._clients = self._clients, []
        for client in clients:
            try:
                client.close()
            except Exception:  # a client of a thread that is gone may already be unusable
                pass
        self._local = threading.local()

    def _process_gone_within(self, seconds: float) -> bool:
        """True once the server process has exited (a dropped connection arrives a moment
        before the exit is visible)."""
        deadline = time.monotonic() + seconds
        while self.running:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True

    def _require_running(self) -> None:
        if not self.running:
            raise ServerError("the server is not running" + self._exit_note())

    def _exit_note(self) -> str:
        if self._process is not None and self._process.returncode is not None:
            return f" (tritonserver exited with code {self._process.returncode}).\n" + self._failure_report()
        return ""

    def load(
        self,
        name: str,
        config: Any = None,
        files: Mapping[str, bytes | str | os.PathLike[str]] | None = None,
        *,
        timeout: float = 3600.0,
    ) -> None:
        """Load (or reload) model ``name``; ``config`` overrides its config.pbtxt (ModelConfig,
        dict or JSON string); ``files`` (``{"1/model.py": bytes or path}``, needs ``config``)
        replace its directory. Raises ModelLoadError with Triton's reason and log lines.
        ``timeout`` is generous: loading a large model onto NeuronCores takes minutes."""
        if not isinstance(name, str) or not name or "/" in name:
            raise ValueError(f"model name must be a non-empty string without '/', got {name!r}")
        config_json = None if config is None else config_to_json(config)
        load_files = None
        if files:
            if config_json is None:
                raise ValueError("files need a config: Triton loads an override directory only together with its config")
            load_files = _files_for_load(files)
        self._require_running()
        log_start = self._log_size()
        # Its own client: the shared ones time out sooner than a Neuron model load takes.
        client = httpclient.InferenceServerClient(self.http_url, connection_timeout=10.0, network_timeout=timeout)
        try:
            client.load_model(name, config=config_json, files=load_files)
        except InferenceServerException as err:
            if not self.running:
                raise ServerError(f"tritonserver died while loading {name!r}" + self._exit_note()) from None
            reason = next((m.get("reason", "") for m in self.index() if m.get("name") == name and m.get("reason")), "")
            raise ModelLoadError(name, err.message(), reason, self._log_lines_since(log_start, name)) from None
        except Exception as err:  # transport errors: a timeout, or the server died mid-load
            if not self._process_gone_within(2.0):
                if isinstance(err, OSError):
                    raise ServerError(
                        f"no answer to the load of {name!r} within {timeout:.0f}s ({err}); Triton may still "
                        "be loading it: watch index() and the log"
                    ) from None
                raise
            raise ServerError(f"tritonserver died while loading {name!r}" + self._exit_note()) from None
        finally:
            client.close()

    def unload(self, name: str, timeout: float = 60.0) -> None:
        """Unload ``name`` and wait until Triton reports it unloaded."""
        self._require_running()
        self._client().unload_model(name)
        deadline = time.monotonic() + timeout
        while True:
            states = [m.get("state") for m in self.index() if m.get("name") == name]
            if not any(state in ("READY", "UNLOADING", "LOADING") for state in states):
                return
            if time.monotonic() > deadline:
                raise ServerError(f"model {name!r} still {states} {timeout:.0f}s after unload")
            time.sleep(0.1)

    def reload(self, name: str, config: Any = None, files: Mapping[str, Any] | None = None) -> None:
        """Load ``name`` again: with ``config``, that config; without, whatever is on disk now.
        Triton swaps in the new model when it is ready. A change of instance count only is
        applied in place (statistics keep counting); anything else (even no change, on 2.51)
        creates a new model object whose statistics start from zero."""
        self.load(name, config=config, files=files)

    def index(self) -> list[dict[str, str]]:
        """The repository index: one ``{name, version, state, reason}`` per model Triton knows."""
        self._require_running()
        rows = self._client().get_model_repository_index()
        return [
            {"name": r.get("name", ""), "version": r.get("version", ""), "state": r.get("state", ""), "reason": r.get("reason", "")}
            for r in rows
        ]

    def is_model_ready(self, name: str) -> bool:
        self._require_running()
        return bool(self._client().is_model_ready(name))

    def stats(self, name: str = "") -> dict[str, Any]:
        """Triton's statistics for ``name`` (all models when empty): the ``model_stats`` JSON."""
        self._require_running()
        return self._client().get_inference_statistics(name)

    def model_config(self, name: str, *, as_proto: bool = False) -> Any:
        """The config Triton is serving ``name`` with (after auto-complete): a dict, or a
        ``model_config_pb2.ModelConfig`` with ``as_proto=True``."""
        self._require_running()
        data = self._client().get_model_config(name)
        if not as_proto:
            return data
        message = model_config_pb2.ModelConfig()
        json_format.ParseDict(data, message, ignore_unknown_fields=True)
        return message

    def metrics(self) -> dict[str, list[dict[str, Any]]]:
        """The Prometheus metrics endpoint, parsed (see ``metrics.parse_metrics``)."""
        self._require_running()
        with urllib.request.urlopen(self.metrics_url, timeout=10) as response:
            return parse_metrics(response.read().decode("utf-8", "replace"))

    # ---- log -------------------------------------------------------------------------------

    def _read_log_lines(self) -> list[str]:
        if self._log_file is None:
            return list(self._final_log)
        try:
            return self._log_file.read_text(errors="replace").splitlines()
        except FileNotFoundError:
            return list(self._final_log)

    def _log_size(self) -> int:
        try:
            return self._log_file.stat().st_size if self._log_file is not None else 0
        except FileNotFoundError:
            return 0

    def _log_lines_since(self, offset: int, name: str, limit: int = 30) -> list[str]:
        if self._log_file is None:
            return []
        with open(self._log_file, "rb") as log:
            log.seek(offset)
            lines = log.read().decode(errors="replace").splitlines()
        # Triton's log prefix is the severity letter; keep errors, warnings and lines about the model.
        keep = [line for line in lines if line[:1] in ("E", "W") or name in line or "Traceback" in line or line.startswith(" ")]
        return keep[-limit:]

    def _failure_report(self, tail: int = 20) -> str:
        """Triton's error lines, then the last lines: enough to see why without the whole log
        (a bad flag makes Triton print its whole usage text after the one line that matters)."""
        lines = self._read_log_lines()
        usage = next((i for i, line in enumerate(lines) if line.startswith("Usage: tritonserver")), None)
        if usage is not None:
            lines = lines[:usage]
        errors = [line for line in lines if _ERROR_LINE.match(line) or "unrecognized option" in line]
        report = ""
        if errors:
            report += "Errors:\n" + "\n".join(errors[-15:]) + "\n"
        return report + "Last log lines:\n" + "\n".join(lines[-tail:])

    def log_tail(self, n: int = 50) -> list[str]:
        """The last ``n`` lines of the server's output (kept after ``stop``)."""
        return self._read_log_lines()[-n:] if n > 0 else []

    def follow_log(
        self,
        *,
        from_start: bool = False,
        stop: threading.Event | None = None,
        poll_interval: float = 0.2,
    ) -> Iterator[str]:
        """Yield log lines as the server writes them, until ``stop`` is set or the server has
        stopped and the log is drained. Lines written after this call are all seen, however late
        the iteration starts (in a thread, say): the position is taken here, not at first use."""
        if self._log_file is None:
            raise ServerError("the server has not been started")
        log = open(self._log_file, "rb")  # an open handle keeps reading after stop() deletes the file
        if not from_start:
            log.seek(0, os.SEEK_END)
        return self._follow(log, stop, poll_interval)

    def _follow(self, log: Any, stop: threading.Event | None, poll_interval: float) -> Iterator[str]:
        with log:
            partial = b""
            while stop is None or not stop.is_set():
                chunk = log.readline()
                if chunk:
                    partial += chunk
                    if partial.endswith(b"\n"):
                        yield partial.decode(errors="replace").rstrip("\n")
                        partial = b""
                    continue
                if not self.running:
                    if partial:
                        yield partial.decode(errors="replace")
                    return
                time.sleep(poll_interval)

    def follow_log_in_thread(
        self, callback: Callable[[str], None], *, from_start: bool = False
    ) -> threading.Event:
        """Call ``callback(line)`` from a daemon thread for each new log line; set the returned
        event to stop following."""
        stop = threading.Event()
        lines = self.follow_log(from_start=from_start, stop=stop)

        def run() -> None:
            for line in lines:
                callback(line)

        threading.Thread(target=run, name="workbench-triton-log", daemon=True).start()
        return stop

    def __repr__(self) -> str:
        state = f"running pid {self.pid} http {self.http_url}" if self.running else "stopped"
        return f"TritonServer({str(self.model_repository)!r}, {state})"


@atexit.register
def _stop_all_at_exit() -> None:
    for server in list(_running):
        if server._owner_pid != os.getpid():  # a forked child exiting must not stop its parent's server
            continue
        try:
            server.stop(timeout=5)
        except Exception:
            pass
