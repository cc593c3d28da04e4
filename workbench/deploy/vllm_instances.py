"""Taking a Triton vLLM-backend model directory to a Neuron host: its stack, one ``docker run`` per instance.

A vLLM-backend model (``workbench generate --backend vllm``) splits its core range into instances of
``tensor_parallel_size`` cores, but Triton's vLLM backend sets no ``NEURON_RT_VISIBLE_CORES`` per
instance (its src/model.py reads only model.json): every engine of one tritonserver would see the
same cores. So each instance is its own tritonserver container, started with its own cores
(``--device`` for the devices holding them, ``NEURON_RT_VISIBLE_CORES`` with global ids, at the
target's LNC: SDK-ctr, SDK-lnc) and its own ports, loading the model with ONE instance: when the
directory asks for more, the one-instance config.pbtxt written beside the recipe is mounted over
the model's. model.json names the Hugging Face folder (and tokenizer) by its path on the machine
that generated it; the run mounts them read-only at the same path, so model.json is served as
written. The stack (and so the image) follows the target: vLLM Neuron on Trn2/Trn3, vLLM 0.16 with
the NxD Inference plugin on Inf2/Trn1 (`facts_vllm`).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from workbench.coremap import CoreMap, CoreRange
from workbench.deploy.devices import family_of, instance_cores_at, lnc_of
from workbench.deploy.docker import CONTAINER_REPOSITORY, DockerRun, docker_run_command
from workbench.deploy.facts_vllm import VLLM_FRAMEWORK, VLLM_STACKS, vllm_stack_of
from workbench.deploy.names import host_mount_problem
from workbench.generate.config import ModelConfig, read_config, to_text
from workbench.generate.settings import GenerateSettings
from workbench.generate.vllm_backend.engine_settings import VllmSettings
from workbench.refusals import WorkbenchError
from workbench.releases import Stack

if TYPE_CHECKING:
    from workbench.generate import GeneratedModel

__all__ = [
    "VllmDeployError",
    "VllmDeployment",
    "vllm_deployment",
    "deployment_for_model",
    "one_instance_config",
    "docker_runs",
    "runs_text",
    "ONE_INSTANCE_CONFIG",
    "PORT_STEP",
]

ONE_INSTANCE_CONFIG = "config-one-instance.pbtxt"  # beside the recipe; mounted over the model's config.pbtxt
PORT_STEP = 10  # instance k publishes http/grpc/metrics on the base ports + k * PORT_STEP


class VllmDeployError(WorkbenchError, ValueError):
    """A vLLM model directory that no Neuron vLLM stack can serve as asked; the message says why,
    in the flags of ``workbench deploy`` / ``workbench generate``."""


@dataclass(frozen=True)
class VllmDeployment:
    """What a vLLM model directory needs on its Neuron host, checked whole."""

    model_dir: Path
    target: str
    instance_type: str  # the given instance type, or the target's family
    lnc: int | None  # the LNC the cores are counted at (Trn2/Trn3), None elsewhere
    tensor_parallel_size: int
    core_map: CoreMap
    folders: tuple[str, ...]  # the model folder model.json reads (and the tokenizer's, when outside it)
    stack: Stack
    config: ModelConfig  # the directory's config.pbtxt (what the one-instance config starts from)

    @property
    def model_name(self) -> str:
        return self.model_dir.name

    def instance_range(self, k: int) -> CoreRange:
        cores = self.core_map.cores(k)
        return CoreRange(cores.start, cores.stop - 1)


def _problem(target: str) -> str:
    served = "; ".join(f"{', '.join(s.targets)}: {s.key}" for s in VLLM_STACKS)
    return (
        f"this vLLM model's target is {target} (its config.pbtxt WORKBENCH_TARGET), which no Neuron vLLM "
        f"stack serves ({served}); regenerate it with `workbench generate --backend vllm --target "
        f"{'|'.join(t for s in VLLM_STACKS for t in s.targets)}`"
        + (", or serve it here on CPU" if target == "cpu" else "")
    )


def vllm_deployment(
    model_dir: Path,
    settings: GenerateSettings,
    *,
    instance_type: str | None = None,
    lnc: int | None = None,
    config: ModelConfig | None = None,
) -> VllmDeployment:
    """Check a vLLM model directory (its read-back ``settings``; ``config``: its config.pbtxt, read
    from the directory when None) against the host asked for."""
    vllm = settings.backend_settings
    if not isinstance(vllm, VllmSettings):
        raise VllmDeployError(f"{model_dir} is not a vLLM-backend model directory (no 1/model.json settings)")
    target = settings.target
    stack = vllm_stack_of(target)
    if stack is None:
        raise VllmDeployError(_problem(target))
    instance = instance_type or target
    if family_of(instance) != target:
        raise VllmDeployError(f"--instance-type {instance_type} is not a {target} instance (the model's --target)")
    if lnc is not None and vllm.lnc is not None and lnc != vllm.lnc:
        raise VllmDeployError(
            f"--lnc {lnc} contradicts the model's LNC {vllm.lnc} (generated with --lnc {vllm.lnc}): "
            "its cores and tensor-parallel degree are counted at that LNC; drop --lnc or regenerate"
        )
    effective = lnc_of(instance, lnc if lnc is not None else vllm.lnc)  # refuses an LNC on inf2/trn1
    tp = vllm.tensor_parallel_size
    core_range = vllm.core_range if isinstance(vllm.core_range, CoreRange) else CoreRange(0, tp - 1)
    total = instance_cores_at(instance, effective) if "." in instance else None
    at = f" at LNC={effective}" if effective else ""
    if total is not None and tp > total:
        raise VllmDeployError(
            f"--tensor-parallel-size {tp} needs {tp} NeuronCores per instance, but {instance} has "
            f"{total}{at}: pick a larger --instance-type or regenerate with a smaller degree"
        )
    if total is not None and core_range.end >= total:
        raise VllmDeployError(
            f"the model's --neuron_core_range {core_range} needs core {core_range.end}, but "
            f"{instance} has cores 0..{total - 1}{at}: pick a larger --instance-type or regenerate"
        )
    if tp > core_range.size:
        raise VllmDeployError(f"--tensor-parallel-size {tp} does not fit the model's --neuron_core_range {core_range}")
    relative = [f for f in (vllm.model, vllm.tokenizer) if f and not Path(f).is_absolute()]
    if relative:
        raise VllmDeployError(
            f"model.json names {relative[0]!r} by a relative path, which a container cannot mount "
            "at the same place: regenerate with an absolute --compiled_model / --tokenizer"
        )
    model_folder = PurePosixPath(vllm.model)
    folders = (str(model_folder),) + tuple(
        str(PurePosixPath(t)) for t in (vllm.tokenizer,) if t and not PurePosixPath(t).is_relative_to(model_folder)
    )
    for folder, flag in zip(folders, ("--compiled_model", "--tokenizer")):  # mounted at their own path
        problem = host_mount_problem(folder, f"model.json's {flag}")
        if problem:
            raise VllmDeployError(problem)
    config = config if config is not None else read_config(Path(model_dir) / "config.pbtxt")
    return VllmDeployment(
        Path(model_dir), target, instance, effective, tp, core_range.blocks(tp), folders, stack, config
    )


def deployment_for_model(
    generated: GeneratedModel, *, instance_type: str | None = None, lnc: int | None = None
) -> VllmDeployment:
    """`vllm_deployment` for a rendered (not necessarily written) vLLM model: its settings and config."""
    return vllm_deployment(
        Path(generated.dest), generated.settings, instance_type=instance_type, lnc=lnc, config=generated.config
    )


def one_instance_config(deployment: VllmDeployment) -> str | None:
    """The model's config.pbtxt with one instance (what each container serves), or None when the
    directory already asks for one."""
    config = ModelConfig()
    config.CopyFrom(deployment.config)
    if sum(group.count for group in config.instance_group) <= 1:
        return None
    del config.instance_group[:]
    config.instance_group.add(kind="KIND_MODEL", count=1)
    return to_text(config)


def _container_name(model: str, k: int) -> str:
    return "triton-" + re.sub(r"[^a-zA-Z0-9_.-]+", "-", model).strip("-.") + f"-{k}"


def docker_runs(
    deployment: VllmDeployment,
    *,
    repository: str | os.PathLike[str] | None = None,
    config_file: Path | None = None,
    image: str | None = None,
    http_port: int = 8000,
    publish_address: str = "127.0.0.1",
) -> list[DockerRun]:
    """One detached ``docker run`` per instance: its devices and NEURON_RT_VISIBLE_CORES, ports
    ``http_port + k * PORT_STEP`` (grpc +1, metrics +2), the model folders mounted read-only at
    their own paths and, for a directory of several instances, ``config_file`` (its one-instance
    config) mounted over the model's config.pbtxt."""
    d = deployment
    if d.core_map.instances > 1 and config_file is None:
        raise VllmDeployError(
            f"{d.model_name} asks for {d.core_map.instances} instances: each container needs the "
            "one-instance config (one_instance_config) mounted over config.pbtxt"
        )
    where = repository if repository is not None else d.model_dir.parent
    mounts = [a for folder in d.folders for a in ("-v", f"{folder}:{folder}:ro")]
    if config_file is not None:
        problem = host_mount_problem(str(Path(config_file).resolve()), "the one-instance config")
        if problem:
            raise VllmDeployError(problem)
        mounts += ["-v", f"{Path(config_file).resolve()}:{CONTAINER_REPOSITORY}/{d.model_name}/config.pbtxt:ro"]
    runs = []
    for k in range(d.core_map.instances):
        port = http_port + k * PORT_STEP
        runs.append(
            docker_run_command(
                where,
                d.instance_range(k),
                instance_type=d.instance_type,
                lnc=d.lnc,
                framework=VLLM_FRAMEWORK,
                image=image,
                http_port=port,
                grpc_port=port + 1,
                metrics_port=port + 2,
                publish_address=publish_address,
                load_models=[d.model_name],
                container_name=_container_name(d.model_name, k),
                detach=True,
                extra_docker_args=mounts,
            )
        )
    return runs


def runs_text(deployment: VllmDeployment, runs: list[DockerRun]) -> str:
    """The runs as a README shows them: what they need on the host, then one block per instance
    saying its cores."""
    d = deployment
    blocks = [
        f"# {d.core_map.instances} container(s), one per instance of {d.model_name}; model.json reads "
        f"{', '.join(d.folders)}: copy it to the same path on the Neuron host"
    ]
    for k, run in enumerate(runs):
        blocks.append(
            f"# instance {k}: NeuronCores {deployment.core_map.visible_cores(k)} "
            f"(tensor_parallel_size {deployment.tensor_parallel_size}"
            + (f", LNC={deployment.lnc}" if deployment.lnc else "")
            + ")\n"
            + run.pretty
        )
    return "\n\n".join(blocks)
