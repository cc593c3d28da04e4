"""Who sends: groups of concurrency slots (threads with blocking senders, or one asyncio loop) and
the rate schedule, all recording the same entries (``workers`` runs a group in another process).

Each completed request is one entry ``(slot, sent_ns, done_ns, error, delay_ns)`` on
``time.perf_counter_ns`` (CLOCK_MONOTONIC: comparable across processes): ``error`` 0 for a
success, else the index of its message; ``delay_ns`` the generator's own delay before sending it
(since the slot's previous response, or past its scheduled time in rate mode; -1 when there is no
previous one). The engine drains entries, cuts them into windows by ``done_ns`` and asks for the
payload of the responses it checks. A slot's hot loop does only: send, two clock reads, one
append.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np

from workbench.measure.engine.loadgen.load_plan import MAX_OUTSTANDING
from workbench.measure.engine.loadgen.senders import make_sender

__all__ = [
    "Recorder",
    "GroupSpec",
    "ThreadGroup",
    "AsyncGroup",
    "RateGroup",
    "local_group",
    "split_slots",
    "auto_processes",
    "FIELDS",
    "THREAD_SLOTS_MAX",
]

# Up to this many slots in one process, each is a thread with a blocking sender (cheapest per
# request); a bigger group shares one asyncio loop (threads past a few would fight over the GIL).
THREAD_SLOTS_MAX = 8

FIELDS = 5


class Recorder:
    """Entries, checked payloads and error messages of one process's slots. Thread-safe for
    appends from slot threads; ``take()`` is the engine's (or the worker flusher's) side."""

    def __init__(self) -> None:
        self.entries: deque = deque()
        self.payloads: deque = deque()
        self.messages: dict[str, int] = {}
        self.lock = threading.Lock()
        self.warm = 0  # check the payload of each of the next ``warm`` completions
        self.check_next = False  # and of the next successful one
        self.closed = False

    def record(self, slot: int, t0: int, t1: int, ok: bool, payload: Any, delay: int) -> None:
        if self.closed:
            return
        if ok:
            self.entries.append((slot, t0, t1, 0, delay))
            if self.warm or self.check_next:
                self._take(t1, payload)
        else:
            with self.lock:
                index = self.messages.setdefault(str(payload), len(self.messages) + 1)
                self.warm = max(0, self.warm - 1)
            self.entries.append((slot, t0, t1, index, delay))

    def _take(self, t1: int, payload: Any) -> None:
        with self.lock:
            if self.warm:
                self.warm -= 1
            elif self.check_next:
                self.check_next = False
            else:
                return
            self.payloads.append((t1, payload))

    def take(self) -> tuple[np.ndarray, list[tuple[int, Any]]]:
        entries = [self.entries.popleft() for _ in range(len(self.entries))]
        payloads = [self.payloads.popleft() for _ in range(len(self.payloads))]
        array = np.array(entries, dtype=np.int64).reshape(-1, FIELDS)
        return array, payloads

    def set_check(self, warm: int = 0, next_one: bool = False) -> None:
        with self.lock:
            self.warm, self.check_next = warm, next_one


@dataclass(frozen=True)
class GroupSpec:
    """What a group needs to send (picklable: a worker process gets a copy)."""

    protocol: str
    request: Any  # wire.http_request's HttpRequest, or the serialized gRPC message
    url: str
    timeout_s: float
    slots: int
    first_slot: int = 0

    def sender(self, blocking: bool):
        return make_sender(self.protocol, self.request, self.url, self.timeout_s, blocking=blocking)


class _Local:
    """The engine's side of a group in this process: it reads the shared recorder directly."""

    recorder: Recorder
    child_cpu_s = 0.0  # its CPU is this process's

    def take(self) -> tuple[np.ndarray, list[tuple[int, Any]]]:
        return self.recorder.take()

    def set_check(self, warm: int = 0, next_one: bool = False) -> None:
        self.recorder.set_check(warm, next_one)

    def message(self, index: int) -> str:
        with self.recorder.lock:
            return next((text for text, i in self.recorder.messages.items() if i == index), f"error {index}")


