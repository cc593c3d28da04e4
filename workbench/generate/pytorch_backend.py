"""Triton's PyTorch backend: config.pbtxt for its two layouts, and how to serve them on this machine.

Two layouts share ``backend: "pytorch"``:

* **TorchScript** (LibTorch runtime): ``<name>/<v>/model.pt`` is a TorchScript archive; generated
  configs name tensors ``NAME__i`` (the index is the position in ``forward``; LibTorch also takes
  forward-argument names or config order, which read-back accepts); the parameters are the LibTorch
  switches (``DISABLE_OPTIMIZED_EXECUTION``, ``INFERENCE_MODE``, thread counts, JIT flags...).
* **PyTorch 2** (``runtime: "model.py"``): ``<name>/<v>/model.py`` holds a ``torch.nn.Module`` class,
  ``<name>/<v>/model.pt`` optionally its state dict; the parameters are ``NUM_THREADS``,
  ``NUM_INTEROP_THREADS`` and ``TORCH_COMPILE_OPTIONAL_PARAMETERS`` (JSON for ``torch.compile``).

Triton reports a bad value in these only when it loads the model, and some mistakes (``"yes"`` for
a boolean, ``0`` threads, an unknown ``torch.compile`` key) are rejected there with terse messages
or silently ignored. Here every value is checked when the config is built or read, and each error
names the key.

Serving here: the tritonserver in the nvidia-pytriton wheel has no LibTorch backend. What is written
for the user is always the real layout (``model_repository/<name>``, ready for a Triton container);
to serve it locally a *twin* is generated from it in a separate repository: the same config with
``backend: "python"``, the user's files copied next to ``templates/pytorch_runtime.py`` as
``model.py``, which honours the same parameters. A separate repository keeps the user's directory
untouched and loadable by a real Triton, and keeps the twin out of the user's repository (Triton
would otherwise try to load both). Where a tritonserver's backend directory has a ``pytorch``
folder, the real layout is served as is. ``ServingPlan.served_as`` says which one is running.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import io
import json
import os
import shutil
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

from tritonclient.grpc import model_config_pb2

from workbench.generate.config import (
    ConfigError,
    ModelConfig,
    build_config,
    parameters_of,
    read_config,
    spec_from_config,
    to_text,
    validate_config,
)
from workbench.generate.repository import FileContent, WriteResult, write_model_dir
from workbench.spec import ModelSpec, SpecError

__all__ = [
    "PyTorchConfigError",
    "TORCHSCRIPT",
    "PYTORCH2",
    "SERVED_AS_LIBTORCH",
    "SERVED_AS_PYTHON",
    "INSTANCE_KINDS",
    "Parameter",
    "TORCHSCRIPT_PARAMETERS",
    "PYTORCH2_PARAMETERS",
    "TORCH_COMPILE_KEYS",
    "SWEEP_SETTINGS",
    "layout_of",
    "build_pytorch_config",
    "pytorch_problems",
    "check_pytorch_config",
    "parse_torch_compile_parameters",
    "torchscript_files",
    "write_torchscript_model",
    "pytorch2_files",
    "write_pytorch2_model",
    "load_pytorch2_module",
    "libtorch_layouts",
    "emulation_config",
    "write_emulation_twin",
    "ServingPreview",
    "preview_serving",
    "ServingPlan",
    "plan_serving",
    "sweep_variant",
    "sweep_grid",
    "variant_label",
]

TORCHSCRIPT = "torchscript"
PYTORCH2 = "pytorch2"
SERVED_AS_LIBTORCH = "PyTorch backend (LibTorch)"
SERVED_AS_PYTHON = "Python backend emulating the PyTorch backend"
INSTANCE_KINDS = ("KIND_GPU", "KIND_CPU", "KIND_MODEL")
RUNTIME_TEMPLATE = Path(__file__).parent / "templates" / "pytorch_runtime.py"
# Name of the user's PyTorch 2 module file inside the twin (its model.py is the runtime).
TWIN_MODULE_FILE = "pytorch_module.py"


class PyTorchConfigError(ConfigError):
    """A PyTorch-backend config or layout that Triton would refuse or misserve; names the key."""


@dataclass(frozen=True)
class Parameter:
    """One config.pbtxt parameter the backend reads: ``kind`` is ``bool``, ``count`` (an integer
    >= 1) or ``json``; ``default`` is what the backend does when the key is absent."""

    key: str
    kind: str
    default: str
    meaning: str


def _params(*items: Parameter) -> dict[str, Parameter]:
    return {p.key: p for p in items}


TORCHSCRIPT_PARAMETERS = _params(
    Parameter("DISABLE_OPTIMIZED_EXECUTION", "bool", "false",
              "skip TorchScript's graph optimisations (long first-call warm-up; sometimes slower)"),
    Parameter("INFERENCE_MODE", "bool", "true", "run under torch.inference_mode (no autograd bookkeeping)"),
    Parameter("DISABLE_CUDNN", "bool", "false", "turn cuDNN off (GPU only)"),
    Parameter("ENABLE_WEIGHT_SHARING", "bool", "false",
              "instances on the same device share one copy of the weights (not for stateful models)"),
    Parameter("ENABLE_CACHE_CLEANING", "bool", "false", "empty the CUDA cache after every execution (GPU only)"),
    Parameter("INTER_OP_THREAD_COUNT", "count", "all cores", "inter-op thread pool size (process-wide)"),
    Parameter("INTRA_OP_THREAD_COUNT", "count", "all cores", "intra-op threads (process-wide)"),
    Parameter("ENABLE_JIT_EXECUTOR", "bool", "true", "use the JIT's profiling executor"),
    Parameter("ENABLE_JIT_PROFILING", "bool", "true", "use the JIT's profiling mode"),
    # The seed page announces three extra optimisation switches but lists two; the backend's
    # third is the tensor-expression fuser.
    Parameter("ENABLE_TENSOR_FUSER", "bool", "true", "use the JIT's tensor-expression fuser"),
)

PYTORCH2_PARAMETERS = _params(
    Parameter("NUM_THREADS", "count", "1", "torch.set_num_threads: intra-op threads on the CPU"),
    Parameter("NUM_INTEROP_THREADS", "count", "1", "torch.set_num_interop_threads: inter-op threads on the CPU"),
    Parameter("TORCH_COMPILE_OPTIONAL_PARAMETERS", "json", "{}",
              "keyword arguments for torch.compile, as a JSON object"),
    # The PyTorch 2 runtime runs inside the Python backend, which reads this one key itself.
    Parameter("EXECUTION_ENV_PATH", "path", "", "conda-pack'ed Python environment for the Python backend"),
)

# torch.compile keyword -> accepted JSON types (None = JSON null).
TORCH_COMPILE_KEYS: dict[str, tuple[type | None, ...]] = {
    "fullgraph": (bool,),
    "dynamic": (bool, None),
    "backend": (str,),
    "mode": (str,),
    "options": (dict,),
    "disable": (bool,),
}
TORCH_COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")

# Spellings LibTorch's ParseBoolValue accepts (case-insensitive).
_TRUE = ("true", "on", "1")
_FALSE = ("false", "off", "0")


def layout_of(cfg: ModelConfig) -> str:
    """``pytorch2`` when the config asks for the Python runtime, else ``torchscript``."""
    return PYTORCH2 if cfg.runtime == "model.py" else TORCHSCRIPT


def _parameter_table(layout: str) -> dict[str, Parameter]:
    return PYTORCH2_PARAMETERS if layout == PYTORCH2 else TORCHSCRIPT_PARAMETERS


def _as_string(value: Any) -> str:
    """Config parameters are strings; Python values get the spelling the backend reads."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True)
    return str(value)


