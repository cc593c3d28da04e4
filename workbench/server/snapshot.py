"""What a server has loaded, so work that loads its own variants (a sweep) can leave it as it was.

A snapshot holds, per model it was asked about, the config the server was serving it with (or
that it was not loaded); for a model this process loaded with override files (a vLLM variant's
1/model.json), which a served config cannot show, that load's config and files. Restoring loads
each one back with those, or unloads it: a model the work left as it was is not loaded anew
(Triton answers a load of the config and files it serves at once). Only the
models named are read and touched: every other model on the server is left alone.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from workbench.server.protocol import Server

__all__ = ["ModelState", "snapshot", "restore", "describe_server"]

_LOADED = ("READY",)


@dataclass(frozen=True)
class ModelState:
    """``configs``: model name -> the config JSON it was served with, or None when not loaded;
    ``files``: model name -> the override files it was loaded with, where it was."""

    configs: Mapping[str, dict | None]
    files: Mapping[str, dict[str, bytes]] = field(default_factory=dict)

    def loaded(self) -> list[str]:
        return sorted(name for name, config in self.configs.items() if config is not None)


def snapshot(server: Server, names: Iterable[str]) -> ModelState:
    """The state of models ``names`` on ``server`` (a `TritonServer` or `RunningServer`)."""
    ready = {row["name"] for row in server.index() if row.get("state") in _LOADED}
    configs: dict[str, dict | None] = {}
    files: dict[str, dict[str, bytes]] = {}
    for name in names:
        asked = server.last_load(name) if name in ready and server.requested_config(name) is None else None
        if asked is not None and asked.config is not None and asked.files:
            # loaded here with override files, which the served config cannot show: that request again
            configs[name], files[name] = json.loads(asked.config), asked.files
        else:
            configs[name] = _served_config(server, name) if name in ready else None
    return ModelState(configs, files)


def _served_config(server: Server, name: str) -> dict:
    """The served config as a load override takes it (Triton's JSON, checked by ModelConfig). For a
    PyTorch-backend model the config that was asked for: the server reports its twin's, which
    loaded again as it is would look for a model.py the directory does not have."""
    # start-up: tritonclient (control) loads when a served config is read
    from workbench.server.control import config_to_json

    requested = server.requested_config(name)
    if requested is not None:
        return json.loads(requested)
    return json.loads(config_to_json(server.model_config(name)))


def restore(server: Server, state: ModelState) -> list[str]:
    """Put every model of ``state`` back: loaded with its config, or unloaded. Returns what was
    done (``"loaded m"``/``"unloaded m"``); an error names the model and stops."""
    done = []
    ready = {row["name"] for row in server.index() if row.get("state") in _LOADED}
    for name, config in state.configs.items():
        if config is not None:
            server.load(name, config=config, files=state.files.get(name))
            done.append(f"loaded {name}")
        elif name in ready:
            server.unload(name)
            done.append(f"unloaded {name}")
    return done


def describe_server(server: Server, url: str) -> dict[str, Any]:
    """The run record's entry for the server measured: its own description, with the URL measured."""
    return {**server.describe(), "url": url}
