"""Find a runnable tritonserver and the environment it needs.

Order: an explicit path, ``$TRITONSERVER``, ``tritonserver`` on PATH (the Triton container on a
Neuron host), then the binary inside the ``nvidia-pytriton`` wheel. The wheel ships stubs for
several Python versions but no backend directory laid out the way Triton expects, so one is built
(once, atomically, in a cache folder) holding the python backend and the stub for the RUNNING
interpreter: a stub built for another Python cannot import this venv's packages.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import os
import re
import shutil
import sys
import sysconfig
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from workbench.refusals import WorkbenchError

__all__ = [
    "HOW_TO_GET_ONE",
    "TritonInstall",
    "TritonNotFoundError",
    "find_tritonserver",
    "join_path_front",
    "python_backend_dir",
]


class TritonNotFoundError(WorkbenchError, FileNotFoundError):
    """No usable tritonserver; the message lists every place that was tried."""


@dataclass(frozen=True)
class TritonInstall:
    """A tritonserver binary and what it needs to run.

    ``version`` is Triton's release when it can be read without starting the server (the
    container's ``TRITON_VERSION`` file); otherwise None, and ``TritonServer.version`` has it.
    """

    binary: Path
    backend_dir: Path | None
    library_dirs: tuple[Path, ...] = ()
    version: str | None = None
    source: str = ""
    path_dirs: tuple[Path, ...] = field(default=())
    # where the response-cache libraries are (caches/local/libtritoncache_local.so); Triton looks in
    # /opt/tritonserver/caches unless told, which the pip wheel does not have (measured on 2.51)
    cache_dir: Path | None = None

    def env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """The server process environment: ``base`` (default os.environ) with our library and
        PATH directories in front."""
        env = dict(os.environ if base is None else base)
        if self.library_dirs:
            env["LD_LIBRARY_PATH"] = join_path_front(self.library_dirs, env.get("LD_LIBRARY_PATH", ""))
        if self.path_dirs:
            env["PATH"] = join_path_front(self.path_dirs, env.get("PATH", ""))
        return env


def join_path_front(front: tuple[Path, ...], rest: str) -> str:
    """``front`` ahead of the ``os.pathsep`` list ``rest``, each folder once."""
    parts: list[str] = []
    for item in [str(p) for p in front] + [p for p in rest.split(os.pathsep) if p]:
        if item not in parts:
            parts.append(item)
    return os.pathsep.join(parts)


def _read_version(binary: Path) -> str | None:
    # The NGC container keeps /opt/tritonserver/TRITON_VERSION next to bin/.
    marker = binary.resolve().parent.parent / "TRITON_VERSION"
    try:
        return marker.read_text().strip() or None
    except OSError:
        return None


def _system_install(binary: Path, source: str) -> TritonInstall:
    """A tritonserver from a Triton installation (container or explicit path)."""
    root = binary.resolve().parent.parent
    backends = root / "backends"
    return TritonInstall(
        binary=binary,
        backend_dir=backends if backends.is_dir() else None,
        version=_read_version(binary),
        source=source,
        cache_dir=root / "caches" if (root / "caches").is_dir() else None,
    )


def _wheel_root() -> Path | None:
    """The wheel's ``pytriton/tritonserver`` folder, found without importing pytriton: only its
    files are used, and its Python package needs dependencies (typer, sh, zmq) the server does not."""
    try:
        spec = importlib.util.find_spec("pytriton")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        root = Path(folder).resolve() / "tritonserver"
        if (root / "bin" / "tritonserver").is_file():
            return root
    return None


def _cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "workbench"


def python_backend_dir(wheel_root: Path, cache_root: Path | None = None) -> Path:
    """A ``--backend-directory`` for the wheel's server: ``python/`` with symlinks to the
    backend library, its utils module and the stub for this interpreter's Python version.

    Keyed by wheel version + Python version; built in a temp folder and renamed into place, so
    concurrent callers never see a half-built directory.
    """
    pyver = f"{sys.version_info.major}.{sys.version_info.minor}"
    stub = wheel_root / "python_backend_stubs" / pyver / "triton_python_backend_stub"
    if not stub.is_file():
        have = sorted(p.name for p in (wheel_root / "python_backend_stubs").glob("*"))
        raise TritonNotFoundError(
            f"the nvidia-pytriton wheel at {wheel_root} has no python backend stub for Python {pyver} "
            f"(it has: {', '.join(have) or 'none'})"
        )
    try:
        wheel_version = importlib.metadata.version("nvidia-pytriton")
    except importlib.metadata.PackageNotFoundError:
        wheel_version = "unknown"
    # The wheel path is part of the key too: two venvs with the same versions must not share links.
    key = f"pytriton-{wheel_version}-py{pyver}-{hashlib.sha1(str(wheel_root).encode()).hexdigest()[:10]}"
    target = (cache_root or _cache_root()) / "backends" / key
    links = {
        "libtriton_python.so": wheel_root / "backends" / "python" / "libtriton_python.so",
        "triton_python_backend_utils.py": wheel_root / "backends" / "python" / "triton_python_backend_utils.py",
        "triton_python_backend_stub": stub,
    }

    def in_place() -> bool:
        return all((target / "python" / name).resolve() == src.resolve() for name, src in links.items())

    if in_place():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=target.parent))
    try:
        (staging / "python").mkdir()
        for name, src in links.items():
            (staging / "python" / name).symlink_to(src)
        try:
            os.rename(staging, target)
        except OSError:
            # Someone else won the race (fine), or a stale copy is in the way: move it aside and
            # retry once; a concurrent builder may do either step first, so tolerate both.
            if not in_place():
                aside = Path(tempfile.mkdtemp(prefix=f".{key}-stale-", dir=target.parent))
                for move in ((target, aside / "old"), (staging, target)):
                    try:
                        os.rename(*move)
                    except OSError:
                        pass
                shutil.rmtree(aside, ignore_errors=True)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    if not in_place():
        raise TritonNotFoundError(f"could not prepare the python backend directory {target}")
    return target


# How to get a server, said wherever none is usable (one sentence, made once).
HOW_TO_GET_ONE = (
    "Install the local server with `pip install 'triton-neuron-workbench[local-server]'` (Python 3.11-3.12, "
    "numpy<2; `bash dev.sh` does it), run inside NVIDIA's Triton container (tritonserver on PATH; "
    "on a Neuron host, the image `workbench deploy` writes), or set $TRITONSERVER."
)


# The newest nvidia-pytriton release; its stub was measured to serve wrong numbers under numpy 2, and older
# releases bundle older stubs (0.5.x does not even declare the cap).
_NEWEST_WHEEL_MEASURED = (0, 7, 0)


def _numpy_refusal() -> str | None:
    """Why the wheel's stub cannot serve with this environment's numpy, or None.

    The stub embeds this interpreter and imports its numpy. Under numpy 2 the nvidia-pytriton 0.7.0
    stub reads every input as zeros and sends outputs with no data (docs/install-matrix.md), so a
    numpy 2 beside a wheel up to that release, or beside one that caps numpy below 2, is refused
    before the server starts instead of serving wrong numbers."""
    try:
        numpy_version = importlib.metadata.version("numpy")
        requires = importlib.metadata.requires("nvidia-pytriton") or []
        wheel_version = importlib.metadata.version("nvidia-pytriton")
    except importlib.metadata.PackageNotFoundError:
        return None
    release = tuple(int(part) for part in re.findall(r"\d+", wheel_version)[:3])
    capped = any(re.match(r"numpy[^;]*<2(\.0)*(,|;|$)", r.replace(" ", "")) for r in requires)
    if int(numpy_version.split(".")[0]) >= 2 and (capped or release <= _NEWEST_WHEEL_MEASURED):
        return (
            f"the nvidia-pytriton {wheel_version} wheel's Python-backend stub needs numpy<2, and this "
            f"environment has numpy {numpy_version} (its stub then reads inputs as zeros). "
            "Use a numpy<2 environment for the local server (`pip install 'numpy<2'`), or "
            "tritonserver from NVIDIA's Triton container (on PATH or $TRITONSERVER)"
        )
    return None


def _wheel_install(wheel_root: Path) -> TritonInstall:
    refusal = _numpy_refusal()
    if refusal:
        raise TritonNotFoundError(refusal)
    libs: list[Path] = []
    # The stub must embed the same libpython whose stdlib the venv uses (see docs/ARCHITECTURE.md).
    if sysconfig.get_config_var("Py_ENABLE_SHARED"):
        libdir = sysconfig.get_config_var("LIBDIR")
        if libdir:
            libs.append(Path(libdir))
    wheel_libs = wheel_root.parent.parent / "nvidia_pytriton.libs"
    if wheel_libs.is_dir():
        libs.append(wheel_libs)
    try:
        wheel_version = importlib.metadata.version("nvidia-pytriton")
    except importlib.metadata.PackageNotFoundError:
        wheel_version = "?"
    return TritonInstall(
        binary=wheel_root / "bin" / "tritonserver",
        backend_dir=python_backend_dir(wheel_root),
        library_dirs=tuple(libs),
        version=None,
        source=f"nvidia-pytriton {wheel_version} wheel",
        # The embedded interpreter finds the venv's site-packages through the python on PATH.
        path_dirs=(Path(sys.executable).parent,),
        cache_dir=wheel_root / "caches" if (wheel_root / "caches").is_dir() else None,
    )


def _runnable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def named_backend(
    given: str | os.PathLike[str] | bool | None, env_var: str
) -> tuple[str | os.PathLike[str] | None, str]:
    """The backend folder a caller names and where the name comes from: ``given`` when it is a path,
    else (None or True: "find one") ``$env_var``'s value, or None where that is unset."""
    if given is None or given is True or given is False:
        return os.environ.get(env_var) or None, f"${env_var}"
    return given, "given"


