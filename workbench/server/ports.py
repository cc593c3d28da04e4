"""Ports of a local server: checked, chosen free, and written as the ``host:port`` clients take."""

from __future__ import annotations

import errno
import socket

from workbench.server.errors import PortInUseError

__all__ = ["find_free_port", "check_port_free", "requested_ports", "pick_ports", "is_listening", "hostport"]


def find_free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on right now (the kernel's choice)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def check_port_free(host: str, port: int, what: str) -> None:
    """PortInUseError naming ``what`` when ``port`` cannot be bound on ``host``."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as err:
            if err.errno in (errno.EADDRINUSE, errno.EACCES):
                raise PortInUseError(f"{what} port {port} on {host} is already in use") from None
            raise


def requested_ports(**ports: int | None) -> dict[str, int | None]:
    """The ports asked for by name (None: any free one), checked: valid numbers, all different."""
    for name, value in ports.items():
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65535):
            raise ValueError(f"{name}_port must be an integer port between 1 and 65535, got {value!r}")
    given = [p for p in ports.values() if p is not None]
    if len(given) != len(set(given)):
        raise ValueError(f"{', '.join(ports)} ports must differ, got {ports}")
    return dict(ports)


def pick_ports(host: str, requested: dict[str, int | None]) -> dict[str, int]:
    """The requested ports, and distinct free ones for the rest."""
    taken = {p for p in requested.values() if p is not None}
    ports = {}
    for name, port in requested.items():
        while port is None or (port in taken and port != requested[name]):
            port = find_free_port(host)
        taken.add(port)
        ports[name] = port
    return ports


def is_listening(host: str, port: int) -> bool:
    try:
        socket.create_connection((host, port), timeout=1).close()
    except OSError:
        return False
    return True


def hostport(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
