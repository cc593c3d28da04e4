"""Serving a PyTorch-backend model here: the real backend when the server has it, else a Python-backend twin.

What is written for the user is always the real layout (``model_repository/<name>``, ready for a
Triton container or a server whose backend directory has the PyTorch backend). Where the server
has no such backend (the nvidia-pytriton wheel's, unless given the one the shared build script
makes), the layout is served by a *twin*: the same config with ``backend: "python"``, the user's
files next to ``templates/pytorch_runtime.py`` as ``model.py``, which honours the same parameters
and answers as the real backend does (the differences it cannot remove are in its notes).
`twin_of` builds it in memory (the launcher loads it under the model's own name with Triton's
load-with-files override, so the user's directory stays untouched); `plan_serving` writes it into
a separate repository instead. ``served_as`` says which one runs.
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
from workbench.generate.pytorch_backend.layouts import (
    PYTORCH2,
    TORCHSCRIPT,
    TRUE_SPELLINGS,
    PyTorchConfigError,
    layout_of,
)
from workbench.generate.pytorch_backend.real_backend import JIT_KEYS, misserved, needs_inductor, real_backend_notes
from workbench.generate.repository import FileContent, version_folders, write_model_dir

__all__ = [
    "SERVED_AS_LIBTORCH",
    "SERVED_AS_PYTHON",
    "RUNTIME_TEMPLATE",
    "TWIN_MODULE_FILE",
    "libtorch_layouts",
    "pytorch2_module_file",
    "emulation_config",
    "Twin",
    "twin_of",
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
    """The layouts a tritonserver with this ``--backend-directory`` serves natively, told by the
    files: TorchScript needs ``pytorch/libtriton_pytorch.so``; PyTorch 2 needs the backend's runtime
    ``pytorch/model.py`` and the python backend (``python/libtriton_python.so``), which runs it.
    (A ``pytorch/`` folder without the library sends even TorchScript configs to that runtime.)"""
    if backend_dir is None:
        return ()
    root = Path(backend_dir)
    layouts = []
    if (root / "pytorch" / "libtriton_pytorch.so").is_file():
        layouts.append(TORCHSCRIPT)
    if (root / "pytorch" / "model.py").is_file() and (root / "python" / "libtriton_python.so").is_file():
        layouts.append(PYTORCH2)
    return tuple(layouts)


def pytorch2_module_file(cfg: ModelConfig, version_dir: str | Path | None = None) -> str:
    """The file the PyTorch 2 runtime loads from a version folder: ``default_model_filename``, else
    ``model.py``, else ``model.pt`` (a TorchScript archive), the first that exists (src/model.py
    ``_get_model_path``); without a folder to look in, the one it tries first."""
    names = ([cfg.default_model_filename] if cfg.default_model_filename else []) + ["model.py", "model.pt"]
    if version_dir is not None:
        found = [name for name in names if (Path(version_dir) / name).is_file()]
        if not found:
            raise FileNotFoundError(f"{version_dir} has none of {names}: the PyTorch 2 runtime loads the first of them")
        return found[0]
    return names[0]


def _state_dict_name(module_file: str) -> str:
    """The runtime's state dict for a module file: the same stem with ``.pt`` (net.py -> net.pt)."""
    return module_file.rsplit(".", 1)[0] + ".pt"


