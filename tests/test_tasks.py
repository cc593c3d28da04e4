"""Background tasks: progress reaches the callback, cancel stops the work, errors are kept."""

import threading

from workbench.tasks import Task, check_cancel


def _count(n, *, progress, cancel, gate=None):
    for i in range(n):
        check_cancel(cancel)
        progress(i + 1, n, f"step {i + 1}")
        if gate is not None:
            gate.wait(5)
    return n


def test_runs_to_completion_with_progress():
    seen = []
    task = Task(_count, 3, on_progress=lambda d, t, m: seen.append((d, t, m))).start()
    assert task.join(5)
    assert task.state == "done" and task.result == 3
    assert seen == [(1, 3, "step 1"), (2, 3, "step 2"), (3, 3, "step 3")]


def test_cancel_stops_between_steps():
    gate = threading.Event()
    task = Task(_count, 1000, gate=gate).start()
    task.cancel()
    gate.set()
    assert task.join(5)
    assert task.state == "cancelled"
    assert task.progress[0] < 1000


def test_failure_is_reported_not_lost():
    def boom(*, progress, cancel):
        raise RuntimeError("compiler exploded")

    done = []
    task = Task(boom, on_done=done.append).start()
    assert task.join(5)
    assert task.state == "failed" and "compiler exploded" in task.error_text
    assert done == [task]
