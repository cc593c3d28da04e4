"""The backend switch: which Triton backend renders, checks and reads back a model directory.

`BACKENDS` is the one registry, ``GenerateSettings.backend`` (or a config.pbtxt's ``backend``)
-> the `Backend` that handles it; every caller (the CLI, the panels, `workbench.served_outputs`, the
server's loader) asks here instead of comparing backend names. The functions below are the
package's public calls, the same for every backend: `validate`, `render`, `write`, `diff`,
`changes`, `read_back`, `load_settings`.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from workbench.generate.config import ModelConfig, read_config
from workbench.generate.product import GeneratedModel, ReadBack
from workbench.generate.python_backend import PYTHON
from workbench.generate.pytorch_backend.backend import PYTORCH
from workbench.generate.repository import Changes, WriteResult, diff_model_dir, write_model_dir
from workbench.generate.settings import GenerateError, GenerateSettings
from workbench.generate.settings_checks import setting_flag
from workbench.generate.vllm_backend import VLLM

if TYPE_CHECKING:
    import torch

__all__ = [
    "Backend",
    "BACKENDS",
    "backend_named",
    "backend_of",
    "backend_of_config",
    "unread_fields",
    "switching_to",
    "validate",
    "render",
    "write",
    "diff",
    "changes",
    "read_back",
    "load_settings",
    "model_target",
]


class Backend(Protocol):
    """What one Triton backend offers the workbench."""

    name: str  # GenerateSettings.backend and config.pbtxt's ``backend``
    label: str  # the settings panel's choice
    reads: str  # who reads its own fields, for messages ("Triton's PyTorch backend")
    targets: tuple[str, ...]  # the targets it serves (the first is chosen when the current one is not)
    own_fields: tuple[str, ...]  # GenerateSettings fields only this backend reads
    ignored_fields: tuple[str, ...]  # fields it accepts but has no use for (greyed out in the panel)
    pins_cores: bool  # its model reads NEURON_CORE_START/END_INDEX (a sweep sets them for each variant)
    streams_tokens: bool  # decoupled, streaming tokens: `workbench sweep` measures it in tokens (measure/llm)
    server_per_instance: bool  # each instance is a server of its own (one container or pod each) on its cores

    def validate(self, settings: GenerateSettings) -> list[str]:
        """Every problem with ``settings`` for this backend; nothing read for writing, nothing written."""

    def render(self, settings: GenerateSettings) -> GeneratedModel:
        """The files in memory; GenerateError lists every problem."""

    def read_back(self, model_dir: Path, config: ModelConfig) -> ReadBack:
        """The settings that regenerate ``model_dir`` (``config``: its config.pbtxt, already read)."""

    def recognises(self, config: ModelConfig) -> bool:
        """Whether this config.pbtxt belongs to this backend."""

    def config_problems(self, config: ModelConfig) -> list[str]:
        """What this backend would refuse in a (hand-edited) config, beyond `config.validate_config`."""

    def eager_module(self, model_dir: Path) -> torch.nn.Module | None:
        """The module the directory serves, loaded in this process for comparing outputs (None:
        the compiled model its COMPILED_MODEL names is the reference)."""


BACKENDS: dict[str, Backend] = {backend.name: backend for backend in (PYTHON, PYTORCH, VLLM)}


def backend_named(name: str) -> Backend:
    """The backend called ``name``; GenerateError names the choices."""
    try:
        return BACKENDS[name]
    except (KeyError, TypeError):
        raise GenerateError([f"--backend {name!r} is not one of {', '.join(BACKENDS)}"]) from None


def backend_of(settings: GenerateSettings) -> Backend:
    return backend_named(settings.backend)


def backend_of_config(config: ModelConfig) -> Backend:
    """The backend a config.pbtxt belongs to; any other (hand-written, another Triton backend) is
    read as the Python backend's, which keeps what it does not model."""
    return next((backend for backend in BACKENDS.values() if backend.recognises(config)), PYTHON)


def unread_fields(backend: Backend) -> tuple[str, ...]:
    """The GenerateSettings fields ``backend`` does not read: the other backends' own, and its ignored ones."""
    return (
        tuple(name for other in BACKENDS.values() if other is not backend for name in other.own_fields)
        + backend.ignored_fields
    )


