"""The times users weigh beside throughput, per variant: how long the server takes to load it,
how long its first response takes, and how long until responses settle (warm-up: a Neuron model's
first calls load the NEFF and fill caches; a CPU model's first calls allocate and JIT).

Measured right after the sweep loads a variant and before its first point, with single
sequential requests of the variant's first batch size, so they describe one client on an idle model.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import pandas as pd

from workbench.measure.store.run_record import RunRecord
from workbench.served_outputs import connect, infer
from workbench.server.protocol import Server

__all__ = [
    "SETTLED_RUN",
    "SETTLED_RATIO",
    "MAX_WARMUP_REQUESTS",
    "timed_load",
    "load_variant",
    "first_and_warmup",
    "times_frame",
]

SETTLED_RUN = 5  # consecutive requests that must agree for the model to count as warm
SETTLED_RATIO = 1.5  # each within this factor of their median
MAX_WARMUP_REQUESTS = 100


def timed_load(load: Callable[[], Any]) -> float:
    """Seconds ``load()`` (a blocking explicit-mode load: returns once the model is ready) takes."""
    start = time.perf_counter()
    load()
    return time.perf_counter() - start


class LoadedVariant(Protocol):
    """What loading needs of a sweep's variant (a tensor sweep's `Variant`, an LLM sweep's
    `LlmVariant`): its label and the config it is loaded with."""

    @property
    def label(self) -> str: ...

    @property
    def config(self) -> Any: ...


def load_variant(
    server: Server,
    name: str,
    variant: LoadedVariant,
    timeout_s: float,
    stuck: str | None,
    files: Mapping[str, bytes] | None = None,
    recover: Callable[[], None] | None = None,
) -> tuple[dict, str | None, str | None]:
    """Load ``variant`` of model ``name`` as a config override (with ``files``, e.g. an LLM
    variant's ``1/model.json``): ``(times, error, stuck)``.

    ``error`` is None when it loaded; a refusal is recorded and the sweep goes on. A load that got
    no answer within ``timeout_s`` sets ``stuck``, and once stuck no later variant is loaded (a hung
    backend stub, or a vLLM engine that never comes up, would only make each of them wait as long).
    Both sweeps load through here, so they stop by the same rule. A server that died is raised.
    ``recover`` (a sweep whose server is its own: its restart, which ends the hung engine with the
    process) is called instead after a load with no answer: that variant fails and, once it
    worked, the sweep goes on (``stuck`` stays None).
    """
    if stuck is not None:
        return {"error": f"not loaded: {stuck}"}, f"not loaded: {stuck}", stuck
    started = time.perf_counter()
    try:
        return (
            {"load_s": timed_load(lambda: server.load(name, config=variant.config, files=files, timeout=timeout_s))},
            None,
            None,
        )
    except Exception as err:  # Triton refused this variant: record it and go on with the rest
        if not server.running:
            raise
        error = f"load failed: {err}"
        if time.perf_counter() - started >= 0.95 * timeout_s:
            stuck = f"the load of {variant.label} got no answer within {timeout_s:g} s"
            log = _log_lines(server)
            then = "the variants after it were not loaded"
            if recover is not None:
                try:
                    recover()
                    stuck, then = None, "the server was restarted and the sweep went on"
                except Exception as again:  # the loads stop as without it, saying why
                    then += f" (restarting the server failed: {again})"
            error = (
                f"load failed: the load of {variant.label} got no answer within {timeout_s:g} s; {then} ({err}){log}"
            )
        return {"error": error}, error, stuck


def _log_lines(server: Server, n: int = 5) -> str:
    """The server log's last ``n`` lines, for a load that never answered ("" when there is no log)."""
    try:
        lines = [line.strip() for line in server.log_tail(n) if line.strip()]
    except Exception:  # a log that cannot be read says nothing more
        return ""
    return f"; the server log's last lines: {' | '.join(line[:200] for line in lines)}" if lines else ""


def first_and_warmup(target: Any, batch_size: int, protocol: str, seed: int) -> dict:
    """``first_response_s``, and ``warmup_s`` / ``warmup_requests`` until SETTLED_RUN requests in a
    row each took within SETTLED_RATIO of their median (``settled`` False if MAX_WARMUP_REQUESTS
    were not enough)."""
    arrays = target.request(batch_size, seed)
    connection = connect(target.url, protocol)
    try:
        start = time.perf_counter()
        infer(connection, target.model, target.spec, arrays)
        first = time.perf_counter() - start
        took: list[float] = []
        settled = False
        while len(took) < MAX_WARMUP_REQUESTS:
            t0 = time.perf_counter()
            infer(connection, target.model, target.spec, arrays)
            took.append(time.perf_counter() - t0)
            last = took[-SETTLED_RUN:]
            if len(last) == SETTLED_RUN:
                median = statistics.median(last)
                if all(t <= SETTLED_RATIO * median and median <= SETTLED_RATIO * t for t in last):
                    settled = True
                    break
        # warm-up ends where the settled run begins
        warm = took[:-SETTLED_RUN] if settled else took
    finally:
        connection[1].close()
    return {
        "batch_size": batch_size,
        "first_response_s": first,
        "warmup_s": first + sum(warm),
        "warmup_requests": 1 + len(warm),
        "settled": settled,
    }


def times_frame(record: RunRecord) -> pd.DataFrame:
    """One row per variant from a run record's ``variant_times`` (a `RunRecord`)."""
    rows = [{"variant": label, **times} for label, times in (record.variant_times or {}).items()]
    columns = ["variant", "load_s", "first_response_s", "warmup_s", "warmup_requests", "settled", "batch_size", "error"]
    return pd.DataFrame(rows, columns=columns)


def first_and_warmup_noted(target: Any, batch_size: int, settings: Any) -> dict:
    """First-response and warm-up times of a freshly loaded variant; a failure here is noted, and
    the point's own measurement says what is wrong."""
    try:
        return first_and_warmup(target, batch_size, settings.protocol, settings.seed)
    except Exception as err:  # noqa: BLE001 - any client error: recorded, not raised
        return {"error": f"first response failed: {err}"}
