"""Triton's PyTorch backend in a local tritonserver: found by its files, used where it is present,
kept from the ways the r24.10 backend crashes or misserves, and the Python-backend twin where it
is absent.

Where it is looked for: a directory given to `TritonServer` (``pytorch_backend=``), else
``$WORKBENCH_LIBTORCH_BACKEND`` (e.g. what ``build_libtorch_backend.sh`` prints), else the server's
own backend directory (``/opt/tritonserver/backends`` in the Triton container). It counts only
with ``pytorch/libtriton_pytorch.so`` (TorchScript) or the runtime ``pytorch/model.py`` beside the
python backend (PyTorch 2); a directory given for the wheel's server must also hold the python
backend and a library linked against the wheel's ``libtritonserver`` (the build script's does).

A load of a PyTorch-backend model goes through `PyTorchServing.load`: on the real backend it is
loaded as it is, after the checks below; otherwise its twin (`generate.pytorch_backend.twin_of`)
is loaded under the model's own name with Triton's load-with-files override, so the repository
keeps only what the user wrote. The r24.10 backend applies some settings to the whole process
(`generate.pytorch_backend.real_backend`): OpenMP threads come from the server's environment, so
``OMP_NUM_THREADS`` is set from the model's ``INTRA_OP_THREAD_COUNT``; inter-op threads may be
set once per process; the JIT switches stick. A load that needs other process-wide values
restarts the server when no other model is loaded (a sweep over threads does this per variant),
and is refused, with the reason, when others are. What would be misserved is refused too.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from workbench.generate.config import ConfigError, ModelConfig, parameters_of, read_config, to_json
from workbench.generate.product import GeneratedModel
from workbench.generate.pytorch_backend import (
    SERVED_AS_LIBTORCH,
    SERVED_AS_PYTHON,
    ServingPreview,
    check_pytorch_config,
    layout_of,
    libtorch_layouts,
    preview_serving,
    twin_of,
)
from workbench.generate.pytorch_backend.backend import PYTORCH
from workbench.generate.pytorch_backend.real_backend import (
    locale_fix_hint,
    misserved,
    needs_inductor,
    process_settings,
    stub_locale_is_utf8,
)
from workbench.generate.repository import served_config_path
from workbench.server.control import as_model_config
from workbench.server.discovery import (
    TritonInstall,
    TritonNotFoundError,
    find_tritonserver,
    join_path_front,
    named_backend,
)
from workbench.server.errors import ModelLoadError

if TYPE_CHECKING:
    from workbench.server.process import TritonServer

__all__ = ["ENV_VAR", "PyTorchBackend", "find_pytorch_backend", "serving_preview", "Served", "PyTorchServing"]

ENV_VAR = "WORKBENCH_LIBTORCH_BACKEND"
# the torch/lib folder in the library's RUNPATH (build_libtorch_backend.sh: $ORIGIN:<venv>/torch/lib:...)
_BUILT_TORCH = re.compile(rb"\$ORIGIN:([^:\x00]+/torch/lib)[:\x00]")
PYTHON_BACKEND = "Python backend (model.py)"


@dataclass(frozen=True)
class PyTorchBackend:
    """A ``--backend-directory`` holding Triton's PyTorch backend, and the layouts it serves."""

    backend_dir: Path
    layouts: tuple[str, ...]
    source: str

    @property
    def library(self) -> Path:
        return self.backend_dir / "pytorch" / "libtriton_pytorch.so"

    def torch_libraries(self) -> Path | None:
        """Where this environment's LibTorch libraries are, when the library's own search path
        names a torch that is gone (None: it finds its own, or is not a pip-torch build).
        build_libtorch_backend.sh writes the building venv's torch/lib into the library and caches
        it by torch version only, so every checkout reuses it: once that venv is deleted or made
        again, Triton cannot load it ("libtorch.so: cannot open shared object file")."""
        try:
            built_against = _BUILT_TORCH.search(self.library.read_bytes())
        except OSError:
            return None
        if built_against is None or Path(built_against.group(1).decode()).is_dir():
            return None
        spec = importlib.util.find_spec("torch")
        if spec is None or spec.origin is None:
            return None
        here = Path(spec.origin).parent / "lib"
        return here if here.is_dir() else None

    def describe(self) -> str:
        return f"Triton's PyTorch backend at {self.backend_dir} ({', '.join(self.layouts)}; {self.source})"


