"""Sending from other processes: a worker runs one slot group and streams what it records.

Why: one Python process cannot always keep up (the GIL serializes its slots' client code), where
perf_analyzer, in C++, uses threads. A worker streams its entries, checked payloads, new error
messages, CPU time and sent count to the engine every ``FLUSH_S``, and takes ``check`` and
``stop`` messages back.

A worker is ``python -m workbench.measure.engine.loadgen READ_FD WRITE_FD`` (``__main__.py``), not a
multiprocessing child: spawning would import the caller's main module again (a script without a
main guard would run twice) and forking would copy grpc's threads and locks.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import numpy as np

from workbench.measure.engine.loadgen.slots import FIELDS, GroupSpec

__all__ = ["ProcessGroup", "FLUSH_S"]

# A worker sends what it recorded this often.
FLUSH_S = 0.02


class ProcessGroup:
    """A worker process running a slot group; the engine's side of its stream."""

    def __init__(self, spec: GroupSpec) -> None:
        self.spec = spec
        self.messages: dict[int, str] = {}
        self.cpu_s = 0.0
        self.sent = 0
        self.done = False
        self._entries: list[np.ndarray] = []
        self._payloads: list[tuple[int, Any]] = []
        self._check: tuple[int, bool] | None = None
        self.process: subprocess.Popen | None = None

    def start(self) -> ProcessGroup:
        child_read, parent_write = os.pipe()
        parent_read, child_write = os.pipe()
        root = str(Path(__file__).resolve().parents[3])  # the workbench this process imported
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)}
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "workbench.measure.engine.loadgen", str(child_read), str(child_write)],
                pass_fds=(child_read, child_write),
                env=env,
                stdin=subprocess.DEVNULL,
            )
        finally:
            os.close(child_read)
            os.close(child_write)
        self.to_worker = Connection(parent_write, readable=False)
        self.from_worker = Connection(parent_read, writable=False)
        self.to_worker.send(self.spec)
        if self._check is not None:
            self.to_worker.send(("check", *self._check))
        return self

    def _read(self, wait_s: float = 0.0) -> None:
        while not self.done and self.from_worker.poll(wait_s):
            wait_s = 0.0
            try:
                message = self.from_worker.recv()
            except (EOFError, OSError):
                self.done = True
                break
            if message[0] == "done":
                self.done = True
                break
            _, entries, payloads, messages, self.cpu_s, self.sent = message
            self._entries.append(np.frombuffer(entries, dtype=np.int64).reshape(-1, FIELDS))
            self._payloads.extend(payloads)
            self.messages.update({index: text for text, index in messages.items()})

    def take(self) -> tuple[np.ndarray, list[tuple[int, Any]]]:
        self._read()
        entries = np.concatenate(self._entries) if self._entries else np.empty((0, FIELDS), np.int64)
        payloads, self._entries, self._payloads = self._payloads, [], []
        return entries, payloads

    def set_check(self, warm: int = 0, next_one: bool = False) -> None:
        if self.process is None:
            self._check = (warm, next_one)  # sent once the worker is up
        else:
            self.to_worker.send(("check", warm, next_one))

    def stop(self, grace_s: float) -> None:
        if self.process is None:
            return
        try:
            self.to_worker.send(("stop", grace_s))
        except OSError:
            pass
        deadline = time.monotonic() + grace_s + 10.0
        while not self.done and time.monotonic() < deadline and self.process.poll() is None:
            self._read(0.05)
        self._read()
        try:
            self.process.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.to_worker.close()
        self.from_worker.close()

    def sent_total(self) -> int:
        return self.sent

    @property
    def child_cpu_s(self) -> float:
        return self.cpu_s

    def message(self, index: int) -> str:
        return self.messages.get(index, f"error {index}")
