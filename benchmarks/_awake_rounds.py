"""Served vs in-process in short interleaved rounds, with the CPUs held awake and not.

Each round measures a short served point (one window, concurrency 1) between two in-process
timings in the same pinned child, once with the PM QoS request held (`_awake.held`: idle CPUs
poll) and once without, the order alternating from round to round, so the VM's drift over
seconds falls on both states alike. The difference between the states is the part of the served
gap that is the machine waking from halt, not the serving path.
"""

from __future__ import annotations

import statistics
from contextlib import nullcontext
from dataclasses import dataclass, field

import _awake
from _common import FreshProcess, bracket, outside_execute_us

from workbench.measure import MeasureSettings, measure

STATES = ("not held", "held")


@dataclass
class StateFigures:
    """One state's figures over the rounds, a value per round."""

    ratio: list[float] = field(default_factory=list)  # served throughput / in-process
    p50_over_ms: list[float] = field(default_factory=list)  # served p50 - in-process p50
    infer_over_ms: list[float] = field(default_factory=list)  # compute infer - in-process mean call
    outside_ms: list[float] = field(default_factory=list)  # served mean latency - compute infer


def _short_point(url: str, name: str, x, batch: int, protocol: str, window: float):
    """One window after three warm-up requests: a round must be short for the drift to cancel."""
    settings = MeasureSettings(engine="workbench", protocol=protocol, window_s=window, stable_windows=1,
                               max_windows=1, min_latencies=0, time_limit_s=None, warmup_requests=3)
    return measure(url, name, [x], settings, batch_size=batch, concurrency=1)


def rounds(server, name: str, artifact, inputs: dict, batch: int, protocol: str, *, cpu: int | None,
           count: int, window: float) -> tuple[dict[str, StateFigures], dict[str, dict[str, int]]]:
    """``count`` rounds at ``batch``: the figures per state, and the cpuidle entries per state
    (the evidence the hold took effect)."""
    url = server.grpc_url if protocol == "grpc" else server.http_url
    figures = {state: StateFigures() for state in STATES}
    entries = {state: {} for state in STATES}
    with FreshProcess(artifact, {batch: inputs[batch]}, cpu=cpu) as local:
        for k in range(count):
            for state in STATES if k % 2 == 0 else STATES[::-1]:
                before_idle = _awake.idle_entries()
                with _awake.held() if state == "held" else nullcontext():
                    before = local.time(batch, window)
                    served = _short_point(url, name, inputs[batch], batch, protocol, window)
                    after = local.time(batch, window)
                for idle_state, n in _awake.idle_entries().items():
                    entries[state][idle_state] = entries[state].get(idle_state, 0) + n - before_idle.get(idle_state, 0)
                here = bracket(before, after)
                f = figures[state]
                f.ratio.append(served.throughput / here["throughput"])
                f.p50_over_ms.append((served.p50_us - here["p50_us"]) / 1000)
                if served.server:
                    f.infer_over_ms.append(served.server.compute_infer_us / 1000 - 1000 * batch / here["throughput"])
                    f.outside_ms.append(outside_execute_us(served) / 1000)
    return figures, entries


def _median_iqr(values: list[float], fmt: str, unit: str) -> str:
    if len(values) < 2:
        return "n/a" if not values else format(values[0], fmt) + unit
    q1, _, q3 = statistics.quantiles(values, n=4)
    return f"{format(statistics.median(values), fmt)}{unit} (IQR {format(q1, fmt)} to {format(q3, fmt)})"


def _polled(entries: dict[str, int]) -> str:
    total = sum(entries.values())
    return f"{100 * entries.get('POLL', 0) / total:.0f}% of {total} idle entries polled" if total else "no idle entries"


def report(label: str, protocol: str, batch: int, figures: dict[str, StateFigures], entries: dict[str, dict[str, int]],
           target: str) -> None:
    """Print one backend's rounds at one batch size: each state, then the difference held - not."""
    print(f"  {label} {protocol} batch {batch}, {len(figures['held'].ratio)} rounds each, target {target}:")
    for state in STATES:
        f = figures[state]
        print(f"    {state:8}: served/in-process {_median_iqr(f.ratio, '.3f', 'x')}; p50 served - in-process "
              f"{_median_iqr(f.p50_over_ms, '+.3f', ' ms')}; compute infer - in-process call "
              f"{_median_iqr(f.infer_over_ms, '+.2f', ' ms')}; outside execute "
              f"{_median_iqr(f.outside_ms, '.3f', ' ms')} [{_polled(entries[state])}]")
    held, not_held = figures["held"], figures["not held"]

    def moved(values: str) -> float:
        a, b = getattr(held, values), getattr(not_held, values)
        return statistics.median(a) - statistics.median(b) if a and b else float("nan")

    print(f"    held minus not held (medians): served/in-process {moved('ratio'):+.3f}x, p50 served - in-process "
          f"{moved('p50_over_ms'):+.3f} ms, outside execute {moved('outside_ms'):+.3f} ms", flush=True)
