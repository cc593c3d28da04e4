"""The whole workbench in one widget: every panel in a tab, all sharing one `WorkbenchState`."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

import ipywidgets as widgets

from workbench.generate.backends import backend_of
from workbench.ui.llm_sweep_panel import LlmSweepPanel
from workbench.ui.model_panel import ModelPanel
from workbench.ui.preview_panel import PreviewPanel
from workbench.ui.results_panel import ResultsPanel
from workbench.ui.server_panel import ServerPanel
from workbench.ui.settings_panel import SettingsPanel
from workbench.ui.shared_state import WorkbenchState
from workbench.ui.sweep_panel import SweepPanel


class Panel(Protocol):
    """What the app reads of a panel: the widget its tab shows."""

    widget: Any  # an ipywidgets container


class Workbench:
    """Model -> settings -> preview -> server -> sweep -> results, as tabs.

    ``Workbench()`` in a notebook cell shows it; ``module=``/``example_inputs=`` offer your own
    ``nn.Module`` in the model tab; ``panels`` maps step names to panels (each has ``controls``).
    """

    def __init__(
        self, repository: str | Path | None = None, *, module: Any = None, example_inputs: Any = None, system=None
    ) -> None:
        self.state = WorkbenchState(repository if repository is not None else "model_repository")
        # made in tab order: each observes the state as it is made
        model = ModelPanel(self.state, module=module, example_inputs=example_inputs, system=system)
        settings, preview = SettingsPanel(self.state), PreviewPanel(self.state)
        self._server = ServerPanel(self.state)
        self.panels: dict[str, Panel] = {
            "model": model,
            "settings": settings,
            "preview": preview,
            "server": self._server,
            "sweep": SweepPanel(self.state),
            "llm sweep": LlmSweepPanel(self.state),
            "results": ResultsPanel(self.state),
        }
        self.sweep_tab = widgets.VBox([self.panels["sweep"].widget])
        tabs = {name: panel.widget for name, panel in self.panels.items() if name != "llm sweep"}
        tabs["sweep"] = self.sweep_tab
        self.tabs = widgets.Tab(children=list(tabs.values()))
        for index, name in enumerate(tabs):
            self.tabs.set_title(index, name)
        self.state.observe(lambda _change: self._show_sweep(), names="settings")
        self.widget = widgets.VBox(
            [
                widgets.HTML(
                    f"<b>Triton + Neuron workbench</b> — repository <code>{self.state.repository.resolve()}</code>"
                ),
                self.tabs,
            ]
        )

    def _show_sweep(self) -> None:
        """The sweep for the backend of the settings (kept while the settings are invalid)."""
        if self.state.settings is None:
            return
        name = "llm sweep" if backend_of(self.state.settings).streams_tokens else "sweep"
        if self.sweep_tab.children != (self.panels[name].widget,):
            self.sweep_tab.children = (self.panels[name].widget,)

    def _repr_mimebundle_(self, **kwargs):
        return self.widget._repr_mimebundle_(**kwargs)

    def __getitem__(self, name: str):
        return self.panels[name]

    def close(self) -> None:
        """Stop the server if one runs (it would also stop when the kernel exits)."""
        self._server.close()
