"""Background work for notebooks: a worker thread, a cancel event, progress as a callback.

Widget click handlers run on the kernel's main thread; work done there blocks the Cancel click.
`Task` runs a plain logic function in a thread with ``progress=`` and ``cancel=`` keywords, so the
logic stays free of widgets and tests can drive it directly.
"""

from __future__ import annotations

import sys
import threading
import traceback
from collections.abc import Callable
from typing import Any


class Cancelled(Exception):
    """Raised by logic functions that notice ``cancel.is_set()`` between steps."""


def check_cancel(cancel: threading.Event | None) -> None:
    if cancel is not None and cancel.is_set():
        raise Cancelled("cancelled")


class Task:
    """Run ``fn(*args, progress=..., cancel=..., **kwargs)`` in a daemon thread.

    ``state`` is ``"pending"``, ``"running"``, ``"done"``, ``"cancelled"`` or ``"failed"``;
    ``result`` / ``error`` hold the outcome; ``on_progress`` and ``on_done`` are called from the
    worker thread (widget traits may be set from there; never use ``with out:`` in them).
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        *args: Any,
        on_progress: Callable[[int, int, str], None] | None = None,
        on_done: Callable[[Task], None] | None = None,
        **kwargs: Any,
    ) -> None:
        self.fn, self.args, self.kwargs = fn, args, kwargs
        self.on_progress, self.on_done = on_progress, on_done
        self.cancel_event = threading.Event()
        self.state = "pending"
        self.result: Any = None
        self.error: BaseException | None = None
        self.error_text = ""
        self.progress = (0, 0, "")
        self._thread: threading.Thread | None = None

    def _progress(self, done: int, total: int, message: str = "") -> None:
        self.progress = (done, total, message)
        if self.on_progress is not None:
            self.on_progress(done, total, message)

    def _run(self) -> None:
        self.state = "running"
        try:
            self.result = self.fn(*self.args, progress=self._progress, cancel=self.cancel_event, **self.kwargs)
            self.state = "cancelled" if self.cancel_event.is_set() else "done"
        except Cancelled:
            self.state = "cancelled"
        except BaseException as err:  # reported to the UI, never lost in a thread
            self.error, self.error_text, self.state = err, traceback.format_exc(), "failed"
        finally:
            if self.on_done is not None:
                self.on_done(self)

    def start(self) -> Task:
        self._thread = threading.Thread(
            target=self._run, name=f"workbench-{getattr(self.fn, '__name__', 'task')}", daemon=True
        )
        self._thread.start()
        return self

    def cancel(self) -> None:
        self.cancel_event.set()

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the worker; True when it has finished."""
        if self._thread is not None:
            self._thread.join(timeout)
        return not self.running

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()


def run_to_the_end(task: Task, interrupted: str) -> None:
    """Run ``task`` from a command line: wait for it; Ctrl-C cancels it, says ``interrupted`` on
    stderr and waits while the task finishes what it must (a sweep its run record)."""
    try:
        task.start()
        while not task.join(0.2):
            pass
    except KeyboardInterrupt:
        print(f"\n{interrupted}", file=sys.stderr)
        task.cancel()
        task.join()
