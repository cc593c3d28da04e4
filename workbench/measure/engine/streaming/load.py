"""One streaming load point: keep the load going (a fixed number of requests in flight, or a
constant / seeded Poisson request rate), cut the run into back-to-back windows, stop when the
last windows agree, and report every request completed after the warm-up.

The rules are the fixed-shape engine's (``measure.loadgen``): a warm-up that is counted but not
measured, windows of ``window_s`` until the last ``stable_windows`` agree within ``stability``
(``measure.stats.is_stable``) on throughput (here output tokens/s: tokens counted in the window
they arrived in) and latency (here the average TTFT of the requests completed in the window), at
most ``max_windows`` windows or ``time_limit_s``; nearest-rank percentiles and the block bootstrap
of ``measure.stats``. The stability rule decides only when to stop: the figures pool every window
(a window holding a rare slow request is the tail an SLO is about; docs/measure.md). The server's counts are snapshotted before the first request and after the
last response, so its count covers exactly what the client sent.
"""

from __future__ import annotations

import math
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import NamedTuple

import numpy as np

from workbench.measure.engine.loadgen.load_plan import MAX_OUTSTANDING, LoadPlan, build_plan
from workbench.measure.engine.measure_settings import MeasureError, MeasureSettings
from workbench.measure.engine.stats import bootstrap_spread, is_stable, percentile
from workbench.measure.engine.streaming.clients import open_client
from workbench.measure.engine.streaming.prompts import Prompt
from workbench.measure.engine.streaming.server_counts import CountingServer, counts_between, take_snapshot
from workbench.measure.engine.streaming.stream_results import RequestRecord, Slo, StreamResult, WindowFigures, summarize
from workbench.tasks import Cancelled

__all__ = ["StreamPlan", "StreamWindow", "measure_stream", "DEFAULT_SLOS", "HTTP_RATE_THREADS"]

DEFAULT_SLOS = (Slo(ttft_ms=500.0, itl_ms=50.0),)
# Rate mode over HTTP: one connection (and thread) per request in flight, at most this many.
HTTP_RATE_THREADS = 64
_POLL_S = 0.02
# A broken stream or a server gone fails every request at once: stop rather than flood.
GIVE_UP_AFTER_FAILURES = 20
CANCEL_GRACE_S = 2.0


class StreamWindow(NamedTuple):
    """One measurement window: its span (perf_counter ns), the output tokens that arrived in it,
    the requests that completed in it, and this process's CPU seconds over it."""

    start_ns: int
    end_ns: int
    tokens: int
    done: list[RequestRecord]
    cpu_s: float

    @property
    def duration_s(self) -> float:
        return (self.end_ns - self.start_ns) / 1e9

    @property
    def output_tokens_per_s(self) -> float:
        return self.tokens / self.duration_s if self.end_ns > self.start_ns else 0.0


@dataclass(frozen=True)
class StreamPlan:
    """One load point, checked: the load, windows and limits as the fixed-shape engine plans them
    (``loadgen.plan.LoadPlan``, batch size 1), and what streaming adds: SLOs, ignore_eos and the
    output counting tokens per response."""

    load: LoadPlan
    slos: tuple[Slo, ...]
    ignore_eos: bool
    count_output: str | None = None

    @property
    def in_flight(self) -> int:
        if self.load.concurrency is not None:
            return self.load.concurrency
        return HTTP_RATE_THREADS if self.load.protocol == "http" else MAX_OUTSTANDING


def build_stream_plan(
    url: str,
    model: str,
    settings: MeasureSettings,
    *,
    concurrency: int | None,
    request_rate: float | None,
    distribution: str,
    slos: Sequence[Slo],
    ignore_eos: bool,
    timeout_s: float,
    count_output: str | None = None,
) -> StreamPlan:
    """The point asked for, checked by ``loadgen.plan.build_plan`` (MeasureError names the bad
    argument). Unless the settings give one, the warm-up is one round of the load (streamed
    requests are long), not the fixed-shape engine's 20 requests or more."""
    if not slos or not all(isinstance(s, Slo) for s in slos):
        raise MeasureError("slos must be one or more Slo(ttft_ms=..., itl_ms=...)")
    load = build_plan(
        url,
        model,
        settings,
        batch_size=1,
        concurrency=concurrency,
        request_rate=request_rate,
        distribution=distribution,
        percentile=None,
        model_version="",
        timeout_s=timeout_s,
    )
    if settings.warmup_requests is None:
        # a quarter second of the rate, at most the fixed-shape engine's cap
        if load.concurrency is not None:
            rounds = load.concurrency
        else:
            assert load.request_rate is not None  # one of the two: load_plan checks it
            rounds = min(1000, max(1, math.ceil(load.request_rate / 4)))
        load = replace(load, warmup_requests=rounds)
    return StreamPlan(load, tuple(slos), bool(ignore_eos), count_output or None)


