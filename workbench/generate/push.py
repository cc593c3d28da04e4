"""Pushing models to the repository a remote tritonserver reads (a mounted or shared folder), through
`repository.write_model_dir`: each model is built beside its destination and renamed into place,
so the server never loads a half-copied model, and a model already there is kept as a backup.
"""

from __future__ import annotations

from pathlib import Path

from workbench.generate.config import ConfigError, parameters_of, read_config
from workbench.generate.repository import RepositoryError, WriteResult, write_model_dir

__all__ = ["PushError", "push_repository", "models_in"]


class PushError(RepositoryError):
    """A push that cannot be made as asked; nothing was written. The message names the model."""


def models_in(source: str | Path) -> list[Path]:
    """The model directories of ``source``: itself when it holds a config.pbtxt, else its sub-folders that do."""
    source = Path(source)
    if not source.is_dir():
        raise PushError(f"{source} is not a folder")
    if (source / "config.pbtxt").is_file():
        return [source]
    models = sorted(p for p in source.iterdir() if p.is_dir() and (p / "config.pbtxt").is_file())
    if not models:
        raise PushError(f"{source} is neither a model directory nor a repository of them (no config.pbtxt)")
    return models


def _files(model_dir: Path) -> dict[str, Path]:
    """The files to copy; a symlink leading out of the model directory is refused (its target,
    e.g. /etc/hostname, is not part of the model and must not be copied to another host)."""
    root = model_dir.resolve()
    for path in sorted(model_dir.rglob("*")):
        if path.is_symlink() and not path.resolve().is_relative_to(root):
            raise PushError(
                f"{model_dir.name}/{path.relative_to(model_dir)} is a symlink to {path.resolve()}, "
                "outside the model directory; nothing was written. Copy the file in instead"
            )
    return {str(p.relative_to(model_dir)): p for p in sorted(model_dir.rglob("*")) if p.is_file()}


def _check_self_contained(model_dir: Path) -> None:
    """A compiled model named by an absolute path outside the directory is not on the remote host."""
    try:
        compiled = parameters_of(read_config(model_dir)).get("COMPILED_MODEL", "")
    except ConfigError as err:
        raise PushError(f"{model_dir}: {err}") from None
    # model.py reads a relative path against the model directory, so "../../x" climbs out of it too
    path = Path(compiled) if Path(compiled).is_absolute() else model_dir / compiled
    if compiled and not path.resolve().is_relative_to(model_dir.resolve()):
        raise PushError(
            f"{model_dir.name}: COMPILED_MODEL {compiled} lies outside the model directory, so the "
            "remote server would not find it; regenerate with the compiled model copied in"
        )


def push_repository(source: str | Path, dest: str | Path, *, overwrite: bool = False) -> list[WriteResult]:
    """Copy the model(s) of ``source`` into the repository folder ``dest``, each one all or nothing.

    Every model is checked before the first is written: one already in ``dest`` is refused unless
    ``overwrite`` (then the old one goes to ``<dest>.backups/``, see `repository.backup_folder`).
    """
    dest = Path(dest)
    models = models_in(source)
    if dest.exists() and not dest.is_dir():
        raise PushError(f"{dest} is not a folder")
    files = {}
    for model in models:
        if (dest / model.name).resolve() == model.resolve():
            raise PushError(f"{model} is already in {dest}: nothing to push")
        _check_self_contained(model)
        files[model] = _files(model)
        if (dest / model.name).exists() and not overwrite:
            raise PushError(
                f"{dest / model.name} already exists; nothing was written. Push with overwrite=True "
                "(--force): the old directory is kept as a timestamped backup"
            )
    return [write_model_dir(dest / model.name, files[model], overwrite=overwrite) for model in models]
