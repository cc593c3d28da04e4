"""Notebook 08's steps: one compiled CPU model generated for both Triton backends it can run on,
and the PyTorch backend build this machine has (or none: the Python-backend twin serves).

The generation is `workbench.generate` with ``backend="python"`` and ``backend="pytorch"``; the
measurement is `workbench.measure.sweep.compare_backends.compare_backends`; nothing here measures.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from workbench.coremap import CoreRange
from workbench.files import one_at_a_time
from workbench.generate import GenerateSettings, render, write
from workbench.measure.grid.rows import flag
from workbench.measure.sweep.compare_backends import BackendComparison
from workbench.server.protocol import Server

__all__ = ["built_libtorch_backend", "build_libtorch_backend", "generate_both", "measured_and_matched", "where_served"]

_BUILD_CACHE = "workbench/libtorch-backend"  # under $XDG_CACHE_HOME or ~/.cache: build_libtorch_backend.sh's default


def built_libtorch_backend() -> Path | None:
    """A backend directory with Triton's real PyTorch backend for this torch: ``$WORKBENCH_LIBTORCH_BACKEND``,
    else the newest one ``build_libtorch_backend.sh`` cached for this torch version; None when
    there is none (the server then serves PyTorch-backend models through the twin). What it
    returns is checked by the server's one finder (`server.pytorch.find_pytorch_backend`)."""
    import torch

    # start-up: server/ (tritonclient) loads only when the build is looked for
    from workbench.server.pytorch import ENV_VAR

    if os.environ.get(ENV_VAR):
        return Path(os.environ[ENV_VAR])
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / _BUILD_CACHE
    built = [
        d
        for d in cache.glob(f"*-torch-{torch.__version__}-*")
        if (d / "pytorch" / "libtriton_pytorch.so").is_file() and (d / ".complete").is_file()
    ]
    return max(built, key=lambda d: d.stat().st_mtime) if built else None


def build_libtorch_backend(script: str | os.PathLike[str], *, timeout_s: float = 1800) -> Path:
    """The backend directory ``script`` (the shared ``build_libtorch_backend.sh``) builds for this
    interpreter, or finds in its cache (a rerun takes seconds); processes building it at once take
    turns (a lock file beside the cache), so the second finds it built. RuntimeError with the
    script's last words when it fails."""
    import subprocess
    import sys

    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "workbench"
    with one_at_a_time(cache / "libtorch-backend.lock"):
        done = subprocess.run(
            ["bash", str(script), sys.executable], capture_output=True, text=True, timeout=timeout_s, check=False
        )
    if done.returncode != 0:
        raise RuntimeError(f"{script} failed ({done.returncode}):\n{done.stderr[-4000:]}")
    return Path(done.stdout.strip().splitlines()[-1])


def generate_both(
    artifact: Any, repository: str | Path, name: str, *, max_batch_size: int = 8, threads: int = 1
) -> tuple[Path, Path]:
    """Write ``<name>_python`` (model.py running the TorchScript archive on ``threads`` CPU
    threads) and ``<name>_pytorch`` (the same archive as model.pt for LibTorch, with
    INTRA_OP_THREAD_COUNT = ``threads``) into ``repository``; returns both directories."""
    repository = Path(repository)
    common: dict[str, Any] = dict(compiled_model=str(artifact.path), target="cpu", max_batch_size=max_batch_size)
    python = GenerateSettings(
        triton_model_dir=str(repository / f"{name}_python"),
        copy_compiled_model=True,
        neuron_core_range=CoreRange(0, threads - 1),
        **common,
    )
    pytorch = GenerateSettings(
        triton_model_dir=str(repository / f"{name}_pytorch"),
        backend="pytorch",
        instance_group_kind="KIND_CPU",
        parameters={"INTRA_OP_THREAD_COUNT": threads},
        **common,
    )
    for settings in (python, pytorch):
        write(render(settings), overwrite=True)
    return python.model_dir, pytorch.model_dir


def measured_and_matched(comparison: BackendComparison) -> str:
    """``True`` when every point was measured and its outputs matched the eager model's; else
    ``False`` and, per point that was not, why: the line a notebook checks says what went wrong."""
    why = []
    for row in comparison.frame.to_dict("records"):
        if isinstance(row["error"], str):
            reason = row["error"]
        elif flag(row["outputs_ok"]) is not True:
            reason = f"outputs did not match (max abs diff {row['max_abs_diff']}): {row['warnings'] or 'none checked'}"
        else:
            continue
        why.append(f"{row['variant']} batch {row['batch_size']} concurrency {row['concurrency']}: {reason}")
    return "True" if not why else "\n  ".join(["False", *why])


def where_served(server: Server, names: list[str]) -> str:
    """One line per model: the backend that served its last load."""
    return "\n".join(server.served_by(name) or f"{name}: not loaded by this process" for name in names)