class _Run:
    """The sender thread and the completions it produces."""

    def __init__(self, plan: StreamPlan, prompts: Sequence[Prompt]) -> None:
        self.plan, self.prompts = plan, prompts
        self.client = open_client(
            plan.load.protocol,
            plan.load.url,
            plan.load.model,
            ignore_eos=plan.ignore_eos,
            timeout_s=plan.load.timeout_s,
            in_flight=plan.in_flight,
            count_output=plan.count_output,
        )
        self.records: list[RequestRecord] = []
        self.completed: queue.Queue[RequestRecord] = queue.Queue()
        self.slots = threading.Semaphore(plan.in_flight)
        self.stopping = threading.Event()
        self.failing_in_a_row = 0
        self.gave_up = ""
        self._finished: set[int] = set()
        self._lock = threading.Lock()
        self.thread = threading.Thread(target=self._send_or_give_up, daemon=True, name="stream-sender")

    def _done(self, record: RequestRecord) -> None:
        """A request ended (once: a request its deadline failed is not ended again by its reader)."""
        with self._lock:
            if id(record) in self._finished:
                return
            self._finished.add(id(record))
        self.failing_in_a_row = 0 if record.ok else self.failing_in_a_row + 1
        if self.failing_in_a_row >= GIVE_UP_AFTER_FAILURES and not self.gave_up:
            self.gave_up = f"stopped sending after {self.failing_in_a_row} failed requests in a row: {record.error}"
            self.stopping.set()
        self.completed.put(record)
        self.slots.release()

    def _send_or_give_up(self) -> None:
        try:
            self._send()
        except Exception as err:  # the sender must not die silently: the point ends, saying why
            self.give_up(f"the sender stopped: {type(err).__name__}: {err}")

    def give_up(self, why: str) -> None:
        if not self.gave_up:
            self.gave_up = why
        self.stopping.set()

    def expire(self) -> None:
        """Fail every request open past its deadline (the request timeout from its send): a
        server that drips or stays silent cannot hold a point open."""
        now = time.perf_counter_ns()
        limit = int(self.plan.load.timeout_s * 1e9)
        for record in list(self.records):
            if record.done_ns == 0 and record.sent_ns and now - record.sent_ns > limit:
                record.error = f"no final response within the {self.plan.load.timeout_s:g} s request timeout"
                record.done_ns = now
                self.client.abandon(record)
                self._done(record)

    def alive(self) -> bool:
        """Still sending, or stopped on purpose; a sender gone without a word is given up here."""
        if not self.thread.is_alive() and not self.stopping.is_set():
            self.give_up("the sender stopped without a reason")
        return not self.stopping.is_set()

    def _send(self) -> None:
        load, rng = self.plan.load, np.random.default_rng(self.plan.load.seed)
        next_at = time.perf_counter_ns()
        k = 0
        while not self.stopping.is_set():
            if load.request_rate is not None:
                mean_gap = 1 / load.request_rate
                gap = rng.exponential(mean_gap) if load.distribution == "poisson" else mean_gap
                while (left := next_at - time.perf_counter_ns()) > 0 and not self.stopping.is_set():
                    time.sleep(min(left / 1e9, _POLL_S))
            if not self.slots.acquire(timeout=_POLL_S):
                continue
            if self.stopping.is_set():
                self.slots.release()
                break
            prompt = self.prompts[k % len(self.prompts)]
            record = RequestRecord(0, prompt.input_tokens, prompt.max_tokens)
            if load.request_rate is not None:
                record.send_delay_ns = max(0, time.perf_counter_ns() - next_at)
                next_at += int(gap * 1e9)
            self.records.append(record)
            try:
                self.client.submit(prompt, record, self._done)
            except Exception as err:  # a refused request is a failed request, counted
                record.error, record.done_ns = f"{type(err).__name__}: {err}", time.perf_counter_ns()
                self._done(record)
            k += 1

    def tokens_so_far(self) -> int:
        return sum(len(r.token_ns) for r in list(self.records))

    def finish(self, grace_s: float) -> None:
        """Stop sending; wait up to ``grace_s`` for requests in flight (each within its own
        deadline); close."""
        self.stopping.set()
        self.thread.join(grace_s + 1.0)
        deadline = time.monotonic() + grace_s
        while any(r.done_ns == 0 for r in self.records) and time.monotonic() < deadline:
            time.sleep(_POLL_S)
            self.expire()
        self.client.close()
        for record in self.records:
            if record.done_ns == 0:
                record.error, record.done_ns = "abandoned: no final response in time", time.perf_counter_ns()


