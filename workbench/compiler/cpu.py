"""Trace a PyTorch model to TorchScript on the CPU, check it, and describe its interface.

Every compile starts here: the CPU trace is what the local server runs, what a Neuron artifact is
checked against, and where the `ModelSpec` comes from (TorchScript stores no names, dtypes or
dims, so they are read off the example inputs and the eager outputs while both are at hand).
"""

from __future__ import annotations

import io
import re
import time
import warnings
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from workbench.compiler.artifact import Artifact, ArtifactError, atomic_write
from workbench.refusals import WorkbenchError
from workbench.spec import ModelSpec, SpecError, TensorSpec
from workbench.tasks import check_cancel

__all__ = [
    "CompileError",
    "as_tensors",
    "check_inputs",
    "script_bytes",
    "flatten_outputs",
    "infer_spec",
    "operator_counts",
    "max_abs_diff",
    "trace_cpu",
    "compile_cpu",
    "artifact_path",
]

Log = Callable[[str], None]


class CompileError(WorkbenchError, RuntimeError):
    """A model that could not be traced or compiled; the message says which step and why."""


def as_tensors(example_inputs: Any) -> tuple:
    """Example inputs as a tuple of CPU tensors (a tensor, an array, or a sequence of them)."""
    import numpy as np
    import torch

    items = example_inputs if isinstance(example_inputs, (tuple, list)) else (example_inputs,)
    if not items:
        raise SpecError("example_inputs is empty: give one tensor per model input")
    out = []
    for i, item in enumerate(items):
        if isinstance(item, torch.Tensor):
            out.append(item.detach().cpu())
        elif isinstance(item, np.ndarray):
            if item.dtype == object:
                raise SpecError(f"example input {i}: string (object) arrays cannot be traced")
            out.append(torch.from_numpy(np.ascontiguousarray(item)))
        else:
            raise SpecError(f"example input {i}: expected a torch.Tensor or numpy array, got {type(item).__name__}")
    return tuple(out)


def check_inputs(example_inputs: Any, *, batch_dim: bool = True, input_names: Sequence[str] | None = None) -> tuple:
    """Example inputs as tensors, refused before any work when the batch dims or names do not fit."""
    inputs = as_tensors(example_inputs)
    names = _names(input_names, len(inputs), "INPUT", "input")
    if batch_dim:
        for name, t in zip(names, inputs):
            if t.dim() < 2:
                raise SpecError(
                    f"input {name} has shape {list(t.shape)}: with batch_dim=True it needs a batch dim and at "
                    "least one more (reshape it to [batch, 1], or pass batch_dim=False)"
                )
            if t.shape[0] != inputs[0].shape[0]:
                raise SpecError(
                    f"input {name} has batch dim {t.shape[0]} but the first input has "
                    f"{inputs[0].shape[0]}; with batch_dim=True dim 0 must be the batch for every tensor"
                )
    return inputs


def flatten_outputs(outputs: Any) -> list:
    """A forward() result as a list of tensors, in the order Triton's OUTPUT__i will carry them."""
    import torch

    if isinstance(outputs, torch.Tensor):
        return [outputs]
    if isinstance(outputs, (tuple, list)) and outputs:
        bad = [i for i, t in enumerate(outputs) if not isinstance(t, torch.Tensor)]
        if bad:
            raise SpecError(f"output {bad[0]} is a {type(outputs[bad[0]]).__name__}; forward() must return tensors")
        return list(outputs)
    if isinstance(outputs, dict):
        raise SpecError(
            f"forward() returns a dict (keys {sorted(outputs)}); return a tuple of tensors "
            "so each gets an OUTPUT__i position"
        )
    raise SpecError(f"forward() returns {type(outputs).__name__}; return a tensor or a tuple of tensors")


def _names(given: Sequence[str] | None, count: int, stem: str, kind: str) -> list[str]:
    if given is None:
        return [f"{stem}__{i}" for i in range(count)]
    given = list(given)
    if len(given) != count:
        raise SpecError(f"{len(given)} {kind} name(s) {given} for {count} {kind}(s)")
    return given


