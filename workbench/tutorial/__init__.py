"""What the tutorial notebooks share, so each notebook stays a few calls per cell. It holds no rule of
its own: target choice and output tolerances are `workbench.targets`', generation, serving and
measuring are the wings' own calls; this package gathers them under the names the notebooks use.

* `choose_target` (`workbench.targets`): the notebook asks for a Neuron target; this machine may
  have the SDK and a device, the SDK alone, or neither. The choice says which target to compile for
  and which to serve on, its output tolerances, and says plainly when the same steps run on the
  CPU, so no CPU number passes for a Neuron one.
* `workspace`: a fresh folder per notebook run, its saved sweeps (`saved_runs`, `runs_table`,
  `comparable_pair`, `make_example_runs`) and `describe_run`.
* `examples`: `for_neuron_host` (the same model directory for the Neuron host), `progress_bar`,
  `allocations`, a TensorFlow SavedModel and its reference, greedy generation.
* `backends`: notebook 08's steps, one model generated for both Triton backends.
* `llm`: notebook 09's steps, the tiny LLM through Triton's vLLM backend: what serves it here (or
  why nothing does), its settings per target, the model.json table with the Neuron keys' sources.
"""

from __future__ import annotations

from workbench.targets import TargetChoice, choose_target
from workbench.tutorial.examples import (
    allocations,
    for_neuron_host,
    greedy_generate,
    progress_bar,
    saved_model_reference,
    tiny_saved_model,
)
from workbench.tutorial.workspace import (
    RUNS_ENV,
    Workspace,
    comparable_pair,
    describe_run,
    make_example_runs,
    runs_root,
    runs_table,
    saved_runs,
    workspace,
)

__all__ = [
    "RUNS_ENV",
    "Workspace",
    "TargetChoice",
    "runs_root",
    "workspace",
    "saved_runs",
    "runs_table",
    "comparable_pair",
    "describe_run",
    "choose_target",
    "for_neuron_host",
    "progress_bar",
    "allocations",
    "tiny_saved_model",
    "saved_model_reference",
    "greedy_generate",
    "make_example_runs",
]
