"""Serving a PyTorch-backend model here: the real backend when the server has it, else a Python-backend twin.

The tritonserver in the nvidia-pytriton wheel has no LibTorch backend. What is written for the user
is always the real layout (``model_repository/<name>``, ready for a Triton container); to serve it
locally a *twin* is generated from it in a separate repository: the same config with
``backend: "python"``, the user's files copied next to ``templates/pytorch_runtime.py`` as
``model.py``, which honours the same parameters. A separate repository keeps the user's directory
untouched and loadable by a real Triton, and keeps the twin out of the user's repository (Triton
would otherwise try to load both). Where a tritonserver's backend directory has a ``pytorch``
folder, the real layout is served as is. ``ServingPlan.served_as`` says which one is running.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from tritonclient.grpc import model_config_pb2

from workbench.generate.config import ModelConfig, parameters_of, read_config, to_text
from workbench.generate.pytorch_backend.configs import check_pytorch_config
from workbench.generate.pytorch_backend.layouts import PYTORCH2, TORCHSCRIPT, TRUE_SPELLINGS, PyTorchConfigError, layout_of
from workbench.generate.repository import FileContent, version_folders, write_model_dir

__all__ = [
    "SERVED_AS_LIBTORCH",
    "SERVED_AS_PYTHON",
    "RUNTIME_TEMPLATE",
    "TWIN_MODULE_FILE",
    "libtorch_layouts",
    "emulation_config",
    "write_emulation_twin",
    "ServingPreview",
    "preview_serving",
    "ServingPlan",
    "plan_serving",
]

SERVED_AS_LIBTORCH = "PyTorch backend (LibTorch)"
SERVED_AS_PYTHON = "Python backend emulating the PyTorch backend"
RUNTIME_TEMPLATE = Path(__file__).parent.parent / "templates" / "pytorch_runtime.py"
# Name of the user's PyTorch 2 module file inside the twin (its model.py is the runtime).
TWIN_MODULE_FILE = "pytorch_module.py"


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
    bf16 = [entry.name for entry in list(cfg.input) + list(cfg.output) if entry.data_type == model_config_pb2.TYPE_BF16]
    if bf16:
        notes.append(f"TYPE_BF16 tensors ({', '.join(bf16)}) are not emulated: the twin refuses to load; "
                     "serve this model on the real PyTorch backend")
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
        if params.get("ENABLE_WEIGHT_SHARING", "false").lower() in TRUE_SPELLINGS:
            notes.append("ENABLE_WEIGHT_SHARING is not emulated: each instance process loads its own weights")
        for key in ("DISABLE_CUDNN", "ENABLE_CACHE_CLEANING"):
            if key in params and not gpu_available:
                notes.append(f"{key} has no effect without a GPU")
    return twin, notes


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
    versions = version_folders(model_dir)
    if not versions:
        raise PyTorchConfigError(f"{model_dir} has no numeric version folder (e.g. 1/)")
    for version in versions:
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
