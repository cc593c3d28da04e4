"""Run a local tritonserver on the shared model repository, or connect to one someone else started:
start/stop, ports, the models and their states, load/unload/reload, and the server's log as it is
written.

The panel shows what its server object (``state.server``: a `TritonServer` or a `RunningServer`)
says, plus the step in flight (starting, stopping). Starting, stopping and loading take seconds to
minutes, so they run in a worker thread; the log is followed from the moment the process writes it,
into a view that keeps the newest line in sight (never an ``Output`` context from a thread).
"""

from __future__ import annotations

import html
import threading
from pathlib import Path

import ipywidgets as widgets

from workbench.generate.backends import backend_of_config
from workbench.generate.config import ConfigError, read_config
from workbench.generate.vllm_backend import VLLM
from workbench.server import RunningServer, ServerError, TritonServer
from workbench.server.control import PROTOCOLS
from workbench.server.log import gpu_probe_note
from workbench.server.pytorch import ENV_VAR, PyTorchBackend
from workbench.server.vllm_env import server_for_vllm
from workbench.tutorial.backend_comparison import built_libtorch_backend
from workbench.ui.ask import AskArea
from workbench.ui.background import LogView, TaskControls
from workbench.ui.layout import button, description_style, row
from workbench.ui.shared_state import WorkbenchState
from workbench.ui.widget_values import error_list

_STATE_COLOURS = {"READY": "#1b5e20", "UNAVAILABLE": "#b00020", "LOADING": "#a05a00", "UNLOADING": "#a05a00"}


def models_table_html(rows: list[dict]) -> str:
    """The repository index as an HTML table (name, version, state, reason, and which backend
    served a PyTorch-backend model when a row says: ``served_by``)."""
    if not rows:
        return "<i>no models in the repository</i>"
    served = any(row_.get("served_by") for row_ in rows)
    body = []
    for row_ in rows:
        state = row_.get("state", "")
        colour = _STATE_COLOURS.get(state, "#555")
        by = f"<td>{html.escape(row_.get('served_by', ''))}</td>" if served else ""
        body.append(
            f"<tr><td>{html.escape(row_.get('name', ''))}</td><td>{html.escape(row_.get('version', ''))}</td>"
            f"<td style='color:{colour};font-weight:bold'>{html.escape(state or 'not loaded')}</td>"
            f"<td style='white-space:normal'>{html.escape(row_.get('reason', ''))}</td>{by}</tr>"
        )
    head = "<th style='text-align:left'>served by</th>" if served else ""
    return (
        "<table><tr><th style='text-align:left'>model</th><th>version</th><th>state</th>"
        f"<th style='text-align:left'>reason</th>{head}</tr>{''.join(body)}</table>"
    )


MODEL_STEPS = ("loading ", "unloading ", "reloading ")  # phases about a model, not the server


def server_html(server, phase: str) -> str:
    """One line on the server: the step in flight, what runs where, or that nothing runs. A step
    on a model of a running server (loading it) follows the server's own line."""
    running = server is not None and server.running
    if phase and not (running and phase.startswith(MODEL_STEPS)):
        return f"<b style='color:#a05a00'>{html.escape(phase)}</b> <i>(see the status line and the log)</i>"
    if phase:
        return server_html(server, "") + f"; <b style='color:#a05a00'>{html.escape(phase)}</b>"
    if server is None or not server.running:
        return "<i>not running</i>"
    try:
        version = server.version
    except Exception:  # metadata not reachable yet; what runs where is what matters
        version = "?"
    if isinstance(server, RunningServer):
        return (
            f"<b style='color:#1b5e20'>connected</b> to Triton {html.escape(str(version))} at "
            f"{server.protocol}://{html.escape(server.url)}; started by someone else, so it is never "
            "stopped here and its log is not shown"
        )
    ports = ", ".join(f"{k} {v}" for k, v in server.ports.items())
    return (
        f"<b style='color:#1b5e20'>running</b> pid {server.pid}, Triton {html.escape(str(version))}; {ports}; "
        f"repository {html.escape(str(server.model_repository))}"
    )