def switching_to(backend: Backend, settings: GenerateSettings) -> dict[str, object]:
    """The fields to change when ``settings`` move to ``backend``: the other backends' own fields
    back to their defaults (so nothing left behind makes the settings invalid), and a target it serves."""
    changes = {
        name: _default(name)
        for other in BACKENDS.values()
        if other is not backend
        for name in other.own_fields
        if str(getattr(settings, name)) != str(_default(name))
    }
    if settings.target not in backend.targets:
        changes["target"] = backend.targets[0]
    return changes


def _default(name: str) -> object:
    spec = GenerateSettings.__dataclass_fields__[name]
    return spec.default_factory() if spec.default_factory is not dataclasses.MISSING else spec.default


def _foreign(chosen: Backend, values: dict[str, object]) -> list[str]:
    """Fields set away from their default that only another backend reads: refused, never dropped."""
    problems = []
    for owner in BACKENDS.values():
        for name in owner.own_fields if owner is not chosen else ():
            if name in values and str(values[name]) != str(_default(name)):
                flag = setting_flag(name)
                problems.append(
                    f"{flag} is for {owner.reads}; add --backend {owner.name}"
                    if chosen.name == _default("backend")
                    # no backend chosen: choosing is the fix
                    else f"{flag} is for {owner.reads}; {chosen.reads} does not read it (leave it out, or use "
                    f"--backend {owner.name})"
                )
    return problems


def validate(settings: GenerateSettings) -> list[str]:
    """Every problem with ``settings``, one message each naming the bad item; empty when fine.
    Nothing is written. (Warnings, e.g. idle cores, come with `render`.)"""
    try:
        backend = backend_of(settings)
    except GenerateError as err:
        return err.problems
    return _foreign_fields(backend, settings) + backend.validate(settings)


def _foreign_fields(backend: Backend, settings: GenerateSettings) -> list[str]:
    problems = _foreign(backend, {f.name: getattr(settings, f.name) for f in dataclasses.fields(settings)})
    for name, overrides in settings.variants.items() if isinstance(settings.variants, dict) else ():
        if isinstance(overrides, dict):  # anything else: the backend's own checks name it
            problems += [f"configs/{name}.pbtxt: {p}" for p in _foreign(backend, overrides)]
    return problems


def render(settings: GenerateSettings) -> GeneratedModel:
    """Check ``settings`` and build the files in memory; raises GenerateError listing every problem."""
    backend = backend_of(settings)
    foreign = _foreign_fields(backend, settings)
    if foreign:
        raise GenerateError(foreign + backend.validate(settings))
    return backend.render(settings)  # checks the rest itself, from the plan it renders


def write(
    generated: GeneratedModel, dest: str | Path | None = None, overwrite: bool = False, confirm: Changes | None = None
) -> WriteResult:
    """Write the directory atomically. An existing one is replaced (and backed up) only with
    ``overwrite``, or with ``confirm=generated.changes()`` reviewed while the disk stays as it was;
    an existing directory that would not change is left alone."""
    return write_model_dir(
        generated.dest if dest is None else dest, generated.files, overwrite=overwrite, confirm=confirm
    )


def diff(settings: GenerateSettings) -> str:
    """Unified diff between the model directory on disk and what ``settings`` would write."""
    generated = render(settings)
    return diff_model_dir(generated.dest, generated.files)


def changes(settings: GenerateSettings) -> Changes:
    """What regenerating with ``settings`` would change on disk (files and config fields)."""
    return render(settings).changes()


def read_back(model_dir: str | Path) -> ReadBack:
    """Read ``model_dir`` (ours, upstream's or hand-written, any backend) into settings that regenerate it."""
    model_dir = Path(model_dir)
    config = read_config(model_dir)
    return backend_of_config(config).read_back(model_dir, config)


def model_target(model_dir: str | Path) -> str:
    """The target ``model_dir`` is generated for (what its model runs on when served), as read back."""
    return read_back(model_dir).settings.target


def load_settings(model_dir: str | Path) -> GenerateSettings:
    """Settings that regenerate ``model_dir`` (see `read_back` for the notes)."""
    return read_back(model_dir).settings
