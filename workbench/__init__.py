"""Triton + Neuron workbench: compile models for AWS Inferentia/Trainium (or the CPU), generate
Triton model directories, serve them on a local tritonserver and sweep batch sizes x core
allocations, from plain Python or from notebook widgets.

The names below are the ones a notebook needs; each lives in the module of its concern
(docs/ARCHITECTURE.md). Heavy modules (torch, tritonclient) load on first use, not at import.
"""

from __future__ import annotations

from workbench.coremap import Allocation, CoreMap, CoreRange, CoreRangeError, split_cores
from workbench.figures_inline import register as _show_figures_inline
from workbench.lazy import lazy_getattr
from workbench.spec import ModelSpec, SpecError, TensorSpec

__version__ = "0.1.0"

# public name -> (module, attribute); resolved lazily so `import workbench` stays light
_LAZY = {
    "compile": ("workbench.compiler", "compile_model"),
    "detect": ("workbench.compiler", "detect"),
    "GenerateSettings": ("workbench.generate", "GenerateSettings"),
    "render": ("workbench.generate", "render"),
    "write": ("workbench.generate", "write"),
    "load_settings": ("workbench.generate", "load_settings"),
    "TritonServer": ("workbench.server", "TritonServer"),
    "RunningServer": ("workbench.server", "RunningServer"),
    "ClientOptions": ("workbench.server", "ClientOptions"),
    "push_repository": ("workbench.generate.push", "push_repository"),
    "check_served": ("workbench.served_outputs", "check_served"),
    "MeasureSettings": ("workbench.measure.engine.measure_settings", "MeasureSettings"),
    "SweepPlan": ("workbench.measure.grid.plan", "SweepPlan"),
    "run_sweep": ("workbench.measure.sweep", "run_sweep"),
    "load_run": ("workbench.measure.store.results", "load_run"),
    "compare_runs": ("workbench.measure.store.results", "compare_runs"),
    "save_report": ("workbench.report.html", "save_report"),
}

__all__ = [
    "ModelSpec",
    "TensorSpec",
    "SpecError",
    "CoreRange",
    "Allocation",
    "CoreMap",
    "CoreRangeError",
    "split_cores",
    *_LAZY,
]


__getattr__ = lazy_getattr(__name__, _LAZY, globals())
_show_figures_inline()  # in a notebook, the figures the workbench returns show as images
