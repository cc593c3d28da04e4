"""Triton's Python backend: config.pbtxt + the one model.py (`templates/python_model.py`), every target.

Modules: `render` (settings -> the files, from the plan `workbench.generate.settings_checks` makes),
`readback` (a directory -> the settings, for ours, upstream's and hand-written ones) and
`upstream` (recognising upstream gen_triton_model.py's model.py variants). `PYTHON` is this
backend's entry in the switch (`workbench.generate.backends`).
"""

from __future__ import annotations

from pathlib import Path

from workbench.generate.config import ModelConfig
from workbench.generate.product import GeneratedModel, ReadBack
from workbench.generate.python_backend import readback
from workbench.generate.python_backend.render import model_py_text, render
from workbench.generate.settings import GenerateSettings
from workbench.generate.settings_checks import make_plan
from workbench.system import TARGETS

__all__ = ["PythonBackend", "PYTHON", "model_py_text"]


class PythonBackend:
    """``backend: "python"``: the generated model.py loads the compiled model on the CPU or Neuron."""

    name = "python"
    label = "Python backend (model.py)"
    pins_cores = True  # model.py places each instance on the cores its parameters name
    streams_tokens = False  # one response per request: swept in inferences (measure/sweep)
    server_per_instance = False  # one server holds every instance, each pinned by model.py
    targets: tuple[str, ...] = TARGETS
    reads = "the Python backend's model.py"
    # read by model.py only (a hand-written model.py, compiled-model placement, cores, transformers-neuronx);
    # ``copy_compiled_model`` is moot elsewhere: the PyTorch backend always copies the model file
    own_fields: tuple[str, ...] = (
        "neuron_core_range",
        "threads_per_core",
        "disable_batch_requests_to_neuron",
        "cpu_affinity",
        "for_other_machine",
        "model_py",
        "compiled_model_base",
        "tnx_model_class",
        "tnx_batch_size",
        "tnx_tp_degree",
        "tnx_n_positions",
        "tnx_amp",
        "tnx_unroll",
        "tnx_sequence_length",
        "tnx_compiled_dir",
        "decoupled",
    )
    ignored_fields: tuple[str, ...] = ()

    def validate(self, settings: GenerateSettings) -> list[str]:
        return make_plan(settings).problems

    def render(self, settings: GenerateSettings) -> GeneratedModel:
        return render(settings)

    def read_back(self, model_dir: Path, config: ModelConfig) -> ReadBack:
        return readback.read_back(model_dir, config)

    def recognises(self, config: ModelConfig) -> bool:
        return config.backend == "python"

    def config_problems(self, config: ModelConfig) -> list[str]:
        return []  # validate_config, which every config gets, holds model.py's rules

    def eager_module(self, model_dir: Path) -> None:
        return None  # the reference is the compiled model COMPILED_MODEL names (workbench.served_outputs)


PYTHON = PythonBackend()
