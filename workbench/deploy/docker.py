"""The ``docker run`` that serves a model repository on a Neuron host, in the recipe's image.

There is no Neuron device (and no docker engine) where the workbench is usually developed, so
this only builds the command, for the user to copy to the Neuron host. What it gets right that is
easy to get wrong by hand: the container sees only the ``/dev/neuronN`` devices passed with
``--device``, and NeuronCore ids stay global inside it (the Neuron container guide runs cores
51-52 of an inf1.24xlarge with ``--device=/dev/neuron12 --device=/dev/neuron13 --env
NEURON_RT_VISIBLE_CORES=51,52``), so the devices must be exactly those that hold the core range
at the instance's LNC (`devices`); the image is the one the host recipe builds for the target and
framework, since the stock Triton image has no Neuron packages (`recipe`).
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from workbench.coremap import CoreRange
from workbench.deploy.devices import family_of, is_cpu, lnc_of, neuron_devices
from workbench.deploy.names import host_mount_problem, image_reference
from workbench.deploy.recipe import Recipe, recipe_for
from workbench.releases import TRITON_IMAGE

if TYPE_CHECKING:
    from workbench.generate import GeneratedModel

__all__ = [
    "DEFAULT_IMAGE",
    "CPU_IMAGE",
    "DockerRun",
    "neuron_devices",
    "docker_run_command",
    "docker_run_for_model",
]

# The image the recipe builds for the default Neuron target and framework (inf2, PyTorch).
DEFAULT_IMAGE = recipe_for("inf2", "pytorch").image
# A CPU model needs no Neuron packages; the image must still hold the framework model.py imports.
CPU_IMAGE = TRITON_IMAGE.format(tag=recipe_for("inf2", "pytorch").stack.container.value)

CONTAINER_REPOSITORY = "/models"


@dataclass(frozen=True)
class DockerRun:
    """A ready ``docker run``: ``argv`` for subprocess, ``command`` for a shell, ``pretty`` to read."""

    argv: tuple[str, ...]
    devices: tuple[int, ...]
    cores: range
    image: str
    recipe: Recipe | None = None  # how to build ``image`` (None for the CPU or a caller's own image)

    @property
    def command(self) -> str:
        return shlex.join(self.argv)

    @property
    def pretty(self) -> str:
        """One option per line with backslash continuations, as in a README."""
        lines: list[str] = []
        args = list(self.argv)
        i = args.index(self.image)
        head, tail = args[:i], args[i:]
        lines.append(" ".join(shlex.quote(a) for a in head[:2]))
        j = 2
        while j < len(head):
            # Keep an option and its value on one line.
            if head[j].startswith("-") and j + 1 < len(head) and not head[j + 1].startswith("-") and "=" not in head[j]:
                lines.append(f"  {shlex.quote(head[j])} {shlex.quote(head[j + 1])}")
                j += 2
            else:
                lines.append(f"  {shlex.quote(head[j])}")
                j += 1
        lines.append(f"  {shlex.quote(tail[0])}")
        lines.append("  " + " ".join(shlex.quote(a) for a in tail[1:]))
        return " \\\n".join(lines)

    def __str__(self) -> str:
        return self.command


def _port(value: int, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65535:
        raise ValueError(f"{what} must be a port between 1 and 65535, got {value!r}")
    return value


def docker_run_command(
    model_repository: str | os.PathLike[str],
    core_range: CoreRange,
    *,
    instance_type: str | None = None,
    cores_per_device: int | None = None,
    lnc: int | None = None,
    framework: str = "pytorch",
    image: str | None = None,
    http_port: int = 8000,
    grpc_port: int = 8001,
    metrics_port: int = 8002,
    publish_address: str = "127.0.0.1",
    shm_size: str = "1g",
    load_models: tuple[str, ...] | list[str] = (),
    container_name: str | None = None,
    detach: bool = False,
    extra_docker_args: tuple[str, ...] | list[str] = (),
    extra_tritonserver_args: tuple[str, ...] | list[str] = (),
) -> DockerRun:
    """The ``docker run`` for serving ``model_repository`` on NeuronCores ``core_range``.

    ``instance_type="cpu"`` serves on CPU cores instead: no devices, ``--cpuset-cpus`` pins the
    container to the range. Otherwise the image defaults to the one the host recipe builds for the
    instance's family and ``framework`` (`recipe_for`; a given ``image`` must fit it too), the
    runtime sees only the range (``NEURON_RT_VISIBLE_CORES``; model.py narrows it per instance)
    and a non-default Trn2/Trn3 ``lnc`` is passed as ``NEURON_LOGICAL_NC_CONFIG``, the runtime's own
    variable (SDK logical-nc-config page; TorchNeuron compiles at that LNC on first use).

    Ports are published on ``publish_address`` (loopback by default; use ``0.0.0.0`` to serve
    other hosts). Triton runs with explicit model control and loads ``load_models``, or every
    model in the repository when none are named, so the workbench can still load/unload later.
    """
    cores = core_range
    devices = neuron_devices(cores, instance_type=instance_type, cores_per_device=cores_per_device, lnc=lnc)
    effective_lnc = None if is_cpu(instance_type) else lnc_of(instance_type, lnc)
    recipe = None
    if not is_cpu(instance_type) and instance_type is not None:
        family = family_of(instance_type)
        recipe = recipe_for(family, framework)
        if image is not None and image != recipe.image:
            recipe_for(family, framework, image=image)  # refuses a stock image whose Python cannot run it
            recipe = None  # the caller's own image: the recipe does not say how it was built
    if image is None:
        image = CPU_IMAGE if is_cpu(instance_type) else recipe.image if recipe is not None else DEFAULT_IMAGE
    ports = {
        "http_port": _port(http_port, "http_port"),
        "grpc_port": _port(grpc_port, "grpc_port"),
        "metrics_port": _port(metrics_port, "metrics_port"),
    }
    if len(set(ports.values())) != 3:
        raise ValueError(f"http, grpc and metrics ports must differ, got {ports}")
    image_reference(image, "image")
    repo = os.path.abspath(os.fspath(model_repository))
    problem = host_mount_problem(repo, "model repository")
    if problem:
        raise ValueError(problem)
    for name in load_models:
        if not name or "/" in name or name.startswith("-"):
            raise ValueError(f"model name {name!r} is not a valid Triton model name")

    argv: list[str] = ["docker", "run", "--rm"] + (["-d"] if detach else [])
    if container_name:
        argv += ["--name", container_name]
    for n in devices:
        argv += ["--device", f"/dev/neuron{n}"]
    if is_cpu(instance_type):
        argv.append(f"--cpuset-cpus={cores.start}-{cores.end}")
    else:
        visible = str(cores.start) if cores.size == 1 else f"{cores.start}-{cores.end}"
        argv += ["--env", f"NEURON_RT_VISIBLE_CORES={visible}"]
    if effective_lnc is not None and effective_lnc != lnc_of(instance_type):
        argv += ["--env", f"NEURON_LOGICAL_NC_CONFIG={effective_lnc}"]
    argv += [
        f"--shm-size={shm_size}",
        "--ulimit",
        "memlock=-1",
        "--ulimit",
        "stack=67108864",
    ]
    for container_port in (8000, 8001, 8002):
        host_port = {8000: http_port, 8001: grpc_port, 8002: metrics_port}[container_port]
        argv += ["-p", f"{publish_address}:{host_port}:{container_port}"]
    argv += ["-v", f"{repo}:{CONTAINER_REPOSITORY}"]
    argv += list(extra_docker_args)
    argv.append(image)
    argv += [
        "tritonserver",
        f"--model-repository={PurePosixPath(CONTAINER_REPOSITORY)}",
        "--model-control-mode=explicit",
    ]
    argv += [f"--load-model={name}" for name in load_models] or ["--load-model=*"]
    argv += list(extra_tritonserver_args)
    return DockerRun(argv=tuple(argv), devices=tuple(devices), cores=cores.cores, image=image, recipe=recipe)


def docker_run_for_model(
    generated: GeneratedModel, *, repository: str | os.PathLike[str] | None = None, **options: Any
) -> DockerRun:
    """The ``docker run`` for a generated model directory: its repository (or ``repository``,
    where it will be on the Neuron host), its core range, target and framework, loading just that
    model. ``options`` go to ``docker_run_command``. A vLLM-backend model runs one container per
    instance: `workbench.deploy.vllm_instances.docker_runs` (this refuses it rather than run them as one)."""
    from workbench.generate.backends import backend_named  # start-up: loaded only when asked

    if backend_named(generated.settings.backend).server_per_instance:
        raise ValueError(
            "a vLLM-backend model runs one container per instance: use workbench.deploy.vllm_instances."
            "docker_runs(deployment_for_model(generated)) or `workbench deploy MODEL_DIR`"
        )
    options.setdefault("load_models", (generated.dest.name,))
    options.setdefault("framework", generated.settings.framework)
    if "cores_per_device" not in options:
        options.setdefault("instance_type", generated.settings.target)
    # a backend that places nothing on cores (Triton's PyTorch backend) serves on the config's range, as `deploy` does
    core_map = generated.core_map
    cores = core_map.core_range if core_map is not None else CoreRange.parse(generated.settings.neuron_core_range)
    where = Path(generated.dest).parent if repository is None else repository
    return docker_run_command(where, cores, **options)
