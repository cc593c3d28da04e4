"""What a `TritonServer` hands over: model control to its `ModelControl` (loads routed through
its `PyTorchServing`), and its output to its `ServerLog`. Apart so that the process class holds
only the process's lifecycle."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from workbench.server.control import ModelControl
from workbench.server.errors import ServerError

if TYPE_CHECKING:
    from workbench.server.log import ServerLog
    from workbench.server.pytorch import PyTorchServing
    from workbench.server.vllm_backend import VllmServing

__all__ = ["HandedOver"]


def _handed_to_control(name: str) -> Callable[..., Any]:
    """A method of TritonServer that is ``ModelControl``'s method ``name`` on its ``control``."""

    @functools.wraps(getattr(ModelControl, name))
    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        return getattr(self.control, name)(*args, **kwargs)

    method.__qualname__ = f"TritonServer.{name}"
    return method


class HandedOver:
    """Model control and log methods of a server process (it sets ``_control``, ``pytorch``,
    ``vllm``, ``log`` and ``_restarting`` and has ``running``)."""

    _control: ModelControl | None
    pytorch: PyTorchServing
    vllm: VllmServing
    log: ServerLog
    _restarting: bool

    if TYPE_CHECKING:

        @property
        def running(self) -> bool: ...

        def _auto_complete_for(self, name: str, config: Any, files: Mapping[str, Any] | None) -> None: ...

    @property
    def control(self) -> ModelControl:
        """The model-control client of the running server (HTTP)."""
        if self._control is None:
            raise ServerError("the server has not been started")
        return self._control

    def load(
        self, name: str, config: Any = None, files: Mapping[str, Any] | None = None, *, timeout: float = 3600.0
    ) -> None:
        """`ModelControl.load`, with PyTorch-backend models served by the real backend or their twin
        (`pytorch.PyTorchServing`; ``served_by`` says which) and vLLM models checked first
        (`vllm.VllmServing`). A server started without Triton's auto-complete turns it on first
        when this model needs it (`auto_complete`)."""
        self._auto_complete_for(name, config, files)
        if self.vllm.is_vllm(name, config):
            self.vllm.load(name, config, files, timeout=timeout)
            return
        self.vllm.forget(name)
        self.pytorch.load(name, config, files, timeout=timeout)

    def reload(self, name: str, config: Any = None, files: Mapping[str, Any] | None = None) -> None:
        """Load ``name`` again (see `ModelControl.reload`), routed as ``load``."""
        self.load(name, config, files)

    def served_by(self, name: str) -> str:
        """Which backend served the last load of ``name``."""
        served = self.vllm.served(name)
        return served.describe() if served is not None else self.pytorch.served_by(name)

    def backend_of(self, name: str) -> str:
        """The backend (and PyTorch layout) that served the last load of ``name``, for sweep rows."""
        served = self.vllm.served(name)
        return served.backend if served is not None else self.pytorch.backend_of(name)

    def requested_config(self, name: str) -> str | None:
        """The config JSON last asked for ``name`` when its twin serves another (`PyTorchServing`)."""
        return self.pytorch.requested_config(name)

    unload = _handed_to_control("unload")
    last_load = _handed_to_control("last_load")
    index = _handed_to_control("index")
    is_model_ready = _handed_to_control("is_model_ready")
    stats = _handed_to_control("stats")
    model_config = _handed_to_control("model_config")
    metrics = _handed_to_control("metrics")

    def log_tail(self, n: int = 50) -> list[str]:
        """The last ``n`` lines of the server's output (kept after ``stop``)."""
        return self.log.tail(n)

    def follow_log(
        self, *, from_start: bool = False, stop: threading.Event | None = None, poll_interval: float = 0.2
    ) -> Iterator[str]:
        """Log lines as the server writes them, until ``stop`` is set or the server has stopped
        and the log is drained (see `ServerLog.follow`)."""
        return self.log.follow(self._alive, from_start=from_start, stop=stop, poll_interval=poll_interval)

    def follow_log_in_thread(self, callback: Callable[[str], None], *, from_start: bool = False) -> threading.Event:
        """``callback(line)`` from a daemon thread for each new line; set the event to stop."""
        return self.log.follow_in_thread(callback, self._alive, from_start=from_start)

    def _alive(self) -> bool:
        return self.running or self._restarting