def build_pytorch_config(
    name: str,
    spec: ModelSpec,
    *,
    layout: str = TORCHSCRIPT,
    max_batch_size: int = 0,
    dynamic_batching: bool = False,
    preferred_batch_sizes: Iterable[int] = (),
    max_queue_delay_us: int | None = None,
    instance_kind: str = "KIND_CPU",
    instance_count: int = 1,
    gpus: Iterable[int] = (),
    parameters: Mapping[str, Any] | None = None,
) -> ModelConfig:
    """A checked ModelConfig for either layout. Parameter values may be Python values (``True``,
    ``4``, a dict for ``TORCH_COMPILE_OPTIONAL_PARAMETERS``) or the strings Triton stores."""
    if layout not in (TORCHSCRIPT, PYTORCH2):
        raise PyTorchConfigError(f"layout {layout!r} is not {TORCHSCRIPT!r} or {PYTORCH2!r}")
    if instance_kind not in INSTANCE_KINDS:
        raise PyTorchConfigError(
            f"instance kind {instance_kind!r} is not one the PyTorch backend supports: {', '.join(INSTANCE_KINDS)}"
        )
    cfg = build_config(
        name, spec,
        max_batch_size=max_batch_size,
        dynamic_batching=dynamic_batching,
        preferred_batch_sizes=preferred_batch_sizes,
        max_queue_delay_us=max_queue_delay_us,
        instance_count=instance_count,
        kind=instance_kind,
        parameters={k: _as_string(v) for k, v in (parameters or {}).items()},
        backend="pytorch",
    )
    if layout == TORCHSCRIPT:
        try:
            spec.check_indexed_names()  # generated configs use the one convention that needs no model
        except SpecError as err:
            raise PyTorchConfigError(str(err)) from None
    if layout == PYTORCH2:
        cfg.runtime = "model.py"
    cfg.instance_group[0].gpus.extend(int(g) for g in gpus)
    if cfg.max_batch_size > 0:
        # A batched string tensor arrives as [batch, 1]; LibTorch wants a 1-D List[str], so the
        # documented reshape to [] turns it into [batch].
        for entry in list(cfg.input) + list(cfg.output):
            if entry.data_type == model_config_pb2.TYPE_STRING and list(entry.dims) == [1]:
                entry.reshape.SetInParent()
    return check_pytorch_config(cfg)


def check_pytorch_config(cfg: ModelConfig) -> ModelConfig:
    """Raise PyTorchConfigError listing every problem; return ``cfg`` when there is none."""
    problems = validate_config(cfg) + pytorch_problems(cfg)
    if problems:
        raise PyTorchConfigError("; ".join(problems))
    return cfg