def _backend_root(path: Path) -> Path:
    """The backend directory for a path naming it or its ``pytorch/`` folder."""
    if (path / "libtriton_pytorch.so").is_file() or (path.name == "pytorch" and (path / "model.py").is_file()):
        return path.parent
    return path


def _check_pairs_with(install: TritonInstall, root: Path, where: str) -> None:
    """A directory replacing the wheel's must carry its python backend, and a LibTorch library
    linked against the wheel's renamed libtritonserver (a container's needs its own server)."""
    wheel_libs = [d for d in install.library_dirs if d.name == "nvidia_pytriton.libs"]
    if not wheel_libs:
        return
    python = root / "python"
    if not ((python / "libtriton_python.so").is_file() and (python / "triton_python_backend_stub").is_file()):
        raise TritonNotFoundError(
            f"{where} has no python/ backend with a stub (libtriton_python.so, triton_python_backend_stub); the "
            "server needs it for Python-backend models: use a directory that has both, such as the one "
            "build_libtorch_backend.sh prints"
        )
    library = root / "pytorch" / "libtriton_pytorch.so"
    names = [p.name.encode() for p in wheel_libs[0].glob("libtritonserver-*.so")]
    if library.is_file() and names and not any(name in library.read_bytes() for name in names):
        raise TritonNotFoundError(
            f"{library} is not linked against this wheel's {names[0].decode()} (it belongs to another Triton "
            "installation, e.g. a container); build one for this server with build_libtorch_backend.sh"
        )


def find_pytorch_backend(
    install: TritonInstall, given: str | os.PathLike[str] | bool | None = None
) -> PyTorchBackend | None:
    """The PyTorch backend a server of ``install`` should use: ``given`` (a directory; False: none,
    always the twin), else ``$WORKBENCH_LIBTORCH_BACKEND``, else the server's own backend directory.
    A directory that is named but holds no PyTorch backend is an error, not skipped."""
    if given is False:
        return None
    named, source = named_backend(given, ENV_VAR)
    if named:
        path = Path(named).expanduser()
        root = _backend_root(path)
        layouts = libtorch_layouts(root)
        if not layouts:
            raise TritonNotFoundError(
                f"{path} ({source}) holds no PyTorch backend: expected pytorch/libtriton_pytorch.so (TorchScript) "
                "or pytorch/model.py beside python/libtriton_python.so (PyTorch 2)"
            )
        _check_pairs_with(install, root, f"{path} ({source})")
        return PyTorchBackend(root.resolve(), layouts, source)
    if install.backend_dir is not None and libtorch_layouts(install.backend_dir):
        return PyTorchBackend(
            install.backend_dir, libtorch_layouts(install.backend_dir), "the server's backend directory"
        )
    return None


def serving_preview(
    generated: GeneratedModel, *, pytorch_backend: str | os.PathLike[str] | bool | None = None
) -> ServingPreview | None:
    """How a local tritonserver would serve a generated PyTorch-backend model: the real backend the
    finder above turns up (``pytorch_backend``, ``$WORKBENCH_LIBTORCH_BACKEND``, the server's own
    backends), else the Python-backend twin, with the notes; None for a model of another backend."""
    if not PYTORCH.recognises(generated.config):
        return None
    try:
        backend = find_pytorch_backend(find_tritonserver(), pytorch_backend)
    except TritonNotFoundError:
        backend = None
    return preview_serving(generated.config, backend_dir=backend.backend_dir if backend else None)


@dataclass(frozen=True)
class Served:
    """Which backend serves a loaded model, for the preview, the server panel and run records."""

    name: str
    served_as: str
    layout: str = ""
    library: str = ""
    notes: tuple[str, ...] = field(default=())

    @property
    def backend(self) -> str:
        """The backend and layout, without the model or the library path: what sweep rows group by."""
        return f"{self.served_as}, {self.layout} layout" if self.layout else self.served_as

    def describe(self) -> str:
        where = f" ({self.library})" if self.library else ""
        layout = f", {self.layout} layout" if self.layout else ""
        return f"{self.name}: {self.served_as}{where}{layout}"


@dataclass
class _Process:
    """The process-wide LibTorch settings the running server process has (a new one per start)."""

    omp_threads: int | None
    interop_set: bool = False
    jit: dict[str, bool] = field(default_factory=dict)


_UNDECIDED = object()


