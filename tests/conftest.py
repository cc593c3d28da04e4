"""Shared pytest fixtures.

``triton_server`` / ``triton_server_module`` are factories: call them with a model repository
(and any TritonServer keyword) to get a started server that is stopped at teardown, even when
the test fails. Use the module-scoped one to share one server across a test module.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from workbench.server import TritonServer

ServerFactory = Callable[..., TritonServer]


def _factory() -> Iterator[ServerFactory]:
    servers: list[TritonServer] = []

    def make(model_repository: Any, **kwargs: Any) -> TritonServer:
        server = TritonServer(model_repository, **kwargs)
        servers.append(server)
        return server.start()

    try:
        yield make
    finally:
        for server in servers:
            server.stop(timeout=10)


@pytest.fixture
def triton_server() -> Iterator[ServerFactory]:
    yield from _factory()


@pytest.fixture(scope="module")
def triton_server_module() -> Iterator[ServerFactory]:
    yield from _factory()


# --- Triton's real PyTorch (LibTorch) backend ------------------------------------------------

_BUILD_SCRIPT = Path(__file__).resolve().parents[1].parent / "shared" / "tools" / "build_libtorch_backend.sh"


@pytest.fixture(scope="session")
def libtorch_backend_dir() -> Path:
    """A backend directory with Triton's real PyTorch backend for the wheel's tritonserver:
    ``$WORKBENCH_LIBTORCH_BACKEND``, else what ``../shared/tools/build_libtorch_backend.sh`` builds
    for this interpreter (once: it caches by tag under ~/.cache, so a rerun takes seconds). Skips,
    saying why, where neither exists (tests then cover the Python-backend twin alone)."""
    from workbench.server.pytorch import ENV_VAR

    named = os.environ.get(ENV_VAR)
    if named:
        return Path(named)
    if not _BUILD_SCRIPT.is_file():
        pytest.skip(f"no real PyTorch backend: ${ENV_VAR} is unset and {_BUILD_SCRIPT} is absent "
                    "(the PyTorch-backend tests cover the Python-backend twin only)")
    started = time.monotonic()
    done = subprocess.run(["bash", str(_BUILD_SCRIPT), sys.executable], capture_output=True, text=True,
                          timeout=1500)
    if done.returncode != 0:
        pytest.fail(f"{_BUILD_SCRIPT} failed ({done.returncode}):\n{done.stderr[-4000:]}")
    backend_dir = Path(done.stdout.strip().splitlines()[-1])
    print(f"\nLibTorch backend: {backend_dir} ({time.monotonic() - started:.0f} s)", file=sys.stderr)
    return backend_dir