def measure_stream(
    url: str,
    model: str,
    prompts: Sequence[Prompt],
    settings: MeasureSettings | None = None,
    *,
    concurrency: int | None = None,
    request_rate: float | None = None,
    distribution: str = "constant",
    slos: Sequence[Slo] = DEFAULT_SLOS,
    ignore_eos: bool = True,
    counts_from: CountingServer | None = None,
    token_metric: str | None = None,
    count_output: str | None = None,
    timeout_s: float = 60.0,
    progress: Callable[[int, int, str], None] | None = None,
    cancel: threading.Event | None = None,
    until: Callable[[Sequence[StreamWindow]], str | None] | None = None,
) -> StreamResult:
    """Measure one load point of the decoupled ``model`` at ``url`` (host:port of
    ``settings.protocol``: "grpc" streams over ModelStreamInfer, "http" over generate_stream).

    ``prompts`` (``prompts.build_prompts``) are sent in turn; ``concurrency`` requests in flight
    (default 1) or ``request_rate`` requests/s on a ``constant`` or seeded ``poisson`` schedule.
    ``counts_from`` (the server's control: ``stats``, ``metrics``) gives the server's own counts
    beside the client's; ``token_metric`` names the model's output-token counter on /metrics.
    ``count_output``: an output giving each response's token count (the vLLM backend's
    ``num_output_tokens``; see ``clients``), else each response is one token.
    ``cancel`` stops at the next poll and raises ``Cancelled``. ``until``: after each window, the
    caller's rule (an effort rule: ``sweep.search.effort.DecidedBy``) reads the windows so far and
    returns why to stop (recorded as the result's ``stopped``) or None to measure on; it replaces
    the stability rule and ``max_windows`` (the time limit still holds). Either way the figures
    pool every window measured.

    Bounded in time: each request fails ``timeout_s`` after it was sent, however slowly its bytes
    come; the warm-up ends within ``timeout_s`` or the point gives up; the windows end by the
    settings' limits; the requests still open then end within their own deadlines. A point that
    gave up, or whose numbers cannot be (``StreamResult.unusable``), is returned saying so.
    """
    if not prompts:
        raise MeasureError("no prompts to send (build them with build_prompts)")
    plan = build_stream_plan(
        url,
        model,
        MeasureSettings() if settings is None else settings,
        concurrency=concurrency,
        request_rate=request_rate,
        distribution=distribution,
        slos=slos,
        ignore_eos=ignore_eos,
        timeout_s=timeout_s,
        count_output=count_output,
    )
    before = take_snapshot(counts_from, model, token_metric) if counts_from is not None else None
    run = _Run(plan, prompts)
    run.thread.start()
    windows: list[StreamWindow] = []
    stopped: str | None = None
    started = time.perf_counter_ns()
    try:
        done: list[RequestRecord] = []

        def drain() -> None:
            while True:
                try:
                    done.append(run.completed.get_nowait())
                except queue.Empty:
                    return

        def wait_until(deadline_ns: int) -> None:
            while time.perf_counter_ns() < deadline_ns and not (cancel is not None and cancel.is_set()):
                time.sleep(_POLL_S)
                run.expire()
                if not run.alive():
                    return

        # the warm-up has a deadline too: its requests must end within the request timeout
        warm_until = time.perf_counter_ns() + int(plan.load.timeout_s * 1e9) + int(2 * _POLL_S * 1e9)
        while len(done) < plan.load.warmup_requests and not (cancel is not None and cancel.is_set()):
            wait_until(min(warm_until, time.perf_counter_ns() + int(_POLL_S * 1e9)))
            drain()
            if run.gave_up:
                break
            if time.perf_counter_ns() >= warm_until:
                run.give_up(
                    f"warm-up not over: {len(done)} of {plan.load.warmup_requests} request(s) ended "
                    f"within the {plan.load.timeout_s:g} s request timeout"
                )
        warm_failed = [r for r in done if not r.ok]
        if warm_failed and len(warm_failed) == len(done) and not run.gave_up:
            run.give_up(f"every warm-up request failed; first: {warm_failed[0].error}")
        start, tokens, cpu = time.perf_counter_ns(), run.tokens_so_far(), time.process_time()
        done.clear()
        while not run.gave_up and not (cancel is not None and cancel.is_set()):
            wait_until(start + int(plan.load.window_s * 1e9))
            end, tokens_now, cpu_now = time.perf_counter_ns(), run.tokens_so_far(), time.process_time()
            drain()
            inside = [r for r in done if r.done_ns <= end]
            done[:] = [r for r in done if r.done_ns > end]
            windows.append(StreamWindow(start, end, tokens_now - tokens, inside, cpu_now - cpu))
            if progress is not None:
                progress(
                    len(windows),
                    plan.load.max_windows,
                    f"window {len(windows)}: {windows[-1].output_tokens_per_s:.1f} output tok/s",
                )
            stopped = _why_stop(windows, plan, until, (end - started) / 1e9, run.gave_up)
            if stopped is not None:
                break
            start, tokens, cpu = end, tokens_now, cpu_now
    finally:  # after a cancel the user is waiting: a short grace, as the fixed-shape engine gives
        run.finish(CANCEL_GRACE_S if cancel is not None and cancel.is_set() else plan.load.timeout_s)
    if cancel is not None and cancel.is_set():
        raise Cancelled("measurement cancelled")
    after = _settled(
        counts_from, model, token_metric, before, len(run.records), sum(r.output_tokens for r in run.records)
    )
    result = _result(plan, windows, run.records, counts_between(before, after), by_rule=until is not None)
    result.stopped = stopped or run.gave_up or None
    if run.gave_up:
        result.warnings.insert(0, run.gave_up)
        result.unusable = result.unusable or run.gave_up
    return result