class PyTorchServing:
    """The PyTorch-backend side of one `TritonServer`: routes its loads (the real backend or the
    twin), keeps the process-wide settings the r24.10 backend applies right, and remembers which
    backend served each model (``served_by``)."""

    def __init__(self, server: TritonServer, backend: PyTorchBackend | None) -> None:
        self.server = server
        self.backend = backend
        given = server.extra_env.get("OMP_NUM_THREADS")
        self._omp_given = given is not None
        self._next_omp: Any = (int(given) if given and given.isdigit() else None) if self._omp_given else _UNDECIDED
        self._process: _Process | None = None
        self._served: dict[str, Served] = {}
        self._loaded_json: dict[str, str] = {}
        self._lock = threading.RLock()

    # ---- the server's environment -----------------------------------------------------------

    def environment(self, env: Mapping[str, str]) -> dict[str, str]:
        """What the next server process's environment ``env`` gets from here (called for every
        start): ``OMP_NUM_THREADS`` for LibTorch's inference threads, and this environment's
        LibTorch on LD_LIBRARY_PATH where the backend's own is gone (`PyTorchBackend.torch_libraries`).
        At the first start the threads are the one INTRA_OP_THREAD_COUNT the repository's
        TorchScript models agree on (none, or several: left unset, all cores)."""
        real = self.backend is not None and "torchscript" in self.backend.layouts
        if self._next_omp is _UNDECIDED:
            counts = self._repository_counts() if real else set()
            self._next_omp = counts.pop() if len(counts) == 1 else None
        self._process = _Process(self._next_omp)
        changed: dict[str, str] = {}
        torch_libraries = self.backend.torch_libraries() if real and self.backend is not None else None
        if torch_libraries is not None:
            changed["LD_LIBRARY_PATH"] = join_path_front((torch_libraries,), env.get("LD_LIBRARY_PATH", ""))
        if not self._omp_given and real and self._next_omp is not None:
            changed["OMP_NUM_THREADS"] = str(self._next_omp)
        return changed

    def _repository_counts(self) -> set[int]:
        counts = set()
        for model_dir in sorted(p for p in self.server.model_repository.iterdir() if p.is_dir()):
            try:
                cfg = read_config(served_config_path(model_dir, self.server.model_config_name))
            except (ConfigError, OSError):
                continue
            if PYTORCH.recognises(cfg) and not cfg.runtime:  # TorchScript on LibTorch
                try:
                    threads = process_settings(cfg).omp_threads
                except ValueError:
                    continue
                if threads:
                    counts.add(threads)
        return counts

    def stub_python(self) -> str:
        """The interpreter whose site-packages the backend stubs of this server import from."""
        env = self.server.install.env()
        return (
            shutil.which("python", path=env.get("PATH"))
            or shutil.which("python3", path=env.get("PATH"))
            or sys.executable
        )

    # ---- loads -------------------------------------------------------------------------------

    def served_by(self, name: str) -> str:
        """Which backend served the last load of ``name`` (a Python-backend model: the Python backend)."""
        served = self._served.get(name)
        return served.describe() if served is not None else f"{name}: {PYTHON_BACKEND}"

    def served(self, name: str) -> Served | None:
        return self._served.get(name)

    def requested_config(self, name: str) -> str | None:
        """The PyTorch-backend config (JSON) of the last load of ``name`` as asked for, not the twin's
        Python-backend config the server reports: what loading it again must pass. None for others."""
        return self._loaded_json.get(name) if name in self._served else None

    def backend_of(self, name: str) -> str:
        """`Served.backend` of the last load of ``name`` (a Python-backend model: the Python backend)."""
        served = self._served.get(name)
        return served.backend if served is not None else PYTHON_BACKEND

    def load(
        self, name: str, config: Any = None, files: Mapping[str, Any] | None = None, *, timeout: float = 3600.0
    ) -> None:
        """Load ``name`` (see `ModelControl.load`); a PyTorch-backend config is served by the real
        backend or its twin, after the checks that keep the server alive and its answers right."""
        cfg = self._config_of(name, config)
        if cfg is None or not PYTORCH.recognises(cfg):
            self.server.control.load(name, config=config, files=files, timeout=timeout)
            self._served.pop(name, None)
            self._loaded_json.pop(name, None)
            return
        with self._lock:
            cfg = check_pytorch_config(cfg)
            layout = layout_of(cfg)
            if self.backend is not None and layout in self.backend.layouts:
                self._load_real(name, cfg, files, timeout)
                self._served[name] = Served(name, SERVED_AS_LIBTORCH, layout, str(self.backend.library))
            else:
                self._load_twin(name, cfg, files, timeout)
            self._loaded_json[name] = to_json(cfg)

    def _config_of(self, name: str, config: Any) -> ModelConfig | None:
        if config is not None:
            return as_model_config(config)
        try:  # the file this server reads: configs/<name>.pbtxt under --model-config-name
            return read_config(served_config_path(self.server.model_repository / name, self.server.model_config_name))
        except (ConfigError, OSError):
            return None  # Triton reports a missing or broken model directory in its own words

    def _refuse(self, name: str, reason: str) -> None:
        raise ModelLoadError(name, "", f"refused before loading: {reason}", [])

    def _load_twin(self, name: str, cfg, files, timeout: float) -> None:
        if files:
            self._refuse(
                name,
                "override files for a PyTorch-backend model need the real backend; this server "
                "serves it through the Python-backend twin, which builds its own files",
            )
        twin = twin_of(self.server.model_repository / name, config=cfg)  # the config this server serves
        self.server.control.load(name, config=twin.config, files=twin.files, timeout=timeout)
        self._served[name] = Served(name, SERVED_AS_PYTHON, layout_of(cfg), "", twin.notes)

    def _load_real(self, name: str, cfg, files, timeout: float) -> None:
        for problem in misserved(cfg):
            self._refuse(name, problem)
        if needs_inductor(cfg) and not stub_locale_is_utf8(self.stub_python()):
            self._refuse(
                name,
                "torch.compile with inductor: the PyTorch 2 runtime would fail to import it in the "
                "backend stub, whose Python starts with the C locale (UnicodeDecodeError); " + locale_fix_hint(),
            )
        wanted = process_settings(cfg)
        unchanged = self._loaded_json.get(name) == to_json(cfg) and self._ready(name)
        if not unchanged:  # Triton ignores a load of the same config: nothing is parsed again
            self._settle_process(name, wanted)
        try:
            self.server.control.load(name, config=to_json(cfg), files=files, timeout=timeout)
        finally:  # the backend parsed the parameters even when the load failed later
            process = self._process
            if process is not None and not unchanged:
                process.interop_set |= wanted.interop_threads is not None
                present = parameters_of(cfg)
                process.jit.update({key: value for key, value in wanted.jit if key in present})

    def _ready(self, name: str) -> bool:
        return any(row["name"] == name and row["state"] == "READY" for row in self.server.control.index())

    def _settle_process(self, name: str, wanted) -> None:
        """Restart the server when this load needs process-wide settings the process cannot take,
        or refuse it when other models would go down with it."""
        process = self._process or _Process(None)
        reasons = []
        if wanted.omp_threads is not None and wanted.omp_threads != process.omp_threads:
            reasons.append(
                f"INTRA_OP_THREAD_COUNT={wanted.omp_threads} needs OMP_NUM_THREADS={wanted.omp_threads} "
                f"in the server's environment (it has {process.omp_threads or 'none: all cores'}); r24.10 "
                "sets the count on the load thread only"
            )
        if wanted.interop_threads is not None and process.interop_set:
            reasons.append(
                "INTER_OP_THREAD_COUNT can be set once per server process; a second time aborts tritonserver (r24.10)"
            )
        stuck = {key: value for key, value in process.jit.items() if value != wanted.jit_flags.get(key, value)}
        if wanted.jit and stuck:
            reasons.append(
                f"this process still has {', '.join(f'{k}={str(v).lower()}' for k, v in stuck.items())} "
                "from an earlier model (r24.10 never resets the JIT switches)"
            )
        if not reasons:
            return
        if self._omp_given and wanted.omp_threads is not None and wanted.omp_threads != process.omp_threads:
            self._refuse(name, reasons[0] + "; OMP_NUM_THREADS was given to this server, so it is not changed")
        others = sorted(
            {row["name"] for row in self.server.control.index() if row["state"] == "READY" and row["name"] != name}
        )
        if others:
            self._refuse(
                name,
                "; ".join(reasons) + f". Restarting the server would unload {', '.join(others)}: "
                "unload them first, or serve this model on another server",
            )
        if wanted.omp_threads is not None:
            self._next_omp = wanted.omp_threads
        self.server.log.note(f"workbench: restarting tritonserver for {name!r}: " + "; ".join(reasons))
        self.server.restart()
