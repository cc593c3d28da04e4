"""A sending worker process (see ``workers``): ``python -m workbench.measure.engine.loadgen READ_FD WRITE_FD``."""

from __future__ import annotations

import sys
import time
from multiprocessing.connection import Connection
from typing import Any

from workbench.measure.engine.loadgen.slots import GroupSpec, Recorder, local_group
from workbench.measure.engine.loadgen.workers import FLUSH_S


def _flush(connection: Connection, recorder: Recorder, group: Any, known: int) -> int:
    entries, payloads = recorder.take()
    with recorder.lock:
        messages = dict(list(recorder.messages.items())[known:])
    connection.send(("data", entries.tobytes(), payloads, messages, time.process_time(), group.sent_total()))
    return known + len(messages)


def main(read_fd: int, write_fd: int) -> None:
    """Run the group the engine sends, stream what it records until told to stop."""
    inbox, outbox = Connection(read_fd, writable=False), Connection(write_fd, readable=False)
    spec: GroupSpec = inbox.recv()
    recorder = Recorder()
    group = local_group(spec, recorder)
    known, grace = 0, None
    started = False
    while grace is None:
        while inbox.poll():
            try:
                message = inbox.recv()
            except EOFError:  # the engine is gone: stop at once
                message = ("stop", 1.0)
            if message[0] == "check":
                recorder.set_check(warm=message[1], next_one=message[2])
            elif message[0] == "stop":
                grace = message[1]
                break
        if not started:  # the first check settings are in: now send
            group.start()
            started = True
        known = _flush(outbox, recorder, group, known)
        if grace is None:
            time.sleep(FLUSH_S)
    group.stop(grace)
    recorder.closed = True
    _flush(outbox, recorder, group, known)
    outbox.send(("done",))
    outbox.close()


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