def _why_stop(
    windows: list[StreamWindow],
    plan: StreamPlan,
    until: Callable[[Sequence[StreamWindow]], str | None] | None,
    elapsed_s: float,
    gave_up: str,
) -> str | None:
    """Why the windows end after the last one (None: measure on): the sender gave up, the
    caller's rule, else stable windows or the window cap; the time limit in either case."""
    if gave_up:
        return gave_up
    if until is not None:
        stopped = until(windows)
    elif _stable(windows, plan):
        stopped = f"stable after {len(windows)} window(s)"
    else:
        stopped = f"max windows {plan.load.max_windows} reached" if len(windows) >= plan.load.max_windows else None
    if stopped is None and plan.load.time_limit_s is not None and elapsed_s >= plan.load.time_limit_s:
        stopped = f"time limit {plan.load.time_limit_s:g} s reached"
    return stopped


def _window_figures(window: StreamWindow) -> tuple[float, int, float]:
    """What the stability rule reads of a window: output tokens/s, requests completed, mean TTFT."""
    ttfts = [r.ttft_ms for r in window.done if r.ok and r.token_ns]
    return window.output_tokens_per_s, len(ttfts), (float(np.mean(ttfts)) if ttfts else math.nan)


def _stable(windows: list, plan: StreamPlan) -> bool:
    figures = [_window_figures(w) for w in windows]
    return is_stable(
        [f[0] for f in figures],
        [f[2] for f in figures],
        stability=plan.load.stability,
        windows=plan.load.stable_windows,
    )


