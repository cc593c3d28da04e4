"""The generate wing's public API: settings -> a Triton model directory, with gen_triton_model.py parity.

Upstream's generator accepted anything, crashed on ``--model_version`` other than 1 and left
half-written folders. Here every flag keeps its upstream spelling and meaning, the settings are
checked as a whole before anything is written, the result can be previewed (files, per-instance
core map) and diffed against disk, and an existing directory -- ours, upstream's or hand-written --
can be read back and regenerated with nothing lost; a write that would change a directory shows
its changes (`changes`) and needs them confirmed (``write(generated, confirm=changes)``).

Modules, one concern each:

* `settings`: `GenerateSettings` (every upstream flag plus ours) and `GenerateError`;
* `backends`: the backend switch -- `BACKENDS`, the `Backend` protocol, and the public calls
  (`validate`, `render`, `write`, `diff`, `changes`, `read_back`), the same for every backend;
* `product`: what every backend makes, `GeneratedModel` and `ReadBack`;
* `python_backend/`: config.pbtxt (and ``configs/<name>.pbtxt`` variants) + the one model.py
  (``templates/python_model.py``), its read-back, recognising upstream's model.py variants;
* `pytorch_backend/`: the same for Triton's PyTorch (LibTorch) backend;
* `vllm_backend/`: Triton's vLLM backend (config.pbtxt + ``1/model.json`` of vLLM engine arguments);
* `checks`: the plan that collects every problem before anything is written (the Python backend's,
  and the pieces both backends use: tensors, batching, variants);
* `options`: the Triton config fields users tune (queue policies, rate limiter, warm-up ...), typed,
  and `rules`, Triton's rules for them; `preserve`: what read-back keeps that the settings do not model;
* `cli`: the ``workbench generate`` command;
* `config` and `repository`: what every backend shares (the ModelConfig protobuf, atomic writes).

Adding a backend = one package + one entry in `backends.BACKENDS`: a sibling package
(``generate/<name>_backend/``) exposing an object that satisfies `backends.Backend` (name, label,
targets, own_fields, validate, render, read_back, recognises, config_problems, eager_module),
building `product.GeneratedModel` / `product.ReadBack`. Settings only it reads go in its own typed
dataclass carried as ``GenerateSettings.backend_settings``, not as new GenerateSettings fields.
How a local server serves it (finding the backend's files, loading it) belongs in `workbench.server`.
"""

from __future__ import annotations

from workbench.generate.backends import BACKENDS, changes, diff, load_settings, read_back, render, validate, write
from workbench.generate.options import QueuePolicy, RateLimiter, RateLimiterResource, VersionPolicy, Warmup, WarmupInput
from workbench.generate.product import GeneratedModel, ReadBack
from workbench.generate.repository import Changes
from workbench.generate.settings import GenerateError, GenerateSettings, default_target

__all__ = [
    "BACKENDS",
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
]
