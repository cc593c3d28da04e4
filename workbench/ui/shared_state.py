"""The one state object every panel of a `Workbench` shares.

Panels never reach into each other: the model panel sets ``artifact`` (or ``model_file``), the
settings panel reads it and publishes ``settings`` and ``generated``, the preview and server panels
follow. Traits make those
hand-offs observable, so a panel used alone behaves the same as inside the app.
"""

from __future__ import annotations

from pathlib import Path

import traitlets


class WorkbenchState(traitlets.HasTraits):
    """What the user has built so far; every trait is observable by any panel.

    ``repository`` is the model repository root the preview writes into and the server serves.
    """

    name = traitlets.Unicode("model", help="model name = directory name in the repository")
    target = traitlets.Unicode("cpu", help="cpu, inf1, inf2, trn1 or trn2")
    framework = traitlets.Unicode("pytorch")
    repository = traitlets.Instance(Path, help="model repository root")
    module = traitlets.Any(None, allow_none=True, help="the user's nn.Module or zoo module, for eager checks")
    artifact = traitlets.Any(None, allow_none=True, help="compiled model (workbench.compiler Artifact)")
    model_file = traitlets.Unicode("", help="a model file picked by path instead of compiled here")
    settings = traitlets.Any(None, allow_none=True, help="valid GenerateSettings, or None while invalid")
    settings_problems = traitlets.List(traitlets.Unicode(), help="why settings is None (one message each)")
    generated = traitlets.Any(None, allow_none=True, help="GeneratedModel rendered from the settings")
    written = traitlets.Any(None, allow_none=True, help="WriteResult of the last model directory written")
    server = traitlets.Any(None, allow_none=True, help="running TritonServer, or None")
    sweep = traitlets.Any(None, allow_none=True, help="last sweep result")

    def __init__(self, repository: str | Path = "model_repository", **kwargs) -> None:
        super().__init__(repository=Path(repository), **kwargs)

    @property
    def model_dir(self) -> Path:
        return self.repository / self.name
