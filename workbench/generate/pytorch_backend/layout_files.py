"""The PyTorch backend's two layouts on disk: TorchScript and PyTorch 2 model directories, checked
before they are written, and the PyTorch 2 module loaded the way Triton's runtime loads it."""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import io
import shutil
import tempfile
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from workbench.generate.config import ModelConfig, read_config, to_text
from workbench.generate.pytorch_backend.configs import check_pytorch_config
from workbench.generate.pytorch_backend.layouts import PYTORCH2, TORCHSCRIPT, PyTorchConfigError, layout_of
from workbench.generate.pytorch_backend.serving import pytorch2_module_file
from workbench.generate.repository import FileContent, WriteResult, version_folders, write_model_dir

__all__ = [
    "is_torchscript_archive",
    "torchscript_files",
    "write_torchscript_model",
    "pytorch2_files",
    "write_pytorch2_model",
    "load_pytorch2_module",
    "eager_module",
]


def is_torchscript_archive(path: Path) -> bool:
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
        raise PyTorchConfigError('this config has runtime: "model.py" (PyTorch 2); use pytorch2_files')
    filename = cfg.default_model_filename or "model.pt"
    if isinstance(model, (str, Path)):
        source = Path(model)
        if not source.is_file():
            raise FileNotFoundError(f"TorchScript file {source} does not exist")
        if not is_torchscript_archive(source):
            raise PyTorchConfigError(
                f"{source} is not a TorchScript archive (a state dict or pickle?); "
                "save a torch.jit.trace/torch.jit.script result with .save()"
            )
        payload: FileContent = source
    else:
        import torch  # torch only when a model is saved or loaded: `workbench generate` starts without it

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
    them (LibTorch's first rule), otherwise by count. A single ``Dict[str, Tensor]`` argument takes
    every input, keyed by its config name (libtorch.cc ValidateInputs)."""
    arguments = [a for a in model.forward.schema.arguments if a.name != "self"]
    if len(arguments) == 1 and arguments[0].type.kind() == "DictType":
        return
    names = [a.name for a in arguments]
    required = [a.name for a in arguments if not a.has_default_value()]
    inputs = [entry.name for entry in cfg.input]
    if all(name in names for name in inputs):
        missing = [name for name in required if name not in inputs]
        if missing:
            raise PyTorchConfigError(
                f"forward({', '.join(names)}) needs argument(s) {missing} that the config does not declare as inputs"
            )
    elif not len(required) <= len(inputs) <= len(names):
        raise PyTorchConfigError(
            f"forward({', '.join(names)}) takes {len(required)}"
            + (f" to {len(names)}" if len(names) != len(required) else "")
            + f" tensor(s) but the config declares {len(inputs)} input(s): {', '.join(inputs)}"
        )


def write_torchscript_model(
    repository: str | Path, cfg: ModelConfig, model: Any, *, version: int = 1, overwrite: bool = False
) -> WriteResult:
    """Write ``<repository>/<name>`` for LibTorch (see ``torchscript_files``), all or nothing; an
    existing directory is replaced only with ``overwrite=True`` and kept as a backup
    (``result.backup``, inside the repository: move it before a server loads the whole repository)."""
    files = torchscript_files(cfg, model, version=version)
    return write_model_dir(_model_dir(repository, cfg), files, overwrite=overwrite)


def _module_source(module_source: str | Path) -> tuple[str, str]:
    """(source text, where it came from) for a path or literal source."""
    if isinstance(module_source, Path) or (
        isinstance(module_source, str) and "\n" not in module_source and module_source.endswith(".py")
    ):
        path = Path(module_source)
        if not path.is_file():
            raise FileNotFoundError(f"model source {path} does not exist")
        return path.read_text(encoding="utf-8"), str(path)
    return str(module_source), "model.py source"


def _state_dict_bytes(state_dict: Any) -> bytes | Path:
    import torch  # torch only when a model is saved or loaded: `workbench generate` starts without it

    if isinstance(state_dict, (str, Path)):
        path = Path(state_dict)
        if not path.is_file():
            raise FileNotFoundError(f"state dict file {path} does not exist")
        if is_torchscript_archive(path):
            raise PyTorchConfigError(
                f"{path} is a TorchScript archive, not a state dict (torch.save(model.state_dict()))"
            )
        return path
    if isinstance(state_dict, torch.nn.Module):
        state_dict = state_dict.state_dict()
    if not isinstance(state_dict, Mapping):
        raise PyTorchConfigError(f"state_dict must be a module, a mapping or a file, got {type(state_dict).__name__}")
    buffer = io.BytesIO()
    torch.save(dict(state_dict), buffer)
    return buffer.getvalue()


def pytorch2_files(
    cfg: ModelConfig, module_source: str | Path, *, state_dict: Any = None, version: int = 1
) -> dict[str, FileContent]:
    """The files of a PyTorch 2 model directory: ``config.pbtxt``, ``<version>/model.py`` (the
    module class: a path or source text) and, when given, ``<version>/model.pt`` (its state dict:
    a module, a mapping or a torch.save file).

    The source is imported and the class the runtime would pick is built and given the state dict
    first, so a missing class, constructor arguments or mismatched weights are reported now
    instead of when Triton loads the model. A TorchScript archive's path in place of the source
    is written as ``<version>/model.pt`` alone: the runtime, finding no model.py, loads it with
    torch.jit.load and runs it uncompiled (src/model.py ``_get_model_path``, r24.10)."""
    check_pytorch_config(cfg)
    if layout_of(cfg) != PYTORCH2:
        raise PyTorchConfigError('this config has no runtime: "model.py"; use torchscript_files for TorchScript')
    if isinstance(module_source, Path) and is_torchscript_archive(module_source):
        if state_dict is not None:
            raise PyTorchConfigError(
                f"{module_source} is a TorchScript archive, which carries its weights: give no state dict with it"
            )
        return {"config.pbtxt": to_text(cfg), f"{int(version)}/model.pt": module_source}
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


def write_pytorch2_model(
    repository: str | Path,
    cfg: ModelConfig,
    module_source: str | Path,
    *,
    state_dict: Any = None,
    version: int = 1,
    overwrite: bool = False,
) -> WriteResult:
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


def load_pytorch2_module(version_dir: str | Path, *, name: str = "model", module_file: str = "model.py") -> Any:
    """Import ``module_file`` from a PyTorch 2 version folder the way Triton's runtime does (the
    first ``nn.Module`` subclass in ``dir(module)`` order, built without arguments, the file of the
    same stem with ``.pt`` loaded as its state dict) and return the module in eval mode: the eager
    reference for a check.

    The runtime's rule picks alphabetically, so an *imported* class such as ``Linear`` can win over
    the one the file defines; that is refused here with the class names."""
    import torch  # torch only when a model is saved or loaded: `workbench generate` starts without it

    version_dir = Path(version_dir)
    path = version_dir / module_file
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist; the PyTorch 2 layout needs <version>/{module_file}")
    source = path.read_text(encoding="utf-8")
    defined = _defined_module_classes(source, f"{name} {module_file}")
    module_name = f"_workbench_pt2_{hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:12]}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise PyTorchConfigError(f"{name} {module_file} cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as err:  # noqa: BLE001 - the user's model.py may raise anything on import
        raise PyTorchConfigError(f"{name} model.py fails to import: {type(err).__name__}: {err}") from err
    candidates = [
        attr
        for attr in dir(module)
        if isinstance(getattr(module, attr), type) and issubclass(getattr(module, attr), torch.nn.Module)
    ]
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
    weights = path.with_suffix(".pt")
    if weights.is_file():
        try:
            state = torch.load(weights, map_location="cpu")
        except Exception as err:  # a pickled module, not tensors: the runtime's torch.load refuses it too
            raise PyTorchConfigError(
                f"{name} model.pt is not a state dict torch.load can read: "
                f"{type(err).__name__}: {str(err).splitlines()[0]}"
            ) from None
        if not isinstance(state, Mapping):
            raise PyTorchConfigError(f"{name} model.pt holds a {type(state).__name__}, not a state dict")
        try:
            model.load_state_dict(state)
        except RuntimeError as err:
            raise PyTorchConfigError(f"{name} model.pt does not fit class {picked}: {err}") from None
    return model.eval()


def eager_module(model_dir: str | Path) -> Any:
    """The module a PyTorch-backend model directory serves, loaded in this process for comparing
    outputs: the latest version's TorchScript archive, or its PyTorch 2 module (as the runtime picks
    it: `serving.pytorch2_module_file`) with its state dict."""
    import torch  # torch only when a module is loaded: `workbench generate` starts without it

    model_dir = Path(model_dir)
    cfg = check_pytorch_config(read_config(model_dir))
    versions = version_folders(model_dir)
    if not versions:
        raise PyTorchConfigError(f"{model_dir} has no numeric version folder (e.g. 1/)")
    latest = versions[-1]
    artifact = cfg.default_model_filename or "model.pt"
    if layout_of(cfg) == PYTORCH2:
        artifact = pytorch2_module_file(cfg, latest)
        if artifact.endswith(".py"):
            return load_pytorch2_module(latest, name=cfg.name, module_file=artifact)
    return torch.jit.load(str(latest / artifact), map_location="cpu").eval()
