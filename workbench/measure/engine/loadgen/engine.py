"""The load generator's engine: keep the load going, cut what completes into back-to-back windows,
keep measuring until they are stable and hold enough latencies (or the point's time limit is
reached), and report every window measured after the warm-up as one `LoadResult`.

A request belongs to the window in which its response arrives; stability is judged over the last
``stable_windows`` windows, but that rule only decides when to stop: the figures are over every
request completed in the measured span (perf_analyzer reports its last three windows, which can
drop a window that held a rare slow request; docs/measure.md). The server-side breakdown
is diffed between statistics snapshots taken at the window edges. Past ``max_windows`` windows of one length, windows get twice as long; when
the last windows cannot hold ``min_latencies`` latencies at the rate measured, they get as long as
they need. Every raw latency, failure and output check is kept, and the generator's own send delay
and CPU are measured with it. A caller may decide instead when the windows are enough (``until``: a
search's effort rule reads each window as it ends); then windows keep their length, every window
is pooled, and the time limit still holds. The result says why the windows ended (``stopped``).

The engine runs in the calling thread; the slot groups (``slots``) send from their own threads or
processes, and the engine drains what they recorded every ``POLL_S``.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np

from workbench.measure.engine.loadgen.load_plan import LoadPlan
from workbench.measure.engine.loadgen.load_results import LoadResult, WindowResult
from workbench.measure.engine.loadgen.senders import Admin
from workbench.measure.engine.stats import (
    StatsError,
    bootstrap_spread,
    is_stable,
    server_breakdown,
    summarize_latencies,
)
from workbench.tasks import Cancelled

__all__ = ["Engine", "LATE_AFTER_S", "LATE_WARNING_FRACTION", "BUSY_WARNING", "POLL_S"]

# A rate-mode send counts as late when it leaves this long after its scheduled time. Event-loop
# timers wake with about a millisecond of granularity on Linux; 2 ms is past that noise.
LATE_AFTER_S = 0.002
# Share of late sends above which the result warns that the generator could not keep the rate
# (perf_analyzer's threshold is 1%).
LATE_WARNING_FRACTION = 0.01
# The generator's processes busy more than this share of a CPU per sending process: the client
# may be the bottleneck (perf_analyzer warns when its own overhead passes 50%).
BUSY_WARNING = 0.8
# How often the engine drains the slots' records and looks for a cancel.
POLL_S = 0.02

_SLOT, _SENT, _DONE, _ERROR, _DELAY = range(5)

# After each window: why the windows are enough (they end), or None (one more).
Until = Callable[[list[WindowResult]], "str | None"]


class Engine:
    """One load level on running slot groups: ``groups`` are started and stopped here;
    ``check(payload) -> (passed, message)`` judges a checked response; ``until`` (optional) decides
    when the windows are enough instead of the stability rule."""

    def __init__(
        self,
        plan: LoadPlan,
        groups: list[Any],
        admin: Admin,
        check: Callable[[Any], tuple[bool, str]] | None,
        progress: Callable[[int, int, str], None] | None,
        cancel: Any,
        until: Until | None = None,
    ) -> None:
        self.plan, self.groups, self.admin, self.until = plan, groups, admin, until
        self.stopped: str | None = None
        self.check, self.progress, self.cancel = check, progress, cancel
        self.succeeded = self.failed = 0
        self.errors: Counter[str] = Counter()
        self.checked = self.check_failures = 0
        self.check_messages: list[str] = []
        self.pending = np.empty((0, 5), np.int64)
        self.last_check = 0
        self.sending_since_ns = 0  # when the groups started sending (run)

    # -- draining -------------------------------------------------------------------------

    def _drain(self) -> None:
        """Everything the groups recorded since the last drain joins ``pending``; payloads asked
        for are checked here, off the slots' path."""
        parts = [self.pending]
        for group in self.groups:
            entries, payloads = group.take()
            if entries.size:
                failed = entries[:, _ERROR] != 0
                self.succeeded += int((~failed).sum())
                self.failed += int(failed.sum())
                for index, count in zip(*np.unique(entries[failed, _ERROR], return_counts=True)):
                    self.errors[group.message(int(index))] += int(count)
                parts.append(entries)
            for _, payload in payloads:
                self._run_check(payload)
        if len(parts) > 1:
            self.pending = np.concatenate(parts)

    def _run_check(self, payload: Any) -> None:
        if self.check is None:
            return
        self.checked += 1
        try:
            passed, message = self.check(payload)
        except Exception as err:  # a broken check is a failed check, reported with its message
            passed, message = False, f"check raised {type(err).__name__}: {err}"
        if not passed:
            self.check_failures += 1
            if len(self.check_messages) < 3:
                self.check_messages.append(message)

    def _split(self, end_ns: int) -> np.ndarray:
        """The pending entries that completed by ``end_ns``; the rest stay pending."""
        inside = self.pending[:, _DONE] <= end_ns
        taken, self.pending = self.pending[inside], self.pending[~inside]
        return taken

    def _ask_check(self, warm: int = 0) -> None:
        """Check the next ``warm`` completions (shared out over the groups), else the next success
        of one group (in turn)."""
        if self.check is None:
            return
        if warm:
            share = math.ceil(warm / len(self.groups))
            for k, group in enumerate(self.groups):
                group.set_check(warm=min(share, max(0, warm - k * share)))
        else:
            self.last_check = (self.last_check + 1) % len(self.groups)
            self.groups[self.last_check].set_check(next_one=True)

    def _cpu(self) -> float:
        return time.process_time() + sum(group.child_cpu_s for group in self.groups)

    def _cancelled(self) -> bool:
        return self.cancel is not None and self.cancel.is_set()

    def _wait_until(self, deadline_ns: int) -> None:
        while not self._cancelled():
            left = (deadline_ns - time.perf_counter_ns()) / 1e9
            if left <= 0:
                return
            time.sleep(min(left, POLL_S))
            self._drain()

    def _window_count(self, n: int) -> str:
        """``window 4 of up to 10``; past max windows, why there are more ("window 22" after "max
        windows 10" read as a bug): the windows lengthen until the time limit or stability. With
        ``until`` the caller's rule ends the windows, so the count has no "of"."""
        plan = self.plan
        if self.until is not None:  # the caller's rule, not max windows, ends the point
            return f"window {n}, measured until decided"
        if n <= plan.max_windows:
            return f"window {n} of up to {plan.max_windows}"
        limit = f"until the {plan.time_limit_s:g} s limit" if plan.time_limit_s else "until they agree"
        return f"window {n}: not stable after {plan.max_windows}, longer windows {limit}"

    def _report(self, done: int, message: str) -> None:
        if self.progress is not None:
            self.progress(done, max(self.plan.max_windows, done), message)

    # -- the run --------------------------------------------------------------------------

    def run(self) -> LoadResult:
        plan = p = self.plan
        first_snapshot = self.admin.statistics()
        self._ask_check(warm=plan.warmup_requests)
        for group in self.groups:
            group.start()
        self.sending_since_ns = time.perf_counter_ns()
        windows: list[WindowResult] = []
        snapshots: list[dict | None] = []
        started = time.perf_counter_ns()
        try:
            self._report(0, f"warming up ({plan.warmup_requests} requests)")
            start_ns = self._warm_up()
            if self._cancelled():
                raise Cancelled("measurement cancelled")
            start_cpu = self._cpu()
            self._ask_check()
            snapshots.append(self.admin.statistics())
            length, at_length, measuring_from = plan.window_s, 0, start_ns
            while not self._cancelled():
                self._wait_until(start_ns + int(length * 1e9))
                end_ns, end_cpu = time.perf_counter_ns(), self._cpu()
                self._drain()
                windows.append(self._window(len(windows), self._split(end_ns), start_ns, end_ns, end_cpu - start_cpu))
                snapshots.append(self.admin.statistics())
                windows[-1].server = self._server(snapshots[-2], snapshots[-1])
                at_length += 1
                measured_s = (end_ns - measuring_from) / 1e9
                if self.until is None:
                    length, at_length, self.stopped = self._next(windows, length, at_length, measured_s)
                else:
                    self.stopped = self.until(windows)
                    if self.stopped is None and p.time_limit_s is not None and measured_s >= p.time_limit_s:
                        self.stopped = f"time limit {p.time_limit_s:g} s reached"
                finished = self.stopped is not None
                w = windows[-1]
                self._report(
                    len(windows),
                    f"{self._window_count(len(windows))} ({w.duration_s:.2g} s): "
                    f"{w.throughput:.1f} infer/s, p50 {w.latency(50) / 1000:.2f} ms",
                )
                if finished:
                    break
                self._ask_check()
                start_ns, start_cpu = end_ns, end_cpu
        finally:
            self._stop()
        if self._cancelled():
            raise Cancelled("measurement cancelled")
        last_snapshot = self._settled_statistics(first_snapshot)
        return self._result(windows, snapshots, first_snapshot, last_snapshot, (time.perf_counter_ns() - started) / 1e9)

    def _warm_up(self) -> int:
        """Wait for the warm-up: ``warmup_requests`` responses, and the load kept up for one window
        at least (new senders ramp up: a point's first window read low where its later ones did
        not). The first window starts the moment both are done; none at all with 0 requests."""
        wanted = self.plan.warmup_requests
        if wanted == 0:
            return time.perf_counter_ns()
        ramped = self.sending_since_ns + int(self.plan.window_s * 1e9)
        while not self._cancelled():
            time.sleep(POLL_S / 4)
            self._drain()
            if len(self.pending) >= wanted and time.perf_counter_ns() >= ramped:
                order = np.argsort(self.pending[:, _DONE], kind="stable")
                start = max(int(self.pending[order[wanted - 1], _DONE]), ramped)
                self._split(start)  # warm-up requests are counted, not measured
                return start
        return time.perf_counter_ns()

    def _next(
        self, windows: list[WindowResult], length: float, at_length: int, measured_s: float
    ) -> tuple[float, int, str | None]:
        """(next window length, windows at it so far, why the windows end or None) after a window ends."""
        p = self.plan
        held = sum(w.requests for w in windows)  # every measured request counts
        enough = len(windows) >= p.stable_windows and held >= p.min_latencies
        if self._stable(windows) and enough:
            return (
                length,
                at_length,
                (
                    f"stable: the last {p.stable_windows} windows agree within "
                    f"{p.stability:.0%} and hold {held} latencies"
                ),
            )
        if p.time_limit_s is None:
            done = len(windows) >= p.max_windows
            return length, at_length, f"max windows {p.max_windows} reached" if done else None
        left = p.time_limit_s - measured_s
        if left <= 0:
            return length, at_length, f"time limit {p.time_limit_s:g} s reached"
        rate = windows[-1].requests / windows[-1].duration_s if windows[-1].duration_s > 0 else 0.0
        needed = 1.1 * p.min_latencies / p.stable_windows / rate if rate > 0 else length * 2
        if held < p.min_latencies and needed > length:
            length, at_length = needed, 0  # windows long enough to hold the latencies asked for
        elif at_length >= p.max_windows:
            length, at_length = length * 2, 0  # more windows did not settle it: longer ones
        return min(length, max(left, p.window_s)), at_length, None

    def _stop(self) -> None:
        """Stop every group (requests in flight finish, up to the request timeout; after a cancel
        the user is waiting: a short grace) and count what never came back as failed."""
        grace = 2.0 if self._cancelled() else self.plan.timeout_s + 5.0
        for group in self.groups:
            group.stop(grace)
        self._drain()
        sent = sum(group.sent_total() for group in self.groups)
        lost = sent - self.succeeded - self.failed
        self.sent = max(sent, self.succeeded + self.failed)
        if lost > 0:
            self.failed += lost
            self.errors[f"abandoned: no response within {grace:g} s after the measurement ended"] += lost

    def _settled_statistics(self, first: dict | None) -> dict | None:
        """Statistics once the server has counted every request sent: Triton updates them just
        after the response leaves, so the last responses may not be counted yet."""
        deadline = time.monotonic() + 2.0
        while True:
            snapshot = self.admin.statistics()
            if first is None or snapshot is None or time.monotonic() > deadline:
                return snapshot
            try:
                counted = server_breakdown(first, snapshot, self.plan.model, self.plan.version or None)
            except StatsError:
                return snapshot
            if counted.requests + counted.failures >= self.sent:
                return snapshot
            time.sleep(0.01)

    def _server(self, before: dict | None, after: dict | None):
        if before is None or after is None:
            return None
        try:
            return server_breakdown(before, after, self.plan.model, self.plan.version or None)
        except StatsError:  # the model was reloaded meanwhile: no breakdown for this span
            return None

    def _window(self, index: int, entries: np.ndarray, start_ns: int, end_ns: int, cpu_s: float) -> WindowResult:
        seconds = (end_ns - start_ns) / 1e9
        ok = entries[entries[:, _ERROR] == 0]
        delays = entries[:, _DELAY]
        return WindowResult(
            index=index,
            duration_s=seconds,
            requests=len(ok),
            failures=len(entries) - len(ok),
            throughput=len(ok) * self.plan.batch_size / seconds,
            latencies_us=(ok[:, _DONE] - ok[:, _SENT]) / 1000.0,
            send_delays_us=delays[delays >= 0] / 1000.0,
            client_busy=cpu_s / seconds,
            server=None,
            completed_s=(ok[:, _DONE] - start_ns) / 1e9,
            client_cpu_s=cpu_s,
        )

    def _stable(self, windows: list[WindowResult]) -> bool:
        p = self.plan
        return is_stable(
            [w.throughput for w in windows],
            [w.latency(p.percentile) for w in windows],
            stability=p.stability,
            windows=p.stable_windows,
        )

    def _result(
        self,
        windows: list[WindowResult],
        snapshots: list[dict | None],
        first_snapshot: dict | None,
        last_snapshot: dict | None,
        wall_s: float,
    ) -> LoadResult:
        p = self.plan
        pooled = windows  # the stopping rule decided when; every measured window counts
        seconds = sum(w.duration_s for w in pooled)
        requests = sum(w.requests for w in pooled)
        latencies = np.concatenate([w.latencies_us for w in pooled]) if pooled else np.empty(0)
        delays = np.concatenate([w.send_delays_us for w in pooled]) if pooled else np.empty(0)
        offsets = np.cumsum([0.0] + [w.duration_s for w in pooled])
        completed = (
            np.concatenate([w.completed_s + offset for w, offset in zip(pooled, offsets)]) if pooled else np.empty(0)
        )
        late = float(np.mean(delays > LATE_AFTER_S * 1e6)) if (delays.size and p.request_rate) else 0.0
        cpu = sum(w.client_cpu_s for w in pooled)
        server = self._server(snapshots[len(windows) - len(pooled)], snapshots[len(windows)]) if pooled else None
        result = LoadResult(
            model=p.model,
            url=p.url,
            protocol=p.protocol,
            batch_size=p.batch_size,
            concurrency=p.concurrency,
            request_rate=p.request_rate,
            distribution=p.distribution or None,
            stable=self._stable(windows),
            stopped=self.stopped,
            throughput=requests * p.batch_size / seconds if seconds else 0.0,
            latency=summarize_latencies(latencies, p.percentile),
            requests=requests,
            failures=sum(w.failures for w in pooled),
            latencies_us=latencies,
            send_delays_us=delays,
            late_fraction=late,
            client_busy=cpu / seconds if seconds else 0.0,
            server=server,
            windows=windows,
            pooled_windows=len(pooled),
            sent=self.sent,
            succeeded=self.succeeded,
            failed=self.failed,
            errors=dict(self.errors),
            checked=self.checked,
            check_failures=self.check_failures,
            percentile=p.percentile,
            server_total=self._server(first_snapshot, last_snapshot),
            spread=bootstrap_spread(completed, latencies, span_s=seconds, batch_size=p.batch_size, seed=p.seed),
            client_cpu_us=cpu / requests * 1e6 if requests else math.nan,
            enough_latencies=requests >= p.min_latencies,
            min_latencies=p.min_latencies,
            processes=len(self.groups) if p.concurrency else 1,
            measured_s=wall_s,
        )
        result.warnings = self._warnings(result)
        return result

    def _warnings(self, r: LoadResult) -> list[str]:
        p = self.plan
        out = []
        if not r.stable and self.until is None:  # with ``until`` the caller's rule ended the windows
            pooled = r.windows[-p.stable_windows :]  # the windows the stability rule compared
            thr = [w.throughput for w in pooled]
            lat = [w.latency(p.percentile) for w in pooled]

            def spread(xs: list[float]) -> float:
                return (max(xs) / min(xs) - 1) * 100 if xs and min(xs) > 0 else math.inf

            which = "average latency" if p.percentile is None else f"p{p.percentile:g} latency"
            limit = f" within the {p.time_limit_s:g} s limit" if p.time_limit_s is not None else ""
            out.append(
                f"not stable after {len(r.windows)} window(s){limit}: over the last {len(pooled)} throughput "
                f"varied {spread(thr):.0f}% and {which} {spread(lat):.0f}% (limit "
                f"{p.stability * 100:.0f}%); the figures are over all {len(r.windows)} windows "
                f"({r.requests} requests)"
            )
        if not r.enough_latencies:
            out.append(
                f"p99 from {r.requests} latencies, fewer than the {p.min_latencies} asked for: "
                "a longer time limit gives a firmer tail"
            )
        if r.failed:
            top, count = max(r.errors.items(), key=lambda kv: kv[1])
            out.append(f"{r.failed} of {r.sent} request(s) failed; most common error ({count}x): {top}")
        if r.check_failures:
            out.append(
                f"outputs failed the check in {r.check_failures} of {r.checked} checked response(s): "
                + "; ".join(self.check_messages)
            )
        if p.request_rate is not None and r.late_fraction > LATE_WARNING_FRACTION:
            out.append(
                f"{r.late_fraction * 100:.1f}% of requests left more than {LATE_AFTER_S * 1000:.0f} ms "
                f"after their scheduled time (mean delay {np.mean(r.send_delays_us) / 1000:.2f} ms): "
                f"the load generator could not keep {p.request_rate:g} requests/s"
            )
        if r.client_busy > BUSY_WARNING * r.processes:
            out.append(
                f"the load generator used {r.client_busy * 100:.0f}% of a CPU over {r.processes} process(es) "
                f"({r.client_cpu_us:.0f} us per request): its own cost may limit the load "
                "(more processes, or perf_analyzer, give a cross-check)"
            )
        if r.server is None:
            out.append("no server statistics (statistics extension unavailable): client-side numbers only")
        return out
