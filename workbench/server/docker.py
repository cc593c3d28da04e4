"""The ``docker run`` that serves a model repository with the stock Triton container on a Neuron host.

There is no Neuron device (and no docker engine) where the workbench is usually developed, so
this only builds the command, for the user to copy to the Neuron host. What it gets right that is
easy to get wrong by hand: the container sees only the ``/dev/neuronN`` devices passed with
``--device``, and NeuronCore ids stay global inside it (the Neuron container guide's example runs
cores 51-52 of an inf1.24xlarge with ``--device=/dev/neuron12 --device=/dev/neuron13``), so the
devices must be exactly those that hold the chosen core range.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from pathlib import Path, PurePosixPath

from workbench.coremap import CoreRange, CoreRangeError
from workbench.system import cores_for_instance, cores_per_device

if TYPE_CHECKING:
    from workbench.generate import GeneratedModel

__all__ = [
    "DEFAULT_IMAGE",
    "DockerRun",
    "neuron_devices",
    "docker_run_command",
    "docker_run_for_model",
]

DEFAULT_IMAGE = "nvcr.io/nvidia/tritonserver:26.06-py3"

CONTAINER_REPOSITORY = "/models"


@dataclass(frozen=True)
class DockerRun:
    """A ready ``docker run``: ``argv`` for subprocess, ``command`` for a shell, ``pretty`` to read."""

    argv: tuple[str, ...]
    devices: tuple[int, ...]
    cores: range
    image: str

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


def neuron_devices(
    core_range: str | CoreRange | tuple[int, int],
    *,
    instance_type: str | None = None,
    cores_per_device: int | None = None,
) -> list[int]:
    """Indices N of the ``/dev/neuronN`` devices holding cores ``a:b`` (inclusive); none for
    ``instance_type="cpu"``."""
    cores = CoreRange.parse(core_range)
    if instance_type is not None and instance_type.strip().lower() == "cpu":
        return []
    per_device = _per_device(instance_type, cores_per_device)
    if instance_type is not None and "." in instance_type:
        total = cores_for_instance(instance_type)
        if total is not None and cores.end >= total:
            raise CoreRangeError(
                f"core range {cores} needs core {cores.end}, but {instance_type} has cores 0..{total - 1}"
            )
    return list(range(cores.start // per_device, cores.end // per_device + 1))


def _per_device(instance_type: str | None, given: int | None) -> int:
    if given is not None:
        if isinstance(given, bool) or not isinstance(given, int) or given < 1:
            raise ValueError(f"cores_per_device must be a positive integer, got {given!r}")
        if instance_type is not None and given != cores_per_device(instance_type):
            raise ValueError(
                f"cores_per_device={given} contradicts {instance_type} "
                f"({cores_per_device(instance_type)} per device); give one of them"
            )
        return given
    if instance_type is None:
        raise ValueError("give instance_type (e.g. 'inf2.24xlarge') or cores_per_device")
    return cores_per_device(instance_type)


def _port(value: int, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65535:
        raise ValueError(f"{what} must be a port between 1 and 65535, got {value!r}")
    return value


def docker_run_command(
    model_repository: str | os.PathLike[str],
    core_range: str | CoreRange | tuple[int, int],
    *,
    instance_type: str | None = None,
    cores_per_device: int | None = None,
    image: str = DEFAULT_IMAGE,
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
    container to the range. The image must hold the framework the models import (the stock
    Triton image has no Neuron packages; upstream installs them with python_backend's
    inferentia/scripts/setup.sh).

    Ports are published on ``publish_address`` (loopback by default; use ``0.0.0.0`` to serve
    other hosts). Triton runs with explicit model control and loads ``load_models``, or every
    model in the repository when none are named, so the workbench can still load/unload later.
    """
    cores = CoreRange.parse(core_range)
    devices = neuron_devices(cores, instance_type=instance_type, cores_per_device=cores_per_device)
    ports = {
        "http_port": _port(http_port, "http_port"),
        "grpc_port": _port(grpc_port, "grpc_port"),
        "metrics_port": _port(metrics_port, "metrics_port"),
    }
    if len(set(ports.values())) != 3:
        raise ValueError(f"http, grpc and metrics ports must differ, got {ports}")
    if not image or any(c.isspace() for c in image):
        raise ValueError(f"image must be a docker image reference, got {image!r}")
    repo = os.path.abspath(os.fspath(model_repository))
    for name in load_models:
        if not name or "/" in name or name.startswith("-"):
            raise ValueError(f"model name {name!r} is not a valid Triton model name")

    argv: list[str] = ["docker", "run", "--rm"] + (["-d"] if detach else [])
    if container_name:
        argv += ["--name", container_name]
    for n in devices:
        argv += ["--device", f"/dev/neuron{n}"]
    if instance_type is not None and instance_type.strip().lower() == "cpu":
        argv.append(f"--cpuset-cpus={cores.start}-{cores.end}")
    argv += [
        f"--shm-size={shm_size}",
        "--ulimit", "memlock=-1",
        "--ulimit", "stack=67108864",
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
    return DockerRun(argv=tuple(argv), devices=tuple(devices), cores=cores.cores, image=image)


def docker_run_for_model(
    generated: "GeneratedModel", *, repository: str | os.PathLike[str] | None = None, **options: Any
) -> DockerRun:
    """The ``docker run`` for a generated model directory: its repository (or ``repository``,
    where it will be on the Neuron host), its core range and its target, loading just that
    model. ``options`` go to ``docker_run_command``."""
    options.setdefault("load_models", (generated.dest.name,))
    if "cores_per_device" not in options:
        options.setdefault("instance_type", generated.settings.target)
    core_map = generated.core_map
    where = Path(generated.dest).parent if repository is None else repository
    return docker_run_command(where, core_map.core_range, **options)