class ServerPanel:
    """Controls for ``state.server``. ``load_on_start`` loads the current model right after the
    server is ready, so one click takes a generated directory to READY."""

    def __init__(self, state: WorkbenchState | None = None) -> None:
        self.state = state if state is not None else WorkbenchState()
        self._log_stop: threading.Event | None = None
        self._phase = ""  # the lifecycle step in flight ("starting tritonserver", "stopping", ...)
        self.index: list[dict] = []
        self.controls: dict[str, widgets.Widget] = {}
        c = self.controls
        self.ops = TaskControls(
            "start server",
            run_tooltip="start tritonserver on this repository",
            run_enabled=lambda: not (self.server is not None and self.server.running),
        )
        c["start"], c["cancel"], c["progress"], c["status"] = (
            self.ops.run_button,
            self.ops.cancel_button,
            self.ops.progress,
            self.ops.status,
        )
        c["stop"] = button("stop server", icon="power-off", disabled=True)
        c["load_on_start"] = widgets.Checkbox(
            value=True, description="load the current model on start", indent=False, layout=widgets.Layout(width="auto")
        )
        c["connect_url"] = widgets.Text(
            description="or connect to",
            style=description_style("100px"),
            placeholder="host:port of a running tritonserver",
            layout=widgets.Layout(width="380px"),
        )
        c["connect_protocol"] = widgets.Dropdown(options=PROTOCOLS, value="http", layout=widgets.Layout(width="90px"))
        c["connect"] = button(
            "connect", icon="plug", tooltip="use a tritonserver started elsewhere with --model-control-mode=explicit"
        )
        c["server_info"] = widgets.HTML("<i>not running</i>")
        c["model"] = widgets.Combobox(
            value=self.state.name, placeholder="model name", description="model", ensure_option=False
        )
        c["load"] = button("load", icon="upload", disabled=True)
        c["unload"] = button("unload", icon="eject", disabled=True)
        c["reload"] = button(
            "reload",
            icon="refresh",
            disabled=True,
            tooltip="load again from disk (after writing a new version of the directory)",
        )
        c["refresh"] = button("refresh", icon="sync", disabled=True)
        c["models"] = widgets.HTML()
        c["notice"] = widgets.HTML()
        c["pytorch"] = widgets.HTML()  # who serves PyTorch-backend models on this server, and why
        c["error"] = widgets.HTML()
        self.log = LogView(
            height="320px", placeholder="server log: it appears here as tritonserver writes it", note=gpu_probe_note
        )
        c["log"] = self.log.widget
        self.ops.on_idle = self._show
        self.ask = AskArea(self.state)  # prompt -> the loaded generative model's answer
        c["start"].on_click(lambda _b: self.start())
        c["stop"].on_click(lambda _b: self.stop())
        c["connect"].on_click(lambda _b: self.connect())
        c["load"].on_click(lambda _b: self._model_op("load"))
        c["unload"].on_click(lambda _b: self._model_op("unload"))
        c["reload"].on_click(lambda _b: self._model_op("reload"))
        c["refresh"].on_click(lambda _b: self.refresh())
        self.state.observe(lambda change: setattr(c["model"], "value", change["new"]), names="name")
        # a server started in code (app.state.server = TritonServer(...).start()) is shown too
        self.state.observe(lambda _change: self._show(), names="server")
        self.state.observe(self._rewritten, names="written")
        self.widget = widgets.VBox(
            [
                row(self.ops.widget, c["stop"]),
                c["load_on_start"],
                row(c["connect_url"], c["connect_protocol"], c["connect"]),
                c["server_info"],
                row(c["model"], c["load"], c["unload"], c["reload"], c["refresh"]),
                c["models"],
                c["pytorch"],
                c["notice"],
                c["error"],
                self.ask.widget,
                c["log"],
            ],
            layout=widgets.Layout(width="100%"),
        )
        self._show()

    def _repr_mimebundle_(self, **kwargs):
        return self.widget._repr_mimebundle_(**kwargs)

    @property
    def server(self) -> TritonServer | RunningServer | None:
        return self.state.server

    def _show(self) -> None:
        """Controls and the server line as the server object and the step in flight say."""
        c, server = self.controls, self.server
        running = server is not None and server.running
        busy = self.ops.running
        c["start"].disabled = running or busy
        c["connect"].disabled = running or busy
        c["stop"].disabled = not running or busy
        c["stop"].description = "disconnect" if isinstance(server, RunningServer) else "stop server"
        for key in ("load", "unload", "reload", "refresh"):
            c[key].disabled = not running or busy
        c["server_info"].value = server_html(server, self._phase)

    def _rewritten(self, change) -> None:
        """A model directory was written while serving: Triton keeps the old one until a reload."""
        name = change["new"].path.name if change["new"] is not None else ""
        loaded = any(row_["name"] == name and row_["state"] == "READY" for row_ in self.index)
        if loaded and self.server is not None and self.server.running:
            self.controls["model"].value = name
            self.controls["notice"].value = (
                f"<div style='color:#a05a00'>{html.escape(name)} was rewritten on disk; "
                "the server still serves the old version until you click reload</div>"
            )

    def _run(self, label: str, fn, phase: str = "") -> None:
        """Run ``fn(progress, cancel)`` as the panel's one background operation."""
        c = self.controls
        c["error"].value = c["notice"].value = ""
        self._phase = phase

        def work(*, progress, cancel):
            return fn(progress, cancel)

        def done(task) -> None:
            self._phase = ""
            self.ask.busy = ""
            if task.state == "failed":
                c["error"].value = error_list([f"{label} failed: {task.error}"])
            self.refresh()

        self.ops.start(work, on_done=done)
        self._show()

    # --- lifecycle -------------------------------------------------------------------------------

    def _follow(self, server: TritonServer) -> None:
        """Follow the log from its first line as soon as the process writes it."""
        if self._log_stop is None and server.log_path is not None and server.running:
            self._log_stop = server.follow_log_in_thread(self.log.append, from_start=True)

    def _stop_following(self) -> None:
        if self._log_stop is not None:
            self._log_stop.set()
            self._log_stop = None

    def start(self) -> None:
        """Start a server on ``state.repository`` (created when missing), then load the current model."""
        if self.server is not None and self.server.running:
            return
        repository = Path(self.state.repository)
        repository.mkdir(parents=True, exist_ok=True)
        # one backend directory per server (server/vllm.py backend_install): for a vLLM model, the vLLM
        # environment and backend notebook 09 finds (server/vllm_env.py); otherwise the LibTorch build
        # notebook 08 made (cached), else the twin
        serves_vllm = model_backend(self.state) == VLLM.name
        try:
            server = (
                server_for_vllm(repository)
                if serves_vllm
                else TritonServer(repository, pytorch_backend=built_libtorch_backend(), vllm_backend=False)
            )
        except (ServerError, OSError, ValueError) as err:
            what = f" for the vLLM model {self.state.name}" if serves_vllm else ""
            self.controls["error"].value = error_list([f"cannot start a server{what}: {err}"])
            return
        self.controls["pytorch"].value = vllm_notice(server) if serves_vllm else pytorch_notice(server.pytorch.backend)
        self._stop_following()
        self.log.clear()
        self.state.server = server

        def start_and_load(progress, cancel):
            def reported(done: int, total: int, message: str) -> None:
                self._follow(server)  # the process runs and writes its log from the first report
                progress(done, total, message)

            server.start(progress=reported, cancel=cancel)
            self._follow(server)
            name = self.state.name
            if self.controls["load_on_start"].value and (repository / name / "config.pbtxt").is_file():
                self._phase = f"loading {name}"  # the server runs; the step now is the model's
                self._show()
                progress(0, 1, f"loading {name}")
                try:
                    server.load(name)
                except (ServerError, OSError, ValueError) as err:  # the server started; only the model failed
                    self._phase = ""
                    self.controls["error"].value = error_list(
                        [f"tritonserver is running; loading {name} failed: {err}"]
                    )
                    progress(1, 1, f"server running; {name} not loaded (why: below)")
                    return
                progress(1, 1, f"{name} loaded")

        self._run("start", start_and_load, phase="starting tritonserver")

    def connect(self, url: str | None = None) -> None:
        """Use the tritonserver at ``url`` (default: the ``connect_url`` field), started elsewhere with
        explicit model control. A URL with a scheme (``grpc://``, ``https://``...) names its protocol;
        a bare host:port uses the protocol dropdown."""
        c = self.controls
        if url is not None:
            c["connect_url"].value = url
        url = c["connect_url"].value.strip()
        if not url:
            c["error"].value = error_list(["give the host:port of a running tritonserver"])
            return
        if self.server is not None and self.server.running:
            c["error"].value = error_list(["stop or disconnect the current server first"])
            return
        try:
            server = RunningServer(url, None if "://" in url else c["connect_protocol"].value)
        except (ValueError, OSError) as err:  # a malformed URL is named before anything runs
            c["error"].value = error_list([f"cannot connect: {err}"])
            return

        def reach(progress, cancel):
            progress(0, 1, f"connecting to {url}")
            try:
                version = server.version
            except Exception as err:  # noqa: BLE001 - whatever the client raises, the panel says no server answers
                server.close()
                raise ServerError(f"no tritonserver answers at {url} over {server.protocol} ({err})") from None
            self._stop_following()
            self.log.clear()
            self.state.server = server
            progress(1, 1, f"connected to Triton {version}")

        self._run(f"connect to {url}", reach, phase=f"connecting to {url}")

    def stop(self) -> None:
        """Stop the local server in the background (its models are unloaded first); a server
        someone else started is only disconnected from."""
        server = self.server
        if server is None:
            return
        if isinstance(server, RunningServer):
            server.close()
            self.state.server = None
            self.refresh()
            return

        def stop_server(progress, cancel):
            progress(0, 1, "stopping")
            server.stop()
            self._stop_following()
            progress(1, 1, "stopped")

        self._run("stop", stop_server, phase="stopping tritonserver")

    def _model_op(self, op: str) -> None:
        server, name = self.server, self.controls["model"].value.strip()
        if server is None or not name:
            self.controls["error"].value = error_list(["give a model name" if server else "start the server first"])
            return

        def run(progress, cancel):
            progress(0, 1, f"{op} {name}")
            {"load": server.load, "unload": server.unload, "reload": server.reload}[op](name)
            progress(1, 1, f"{op} {name}: done")

        doing = f"{op}ing"  # loading, unloading, reloading
        # while it runs the model's row says so, and the ask area sends nothing to it
        self.index = [
            dict(row_, state=f"{doing.upper()}...") if row_.get("name") == name else row_ for row_ in self.index
        ]
        self.controls["models"].value = models_table_html(self.index)
        self.ask.busy = f"{name} is {doing}: wait until the server tab says it is done"
        step = f"{doing} {name}"
        self._run(f"{op} {name}", run, phase=step)

    # --- models ----------------------------------------------------------------------------------

    def refresh(self) -> list[dict]:
        """Read the repository index from the server and show it; returns the rows."""
        c = self.controls
        server = self.server
        if server is None or not server.running:
            self.index = []
            c["models"].value = ""
            return self.index
        try:
            self.index = server.index()
        except Exception as err:  # the server may be going away; say so rather than raise in a callback
            c["error"].value = error_list([f"cannot read the model index: {err}"])
            return self.index
        if isinstance(server, TritonServer):
            for row_ in self.index:
                ready = row_.get("state") == "READY"
                served = (server.vllm.served(row_["name"]) or server.pytorch.served(row_["name"])) if ready else None
                if served is not None:
                    row_["served_by"] = served.served_as
        names = sorted({row_["name"] for row_ in self.index})
        c["model"].options = names
        c["models"].value = models_table_html(self.index)
        return self.index

    def close(self) -> None:
        """Stop the server now (blocking): for notebook teardown and tests."""
        self._stop_following()
        if isinstance(self.server, TritonServer):
            self.server.stop()
        elif self.server is not None:
            self.server.close()
        self._phase = ""
        self._show()


