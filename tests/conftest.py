"""Shared pytest fixtures.

``triton_server`` / ``triton_server_module`` are factories: call them with a model repository
(and any TritonServer keyword) to get a started server that is stopped at teardown, even when
the test fails. Use the module-scoped one to share one server across a test module.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator

import pytest

from workbench.server import TritonServer

ServerFactory = Callable[..., TritonServer]


def _factory() -> Iterator[ServerFactory]:
    servers: list[TritonServer] = []

    def make(model_repository: Any, **kwargs: Any) -> TritonServer:
        server = TritonServer(model_repository, **kwargs)
        servers.append(server)
        return server.start()

    try:
        yield make
    finally:
        for server in servers:
            server.stop(timeout=10)


@pytest.fixture
def triton_server() -> Iterator[ServerFactory]:
    yield from _factory()


@pytest.fixture(scope="module")
def triton_server_module() -> Iterator[ServerFactory]:
    yield from _factory()
