"""The load generator's engine: keep the load going, cut it into back-to-back windows, stop when
they are stable, and pool the last ones into one `LoadResult` (perf_analyzer's definitions).

A request belongs to the window in which its response arrives; stability is judged over the last
``stable_windows`` windows; the server-side breakdown is diffed between statistics snapshots
taken at the window edges. Every raw latency, failure and output check is kept.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import math
import threading
import time
from collections import Counter
from typing import Any, Callable

import numpy as np

from workbench.measure.loadgen.plan import MAX_OUTSTANDING, LoadPlan
from workbench.measure.loadgen.results import LoadResult, WindowResult
from workbench.measure.loadgen.senders import Admin, Sender
from workbench.measure.stats import ServerStats, StatsError, is_stable, server_breakdown, summarize_latencies
from workbench.tasks import Cancelled

__all__ = ["Engine", "LATE_AFTER_S", "LATE_WARNING_FRACTION", "BUSY_WARNING"]

# A rate-mode send counts as late when it leaves this long after its scheduled time. Event-loop
# timers wake with about a millisecond of granularity on Linux; 2 ms is past that noise.
LATE_AFTER_S = 0.002
# Share of late sends above which the result warns that the generator could not keep the rate
# (perf_analyzer's threshold is 1%).
LATE_WARNING_FRACTION = 0.01
# The client busy more than this share of a window (CPU of the event loop's thread, or of the whole
# process when blocking threads send): the client may be the bottleneck.
BUSY_WARNING = 0.8



class _Bucket:
    """Everything that completed (or was sent, for send delays) during one window."""

    __slots__ = ("latencies_ns", "failures", "send_delays_s")

    def __init__(self) -> None:
        self.latencies_ns: list[int] = []
        self.failures = 0
        self.send_delays_s: list[float] = []


class Engine:
    """One load level run to its result: ``await Engine(...).run()``. ``check(outputs)`` sees
    every warm-up response and the first of each window."""

    def __init__(self, plan: LoadPlan, sender: Sender, admin: Admin, check: Callable | None,
                 progress: Callable | None, cancel: threading.Event | None) -> None:
        self.plan, self.sender, self.admin = plan, sender, admin
        self.check, self.progress, self.cancel = check, progress, cancel
        self.bucket = _Bucket()
        self.stop = False
        self.sent = self.succeeded = self.failed = 0
        self.errors: Counter[str] = Counter()
        self.checked = self.check_failures = 0
        self.check_messages: list[str] = []
        self.warming = True
        self.check_next = True
        self.window_start = (0, 0.0)
        self.pending: set[asyncio.Task] = set()
        self.rng = np.random.default_rng(plan.seed)
        # Blocking senders record from their threads: counters and the bucket swap share this lock.
        # Their CPU is spread over threads, so the busy share is the whole process's CPU.
        self.lock = threading.Lock()
        self.cpu_clock = time.process_time if sender.blocking else time.thread_time
        self.closed = False  # set when the counts are final: a request abandoned after that is not recorded

    # -- recording ------------------------------------------------------------------------

    def _record(self, t0: int, t1: int, ok: bool, payload: Any) -> None:
        if not ok:
            self.failed += 1
            self.bucket.failures += 1
            self.errors[str(payload)] += 1
        else:
            self._succeeded(t1 - t0, payload)
        if self.warming and self.succeeded + self.failed >= self.plan.warmup_requests:
            self._end_warmup()

    def _succeeded(self, latency_ns: int, payload: Any) -> None:
        self.succeeded += 1
        self.bucket.latencies_ns.append(latency_ns)
        if self.check is not None and self.check_next:
            self.check_next = self.warming  # every warm-up response, then the first of each window
            self._run_check(payload)

    def _end_warmup(self) -> None:
        """The first window starts the moment the last warm-up response is in."""
        self.warming = False
        self.window_start = (time.perf_counter_ns(), self.cpu_clock())
        self.bucket, self.check_next = _Bucket(), True

    def _run_check(self, payload: Any) -> None:
        self.checked += 1
        try:
            passed = bool(self.check(self.sender.outputs(payload)))
            message = "check returned False"
        except Exception as err:  # a broken check is a failed check, reported with its message
            passed, message = False, f"check raised {type(err).__name__}: {err}"
        if not passed:
            self.check_failures += 1
            if len(self.check_messages) < 3:
                self.check_messages.append(message)

    # -- load -----------------------------------------------------------------------------

    async def _worker(self) -> None:
        send, clock = self.sender.send, time.perf_counter_ns
        while not self.stop:
            self.sent += 1
            t0 = clock()
            ok, payload = await send()
            self._record(t0, clock(), ok, payload)

    def _blocking_worker(self) -> None:
        """One concurrency slot on its own thread: blocking sends back to back."""
        send, clock, lock = self.sender.send, time.perf_counter_ns, self.lock
        while not self.stop:
            with lock:
                self.sent += 1
            t0 = clock()
            ok, payload = send()
            t1 = clock()
            with lock:
                if self.closed:
                    return
                self._record(t0, t1, ok, payload)

    async def _one(self, slots: asyncio.Semaphore) -> None:
        try:
            t0 = time.perf_counter_ns()
            ok, payload = await self.sender.send()
            self._record(t0, time.perf_counter_ns(), ok, payload)
        finally:
            slots.release()

    async def _schedule(self) -> None:
        loop = asyncio.get_running_loop()
        rate = self.plan.request_rate
        poisson = self.plan.distribution == "poisson"
        # A rate the server cannot serve piles up requests; past this many outstanding the
        # schedule waits (those sends count as late) instead of growing without bound.
        slots = asyncio.Semaphore(MAX_OUTSTANDING)
        due = time.perf_counter()
        while not self.stop:
            wait = due - time.perf_counter()
            # behind schedule, still yield once per send so responses and window edges run
            await asyncio.sleep(max(wait, 0.0))
            await slots.acquire()
            if self.stop:
                slots.release()
                break
            self.bucket.send_delays_s.append(max(0.0, time.perf_counter() - due))
            self.sent += 1
            task = loop.create_task(self._one(slots))
            self.pending.add(task)
            task.add_done_callback(self.pending.discard)
            due += self.rng.exponential(1.0 / rate) if poisson else 1.0 / rate

    # -- windows --------------------------------------------------------------------------

    def _cancelled(self) -> bool:
        return self.cancel is not None and self.cancel.is_set()

    async def _sleep_until(self, deadline_ns: int) -> None:
        while not self._cancelled():
            left = (deadline_ns - time.perf_counter_ns()) / 1e9
            if left <= 0:
                return
            await asyncio.sleep(min(left, 0.05))

    def _report(self, done: int, message: str) -> None:
        if self.progress is not None:
            self.progress(done, self.plan.max_windows, message)

    async def run(self) -> LoadResult:
        plan = self.plan
        first_snapshot = await self.admin.statistics()
        if plan.warmup_requests == 0:
            self._end_warmup()
        pool = None
        if plan.concurrency and self.sender.blocking:
            pool = concurrent.futures.ThreadPoolExecutor(plan.concurrency, thread_name_prefix="workbench-load")
            loop = asyncio.get_running_loop()
            drivers = [loop.run_in_executor(pool, self._blocking_worker) for _ in range(plan.concurrency)]
        elif plan.concurrency:
            drivers = [asyncio.ensure_future(self._worker()) for _ in range(plan.concurrency)]
        else:
            drivers = [asyncio.ensure_future(self._schedule())]
        windows: list[WindowResult] = []
        snapshots: list[dict | None] = []
        try:
            self._report(0, f"warming up ({plan.warmup_requests} requests)")
            while self.warming and not self._cancelled():
                await asyncio.sleep(0.005)
            start_ns, start_cpu = self.window_start
            snapshots.append(await self.admin.statistics())
            finished = False
            while not finished and not self._cancelled():
                await self._sleep_until(start_ns + int(plan.window_s * 1e9))
                with self.lock:
                    end_ns, end_cpu = time.perf_counter_ns(), self.cpu_clock()
                    bucket, self.bucket = self.bucket, _Bucket()
                windows.append(self._window(len(windows), bucket, end_ns - start_ns, end_cpu - start_cpu))
                finished = self._stable(windows) or len(windows) >= plan.max_windows
                self.check_next = not finished  # the first response of the next window, if any
                start_ns, start_cpu = end_ns, end_cpu
                snapshots.append(await self.admin.statistics())
                windows[-1].server = self._server(snapshots[-2], snapshots[-1])
                w = windows[-1]
                self._report(len(windows), f"window {len(windows)}/{plan.max_windows}: "
                                           f"{w.throughput:.1f} infer/s, p50 {w.latency(50) / 1000:.2f} ms")
        finally:
            self.stop = True
            await self._drain(drivers)
            if pool is not None:  # threads still out end with their request (closing the sender ends it)
                pool.shutdown(wait=False)
        if self._cancelled():
            raise Cancelled("measurement cancelled")
        last_snapshot = await self._settled_statistics(first_snapshot)
        return self._result(windows, snapshots, first_snapshot, last_snapshot)

    async def _drain(self, drivers: list[asyncio.Future]) -> None:
        """Let every request in flight finish, so sent == succeeded + failed. After a cancel the
        user is waiting: requests still out after a short grace are abandoned and counted failed."""
        grace = 2.0 if self._cancelled() else self.plan.timeout_s + 5.0
        # stop is set: workers end after their request, the scheduler sends nothing more
        _, late = await asyncio.wait(set(drivers) | self.pending, timeout=grace)
        for task in late:
            task.cancel()
        if late:
            await asyncio.wait(late)
        for task in drivers:  # a bug in the engine itself must surface, not shrink the load quietly
            if task.done() and not task.cancelled() and task.exception() is not None:
                raise task.exception()
        with self.lock:
            self.closed = True
        lost = self.sent - self.succeeded - self.failed
        if lost:
            self.failed += lost
            self.errors[f"abandoned: no response within {grace:g} s after the measurement ended"] += lost

    async def _settled_statistics(self, first: dict | None) -> dict | None:
        """Statistics once the server has counted every request sent: Triton updates them just
        after the response leaves, so the last responses may not be counted yet."""
        deadline = time.monotonic() + 2.0
        while True:
            snapshot = await self.admin.statistics()
            if first is None or snapshot is None or time.monotonic() > deadline:
                return snapshot
            try:
                counted = server_breakdown(first, snapshot, self.plan.model, self.plan.version or None)
            except StatsError:
                return snapshot
            if counted.requests + counted.failures >= self.sent:
                return snapshot
            await asyncio.sleep(0.01)

    def _server(self, before: dict | None, after: dict | None) -> ServerStats | None:
        if before is None or after is None:
            return None
        try:
            return server_breakdown(before, after, self.plan.model, self.plan.version or None)
        except StatsError:  # the model was reloaded meanwhile: no breakdown for this span
            return None

    def _window(self, index: int, bucket: _Bucket, duration_ns: int, cpu_s: float) -> WindowResult:
        seconds = duration_ns / 1e9
        return WindowResult(
            index=index,
            duration_s=seconds,
            requests=len(bucket.latencies_ns),
            failures=bucket.failures,
            throughput=len(bucket.latencies_ns) * self.plan.batch_size / seconds,
            latencies_us=np.asarray(bucket.latencies_ns, dtype=float) / 1000.0,
            send_delays_us=np.asarray(bucket.send_delays_s, dtype=float) * 1e6,
            client_busy=cpu_s / seconds,
            server=None,
        )

    def _stable(self, windows: list[WindowResult]) -> bool:
        p = self.plan
        return is_stable([w.throughput for w in windows], [w.latency(p.percentile) for w in windows],
                         stability=p.stability, windows=p.stable_windows)

    def _result(self, windows: list[WindowResult], snapshots: list[dict | None],
                first_snapshot: dict | None, last_snapshot: dict | None) -> LoadResult:
        p = self.plan
        pooled = windows[-p.stable_windows:]
        seconds = sum(w.duration_s for w in pooled)
        requests = sum(w.requests for w in pooled)
        latencies = np.concatenate([w.latencies_us for w in pooled]) if pooled else np.empty(0)
        delays = np.concatenate([w.send_delays_us for w in pooled]) if pooled else np.empty(0)
        late = float(np.mean(delays > LATE_AFTER_S * 1e6)) if delays.size else 0.0
        busy = sum(w.client_busy * w.duration_s for w in pooled) / seconds if seconds else 0.0
        server = self._server(snapshots[len(windows) - len(pooled)], snapshots[len(windows)])
        server_total = self._server(first_snapshot, last_snapshot)
        result = LoadResult(
            model=p.model, url=p.url, protocol=p.protocol, batch_size=p.batch_size,
            concurrency=p.concurrency, request_rate=p.request_rate, distribution=p.distribution or None,
            stable=self._stable(windows),
            throughput=requests * p.batch_size / seconds if seconds else 0.0,
            latency=summarize_latencies(latencies, p.percentile),
            requests=requests, failures=sum(w.failures for w in pooled),
            latencies_us=latencies, send_delays_us=delays, late_fraction=late, client_busy=busy,
            server=server, windows=windows, pooled_windows=len(pooled),
            sent=self.sent, succeeded=self.succeeded, failed=self.failed, errors=dict(self.errors),
            checked=self.checked, check_failures=self.check_failures,
            percentile=p.percentile, server_total=server_total,
        )
        result.warnings = self._warnings(result)
        return result

    def _warnings(self, r: LoadResult) -> list[str]:
        p = self.plan
        out = []
        if not r.stable:
            pooled = r.windows[-p.stable_windows:]
            thr = [w.throughput for w in pooled]
            lat = [w.latency(p.percentile) for w in pooled]

            def spread(xs: list[float]) -> float:
                return (max(xs) / min(xs) - 1) * 100 if xs and min(xs) > 0 else math.inf

            which = "average latency" if p.percentile is None else f"p{p.percentile:g} latency"
            out.append(f"not stable after {len(r.windows)} window(s): over the last {len(pooled)} throughput "
                       f"varied {spread(thr):.0f}% and {which} {spread(lat):.0f}% (limit "
                       f"{p.stability * 100:.0f}%); numbers pool those windows anyway")
        if r.failed:
            top, count = max(r.errors.items(), key=lambda kv: kv[1])
            out.append(f"{r.failed} of {r.sent} request(s) failed; most common error ({count}x): {top}")
        if r.check_failures:
            out.append(f"outputs failed the check in {r.check_failures} of {r.checked} checked response(s): "
                       + "; ".join(self.check_messages))
        if p.request_rate is not None and r.late_fraction > LATE_WARNING_FRACTION:
            out.append(f"{r.late_fraction * 100:.1f}% of requests left more than {LATE_AFTER_S * 1000:.0f} ms "
                       f"after their scheduled time (mean delay {np.mean(r.send_delays_us) / 1000:.2f} ms): "
                       f"the load generator could not keep {p.request_rate:g} requests/s")
        if r.client_busy > BUSY_WARNING:
            out.append(f"the load generator's event loop was busy {r.client_busy * 100:.0f}% of the time: "
                       "its own cost may limit the load (perf_analyzer gives a cross-check)")
        if r.server is None:
            out.append("no server statistics (statistics extension unavailable): client-side numbers only")
        return out
