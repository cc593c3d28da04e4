"""The whole workbench in one widget: every panel in a tab, all sharing one `WorkbenchState`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import ipywidgets as widgets

from workbench.ui.model_panel import ModelPanel
from workbench.ui.preview_panel import PreviewPanel
from workbench.ui.results_panel import ResultsPanel
from workbench.ui.server_panel import ServerPanel
from workbench.ui.settings_panel import SettingsPanel
from workbench.ui.state import WorkbenchState
from workbench.ui.sweep_panel import SweepPanel


class Workbench:
    """Model -> settings -> preview -> server -> sweep -> results, as tabs.

    ``Workbench()`` in a notebook cell shows it; ``module=``/``example_inputs=`` offer your own
    ``nn.Module`` in the model tab; ``panels`` maps step names to panels (each has ``controls``).
    """

    def __init__(self, repository: str | Path | None = None, *, module: Any = None, example_inputs: Any = None,
                 system=None) -> None:
        self.state = WorkbenchState(repository if repository is not None else "model_repository")
        self.panels = {
            "model": ModelPanel(self.state, module=module, example_inputs=example_inputs, system=system),
            "settings": SettingsPanel(self.state),
            "preview": PreviewPanel(self.state),
            "server": ServerPanel(self.state),
            "sweep": SweepPanel(self.state),
            "results": ResultsPanel(self.state),
        }
        self.tabs = widgets.Tab(children=[panel.widget for panel in self.panels.values()])
        for index, name in enumerate(self.panels):
            self.tabs.set_title(index, name)
        self.widget = widgets.VBox([
            widgets.HTML(f"<b>Triton + Neuron workbench</b> — repository "
                         f"<code>{self.state.repository.resolve()}</code>"),
            self.tabs,
        ])

    def _repr_mimebundle_(self, **kwargs):
        return self.widget._repr_mimebundle_(**kwargs)

    def __getitem__(self, name: str):
        return self.panels[name]

    def close(self) -> None:
        """Stop the server if one runs (it would also stop when the kernel exits)."""
        self.panels["server"].close()