def pytorch_problems(cfg: ModelConfig) -> list[str]:
    """What the PyTorch backend (or its Python runtime) would refuse or silently misread."""
    problems: list[str] = []
    if cfg.backend != "pytorch" and cfg.platform != "pytorch_libtorch":
        problems.append(f"backend is {cfg.backend or cfg.platform!r}; the PyTorch backend needs backend: \"pytorch\"")
    if cfg.runtime not in ("", "model.py"):
        problems.append(
            f"runtime {cfg.runtime!r} is not supported: leave it empty (TorchScript on LibTorch) "
            "or use \"model.py\" (PyTorch 2)"
        )
    layout = layout_of(cfg)
    problems += _instance_problems(cfg)
    problems += _tensor_problems(cfg, layout)
    for key, value in parameters_of(cfg).items():
        problems += _parameter_problems(key, value, layout)
    return problems


def _instance_problems(cfg: ModelConfig) -> list[str]:
    problems = []
    for group in cfg.instance_group:
        kind = model_config_pb2.ModelInstanceGroup.Kind.Name(group.kind)
        label = f"instance_group {group.name!r}" if group.name else "instance_group"
        # KIND_AUTO is protobuf's default when a hand-written config leaves `kind` out; Triton
        # resolves it to KIND_GPU or KIND_CPU, so it is accepted on read.
        if kind not in INSTANCE_KINDS + ("KIND_AUTO",):
            problems.append(f"{label}: kind {kind} is not supported by the PyTorch backend ({', '.join(INSTANCE_KINDS)})")
        if kind == "KIND_CPU" and len(group.gpus):
            problems.append(f"{label}: KIND_CPU cannot list gpus {list(group.gpus)}; use KIND_GPU or drop gpus")
    return problems


def _tensor_problems(cfg: ModelConfig, layout: str) -> list[str]:
    problems = []
    try:
        spec = spec_from_config(cfg)
    except (ConfigError, SpecError):
        return []  # validate_config already reported the tensors
    if layout == TORCHSCRIPT:
        # LibTorch maps inputs by forward-argument name, else by NAME__i, else by config order
        # (outputs: NAME__i, else config order). Only an all-indexed set can be checked without
        # the model: its indices must cover 0..n-1 or forward() gets a hole.
        for kind, tensors in (("input", spec.inputs), ("output", spec.outputs)):
            indices = [t.index for t in tensors]
            if None not in indices and sorted(indices) != list(range(len(indices))):
                problems.append(f"{kind} indices {sorted(indices)} of the NAME__i names must cover "
                                f"0..{len(indices) - 1} exactly: the index is the position in forward()")
    for kind, entries in (("input", cfg.input), ("output", cfg.output)):
        for entry in entries:
            if entry.data_type != model_config_pb2.TYPE_STRING:
                continue
            if layout == PYTORCH2:
                problems.append(
                    f"{kind} {entry.name!r}: TYPE_STRING is not supported by the PyTorch 2 runtime "
                    "(it passes tensors through DLPack, which has no string type); use the TorchScript layout"
                )
                continue
            shape = list(entry.reshape.shape) if entry.HasField("reshape") else list(entry.dims)
            full = ([-1] if cfg.max_batch_size > 0 else []) + shape
            if len(full) != 1:
                hint = ("dims: [1] with reshape: { shape: [] }" if cfg.max_batch_size > 0
                        else "a single dim such as dims: [-1]")
                problems.append(
                    f"{kind} {entry.name!r}: TYPE_STRING tensors must be 1-D for the PyTorch backend "
                    f"(strings travel as a List[str]); this one is {len(full)}-D {full}; use {hint}"
                )
    return problems


def _parameter_problems(key: str, value: str, layout: str) -> list[str]:
    table = _parameter_table(layout)
    if key not in table:
        other = TORCHSCRIPT_PARAMETERS if layout == PYTORCH2 else PYTORCH2_PARAMETERS
        if key in other:
            where = "the PyTorch 2 layout (runtime: \"model.py\")" if layout == TORCHSCRIPT else "the TorchScript layout"
            return [f"parameter {key} belongs to {where}; this config uses the {layout} layout, "
                    f"which reads: {', '.join(table)}"]
        return [f"parameter {key} is not read by the PyTorch backend ({layout} layout); "
                f"known keys: {', '.join(table)}"]
    spec = table[key]
    if spec.kind == "bool" and value.strip().lower() not in _TRUE + _FALSE:
        return [f"parameter {key} = {value!r} is not a boolean; use \"true\" or \"false\""]
    if spec.kind == "count":
        try:
            number = int(value.strip())
        except ValueError:
            return [f"parameter {key} = {value!r} is not an integer thread count"]
        if number < 1:
            return [f"parameter {key} = {number} must be at least 1 thread"
                    + (" (the backend silently ignores 0 and negative counts)" if layout == TORCHSCRIPT else "")]
    if spec.kind == "json":
        try:
            parse_torch_compile_parameters(value)
        except PyTorchConfigError as err:
            return [str(err)]
    return []