def _settled(server: CountingServer | None, model: str, token_metric: str | None, before, sent: int, received: int):
    """The server's counts once it has counted every request sent and every token received (its
    statistics are updated just after the last response leaves; an engine's token counter may
    lag a step), or after 3 s."""
    if server is None or before is None:
        return None
    deadline = time.monotonic() + 3.0
    while True:
        after = take_snapshot(server, model, token_metric)
        counted = (
            after is not None
            and after.requests - before.requests >= sent
            and not (after.token_counter - before.token_counter < received)
        )  # NaN (no counter) compares False
        if after is None or counted or time.monotonic() > deadline:
            return after
        time.sleep(_POLL_S)


def _result(
    plan: StreamPlan, windows: list[StreamWindow], records: list[RequestRecord], server, *, by_rule: bool = False
) -> StreamResult:
    pooled = windows  # the stopping rule decided when; every measured window counts
    seconds = sum((w[1] - w[0]) / 1e9 for w in pooled)
    pooled_records = [r for w in pooled for r in w[3]]
    figures = summarize(pooled_records, seconds, plan.slos)
    tokens = sum(w[2] for w in pooled)
    cpu = sum(w[4] for w in pooled)
    ok = [r for r in pooled_records if r.ok and r.token_ns]
    first = pooled[0][0] if pooled else 0
    spread = bootstrap_spread(
        [(r.done_ns - first) / 1e9 for r in ok], [r.ttft_ms for r in ok], span_s=seconds, seed=plan.load.seed
    )
    tokens_low, tokens_high = _tokens_interval(pooled, records, seconds, plan.load.seed)
    received = sum(r.output_tokens for r in records)
    result = StreamResult(
        model=plan.load.model,
        url=plan.load.url,
        protocol=plan.load.protocol,
        concurrency=plan.load.concurrency,
        request_rate=plan.load.request_rate,
        distribution=plan.load.distribution or None,
        stable=_stable(windows, plan),
        windows=len(windows),
        pooled_windows=len(pooled),
        seconds=seconds,
        requests=figures["requests"],
        failures=figures["failures"],
        input_tokens=figures["input_tokens"],
        output_tokens=tokens,
        output_tokens_per_s=tokens / seconds if seconds else 0.0,
        requests_per_s=figures["requests_per_s"],
        ttft_ms=figures["ttft_ms"],
        itl_ms=figures["itl_ms"],
        token_gap_ms=figures["token_gap_ms"],
        e2e_ms=figures["e2e_ms"],
        goodput=figures["goodput"],
        goodput_per_s=figures["goodput_per_s"],
        client_cpu_us_per_token=cpu / tokens * 1e6 if tokens else math.nan,
        tokens_per_response=(sum(r.output_tokens for r in ok) / max(1, sum(r.responses for r in ok))),
        spread=spread,
        output_tokens_per_s_low=tokens_low,
        output_tokens_per_s_high=tokens_high,
        client_total_requests=len(records),
        client_total_tokens=received,
        server=server,
        records=records,
        window_figures=[WindowFigures(w.duration_s, *_window_figures(w)) for w in windows],
        tokens_per_user_per_s=_per_user(ok),
    )
    result.warnings = _warnings(result, plan, records, by_rule)
    result.unusable = _unusable(result, plan, records)
    return result


def _per_user(ok: list[RequestRecord]) -> float:
    """The pace one user sees over a whole request: the tokens each request received over its
    end-to-end time (nearest-rank medians of both, as the result's ``e2e_ms``; LLMPerf's
    per-request output throughput). From the tokens received, never the tokens asked for: a
    stream that ended short is not a fast one."""
    if not ok:
        return math.nan
    e2e = percentile(sorted(r.e2e_ms for r in ok), 50)
    return percentile(sorted(r.output_tokens for r in ok), 50) * 1000.0 / e2e if e2e > 0 else math.nan


def _which(records: list[RequestRecord], bad: list[int], said: Callable[[RequestRecord], str]) -> str:
    """The first few bad requests by their place in the run (#0 = the first sent), with what each saw."""
    shown = ", ".join(f"#{k} {said(records[k])}" for k in bad[:3])
    return shown + (f" and {len(bad) - 3} more" if len(bad) > 3 else "")


