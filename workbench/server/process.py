"""`TritonServer`: the lifecycle of one local tritonserver process (find, start, ports, guard, stop).

Why it looks like this:

* Explicit model control only, so the workbench decides what is loaded (load/unload/reload with a
  config override instead of restarts: `control.ModelControl`, which this class hands over to).
* Free ports by default and a per-server shared-memory prefix for the python backend, so several
  servers (several engineers, several notebooks) run side by side.
* The server runs in its own process group (its python backend stubs join it) watched by a small
  guard process (``guard.py``): when the Python process that started it dies, even by SIGKILL,
  the guard takes the whole group down. ``stop()`` does the same on purpose.
* Output goes to a log file in a per-server run directory (`log.ServerLog` reads and follows
  it); load or start failures quote it.
* Loads go through `pytorch.PyTorchServing`: a PyTorch-backend model is served by Triton's real
  PyTorch backend where one is found (``pytorch_backend=``, ``$WORKBENCH_LIBTORCH_BACKEND``, the
  server's own backend directory), else by its Python-backend twin; settings that backend takes
  only at process start may restart the server (``restart``: same ports, same log). vLLM: `vllm.VllmServing`.
"""

from __future__ import annotations

import atexit
import dataclasses
import itertools
import os
import re
import secrets
import shutil
import subprocess
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import tritonclient.http as httpclient

from workbench.server import guard as guard_module
from workbench.server.auto_complete import auto_complete_need, repository_need
from workbench.server.cache import cache_args
from workbench.server.control import ClientOptions, ModelControl, as_model_config, files_for_load
from workbench.server.discovery import TritonInstall, find_tritonserver
from workbench.server.errors import ServerError, ServerStartError
from workbench.server.handover import HandedOver
from workbench.server.log import ServerLog
from workbench.server.ports import check_port_free, hostport, is_listening, pick_ports, requested_ports
from workbench.server.pytorch import PyTorchServing, find_pytorch_backend
from workbench.server.vllm_backend import VllmServing, backend_install, find_vllm_backend
from workbench.tasks import Cancelled

__all__ = ["TritonServer"]

Progress = Callable[[int, int, str], None]

# Flags the server object owns: letting extra_args set them would break ports, cleanup or control.
_OWNED_FLAGS = (
    "--model-repository",
    "--model-store",
    "--model-control-mode",
    "--http-port",
    "--grpc-port",
    "--metrics-port",
    "--http-address",
    "--grpc-address",
    "--metrics-address",
)
# a user's own say on auto-complete in extra_args: the server then adds no flag of its own
_AUTO_COMPLETE_FLAGS = ("--disable-auto-complete-config", "--strict-model-config")
_PORT_IN_USE_MARKERS = ("already in use", "address in use", "failed to add port")
_EXIT_TIMEOUT_SECS = 3
_counter = itertools.count()
_running: weakref.WeakSet[TritonServer] = weakref.WeakSet()