def find_tritonserver(explicit: str | os.PathLike[str] | None = None) -> TritonInstall:
    """The first usable tritonserver: ``explicit``, ``$TRITONSERVER``, PATH, the pytriton wheel.

    An explicit path or ``$TRITONSERVER`` that does not point at an executable is an error (not
    silently skipped): the user asked for that one.
    """
    tried: list[str] = []
    if explicit is not None:
        path = Path(explicit).expanduser()
        if not _runnable(path):
            raise TritonNotFoundError(f"tritonserver {path} (given explicitly) is not an executable file")
        return _system_install(path, "explicit path")
    env_path = os.environ.get("TRITONSERVER")
    if env_path:
        path = Path(env_path).expanduser()
        if not _runnable(path):
            raise TritonNotFoundError(f"$TRITONSERVER={env_path} is not an executable file")
        return _system_install(path, "$TRITONSERVER")
    tried.append("$TRITONSERVER (not set)")
    on_path = shutil.which("tritonserver")
    if on_path:
        return _system_install(Path(on_path), "PATH")
    tried.append("tritonserver on PATH (not found)")
    wheel = _wheel_root()
    if wheel is not None:
        return _wheel_install(wheel)
    tried.append("the nvidia-pytriton wheel (pytriton/tritonserver/bin/tritonserver: not installed)")
    raise TritonNotFoundError("no tritonserver found. Tried: " + "; ".join(tried) + ". " + HOW_TO_GET_ONE)
