"""Triton's PyTorch (LibTorch) backend as the backend switch sees it (`workbench.generate.backends`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from workbench.generate.config import ModelConfig
from workbench.generate.product import GeneratedModel, ReadBack
from workbench.generate.pytorch_backend.configs import pytorch_problems
from workbench.generate.pytorch_backend.generate import pytorch_settings_problems, render_pytorch
from workbench.generate.pytorch_backend.layout_files import eager_module
from workbench.generate.pytorch_backend.readback import is_pytorch_config, read_back_pytorch
from workbench.generate.settings import GenerateSettings

__all__ = ["PyTorchBackend", "PYTORCH"]


class PyTorchBackend:
    """``backend: "pytorch"``: a TorchScript archive or a PyTorch 2 module, served on the CPU."""

    name = "pytorch"
    label = "PyTorch backend (LibTorch)"
    pins_cores = False  # Triton's PyTorch backend reads no core parameters: instances share the CPUs
    streams_tokens = False  # one response per request: swept in inferences (measure/sweep)
    server_per_instance = False  # one server holds every instance
    # LibTorch serves on this machine's CPU; Neuron models go to the Python backend
    targets: tuple[str, ...] = ("cpu",)
    reads = "Triton's PyTorch backend"
    own_fields: tuple[str, ...] = ("runtime", "state_dict")
    # the model file is always copied into the version folder
    ignored_fields: tuple[str, ...] = ("copy_compiled_model",)

    def validate(self, settings: GenerateSettings) -> list[str]:
        return pytorch_settings_problems(settings).problems

    def render(self, settings: GenerateSettings) -> GeneratedModel:
        return render_pytorch(settings)

    def read_back(self, model_dir: Path, config: ModelConfig) -> ReadBack:
        return read_back_pytorch(model_dir, config)

    def recognises(self, config: ModelConfig) -> bool:
        return is_pytorch_config(config)

    def config_problems(self, config: ModelConfig) -> list[str]:
        return pytorch_problems(config)

    def eager_module(self, model_dir: Path) -> Any:
        """The served module loaded in this process (torch is imported only here)."""
        return eager_module(model_dir)


PYTORCH = PyTorchBackend()