def emulation_config(
    cfg: ModelConfig, *, gpu_available: bool | None = None, module_file: str | None = None
) -> tuple[ModelConfig, list[str]]:
    """The twin's config for the Python backend, and notes on what differs from LibTorch.

    Tensors, batching, instance groups and parameters are kept (a KIND_GPU group on a machine
    without a GPU is refused by Triton's core for the twin as for the real backend);
    ``PYTORCH_LAYOUT``, ``PYTORCH_MODEL_FILENAME`` and, for a PyTorch 2 module, ``PYTORCH_STATE_DICT``
    tell the runtime what to load (``module_file``: what the real runtime would pick, see
    `pytorch2_module_file`). ``default_model_filename`` is cleared: the Python backend would look
    for its own model.py under that name."""
    check_pytorch_config(cfg)
    if gpu_available is None:
        import torch  # torch only to ask about a GPU: `workbench generate` starts without it

        gpu_available = torch.cuda.is_available()
    layout = layout_of(cfg)
    twin = ModelConfig()
    twin.CopyFrom(cfg)
    twin.backend = "python"
    twin.ClearField("platform")
    twin.ClearField("runtime")
    twin.ClearField("default_model_filename")
    twin.parameters["PYTORCH_LAYOUT"].string_value = layout
    if layout == PYTORCH2:
        module_file = module_file or pytorch2_module_file(cfg)
        if module_file.endswith(".py"):
            twin.parameters["PYTORCH_MODEL_FILENAME"].string_value = TWIN_MODULE_FILE
            twin.parameters["PYTORCH_STATE_DICT"].string_value = _state_dict_name(module_file)
        else:
            twin.parameters["PYTORCH_MODEL_FILENAME"].string_value = module_file
    else:
        twin.parameters["PYTORCH_MODEL_FILENAME"].string_value = cfg.default_model_filename or "model.pt"
    notes = [f"served by the Python backend running templates/pytorch_runtime.py ({layout} layout)"]
    bf16 = [entry.name for entry in list(cfg.input) + list(cfg.output) if entry.data_type == model_config_pb2.TYPE_BF16]
    if bf16:
        notes.append(
            f"TYPE_BF16 tensors ({', '.join(bf16)}) are not emulated: the twin refuses to load; "
            "serve this model on the real PyTorch backend"
        )
    for group in twin.instance_group:
        if group.kind == model_config_pb2.ModelInstanceGroup.KIND_GPU and not gpu_available:
            notes.append(
                "KIND_GPU instance group: no GPU on this machine, so Triton refuses to load it (the real "
                "backend's server does the same); use KIND_CPU to serve it here"
            )
        if group.kind == model_config_pb2.ModelInstanceGroup.KIND_AUTO:
            group.kind = (
                model_config_pb2.ModelInstanceGroup.KIND_GPU
                if gpu_available
                else model_config_pb2.ModelInstanceGroup.KIND_CPU
            )
    params = parameters_of(cfg)
    if layout == TORCHSCRIPT:
        if "INTRA_OP_THREAD_COUNT" in params:
            notes.append(
                "INTRA_OP_THREAD_COUNT: the twin sets torch's threads in each instance's own process; "
                "r24.10's LibTorch runs inference with the server's OMP_NUM_THREADS instead, which the "
                "launcher sets from this count when it serves the real backend"
            )
        if "INTER_OP_THREAD_COUNT" in params:
            notes.append(
                "INTER_OP_THREAD_COUNT: each twin instance sets it in its own process; r24.10's LibTorch "
                "can set it once per server and aborts on a second model or changed reload with it"
            )
        if any(key in params for key in JIT_KEYS):
            notes.append(
                "the JIT switches apply to each twin instance process; LibTorch sets them for the whole "
                "server and never resets them"
            )
        if params.get("ENABLE_WEIGHT_SHARING", "false").lower() in TRUE_SPELLINGS:
            notes.append("ENABLE_WEIGHT_SHARING is not emulated: each instance process loads its own weights")
        for key in ("DISABLE_CUDNN", "ENABLE_CACHE_CLEANING"):
            if key in params and not gpu_available:
                notes.append(f"{key} has no effect without a GPU")
    notes += [f"the real backend would misserve this: {problem}" for problem in misserved(cfg)]
    if needs_inductor(cfg):
        notes.append(
            "torch.compile with inductor: the twin gives its stub a UTF-8 locale itself; the real r24.10 "
            "runtime needs a .pth for that and fails to load without one"
        )
    return twin, notes


@dataclass(frozen=True)
class Twin:
    """The Python-backend twin of a model directory: its config, its files (``<version>/<name>`` ->
    bytes or the user's file) and the notes on what differs from the real backend."""

    config: ModelConfig
    files: dict[str, FileContent]
    notes: tuple[str, ...]


def twin_of(model_dir: str | Path, *, config: ModelConfig | None = None, gpu_available: bool | None = None) -> Twin:
    """The twin of ``model_dir`` (its config, or ``config`` in its place: a sweep variant), in
    memory: the runtime as every version's model.py, the user's files beside it."""
    model_dir = Path(model_dir)
    cfg = config if config is not None else read_config(model_dir)
    layout = layout_of(cfg)
    versions = version_folders(model_dir)
    if not versions:
        raise PyTorchConfigError(f"{model_dir} has no numeric version folder (e.g. 1/)")
    main = cfg.default_model_filename or "model.pt"
    if layout == PYTORCH2:
        main = pytorch2_module_file(cfg, versions[-1])
    twin_cfg, notes = emulation_config(cfg, gpu_available=gpu_available, module_file=main)
    # The artifact the runtime loads; a PyTorch 2 module moves aside for the runtime's model.py.
    renamed = TWIN_MODULE_FILE if main.endswith(".py") else main
    runtime = RUNTIME_TEMPLATE.read_bytes()
    files: dict[str, FileContent] = {}
    for version in versions:
        if not (version / main).is_file():
            raise FileNotFoundError(f"{version / main} is missing: the {layout} layout loads <version>/{main}")
        files[f"{version.name}/model.py"] = runtime
        # Everything else in the version folder comes along (files the model reads next to itself).
        for item in sorted(version.iterdir()):
            if item.name == "__pycache__" or item.is_dir():
                continue
            name = renamed if item.name == main else item.name
            if name in (TWIN_MODULE_FILE, "model.py") and item.name != main:
                raise PyTorchConfigError(f"{item} would clash with the twin's {name}; rename it")
            files[f"{version.name}/{name}"] = item
    return Twin(twin_cfg, files, tuple(notes))


