"""What can go wrong with a tritonserver: one error family for the process, its ports and its models.

Apart from the classes that raise them so the process, the model-control client and the log
reader can share them without importing each other.
"""

from __future__ import annotations

from workbench.refusals import WorkbenchError

__all__ = ["ServerError", "ServerStartError", "PortInUseError", "ModelLoadError", "ModelRefusedError"]


class ServerError(WorkbenchError, RuntimeError):
    """Something went wrong with the server process; the message quotes its log."""


class ServerStartError(ServerError):
    """The server exited or never became ready."""


class PortInUseError(ServerError):
    """A requested port is taken; the message names it."""


class ModelLoadError(ServerError):
    """Triton refused to load a model. ``reason`` is Triton's reason from the repository index,
    ``log_lines`` the server log lines written during the load (empty for a remote server)."""

    def __init__(self, model: str, message: str, reason: str, log_lines: list[str]) -> None:
        self.model, self.reason, self.log_lines = model, reason, log_lines
        text = f"model {model!r} failed to load: {reason or message}"
        if message and message not in text:
            text += f"\nTriton said: {message}"
        if log_lines:
            text += "\nServer log during the load:\n" + "\n".join(log_lines)
        super().__init__(text)


class ModelRefusedError(ModelLoadError):
    """A load refused before Triton saw it, because it would abort the server or hang the load;
    ``problems`` names each folder or field."""

    def __init__(self, model: str, problems: list[str]) -> None:
        self.problems = list(problems)
        super().__init__(
            model, "not sent to Triton: it would abort the server or hang the load", "; ".join(self.problems), []
        )