def parse_torch_compile_parameters(text: str | Mapping[str, Any]) -> dict[str, Any]:
    """Check ``TORCH_COMPILE_OPTIONAL_PARAMETERS`` (JSON text or a dict) and return the keyword
    arguments the runtime passes to ``torch.compile``."""
    key = "TORCH_COMPILE_OPTIONAL_PARAMETERS"
    if isinstance(text, Mapping):
        params = dict(text)
    else:
        try:
            params = json.loads(text)
        except json.JSONDecodeError as err:
            raise PyTorchConfigError(
                f"parameter {key} is not valid JSON ({err.msg} at line {err.lineno}, column {err.colno}): {text!r}"
            ) from None
    if not isinstance(params, dict):
        raise PyTorchConfigError(f"parameter {key} must be a JSON object such as {{\"disable\": true}}, got {text!r}")
    for name, value in params.items():
        if name not in TORCH_COMPILE_KEYS:
            raise PyTorchConfigError(
                f"parameter {key}: unknown torch.compile option {name!r}; allowed: {', '.join(TORCH_COMPILE_KEYS)}"
            )
        allowed = TORCH_COMPILE_KEYS[name]
        if not any(value is None if t is None else isinstance(value, t) for t in allowed):
            wanted = " or ".join("null" if t is None else {bool: "true/false", str: "a string", dict: "an object"}[t]
                                 for t in allowed)
            raise PyTorchConfigError(f"parameter {key}: {name!r} must be {wanted}, got {json.dumps(value)}")
    if "backend" in params and not params["backend"].strip():
        raise PyTorchConfigError(f"parameter {key}: 'backend' is empty; name a torch.compile backend such as \"inductor\"")
    if "mode" in params and params["mode"] not in TORCH_COMPILE_MODES:
        raise PyTorchConfigError(
            f"parameter {key}: mode {params['mode']!r} is not one of {', '.join(TORCH_COMPILE_MODES)}"
        )
    if "mode" in params and "options" in params:
        raise PyTorchConfigError(f"parameter {key}: give 'mode' or 'options', not both (torch.compile refuses both)")
    for option in params.get("options", {}):
        if not isinstance(option, str) or not option:
            raise PyTorchConfigError(f"parameter {key}: 'options' keys must be non-empty strings")
    return params


# --- writing the real layouts ---------------------------------------------------------------


def _is_torchscript_archive(path: Path) -> bool:
    """TorchScript archives are zip files with serialized ``code/``; torch.save state dicts and
    pickles have no code entries."""
    try:
        with zipfile.ZipFile(path) as archive:
            return any("/code/" in name for name in archive.namelist())
    except (zipfile.BadZipFile, OSError):
        return False


def _model_dir(repository: str | Path, cfg: ModelConfig) -> Path:
    if not cfg.name or cfg.name in (".", "..") or "/" in cfg.name:
        raise PyTorchConfigError(f"model name {cfg.name!r} cannot be a directory name")
    return Path(repository) / cfg.name


def torchscript_files(cfg: ModelConfig, model: Any, *, version: int = 1) -> dict[str, FileContent]:
    """The files of a TorchScript model directory: ``config.pbtxt`` and ``<version>/model.pt``.

    ``model`` is a scripted/traced module or the path of a saved TorchScript file; a plain
    nn.Module or a state-dict file is refused (LibTorch could not load it)."""
    check_pytorch_config(cfg)
    if layout_of(cfg) != TORCHSCRIPT:
        raise PyTorchConfigError("this config has runtime: \"model.py\" (PyTorch 2); use pytorch2_files")
    filename = cfg.default_model_filename or "model.pt"
    if isinstance(model, (str, Path)):
        source = Path(model)
        if not source.is_file():
            raise FileNotFoundError(f"TorchScript file {source} does not exist")
        if not _is_torchscript_archive(source):
            raise PyTorchConfigError(
                f"{source} is not a TorchScript archive (a state dict or pickle?); "
                "save a torch.jit.trace/torch.jit.script result with .save()"
            )
        payload: FileContent = source
    else:
        import torch

        if not isinstance(model, torch.jit.ScriptModule):
            raise PyTorchConfigError(
                f"{type(model).__name__} is not TorchScript; LibTorch needs torch.jit.trace(model, example) "
                "or torch.jit.script(model) (or use the PyTorch 2 layout for a plain nn.Module)"
            )
        _check_forward_signature(cfg, model)
        buffer = io.BytesIO()
        torch.jit.save(model, buffer)
        payload = buffer.getvalue()
    return {"config.pbtxt": to_text(cfg), f"{int(version)}/{filename}": payload}


def _check_forward_signature(cfg: ModelConfig, model: Any) -> None:
    """The config's inputs must fill forward()'s arguments: by name when every input is one of
    them (LibTorch's first rule), otherwise by count."""
    arguments = [a for a in model.forward.schema.arguments if a.name != "self"]
    names = [a.name for a in arguments]
    required = [a.name for a in arguments if not a.has_default_value()]
    inputs = [entry.name for entry in cfg.input]
    if all(name in names for name in inputs):
        missing = [name for name in required if name not in inputs]
        if missing:
            raise PyTorchConfigError(f"forward({', '.join(names)}) needs argument(s) {missing} that the config "
                                     "does not declare as inputs")
    elif not len(required) <= len(inputs) <= len(names):
        raise PyTorchConfigError(f"forward({', '.join(names)}) takes {len(required)}"
                                 + (f" to {len(names)}" if len(names) != len(required) else "")
                                 + f" tensor(s) but the config declares {len(inputs)} input(s): {', '.join(inputs)}")


