"""Run a local tritonserver on the shared model repository: start/stop, ports, the models and
their states, load/unload/reload, and the server's log as it is written.

Starting, stopping and loading take seconds to minutes, so they run in a worker thread; the log is
followed from the server's own follow thread into a bounded text view (never an ``Output``
context from a thread).
"""

from __future__ import annotations

import html
import threading
from pathlib import Path

import ipywidgets as widgets

from workbench.server import RunningServer, ServerError, TritonServer
from workbench.ui.background import LogView, TaskControls
from workbench.ui.render import error_list
from workbench.ui.state import WorkbenchState

_STATE_COLOURS = {"READY": "#1b5e20", "UNAVAILABLE": "#b00020", "LOADING": "#a05a00", "UNLOADING": "#a05a00"}


def models_table_html(rows: list[dict]) -> str:
    """The repository index as an HTML table (name, version, state, reason)."""
    if not rows:
        return "<i>no models in the repository</i>"
    body = []
    for row in rows:
        state = row.get("state", "")
        colour = _STATE_COLOURS.get(state, "#555")
        body.append(f"<tr><td>{html.escape(row.get('name', ''))}</td><td>{html.escape(row.get('version', ''))}</td>"
                    f"<td style='color:{colour};font-weight:bold'>{html.escape(state or 'not loaded')}</td>"
                    f"<td>{html.escape(row.get('reason', ''))}</td></tr>")
    return ("<table><tr><th style='text-align:left'>model</th><th>version</th><th>state</th>"
            f"<th style='text-align:left'>reason</th></tr>{''.join(body)}</table>")


