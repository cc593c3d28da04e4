"""The arithmetic of a measurement, as pure functions: percentiles, the stability rule and the
server-side breakdown from two statistics-extension snapshots, and the spread of a measurement
(a block bootstrap of throughput and a latency percentile).

Kept apart from the load generator so every number the workbench reports can be checked by hand
on known inputs, and so it matches perf_analyzer's definitions (nearest-rank percentiles at index
``round(p/100*(n-1))``, stability over the last windows by max/min, per-request server times
diffed between snapshots, overhead floored at zero).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from workbench.refusals import WorkbenchError

__all__ = [
    "STANDARD_PERCENTILES",
    "StatsError",
    "ServerStats",
    "percentile",
    "summarize_latencies",
    "percentile_key",
    "is_stable",
    "Spread",
    "bootstrap_spread",
    "model_counters",
    "server_breakdown",
]

STANDARD_PERCENTILES = (50, 90, 95, 99)

# numbers as a list or as the numpy array a measurement keeps them in
Floats = Sequence[float] | np.ndarray

# Float noise must not turn an exact 110/100 into "unstable".
_RATIO_SLACK = 1e-9

_DURATIONS = ("success", "fail", "queue", "compute_input", "compute_infer", "compute_output", "cache_hit", "cache_miss")


class StatsError(WorkbenchError, ValueError):
    """Statistics that cannot be diffed (wrong model, counters that went backwards)."""


def percentile(sorted_values: Floats, p: float) -> float:
    """Nearest-rank percentile as perf_analyzer computes it: the element at index
    ``floor(p/100*(n-1) + 0.5)`` of the sorted list, no interpolation. NaN for an empty list."""
    if not 0 <= p <= 100:
        raise ValueError(f"percentile {p} is outside 0..100")
    n = len(sorted_values)
    if n == 0:
        return math.nan
    return float(sorted_values[int(p / 100.0 * (n - 1) + 0.5)])


def summarize_latencies(latencies: Iterable[float], extra_percentile: float | None = None) -> dict[str, float]:
    """Mean, standard deviation and p50/p90/p95/p99 (plus ``extra_percentile``) of raw latencies,
    in the latencies' own unit. Keys: ``count, avg, std, p50, p90, p95, p99[, pP]``."""
    values = np.sort(np.asarray(list(latencies) if not isinstance(latencies, np.ndarray) else latencies, dtype=float))
    out: dict[str, float] = {"count": int(values.size)}
    out["avg"] = float(values.mean()) if values.size else math.nan
    out["std"] = float(values.std()) if values.size else math.nan
    wanted: list[float] = list(STANDARD_PERCENTILES)
    if extra_percentile is not None and extra_percentile not in wanted:
        wanted.append(extra_percentile)
    for p in wanted:
        out[percentile_key(p)] = percentile(values, p)
    return out


def percentile_key(p: float) -> str:
    """``50 -> "p50"``, ``99.9 -> "p99.9"``."""
    return f"p{p:g}"


def is_stable(
    throughputs: Sequence[float], latencies: Sequence[float], *, stability: float = 0.10, windows: int = 3
) -> bool:
    """perf_analyzer's rule: the last ``windows`` windows agree within ``stability`` (max/min <=
    1 + stability) on throughput AND on the stabilizing latency, and none has zero throughput."""
    if windows < 1:
        raise ValueError("windows must be >= 1")
    if len(throughputs) != len(latencies):
        raise ValueError("one latency per throughput, please")
    if len(throughputs) < windows:
        return False
    thr = [float(t) for t in throughputs[-windows:]]
    lat = [float(x) for x in latencies[-windows:]]
    if any(not math.isfinite(v) or v <= 0 for v in thr + lat):
        return False
    limit = 1.0 + stability + _RATIO_SLACK
    return max(thr) / min(thr) <= limit and max(lat) / min(lat) <= limit


# ---------------------------------------------------------------------------------------------
# Spread


@dataclass(frozen=True)
class Spread:
    """A ``confidence`` interval of throughput (inferences/s) and of latency percentile
    ``percentile`` (in the latencies' unit), from ``resamples`` resamples of ``blocks`` time blocks."""

    throughput_low: float
    throughput_high: float
    latency_low: float
    latency_high: float
    percentile: float = 99.0
    confidence: float = 0.95
    blocks: int = 0
    resamples: int = 0

    @classmethod
    def unknown(cls, percentile: float = 99.0, confidence: float = 0.95) -> Spread:
        return cls(math.nan, math.nan, math.nan, math.nan, percentile, confidence)