def write_torchscript_model(repository: str | Path, cfg: ModelConfig, model: Any, *,
                            version: int = 1, overwrite: bool = False) -> WriteResult:
    """Write ``<repository>/<name>`` for LibTorch (see ``torchscript_files``), all or nothing; an
    existing directory is replaced only with ``overwrite=True`` and kept as a backup
    (``result.backup``, inside the repository: move it before a server loads the whole repository)."""
    files = torchscript_files(cfg, model, version=version)
    return write_model_dir(_model_dir(repository, cfg), files, overwrite=overwrite)


def _module_source(module_source: str | Path) -> tuple[str, str]:
    """(source text, where it came from) for a path or literal source."""
    if isinstance(module_source, Path) or (isinstance(module_source, str) and "\n" not in module_source
                                           and module_source.endswith(".py")):
        path = Path(module_source)
        if not path.is_file():
            raise FileNotFoundError(f"model source {path} does not exist")
        return path.read_text(encoding="utf-8"), str(path)
    return str(module_source), "model.py source"


def _state_dict_bytes(state_dict: Any) -> bytes | Path:
    import torch

    if isinstance(state_dict, (str, Path)):
        path = Path(state_dict)
        if not path.is_file():
            raise FileNotFoundError(f"state dict file {path} does not exist")
        if _is_torchscript_archive(path):
            raise PyTorchConfigError(f"{path} is a TorchScript archive, not a state dict (torch.save(model.state_dict()))")
        return path
    if isinstance(state_dict, torch.nn.Module):
        state_dict = state_dict.state_dict()
    if not isinstance(state_dict, Mapping):
        raise PyTorchConfigError(f"state_dict must be a module, a mapping or a file, got {type(state_dict).__name__}")
    buffer = io.BytesIO()
    torch.save(dict(state_dict), buffer)
    return buffer.getvalue()


def pytorch2_files(cfg: ModelConfig, module_source: str | Path, *, state_dict: Any = None,
                   version: int = 1) -> dict[str, FileContent]:
    """The files of a PyTorch 2 model directory: ``config.pbtxt``, ``<version>/model.py`` (the
    module class: a path or source text) and, when given, ``<version>/model.pt`` (its state dict:
    a module, a mapping or a torch.save file).

    The source is imported and the class the runtime would pick is built and given the state dict
    first, so a missing class, constructor arguments or mismatched weights are reported now
    instead of when Triton loads the model."""
    check_pytorch_config(cfg)
    if layout_of(cfg) != PYTORCH2:
        raise PyTorchConfigError("this config has no runtime: \"model.py\"; use torchscript_files for TorchScript")
    source, origin = _module_source(module_source)
    files: dict[str, FileContent] = {"config.pbtxt": to_text(cfg), f"{int(version)}/model.py": source}
    weights = None if state_dict is None else _state_dict_bytes(state_dict)
    if weights is not None:
        files[f"{int(version)}/model.pt"] = weights
    with tempfile.TemporaryDirectory() as scratch:
        (Path(scratch) / "model.py").write_text(source, encoding="utf-8")
        if isinstance(weights, bytes):
            (Path(scratch) / "model.pt").write_bytes(weights)
        elif isinstance(weights, Path):
            shutil.copyfile(weights, Path(scratch) / "model.pt")
        load_pytorch2_module(Path(scratch), name=f"{cfg.name} ({origin})")
    return files


def write_pytorch2_model(repository: str | Path, cfg: ModelConfig, module_source: str | Path, *,
                         state_dict: Any = None, version: int = 1, overwrite: bool = False) -> WriteResult:
    """Write ``<repository>/<name>`` in the PyTorch 2 layout (see ``pytorch2_files``), all or
    nothing; an existing directory is replaced only with ``overwrite=True`` and kept as a backup
    (``result.backup``, inside the repository: move it before a server loads the whole repository)."""
    files = pytorch2_files(cfg, module_source, state_dict=state_dict, version=version)
    return write_model_dir(_model_dir(repository, cfg), files, overwrite=overwrite)


def _defined_module_classes(source: str, origin: str) -> list[str]:
    try:
        tree = ast.parse(source, filename=origin)
    except SyntaxError as err:
        raise PyTorchConfigError(f"{origin} line {err.lineno}: {err.msg}") from None
    return [node.name for node in tree.body if isinstance(node, ast.ClassDef)]


