"""A tritonserver someone else started (``workbench sweep --url``), driven through the same
model-control client as a local one."""

from __future__ import annotations

from workbench.server.control import ModelControl

__all__ = ["RunningServer"]


class RunningServer(ModelControl):
    """The server at ``url`` (``host:port``) over ``protocol``. It must run with
    ``--model-control-mode=explicit`` so models (and a sweep's variants) can be loaded.

    It answers on the one protocol it was given: ``grpc_url`` or ``http_url`` for the other
    one is an error (its port is not known here).
    """

    running = True  # not ours to watch: as far as this process knows, it runs

    @property
    def grpc_url(self) -> str:
        return self._endpoint("grpc")

    @property
    def http_url(self) -> str:
        return self._endpoint("http")

    def _endpoint(self, protocol: str) -> str:
        if protocol != self.protocol:
            raise ValueError(f"the server at {self.url} was given as {self.protocol}; "
                             f"measure with protocol={self.protocol!r}")
        return self.url

    def __repr__(self) -> str:
        return f"RunningServer({self.url!r}, {self.protocol!r})"