def infer_spec(
    inputs: Sequence[Any],
    outputs: Sequence[Any],
    *,
    batch_dim: bool = True,
    input_names: Sequence[str] | None = None,
    output_names: Sequence[str] | None = None,
) -> ModelSpec:
    """`ModelSpec` from example tensors: upstream ``INPUT__i``/``OUTPUT__i`` names, dtypes, dims.

    With ``batch_dim`` the leading dim is the batch: it must agree across all tensors and is left
    out of dims (Triton configs with max_batch_size > 0 list per-request dims).
    """
    in_names = _names(input_names, len(inputs), "INPUT", "input")
    out_names = _names(output_names, len(outputs), "OUTPUT", "output")
    batch = None
    tensors: dict[str, list[TensorSpec]] = {"input": [], "output": []}
    for kind, names, items in (("input", in_names, inputs), ("output", out_names, outputs)):
        for name, t in zip(names, items):
            shape = tuple(t.shape)
            if batch_dim:
                if len(shape) < 2:
                    raise SpecError(
                        f"{kind} {name} has shape {list(shape)}: with batch_dim=True it needs a batch dim and at "
                        "least one more (reshape it to [batch, 1], or pass batch_dim=False)"
                    )
                if batch is None:
                    batch = shape[0]
                elif shape[0] != batch:
                    raise SpecError(
                        f"{kind} {name} has batch dim {shape[0]} but the first input has {batch}; "
                        "with batch_dim=True dim 0 must be the batch for every tensor"
                    )
                shape = shape[1:]
            elif not shape:
                raise SpecError(f"{kind} {name} is a scalar; Triton tensors need at least one dim")
            tensors[kind].append(TensorSpec(name, t.dtype, shape))
    return ModelSpec(tuple(tensors["input"]), tuple(tensors["output"]))


def operator_counts(traced: Any) -> dict[str, int]:
    """How many of each ``aten::`` operator the traced graph runs (submodule calls inlined)."""
    counts: Counter[str] = Counter()

    def walk(nodes: Any) -> None:
        for node in nodes:
            if node.kind().startswith("aten::"):
                counts[node.kind()] += 1
            for block in node.blocks():
                walk(block.nodes())

    walk(traced.inlined_graph.nodes())
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def max_abs_diff(expected: Sequence[Any], actual: Sequence[Any]) -> float:
    """Largest |expected - actual| over all outputs (inf when shapes differ)."""
    worst = 0.0
    for e, a in zip(expected, actual):
        if e.shape != a.shape:
            return float("inf")
        if e.numel():
            worst = max(worst, float((e.double() - a.double()).abs().max()))
    return worst


class _Eval:
    """Put a module in eval mode for the trace and give the user back the mode they had."""

    def __init__(self, model: Any) -> None:
        self.model = model

    def __enter__(self) -> None:
        self.training = getattr(self.model, "training", False)
        if hasattr(self.model, "eval"):
            self.model.eval()

    def __exit__(self, *exc: Any) -> None:
        if self.training and hasattr(self.model, "train"):
            self.model.train(True)


def trace_cpu(model: Any, inputs: tuple, log: Log) -> Any:
    """``torch.jit.trace`` with its consistency check; tracer warnings go to ``log``."""
    import torch

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            traced = torch.jit.trace(model, inputs, check_trace=True)
        except torch.jit.TracingCheckError as err:
            raise CompileError(f"the traced graph does not reproduce the model on its own inputs: {err}") from None
        except Exception as err:  # torch raises many kinds here; the cause is what the user needs
            raise CompileError(f"torch.jit.trace failed: {type(err).__name__}: {err}") from err
    seen = set()
    for w in caught:
        line = f"trace warning: {w.category.__name__}: {w.message}"
        # DeprecationWarning/FutureWarning are library API notices, not facts about this trace
        if line not in seen and not issubclass(w.category, (DeprecationWarning, FutureWarning)):
            seen.add(line)
            log(line)
    return traced