def load_pytorch2_module(version_dir: str | Path, *, name: str = "model") -> Any:
    """Import ``model.py`` from a PyTorch 2 version folder the way Triton's runtime does (the first
    ``nn.Module`` subclass in ``dir(module)`` order, built without arguments, ``model.pt`` loaded
    as its state dict) and return the module in eval mode: the eager reference for a check.

    The runtime's rule picks alphabetically, so an *imported* class such as ``Linear`` can win over
    the one the file defines; that is refused here with the class names."""
    import torch

    version_dir = Path(version_dir)
    path = version_dir / "model.py"
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist; the PyTorch 2 layout needs <version>/model.py")
    source = path.read_text(encoding="utf-8")
    defined = _defined_module_classes(source, f"{name} model.py")
    module_name = f"_workbench_pt2_{hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:12]}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as err:
        raise PyTorchConfigError(f"{name} model.py fails to import: {type(err).__name__}: {err}") from err
    candidates = [attr for attr in dir(module)
                  if isinstance(getattr(module, attr), type) and issubclass(getattr(module, attr), torch.nn.Module)]
    if not candidates:
        raise PyTorchConfigError(f"{name} model.py defines no torch.nn.Module subclass")
    picked = candidates[0]
    if picked not in defined:
        raise PyTorchConfigError(
            f"{name} model.py: Triton's runtime takes the first nn.Module subclass in alphabetical order, "
            f"which is the imported {picked!r}, not the file's own {', '.join(c for c in candidates if c in defined) or 'class'}; "
            f"import modules (`from torch import nn`) instead of classes"
        )
    try:
        model = getattr(module, picked)()
    except TypeError as err:
        raise PyTorchConfigError(
            f"{name} model.py: class {picked} must be constructible without arguments (the runtime calls {picked}()): {err}"
        ) from None
    weights = version_dir / "model.pt"
    if weights.is_file():
        try:
            state = torch.load(weights, map_location="cpu")
        except Exception as err:  # a pickled module, not tensors: the runtime's torch.load refuses it too
            raise PyTorchConfigError(f"{name} model.pt is not a state dict torch.load can read: "
                                     f"{type(err).__name__}: {str(err).splitlines()[0]}") from None
        if not isinstance(state, Mapping):
            raise PyTorchConfigError(f"{name} model.pt holds a {type(state).__name__}, not a state dict")
        try:
            model.load_state_dict(state)
        except RuntimeError as err:
            raise PyTorchConfigError(f"{name} model.pt does not fit class {picked}: {err}") from None
    return model.eval()


# --- serving: the real backend or the Python-backend twin ---------------------------------------


def libtorch_layouts(backend_dir: str | Path | None) -> tuple[str, ...]:
    """The layouts a tritonserver with this ``--backend-directory`` serves natively: TorchScript
    when it has a ``pytorch`` backend folder, PyTorch 2 as well when that folder carries the
    Python runtime (``model.py``) and the python backend is installed."""
    if backend_dir is None:
        return ()
    pytorch = Path(backend_dir) / "pytorch"
    if not pytorch.is_dir():
        return ()
    layouts = [TORCHSCRIPT]
    if (pytorch / "model.py").is_file() and (Path(backend_dir) / "python").is_dir():
        layouts.append(PYTORCH2)
    return tuple(layouts)


def emulation_config(cfg: ModelConfig, *, gpu_available: bool | None = None) -> tuple[ModelConfig, list[str]]:
    """The twin's config for the Python backend, and notes on what differs from LibTorch.

    Tensors, batching and parameters are kept; ``PYTORCH_LAYOUT`` and ``PYTORCH_MODEL_FILENAME``
    tell the runtime what to load (``default_model_filename`` is cleared: the Python backend would
    look for its own model.py under that name)."""
    check_pytorch_config(cfg)
    if gpu_available is None:
        import torch

        gpu_available = torch.cuda.is_available()
    layout = layout_of(cfg)
    twin = ModelConfig()
    twin.CopyFrom(cfg)
    twin.backend = "python"
    twin.ClearField("platform")
    twin.ClearField("runtime")
    twin.ClearField("default_model_filename")
    twin.parameters["PYTORCH_LAYOUT"].string_value = layout
    twin.parameters["PYTORCH_MODEL_FILENAME"].string_value = (
        TWIN_MODULE_FILE if layout == PYTORCH2 else (cfg.default_model_filename or "model.pt"))
    notes = [f"served by the Python backend running templates/pytorch_runtime.py ({layout} layout)"]
    for group in twin.instance_group:
        if group.kind == model_config_pb2.ModelInstanceGroup.KIND_GPU and not gpu_available:
            group.kind = model_config_pb2.ModelInstanceGroup.KIND_CPU
            group.ClearField("gpus")
            notes.append("KIND_GPU instance group served as KIND_CPU: no GPU on this machine")
        if group.kind == model_config_pb2.ModelInstanceGroup.KIND_AUTO:
            group.kind = (model_config_pb2.ModelInstanceGroup.KIND_GPU if gpu_available
                          else model_config_pb2.ModelInstanceGroup.KIND_CPU)
    params = parameters_of(cfg)
    count = sum(g.count or 1 for g in cfg.instance_group)
    if layout == TORCHSCRIPT:
        if count > 1 and any(k in params for k in ("INTRA_OP_THREAD_COUNT", "INTER_OP_THREAD_COUNT")):
            notes.append("thread counts apply per instance here (each Python-backend instance is its own process); "
                         "LibTorch applies the first model's counts once for the whole server")
        if params.get("ENABLE_WEIGHT_SHARING", "false").lower() in _TRUE:
            notes.append("ENABLE_WEIGHT_SHARING is not emulated: each instance process loads its own weights")
        for key in ("DISABLE_CUDNN", "ENABLE_CACHE_CLEANING"):
            if key in params and not gpu_available:
                notes.append(f"{key} has no effect without a GPU")
    return twin, notes


