"""Load generator: measure one load level of a served model the way perf_analyzer does, from Python.

Why not just call perf_analyzer: it is a C++ binary that is often missing (CPU-only clients,
notebooks, macOS, glibc older than its wheel needs), and its numbers come back as a CSV without
the raw latencies. This engine keeps perf_analyzer's definitions (back-to-back windows, a request
belongs to the window in which its response arrives, stability over the last 3 windows within
10%, nearest-rank percentiles, server breakdown diffed between statistics snapshots at the window
edges) and keeps every raw latency, failure and check result. One difference: its figures are
over every window measured after the warm-up, not only the last 3 (the stopping rule decides
when to stop, not which requests count; docs/measure.md).

Its own cost is kept out of the numbers: the request is serialized once per load level and sent
as bytes (``wire``); each slot's loop only sends and reads the clock; outputs are decoded only
for the responses that are checked; when one process cannot keep up, several send (``slots``).
It reports its own send delay and CPU per request with every result.

The seams: ``plan`` (the load level, checked), ``wire`` (request bytes, response parsing),
``senders`` (one per protocol and style), ``slots`` (threads and event loops that send),
``workers`` (the same in other processes), ``engine`` (windows, stability, limits), ``results`` (what comes back).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from workbench.measure.engine.loadgen.engine import BUSY_WARNING, LATE_AFTER_S, Engine, Until
from workbench.measure.engine.loadgen.load_plan import MAX_OUTSTANDING, LoadPlan, build_plan, input_arrays
from workbench.measure.engine.loadgen.load_results import LoadResult, WindowResult
from workbench.measure.engine.loadgen.senders import Admin
from workbench.measure.engine.loadgen.slots import (
    THREAD_SLOTS_MAX,
    GroupSpec,
    RateGroup,
    Recorder,
    local_group,
    split_slots,
)
from workbench.measure.engine.loadgen.wire import decode, grpc_request, http_request
from workbench.measure.engine.loadgen.workers import ProcessGroup
from workbench.measure.engine.measure_settings import MeasureError, MeasureSettings

__all__ = [
    "MeasureError",
    "WindowResult",
    "LoadResult",
    "measure",
    "Until",
    "LATE_AFTER_S",
    "BUSY_WARNING",
    "MAX_OUTSTANDING",
    "BLOCKING_MAX_CONCURRENCY",
]

# Slots per process up to which each slot is a thread with a blocking sender; above, one event loop.
BLOCKING_MAX_CONCURRENCY = THREAD_SLOTS_MAX


def _groups(plan: LoadPlan, request: Any) -> list[Any]:
    spec = GroupSpec(plan.protocol, request, plan.url, plan.timeout_s, plan.concurrency or 1)
    if plan.request_rate is not None:
        return [RateGroup(spec, Recorder(), plan.request_rate, plan.distribution == "poisson", plan.seed)]
    if plan.processes == 1:
        return [local_group(spec, Recorder())]
    return [
        ProcessGroup(GroupSpec(plan.protocol, request, plan.url, plan.timeout_s, slots, first))
        for first, slots in split_slots(plan.concurrency or 1, plan.processes)
    ]


def _judge(check: Callable[[dict[str, np.ndarray]], bool], protocol: str) -> Callable[[Any], tuple[bool, str]]:
    """The user's check on a response decoded in full (only checked responses are)."""

    def judge(payload: Any) -> tuple[bool, str]:
        return bool(check(decode(protocol, payload))), "check returned False"

    return judge


def measure(
    url: str,
    model: str,
    inputs: Any,
    settings: MeasureSettings | None = None,
    *,
    batch_size: int = 1,
    concurrency: int | None = None,
    request_rate: float | None = None,
    distribution: str = "constant",
    percentile: float | None = None,
    check: Callable[[dict[str, np.ndarray]], bool] | None = None,
    model_version: str = "",
    timeout_s: float = 30.0,
    progress: Callable[[int, int, str], None] | None = None,
    cancel: threading.Event | None = None,
    until: Until | None = None,
) -> LoadResult:
    """Measure one load level of ``model`` served at ``url`` (``host:port``).

    Load: ``concurrency`` requests kept outstanding (default 1), or ``request_rate`` requests/s
    sent on a ``constant`` or seeded ``poisson`` schedule (send delays recorded).
    ``inputs``: numpy arrays in the model's input order or by name, or a callable
    ``inputs(batch_size)`` returning them (called with None for models without batching); arrays
    without the batch dim are repeated ``batch_size`` times. Built into one request, once.

    ``settings`` (default ``MeasureSettings()``; its ``engine`` is not consulted: this is the
    built-in one) give the protocol, seed, windows and limits: after ``warmup_requests`` responses
    (default: max(20, 2 x concurrency), or a quarter second of the rate capped at 1000),
    back-to-back windows of ``window_s`` run until the last ``stable_windows`` agree within
    ``stability`` on throughput and latency (average, or ``percentile``) and hold
    ``min_latencies`` latencies, windows growing past ``max_windows`` until ``time_limit_s``
    (then ``stable`` may be False: not an error, the result says why).
    ``check(outputs)`` gets ``{name: array}`` of every warm-up response and the first of each
    window; failures are counted in ``check_failures``. Failed requests are counted, never dropped.
    ``cancel`` stops at the next poll (within 20 ms) and raises ``Cancelled``.
    ``until(windows)``, when given, decides after each window whether the windows are enough (a
    reason: they end) instead of the stability rule. Every window measured is pooled.
    """
    plan = build_plan(
        url,
        model,
        MeasureSettings() if settings is None else settings,
        batch_size=batch_size,
        concurrency=concurrency,
        request_rate=request_rate,
        distribution=distribution,
        percentile=percentile,
        model_version=model_version,
        timeout_s=timeout_s,
    )
    admin = Admin(plan)
    try:
        iface = admin.interface()
        arrays = input_arrays(inputs, iface, plan)
        request = (grpc_request if plan.protocol == "grpc" else http_request)(plan, iface, arrays)
        judge = None if check is None else _judge(check, plan.protocol)
        return Engine(plan, _groups(plan, request), admin, judge, progress, cancel, until).run()
    finally:
        admin.close()