class ServerPanel:
    """Controls for ``state.server``. ``load_on_start`` loads the current model right after the
    server is ready, so one click takes a generated directory to READY."""

    def __init__(self, state: WorkbenchState | None = None) -> None:
        self.state = state if state is not None else WorkbenchState()
        self._log_stop: threading.Event | None = None
        self._remote_version = "?"
        self.index: list[dict] = []
        c = self.controls = {}
        self.ops = TaskControls("start server", run_tooltip="start tritonserver on this repository",
                                run_enabled=lambda: not (self.server is not None and self.server.running))
        c["start"], c["cancel"], c["progress"], c["status"] = (self.ops.run_button, self.ops.cancel_button,
                                                               self.ops.progress, self.ops.status)
        c["stop"] = widgets.Button(description="stop server", icon="power-off", disabled=True)
        c["load_on_start"] = widgets.Checkbox(value=True, description="load the current model on start", indent=False)
        c["server_info"] = widgets.HTML("<i>not running</i>")
        c["model"] = widgets.Combobox(value=self.state.name, placeholder="model name", description="model",
                                      ensure_option=False)
        c["load"] = widgets.Button(description="load", icon="upload", disabled=True)
        c["unload"] = widgets.Button(description="unload", icon="eject", disabled=True)
        c["reload"] = widgets.Button(description="reload", icon="refresh", disabled=True,
                                     tooltip="load again from disk (after writing a new version of the directory)")
        c["refresh"] = widgets.Button(description="refresh", icon="sync", disabled=True)
        c["url"] = widgets.Text(placeholder="grpc://host:8001 or http://host:8000", description="remote URL")
        c["connect"] = widgets.Button(description="connect", icon="plug",
                                      tooltip="use a tritonserver someone else runs (explicit model control)")
        c["models"] = widgets.HTML()
        c["notice"] = widgets.HTML()
        c["error"] = widgets.HTML()
        self.log = LogView(rows=12, placeholder="server log")
        c["log"] = self.log.widget
        c["start"].on_click(lambda _b: self.start())
        c["stop"].on_click(lambda _b: self.stop())
        c["load"].on_click(lambda _b: self._model_op("load"))
        c["unload"].on_click(lambda _b: self._model_op("unload"))
        c["reload"].on_click(lambda _b: self._model_op("reload"))
        c["refresh"].on_click(lambda _b: self.refresh())
        c["connect"].on_click(lambda _b: self.connect(c["url"].value))
        self.state.observe(lambda change: setattr(c["model"], "value", change["new"]), names="name")
        # a server started in code (app.state.server = TritonServer(...).start()) is shown too
        self.state.observe(lambda change: self._show_running(change["new"] is not None and change["new"].running),
                           names="server")
        self.state.observe(self._rewritten, names="written")
        self.widget = widgets.VBox([
            widgets.HBox([self.ops.widget, c["stop"]]), c["load_on_start"], widgets.HBox([c["url"], c["connect"]]),
            c["server_info"],
            widgets.HBox([c["model"], c["load"], c["unload"], c["reload"], c["refresh"]]),
            c["models"], c["notice"], c["error"], c["log"],
        ])
        self._show_running(self.state.server is not None and self.state.server.running)

    def _repr_mimebundle_(self, **kwargs):
        return self.widget._repr_mimebundle_(**kwargs)

    @property
    def server(self) -> TritonServer | None:
        return self.state.server

    def _show_running(self, running: bool) -> None:
        c = self.controls
        c["start"].disabled = running or self.ops.running
        c["stop"].disabled = not running
        for key in ("load", "unload", "reload", "refresh"):
            c[key].disabled = not running
        server = self.server
        c["connect"].disabled = running and not isinstance(server, RunningServer)
        c["stop"].description = "disconnect" if isinstance(server, RunningServer) else "stop server"
        if running and isinstance(server, RunningServer):
            c["server_info"].value = (f"<b style='color:#1b5e20'>connected</b> to Triton "
                                      f"{html.escape(self._remote_version)} at {html.escape(server.protocol)}://"
                                      f"{html.escape(server.url)} (someone else's server: it is never stopped here)")
        elif running and server is not None:
            ports = ", ".join(f"{k} {v}" for k, v in server.ports.items())
            try:
                version = server.version
            except Exception:  # metadata not reachable yet; the port line is what matters
                version = "?"
            c["server_info"].value = (f"<b style='color:#1b5e20'>running</b> pid {server.pid}, Triton "
                                      f"{html.escape(str(version))}; {ports}; "
                                      f"repository {html.escape(str(server.model_repository))}")
        else:
            c["server_info"].value = "<i>not running</i>"

    def _rewritten(self, change) -> None:
        """A model directory was written while serving: Triton keeps the old one until a reload."""
        name = change["new"].path.name if change["new"] is not None else ""
        loaded = any(row["name"] == name and row["state"] == "READY" for row in self.index)
        if loaded and self.server is not None and self.server.running:
            self.controls["model"].value = name
            self.controls["notice"].value = (f"<div style='color:#a05a00'>{html.escape(name)} was rewritten on disk; "
                                             "the server still serves the old version until you click reload</div>")

    def _run(self, label: str, fn) -> None:
        """Run ``fn(progress, cancel)`` as the panel's one background operation."""
        c = self.controls
        c["error"].value = c["notice"].value = ""
        for key in ("load", "unload", "reload", "refresh", "stop"):
            c[key].disabled = True

        def work(*, progress, cancel):
            return fn(progress, cancel)

        def done(task) -> None:
            if task.state == "failed":
                c["error"].value = error_list([f"{label} failed: {task.error}"])
            self.refresh()
            self._show_running(self.server is not None and self.server.running)

        self.ops.start(work, on_done=done)

    # --- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        """Start a server on ``state.repository`` (created when missing), then load the current model."""
        if self.server is not None and self.server.running:
            return
        repository = Path(self.state.repository)
        repository.mkdir(parents=True, exist_ok=True)
        try:
            server = TritonServer(repository)
        except (ServerError, OSError, ValueError) as err:
            self.controls["error"].value = error_list([f"cannot start: {err}"])
            return
        self.state.server = server
        self.log.clear()

        def start_and_load(progress, cancel):
            server.start(progress=progress, cancel=cancel)
            self._log_stop = server.follow_log_in_thread(self.log.append, from_start=True)
            name = self.state.name
            if self.controls["load_on_start"].value and (repository / name / "config.pbtxt").is_file():
                progress(0, 1, f"loading {name}")
                server.load(name)
                progress(1, 1, f"{name} loaded")

        self._run("start", start_and_load)

    def connect(self, url: str) -> None:
        """Use the server at ``url`` (see `RunningServer`): load, unload and the sweep then act on it,
        and "disconnect" only forgets it. Refused while this panel's own server runs."""
        if self.server is not None and self.server.running and not isinstance(self.server, RunningServer):
            self.controls["error"].value = error_list(["stop the local server before connecting to another"])
            return
        try:
            remote = RunningServer(url.strip())
        except (ValueError, OSError) as err:
            self.controls["error"].value = error_list([f"cannot connect: {err}"])
            return

        def reach(progress, cancel):
            progress(0, 1, f"connecting to {remote.url}")
            self._remote_version = remote.version  # unreachable: the task fails and says why
            self.state.server = remote
            progress(1, 1, f"connected to Triton {self._remote_version}")

        self._run(f"connect to {url}", reach)

    def stop(self) -> None:
        """Stop the server in the background (its models are unloaded first); a remote one is only
        forgotten."""
        server = self.server
        if server is None:
            return
        if isinstance(server, RunningServer):
            server.close()
            self.state.server = None
            return

        def stop_server(progress, cancel):
            progress(0, 1, "stopping")
            server.stop()
            if self._log_stop is not None:
                self._log_stop.set()
            progress(1, 1, "stopped")

        self._run("stop", stop_server)

    def _model_op(self, op: str) -> None:
        server, name = self.server, self.controls["model"].value.strip()
        if server is None or not name:
            self.controls["error"].value = error_list(["give a model name" if server else "start the server first"])
            return

        def run(progress, cancel):
            progress(0, 1, f"{op} {name}")
            getattr(server, op)(name)
            progress(1, 1, f"{op} {name}: done")

        self._run(f"{op} {name}", run)

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
        names = sorted({row["name"] for row in self.index})
        c["model"].options = names
        c["models"].value = models_table_html(self.index)
        return self.index

    def close(self) -> None:
        """Stop the server now (blocking): for notebook teardown and tests."""
        if self._log_stop is not None:
            self._log_stop.set()
        if isinstance(self.server, RunningServer):
            self.server.close()
        elif self.server is not None:
            self.server.stop()
        self._show_running(False)