def _unusable(result: StreamResult, plan: StreamPlan, records: list[RequestRecord]) -> str:
    """Why the point's figures cannot stand as a measurement ("" when they can): what was seen,
    not a guess at its cause."""
    reasons = []
    if plan.ignore_eos:  # every request should have received exactly max_tokens
        short = [k for k, r in enumerate(records) if r.ok and r.output_tokens != r.max_tokens]
        if short:
            reasons.append(
                f"{len(short)} of {len(records)} request(s) ended with another token count than the "
                f"max_tokens asked (ignore_eos): "
                + _which(records, short, lambda r: f"received {r.output_tokens} of {r.max_tokens}")
            )
    server = result.server
    if server is not None:
        comparable = server.output_tokens >= 0 and (server.from_token_counter or plan.count_output is None)
        if comparable and server.output_tokens != result.client_total_tokens:
            kind = "its token counter" if server.from_token_counter else "its responses"
            reasons.append(
                f"the server counted {server.output_tokens} output tokens ({kind}) for the "
                f"{result.client_total_requests} request(s) sent; the client received "
                f"{result.client_total_tokens}"
            )
        ended = sum(r.ok for r in records)
        if server.requests < ended or server.requests > result.client_total_requests:
            reasons.append(
                f"the server completed {server.requests} request(s) of the model over the point; the "
                f"client sent {result.client_total_requests} and saw {ended} end"
            )
    # a closed loop keeps its users busy: the total is about a user's pace over its busy time times
    # the number of users, so that pace twice the total means users idle most of the point (a client
    # that could not keep up). The mean pace, not the median: a few slow starts among a few requests
    # put the median pace far above the total with no idle user. In rate mode users may idle.
    busy_pace = _busy_pace([r for r in records if r.ok])
    if plan.load.concurrency is not None and busy_pace > 2 * result.output_tokens_per_s > 0:
        reasons.append(
            f"one user's pace over its busy time ({busy_pace:.1f} tok/s) above twice the total "
            f"({result.output_tokens_per_s:.1f} tok/s) at concurrency {plan.load.concurrency}: "
            "the users were idle most of the point"
        )
    return "; ".join(reasons)


def _busy_pace(ok: list[RequestRecord]) -> float:
    """Tokens received over the time requests were in flight (NaN without any): one user's mean
    pace, which Little's law ties to the total of a closed loop."""
    busy_ms = sum(r.e2e_ms for r in ok)
    return sum(r.output_tokens for r in ok) * 1000.0 / busy_ms if busy_ms > 0 else math.nan


def _tokens_interval(
    pooled: list[StreamWindow], records: list[RequestRecord], seconds: float, seed: int
) -> tuple[float, float]:
    """The 95% interval of output tokens/s over the pooled windows: the block bootstrap of
    ``stats.bootstrap_spread`` (as the fixed-shape engine's throughput interval) over the arrival
    times of the tokens, each token one item; NaN without tokens."""
    if not pooled or not seconds > 0:
        return math.nan, math.nan
    first, last = pooled[0].start_ns, pooled[-1].end_ns
    arrived = np.array([t for r in records for t in r.token_ns if first < t <= last], dtype=np.int64)
    spread = bootstrap_spread((arrived - first) / 1e9, None, span_s=seconds, seed=seed)
    return spread.throughput_low, spread.throughput_high


def _warnings(result: StreamResult, plan: StreamPlan, records: list[RequestRecord], by_rule: bool) -> list[str]:
    out = []
    if not result.stable and not by_rule:
        out.append(
            f"not stable after {result.windows} window(s): the figures are over all of them "
            f"({result.requests} requests)"
        )
    failed = [r for r in records if not r.ok]
    if failed:
        out.append(f"{len(failed)} of {len(records)} request(s) failed; first error: {failed[0].error}")
    if plan.load.request_rate is not None:
        delays = [r.send_delay_ns for r in records if r.send_delay_ns >= 0]
        late = sum(d > 10e6 for d in delays)
        if delays and late / len(delays) > 0.05:
            out.append(
                f"{late} of {len(delays)} requests left more than 10 ms late: the sender could not keep "
                f"{plan.load.request_rate:g} requests/s"
            )
    return out
