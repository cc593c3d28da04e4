"""TensorFlow SavedModels: their interface, and compiles through tensorflow-neuron(x).

Upstream's generator read a SavedModel's graph tensor names (``serving_default_x:0``) into
config.pbtxt, while its model.py feeds the signature by KEY, so auto-detected configs never
matched; it also kept the ``-1`` batch dim, doubling it under max_batch_size > 0. Here the spec
comes from the signature keys, with the batch dim dropped when asked, read from the
``saved_model.pb`` protobuf itself so a Neuron-compiled SavedModel can be described on a machine
that cannot load its Neuron ops. On the CPU a SavedModel is served as it is.

A Neuron compile traces the loaded signature ConcreteFunction with a dict of example inputs keyed by
its input names: tensorflow-neuron(x) calls ``func(x)`` for a tensor or list, ``func(*x)`` for a
tuple and feeds a ConcreteFunction from a dict by key (SDK "TensorFlow Neuron(x) tracing API";
aws-neuron-tensorflow ``_trace.py`` ``_func_to_concrete_func``, ``_get_feed_dict``). The compiled
SavedModel's signature keys come from those example inputs, so they are read back and compared
with the source's before the artifact is described. A batch dim only stays variable when
``NEURON_CC_FLAGS`` holds ``--dynamic-batch-size`` (SDK "Special Flags").
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypedDict

import numpy as np

from workbench.compiler.artifact import Artifact, ArtifactError, sidecar_path
from workbench.compiler.cpu import CompileError
from workbench.compiler.isolation import exit_with_parent, run_command_isolated
from workbench.compiler.neuron import normalize_compiler_args
from workbench.spec import ModelSpec, SpecError, TensorSpec, parse_dtype
from workbench.system import FRAMEWORK_TARGETS, OUT_OF_SUPPORT, TARGET_PACKAGES, MissingSDKError, installed_versions
from workbench.tasks import check_cancel

__all__ = ["TF_TARGETS", "spec_from_saved_model", "compile_saved_model"]

TF_TARGETS = FRAMEWORK_TARGETS["tensorflow"]
_SDK_MODULES = {"inf1": "tensorflow.neuron", "inf2": "tensorflow_neuronx", "trn1": "tensorflow_neuronx"}
# tracing flags tensorflow-neuron(x) read from NEURON_CC_FLAGS (SDK "Special Flags"); the docs say
# --extract-weights does not work together with --dynamic-batch-size
_DYNAMIC_BATCH_FLAG = "--dynamic-batch-size"
_EXTRACT_WEIGHTS_FLAG = "--extract-weights"


def _require_tensorflow() -> Any:
    try:
        import tensorflow as tf
    except ImportError:
        raise MissingSDKError("tensorflow", list(TARGET_PACKAGES["tensorflow"])) from None
    return tf


def _read_saved_model(path: Path) -> Any:
    from google.protobuf import text_format
    from tensorflow.core.protobuf import saved_model_pb2

    proto = saved_model_pb2.SavedModel()
    if (path / "saved_model.pb").is_file():
        proto.ParseFromString((path / "saved_model.pb").read_bytes())
    elif (path / "saved_model.pbtxt").is_file():
        text_format.Parse((path / "saved_model.pbtxt").read_text(), proto)
    else:
        raise ArtifactError(f"{path}: not a SavedModel folder (no saved_model.pb)")
    return proto


def spec_from_saved_model(
    path: str | os.PathLike,
    tag_set: str = "serve",
    signature_def_key: str = "serving_default",
    drop_batch_dim: bool = True,
) -> ModelSpec:
    """Inputs and outputs of a SavedModel signature, named by signature KEY, sorted by key.

    ``tag_set`` is comma-separated like upstream's flag (``serve`` or ``serve,gpu``).
    """
    tf = _require_tensorflow()
    path = Path(path)
    proto = _read_saved_model(path)
    tags = {t.strip() for t in tag_set.split(",") if t.strip()}
    graphs = [g for g in proto.meta_graphs if set(g.meta_info_def.tags) == tags]
    if not graphs:
        have = [",".join(sorted(g.meta_info_def.tags)) for g in proto.meta_graphs]
        raise SpecError(f"{path}: no MetaGraph with tags {tag_set!r} (has {have})")
    signatures = graphs[0].signature_def
    if signature_def_key not in signatures:
        have = sorted(k for k in signatures if not k.startswith("__"))
        raise SpecError(f"{path}: no signature {signature_def_key!r} (has {have})")
    signature = signatures[signature_def_key]

    def tensors(infos: Any, kind: str) -> tuple[TensorSpec, ...]:
        out = []
        for key in sorted(infos):
            info = infos[key]
            where = f"{kind} {key!r} of signature {signature_def_key!r}"
            if info.tensor_shape.unknown_rank:
                raise SpecError(f"{where} has an unknown rank; re-export it with a fixed rank")
            dims = [d.size if d.size >= 0 else -1 for d in info.tensor_shape.dim]
            if drop_batch_dim:
                if len(dims) < 2:
                    raise SpecError(
                        f"{where} has dims {dims}: no batch dim to drop plus one more; "
                        "use drop_batch_dim=False (max_batch_size 0)"
                    )
                dims = dims[1:]
            elif not dims:
                raise SpecError(f"{where} is a scalar; Triton tensors need at least one dim")
            try:
                dtype = parse_dtype(tf.dtypes.as_dtype(info.dtype).name)
            except SpecError as err:
                raise SpecError(f"{where}: {err}") from None
            out.append(TensorSpec(key, dtype, tuple(dims)))
        return tuple(out)

    return ModelSpec(tensors(signature.inputs, "input"), tensors(signature.outputs, "output"))


@contextlib.contextmanager
def _neuron_cc_flags(flags: list[str]):
    """tensorflow-neuron(x) take compiler flags from NEURON_CC_FLAGS, not from an argument."""
    old = os.environ.get("NEURON_CC_FLAGS")
    if flags:
        os.environ["NEURON_CC_FLAGS"] = " ".join(flags)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("NEURON_CC_FLAGS", None)
        else:
            os.environ["NEURON_CC_FLAGS"] = old


def compile_saved_model(
    saved_model: str | os.PathLike,
    target: str = "cpu",
    *,
    out_dir: str | os.PathLike | None = None,
    name: str | None = None,
    example_inputs: Sequence[Any] | None = None,
    batch_size: int = 1,
    tag_set: str = "serve",
    signature_def_key: str = "serving_default",
    batch_dim: bool = True,
    compiler_args: str | Sequence[str] | None = None,
    overwrite: bool = False,
    isolate: bool = True,
    progress: Callable[[int, int, str], None] | None = None,
    cancel: Any = None,
    log: Callable[[str], None] | None = None,
) -> Artifact:
    """Describe (cpu) or compile (inf1: ``tfn.trace``; inf2/trn1: ``tensorflow_neuronx.trace``) a SavedModel.

    The CPU artifact is the SavedModel itself (its sidecar is written beside it). A Neuron compile
    writes ``out_dir/<name>.<target>.savedmodel/`` and keeps the source as its CPU twin.
    ``example_inputs`` default to seeded inputs of ``batch_size`` rows in signature-key order.
    With ``batch_dim``, ``--dynamic-batch-size`` is added to the compiler flags (unless
    ``--extract-weights`` is given, which the SDK does not combine with it); the artifact's
    ``dynamic_batch`` says whether other batch sizes are served.
    """
    if target not in TF_TARGETS:
        raise ValueError(f"unknown target {target!r}; use one of {', '.join(TF_TARGETS)}")
    source = Path(saved_model)
    spec = spec_from_saved_model(source, tag_set, signature_def_key, drop_batch_dim=batch_dim)
    versions = {
        k: v
        for k, v in installed_versions(
            ("tensorflow", "tensorflow-cpu", "tensorflow-neuron", "tensorflow-neuronx")
        ).items()
        if v
    }
    extra = {"tag_set": tag_set, "signature_def_key": signature_def_key}
    cpu = Artifact(
        path=str(source.resolve()),
        target="cpu",
        spec=spec,
        batch_dim=batch_dim,
        framework="tensorflow",
        name=name or source.name,
        sdk_versions=versions,
        extra=dict(extra),
        size_bytes=sum(p.stat().st_size for p in source.rglob("*") if p.is_file()),
    )
    if target == "cpu":
        if cpu.sidecar.exists() and not overwrite:
            raise ArtifactError(f"{cpu.sidecar} already exists; pass overwrite=True to replace it")
        cpu.write_sidecar()
        return cpu

    if out_dir is None:
        raise ValueError("a Neuron compile needs out_dir for the compiled SavedModel")
    name = name or source.name
    dest = Path(out_dir) / f"{name}.{target}.savedmodel"
    taken = [str(p) for p in (dest, sidecar_path(dest)) if p.exists()]
    if taken and not overwrite:
        raise ArtifactError(f"{', '.join(taken)} already exist(s); pick another name or pass overwrite=True")
    try:
        importlib.import_module(_SDK_MODULES[target])
    except (ImportError, OSError, RuntimeError) as err:
        raise MissingSDKError(
            f"tensorflow-{target}",
            list(TARGET_PACKAGES[f"tensorflow-{target}"]),
            f"import {_SDK_MODULES[target]} failed: {err}",
        ) from None
    flags = normalize_compiler_args(compiler_args)
    extract_weights = any(f == _EXTRACT_WEIGHTS_FLAG or f.startswith(_EXTRACT_WEIGHTS_FLAG + "=") for f in flags)
    if batch_dim and not extract_weights and _DYNAMIC_BATCH_FLAG not in flags:
        flags.append(_DYNAMIC_BATCH_FLAG)
    dynamic = _DYNAMIC_BATCH_FLAG in flags
    if dynamic and extract_weights:
        raise CompileError(
            f"{_DYNAMIC_BATCH_FLAG} and {_EXTRACT_WEIGHTS_FLAG} do not work together "
            "(tensorflow-neuron(x) Special Flags); drop one"
        )
    if example_inputs is None:
        example_inputs = spec.example_inputs(batch_size if batch_dim else None)
    if len(example_inputs) != len(spec.inputs):
        raise SpecError(
            f"{len(example_inputs)} example input(s) for the signature's {len(spec.inputs)} "
            f"inputs {[t.name for t in spec.inputs]}"
        )
    lines: list[str] = []

    def emit(line: str) -> None:
        lines.append(line)
        if log is not None:
            log(line)

    check_cancel(cancel)
    emit(f"{target}: NOTE {OUT_OF_SUPPORT['tensorflow']}")
    message = f"{target}: {_SDK_MODULES[target]}.trace of {source} ({signature_def_key})"
    emit(message + (f" with NEURON_CC_FLAGS={' '.join(flags)}" if flags else ""))
    if progress is not None:
        progress(0, 2, message)
    made_dir = not Path(out_dir).exists()
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=out_dir))
    request: _TraceRequest = {
        "source": str(source),
        "tags": sorted({t.strip() for t in tag_set.split(",") if t.strip()}),
        "signature": signature_def_key,
        "keys": [t.name for t in spec.inputs],
        "target": target,
        "flags": flags,
        "inputs": str(staging / "inputs.npz"),
        "dest": str(staging / "model"),
        "error": str(staging / "error.txt"),
        "parent": os.getpid(),
    }
    np.savez(request["inputs"], *[np.asarray(a) for a in example_inputs])
    start = time.perf_counter()
    try:
        if isolate:
            run_command_isolated(
                [sys.executable, "-m", "workbench.compiler.tensorflow", json.dumps(request)],
                error_path=Path(request["error"]),
                log=emit,
                cancel=cancel,
            )
        else:
            try:
                _trace_and_save(request)
            except (ImportError, OSError, RuntimeError, ValueError, TypeError) as err:
                raise CompileError(f"{target} compile failed: {type(err).__name__}: {err}") from err
        check_cancel(cancel)
        compiled_spec = _compiled_spec(staging / "model", spec, signature_def_key, batch_dim)
        if dest.exists():
            shutil.rmtree(dest)
        os.replace(staging / "model", dest)
    except BaseException:
        if made_dir and not any(p for p in Path(out_dir).iterdir() if p != staging):
            shutil.rmtree(out_dir, ignore_errors=True)
        raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    emit(f"{target}: saved {dest}")
    if progress is not None:
        progress(2, 2, f"{target}: saved {dest}")
    artifact = Artifact(
        path=str(dest),
        target=target,
        spec=compiled_spec,
        batch_dim=batch_dim,
        framework="tensorflow",
        name=name,
        sdk_versions=versions,
        compiler_args=flags,
        compile_seconds=time.perf_counter() - start,
        size_bytes=sum(p.stat().st_size for p in dest.rglob("*") if p.is_file()),
        log="\n".join(lines),
        dynamic_batch=dynamic if batch_dim else None,
        extra={**extra, "tag_set": "serve", "signature_def_key": "serving_default"},
        cpu_artifact=cpu,
    )
    artifact.write_sidecar()
    return artifact


def _compiled_spec(path: Path, source: ModelSpec, signature_def_key: str, batch_dim: bool) -> ModelSpec:
    """The compiled SavedModel's own ``serving_default`` interface, which must name the same tensors
    as the source signature's (the SDK derives it from the example inputs, so it is checked, not
    assumed)."""
    try:
        compiled = spec_from_saved_model(path, drop_batch_dim=batch_dim)
    except (SpecError, ArtifactError) as err:
        raise CompileError(f"the compiled SavedModel cannot be described: {err}") from None
    for kind, ours, theirs in (
        ("inputs", source.inputs, compiled.inputs),
        ("outputs", source.outputs, compiled.outputs),
    ):
        if [t.name for t in ours] != [t.name for t in theirs] or [t.dtype for t in ours] != [t.dtype for t in theirs]:
            raise CompileError(
                f"the compiled SavedModel's serving_default {kind} {[t.upstream() for t in theirs]} differ from "
                f"signature {signature_def_key!r}'s {[t.upstream() for t in ours]}"
            )
    return compiled


class _TraceRequest(TypedDict):
    """What the compile child is asked to do (sent to it as JSON): paths are strings."""

    source: str
    tags: list[str]
    signature: str
    keys: list[str]
    target: str
    flags: list[str]
    inputs: str
    dest: str
    error: str
    parent: int


def _trace_and_save(request: _TraceRequest) -> None:
    """Trace the loaded signature with the target's SDK, keyed example inputs, then save it."""
    tf = _require_tensorflow()
    sdk = importlib.import_module(_SDK_MODULES[request["target"]])
    loaded = tf.saved_model.load(request["source"], tags=request["tags"])  # kept: it owns the variables
    signature = loaded.signatures[request["signature"]]
    with np.load(request["inputs"]) as stored:
        tensors = {key: tf.constant(stored[f"arr_{i}"]) for i, key in enumerate(request["keys"])}
    with _neuron_cc_flags(request["flags"]):
        compiled = sdk.trace(signature, tensors)
    if compiled is signature or not hasattr(compiled, "save"):
        # the SDK returns the function itself when the graph has no input placeholder (_trace.py)
        raise CompileError("tensorflow-neuron(x) returned the function uncompiled (no input placeholders)")
    ratio = getattr(compiled, "on_neuron_ratio", None)
    if ratio is not None:
        print(
            f"{request['target']}: {float(ratio) * 100:.1f}% of the operators run on Neuron (on_neuron_ratio)",
            flush=True,
        )
    compiled.save(request["dest"])