def bootstrap_spread(
    completed_s: Floats,
    latencies: Floats | None,
    *,
    span_s: float,
    batch_size: int = 1,
    percentile: float = 99.0,
    blocks: int = 20,
    resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> Spread:
    """How far throughput and the ``percentile`` latency could move on another run like this one.

    ``completed_s[i]`` is when request ``i`` completed, in seconds from the start of a span of
    ``span_s`` seconds (the pooled windows), ``latencies[i]`` its latency. The span is cut into
    ``blocks`` equal time blocks; each resample draws that many blocks with replacement (so it
    lasts ``span_s`` again) and gives a throughput (requests x ``batch_size`` / ``span_s``) and a
    nearest-rank percentile of its latencies. The interval holds the middle ``confidence`` of the
    resamples. Whole blocks are drawn, not single requests, because neighbouring requests are
    slowed by the same noise (a busy neighbour, a GC pause): resampling them one by one would
    understate the spread (the moving-block idea of Kuensch, 1989, with fixed blocks).
    Deterministic for a given ``seed``; NaN when there is nothing to resample. ``latencies`` None:
    the throughput's interval alone (items that are not requests, e.g. streamed tokens; the
    latency bounds are NaN).
    """
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if blocks < 1 or resamples < 1:
        raise ValueError("blocks and resamples must be >= 1")
    done = np.asarray(completed_s, dtype=float)
    lat = np.asarray(latencies if latencies is not None else np.zeros(done.size), dtype=float)
    if done.shape != lat.shape:
        raise ValueError("one completion time per latency, please")
    if not span_s > 0 or done.size == 0:
        return Spread.unknown(percentile, confidence)
    which = np.clip((done / span_s * blocks).astype(int), 0, blocks - 1)
    order = np.argsort(which, kind="stable")
    counts = np.bincount(which, minlength=blocks)
    per_block = np.split(lat[order], np.cumsum(counts)[:-1])
    rng = np.random.default_rng(seed)
    drawn = rng.integers(0, blocks, size=(resamples, blocks))
    throughput = counts[drawn].sum(axis=1) * batch_size / span_s
    tail = np.full(resamples, math.nan)
    for k, picks in enumerate(drawn if latencies is not None else ()):
        sample = np.concatenate([per_block[b] for b in picks])
        if sample.size:
            sample.sort()
            tail[k] = percentile_of_sorted(sample, percentile)
    cut = (1 - confidence) / 2 * 100
    finite = tail[np.isfinite(tail)]
    low_t, high_t = np.percentile(throughput, [cut, 100 - cut])
    low_l, high_l = np.percentile(finite, [cut, 100 - cut]) if finite.size else (math.nan, math.nan)
    return Spread(
        float(low_t),
        float(high_t),
        float(low_l),
        float(high_l),
        float(percentile),
        float(confidence),
        blocks,
        resamples,
    )


def percentile_of_sorted(sorted_values: np.ndarray, p: float) -> float:
    """``percentile`` without the checks, for a non-empty sorted array (the bootstrap's inner loop)."""
    return float(sorted_values[int(p / 100.0 * (sorted_values.size - 1) + 0.5)])


# ---------------------------------------------------------------------------------------------
# Statistics extension


def _int(value: Any) -> int:
    # gRPC's JSON renders uint64 as strings and leaves zero-valued fields out.
    return int(value) if value not in (None, "") else 0


def _pair(stats: Mapping, key: str) -> tuple[int, int]:
    entry = stats.get(key) or {}
    return _int(entry.get("count")), _int(entry.get("ns"))


def model_counters(snapshot: Mapping, model: str, version: str | None = None) -> dict[str, Any]:
    """The cumulative counters of ``model`` in a statistics response, as plain ints.

    ``snapshot`` is what ``get_inference_statistics`` returns as JSON (gRPC or HTTP spelling).
    Several versions of the model are summed unless ``version`` picks one.
    """
    entries = [
        e
        for e in snapshot.get("model_stats", [])
        if e.get("name") == model and (version in (None, "") or str(e.get("version")) == str(version))
    ]
    if not entries:
        have = sorted({f"{e.get('name')}:{e.get('version')}" for e in snapshot.get("model_stats", [])})
        wanted = model if version in (None, "") else f"{model} version {version}"
        raise StatsError(f"no statistics for {wanted}; the snapshot has {have or 'no models'}")
    out: dict[str, Any] = {"inference_count": 0, "execution_count": 0, "batches": {}}
    for key in _DURATIONS:
        out[key] = (0, 0)
    for entry in entries:
        out["inference_count"] += _int(entry.get("inference_count"))
        out["execution_count"] += _int(entry.get("execution_count"))
        inference = entry.get("inference_stats") or {}
        for key in _DURATIONS:
            count, ns = _pair(inference, key)
            out[key] = (out[key][0] + count, out[key][1] + ns)
        for batch in entry.get("batch_stats") or []:
            size = _int(batch.get("batch_size"))
            count, ns = _pair(batch, "compute_infer")
            old = out["batches"].get(size, (0, 0))
            out["batches"][size] = (old[0] + count, old[1] + ns)
    return out


@dataclass(frozen=True)
class ServerStats:
    """What the server did between two snapshots, per request (times in microseconds).

    ``overhead_us`` is the part of the server's request time not spent queued or computing
    (floored at 0, as perf_analyzer does); ``avg_batch`` is inferences per model execution, i.e.
    how well the (dynamic) batcher filled batches; ``batch_histogram`` counts executions by size.
    """

    requests: int
    failures: int
    inferences: int
    executions: int
    request_us: float
    queue_us: float
    compute_input_us: float
    compute_infer_us: float
    compute_output_us: float
    overhead_us: float
    avg_batch: float
    execution_infer_us: float
    batch_histogram: dict[int, int] = field(default_factory=dict)
    cache_hits: int = 0

    def throughput(self, seconds: float) -> float:
        """Server-side inferences per second over a window of ``seconds``."""
        return self.inferences / seconds if seconds > 0 else math.nan

    def to_row(self, prefix: str = "server_") -> dict[str, Any]:
        """Flat columns for a results table."""
        return {
            f"{prefix}requests": self.requests,
            f"{prefix}failures": self.failures,
            f"{prefix}inferences": self.inferences,
            f"{prefix}executions": self.executions,
            f"{prefix}request_us": self.request_us,
            f"{prefix}queue_us": self.queue_us,
            f"{prefix}compute_input_us": self.compute_input_us,
            f"{prefix}compute_infer_us": self.compute_infer_us,
            f"{prefix}compute_output_us": self.compute_output_us,
            f"{prefix}overhead_us": self.overhead_us,
            f"{prefix}avg_batch": self.avg_batch,
        }


def _avg_us(before: tuple[int, int], after: tuple[int, int]) -> float:
    count, ns = after[0] - before[0], after[1] - before[1]
    return ns / count / 1000.0 if count > 0 else 0.0


def server_breakdown(before: Mapping, after: Mapping, model: str, version: str | None = None) -> ServerStats:
    """Per-request server times between two statistics snapshots of ``model``.

    Triton adds every request of a batch the whole execution's compute time, so per-request
    averages are d(ns)/d(count) of each counter; the average executed batch is
    d(inference_count)/d(execution_count).
    """
    s0, s1 = model_counters(before, model, version), model_counters(after, model, version)
    if s1["success"][0] < s0["success"][0] or s1["inference_count"] < s0["inference_count"]:
        raise StatsError(
            f"statistics of {model!r} went backwards between the snapshots (the model was reloaded "
            "in between, or they are in the wrong order); take both after the model is ready"
        )
    requests = s1["success"][0] - s0["success"][0]
    queue = _avg_us(s0["queue"], s1["queue"])
    c_in = _avg_us(s0["compute_input"], s1["compute_input"])
    c_inf = _avg_us(s0["compute_infer"], s1["compute_infer"])
    c_out = _avg_us(s0["compute_output"], s1["compute_output"])
    request = _avg_us(s0["success"], s1["success"])
    inferences = s1["inference_count"] - s0["inference_count"]
    executions = s1["execution_count"] - s0["execution_count"]
    histogram = {}
    exec_count = exec_ns = 0
    for size, (count, ns) in s1["batches"].items():
        old_count, old_ns = s0["batches"].get(size, (0, 0))
        if count - old_count > 0:
            histogram[size] = count - old_count
            exec_count += count - old_count
            exec_ns += ns - old_ns
    return ServerStats(
        requests=requests,
        failures=s1["fail"][0] - s0["fail"][0],
        inferences=inferences,
        executions=executions,
        request_us=request,
        queue_us=queue,
        compute_input_us=c_in,
        compute_infer_us=c_inf,
        compute_output_us=c_out,
        overhead_us=max(0.0, request - queue - c_in - c_inf - c_out) if requests else 0.0,
        avg_batch=inferences / executions if executions else 0.0,
        execution_infer_us=exec_ns / exec_count / 1000.0 if exec_count else 0.0,
        batch_histogram=dict(sorted(histogram.items())),
        cache_hits=s1["cache_hit"][0] - s0["cache_hit"][0],
    )
