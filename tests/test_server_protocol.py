"""The server a sweep drives is one typed contract (issue 29): `TritonServer` and `RunningServer` both
satisfy `server.protocol.Server`, the remote one answering None where this process cannot know, and
nothing in the package probes a server's attributes instead."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from workbench.server.protocol import Server
from workbench.server.process import TritonServer
from workbench.server.remote import RunningServer, endpoint_addresses

PACKAGE = Path(__file__).resolve().parents[1] / "workbench"


def test_both_servers_satisfy_the_protocol(tmp_path):
    remote = RunningServer("grpc://127.0.0.1:1")
    local = TritonServer(tmp_path)
    for server in (remote, local):  # statically: isinstance() on Python 3.11 would read version (a network call)
        missing = [name for name in _members(Server) if _absent(server, name)]
        assert missing == [], f"{type(server).__name__} lacks {missing}"
    assert remote.pid is None and remote.model_repository is None and remote.log_tail(5) == []
    assert remote.served_by("m") is None and remote.backend_of("m") is None and remote.requested_config("m") is None
    assert local.pid is None and local.model_repository == tmp_path.resolve() and not local.running
    assert not local.options.ssl and not local.options.headers


def _members(protocol: type) -> list[str]:
    return [name for name in vars(protocol) if not name.startswith("_")]


def _absent(obj: object, name: str) -> bool:
    try:
        inspect.getattr_static(obj, name)
    except AttributeError:
        return True
    return False


def test_no_server_is_probed_for_attributes():
    probes = re.compile(r"(getattr|hasattr)\((self\.)?(server|srv)\b|server: Any")
    found = [f"{path.relative_to(PACKAGE)}:{n}" for path in PACKAGE.rglob("*.py")
             for n, line in enumerate(path.read_text().splitlines(), 1) if probes.search(line)]
    assert found == []


def test_one_server_spelled_two_ways_has_one_address():
    assert endpoint_addresses("localhost:8001") & endpoint_addresses("127.0.0.1:8001")
    assert not endpoint_addresses("127.0.0.1:8001") & endpoint_addresses("127.0.0.1:8002")
