"""Serving wing: run a local tritonserver (process), drive it or a remote one (control, remote),
read its log (log) and find one (discovery). The ``docker run`` for a Neuron host is in
`workbench.deploy.docker`.

The names below load on first use (as `workbench`'s do): importing a submodule such as
`workbench.cli.remote` for ``workbench remote --help`` must not pay for tritonclient."""

from __future__ import annotations

from workbench.lazy import lazy_getattr

# public name -> module that defines it
_LAZY = {
    "TritonInstall": "workbench.server.discovery",
    "TritonNotFoundError": "workbench.server.discovery",
    "find_tritonserver": "workbench.server.discovery",
    "TritonServer": "workbench.server.process",
    "RunningServer": "workbench.server.remote",
    "ClientOptions": "workbench.server.control",
    "ModelControl": "workbench.server.control",
    "ServerLog": "workbench.server.log",
    "ServerError": "workbench.server.errors",
    "ServerStartError": "workbench.server.errors",
    "PortInUseError": "workbench.server.errors",
    "ModelLoadError": "workbench.server.errors",
    "ModelRefusedError": "workbench.server.errors",
    "find_free_port": "workbench.server.ports",
}

__all__ = list(_LAZY)


__getattr__ = lazy_getattr(__name__, _LAZY, globals())
