"""Triton's PyTorch backend: config.pbtxt for its two layouts, and how to serve them on this machine.

Two layouts share ``backend: "pytorch"``:

* **TorchScript** (LibTorch runtime): ``<name>/<v>/model.pt`` is a TorchScript archive; generated
  configs name tensors ``NAME__i`` (the index is the position in ``forward``; LibTorch also takes
  forward-argument names or config order, which read-back accepts); the parameters are the LibTorch
  switches (``DISABLE_OPTIMIZED_EXECUTION``, ``INFERENCE_MODE``, thread counts, JIT flags...).
* **PyTorch 2** (``runtime: "model.py"``): ``<name>/<v>/model.py`` holds a ``torch.nn.Module`` class,
  ``<name>/<v>/model.pt`` optionally its state dict; the parameters are ``NUM_THREADS``,
  ``NUM_INTEROP_THREADS`` and ``TORCH_COMPILE_OPTIONAL_PARAMETERS`` (JSON for ``torch.compile``).

Modules, one concern each: `layouts` (the layouts and the parameters each reads), `configs`
(build and check a config), `files` (the layouts on disk), `backend` (``PYTORCH``, this
backend's entry in the switch, `workbench.generate.backends`), `real_backend` (what the real r24.10
backend does process-wide and what it misserves), `serving` (the real backend or the
Python-backend twin), `sweep` (parameter grids), `generate` (settings -> the files), `readback` (a directory -> the
settings). Finding a server's PyTorch backend and loading models on it is `workbench.server.pytorch`. What this path shares with the Python backend's
lives once in `workbench.generate.config` (the ModelConfig, parameter strings) and
`workbench.generate.repository` (atomic writes, version folders).
"""

from __future__ import annotations

from workbench.generate.config import ModelConfig
from workbench.generate.pytorch_backend.backend import PYTORCH, PyTorchBackend
from workbench.generate.pytorch_backend.configs import (
    INSTANCE_KINDS,
    build_pytorch_config,
    check_pytorch_config,
    pytorch_problems,
)
from workbench.generate.pytorch_backend.layout_files import (
    eager_module,
    load_pytorch2_module,
    pytorch2_files,
    torchscript_files,
    write_pytorch2_model,
    write_torchscript_model,
)
from workbench.generate.pytorch_backend.layouts import (
    PYTORCH2,
    PYTORCH2_PARAMETERS,
    TORCH_COMPILE_KEYS,
    TORCHSCRIPT,
    TORCHSCRIPT_PARAMETERS,
    Parameter,
    PyTorchConfigError,
    layout_of,
    parse_torch_compile_parameters,
)
from workbench.generate.pytorch_backend.serving import (
    RUNTIME_TEMPLATE,
    SERVED_AS_LIBTORCH,
    SERVED_AS_PYTHON,
    ServingPlan,
    ServingPreview,
    Twin,
    emulation_config,
    libtorch_layouts,
    plan_serving,
    preview_serving,
    pytorch2_module_file,
    twin_of,
    write_emulation_twin,
)
from workbench.generate.pytorch_backend.sweep import SWEEP_SETTINGS, sweep_grid, sweep_variant, variant_label

__all__ = [
    "PYTORCH",
    "PyTorchBackend",
    "ModelConfig",
    "PyTorchConfigError",
    "TORCHSCRIPT",
    "PYTORCH2",
    "SERVED_AS_LIBTORCH",
    "SERVED_AS_PYTHON",
    "RUNTIME_TEMPLATE",
    "INSTANCE_KINDS",
    "Parameter",
    "TORCHSCRIPT_PARAMETERS",
    "PYTORCH2_PARAMETERS",
    "TORCH_COMPILE_KEYS",
    "SWEEP_SETTINGS",
    "layout_of",
    "build_pytorch_config",
    "pytorch_problems",
    "check_pytorch_config",
    "parse_torch_compile_parameters",
    "torchscript_files",
    "write_torchscript_model",
    "pytorch2_files",
    "write_pytorch2_model",
    "load_pytorch2_module",
    "eager_module",
    "libtorch_layouts",
    "pytorch2_module_file",
    "emulation_config",
    "Twin",
    "twin_of",
    "write_emulation_twin",
    "ServingPreview",
    "preview_serving",
    "ServingPlan",
    "plan_serving",
    "sweep_variant",
    "sweep_grid",
    "variant_label",
]
