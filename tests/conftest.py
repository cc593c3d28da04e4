"""Shared pytest fixtures.

``triton_server`` / ``triton_server_module`` are factories: call them with a model repository
(and any TritonServer keyword) to get a started server that is stopped at teardown, even when
the test fails. Use the module-scoped one to share one server across a test module.

``neuron_fakes`` makes the FAKE Neuron SDK packages of tests/fake_neuron/ importable in this
process (fresh for each test) and gives the fake_neuron_record module, whose ``CALLS`` lists the
SDK calls made.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
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


FAKE_NEURON = Path(__file__).parent / "fake_neuron"
_FAKE_MODULES = ("torch_neuron", "torch.neuron", "torch_neuronx", "neuronxcc", "tensorflow_neuronx",
                 "tensorflow_neuron", "tensorflow.neuron", "transformers_neuronx", "fake_tf_neuron",
                 "fake_neuron_record")


def _forget_fakes() -> None:
    for name in _FAKE_MODULES:
        sys.modules.pop(name, None)
    import torch

    if getattr(getattr(torch, "neuron", None), "__doc__", "") and "FAKE" in torch.neuron.__doc__:
        del torch.neuron


@pytest.fixture
def neuron_fakes(monkeypatch) -> Iterator[Any]:
    """tests/fake_neuron on sys.path and PYTHONPATH (for compile children), imported afresh."""
    monkeypatch.delenv("NEURON_PLATFORM_TARGET_OVERRIDE", raising=False)
    monkeypatch.delenv("FAKE_NEURON_RECORD_DIR", raising=False)
    monkeypatch.syspath_prepend(str(FAKE_NEURON))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(FAKE_NEURON), os.environ.get("PYTHONPATH")])))
    _forget_fakes()
    import fake_neuron_record

    try:
        yield fake_neuron_record
    finally:
        _forget_fakes()
