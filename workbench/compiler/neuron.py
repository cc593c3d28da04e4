"""THE seam to torch-neuron (Inf1) and torch-neuronx (Inf2/Trn1).

Every call into a Neuron SDK goes through this module, so the rest of the workbench runs (and is
tested) where the SDK cannot be installed. The rules it encodes come from the Neuron docs and
issues: ``import torch_neuron`` registers ``torch.neuron``; torch-neuronx on PyTorch 2 cannot
trace without a device unless it is given ``cpu_backend=True`` and an explicit ``--target``
(with ``NEURON_PLATFORM_TARGET_OVERRIDE`` set before the import); variable batch sizes come from
``dynamic_batch_size=True`` (Inf1) or ``torch_neuronx.dynamic_batch`` (Inf2/Trn1).

Compiles can take many minutes, so by default they run isolated (`workbench.compiler.isolation`):
the compiler's output streams to the caller's ``log`` and cancel kills it.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import re
import shlex
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from workbench.compiler.artifact import Artifact, atomic_write
from workbench.compiler.isolation import run_isolated
from workbench.compiler.cpu import CompileError, as_tensors, check_inputs, compile_cpu, script_bytes
from workbench.system import MissingSDKError, TARGET_PACKAGES, has_neuron_device, installed_versions
from workbench.tasks import Cancelled, check_cancel

__all__ = [
    "NEURON_TARGETS",
    "NEURONX_TARGETS",
    "import_sdk",
    "normalize_compiler_args",
    "neuronx_trace_arguments",
    "trace_inf1",
    "trace_neuronx",
    "analyze_neuron",
    "compile_neuron",
]

NEURON_TARGETS = ("inf1", "inf2", "trn1")
NEURONX_TARGETS = ("inf2", "trn1")
# neuronx-cc --target values that compile for each workbench target
_COMPILER_TARGETS = {"inf2": ("inf2",), "trn1": ("trn1", "trn1n")}
_IMPORT_ERRORS = (ImportError, OSError, RuntimeError)

Log = Callable[[str], None]


def import_sdk(target: str, *, has_device: bool | None = None) -> Any:
    """Import the SDK for ``target``: the ``torch.neuron`` namespace for inf1, ``torch_neuronx`` else.

    Without a device, ``NEURON_PLATFORM_TARGET_OVERRIDE`` is set first: torch-neuronx reads it at
    import time to pick the compile target.
    """
    if target == "inf1":
        try:
            import torch_neuron  # noqa: F401  (registers torch.neuron)
            import torch

            return torch.neuron
        except _IMPORT_ERRORS as err:
            raise MissingSDKError("inf1", list(TARGET_PACKAGES["inf1"]), f"import torch_neuron failed: {err}") from None
    if target in NEURONX_TARGETS:
        if not (has_neuron_device() if has_device is None else has_device):
            os.environ["NEURON_PLATFORM_TARGET_OVERRIDE"] = target
        try:
            import torch_neuronx

            return torch_neuronx
        except _IMPORT_ERRORS as err:
            raise MissingSDKError(target, list(TARGET_PACKAGES[target]), f"import torch_neuronx failed: {err}") from None
    raise ValueError(f"unknown Neuron target {target!r}; use one of {', '.join(NEURON_TARGETS)}")


def normalize_compiler_args(compiler_args: str | Sequence[str] | None) -> list[str]:
    """Compiler flags as a list: a string is split like a shell would."""
    if compiler_args is None:
        return []
    if isinstance(compiler_args, str):
        return shlex.split(compiler_args)
    return [str(a) for a in compiler_args]


def _given_target(args: list[str]) -> str | None:
    for i, arg in enumerate(args):
        if arg == "--target":
            if i + 1 >= len(args):
                raise CompileError("compiler args end with --target but give no value (inf2, trn1...)")
            return args[i + 1]
        if arg.startswith("--target="):
            return arg.split("=", 1)[1]
    return None


def neuronx_trace_arguments(
    target: str,
    compiler_args: str | Sequence[str] | None,
    compiler_workdir: str | os.PathLike | None,
    has_device: bool,
) -> dict[str, Any]:
    """Keyword arguments for ``torch_neuronx.trace``.

    No device => ``cpu_backend=True`` and ``--target <target>`` (added unless already given);
    a ``--target`` for another chip is refused rather than compiled for the wrong hardware.
    """
    args = normalize_compiler_args(compiler_args)
    given = _given_target(args)
    if given is not None and given not in _COMPILER_TARGETS[target]:
        raise CompileError(f"compiler args say --target {given} but the target is {target}; "
                           f"drop --target or use {' or '.join(_COMPILER_TARGETS[target])}")
    kwargs: dict[str, Any] = {}
    if not has_device:
        if given is None:
            args += ["--target", target]
        kwargs["cpu_backend"] = True
    kwargs["compiler_args"] = args
    if compiler_workdir is not None:
        kwargs["compiler_workdir"] = str(compiler_workdir)
    return kwargs


def trace_inf1(
    model: Any,
    inputs: tuple,
    *,
    compiler_args: str | Sequence[str] | None = None,
    compiler_workdir: str | os.PathLike | None = None,
    dynamic_batch_size: bool = True,
) -> Any:
    """``torch.neuron.trace`` (neuron-cc; compiles on any machine)."""
    neuron = import_sdk("inf1")
    kwargs: dict[str, Any] = {"compiler_args": normalize_compiler_args(compiler_args),
                              "dynamic_batch_size": dynamic_batch_size}
    if compiler_workdir is not None:
        kwargs["compiler_workdir"] = str(compiler_workdir)
    return neuron.trace(model, list(inputs), **kwargs)


def trace_neuronx(
    model: Any,
    inputs: tuple,
    *,
    target: str,
    compiler_args: str | Sequence[str] | None = None,
    compiler_workdir: str | os.PathLike | None = None,
    dynamic_batch_size: bool = True,
    has_device: bool | None = None,
) -> Any:
    """``torch_neuronx.trace`` (neuronx-cc), then ``dynamic_batch`` for variable batch sizes."""
    has_device = has_neuron_device() if has_device is None else has_device
    kwargs = neuronx_trace_arguments(target, compiler_args, compiler_workdir, has_device)
    neuronx = import_sdk(target, has_device=has_device)
    traced = neuronx.trace(model, inputs, **kwargs)
    if dynamic_batch_size:
        neuronx.dynamic_batch(traced)
    return traced


class _LineWriter(io.TextIOBase):
    """A file-like object that hands complete lines to a callback."""

    def __init__(self, sink: Log) -> None:
        self.sink, self.pending = sink, ""

    def write(self, text: str) -> int:
        self.pending += text
        *lines, self.pending = self.pending.split("\n")
        for line in lines:
            self.sink(line)
        return len(text)

    def flush(self) -> None:
        if self.pending:
            self.sink(self.pending)
            self.pending = ""


@contextlib.contextmanager
def _captured(sink: Log):
    """Send print() output and log records (INFO and up) to ``sink`` while the SDK runs in-process."""
    writer = _LineWriter(sink)
    handler = logging.StreamHandler(writer)
    handler.setLevel(logging.INFO)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        with contextlib.redirect_stdout(writer), contextlib.redirect_stderr(writer):
            yield
    finally:
        root.removeHandler(handler)
        writer.flush()


def analyze_neuron(model: Any, example_inputs: Any, target: str) -> dict[str, Any]:
    """Operator support for ``target`` without compiling.

    inf1: ``torch.neuron.analyze_model`` only logs, so its log is returned and the percentage read
    from it; inf2/trn1: ``torch_neuronx.analyze`` returns the dict itself.
    """
    inputs = as_tensors(example_inputs)
    sdk = import_sdk(target)
    lines: list[str] = []
    with _captured(lines.append):
        if target == "inf1":
            raw = sdk.analyze_model(model, example_inputs=list(inputs))
        else:
            raw = sdk.analyze(model, inputs)
    result = dict(raw) if isinstance(raw, dict) else {}
    result["log"] = "\n".join(lines)
    if "support_percentage" not in result:
        match = re.search(r"([\d.]+)% of all operations", result["log"])
        if match:
            result["support_percentage"] = float(match[1])
    return result


def compile_neuron(
    model: Any,
    example_inputs: Any,
    target: str,
    *,
    path: Path,
    cpu_path: Path,
    name: str,
    compiler_args: str | Sequence[str] | None = None,
    compiler_workdir: str | os.PathLike | None = None,
    dynamic_batch_size: bool = True,
    batch_dim: bool = True,
    input_names: Sequence[str] | None = None,
    output_names: Sequence[str] | None = None,
    progress: Callable[[int, int, str], None] | None = None,
    cancel: Any = None,
    log: Log | None = None,
    isolate: bool = True,
    has_device: bool | None = None,
) -> Artifact:
    """CPU trace (always, so the model can be served and checked here), then the Neuron compile.

    The SDK is imported and the arguments checked before anything is written.
    """
    import torch

    if target not in NEURON_TARGETS:
        raise ValueError(f"unknown Neuron target {target!r}; use one of {', '.join(NEURON_TARGETS)}")
    has_device = has_neuron_device() if has_device is None else has_device
    dynamic = dynamic_batch_size and batch_dim
    if target == "inf1":
        import_sdk("inf1")
        call_args = {"compiler_args": normalize_compiler_args(compiler_args)}
    else:
        call_args = neuronx_trace_arguments(target, compiler_args, compiler_workdir, has_device)
        import_sdk(target, has_device=has_device)
    total = 6
    cpu = compile_cpu(model, example_inputs, path=cpu_path, name=name, batch_dim=batch_dim,
                      dynamic_batch_size=dynamic_batch_size, input_names=input_names, output_names=output_names,
                      progress=progress, cancel=cancel, log=log, total_steps=total)
    if dynamic and cpu.dynamic_batch is False and log is not None:
        log(f"{target}: WARNING the CPU trace shows the model bakes its batch size in; "
            "the Neuron artifact will not serve other batch sizes correctly either")

    lines: list[str] = []

    def emit(line: str) -> None:
        lines.append(line)
        if log is not None:
            log(line)

    inputs = check_inputs(example_inputs, batch_dim=batch_dim, input_names=input_names)
    compiler = "neuron-cc" if target == "inf1" else "neuronx-cc"
    message = f"{target}: compiling with {compiler} {' '.join(call_args['compiler_args'])}".rstrip()
    check_cancel(cancel)
    emit(message + ("" if has_device or target == "inf1" else " (no device: cpu_backend=True)"))
    if progress is not None:
        progress(4, total, message)

    def work() -> None:
        was_training = getattr(model, "training", False)
        model.eval()
        try:
            with torch.no_grad():
                if target == "inf1":
                    traced = trace_inf1(model, inputs, compiler_args=compiler_args,
                                        compiler_workdir=compiler_workdir, dynamic_batch_size=dynamic)
                else:
                    traced = trace_neuronx(model, inputs, target=target, compiler_args=compiler_args,
                                           compiler_workdir=compiler_workdir, dynamic_batch_size=dynamic,
                                           has_device=has_device)
        finally:
            model.train(was_training)
        atomic_write(path, script_bytes(traced))

    start = time.perf_counter()
    if isolate and hasattr(os, "fork"):
        reported = [0]

        def tick(seconds: float) -> None:  # a heartbeat every 5 s, so a long compile visibly lives
            if progress is not None and seconds >= reported[0] + 5:
                reported[0] = int(seconds)
                progress(4, total, f"{message} ({reported[0]} s)")

        run_isolated(work, log=emit, cancel=cancel, on_tick=tick)
    else:
        with _captured(emit):
            try:
                work()
            except (Cancelled, MissingSDKError, CompileError):
                raise
            except Exception as err:
                raise CompileError(f"{target} compile failed: {type(err).__name__}: {err}") from err
    seconds = time.perf_counter() - start
    emit(f"{target}: saved {path}")
    if progress is not None:
        progress(5, total, f"{target}: saved {path}")
    versions = {k: v for k, v in installed_versions(("torch", *TARGET_PACKAGES[target])).items() if v}
    versions.setdefault("torch", torch.__version__)
    return Artifact(
        path=str(path),
        target=target,
        spec=cpu.spec,
        batch_dim=batch_dim,
        name=name,
        sdk_versions=versions,
        compiler_args=list(call_args["compiler_args"]),
        compile_seconds=seconds,
        size_bytes=path.stat().st_size,
        log="\n".join(lines),
        dynamic_batch=dynamic and bool(cpu.dynamic_batch),  # a batch size baked into the graph stays baked in
        operator_counts=cpu.operator_counts,
        extra={"cpu_backend": bool(call_args.get("cpu_backend", False)), "has_device": has_device},
        cpu_artifact=cpu,
    )
