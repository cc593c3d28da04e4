"""Serving wing: run a local tritonserver (process), drive it or a remote one (control, remote),
read its log (log) and find one (discovery). The ``docker run`` for a Neuron host is in
`workbench.deploy.docker`."""

from workbench.server.control import ClientOptions, ModelControl
from workbench.server.discovery import TritonInstall, TritonNotFoundError, find_tritonserver
from workbench.server.errors import ModelLoadError, ModelRefusedError, PortInUseError, ServerError, ServerStartError
from workbench.server.log import ServerLog
from workbench.server.ports import find_free_port
from workbench.server.process import TritonServer
from workbench.server.remote import RunningServer

__all__ = [
    "TritonInstall",
    "TritonNotFoundError",
    "find_tritonserver",
    "TritonServer",
    "RunningServer",
    "ClientOptions",
    "ModelControl",
    "ServerLog",
    "ServerError",
    "ServerStartError",
    "PortInUseError",
    "ModelLoadError",
    "ModelRefusedError",
    "find_free_port",
]