class ThreadGroup(_Local):
    """One thread per slot, each with its own blocking sender and connection."""

    def __init__(self, spec: GroupSpec, recorder: Recorder) -> None:
        self.spec, self.recorder = spec, recorder
        self.stopping = False
        self.sent = [0] * spec.slots
        self.senders: list[Any] = [None] * spec.slots
        self.threads = [
            threading.Thread(target=self._run, args=(k,), daemon=True, name=f"workbench-slot-{k}")
            for k in range(spec.slots)
        ]

    def start(self) -> ThreadGroup:
        for thread in self.threads:
            thread.start()
        return self

    def _run(self, k: int) -> None:
        sender = self.senders[k] = self.spec.sender(blocking=True)
        slot, send, record, clock, sent = (
            self.spec.first_slot + k,
            sender.send,
            self.recorder.record,
            time.perf_counter_ns,
            self.sent,
        )
        previous = -1
        try:
            while not self.stopping:
                sent[k] += 1
                t0 = clock()
                ok, payload = send()
                t1 = clock()
                record(slot, t0, t1, ok, payload, t0 - previous if previous >= 0 else -1)
                previous = t1
        finally:
            sender.close()

    def stop(self, grace_s: float) -> None:
        """Slots end after their request; those still out after ``grace_s`` are cut off."""
        self.stopping = True
        deadline = time.monotonic() + grace_s
        for thread in self.threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        for k, thread in enumerate(self.threads):
            if thread.is_alive() and self.senders[k] is not None:
                _abort(self.senders[k])
        for thread in self.threads:
            thread.join(1.0)

    def sent_total(self) -> int:
        return sum(self.sent)


def _abort(sender: Any) -> None:
    """Unblock a sender stuck in a call from another thread (and keep it from sending again on a
    new connection: a request sent after the point ended would reach the server uncounted)."""
    sender.aborted = True
    try:
        sock = getattr(sender, "sock", None)
        if sock is not None:
            import socket

            sock.shutdown(socket.SHUT_RDWR)
        channel = getattr(sender, "channel", None)
        if channel is not None and not asyncio.iscoroutinefunction(getattr(channel, "close", None)):
            channel.close()
    except OSError:
        pass


class _LoopGroup(_Local):
    """A thread running an asyncio loop: the base of the asyncio slot group and the rate schedule."""

    def __init__(self, spec: GroupSpec, recorder: Recorder) -> None:
        self.spec, self.recorder = spec, recorder
        self.stopping = False
        self.sent = 0
        self.ready = threading.Event()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.main: asyncio.Future | None = None
        self.thread = threading.Thread(target=self._thread, daemon=True, name="workbench-loop")

    def start(self) -> _LoopGroup:
        self.thread.start()
        self.ready.wait(30)
        return self

    def _thread(self) -> None:
        self.loop = asyncio.new_event_loop()
        try:
            self.main = self.loop.create_task(self._main())
            self.ready.set()
            self.loop.run_until_complete(self.main)
        except asyncio.CancelledError:
            pass
        finally:
            self.loop.close()

    async def _main(self) -> None:
        raise NotImplementedError

    def stop(self, grace_s: float) -> None:
        self.stopping = True
        self.thread.join(grace_s)
        if self.thread.is_alive() and self.loop is not None and self.main is not None:
            self.loop.call_soon_threadsafe(self.main.cancel)
            self.thread.join(5.0)

    def sent_total(self) -> int:
        return self.sent


