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
``torch.compile(backend="neuron", fullgraph=True, dynamic=False)``. With a device here the compile
also runs that call once on the example inputs, which compiles the example shape's NEFF into
TorchNeuron's persistent cache (TORCH_NEURONX_NEFF_CACHE_DIR, DOCS compiler/about-compiler-artifacts
.html); without one nothing Neuron runs here and the first request of each shape compiles on the
Trn host.
"""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any, Callable, Sequence

from workbench.compiler.artifact import Artifact, atomic_write
from workbench.compiler.cpu import CompileError, check_inputs, compile_cpu
from workbench.compiler.neuron import (Log, _LNC_FLAGS, import_sdk, logical_nc_config, normalize_compiler_args,
                                       run_compile)
from workbench.system import TARGET_PACKAGES, TORCHNEURON_TARGETS, has_neuron_device, installed_versions
from workbench.tasks import check_cancel

__all__ = ["ARTIFACT_FORMAT", "DEVICE", "compile_torchneuron", "export_program", "neuron_compile"]

ARTIFACT_FORMAT = "torch.export"  # Artifact.extra["format"]: model.py and load_artifact read it
# TorchNeuron's device: "change the device placement from cuda to neuron" (DOCS torch/index.rst)
DEVICE = "neuron"


def _without_lnc(args: list[str]) -> list[str]:
    """``args`` minus the LNC flag and its value (the one compiler setting TorchNeuron takes from
    the workbench, and then from the node's NEURON_LOGICAL_NC_CONFIG, not from a flag)."""
    out, skip = [], False
    for arg in args:
        if skip:
            skip = False
        elif arg in _LNC_FLAGS:
            skip = True
        elif not any(arg.startswith(flag + "=") for flag in _LNC_FLAGS):
            out.append(arg)
    return out


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
            log(f"WARNING the batch dim cannot be exported as dynamic ({type(err).__name__}: "
                f"{str(err).splitlines()[0] if str(err) else ''}); exporting the example's batch size only")
    return torch.export.export(model, inputs), False


def neuron_compile(module: Any, torch: Any) -> Any:
    """The one TorchNeuron call, as its docs show it: ``torch.compile(model, backend="neuron",
    fullgraph=True)``, with ``dynamic=False`` (dynamic shapes are rejected; each batch size compiles
    once). model.py carries its own copy of this line (it runs without the workbench)."""
    return torch.compile(module, backend="neuron", fullgraph=True, dynamic=False)


def compile_torchneuron(
    model: Any,
    example_inputs: Any,
    target: str,
    *,
    path: Path,
    cpu_path: Path,
    name: str,
    compiler_args: str | Sequence[str] | None = None,
    dynamic_batch_size: bool = True,
    batch_dim: bool = True,
    input_names: Sequence[str] | None = None,
    output_names: Sequence[str] | None = None,
    progress: Callable[[int, int, str], None] | None = None,
    cancel: Any = None,
    log: Log | None = None,
    isolate: bool = True,
    has_device: bool | None = None,
    lnc: int | None = None,
) -> Artifact:
    """CPU trace (the CPU twin), then the exported program for TorchNeuron, compiled once on the
    example inputs when a Neuron device is here. The SDK is imported (and checked to be TorchNeuron)
    and the arguments checked before anything is written."""
    import torch

    if target not in TORCHNEURON_TARGETS:
        raise ValueError(f"{target!r} is not a TorchNeuron target; use one of {', '.join(TORCHNEURON_TARGETS)}")
    args = normalize_compiler_args(compiler_args)
    chosen_lnc = logical_nc_config(target, args, lnc)
    other = _without_lnc(args)
    if other:
        raise CompileError(f"compiler args {other}: TorchNeuron compiles through torch.compile(backend=\"neuron\"), "
                           "which takes no neuronx-cc flags from the workbench (its options dict reads only a few "
                           "keys: DOCS torch/compile/reference-torch-compile.html); leave them out")
    has_device = has_neuron_device() if has_device is None else has_device
    neuron = import_sdk(target, has_device=has_device)
    total = 6
    dynamic = dynamic_batch_size and batch_dim
    cpu = compile_cpu(model, example_inputs, path=cpu_path, name=name, batch_dim=batch_dim,
                      dynamic_batch_size=dynamic_batch_size, input_names=input_names, output_names=output_names,
                      progress=progress, cancel=cancel, log=log, total_steps=total)
    lines: list[str] = []

    def emit(line: str) -> None:
        lines.append(line)
        if log is not None:
            log(line)

    inputs = tuple(check_inputs(example_inputs, batch_dim=batch_dim, input_names=input_names))
    message = f"{target}: exporting for TorchNeuron {getattr(neuron, '__version__', '')}".rstrip()
    check_cancel(cancel)
    emit(message + ("" if has_device else " (no device: it compiles on the first call on the Trn host)"))
    if progress is not None:
        progress(4, total, message)
    was_training = getattr(model, "training", False)
    model.eval()
    try:
        with torch.no_grad():
            program, exported_dynamic = export_program(model, inputs, dynamic, emit)
    except Exception as err:
        raise CompileError(f"{target}: torch.export cannot capture this model ({type(err).__name__}: {err}); "
                           "TorchNeuron's torch.compile needs a graph without breaks (fullgraph=True)") from err
    finally:
        model.train(was_training)
    buffer = io.BytesIO()
    torch.export.save(program, buffer)
    atomic_write(path, buffer.getvalue())

    def work() -> None:
        """Compile the example shape on the device (the NEFF lands in TorchNeuron's persistent cache)."""
        device = torch.device(DEVICE)
        compiled = neuron_compile(program.module().to(device), torch)
        with torch.no_grad():
            compiled(*[t.to(device) for t in inputs])
        print(f"{target}: compiled the example shape {[list(t.shape) for t in inputs]} on {device}", flush=True)

    seconds = 0.0
    if has_device:
        try:
            seconds = run_compile(work, target=target, message=message, isolate=isolate, emit=emit,
                                  progress=progress, total=total, cancel=cancel)
        except BaseException:
            os.unlink(path)  # nothing half-made stays behind
            raise
    extra: dict[str, Any] = {"format": ARTIFACT_FORMAT, "backend": "neuron", "has_device": has_device,
                             "compiled_example_shape": has_device, "lnc": chosen_lnc}
    emit(f"{target}: saved {path}")
    if progress is not None:
        progress(5, total, f"{target}: saved {path}")
    versions = {k: v for k, v in installed_versions(("torch", *TARGET_PACKAGES[target])).items() if v}
    versions.setdefault("torch", torch.__version__)
    versions.setdefault("torch-neuronx", str(getattr(neuron, "__version__", "")))
    return Artifact(
        path=str(path),
        target=target,
        spec=cpu.spec,
        batch_dim=batch_dim,
        name=name,
        sdk_versions=versions,
        compiler_args=[],
        compile_seconds=seconds,
        size_bytes=path.stat().st_size,
        log="\n".join(lines),
        dynamic_batch=exported_dynamic and bool(cpu.dynamic_batch),
        operator_counts=cpu.operator_counts,
        extra=extra,
        cpu_artifact=cpu,
    )
