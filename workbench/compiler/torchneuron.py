"""Trn2/Trn3 through TorchNeuron, the native PyTorch backend (``torch-neuronx`` 2.13.x/2.14.x).

From Neuron 2.34.0 the PyTorch/XLA ``torch_neuronx.trace`` is no longer supported for inference on
Trn2 and Trn3: "use TorchNeuron, the native PyTorch backend, in eager mode or with
torch.compile(backend="neuron")" (DOCS about-neuron/announcements/neuron2.x/
announce-no-support-torch-xla-inference-trn.html). TorchNeuron compiles just in time: "the first
call with a given input signature triggers compilation ... later calls with the same shapes and
dtypes reuse the compiled NEFF", dynamic shapes are unsupported (``dynamic=True`` is rejected, each
new shape recompiles) and ``fullgraph=True`` is recommended (DOCS torch/compile/
how-to-optimize-with-torch-compile.html, reference-torch-compile.html). Its API reference lists
no ``trace``, ``dynamic_batch``, ``DataParallel`` or ``analyze`` (DOCS torch/reference/api/index.html;
the audit's inference, not checked against a wheel).

So the artifact for trn2/trn3 is the model as a ``torch.export`` program (portable, loadable
without the workbench), which model.py moves to the Neuron device and wraps in
``torch.compile(backend="neuron", fullgraph=True, dynamic=False)``. `workbench.compiler.neuron.
compile_neuron` runs the steps; these are the TorchNeuron parts. With a device here the compile
also runs that call once on the example inputs, which compiles the example shape's NEFF into
TorchNeuron's persistent cache (TORCH_NEURONX_NEFF_CACHE_DIR, DOCS compiler/about-compiler-artifacts
.html); without one nothing Neuron runs here and the first request of each shape compiles on the
Trn host.

TorchNeuron also documents a compile-only mode, NEFFs made without a Trainium device (DOCS
torch/compile/about-torch-compile.rst: its description lists "compile-only mode"). The section's text
could not be read for this change (the docs search returns the page's opening only; the SDK git
snapshot @81ce03ae predates the page), so its switch, and what it accepts and refuses, are UNVERIFIED:
`COMPILE_ONLY_DOC` is the page to read. Until then a device-less trn2/trn3 compile exports only and
says so (`COMPILE_ONLY_UNVERIFIED`), as the 2.32 FAQ has it ("Can I compile my model using
torch.compile on a compute instance without Trainium hardware? No. ... Future releases will support
compilation on non-Trainium instances": SDK @81ce03ae frameworks/torch/pytorch-native-overview.rst:203-205). For a vLLM Neuron LLM directory the CPU compile is documented and
offered: `workbench.generate.vllm_backend.cpu_compile`.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from workbench.compiler.artifact import atomic_write
from workbench.compiler.cpu import CompileError

__all__ = [
    "ARTIFACT_FORMAT",
    "COMPILE_ONLY_DOC",
    "COMPILE_ONLY_UNVERIFIED",
    "DEVICE",
    "LNC_FLAGS",
    "check_compiler_args",
    "export_program",
    "save_program",
    "neuron_compile",
    "device_compile",
]

ARTIFACT_FORMAT = "torch.export"  # Artifact.extra["format"]: model.py and load_artifact read it
# TorchNeuron's device: "change the device placement from cuda to neuron" (DOCS torch/index.rst)
DEVICE = "neuron"
# neuronx-cc spellings of the logical NeuronCore config flag (SDK neuronx-cc CLI reference :60
# ``--logical-nc-config``/``-lnc``; ``--lnc`` as in the NCC_EARG001 example)
LNC_FLAGS = ("--logical-nc-config", "-lnc", "--lnc")
# UNVERIFIED: TorchNeuron's compile-only mode (see the module docstring); nothing here sets it.
COMPILE_ONLY_DOC = "https://awsdocs-neuron.readthedocs-hosted.com/en/latest/torch/compile/about-torch-compile.html"
COMPILE_ONLY_UNVERIFIED = (
    f"TorchNeuron's compile-only mode is UNVERIFIED here (its switch is on {COMPILE_ONLY_DOC}, "
    "section not read), so no NEFF is made without a device"
)
Log = Callable[[str], None]


def check_compiler_args(args: Sequence[str]) -> list[str]:
    """The compiler args a TorchNeuron compile passes on: none. The LNC flag is allowed (checked by
    the caller; TorchNeuron takes LNC from the node's NEURON_LOGICAL_NC_CONFIG, not from a flag),
    anything else is refused: ``torch.compile(backend="neuron")`` takes no neuronx-cc flags from the
    workbench (its options dict reads only a few keys: DOCS torch/compile/reference-torch-compile.html)."""
    other, skip = [], False
    for arg in args:
        if skip:
            skip = False
        elif arg in LNC_FLAGS:
            skip = True
        elif not any(arg.startswith(flag + "=") for flag in LNC_FLAGS):
            other.append(arg)
    if other:
        raise CompileError(
            f'compiler args {other}: TorchNeuron compiles through torch.compile(backend="neuron"), '
            "which takes no neuronx-cc flags from the workbench (its options dict reads only a few "
            "keys: DOCS torch/compile/reference-torch-compile.html); leave them out"
        )
    return []


def export_program(model: Any, inputs: tuple, dynamic: bool, log: Log) -> tuple[Any, bool]:
    """``torch.export.export`` of ``model`` at ``inputs``, with dim 0 of every input dynamic when
    ``dynamic`` (falling back to fixed shapes, said in the log, when the model specializes on its
    batch size). Returns the program and whether dim 0 stayed dynamic."""
    import torch

    if dynamic:
        batch = torch.export.Dim("batch")
        try:
            shapes = tuple({0: batch} for _ in inputs)
            return torch.export.export(model, inputs, dynamic_shapes=shapes), True
        except Exception as err:  # torch raises several types for a constrained dim
            log(
                f"WARNING the batch dim cannot be exported as dynamic ({type(err).__name__}: "
                f"{str(err).splitlines()[0] if str(err) else ''}); exporting the example's batch size only"
            )
    return torch.export.export(model, inputs), False


def save_program(model: Any, inputs: tuple, dynamic: bool, path: Path, target: str, log: Log) -> tuple[Any, bool]:
    """Export ``model`` (in eval mode, without gradients) and write the program to ``path``
    atomically; returns the program and whether its batch dim is dynamic."""
    import torch

    was_training = getattr(model, "training", False)
    model.eval()
    try:
        with torch.no_grad():
            program, exported_dynamic = export_program(model, inputs, dynamic, log)
    except Exception as err:  # noqa: BLE001 - torch.export may raise anything on a user's model
        raise CompileError(
            f"{target}: torch.export cannot capture this model ({type(err).__name__}: {err}); "
            "TorchNeuron's torch.compile needs a graph without breaks (fullgraph=True)"
        ) from err
    finally:
        model.train(was_training)
    buffer = io.BytesIO()
    torch.export.save(program, buffer)
    atomic_write(path, buffer.getvalue())
    return program, exported_dynamic


def neuron_compile(module: Any, torch: Any) -> Any:
    """The one TorchNeuron call, as its docs show it: ``torch.compile(model, backend="neuron",
    fullgraph=True)``, with ``dynamic=False`` (dynamic shapes are rejected; each batch size compiles
    once). model.py carries its own copy of this line (it runs without the workbench)."""
    return torch.compile(module, backend="neuron", fullgraph=True, dynamic=False)


def device_compile(program: Any, inputs: tuple, target: str) -> Callable[[], None]:
    """The work that compiles the example shape on the device: the NEFF lands in TorchNeuron's
    persistent cache, and a compiler failure shows now, not at the first request."""

    def work() -> None:
        import torch

        device = torch.device(DEVICE)
        compiled = neuron_compile(program.module().to(device), torch)
        with torch.no_grad():
            compiled(*[t.to(device) for t in inputs])
        print(f"{target}: compiled the example shape {[list(t.shape) for t in inputs]} on {device}", flush=True)

    return work
