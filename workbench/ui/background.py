"""Run/cancel/progress controls bound to a `workbench.tasks.Task`, and a bounded live log view.

Click handlers run on the kernel's main thread, so the work itself goes to a worker thread; the
worker only sets widget traits (thread-safe over IOPub) and never enters an ``Output`` context.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Any, Callable

import ipywidgets as widgets

from workbench.tasks import Task


# Textarea has no font setting in ipywidgets 8: a class plus one CSS rule makes logs and configs monospace.
MONOSPACE_CLASS = "workbench-mono"


def monospace_style() -> widgets.HTML:
    return widgets.HTML(f"<style>.{MONOSPACE_CLASS} textarea {{font-family: monospace; font-size: 12px}}</style>")


class LogView:
    """A read-only text area that keeps the last ``max_lines`` lines; ``append`` is thread-safe."""

    def __init__(self, *, max_lines: int = 400, rows: int = 10, placeholder: str = "") -> None:
        self._lines: deque[str] = deque(maxlen=max_lines)
        self._lock = threading.Lock()
        self.textarea = widgets.Textarea(value="", placeholder=placeholder, disabled=True, rows=rows,
                                         layout=widgets.Layout(width="100%"))
        self.textarea.add_class(MONOSPACE_CLASS)
        self.widget = widgets.VBox([monospace_style(), self.textarea], layout=widgets.Layout(width="100%"))

    def append(self, text: str) -> None:
        with self._lock:
            for line in str(text).splitlines() or [""]:
                self._lines.append(line)
            self.textarea.value = "\n".join(self._lines)

    def clear(self) -> None:
        with self._lock:
            self._lines.clear()
            self.textarea.value = ""

    @property
    def text(self) -> str:
        return self.textarea.value


class TaskControls:
    """Run and Cancel buttons, a progress bar and a status line for one kind of background work.

    ``start(fn, *args, on_done=..., **kwargs)`` runs ``fn`` as a `Task`; Run is disabled while it
    runs and re-enabled when it ends, whatever the outcome (unless ``run_enabled()`` says no, e.g.
    "start server" while the server runs). ``on_done(task)`` runs in the worker.
    """

    def __init__(self, run_label: str, *, run_tooltip: str = "",
                 run_enabled: Callable[[], bool] | None = None) -> None:
        self._run_enabled = run_enabled
        self.run_button = widgets.Button(description=run_label, button_style="primary", tooltip=run_tooltip)
        self.cancel_button = widgets.Button(description="Cancel", icon="stop", disabled=True)
        self.progress = widgets.IntProgress(value=0, min=0, max=1, layout=widgets.Layout(width="240px"))
        self.status = widgets.Label(value="idle")
        self.task: Task | None = None
        self.cancel_button.on_click(lambda _button: self.cancel())
        self.widget = widgets.HBox([self.run_button, self.cancel_button, self.progress, self.status])

    @property
    def running(self) -> bool:
        return self.task is not None and self.task.running

    def start(self, fn: Callable[..., Any], *args: Any, on_done: Callable[[Task], None] | None = None,
              on_progress: Callable[[int, int, str], None] | None = None, **kwargs: Any) -> Task:
        """Run ``fn`` in a worker; ``on_progress`` is called (in the worker) after the bar moves."""
        if self.running:
            raise RuntimeError("already running; cancel it or wait for it to finish")
        self.run_button.disabled = True
        self.cancel_button.disabled = False
        self.progress.value, self.progress.max = 0, 1
        self.progress.bar_style = ""
        self.status.value = "running"

        def finished(task: Task) -> None:
            try:
                if on_done is not None:
                    on_done(task)
            finally:
                self._show_outcome(task)

        def progressed(done: int, total: int, message: str) -> None:
            self._on_progress(done, total, message)
            if on_progress is not None:
                on_progress(done, total, message)

        self.task = Task(fn, *args, on_progress=progressed, on_done=finished, **kwargs)
        return self.task.start()

    def cancel(self) -> None:
        if self.task is not None and self.task.running:
            self.status.value = "cancelling"
            self.task.cancel()

    def join(self, timeout: float | None = None) -> bool:
        return self.task is None or self.task.join(timeout)

    def _on_progress(self, done: int, total: int, message: str) -> None:
        self.progress.max = max(int(total), 1)
        self.progress.value = min(int(done), self.progress.max)
        if message:
            self.status.value = message

    def _show_outcome(self, task: Task) -> None:
        if task.state == "done":
            self.progress.value = self.progress.max
            self.progress.bar_style = "success"
            self.status.value = "done"
        elif task.state == "cancelled":
            self.progress.bar_style = "warning"
            self.status.value = "cancelled"
        else:
            self.progress.bar_style = "danger"
            self.status.value = f"failed: {task.error}"
        self.run_button.disabled = not (self._run_enabled is None or self._run_enabled())
        self.cancel_button.disabled = True