def _version_dirs(model_dir: Path) -> list[Path]:
    versions = sorted((p for p in model_dir.iterdir() if p.is_dir() and p.name.isdigit()), key=lambda p: int(p.name))
    if not versions:
        raise PyTorchConfigError(f"{model_dir} has no numeric version folder (e.g. 1/)")
    return versions


def write_emulation_twin(model_dir: str | Path, twin_repository: str | Path,
                         *, gpu_available: bool | None = None) -> tuple[Path, list[str]]:
    """Generate the Python-backend twin of a PyTorch-backend model directory in ``twin_repository``
    (replacing an earlier twin of it); return the twin's directory and the notes."""
    model_dir = Path(model_dir)
    cfg = read_config(model_dir)
    twin_cfg, notes = emulation_config(cfg, gpu_available=gpu_available)
    layout = layout_of(cfg)
    artifact = cfg.default_model_filename or "model.pt"
    runtime = RUNTIME_TEMPLATE.read_bytes()
    files: dict[str, FileContent] = {"config.pbtxt": to_text(twin_cfg)}
    # The artifact the runtime loads; PyTorch 2's model.py moves aside for the runtime's model.py.
    main, renamed = (artifact, artifact) if layout == TORCHSCRIPT else ("model.py", TWIN_MODULE_FILE)
    for version in _version_dirs(model_dir):
        if not (version / main).is_file():
            raise FileNotFoundError(f"{version / main} is missing: the {layout} layout loads <version>/{main}")
        files[f"{version.name}/model.py"] = runtime
        # Everything else in the version folder comes along (files the model reads next to itself).
        for item in sorted(version.iterdir()):
            if item.name == "__pycache__":
                continue
            name = renamed if item.name == main else item.name
            if name in (TWIN_MODULE_FILE, "model.py") and item.name != main:
                raise PyTorchConfigError(f"{item} would clash with the twin's {name}; rename it")
            files[f"{version.name}/{name}"] = item
    target = Path(twin_repository) / cfg.name
    if target.resolve() == model_dir.resolve():
        raise PyTorchConfigError(f"the twin repository {twin_repository} is the model's own repository")
    result = write_model_dir(target, files, overwrite=True)
    if result.backup is not None:
        shutil.rmtree(result.backup)  # a twin is derived data: nothing of the user's to keep
    return target, notes


@dataclass(frozen=True)
class ServingPreview:
    """Which backend will serve a PyTorch-backend config here, shown before anything is written:
    the user's config and, when emulated, the Python-backend config that actually gets loaded."""

    model_name: str
    layout: str
    served_as: str
    config_text: str
    served_config_text: str
    notes: tuple[str, ...] = field(default=())

    def text(self) -> str:
        lines = [f"{self.model_name}: {self.layout} layout", f"served as: {self.served_as}"]
        lines += [f"note: {note}" for note in self.notes]
        lines += ["", "config.pbtxt (written for the PyTorch backend):", self.config_text.rstrip()]
        if self.served_config_text != self.config_text:
            lines += ["", "config.pbtxt of the Python-backend twin (what this server loads):",
                      self.served_config_text.rstrip()]
        return "\n".join(lines)


def preview_serving(cfg: ModelConfig, *, backend_dir: str | Path | None = None,
                    gpu_available: bool | None = None) -> ServingPreview:
    """Say how ``cfg`` would be served by a tritonserver with ``backend_dir`` (None: the wheel's
    server, which has no PyTorch backend), without writing anything."""
    check_pytorch_config(cfg)
    layout = layout_of(cfg)
    text = to_text(cfg)
    if layout in libtorch_layouts(backend_dir):
        return ServingPreview(cfg.name, layout, SERVED_AS_LIBTORCH, text, text)
    twin, notes = emulation_config(cfg, gpu_available=gpu_available)
    return ServingPreview(cfg.name, layout, SERVED_AS_PYTHON, text, to_text(twin), tuple(notes))


@dataclass(frozen=True)
class ServingPlan:
    """What tritonserver loads for a PyTorch-backend model directory, and through which backend."""

    model_name: str
    layout: str
    served_as: str
    repository: Path
    source: Path
    notes: tuple[str, ...] = field(default=())

    def describe(self) -> str:
        lines = [f"{self.model_name}: {self.layout} layout, served as: {self.served_as}",
                 f"  model repository: {self.repository}",
                 f"  from: {self.source}"]
        lines += [f"  note: {note}" for note in self.notes]
        return "\n".join(lines)


def _default_twin_repository(model_dir: Path) -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    key = hashlib.sha1(str(model_dir.resolve().parent).encode()).hexdigest()[:12]
    return Path(base) / "workbench" / "pytorch-emulation" / key


