"""A tritonserver someone else started, reached by its URL (``workbench sweep --url``,
``workbench remote``), driven through the same model-control client as a local one.

A URL is ``host:port`` with the protocol given apart, or carries it as a scheme: ``http://``,
``https://`` (HTTP over TLS), ``grpc://``, ``grpcs://`` (gRPC over TLS). TLS and headers go to
tritonclient as its clients take them (`ClientOptions`); the headers ride on every request.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from workbench.server.control import DEFAULT_REMOTE_TIMEOUT, PROTOCOLS, ClientOptions, LoadRequest, ModelControl
from workbench.server.errors import ServerError

__all__ = ["RunningServer", "ClientOptions", "parse_server_url", "endpoint_addresses"]

_SCHEMES = {"http": ("http", False), "https": ("http", True), "grpc": ("grpc", False), "grpcs": ("grpc", True)}


@dataclass(frozen=True)
class ParsedUrl:
    hostport: str
    protocol: str
    ssl: bool = field(default=False)


def parse_server_url(url: str, protocol: str | None = None) -> ParsedUrl:
    """``grpcs://h:8001`` -> (``h:8001``, grpc, TLS). A bare ``host:port`` takes ``protocol``
    (default HTTP, as before); a scheme that contradicts ``protocol`` is an error naming both."""
    text = str(url).strip().rstrip("/")
    scheme, sep, rest = text.partition("://")
    if sep:
        if scheme.lower() not in _SCHEMES:
            raise ValueError(f"server URL {url!r}: scheme must be one of {', '.join(_SCHEMES)}")
        given, ssl = _SCHEMES[scheme.lower()]
        if protocol is not None and protocol != given:
            raise ValueError(f"server URL {url!r} is {given} but protocol {protocol!r} was asked for")
        text = rest
    else:
        given, ssl = (protocol or "http"), False
    if given not in PROTOCOLS:
        raise ValueError(f"protocol must be grpc or http, got {given!r}")
    host, colon, port = text.rpartition(":")
    if not colon or not host or not port.isdigit() or "/" in text:
        raise ValueError(f"server URL {url!r} needs host:port (e.g. 10.0.0.5:8001), without a path")
    if not 1 <= int(port) <= 65535:
        raise ValueError(f"server URL {url!r}: port {int(port)} is not a TCP port (1-65535)")
    return ParsedUrl(text, given, ssl)


def endpoint_addresses(hostport: str) -> frozenset[tuple[str, int]]:
    """The (address, port) pairs ``host:port`` reaches, so that two spellings of one server
    (``localhost:8001``, ``127.0.0.1:8001``, ``grpc://localhost:8001``) are seen as one; a host that
    does not resolve stands for itself."""
    host, _, port = hostport.rpartition(":")
    host = host.strip("[]").lower()
    try:
        infos = socket.getaddrinfo(host, int(port), proto=socket.IPPROTO_TCP)
    except (OSError, ValueError):
        return frozenset({(host, int(port) if port.isdigit() else -1)})
    return frozenset((str(info[4][0]), int(port)) for info in infos)  # an IP address string


class RunningServer(ModelControl):
    """The server at ``url`` over ``protocol``. It must run with ``--model-control-mode=explicit``
    so models (and a sweep's variants) can be loaded. ``options``: TLS and headers
    (`ClientOptions`); a ``https://`` or ``grpcs://`` URL turns TLS on by itself. ``timeout``
    (seconds) bounds every call, loads included: a peer that never answers ends in a ServerError
    naming it.

    It answers on the one protocol it was given: ``grpc_url`` or ``http_url`` for the other
    one is an error (its port is not known here).
    """

    running = True  # not ours to watch: as far as this process knows, it runs
    pid = None  # not a process of ours
    model_repository = None  # its folder is on its own machine

    def __init__(
        self,
        url: str,
        protocol: str | None = None,
        *,
        options: ClientOptions | None = None,
        metrics_url: str | None = None,
        name: str | None = None,
        timeout: float = DEFAULT_REMOTE_TIMEOUT,
    ) -> None:
        parsed = parse_server_url(url, protocol)
        options = options or ClientOptions()
        if parsed.ssl and not options.ssl:
            options = options.with_ssl()
        super().__init__(parsed.hostport, parsed.protocol, metrics_url=metrics_url, options=options, timeout=timeout)
        self.name = name or parsed.hostport
        self._version: str | None = None

    def load(
        self,
        name: str,
        config: Any = None,
        files: Any = None,
        *,
        timeout: float | None = None,
        asked: LoadRequest | None = None,
    ) -> None:
        """`ModelControl.load`, then the server's own word that ``name`` is ready: a peer that
        answers the load with 200 and no usable body has loaded nothing."""
        super().load(name, config=config, files=files, timeout=timeout, asked=asked)
        # the index, not is_model_ready: tritonclient's HTTP readiness reads the status line only
        if not any(row["name"] == name and row["state"] == "READY" for row in self.index()):
            raise ServerError(
                f"{self.protocol}://{self.url} answered the load of {name!r} but does not report it ready"
            )

    @property
    def version(self) -> str:
        """Triton's release, asked once (as `TritonServer` knows its own): the panel's server line
        shows it on every redraw, which must not wait on the network."""
        if self._version is None:
            self._version = super().version
        return self._version

    @property
    def grpc_url(self) -> str:
        return self._endpoint("grpc")

    @property
    def http_url(self) -> str:
        return self._endpoint("http")

    def _endpoint(self, protocol: str) -> str:
        if protocol != self.protocol:
            raise ValueError(
                f"the server at {self.url} was given as {self.protocol}; measure with protocol={self.protocol!r}"
            )
        return self.url

    def log_tail(self, n: int = 50) -> list[str]:
        """Its output is not ours to read."""
        return []

    def served_by(self, name: str) -> str | None:
        """Which backend served ``name`` is the remote server's to know: None."""
        return None

    def backend_of(self, name: str) -> str | None:
        return None

    def requested_config(self, name: str) -> str | None:
        """A remote server serves what it was asked for: None (its served config is the one)."""
        return None

    def describe(self) -> dict[str, Any]:
        """What a run record says about this server: name, URL, protocol, version, TLS and the
        names (never the values) of the headers sent."""
        return {
            "name": self.name,
            "url": self.url,
            "protocol": self.protocol,
            "version": self.version,
            "remote": True,
            "ssl": self.options.ssl,
            "headers": sorted(self.options.headers),
        }

    def __repr__(self) -> str:
        return f"RunningServer({self.url!r}, {self.protocol!r})"


def headers_from_items(items: list[str] | tuple[str, ...]) -> Mapping[str, str]:
    """``["Authorization=Bearer x"]`` (``--header``) -> ``{"Authorization": "Bearer x"}``."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"header {item!r}: write NAME=VALUE")
        out[key.strip()] = value
    return out
