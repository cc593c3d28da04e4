"""ipywidgets panels for every workbench step, and the `Workbench` app that composes them.

Each panel is a class with ``widget`` (what to display) and ``controls`` (role name -> control,
for tests and scripting); displaying the panel object displays its widget. Panels share one
`WorkbenchState`. Only this package imports ipywidgets; the logic lives in ``workbench``.
"""

from workbench.ui.state import WorkbenchState

__all__ = ["WorkbenchState"]
