"""ipywidgets panels for every workbench step, and the `Workbench` app that composes them.

Each panel is a class with ``widget`` (what to display) and ``controls`` (role name -> control,
for tests and scripting); displaying the panel object displays its widget. Panels share one
`WorkbenchState`. Only this package imports ipywidgets; the logic lives in ``workbench``.
"""

from workbench.ui.app import Workbench
from workbench.ui.model_panel import ModelPanel
from workbench.ui.preview_panel import PreviewPanel
from workbench.ui.results_panel import ResultsPanel
from workbench.ui.server_panel import ServerPanel
from workbench.ui.settings_panel import SettingsPanel
from workbench.ui.shared_state import WorkbenchState
from workbench.ui.sweep_panel import SweepPanel

__all__ = [
    "Workbench",
    "WorkbenchState",
    "ModelPanel",
    "SettingsPanel",
    "PreviewPanel",
    "ServerPanel",
    "SweepPanel",
    "ResultsPanel",
]