class AsyncGroup(_LoopGroup):
    """Many slots on one event loop, each with its own asyncio sender."""

    async def _main(self) -> None:
        senders = [self.spec.sender(blocking=False) for _ in range(self.spec.slots)]
        try:
            await asyncio.gather(*(self._slot(k, s) for k, s in enumerate(senders)))
        finally:
            for sender in senders:
                sender.close()
                if hasattr(sender, "aclose"):
                    await sender.aclose()

    async def _slot(self, k: int, sender: Any) -> None:
        slot, send, record, clock = self.spec.first_slot + k, sender.send, self.recorder.record, time.perf_counter_ns
        previous = -1
        while not self.stopping:
            self.sent += 1
            t0 = clock()
            ok, payload = await send()
            t1 = clock()
            record(slot, t0, t1, ok, payload, t0 - previous if previous >= 0 else -1)
            previous = t1


class RateGroup(_LoopGroup):
    """Requests sent on a schedule (``rate`` per second, constant or seeded Poisson), each on a
    connection of its own from a pool; the delay of each send past its due time is recorded."""

    def __init__(self, spec: GroupSpec, recorder: Recorder, rate: float, poisson: bool, seed: int) -> None:
        super().__init__(spec, recorder)
        self.rate, self.poisson = rate, poisson
        self.rng = np.random.default_rng(seed)

    async def _main(self) -> None:
        idle: list[Any] = []  # HTTP: one connection per request in flight, reused when it is back
        everyone: list[Any] = []
        shared = self.spec.protocol == "grpc"  # gRPC: one channel carries every request in flight
        pending: set[asyncio.Task] = set()
        # A rate the server cannot serve piles up requests; past this many outstanding the schedule
        # waits (those sends count as late) instead of growing without bound.
        slots = asyncio.Semaphore(MAX_OUTSTANDING)
        clock = time.perf_counter_ns
        due = clock()
        try:
            while not self.stopping:
                wait = (due - clock()) / 1e9
                await asyncio.sleep(max(wait, 0.0))  # behind schedule, still yield once per send
                await slots.acquire()
                if self.stopping:
                    slots.release()
                    break
                if shared:
                    if not everyone:
                        everyone.append(self.spec.sender(blocking=False))
                    sender, back = everyone[0], None
                else:
                    if not idle:
                        everyone.append(self.spec.sender(blocking=False))
                        idle.append(everyone[-1])
                    sender, back = idle.pop(), idle
                self.sent += 1
                task = asyncio.ensure_future(self._one(sender, back, slots, max(0, clock() - due)))
                pending.add(task)
                task.add_done_callback(pending.discard)
                gap = self.rng.exponential(1.0 / self.rate) if self.poisson else 1.0 / self.rate
                due += int(gap * 1e9)
            if pending:
                await asyncio.wait(pending)
        finally:
            for sender in everyone:
                sender.close()
                if hasattr(sender, "aclose"):
                    await sender.aclose()

    async def _one(self, sender: Any, back: list[Any] | None, slots: asyncio.Semaphore, delay: int) -> None:
        try:
            t0 = time.perf_counter_ns()
            ok, payload = await sender.send()
            self.recorder.record(0, t0, time.perf_counter_ns(), ok, payload, delay)
        finally:
            if back is not None:
                back.append(sender)
            slots.release()


def local_group(spec: GroupSpec, recorder: Recorder) -> ThreadGroup | AsyncGroup:
    return (ThreadGroup if spec.slots <= THREAD_SLOTS_MAX else AsyncGroup)(spec, recorder)


def split_slots(concurrency: int, processes: int) -> list[tuple[int, int]]:
    """(first slot, slots) of each process: the concurrency shared out as evenly as it goes."""
    processes = max(1, min(processes, concurrency))
    base, extra = divmod(concurrency, processes)
    out, first = [], 0
    for k in range(processes):
        n = base + (1 if k < extra else 0)
        out.append((first, n))
        first += n
    return out


def auto_processes(concurrency: int, usable_cpus: int) -> int:
    """Processes for ``concurrency`` slots when the user did not say: one per THREAD_SLOTS_MAX
    slots, at most half this machine's CPUs (the other half is the server's, when it is local)."""
    return max(1, min(math.ceil(concurrency / THREAD_SLOTS_MAX), usable_cpus // 2))
