"""Whether a model needs Triton's auto-complete, so that a local server can start without it.

With auto-complete on, every load of a Python-backend model starts one more stub whose only job
is to call the model.py's ``auto_complete_config``. Where the model.py has none and the config
already names the backend, the inputs and the outputs, that stub changes nothing, yet Triton 2.51
waits about 1.3 s for it on each load. A vLLM model's stub imports vLLM (about 9 s of CPU): where
the server's vLLM backend declares its inputs and outputs in a way the workbench reads
(`vllm_io.declared_io`), the workbench completes the config itself on each load instead. A local
server whose repository holds only such models starts with ``--disable-auto-complete-config``; a
later load of a model that needs auto-complete restarts it with auto-complete on first
(`TritonServer`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from workbench.generate.config import ConfigError, ModelConfig, read_config
from workbench.generate.repository import served_config_path
from workbench.server.vllm_io import BackendIO

__all__ = ["auto_complete_need", "repository_need"]

_MENTIONS_AUTO_COMPLETE = re.compile(rb"\bauto_complete_config\b")


def auto_complete_need(
    model_dir: Path,
    config: ModelConfig | None = None,
    files: Mapping[str, bytes] | None = None,
    config_name: str | None = None,
    vllm_io: BackendIO | None = None,
) -> str | None:
    """Why the model in ``model_dir`` needs auto-complete (None: it would change nothing, or the
    workbench completes it: a vLLM model the server's backend ``vllm_io`` `completes`), loaded
    with the override ``config`` and ``files`` (``{"file:1/model.py": bytes}``) where given, else
    with the config a server run with ``--model-config-name=<config_name>`` reads."""
    if config is None:
        try:
            config = read_config(served_config_path(model_dir, config_name))
        except ConfigError as err:
            return f"its config cannot be read ({err})"
    if config.backend == "vllm" and vllm_io is not None:
        if vllm_io.completes(config):
            return None
        return "its vLLM config batches or is not decoupled: the backend's own auto-complete says what it takes"
    if config.platform or config.backend != "python":
        return f"its backend is {config.backend or config.platform or 'not named'}, not python"
    if not config.input or not config.output:
        return "its config does not declare both inputs and outputs"
    if config.runtime and config.runtime != "model.py":
        return f"its runtime is {config.runtime}"
    sources = _model_py_sources(model_dir, files)
    if not sources:
        return "it has no model.py"
    if any(_MENTIONS_AUTO_COMPLETE.search(source) for source in sources):
        return "its model.py has an auto_complete_config"
    return None


def repository_need(repository: Path, config_name: str | None = None, vllm_io: BackendIO | None = None) -> str | None:
    """Why a server on ``repository`` (with ``config_name`` and ``vllm_io``, as
    `auto_complete_need`) should start with auto-complete on: a model there that needs it, or no
    model yet (nothing says it is not needed); None when none does."""
    models = sorted(p for p in repository.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not models:
        return "the repository holds no model yet"
    for model_dir in models:
        why = auto_complete_need(model_dir, config_name=config_name, vllm_io=vllm_io)
        if why is not None:
            return f"{model_dir.name}: {why}"
    return None


def _model_py_sources(model_dir: Path, files: Mapping[str, bytes] | None) -> list[bytes]:
    """The model.py texts a load would use: the override's when it brings files, else the
    version folders' on disk."""
    if files is not None:
        return [data for key, data in files.items() if key.endswith("/model.py")]
    sources = []
    for path in sorted(model_dir.glob("*/model.py")):
        try:
            sources.append(path.read_bytes())
        except OSError:
            continue
    return sources
