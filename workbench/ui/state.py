"""The one state object every panel of a `Workbench` shares.

Panels never reach into each other: the model panel sets ``artifact``/``spec``, the settings panel
reads them and publishes ``config``, the preview and server panels follow. Traits make those
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
    target = traitlets.Unicode("cpu", help="cpu, inf1, inf2 or trn1")
    framework = traitlets.Unicode("pytorch")
    repository = traitlets.Instance(Path, help="model repository root")
    module = traitlets.Any(None, allow_none=True, help="the user's nn.Module or zoo module, for eager checks")
    artifact = traitlets.Any(None, allow_none=True, help="compiled model (workbench.compiler Artifact)")
    spec = traitlets.Any(None, allow_none=True, help="ModelSpec of the model's inputs/outputs")
    config = traitlets.Any(None, allow_none=True, help="ModelConfig the settings describe")
    settings = traitlets.Any(None, allow_none=True, help="generation settings the config came from")
    server = traitlets.Any(None, allow_none=True, help="running TritonServer, or None")
    sweep = traitlets.Any(None, allow_none=True, help="last sweep result")

    def __init__(self, repository: str | Path = "model_repository", **kwargs) -> None:
        super().__init__(repository=Path(repository), **kwargs)

    @property
    def model_dir(self) -> Path:
        return self.repository / self.name
