"""Trace and compile a PyTorch model for the CPU, Inf1, Inf2, Trn1 or Trn2, and say what came out.

`compile_model` is the one entry point (exported by the package as ``workbench.compile``). A Neuron
compile always leaves a CPU TorchScript twin beside the Neuron file, so the same model can be
served and checked on a machine without a NeuronCore; each file gets a ``.workbench.json``
sidecar holding its `Artifact` record. Either every file of a compile is written, or none is.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workbench.compiler.analysis import analyze_neuron
from workbench.compiler.artifact import (
    Artifact,
    ArtifactError,
    NeuronArtifactError,
    load_artifact,
    read_artifact,
    sidecar_path,
)
from workbench.compiler.cpu import (
    CompileError,
    artifact_path,
    as_tensors,
    check_inputs,
    compile_cpu,
    operator_counts,
    trace_cpu,
)
from workbench.compiler.neuron import compile_neuron
from workbench.system import TARGETS, MissingSDKError, SystemInfo, detect, install_hint

__all__ = [
    "TARGETS",
    "Artifact",
    "ArtifactError",
    "CompileError",
    "MissingSDKError",
    "NeuronArtifactError",
    "OperatorReport",
    "SystemInfo",
    "analyze",
    "compile_model",
    "detect",
    "install_hint",
    "load_artifact",
    "read_artifact",
]


def _default_name(model: Any) -> str:
    return type(model).__name__.lower() or "model"


def compile_model(
    model: Any,
    example_inputs: Any,
    target: str = "cpu",
    *,
    out_dir: str | os.PathLike,
    name: str | None = None,
    compiler_args: str | Sequence[str] | None = None,
    compiler_workdir: str | os.PathLike | None = None,
    dynamic_batch_size: bool = True,
    batch_dim: bool = True,
    input_names: Sequence[str] | None = None,
    output_names: Sequence[str] | None = None,
    overwrite: bool = False,
    isolate: bool = True,
    lnc: int | None = None,
    progress: Callable[[int, int, str], None] | None = None,
    cancel: Any = None,
    log: Callable[[str], None] | None = None,
) -> Artifact:
    """Trace ``model`` for ``target`` into ``out_dir/<name>.<target>.pt`` (+ ``<name>.cpu.pt``).

    ``batch_dim``: dim 0 of every input/output is the batch (left out of the spec's dims).
    ``dynamic_batch_size``: the artifact must serve other batch sizes (checked on the CPU).
    ``isolate``: run a Neuron compile in a child process so ``cancel`` can stop the compiler.
    ``lnc``: trn2/trn3's logical NeuronCore config (1 or 2; default 2, the SDK's); trn1 takes only 1
    (NCC_EARG001), other targets none.
    Existing files are refused unless ``overwrite``; ``log`` receives the compile log live.
    """
    if target not in TARGETS:
        raise ValueError(f"unknown target {target!r}; use one of {', '.join(TARGETS)}")
    if target == "cpu" and (compiler_args or compiler_workdir or lnc is not None):
        raise CompileError("compiler_args/compiler_workdir/lnc are Neuron compiler settings; the cpu target takes none")
    name = name or _default_name(model)
    out_dir = Path(out_dir)
    cpu_path = artifact_path(out_dir, name, "cpu")
    paths = [cpu_path] if target == "cpu" else [cpu_path, artifact_path(out_dir, name, target)]
    if out_dir.exists() and not out_dir.is_dir():
        raise ArtifactError(f"out_dir {out_dir} is a file, not a folder")
    if not overwrite:
        taken = [str(p) for p in paths + [sidecar_path(p) for p in paths] if p.exists()]
        if taken:
            raise ArtifactError(f"{', '.join(taken)} already exist(s); pick another name or pass overwrite=True")
    check_inputs(example_inputs, batch_dim=batch_dim, input_names=input_names)  # fail before any folder is made
    made_dir = not out_dir.exists()
    out_dir.mkdir(parents=True, exist_ok=True)
    created = [p for p in paths if not p.exists()]
    try:
        if target == "cpu":
            artifact = compile_cpu(
                model,
                example_inputs,
                path=cpu_path,
                name=name,
                batch_dim=batch_dim,
                dynamic_batch_size=dynamic_batch_size,
                input_names=input_names,
                output_names=output_names,
                progress=progress,
                cancel=cancel,
                log=log,
            )
        else:
            artifact = compile_neuron(
                model,
                example_inputs,
                target,
                path=paths[1],
                cpu_path=cpu_path,
                name=name,
                compiler_args=compiler_args,
                compiler_workdir=compiler_workdir,
                dynamic_batch_size=dynamic_batch_size,
                batch_dim=batch_dim,
                input_names=input_names,
                output_names=output_names,
                progress=progress,
                cancel=cancel,
                log=log,
                isolate=isolate,
                lnc=lnc,
            )
            assert artifact.cpu_artifact is not None, "compile_neuron traces the CPU twin first"
            artifact.cpu_artifact.write_sidecar()
        artifact.write_sidecar()
    except BaseException:
        for path in created:
            for leftover in (path, sidecar_path(path), *path.parent.glob(f".{path.name}.*.tmp")):
                if leftover.exists():
                    leftover.unlink()
        if made_dir and not any(out_dir.iterdir()):
            out_dir.rmdir()
        raise
    if progress is not None:
        progress(1, 1, f"done: {artifact.path}")
    return artifact


@dataclass
class OperatorReport:
    """Which operators a model uses and, for Neuron targets, which of them the compiler supports."""

    target: str
    operator_counts: dict[str, int]
    support_percentage: float | None = None
    unsupported: list[str] = field(default_factory=list)
    log: str = ""
    raw: dict[str, Any] = field(default_factory=dict)

    def to_frame(self):
        import pandas as pd

        unsupported = set(self.unsupported)
        rows = [
            {
                "operator": k,
                "count": v,
                "supported": (k not in unsupported) if self.support_percentage is not None else None,
            }
            for k, v in self.operator_counts.items()
        ]
        return pd.DataFrame(rows, columns=["operator", "count", "supported"])


def analyze(model: Any, example_inputs: Any, target: str = "cpu") -> OperatorReport:
    """Operator support before compiling: the SDK's analyzer for Neuron targets, the traced graph's
    ``aten::`` operator counts on the CPU (always included)."""
    if target not in TARGETS:
        raise ValueError(f"unknown target {target!r}; use one of {', '.join(TARGETS)}")
    import torch

    inputs = as_tensors(example_inputs)
    lines: list[str] = []
    was_training = getattr(model, "training", False)
    model.eval()
    try:
        with torch.no_grad():
            counts = operator_counts(trace_cpu(model, inputs, lines.append))
    finally:
        model.train(was_training)
    if target == "cpu":
        return OperatorReport("cpu", counts, log="\n".join(lines))
    found = analyze_neuron(model, inputs, target)
    return OperatorReport(target, counts, found["support_percentage"], found["unsupported"], found["log"], found["raw"])
