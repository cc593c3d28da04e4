"""The generate wing's public API: settings -> a Triton model directory, with gen_triton_model.py parity.

Upstream's generator accepted anything, crashed on ``--model_version`` other than 1 and left
half-written folders. Here every flag keeps its upstream spelling and meaning, the settings are
checked as a whole before anything is written, the result can be previewed (files, per-instance
core map) and diffed against disk, and an existing directory -- ours, upstream's or hand-written --
can be read back and regenerated.

Modules, one concern each:

* `settings`: `GenerateSettings` (every upstream flag plus ours) and `GenerateError`;
* `checks`: the plan that collects every problem before anything is written;
* `python_backend`: config.pbtxt + the one model.py (``templates/python_model.py``), `write`, `diff`;
* `readback`: a model directory -> the settings that regenerate it;
* `cli`: the ``workbench generate`` command;
* `pytorch_backend/`: the same for Triton's PyTorch (LibTorch) backend, beside the Python backend;
* `config` and `repository`: what both paths share (the ModelConfig protobuf, atomic writes).
"""

from __future__ import annotations

from workbench.generate.checks import validate
from workbench.generate.cli import register
from workbench.generate.python_backend import GeneratedModel, diff, render, write
from workbench.generate.readback import load_settings
from workbench.generate.settings import GenerateError, GenerateSettings, default_target

__all__ = [
    "GenerateError",
    "GenerateSettings",
    "GeneratedModel",
    "default_target",
    "validate",
    "render",
    "write",
    "diff",
    "load_settings",
    "register",
]