def write_emulation_twin(
    model_dir: str | Path, twin_repository: str | Path, *, gpu_available: bool | None = None
) -> tuple[Path, list[str]]:
    """Generate the Python-backend twin of a PyTorch-backend model directory in ``twin_repository``
    (replacing an earlier twin of it); return the twin's directory and the notes."""
    model_dir = Path(model_dir)
    twin = twin_of(model_dir, gpu_available=gpu_available)
    target = Path(twin_repository) / twin.config.name
    if target.resolve() == model_dir.resolve():
        raise PyTorchConfigError(f"the twin repository {twin_repository} is the model's own repository")
    result = write_model_dir(target, {"config.pbtxt": to_text(twin.config), **twin.files}, overwrite=True)
    if result.backup is not None:
        shutil.rmtree(result.backup)  # a twin is derived data: nothing of the user's to keep
    return target, list(twin.notes)


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
            lines += [
                "",
                "config.pbtxt of the Python-backend twin (what this server loads):",
                self.served_config_text.rstrip(),
            ]
        return "\n".join(lines)


def preview_serving(
    cfg: ModelConfig,
    *,
    backend_dir: str | Path | None = None,
    gpu_available: bool | None = None,
    locale_utf8: bool | None = None,
) -> ServingPreview:
    """Say how ``cfg`` would be served by a tritonserver with ``backend_dir`` (None: the wheel's
    server, which has no PyTorch backend), without writing anything: on the real backend, what it
    does process-wide and what it would refuse or misserve; on the twin, what differs.
    ``locale_utf8``: whether the backend stub gets a UTF-8 locale (default: found out)."""
    check_pytorch_config(cfg)
    layout = layout_of(cfg)
    text = to_text(cfg)
    if layout in libtorch_layouts(backend_dir):
        notes = [f"backend directory {backend_dir}"] + real_backend_notes(cfg, locale_utf8=locale_utf8)
        return ServingPreview(
            cfg.name, layout, SERVED_AS_LIBTORCH, text, text, tuple(notes + [load_time_note(layout, real=True)])
        )
    twin, notes = emulation_config(cfg, gpu_available=gpu_available)
    return ServingPreview(
        cfg.name, layout, SERVED_AS_PYTHON, text, to_text(twin), tuple(notes + [load_time_note(layout, real=False)])
    )


def load_time_note(layout: str, *, real: bool) -> str:
    """What a load costs through this backend (a sweep reloads the model for every variant); the
    figures are in the README, measured by benchmarks/pytorch_load_times.py."""
    if real and layout == TORCHSCRIPT:
        return (
            "load time: LibTorch loads the archive inside the server (no Python process), so a reload took well "
            "under a second here; a sweep reloads every variant (README, benchmarks/pytorch_load_times.py)"
        )
    where = "the PyTorch 2 runtime runs" if real else "the twin runs"
    return (
        f"load time: {where} in a Python backend stub per instance that imports torch, so every load and reload "
        "took seconds here, far longer than a LibTorch reload; a sweep reloads every variant "
        "(README, benchmarks/pytorch_load_times.py)"
    )


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
        lines = [
            f"{self.model_name}: {self.layout} layout, served as: {self.served_as}",
            f"  model repository: {self.repository}",
            f"  from: {self.source}",
        ]
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
        raise PyTorchConfigError(
            f"{model_dir}: config name {cfg.name!r} differs from the directory name; "
            "Triton names a model after its directory"
        )
    preview = preview_serving(cfg, backend_dir=backend_dir, gpu_available=gpu_available)
    if preview.served_as == SERVED_AS_LIBTORCH:
        return ServingPlan(cfg.name, preview.layout, SERVED_AS_LIBTORCH, model_dir.parent, model_dir)
    twin_repository = Path(twin_repository) if twin_repository else _default_twin_repository(model_dir)
    write_emulation_twin(model_dir, twin_repository, gpu_available=gpu_available)
    return ServingPlan(cfg.name, preview.layout, SERVED_AS_PYTHON, twin_repository, model_dir, preview.notes)
