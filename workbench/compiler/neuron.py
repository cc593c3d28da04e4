"""THE seam to torch-neuron (Inf1, out of support) and the PyTorch/XLA torch-neuronx (Inf2/Trn1).

Every call into a Neuron SDK goes through this module (and `workbench.compiler.torchneuron` for
Trn2/Trn3, which serve through TorchNeuron from Neuron 2.34), so the rest of the workbench runs (and
is tested) where the SDK cannot be installed. The rules it encodes come from the Neuron docs and
issues: ``import torch_neuron`` registers ``torch.neuron``; torch-neuronx is always given
``--target`` (with a device too: the compiler would otherwise target the host, which may be
another chip), and without a device also ``cpu_backend=True`` (with
``NEURON_PLATFORM_TARGET_OVERRIDE`` set before the import); the installed torch-neuronx must be the
library the target needs (`workbench.system.check_torch_neuronx_line`: 2.13/2.14 builds are
TorchNeuron); variable batch sizes come from ``dynamic_batch_size=True`` (Inf1) or
``torch_neuronx.dynamic_batch`` (Inf2/Trn1), and the traced graph takes one shape otherwise; the
trace is marked ``lazy_load`` before saving so DataParallel loads it once (SDK
api-torch-neuronx-async-lazy-load.rst:34-37). The analyzers live in `workbench.compiler.analysis`.

Compiles can take many minutes, so by default they run isolated (`workbench.compiler.isolation`):
the compiler's output streams to the caller's ``log`` and cancel kills it.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import shlex
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from workbench.compiler import torchneuron
from workbench.compiler.artifact import Artifact, atomic_write
from workbench.compiler.cpu import CompileError, check_inputs, compile_cpu, script_bytes
from workbench.compiler.isolation import run_isolated
from workbench.compiler.torchneuron import LNC_FLAGS
from workbench.system import (
    DEFAULT_LNC,
    LNC_VALUES,
    NEURON_TARGETS,
    OUT_OF_SUPPORT,
    TARGET_PACKAGES,
    TORCHNEURON_TARGETS,
    XLA_TARGETS,
    MissingSDKError,
    check_torch_neuronx_line,
    has_neuron_device,
    installed_versions,
)
from workbench.tasks import Cancelled, check_cancel

__all__ = [
    "NEURON_TARGETS",
    "NEURONX_TARGETS",
    "import_sdk",
    "normalize_compiler_args",
    "logical_nc_config",
    "neuronx_trace_arguments",
    "trace_inf1",
    "trace_neuronx",
    "compile_neuron",
    "run_compile",
]

NEURONX_TARGETS = (*XLA_TARGETS, *TORCHNEURON_TARGETS)  # the targets whose library is a torch-neuronx
# neuronx-cc --target values that compile for each workbench target (SDK neuronx-cc CLI reference
# :85-94 lists inf2, trn1, trn1n, trn2; trn3 is NEURON_PLATFORM_TARGET_OVERRIDE's gen4, SDK NKI docs)
_COMPILER_TARGETS = {"inf2": ("inf2",), "trn1": ("trn1", "trn1n"), "trn2": ("trn2",), "trn3": ("trn3",)}
# LNC values neuronx-cc accepts on targets without LNC: "On trn1, only lnc=1 is supported"
# (SDK compiler/error-codes/EARG001.rst:18-21); any other value there is error NCC_EARG001.
_LNC_ONE_ONLY = ("trn1",)
# torch.neuron.trace's warning when nothing compiled (aws-neuron-sdk issue #827: it also fires for a
# fully supported model whose supported segments are all shorter than minimum_segment_size=2)
_CPU_FALLBACK = "No operator is placed on Neuron runtime"
_IMPORT_ERRORS = (ImportError, OSError, RuntimeError)

Log = Callable[[str], None]


def import_sdk(target: str, *, has_device: bool | None = None) -> Any:
    """Import the SDK for ``target``: the ``torch.neuron`` namespace for inf1, ``torch_neuronx`` else,
    checked to be the library the target needs (PyTorch/XLA for inf2/trn1, TorchNeuron for
    trn2/trn3: `workbench.system.WrongSDKError` otherwise, before any work).

    Without a device, ``NEURON_PLATFORM_TARGET_OVERRIDE`` is set first: Neuron libraries read it at
    import time to pick the compile target (values trn1/inf2, trn2, trn3: SDK NKI docs).
    """
    if target == "inf1":
        try:
            import torch
            import torch_neuron  # noqa: F401  (registers torch.neuron)

            return torch.neuron  # type: ignore[attr-defined]  # an attribute torch_neuron adds on import
        except _IMPORT_ERRORS as err:
            raise MissingSDKError("inf1", list(TARGET_PACKAGES["inf1"]), f"import torch_neuron failed: {err}") from None
    if target in NEURONX_TARGETS:
        check_torch_neuronx_line(target, installed_versions(("torch-neuronx",))["torch-neuronx"])
        if not (has_neuron_device() if has_device is None else has_device):
            os.environ["NEURON_PLATFORM_TARGET_OVERRIDE"] = target
        try:
            import torch_neuronx
        except _IMPORT_ERRORS as err:
            raise MissingSDKError(
                target, list(TARGET_PACKAGES[target]), f"import torch_neuronx failed: {err}"
            ) from None
        check_torch_neuronx_line(target, getattr(torch_neuronx, "__version__", None))
        return torch_neuronx
    raise ValueError(f"unknown Neuron target {target!r}; use one of {', '.join(NEURON_TARGETS)}")


def normalize_compiler_args(compiler_args: str | Sequence[str] | None) -> list[str]:
    """Compiler flags as a list: a string is split like a shell would."""
    if compiler_args is None:
        return []
    if isinstance(compiler_args, str):
        return shlex.split(compiler_args)
    return [str(a) for a in compiler_args]


def _flag_value(args: list[str], names: Sequence[str], what: str) -> str | None:
    """The value given to any of ``names`` (``--flag v`` or ``--flag=v``), or None."""
    for i, arg in enumerate(args):
        for name in names:
            if arg == name:
                if i + 1 >= len(args):
                    raise CompileError(f"compiler args end with {name} but give no value ({what})")
                return args[i + 1]
            if arg.startswith(name + "="):
                return arg.split("=", 1)[1]
    return None


def logical_nc_config(target: str, compiler_args: str | Sequence[str] | None, lnc: int | None = None) -> int | None:
    """The logical NeuronCore config a compile uses: trn2/trn3 (default 2), None for other targets.

    ``lnc`` and an LNC flag in ``compiler_args`` must agree and be 1 or 2 (neuronx-cc's choices).
    As neuronx-cc does: ``-lnc 1`` is accepted on trn1 and anything else there is NCC_EARG001 ("On
    trn1, only lnc=1 is supported", SDK compiler/error-codes/EARG001.rst:18-21); other chips take
    none ("LNC applies only to Trn2 and Trn3 instances", SDK logical-nc-config page :14).
    """
    given = _flag_value(normalize_compiler_args(compiler_args), LNC_FLAGS, "1 or 2")
    if given is not None:
        if not given.isdigit() or int(given) not in LNC_VALUES:
            raise CompileError(f"compiler args give logical NeuronCore config {given!r}; use 1 or 2")
        if lnc is not None and int(given) != lnc:
            raise CompileError(f"lnc={lnc} contradicts the compiler args' logical NeuronCore config {given}")
        lnc = int(given)
    if target not in DEFAULT_LNC:
        if lnc is None or (lnc == 1 and target in _LNC_ONE_ONLY):
            return None
        if target in _LNC_ONE_ONLY:
            raise CompileError(
                f"lnc={lnc} on {target}: neuronx-cc refuses it (NCC_EARG001: on trn1 only lnc=1 is "
                "supported); LNC 2 is a trn2/trn3 setting"
            )
        raise CompileError(f"a logical NeuronCore config (lnc={lnc}) is a trn2/trn3 setting; {target} takes none")
    if lnc is None:
        return DEFAULT_LNC[target]
    if lnc not in LNC_VALUES:
        raise CompileError(f"lnc={lnc}: {target} runs at a logical NeuronCore config of 1 or 2")
    return lnc


def neuronx_trace_arguments(
    target: str,
    compiler_args: str | Sequence[str] | None,
    compiler_workdir: str | os.PathLike | None,
    has_device: bool,
    lnc: int | None = None,
) -> dict[str, Any]:
    """Keyword arguments for ``torch_neuronx.trace`` (the PyTorch/XLA library: inf2/trn1 only).

    ``--target <target>`` always (added unless already given): with a device the compiler would
    otherwise compile for the host's chip. No device => also ``cpu_backend=True``. A ``--target``
    for another chip is refused rather than compiled for the wrong hardware, and an LNC flag as
    neuronx-cc would refuse it (`logical_nc_config`).
    """
    args = normalize_compiler_args(compiler_args)
    if target not in XLA_TARGETS:
        raise CompileError(
            f"torch_neuronx.trace is the PyTorch/XLA library's call, for {'/'.join(XLA_TARGETS)}; "
            f"{target} compiles through TorchNeuron (Neuron no longer supports PyTorch/XLA inference "
            "on Trn2/Trn3 from release 2.34.0)"
        )
    given = _flag_value(args, ("--target",), "inf2, trn1, trn1n")
    if given is not None and given not in _COMPILER_TARGETS[target]:
        raise CompileError(
            f"compiler args say --target {given} but the target is {target}; "
            f"drop --target or use {' or '.join(_COMPILER_TARGETS[target])}"
        )
    logical_nc_config(target, args, lnc)  # refuses what neuronx-cc refuses; inf2/trn1 have no LNC to add
    if given is None:
        args += ["--target", target]
    kwargs: dict[str, Any] = {"compiler_args": args}
    if not has_device:
        kwargs["cpu_backend"] = True
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
    """``torch.neuron.trace`` (neuron-cc; compiles on any machine). The example inputs go as a
    tuple, the documented type (SDK torch_neuron.trace: "A tuple of example inputs")."""
    neuron = import_sdk("inf1")
    kwargs: dict[str, Any] = {
        "compiler_args": normalize_compiler_args(compiler_args),
        "dynamic_batch_size": dynamic_batch_size,
    }
    if compiler_workdir is not None:
        kwargs["compiler_workdir"] = str(compiler_workdir)
    return neuron.trace(model, tuple(inputs), **kwargs)


def trace_neuronx(
    model: Any,
    inputs: tuple,
    *,
    target: str,
    compiler_args: str | Sequence[str] | None = None,
    compiler_workdir: str | os.PathLike | None = None,
    dynamic_batch_size: bool = True,
    has_device: bool | None = None,
    lnc: int | None = None,
) -> Any:
    """``torch_neuronx.trace`` (neuronx-cc), then ``dynamic_batch`` for variable batch sizes, then
    ``lazy_load`` so the saved trace is loaded once, by DataParallel, instead of loaded, unloaded
    and loaded again (SDK api-torch-neuronx-async-lazy-load.rst:34-37: call it after trace, before
    ``torch.jit.save``)."""
    has_device = has_neuron_device() if has_device is None else has_device
    kwargs = neuronx_trace_arguments(target, compiler_args, compiler_workdir, has_device, lnc)
    neuronx = import_sdk(target, has_device=has_device)
    traced = neuronx.trace(model, tuple(inputs), **kwargs)
    if dynamic_batch_size:
        neuronx.dynamic_batch(traced)
    neuronx.lazy_load(traced)
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


def run_compile(
    work: Callable[[], None],
    *,
    target: str,
    message: str,
    isolate: bool,
    emit: Log,
    progress: Callable[[int, int, str], None] | None,
    total: int,
    cancel: Any,
) -> float:
    """Run ``work`` (the SDK call that writes the artifact) isolated in a child when ``isolate``, with
    its output streamed to ``emit``, a progress heartbeat and cancel; else in-process with its output
    captured. Returns the seconds it took; SDK failures come back as `CompileError`."""
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
            except Exception as err:  # noqa: BLE001 - the SDK and the user's model may raise anything
                raise CompileError(f"{target} compile failed: {type(err).__name__}: {err}") from err
    return time.perf_counter() - start


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
    lnc: int | None = None,
) -> Artifact:
    """CPU trace (always, so the model can be served and checked here), then the Neuron compile.

    The SDK is imported and the arguments checked before anything is written. ``lnc``: the
    logical NeuronCore config (trn2/trn3: 1 or 2, default 2; trn1: 1 only), recorded in the
    artifact's ``extra``. trn2/trn3 export a program for TorchNeuron (`workbench.compiler.torchneuron`),
    compiled here on the example inputs only when a device is here.
    """
    import torch

    if target not in NEURON_TARGETS:
        raise ValueError(f"unknown Neuron target {target!r}; use one of {', '.join(NEURON_TARGETS)}")
    has_device = has_neuron_device() if has_device is None else has_device
    dynamic = dynamic_batch_size and batch_dim
    chosen_lnc = logical_nc_config(target, compiler_args, lnc)
    native = target in TORCHNEURON_TARGETS
    if target == "inf1":
        import_sdk("inf1")
        call_args = {"compiler_args": normalize_compiler_args(compiler_args)}
    elif native:
        call_args = {"compiler_args": torchneuron.check_compiler_args(normalize_compiler_args(compiler_args))}
        sdk = import_sdk(target, has_device=has_device)
    else:
        call_args = neuronx_trace_arguments(target, compiler_args, compiler_workdir, has_device, lnc)
        import_sdk(target, has_device=has_device)
    total = 6
    cpu = compile_cpu(
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
        total_steps=total,
    )
    if dynamic and cpu.dynamic_batch is False and log is not None:
        log(
            f"{target}: WARNING the CPU trace shows the model bakes its batch size in; "
            "the Neuron artifact will not serve other batch sizes correctly either"
        )

    lines: list[str] = []

    def emit(line: str) -> None:
        lines.append(line)
        if log is not None:
            log(line)

    inputs = check_inputs(example_inputs, batch_dim=batch_dim, input_names=input_names)
    compiler = "neuron-cc" if target == "inf1" else "neuronx-cc"
    message = f"{target}: compiling with {compiler} {' '.join(call_args['compiler_args'])}".rstrip()
    if native:
        message = f"{target}: exporting for TorchNeuron {getattr(sdk, '__version__', '')}".rstrip()
    check_cancel(cancel)
    if target == "inf1":
        emit(f"{target}: NOTE {OUT_OF_SUPPORT['inf1']}")
    no_device = (
        f" (no device: it compiles on the first call on the Trn host; {torchneuron.COMPILE_ONLY_UNVERIFIED})"
        if native
        else " (no device: cpu_backend=True)"
    )
    emit(message + ("" if has_device or target == "inf1" else no_device))
    if progress is not None:
        progress(4, total, message)

    def work() -> None:
        was_training = getattr(model, "training", False)
        model.eval()
        try:
            with torch.no_grad():
                if target == "inf1":
                    traced = trace_inf1(
                        model,
                        inputs,
                        compiler_args=compiler_args,
                        compiler_workdir=compiler_workdir,
                        dynamic_batch_size=dynamic,
                    )
                else:
                    traced = trace_neuronx(
                        model,
                        inputs,
                        target=target,
                        compiler_args=compiler_args,
                        compiler_workdir=compiler_workdir,
                        dynamic_batch_size=dynamic,
                        has_device=has_device,
                        lnc=lnc,
                    )
        finally:
            model.train(was_training)
        atomic_write(path, script_bytes(traced))

    exported_dynamic = True
    if native:
        program, exported_dynamic = torchneuron.save_program(model, tuple(inputs), dynamic, path, target, emit)
        work = torchneuron.device_compile(program, tuple(inputs), target)
    seconds = 0.0
    if has_device or not native:
        try:
            seconds = run_compile(
                work,
                target=target,
                message=message,
                isolate=isolate,
                emit=emit,
                progress=progress,
                total=total,
                cancel=cancel,
            )
        except BaseException:
            if native:
                path.unlink(missing_ok=True)  # the exported program does not stay behind a failed compile
            raise
    extra: dict[str, Any] = {"cpu_backend": bool(call_args.get("cpu_backend", False)), "has_device": has_device}
    if native:
        extra = {
            "format": torchneuron.ARTIFACT_FORMAT,
            "backend": "neuron",
            "has_device": has_device,
            "compiled_example_shape": has_device,
        }
    if chosen_lnc is not None:
        extra["lnc"] = chosen_lnc
    if target == "inf1" and any(_CPU_FALLBACK in line for line in lines):
        extra["cpu_fallback"] = True  # torch.neuron.trace returned a CPU trace: nothing runs on Neuron
        emit(
            f"{target}: WARNING nothing in this model was placed on a NeuronCore; the artifact is a CPU trace "
            "(torch-neuron places only runs of at least minimum_segment_size=2 supported operators: issue #827)"
        )
    emit(f"{target}: saved {path}")
    if progress is not None:
        progress(5, total, f"{target}: saved {path}")
    versions = {k: v for k, v in installed_versions(("torch", *TARGET_PACKAGES[target])).items() if v}
    versions.setdefault("torch", torch.__version__)
    if native:
        versions.setdefault("torch-neuronx", str(getattr(sdk, "__version__", "")))
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
        # a batch size baked into the graph (or the exported program) stays baked in
        dynamic_batch=dynamic and bool(cpu.dynamic_batch) and exported_dynamic,
        operator_counts=cpu.operator_counts,
        extra=extra,
        cpu_artifact=cpu,
    )