class TritonServer(HandedOver):
    """A tritonserver process with explicit model control.

    ``http_url`` and ``grpc_url`` are ``host:port`` (what tritonclient's clients take);
    ``metrics_url`` is the full Prometheus URL. Use as a context manager, or call ``start()`` and
    ``stop()``; the process never outlives this Python process. Model control (``load``,
    ``index``, ``stats``...) is ``control``'s (a `ModelControl` over HTTP), the output is ``log``'s
    (a `ServerLog`); the methods of the same names here hand over to them. ``model_config_name``
    serves each model with its ``configs/<name>.pbtxt`` (config.pbtxt where it has none);
    ``response_cache`` None starts the server with a local response cache when a model's config
    enables one. ``run_parent``: the folder its run folder (log, guard log) is made in, default the
    system's temp folder (a Ray task's own folder: `cluster.ray_task`, so a task killed with its
    server leaves one folder to remove, not two). ``auto_complete`` None starts it without Triton's
    auto-complete when no model in the repository needs it, and turns it on (a restart) before a
    load that does (`workbench.server.auto_complete`); True or False: as given.
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
        model_config_name: str | None = None,
        response_cache: bool | None = None,
        pytorch_backend: str | os.PathLike[str] | bool | None = None,
        vllm_backend: str | os.PathLike[str] | bool | None = None,
        vllm_python: str | os.PathLike[str] | None = None,
        run_parent: str | os.PathLike[str] | None = None,
        auto_complete: bool | None = None,
    ) -> None:
        repo = Path(model_repository).expanduser()
        if not repo.is_dir():
            raise FileNotFoundError(f"model repository {repo} is not a directory")
        self.model_repository = repo.resolve()
        self.host = host
        self._requested_ports = requested_ports(http=http_port, grpc=grpc_port, metrics=metrics_port)
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
        if model_config_name is not None and not re.fullmatch(r"[A-Za-z0-9_.\-]+", model_config_name):
            raise ValueError(f"model_config_name {model_config_name!r} must be a configs/<name>.pbtxt name")
        # --model-config-name: each model is served with configs/<name>.pbtxt where it has one
        self.model_config_name = model_config_name
        self.response_cache = response_cache  # None: when a model asks (workbench.server.cache)
        self.install: TritonInstall = find_tritonserver(binary)
        backend = find_pytorch_backend(self.install, pytorch_backend)
        if backend is not None and backend.backend_dir != self.install.backend_dir:
            self.install = dataclasses.replace(self.install, backend_dir=backend.backend_dir)
        self.pytorch = PyTorchServing(self, backend)
        vllm = find_vllm_backend(self.install, vllm_backend, vllm_python)  # see server/vllm.py
        self.install = backend_install(self.install, backend, vllm)
        self.vllm = VllmServing(self, vllm)
        self._restarting = False
        # None: Triton's auto-complete only where a model needs it (workbench.server.auto_complete)
        self._auto_complete_choice = auto_complete
        self.auto_complete = True  # whether the running process has it on (decided at start)
        self.ports: dict[str, int] = {}
        self.shm_prefix = f"wb-{os.getpid()}-{next(_counter)}-{secrets.token_hex(3)}-"
        self.run_parent = Path(run_parent) if run_parent is not None else None
        self.run_dir: Path | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._owner_pid = os.getpid()
        self._guard: guard_module.Guard | None = None
        self.log = ServerLog()
        self._control: ModelControl | None = None
        self._version: str | None = self.install.version
        self._lock = threading.RLock()

    # ---- addresses -------------------------------------------------------------------------

    def _port(self, which: str) -> int:
        if which not in self.ports:
            raise ServerError("the server has not been started")
        return self.ports[which]

    @property
    def http_url(self) -> str:
        return hostport(self.host, self._port("http"))

    @property
    def grpc_url(self) -> str:
        return hostport(self.host, self._port("grpc"))

    @property
    def metrics_url(self) -> str:
        return f"http://{hostport(self.host, self._port('metrics'))}/metrics"

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
            self._version = self.control.version
        return self._version

    @property
    def log_path(self) -> Path | None:
        return self.log.path

    @property
    def name(self) -> str:
        """Its HTTP address, the name a run record gives a server this process started."""
        return self.http_url

    @property
    def options(self) -> ClientOptions:
        """A server this process started is reached in the clear, with no headers."""
        return ClientOptions()

    def describe(self) -> dict[str, Any]:
        """What a run record says about this server (the measured URL is added by the sweep)."""
        return {"name": self.name, "url": self.http_url, "version": self.version, "remote": False}

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
        if self.model_config_name:
            args.append(f"--model-config-name={self.model_config_name}")
        if not self.auto_complete:
            args.append("--disable-auto-complete-config")
        return args + self._cache_args() + list(self.extra_args)

    def _cache_args(self) -> list[str]:
        return cache_args(
            self.model_repository, self.model_config_name, self.response_cache, self.install.cache_dir, self.extra_args
        )

    def _auto_complete_at_start(self) -> bool:
        """Whether to leave Triton's auto-complete on: as asked, else where the user's own flags
        decide it, else when a model in the repository needs it."""
        if self._auto_complete_choice is not None:
            return self._auto_complete_choice
        if any(a.split("=", 1)[0] in _AUTO_COMPLETE_FLAGS for a in self.extra_args):
            return True
        return repository_need(self.model_repository, self.model_config_name, self.vllm.declared_io()) is not None

    def _auto_complete_for(self, name: str, config: Any, files: Mapping[str, Any] | None) -> None:
        """Before loading ``name``: a server started without auto-complete (by the repository, not
        by the caller) that this load needs it for is restarted with it on, and what was loaded
        is loaded again, so the load behaves as on a server that always had it."""
        if self.auto_complete or self._auto_complete_choice is False or not self.running:
            return
        if not isinstance(name, str) or not name or "/" in name:
            return  # the load refuses the name itself
        why = auto_complete_need(
            self.model_repository / name,
            None if config is None else as_model_config(config),
            None if files is None else files_for_load(files),
            self.model_config_name,
            self.vllm.declared_io(),
        )
        if why is None:
            return
        loaded = self.control.loads()
        self.log.note(f"workbench: {name!r} needs Triton's auto-complete ({why}): restarting the server with it on")
        self.auto_complete = True
        self.restart()
        for model, request in loaded.items():
            self.load(model, config=request.config, files=request.files)

    # ---- lifecycle -------------------------------------------------------------------------

    def __enter__(self) -> TritonServer:
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
    ) -> TritonServer:
        """Start the server and wait until it is ready. Free ports are picked for any port not
        given; if another process grabs one in between, it retries with new ones."""
        with self._lock:
            if self.running:
                raise ServerError(f"server already running (pid {self.pid})")
            for name, port in self._requested_ports.items():
                if port is not None:
                    check_port_free(self.host, port, name)
            self.run_dir = Path(tempfile.mkdtemp(prefix="workbench-triton-", dir=self.run_parent))
            self.log.start(self.run_dir / "tritonserver.log")
            self.auto_complete = self._auto_complete_at_start()
            attempts = 1 if all(p is not None for p in self._requested_ports.values()) else 3
            for attempt in range(attempts):
                self.ports = pick_ports(self.host, self._requested_ports)
                self._control = ModelControl(self.http_url, "http", metrics_url=self.metrics_url, process=self)
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
                self._guard.wait_detached(10.0)  # type: ignore[union-attr]
                self._owner_pid = os.getpid()
                _running.add(self)
                return self
            raise AssertionError("unreachable")

    def _spawn(self) -> None:
        assert self.log.path is not None
        env = self.install.env()
        env.update(self.pytorch.environment(env))
        env.update(self.vllm.environment(env))
        env.update(self.extra_env)
        command = self.command()  # once: it reads every config (cache_args); the log shows what ran
        with open(self.log.path, "ab") as log:
            log.write(("$ " + " ".join(command) + "\n").encode())
            log.flush()
            self._process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=self.run_dir,
                start_new_session=True,  # own process group: stubs join it, one killpg ends all
            )
        with open(self.run_dir / "guard.log", "ab") as guard_log:  # type: ignore[operator]
            self._guard = guard_module.start_guard(self._process.pid, self.shm_prefix, guard_log)
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
                    raise ServerStartError(
                        f"tritonserver exited with code {code} before becoming ready.\n" + self.log.failure_report()
                    )
                try:
                    # Triton opens the metrics port last; a ready server whose metrics() fails would surprise.
                    if probe.is_server_ready() and self._metrics_listening():
                        break
                except Exception:  # refused / reset / timed out while the server is still coming up
                    pass
                if time.monotonic() > deadline:
                    raise ServerStartError(
                        f"tritonserver not ready after {timeout:.0f}s.\n" + self.log.failure_report()
                    )
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
        return is_listening(self.host, self._port("metrics"))

    def restart(self, timeout: float = 120.0) -> None:
        """Stop the process (its models are unloaded) and start it again on the same ports, run
        directory and log, with the environment worked out again: for what Triton's backends read
        only when the process starts. Log followers keep following."""
        with self._lock:
            self.require_running()
            self._restarting = True
            try:
                self._stop_process(timeout=30)
                for attempt in range(3):  # the old sockets may linger a moment
                    self._spawn()
                    try:
                        self.wait_ready(timeout)
                        return
                    except ServerStartError:
                        if attempt == 2 or not self._lost_port_race():
                            raise
                        self._stop_process(timeout=10)
                        time.sleep(1.0)
            except BaseException:
                self.stop()
                raise
            finally:
                self._restarting = False

    def stop(self, timeout: float = 30.0) -> None:
        """Graceful SIGTERM (Triton unloads its models), SIGKILL of the whole group after
        ``timeout``; stubs included. Safe to call twice."""
        with self._lock:
            self._stop_process(timeout)
            self._cleanup_run_dir()
            _running.discard(self)

    def _stop_process(self, timeout: float) -> None:
        """End the process: its models unloaded (within ``timeout / 2``), SIGTERM, then SIGKILL after
        ``timeout``, or at once while a load that got no answer is still under way (Triton's exit
        would wait for it: measured, the whole 30 s on a vLLM engine that did not come up)."""
        stuck: list[str] = []
        if self._control is not None:
            if self.running:
                stuck = self._control.unload_all(timeout / 2)
            self._control.close()
        if stuck:
            self.log.note(f"workbench: ended without waiting for the load of {', '.join(stuck)}: it got no answer")
        if self._process is not None:
            guard_module.end_process_group(self._process, 0.0 if stuck else timeout)
            self._process = None  # only now: an interrupted stop() can be called again
        if self._guard is not None:
            guard_module.release_guard(self._guard)
            self._guard = None
        guard_module.remove_shm_regions(self.shm_prefix)

    def _cleanup_run_dir(self) -> None:
        if self.run_dir is None:
            return
        self.log.keep_and_forget()
        shutil.rmtree(self.run_dir, ignore_errors=True)
        self.run_dir = None

    # ---- what the model-control client asks of the process ----------------------------------

    def require_running(self) -> None:
        """ServerError (with the exit code and log, if it exited) unless the process runs."""
        if not self.running:
            raise ServerError("the server is not running" + self.exit_note())

    def gone_within(self, seconds: float) -> bool:
        """True once the process has exited, waiting up to ``seconds`` (a dropped connection
        arrives a moment before the exit is visible)."""
        deadline = time.monotonic() + seconds
        while self.running:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True

    def exit_note(self) -> str:
        if self._process is not None and self._process.returncode is not None:
            return f" (tritonserver exited with code {self._process.returncode}).\n" + self.log.failure_report()
        return ""

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
        except Exception:  # noqa: BLE001 - at exit: one server failing to stop must not keep the others running
            pass
