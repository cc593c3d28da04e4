"""A compile farm on Ray: several compiles of one model (batch sizes, targets) as Ray tasks on the
cluster's CPU nodes, their artifacts and records written back into the driver's artifact folder.

Each task runs `workbench.compiler.compile_model` into a node-local temp folder (the CPU target
here; a Neuron target goes through the same compiler seam, which needs the SDK's compiler on the
node but no device) and returns the files it wrote; the driver writes them under ``out_dir`` and
rewrites each record's paths to where the files now are, noting the node that compiled it.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from workbench.compiler.artifact import (
    SIDECAR_SUFFIX,
    Artifact,
    ArtifactError,
    read_artifact,
)
from workbench.files import atomic_write
from workbench.measure.cluster.ray_task import MAX_RETRIES, import_ray

__all__ = ["CompileJob", "compile_on_ray"]


@dataclass(frozen=True)
class CompileJob:
    """One compile: the artifact's ``name``, its ``target``, the example inputs that fix its shapes
    (a batch size's), and further `compile_model` keywords."""

    name: str
    target: str
    example_inputs: Any
    options: dict = field(default_factory=dict)
    num_cpus: float = 1


def compile_job(model: Any, job: CompileJob) -> dict:
    """Run inside a Ray task: the compile in a node-local folder; its files' bytes and records."""
    # run-time: the compiler (torch) loads where the task runs
    from workbench.compiler import compile_model

    ray = import_ray()
    work = Path(tempfile.mkdtemp(prefix="wb-ray-compile-"))
    try:
        artifact = compile_model(model, job.example_inputs, job.target, out_dir=work, name=job.name, **job.options)
        files = {path.name: path.read_bytes() for path in sorted(work.iterdir()) if path.is_file()}
        return {
            "name": job.name,
            "artifact": artifact.to_dict(),
            "files": files,
            "node": ray.get_runtime_context().get_node_id(),
            "address": ray.util.get_node_ip_address(),
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _moved(artifact: Artifact, out_dir: Path, node: dict) -> Artifact:
    """The record with its paths (and its CPU twin's) in ``out_dir``, naming the node that compiled it."""
    twin = _moved(artifact.cpu_artifact, out_dir, node) if artifact.cpu_artifact is not None else None
    return replace(
        artifact,
        path=str(out_dir / Path(artifact.path).name),
        cpu_artifact=twin,
        extra={**artifact.extra, "compiled_on": node},
    )


def compile_on_ray(
    model: Any,
    jobs: Sequence[CompileJob],
    *,
    out_dir: str | Path,
    address: str | None = None,
    overwrite: bool = False,
    max_retries: int = MAX_RETRIES,
) -> list[Artifact]:
    """Compile ``model`` once per job as Ray tasks (each asking ``job.num_cpus`` CPUs), the artifacts
    and their records written into ``out_dir``; returned in the jobs' order. A name given twice, or
    (without ``overwrite``) a file already there, is refused before anything is sent."""
    out_dir = Path(out_dir)
    names = [job.name for job in jobs]
    if len(set(names)) != len(names):
        raise ArtifactError(f"artifact names {names} repeat; give each compile its own name")
    if not overwrite and out_dir.is_dir():
        taken = sorted(p.name for p in out_dir.iterdir() if any(p.name.startswith(f"{n}.") for n in names))
        if taken:
            raise ArtifactError(f"{out_dir} already holds {taken}; pick other names or pass overwrite=True")
    ray = import_ray()
    started_here = not ray.is_initialized()
    if started_here:
        ray.init(address=address, logging_level="WARNING", log_to_driver=False)
    try:
        task = ray.remote(compile_job)
        shipped = ray.put(model)
        refs = [
            task.options(
                num_cpus=job.num_cpus,
                max_retries=max_retries,
                retry_exceptions=False,
                name=f"workbench compile {job.name}",
            ).remote(shipped, job)
            for job in jobs
        ]
        outcomes = ray.get(refs)
    finally:
        if started_here:
            ray.shutdown()
    out_dir.mkdir(parents=True, exist_ok=True)
    artifacts = []
    for outcome in outcomes:
        node = {"node": outcome["node"], "address": outcome["address"]}
        for file_name, data in outcome["files"].items():
            if not file_name.endswith(SIDECAR_SUFFIX):  # the records are written with their new paths
                atomic_write(out_dir / file_name, data)
        artifact = _moved(Artifact.from_dict(outcome["artifact"]), out_dir, node)
        if artifact.cpu_artifact is not None and artifact.cpu_artifact.path != artifact.path:
            artifact.cpu_artifact.write_sidecar()
        artifact.write_sidecar()
        artifacts.append(read_artifact(artifact.path))
    return artifacts
