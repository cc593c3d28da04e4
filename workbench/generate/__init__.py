"""The generate wing's public API: settings -> a Triton model directory, with gen_triton_model.py parity.

Upstream's generator accepted anything, crashed on ``--model_version`` other than 1 and left
half-written folders. Here every flag keeps its upstream spelling and meaning, the settings are
checked as a whole before anything is written, the result can be previewed (files, per-instance
core map) and diffed against disk, and an existing directory -- ours, upstream's or hand-written --
can be read back and regenerated with nothing lost; a write that would change a directory shows
its changes (`changes`) and needs them confirmed (``write(generated, confirm=changes)``).

Modules, one concern each:

* `settings`: `GenerateSettings` (every upstream flag plus ours) and `GenerateError`;
* `checks`: the plan that collects every problem before anything is written;
* `python_backend`: config.pbtxt (and ``configs/<name>.pbtxt`` variants) + the one model.py
  (``templates/python_model.py``), `write`, `diff`, `changes`;
* `readback`: a model directory -> the settings that regenerate it, keeping what they do not model
  (`preserve`) and recognising upstream's model.py variants (`upstream`);
* `options`: the Triton config fields users tune (queue policies, rate limiter, warm-up ...), typed,
  and `rules`, Triton's rules for them;
* `cli`: the ``workbench generate`` command;
* `pytorch_backend/`: the same for Triton's PyTorch (LibTorch) backend, beside the Python backend;
* `config` and `repository`: what both paths share (the ModelConfig protobuf, atomic writes).
"""

from __future__ import annotations

from workbench.generate.checks import validate
from workbench.generate.cli import register
from workbench.generate.options import QueuePolicy, RateLimiter, RateLimiterResource, VersionPolicy, Warmup, WarmupInput
from workbench.generate.python_backend import GeneratedModel, changes, diff, render, write
from workbench.generate.readback import ReadBack, load_settings, read_back
from workbench.generate.repository import Changes
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
    "changes",
    "Changes",
    "load_settings",
    "read_back",
    "ReadBack",
    "QueuePolicy",
    "RateLimiter",
    "RateLimiterResource",
    "VersionPolicy",
    "Warmup",
    "WarmupInput",
    "register",
]
