"""Where this machine's parts for serving a vLLM model are, found one way for the app, notebook 09
and the tests: the vLLM environment and Triton's vLLM backend assembled for it.

* The environment's Python: ``$WORKBENCH_VLLM_PYTHON``, else the checkout's ``.venv-vllm``, which
  ``bash dev.sh lab`` sets up in the background on first use (scripts/vllm_env.sh, about two
  minutes once; its lock file says while it runs, its log where it stands) and ``bash dev.sh test``
  sets up before the tests. The checkout's one counts once the script's stamp is written.
* The backend: ``$WORKBENCH_VLLM_BACKEND``, else the one the shared folder's
  ``tools/vllm_backend_here.sh`` assembles inside that environment (``triton-vllm-backend``; the
  shared folder is ``$WORKBENCH_SHARED``, else ``../shared`` beside the checkout).

`vllm_here` says what it found, or which part is missing and how the README's set-up provides it.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from workbench.files import one_at_a_time
from workbench.server.errors import ServerError
from workbench.server.vllm_backend import ENV_BACKEND, ENV_PYTHON, OWN_BACKEND

if TYPE_CHECKING:
    from workbench.server.process import TritonServer

__all__ = [
    "BACKEND_FOLDER",
    "CHECKOUT",
    "SHARED_ENV",
    "VLLM_VENV",
    "VllmHere",
    "assemble_vllm_backend",
    "server_for_vllm",
    "shared_folder",
    "vllm_here",
    "vllm_python_path",
]

CHECKOUT = Path(__file__).resolve().parents[2]  # the clone: scripts/, .venv-vllm/
VLLM_VENV = CHECKOUT / ".venv-vllm"  # scripts/vllm_env.sh's default
SETUP_STAMP = ".workbench-vllm-env"  # written by scripts/vllm_env.sh when the environment is complete
SETUP_LOCK = CHECKOUT / ".venv-vllm.lock"  # held by scripts/vllm_env.sh while it runs
SETUP_LOG = CHECKOUT / ".venv-vllm.log"  # dev.sh lab's background set-up writes here
SHARED_ENV = "WORKBENCH_SHARED"  # the shared folder, else ../shared beside the checkout (as the tests)
VLLM_SCRIPT = Path("tools") / "vllm_backend_here.sh"
BACKEND_FOLDER = "triton-vllm-backend"  # inside the vLLM environment: one backend per environment


@dataclass(frozen=True)
class VllmHere:
    """What serves a vLLM model on this machine: the vLLM environment's Python and Triton's vLLM
    backend directory (both, or ``reason`` says which is missing and how to get it)."""

    python: Path | None
    backend_dir: Path | None
    reason: str = ""

    @property
    def ready(self) -> bool:
        return self.python is not None and self.backend_dir is not None

    @property
    def message(self) -> str:
        """One line on what serves a vLLM model here, or why nothing does."""
        if self.ready:
            return f"served here: Triton's vLLM backend at {self.backend_dir}, vLLM from {self.python}"
        return f"not served here: {self.reason}"


def shared_folder() -> Path:
    """``$WORKBENCH_SHARED``, else ``shared/`` beside the checkout (tests/shared_folder.py's rule)."""
    return Path(os.environ.get(SHARED_ENV) or CHECKOUT.parent / "shared")


def vllm_python_path() -> Path:
    """Where the vLLM environment's Python should be: ``$WORKBENCH_VLLM_PYTHON``, else the
    checkout's ``.venv-vllm``. It may not exist."""
    named = os.environ.get(ENV_PYTHON)
    return Path(named) if named else VLLM_VENV / "bin" / "python"


def _setting_up() -> bool:
    """Whether scripts/vllm_env.sh is setting the checkout's environment up now (it holds the lock)."""
    if not SETUP_LOCK.is_file():
        return False
    with open(SETUP_LOCK, "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(lock, fcntl.LOCK_UN)
    return False


def _missing_environment(python: Path) -> str | None:
    """Why ``python`` is not a vLLM environment to serve from (None: it is)."""
    if os.environ.get(ENV_PYTHON):
        return (
            None
            if python.is_file()
            else (
                f"the vLLM environment ${ENV_PYTHON} names, {python}, does not exist "
                "(`bash scripts/vllm_env.sh` sets one up)"
            )
        )
    if python.is_file() and (VLLM_VENV / SETUP_STAMP).is_file():
        return None
    if _setting_up():
        return (
            f"the vLLM environment is being set up ({VLLM_VENV.name}/, about 2 minutes the first time; "
            f"progress in {SETUP_LOG}): try again when it is ready"
        )
    last = f"; the last attempt's log: {SETUP_LOG}" if SETUP_LOG.is_file() else ""
    return (
        f"the vLLM environment is not set up ({VLLM_VENV} is absent or incomplete): `bash dev.sh lab` sets it "
        f"up in the background on its next start (or run `bash scripts/vllm_env.sh`){last}"
    )


def assemble_vllm_backend(
    script: str | os.PathLike[str], python: str | os.PathLike[str], *, timeout_s: float = 300
) -> Path:
    """The backend directory ``script`` (the shared ``vllm_backend_here.sh``) assembles for
    ``python`` inside its environment (``<venv>/triton-vllm-backend``; a rerun returns at once),
    with the stub's UTF-8 locale fix (its .pth goes into the vLLM environment only, whose stub
    would otherwise fail to import vLLM). Inside the environment because the script's default
    folder is one per Python version, and once it exists the script returns early, without putting
    the locale fix into a new environment. Processes assembling it at once take turns (a lock file
    beside it). RuntimeError with the script's words when it fails."""
    out = Path(python).parent.parent / BACKEND_FOLDER
    with one_at_a_time(out.with_name(f"{out.name}.lock")):
        done = subprocess.run(
            ["bash", str(script), str(python), str(out)],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env={**os.environ, "WB_STUB_LOCALE_FIX": "1"},
            check=False,
        )
    if done.returncode != 0:
        raise RuntimeError(f"{script} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    return Path(done.stdout.strip().splitlines()[-1])


def vllm_here(shared: str | os.PathLike[str] | None = None, *, assemble: bool = True) -> VllmHere:
    """The vLLM environment and Triton's vLLM backend for it (`assemble_vllm_backend`, unless
    ``$WORKBENCH_VLLM_BACKEND`` names one; with ``assemble`` False an unassembled backend is named
    where it will be); what is missing is said, not raised."""
    python = vllm_python_path()
    missing = _missing_environment(python)
    if missing:
        return VllmHere(None, None, missing)
    python = python.absolute()
    named = os.environ.get(ENV_BACKEND)
    if named:
        return VllmHere(python, Path(named).expanduser())
    script = Path(shared or shared_folder()) / VLLM_SCRIPT
    if not script.is_file():
        return VllmHere(
            python,
            None,
            f"Triton's vLLM backend cannot be put together here: {script} is absent (the "
            f"project's shared folder: put it beside the checkout as ../shared or set "
            f"${SHARED_ENV}; or run Triton's vLLM container)",
        )
    built = python.parent.parent / BACKEND_FOLDER
    if (built / ".complete").is_file() or not assemble:
        return VllmHere(python, built)
    try:
        return VllmHere(python, assemble_vllm_backend(script, python))
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as err:
        return VllmHere(python, None, f"Triton's vLLM backend could not be put together: {err}")


def server_for_vllm(repository: str | os.PathLike[str], **options) -> TritonServer:
    """A (not started) server on ``repository`` for vLLM models, served as notebook 09 serves them
    (`vllm_here`); where that finds no part, the server's own vLLM backend (Triton's vLLM
    container, its Python); else ServerError saying which part is missing and how to get it."""
    from workbench.server.process import TritonServer  # the process layer, only when a server is made

    here = vllm_here()
    if here.ready:
        return TritonServer(
            repository, pytorch_backend=False, vllm_backend=here.backend_dir, vllm_python=here.python, **options
        )
    server = TritonServer(repository, pytorch_backend=False, **options)
    if server.vllm.backend is None or server.vllm.backend.source != OWN_BACKEND:
        raise ServerError(here.reason)
    return server
