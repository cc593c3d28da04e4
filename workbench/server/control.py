"""Model control of a running tritonserver, local or remote: load with a config override, unload,
index, statistics, config, readiness, metadata and metrics, through tritonclient.

One client for both kinds of server: a `TritonServer` this process started hands itself in as
``process``, so a call first checks that the process still runs and a refused load quotes the
server log written during it; a server someone else started (`RunningServer`) has no process
and no log here, only its answers.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
import urllib.request
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from google.protobuf import json_format
from tritonclient.grpc import model_config_pb2
from tritonclient.utils import InferenceServerException

from workbench.generate.config import ModelConfig, to_json
from workbench.limits import model_dir_problems, version_folder_problems
from workbench.server.errors import ModelLoadError, ModelRefusedError, ServerError
from workbench.server.log import ServerLog
from workbench.server.metrics import parse_metrics
from workbench.server.stub_watch import STUB_ENDED_NOTE, StubWatch, wait_for_stubs_gone

__all__ = [
    "ModelControl",
    "ClientOptions",
    "LocalProcess",
    "as_model_config",
    "config_to_json",
    "files_for_load",
    "PROTOCOLS",
    "TIMEOUT_FLAG",
    "DEFAULT_REMOTE_TIMEOUT",
    "timeout_problem",
]

# How a remote server's calls are bounded: one timeout per call, the user's (``--timeout``, or
# ``timeout=`` in the API), named in every message it cuts short.
TIMEOUT_FLAG = "--timeout"
DEFAULT_REMOTE_TIMEOUT = 120.0  # tritonclient HTTP's own network timeout; a Neuron load may need more
# A Prometheus page of one server: Triton's is tens of KiB; past this it is not one
MAX_METRICS_BYTES = 16 << 20


def timeout_problem(value: Any) -> str | None:
    """Why ``value`` is not a usable call timeout in seconds (None when it is): a finite number > 0,
    at most a day (gRPC deadlines and socket timeouts overflow far past that)."""
    import math

    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or not 0 < value <= 86400
    ):
        return f"{TIMEOUT_FLAG} must be a number of seconds > 0 and at most 86400, got {value!r}"
    return None


PROTOCOLS = ("grpc", "http")
_BUSY_STATES = ("READY", "UNLOADING", "LOADING")


@dataclass(frozen=True)
class ClientOptions:
    """How tritonclient reaches a server: TLS and headers for auth, as its clients take them.

    ``ssl`` turns TLS on; ``root_certificates`` (a PEM file) is the CA to trust instead of the
    system's (gRPC: ``root_certificates``; HTTP: ``ssl_options={"ca_certs": ...}``);
    ``private_key``/``certificate_chain`` are gRPC's client certificate (mutual TLS);
    ``insecure`` skips HTTP's hostname check (tritonclient's ``insecure``; the certificate itself
    is still verified against the CA). ``headers`` go with every request (e.g.
    ``{"Authorization": "Bearer ..."}``, or the key of Triton's ``--grpc-restricted-protocol``).
    """

    ssl: bool = False
    root_certificates: str | None = None
    private_key: str | None = None
    certificate_chain: str | None = None
    insecure: bool = False
    headers: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "headers", {str(k): str(v) for k, v in dict(self.headers).items()})
        for what in ("root_certificates", "private_key", "certificate_chain"):
            path = getattr(self, what)
            if path is not None and not Path(path).is_file():
                raise FileNotFoundError(f"{what} file not found: {path}")
        if not self.ssl and (self.root_certificates or self.private_key or self.certificate_chain or self.insecure):
            raise ValueError("certificates and insecure apply to TLS only: set ssl=True (or use https:// / grpcs://)")

    def with_ssl(self) -> ClientOptions:
        return replace(self, ssl=True)

    def client_kwargs(self, protocol: str) -> dict[str, Any]:
        """Keyword arguments of tritonclient's ``InferenceServerClient`` for ``protocol``."""
        if not self.ssl:
            return {}
        if protocol == "grpc":
            if self.insecure:
                raise ValueError("gRPC has no insecure mode: give root_certificates for a self-signed server")
            return {
                "ssl": True,
                "root_certificates": self.root_certificates,  # tritonclient reads the files
                "private_key": self.private_key,
                "certificate_chain": self.certificate_chain,
            }
        if self.private_key or self.certificate_chain:
            raise ValueError("client certificates are supported over gRPC only (tritonclient's HTTP client has none)")
        options = {"ca_certs": self.root_certificates} if self.root_certificates else {}
        return {"ssl": True, "ssl_options": options, "insecure": self.insecure}


class LocalProcess(Protocol):
    """What the client asks of a server process it can see (`TritonServer`)."""

    log: ServerLog
    model_repository: Path

    @property
    def pid(self) -> int | None: ...

    def require_running(self) -> None: ...

    def gone_within(self, seconds: float) -> bool: ...

    def exit_note(self) -> str: ...


def as_model_config(config: Any) -> ModelConfig:
    """A ``ModelConfig`` from a ModelConfig, a dict or a JSON string; dicts and strings are
    checked against the ModelConfig schema, so a typo fails here, naming the field."""
    if isinstance(config, model_config_pb2.ModelConfig):  # the class ModelConfig names
        return config
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
    message = ModelConfig()
    try:
        json_format.ParseDict(data, message)
    except json_format.ParseError as err:
        raise ValueError(f"config is not a valid Triton ModelConfig: {err}") from None
    return message


def config_to_json(config: Any) -> str:
    """A model config (ModelConfig, dict or JSON string) as the JSON Triton's load-with-override takes."""
    return to_json(as_model_config(config))


def files_for_load(files: Mapping[str, bytes | str | os.PathLike[str]]) -> dict[str, bytes]:
    """``{"1/model.py": bytes | path}`` -> ``{"file:1/model.py": bytes}`` (tritonclient base64s it)."""
    out: dict[str, bytes] = {}
    for key, value in files.items():
        rel = key[len("file:") :] if key.startswith("file:") else key
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


@dataclass(frozen=True)
class LoadRequest:
    """What a load asked for: the config override (Triton's JSON; None: the directory's) and the
    override files (``{"file:1/model.json": bytes}``; None: the directory's)."""

    config: str | None
    files: dict[str, bytes] | None

    @classmethod
    def of(cls, config: Any = None, files: Mapping[str, bytes | str | os.PathLike[str]] | None = None) -> LoadRequest:
        """The request `ModelControl.load` sends for ``config`` and ``files`` (its arguments)."""
        config_json = None if config is None else config_to_json(config)
        if files and config_json is None:
            raise ValueError("files need a config: Triton loads an override directory only together with its config")
        return cls(config_json, files_for_load(files) if files else None)


class ModelControl:
    """The model-control calls of one server at ``url`` (``host:port``) over ``protocol``.

    ``metrics_url`` (the full Prometheus URL) enables ``metrics()``. ``process``: the local
    server process, when this process started it (held weakly, so a dropped server still goes).
    """

    def __init__(
        self,
        url: str,
        protocol: str = "http",
        *,
        metrics_url: str | None = None,
        process: LocalProcess | None = None,
        options: ClientOptions | None = None,
        timeout: float | None = None,
    ) -> None:
        if protocol not in PROTOCOLS:
            raise ValueError(f"protocol must be grpc or http, got {protocol!r}")
        if timeout is not None and timeout_problem(timeout):
            raise ValueError(timeout_problem(timeout))
        # every call's bound (None: tritonclient's own, for a server this process watches)
        self.timeout = None if timeout is None else float(timeout)
        self.url, self.protocol, self.metrics_url = url, protocol, metrics_url
        self.options = options or ClientOptions()
        self.options.client_kwargs(protocol)  # a combination the protocol cannot do fails here
        self._headers = {"headers": dict(self.options.headers)} if self.options.headers else {}
        self._process = weakref.proxy(process) if process is not None else None
        self._json = {"as_json": True} if protocol == "grpc" else {}
        self._local = threading.local()
        self._clients: list[Any] = []
        self._clients_lock = threading.Lock()
        self._unanswered_loads: set[str] = set()  # loads that got no answer in time: Triton may still run them
        self._loaded: dict[str, LoadRequest] = {}  # what each model's last load here asked for

    # ---- clients ---------------------------------------------------------------------------

    def _new_client(self, network_timeout: float | None = None, connection_timeout: float = 10.0) -> Any:
        network_timeout = network_timeout or self.timeout or 120.0
        connection_timeout = min(connection_timeout, network_timeout)
        if self.protocol == "grpc":
            import tritonclient.grpc as grpcclient

            return grpcclient.InferenceServerClient(self.url, **self.options.client_kwargs("grpc"))
        import tritonclient.http as httpclient

        return httpclient.InferenceServerClient(
            self.url,
            connection_timeout=connection_timeout,
            network_timeout=network_timeout,
            **self.options.client_kwargs("http"),
        )

    def _client(self) -> Any:
        """One tritonclient client per thread: the HTTP one is gevent-based and must stay on the
        thread that made it (notebook UIs call from worker threads)."""
        client = getattr(self._local, "client", None)
        if client is None:
            client = self._new_client()
            self._local.client = client
            with self._clients_lock:
                self._clients.append(client)
        return client

    def close(self) -> None:
        """Close every thread's client; later calls open new ones."""
        with self._clients_lock:
            clients, self._clients = self._clients, []
        for client in clients:
            try:
                client.close()
            except Exception:  # a client of a thread that is gone may already be unusable
                pass
        self._local = threading.local()

    def _check(self) -> None:
        if self._process is not None:
            self._process.require_running()

    def _bounded(self, timeout: float | None = None) -> dict[str, Any]:
        """The per-call keyword that bounds a gRPC call (HTTP clients carry their bound)."""
        timeout = timeout or self.timeout
        return {"client_timeout": timeout} if self.protocol == "grpc" and timeout else {}

    @contextlib.contextmanager
    def _answer(self, what: str, timeout: float | None = None):
        """One ServerError line, naming the server, the call and the bound, for a call that got no
        usable answer: a timeout, a refused or dropped connection, a malformed reply."""
        timeout = timeout or self.timeout
        where = f"{self.protocol}://{self.url}"
        bound = f" within {timeout:g}s ({TIMEOUT_FLAG})" if timeout else ""
        try:
            if self.protocol == "http" and timeout:
                # an overall bound: tritonclient's network timeout is per read, so a peer that
                # trickles an endless body would never end; its HTTP client runs on gevent
                import gevent

                with gevent.Timeout(timeout, TimeoutError(f"no answer within {timeout:g}s")):
                    yield
            else:
                yield
        except InferenceServerException as err:
            status = str(err.status() or "")
            if "DEADLINE_EXCEEDED" in status or "UNAVAILABLE" in status:
                text = "no answer" + bound if "DEADLINE" in status else f"cannot reach the server ({err.message()})"
                raise ServerError(f"{where}: {text} to {what}") from None
            raise
        except (ServerError, ValueError, TypeError):
            raise
        except Exception as err:  # socket and gevent timeouts, refused connections, garbled replies
            detail = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            timed_out = (
                isinstance(err, TimeoutError) or "timeout" in type(err).__name__.lower() or "timed out" in detail
            )
            text = (
                f"no answer{bound}"
                if timed_out
                else f"cannot reach the server ({detail})"
                if isinstance(err, ConnectionError)
                else f"no usable answer ({detail})"
            )
            raise ServerError(f"{where}: {text} to {what}") from None

    # ---- calls -----------------------------------------------------------------------------

    def server_metadata(self) -> dict[str, Any]:
        """Triton's server metadata: ``name``, ``version``, ``extensions``."""
        self._check()
        with self._answer("the server metadata request"):
            return dict(self._client().get_server_metadata(**self._json, **self._bounded(), **self._headers))

    @property
    def version(self) -> str:
        """Triton's release, from the server's metadata."""
        return str(self.server_metadata()["version"])

    def load(
        self,
        name: str,
        config: Any = None,
        files: Mapping[str, bytes | str | os.PathLike[str]] | None = None,
        *,
        timeout: float | None = None,
        asked: LoadRequest | None = None,
    ) -> None:
        """Load (or reload) model ``name``; ``config`` overrides its config.pbtxt (ModelConfig,
        dict or JSON string); ``files`` (``{"1/model.py": bytes or path}``, needs ``config``)
        replace its directory. Raises ModelLoadError with Triton's reason (and the local log).
        ``timeout`` (default: the client's, else an hour) is generous: loading a large model onto
        NeuronCores takes minutes. ``asked``: the caller's own request where ``config`` was
        completed for it (a vLLM config on a server without auto-complete), kept as `last_load`."""
        timeout = timeout or self.timeout or 3600.0
        if not isinstance(name, str) or not name or "/" in name:
            raise ValueError(f"model name must be a non-empty string without '/', got {name!r}")
        request = LoadRequest.of(config, files)
        config_json, load_files = request.config, request.files
        self._refuse_what_would_break(name, load_files)
        self._check()
        log_start = self._process.log.size() if self._process is not None else 0
        for attempt in (1, 2):
            watch = StubWatch(self._process.pid if self._process is not None else None)
            try:
                with watch:
                    self._send_load(name, config_json, load_files, timeout)
                break
            except InferenceServerException as err:
                if watch.ended and self._process is not None:
                    self._process.log.note(
                        f"workbench: ended stub(s) {watch.ended} of {name!r} that Triton judged unhealthy while "
                        "starting and waited on for ever" + (": loading again" if attempt == 1 else "")
                    )
                if watch.ended and attempt == 1 and watch.server_pid is not None:
                    wait_for_stubs_gone(watch.server_pid, name)
                    continue  # Triton gave up on a stub that was only slow: ended, and the load sent again
                self._raise_if_died(f"while loading {name!r}", within=0.0)
                reason = next(
                    (m.get("reason", "") for m in self.index() if m.get("name") == name and m.get("reason")), ""
                )
                log_lines = self._process.log.lines_since(log_start, name) if self._process is not None else []
                message = err.message() + (STUB_ENDED_NOTE if watch.ended else "")
                raise ModelLoadError(name, message, reason, log_lines) from None
            except ServerError as err:  # transport errors: a timeout, or the server died mid-load
                self._raise_if_died(f"while loading {name!r}", within=2.0)
                if "no answer" not in str(err):
                    raise
                self._unanswered_loads.add(name)
                raise ServerError(f"{err}; Triton may still be loading it: watch index() and the log") from None
        self._unanswered_loads.discard(name)
        self._loaded[name] = asked or request

    def _send_load(
        self, name: str, config_json: str | None, load_files: Mapping[str, bytes] | None, timeout: float
    ) -> None:
        """The load request itself, answered within ``timeout`` seconds."""
        if self.protocol == "grpc":
            with self._answer(f"the load of {name!r}", timeout):
                self._client().load_model(
                    name, config=config_json, files=load_files, client_timeout=timeout, **self._headers
                )
            return
        # Its own client: the shared ones time out sooner than a Neuron model load takes.
        client = self._new_client(network_timeout=timeout)
        try:
            with self._answer(f"the load of {name!r}", timeout):
                client.load_model(name, config=config_json, files=load_files, **self._headers)
        finally:
            client.close()

    def _refuse_what_would_break(self, name: str, load_files: Mapping[str, bytes] | None) -> None:
        """ModelRefusedError, before Triton sees it, for a model whose folders would abort the server
        or hang its load (`workbench.limits.version_folder_problems`): the override's files, else
        the directory in a local server's repository."""
        if load_files is not None:
            folders = {key[len("file:") :].split("/")[0] for key in load_files if "/" in key}
            problems = version_folder_problems(folders, f"{name}/")
        elif self._process is not None:
            problems = model_dir_problems(Path(self._process.model_repository) / name)
        else:
            return
        if problems:
            raise ModelRefusedError(name, problems)

    def _raise_if_died(self, during: str, within: float) -> None:
        """ServerError with the process's exit when it is gone (within ``within`` seconds: a
        dropped connection arrives a moment before the exit is visible)."""
        if self._process is not None and self._process.gone_within(within):
            raise ServerError(f"tritonserver died {during}" + self._process.exit_note()) from None

    def unload(self, name: str, timeout: float = 60.0) -> None:
        """Unload ``name`` and wait until Triton reports it unloaded."""
        self._check()
        with self._answer(f"the unload of {name!r}"):
            self._client().unload_model(name, **self._bounded(), **self._headers)
        self._loaded.pop(name, None)
        deadline = time.monotonic() + timeout
        while True:
            states = [m.get("state") for m in self.index() if m.get("name") == name]
            if not any(state in _BUSY_STATES for state in states):
                return
            if time.monotonic() > deadline:
                raise ServerError(f"model {name!r} still {states} {timeout:.0f}s after unload")
            time.sleep(0.1)

    def loads(self) -> dict[str, LoadRequest]:
        """What each model's last load made here asked for, by model name."""
        return dict(self._loaded)

    def last_load(self, name: str) -> LoadRequest | None:
        """What the last load of ``name`` made here asked for (None: not loaded by this client)."""
        return self._loaded.get(name)

    def reload(self, name: str, config: Any = None, files: Mapping[str, Any] | None = None) -> None:
        """Load ``name`` again: with ``config``, that config; without, whatever is on disk now.
        Triton swaps in the new model when it is ready. A change of instance count only is
        applied in place (statistics keep counting); anything else (even no change, on 2.51)
        creates a new model object whose statistics start from zero."""
        self.load(name, config=config, files=files)

    def unload_all(self, timeout: float) -> list[str]:
        """Unload every model, bounded by ``timeout`` even on a hung server, so each one's
        finalize() runs even when Triton's exit timeout then cuts its shutdown short. Errors are
        swallowed: this is the polite first step of a stop, and the signals after it still stop it.

        A model whose load got no answer here (`load`'s timeout) and that Triton still lists as
        LOADING is left alone: its unload, and Triton's own exit, wait for that load to end (a vLLM
        engine that never comes up: for ever). Returns those names, so the stop ends the process
        group at once instead of waiting; the process is about to end, so they are forgotten."""
        deadline = time.monotonic() + timeout
        client = self._new_client(network_timeout=max(timeout, 1.0), connection_timeout=min(5.0, timeout))
        bounded = {"client_timeout": max(timeout, 1.0)} if self.protocol == "grpc" else {}
        stuck: list[str] = []

        def busy() -> list[str]:
            rows = _index_rows(client.get_model_repository_index(**self._json, **bounded, **self._headers))
            stuck[:] = [r["name"] for r in rows if r["state"] == "LOADING" and r["name"] in self._unanswered_loads]
            return [r["name"] for r in rows if r["state"] in _BUSY_STATES and r["name"] not in stuck]

        try:
            for name in busy():
                client.unload_model(name, **bounded, **self._headers)
            while time.monotonic() < deadline and busy():
                time.sleep(0.1)
        except Exception:  # a hung or dying server
            pass
        finally:
            client.close()
            self._unanswered_loads.clear()
            self._loaded.clear()
        return stuck

    def index(self) -> list[dict[str, str]]:
        """The repository index: one ``{name, version, state, reason}`` per model Triton knows."""
        self._check()
        with self._answer("the repository index request"):
            return _index_rows(
                self._client().get_model_repository_index(**self._json, **self._bounded(), **self._headers)
            )

    def is_model_ready(self, name: str) -> bool:
        self._check()
        with self._answer(f"the readiness request of {name!r}"):
            return bool(self._client().is_model_ready(name, **self._bounded(), **self._headers))

    def stats(self, name: str = "") -> dict[str, Any]:
        """Triton's statistics for ``name`` (all models when empty): the ``model_stats`` JSON
        (over gRPC its 64-bit counts are strings, as protobuf's JSON writes them)."""
        self._check()
        with self._answer("the statistics request"):
            return self._client().get_inference_statistics(name, **self._json, **self._bounded(), **self._headers)

    def model_config(self, name: str, *, as_proto: bool = False) -> Any:
        """The config Triton is serving ``name`` with (after auto-complete): a dict, or a
        ``ModelConfig`` with ``as_proto=True``."""
        self._check()
        with self._answer(f"the config request of {name!r}"):
            data = self._client().get_model_config(name, **self._json, **self._bounded(), **self._headers)
        data = data.get("config", data) if self.protocol == "grpc" else data  # gRPC wraps the config
        if not as_proto:
            return data
        return json_format.ParseDict(data, ModelConfig(), ignore_unknown_fields=True)

    def metrics(self) -> dict[str, list[dict[str, Any]]]:
        """The Prometheus metrics endpoint, parsed (see ``metrics.parse_metrics``)."""
        if self.metrics_url is None:
            raise ServerError(f"no metrics URL is known for the server at {self.url}")
        self._check()
        deadline = time.monotonic() + 10.0
        body = bytearray()
        with urllib.request.urlopen(self.metrics_url, timeout=10) as response:
            # bounded in size and in time: an endless or dripping body is not a metrics page
            while chunk := response.read1(65536):
                body += chunk
                if len(body) > MAX_METRICS_BYTES:
                    raise ServerError(f"the metrics at {self.metrics_url} ran past {MAX_METRICS_BYTES >> 20} MiB")
                if time.monotonic() > deadline:
                    raise ServerError(f"the metrics at {self.metrics_url} did not end within 10 s")
        return parse_metrics(body.decode("utf-8", "replace"))


def _index_rows(rows: Any) -> list[dict[str, str]]:
    if isinstance(rows, Mapping):  # gRPC wraps the list
        rows = rows.get("models", [])
    return [
        {
            "name": r.get("name", ""),
            "version": r.get("version", ""),
            "state": r.get("state", ""),
            "reason": r.get("reason", ""),
        }
        for r in rows
    ]