def plan_serving(
    model_dir: str | Path,
    *,
    backend_dir: str | Path | None = None,
    twin_repository: str | Path | None = None,
    gpu_available: bool | None = None,
) -> ServingPlan:
    """Serve the real layout when the server's backend directory has the PyTorch backend for it;
    otherwise write the Python-backend twin (default: a cache folder keyed by the repository)."""
    model_dir = Path(model_dir)
    cfg = check_pytorch_config(read_config(model_dir))
    if cfg.name != model_dir.name:
        raise PyTorchConfigError(f"{model_dir}: config name {cfg.name!r} differs from the directory name; "
                                 "Triton names a model after its directory")
    preview = preview_serving(cfg, backend_dir=backend_dir, gpu_available=gpu_available)
    if preview.served_as == SERVED_AS_LIBTORCH:
        return ServingPlan(cfg.name, preview.layout, SERVED_AS_LIBTORCH, model_dir.parent, model_dir)
    twin_repository = Path(twin_repository) if twin_repository else _default_twin_repository(model_dir)
    write_emulation_twin(model_dir, twin_repository, gpu_available=gpu_available)
    return ServingPlan(cfg.name, preview.layout, SERVED_AS_PYTHON, twin_repository, model_dir, preview.notes)


# --- sweeping backend parameters --------------------------------------------------------------

# Friendly sweep settings -> parameter key per layout (None: that layout has no such switch).
SWEEP_SETTINGS: dict[str, dict[str, str | None]] = {
    "threads": {TORCHSCRIPT: "INTRA_OP_THREAD_COUNT", PYTORCH2: "NUM_THREADS"},
    "interop_threads": {TORCHSCRIPT: "INTER_OP_THREAD_COUNT", PYTORCH2: "NUM_INTEROP_THREADS"},
    "inference_mode": {TORCHSCRIPT: "INFERENCE_MODE", PYTORCH2: None},
    "optimized_execution": {TORCHSCRIPT: "DISABLE_OPTIMIZED_EXECUTION", PYTORCH2: None},
    "torch_compile": {TORCHSCRIPT: None, PYTORCH2: "TORCH_COMPILE_OPTIONAL_PARAMETERS"},
    "instance_count": {TORCHSCRIPT: None, PYTORCH2: None},
}


def sweep_variant(base: ModelConfig, settings: Mapping[str, Any], *, name: str | None = None) -> ModelConfig:
    """A copy of ``base`` with ``settings`` applied, checked, for one sweep point.

    Keys are parameter keys of the layout (``"INTRA_OP_THREAD_COUNT": 2``) or the friendly names in
    ``SWEEP_SETTINGS``: ``threads``, ``interop_threads``, ``inference_mode`` (TorchScript),
    ``optimized_execution`` (TorchScript; False sets DISABLE_OPTIMIZED_EXECUTION), ``torch_compile``
    (PyTorch 2: True/False toggles ``disable``, a dict replaces the options) and
    ``instance_count``. ``name`` renames the variant (for loading several side by side)."""
    layout = layout_of(base)
    variant = ModelConfig()
    variant.CopyFrom(base)
    if name:
        variant.name = name
    for setting, value in settings.items():
        if setting == "instance_count":
            if len(variant.instance_group) != 1:
                raise PyTorchConfigError("instance_count needs exactly one instance_group in the base config")
            variant.instance_group[0].count = int(value)
            continue
        key = setting
        if setting in SWEEP_SETTINGS:
            key = SWEEP_SETTINGS[setting][layout]
            if key is None:
                raise PyTorchConfigError(f"sweep setting {setting!r} does not exist for the {layout} layout")
            if setting == "optimized_execution":
                value = not value
            if setting == "torch_compile" and not isinstance(value, Mapping):
                current = parse_torch_compile_parameters(
                    parameters_of(variant).get(key, "{}"))
                value = {**current, "disable": not bool(value)}
        elif setting not in _parameter_table(layout):
            raise PyTorchConfigError(
                f"sweep setting {setting!r} is neither a {layout} parameter ({', '.join(_parameter_table(layout))}) "
                f"nor one of {', '.join(SWEEP_SETTINGS)}"
            )
        variant.parameters[key].string_value = _as_string(value)
    return check_pytorch_config(variant)


def sweep_grid(base: ModelConfig, grid: Mapping[str, Iterable[Any]]) -> dict[str, tuple[str, ...]]:
    """``SweepPlan.parameters`` for a PyTorch-backend model: friendly settings (``threads``,
    ``torch_compile``...) become this layout's keys and every value is checked through
    ``sweep_variant`` against the user's config before the sweep starts. The keys are the same in
    the Python-backend twin, so the grid applies to the twin the local server runs. Instance counts
    belong to the sweep's allocations."""
    layout = layout_of(base)
    out: dict[str, tuple[str, ...]] = {}
    for setting, values in grid.items():
        if setting == "instance_count":
            raise PyTorchConfigError("sweep instance counts with the sweep's allocations (e.g. 1x1, 2x1), not a parameter")
        key = SWEEP_SETTINGS[setting][layout] if setting in SWEEP_SETTINGS else setting
        if isinstance(values, (str, bytes, Mapping)) or not isinstance(values, Iterable):
            values = [values]
        out[key] = tuple(parameters_of(sweep_variant(base, {setting: v}))[key] for v in values)
    return out


def variant_label(settings: Mapping[str, Any]) -> str:
    """Short, stable label for a sweep point (``threads=2,torch_compile=off``)."""
    def show(value: Any) -> str:
        if isinstance(value, bool):
            return "on" if value else "off"
        if isinstance(value, Mapping):
            return json.dumps(value, sort_keys=True, separators=(",", ":"))
        return str(value)
    return ",".join(f"{k}={show(v)}" for k, v in sorted(settings.items()))