def _main(argv: list[str]) -> int:
    """Entry of the compile child (``python -m workbench.compiler.tensorflow REQUEST_JSON``): a fresh
    interpreter, because TensorFlow's runtime does not survive a fork."""
    request: _TraceRequest = json.loads(argv[0])
    exit_with_parent(request["parent"])
    try:
        _trace_and_save(request)
    except BaseException:
        Path(request["error"]).write_text(traceback.format_exc())
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))


def tiny_saved_model(path: str | os.PathLike) -> Path:
    """A TF2 SavedModel of upstream's add_sub QA model: inputs ``a``, ``b`` [N,4] FP32 -> ``sum``, ``diff``."""
    import tensorflow as tf

    class AddSub(tf.Module):
        @tf.function(
            input_signature=[
                tf.TensorSpec([None, 4], tf.float32, name="a"),
                tf.TensorSpec([None, 4], tf.float32, name="b"),
            ]
        )
        def serve(self, a, b):
            return {"sum": a + b, "diff": a - b}

    path = Path(path)
    if path.exists():
        raise FileExistsError(f"{path} already exists; choose a new folder for the SavedModel")
    module = AddSub()
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.serve})
    return path


def saved_model_reference(path: str | os.PathLike, spec: Any, signature: str = "serving_default"):
    """The SavedModel run in-process: numpy inputs in the spec's input order -> outputs in its output order."""
    import tensorflow as tf

    function = tf.saved_model.load(str(path)).signatures[signature]
    inputs = [t.name for t in spec.by_index("input")]
    outputs = [t.name for t in spec.by_index("output")]

    def run(arrays: list[np.ndarray]) -> list[np.ndarray]:
        result = function(**{name: tf.constant(a) for name, a in zip(inputs, arrays)})
        return [result[name].numpy() for name in outputs]

    return run
