"""Load generator: measure one load level of a served model the way perf_analyzer does, from Python.

Why not just call perf_analyzer: it is a C++ binary that is often missing (CPU-only clients,
notebooks, macOS), and its numbers come back as a CSV without the raw latencies. This engine
keeps perf_analyzer's definitions (back-to-back windows, a request belongs to the window in which
its response arrives, stability over the last 3 windows within 10%, the last 3 windows pooled,
nearest-rank percentiles, server breakdown diffed between statistics snapshots at the window
edges) and keeps every raw latency, failure and check result.

The client's own cost is kept low by building the request once per load level: a ready
``ModelInferRequest`` protobuf for gRPC, a ready binary body for HTTP (tritonclient's
``generate_request_body``). Metadata and statistics go through tritonclient's asyncio clients.

The seams: ``plan`` (the load level, checked), ``senders`` (one per protocol and style, behind
the ``Sender`` interface), ``engine`` (windows and stability), ``results`` (what comes back).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from typing import Any, Callable

import numpy as np

from workbench.measure.loadgen.engine import BUSY_WARNING, LATE_AFTER_S, Engine
from workbench.measure.loadgen.plan import MAX_OUTSTANDING, LoadPlan, build_plan, input_arrays
from workbench.measure.loadgen.results import LoadResult, WindowResult
from workbench.measure.loadgen.senders import BLOCKING_MAX_CONCURRENCY, Admin, make_sender
from workbench.measure.settings import MeasureError, MeasureSettings

__all__ = ["MeasureError", "WindowResult", "LoadResult", "measure", "LATE_AFTER_S", "BUSY_WARNING",
           "MAX_OUTSTANDING", "BLOCKING_MAX_CONCURRENCY"]


async def _measure_async(plan: LoadPlan, inputs: Any, check, progress, cancel) -> LoadResult:
    admin = Admin(plan)
    try:
        iface = await admin.interface()
        sender = make_sender(plan, iface, input_arrays(inputs, iface, plan))
        try:
            return await Engine(plan, sender, admin, check, progress, cancel).run()
        finally:
            await sender.close()
    finally:
        await admin.close()


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
) -> LoadResult:
    """Measure one load level of ``model`` served at ``url`` (``host:port``).

    Load: ``concurrency`` requests kept outstanding (default 1), or ``request_rate`` requests/s
    sent on a ``constant`` or seeded ``poisson`` schedule (send delays recorded).
    ``inputs``: numpy arrays in the model's input order or by name, or a callable
    ``inputs(batch_size)`` returning them (called with None for models without batching); arrays
    without the batch dim are repeated ``batch_size`` times. Built into one request, once.

    ``settings`` (default ``MeasureSettings()``; its ``engine`` is not consulted: this is the
    built-in one) give the protocol, seed and windows: after ``warmup_requests`` responses
    (default: max(20, 2 x concurrency), or a quarter second of the rate capped at 1000),
    back-to-back windows of ``window_s`` run until the last ``stable_windows`` agree within
    ``stability`` on throughput and latency (average, or ``percentile``) or ``max_windows`` is
    reached (then ``stable`` is False, not an error).
    ``check(outputs)`` gets ``{name: array}`` of every warm-up response and the first of each
    window; failures are counted in ``check_failures``. Failed requests are counted, never dropped.
    ``cancel`` stops at the next poll (within 50 ms) and raises ``Cancelled``.
    """
    plan = build_plan(url, model, MeasureSettings() if settings is None else settings, batch_size=batch_size,
                      concurrency=concurrency, request_rate=request_rate, distribution=distribution,
                      percentile=percentile, model_version=model_version, timeout_s=timeout_s)
    coroutine = _measure_async(plan, inputs, check, progress, cancel)
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    # Called from a thread that already runs an event loop (a Jupyter cell): use a fresh thread.
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="workbench-measure") as pool:
        return pool.submit(asyncio.run, coroutine).result()