def _other_batch(inputs: tuple) -> tuple:
    """The example inputs at batch N+1 (first row repeated), to see whether the trace baked N in."""
    import torch

    return tuple(torch.cat([t, t[:1]], dim=0) for t in inputs)


def script_bytes(module: Any) -> bytes:
    """``torch.jit.save`` into memory (so the file can be written atomically)."""
    import torch

    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # torch 2.x marks TorchScript deprecated
        torch.jit.save(module, buffer)
    return buffer.getvalue()


def artifact_path(out_dir: str | Path, name: str, target: str) -> Path:
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name):
        raise ArtifactError(f"artifact name {name!r}: use letters, digits, '_', '-' or '.'")
    return Path(out_dir) / f"{name}.{target}.pt"


def compile_cpu(
    model: Any,
    example_inputs: Any,
    *,
    path: Path,
    name: str,
    batch_dim: bool = True,
    dynamic_batch_size: bool = True,
    input_names: Sequence[str] | None = None,
    output_names: Sequence[str] | None = None,
    progress: Callable[[int, int, str], None] | None = None,
    cancel: Any = None,
    log: Log | None = None,
    step_offset: int = 0,
    total_steps: int = 4,
) -> Artifact:
    """Trace ``model`` on the CPU, compare it with the eager model, save it to ``path``.

    Steps: eager run, trace, checks (same batch; batch N+1 when ``dynamic_batch_size``), save.
    """
    import torch

    lines: list[str] = []

    def emit(line: str) -> None:
        lines.append(line)
        if log is not None:
            log(line)

    def step(k: int, message: str) -> None:
        check_cancel(cancel)
        emit(message)
        if progress is not None:
            progress(step_offset + k, total_steps, message)

    inputs = check_inputs(example_inputs, batch_dim=batch_dim, input_names=input_names)
    start = time.perf_counter()
    with _Eval(model), torch.no_grad():
        step(0, f"cpu: running {name} eagerly on inputs {[list(t.shape) for t in inputs]}")
        try:
            eager = flatten_outputs(model(*inputs))
        except SpecError:
            raise
        except Exception as err:  # noqa: BLE001 - the user's model may raise anything
            raise CompileError(f"the model fails on its example inputs: {type(err).__name__}: {err}") from err
        spec = infer_spec(inputs, eager, batch_dim=batch_dim, input_names=input_names, output_names=output_names)

        step(1, "cpu: torch.jit.trace")
        traced = trace_cpu(model, inputs, emit)

        step(2, "cpu: comparing traced with eager outputs")
        diff = max_abs_diff(eager, flatten_outputs(traced(*inputs)))
        emit(f"cpu: traced vs eager max abs diff {diff:.3g}")
        dynamic = None
        if batch_dim and dynamic_batch_size:
            bigger = _other_batch(inputs)
            try:
                expected = flatten_outputs(model(*bigger))
                scale = max((float(e.double().abs().max()) for e in expected if e.numel()), default=0.0)
                dynamic = max_abs_diff(expected, flatten_outputs(traced(*bigger))) <= 1e-4 * (1 + scale) + 10 * diff
            except Exception as err:  # noqa: BLE001 - the user's model may raise anything
                emit(f"cpu: the trace fails at batch {bigger[0].shape[0]}: {type(err).__name__}: {err}")
                dynamic = False
            if not dynamic:
                emit(
                    f"cpu: WARNING the trace only works at batch {inputs[0].shape[0]}: the model bakes its batch "
                    "size in (e.g. view(N, ...)); use reshape(-1, ...) or serve without dynamic batching"
                )
        counts = operator_counts(traced)

    step(3, f"cpu: saving {path}")
    atomic_write(path, script_bytes(traced))
    return Artifact(
        path=str(path),
        target="cpu",
        spec=spec,
        batch_dim=batch_dim,
        name=name,
        sdk_versions={"torch": torch.__version__},
        compile_seconds=time.perf_counter() - start,
        size_bytes=path.stat().st_size,
        log="\n".join(lines),
        max_abs_diff=diff,
        dynamic_batch=dynamic,
        operator_counts=counts,
    )