def pytorch_notice(backend: PyTorchBackend | None) -> str:
    """One line on who serves a PyTorch-backend model on the server the panel started, and why (the
    app and notebook 08 serve it alike: the real backend where a build is found, else the twin)."""
    if backend is not None:
        return (
            f"<i>PyTorch-backend models: Triton's real PyTorch backend at {html.escape(str(backend.backend_dir))}</i>"
        )
    return (
        "<i>PyTorch-backend models: served by the workbench's Python-backend twin, because this machine has no "
        "build of Triton's PyTorch (LibTorch) backend: notebook 08 builds one once (about 2 min, then cached, "
        f"and this tab uses it after a restart), or set ${ENV_VAR} to one</i>"
    )


def model_backend(state: WorkbenchState) -> str:
    """The Triton backend of the current model: its config.pbtxt on disk, else the settings'."""
    try:
        return backend_of_config(read_config(state.model_dir)).name
    except (ConfigError, OSError):
        return state.settings.backend if state.settings is not None else ""


def vllm_notice(server: TritonServer) -> str:
    """One line on who serves vLLM models on the server the panel started, or why nothing can."""
    refusals = server.vllm.refusals()
    if refusals:
        return "<i>vLLM models cannot be served by this server: " + html.escape("; ".join(refusals)) + "</i>"
    assert server.vllm.backend is not None  # refusals() names a missing one
    return f"<i>vLLM models: {html.escape(server.vllm.backend.describe())}</i>"
