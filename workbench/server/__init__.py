"""Run a local tritonserver from Python or a notebook (see process.TritonServer) and find one
(discovery). The ``docker run`` for a Neuron host is in `workbench.deploy.docker`."""

from workbench.server.discovery import TritonInstall, TritonNotFoundError, find_tritonserver
from workbench.server.process import (
    ModelLoadError,
    PortInUseError,
    ServerError,
    ServerStartError,
    TritonServer,
    find_free_port,
)

__all__ = [
    "TritonInstall",
    "TritonNotFoundError",
    "find_tritonserver",
    "TritonServer",
    "ServerError",
    "ServerStartError",
    "PortInUseError",
    "ModelLoadError",
    "find_free_port",
]
