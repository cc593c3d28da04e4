"""A helper for test modules that serve a small Python-backend model of their own: written into a
repository and loaded on a server from the ``triton_server_module`` fixture (tests/conftest.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable


def serve_python_model(factory: Callable[[Path], Any], repo: Path, name: str, config: str, model_py: str) -> Any:
    """A server (from ``factory``, e.g. ``triton_server_module``) serving one Python-backend model
    written into ``repo`` as ``<name>/config.pbtxt`` and ``<name>/1/model.py``, loaded."""
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(config)
    (repo / name / "1" / "model.py").write_text(model_py)
    server = factory(repo)
    server.load(name)
    return server
