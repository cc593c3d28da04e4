"""Run/cancel/progress controls bound to a `workbench.tasks.Task`, and a bounded live log view.

Click handlers run on the kernel's main thread, so the work itself goes to a worker thread; the
worker only sets widget traits (thread-safe over IOPub) and never enters an ``Output`` context.
"""

from __future__ import annotations

import html
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

import ipywidgets as widgets

from workbench.tasks import Task
from workbench.ui.layout import SCROLL_CLASS, button, row

# Textarea has no font setting in ipywidgets 8: a class plus one CSS rule makes configs monospace.
MONOSPACE_CLASS = "workbench-mono"
_STEPS = 100  # progress bar steps per unit of work (per point of a sweep)
_LOG_FLUSH_S = 0.25  # a burst of lines (a server starting) is sent to the browser as one update


def monospace_style() -> widgets.HTML:
    return widgets.HTML(f"<style>.{MONOSPACE_CLASS} textarea {{font-family: monospace; font-size: 12px}}</style>")


class LogView:
    """The last ``max_lines`` lines of a log, newest at the bottom and in view: the box scrolls
    itself to the end as lines arrive (a column-reverse flex box). ``append`` is thread-safe;
    ``note(line)`` may say why a line is harmless (it is shown dimmed with the reason)."""

    def __init__(
        self,
        *,
        max_lines: int = 400,
        height: str = "240px",
        placeholder: str = "",
        note: Callable[[str], str | None] | None = None,
    ) -> None:
        self._lines: deque[str] = deque(maxlen=max_lines)
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None
        self._placeholder, self._note, self._height = placeholder, note, height
        self.view = widgets.HTML()  # a column stretches it; a 100% width plus its margins would overflow
        self.view.add_class("workbench-log")
        self.widget = self.view
        self.flush()

    def append(self, text: str) -> None:
        with self._lock:
            for line in str(text).splitlines() or [""]:
                self._lines.append(line)
            if self._timer is None:
                self._timer = threading.Timer(_LOG_FLUSH_S, self.flush)
                self._timer.daemon = True
                self._timer.start()

    def clear(self) -> None:
        with self._lock:
            self._lines.clear()
        self.flush()

    def flush(self) -> None:
        """Show what has arrived (``append`` schedules this; call it to show at once)."""
        with self._lock:
            self._timer = None
            lines = list(self._lines)
        if not lines:
            body = f"<i style='color:#777'>{html.escape(self._placeholder)}</i>"
        else:
            body = "\n".join(self._line_html(line) for line in lines)
        # The <pre> must not shrink nor scroll itself: JupyterLab's CSS gives a rendered <pre> overflow:auto, which
        # lets a flex item shrink to the box and scroll its own top (the oldest lines) into view.
        self.view.value = (
            f"<div class='{SCROLL_CLASS} workbench-log-box' style='display:flex;"
            f"flex-direction:column-reverse;max-height:{self._height};overflow:auto;"
            f"border:1px solid #ccc;padding:2px 4px'><pre style='margin:0;font-size:12px;"
            f"line-height:1.35;flex:none;overflow:visible;max-height:none'>{body}</pre></div>"
        )

    def _line_html(self, line: str) -> str:
        note = self._note(line) if self._note is not None else None
        if note is None:
            return html.escape(line)
        return f"<span style='color:#888' title='{html.escape(note)}'>{html.escape(line)}  [{html.escape(note)}]</span>"

    @property
    def text(self) -> str:
        with self._lock:
            return "\n".join(self._lines)


class TaskControls:
    """Run and Cancel buttons, a progress bar and a status line for one kind of background work
    (a failure's reason is the owning panel's to show, in its error list: said once, not twice).

    ``start(fn, *args, on_done=..., **kwargs)`` runs ``fn`` as a `Task`; Run is disabled while it
    runs and re-enabled when it ends, whatever the outcome (unless ``run_enabled()`` says no, e.g.
    "start server" while the server runs). ``on_done(task)`` runs in the worker.
    """

    def __init__(self, run_label: str, *, run_tooltip: str = "", run_enabled: Callable[[], bool] | None = None) -> None:
        self._run_enabled = run_enabled
        self.run_button = button(run_label, button_style="primary", tooltip=run_tooltip)
        self.cancel_button = button("Cancel", icon="stop", disabled=True)
        self.progress = widgets.IntProgress(value=0, min=0, max=1, layout=widgets.Layout(width="200px"))
        # a status line wraps (a failure names its cause in full) instead of running off the edge
        self.status = widgets.HTML(value="idle", layout=widgets.Layout(flex="1 1 300px", min_width="0"))
        self.task: Task | None = None
        self.on_idle: Callable[[], None] | None = None  # called (in the worker) once the controls show the outcome
        self._active = False
        self.cancel_button.on_click(lambda _button: self.cancel())
        self.widget = row(self.run_button, self.cancel_button, self.progress, self.status)

    @property
    def running(self) -> bool:
        """True from ``start`` until the outcome is shown."""
        return self._active

    def start(
        self,
        fn: Callable[..., Any],
        *args: Any,
        on_done: Callable[[Task], None] | None = None,
        on_progress: Callable[[int, int, str], None] | None = None,
        **kwargs: Any,
    ) -> Task:
        """Run ``fn`` in a worker; ``on_progress`` is called (in the worker) after the bar moves."""
        if self.running:
            raise RuntimeError("already running; cancel it or wait for it to finish")
        self._active = True
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

    def _on_progress(self, done: float, total: int, message: str) -> None:
        """``done`` may be fractional (a sweep reports how far into a point its windows are): the bar
        has 100 steps per unit, so it moves with each window, not only with each point."""
        self.progress.max = max(total, 1) * _STEPS
        self.progress.value = min(round(done * _STEPS), self.progress.max)
        if message:
            self.status.value = html.escape(message)

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
            self.status.value = "failed (why: below)"  # each panel shows the error in full there, once
        self._active = False
        self.run_button.disabled = not (self._run_enabled is None or self._run_enabled())
        self.cancel_button.disabled = True
        if self.on_idle is not None:
            self.on_idle()
