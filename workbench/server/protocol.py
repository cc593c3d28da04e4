"""The server a sweep, the panels and the CLI drive: what a local `TritonServer` and a remote
`RunningServer` both offer, stated once.

The two differ in what this process can know: a server it started has a process id, a model
repository folder, a log and a record of which backend served each load; a server someone else
started has none of these. Instead of probing for attributes, each says so through the same
members: ``pid`` and ``model_repository`` are None, ``log_tail`` is empty, ``served_by`` is None.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:  # annotations only: importing the protocol must not import the Triton clients
    from workbench.server.control import ClientOptions, LoadRequest


@runtime_checkable
class Server(Protocol):
    """A Triton server with explicit model control, local or remote."""

    @property
    def name(self) -> str:
        """How people call it: a remote server's given name or host:port; a local one's address."""
        ...

    @property
    def version(self) -> str: ...

    @property
    def http_url(self) -> str:
        """host:port for HTTP (a remote server given over gRPC raises ValueError)."""
        ...

    @property
    def grpc_url(self) -> str:
        """host:port for gRPC (a remote server given over HTTP raises ValueError)."""
        ...

    @property
    def options(self) -> ClientOptions:
        """TLS and headers the clients send (a local server: plain, none)."""
        ...

    @property
    def running(self) -> bool:
        """Whether it runs, as far as this process can tell (a remote server: True)."""
        ...

    @property
    def pid(self) -> int | None:
        """The tritonserver process id when this process started it, else None."""
        ...

    @property
    def model_repository(self) -> Path | None:
        """The repository folder it serves from when this process started it, else None."""
        ...

    def log_tail(self, n: int = 50) -> list[str]:
        """The last ``n`` lines of its output (empty where the log is not this process's to read)."""
        ...

    def served_by(self, name: str) -> str | None:
        """Which backend served the last load of ``name`` (None where this process did not load it)."""
        ...

    def backend_of(self, name: str) -> str | None:
        """The backend (and PyTorch layout) of the last load of ``name``, for sweep rows; None as above."""
        ...

    def requested_config(self, name: str) -> str | None:
        """The config JSON last asked for ``name`` where the served one differs from it (a PyTorch-
        backend model served by its Python-backend twin), else None."""
        ...

    def last_load(self, name: str) -> LoadRequest | None:
        """What the last load of ``name`` made here asked for (`ModelControl.last_load`)."""
        ...

    def describe(self) -> dict[str, Any]:
        """What a run record says about it."""
        ...

    def load(
        self, name: str, config: Any = None, files: Mapping[str, Any] | None = None, *, timeout: float = ...
    ) -> None: ...

    def reload(self, name: str, config: Any = None, files: Mapping[str, Any] | None = None) -> None: ...

    def unload(self, name: str, timeout: float = ...) -> None: ...

    def index(self) -> list[dict[str, str]]: ...

    def is_model_ready(self, name: str) -> bool: ...

    def stats(self, name: str = "") -> dict[str, Any]: ...

    def model_config(self, name: str, *, as_proto: bool = False) -> Any: ...

    def metrics(self) -> dict[str, list[dict[str, Any]]]: ...
