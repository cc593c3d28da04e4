"""The measurement arithmetic on known inputs: nearest-rank percentiles, the stability rule and
the server-side breakdown from two statistics snapshots (hand-made dicts in both the gRPC JSON
spelling, with string counters and zero fields left out, and the HTTP spelling)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from workbench.measure.engine.stats import (
    Spread,
    StatsError,
    bootstrap_spread,
    is_stable,
    model_counters,
    percentile,
    server_breakdown,
    summarize_latencies,
)


# ---- percentiles -------------------------------------------------------------------------------


def test_percentile_is_nearest_rank_at_rounded_index():
    values = list(range(10, 110, 10))  # 10..100, n=10
    # index = floor(p/100 * 9 + 0.5)
    assert percentile(values, 50) == 60   # 4.5 -> 5 (round half up, as perf_analyzer's +0.5)
    assert percentile(values, 90) == 90   # 8.1 -> 8
    assert percentile(values, 95) == 100  # 8.55 -> 9
    assert percentile(values, 99) == 100  # 8.91 -> 9
    assert percentile(values, 0) == 10
    assert percentile(values, 100) == 100


def test_percentile_never_interpolates():
    assert percentile([1, 1000], 50) == 1000  # index 0.5 + 0.5 = 1
    assert percentile([1, 2, 1000], 50) == 2
    assert percentile([7], 99) == 7


def test_percentile_edges():
    assert math.isnan(percentile([], 50))
    with pytest.raises(ValueError, match="outside"):
        percentile([1, 2], 101)


def test_summary_sorts_and_adds_the_extra_percentile():
    rng = np.random.default_rng(3)
    values = rng.permutation(np.arange(1, 101, dtype=float))  # 1..100 shuffled
    summary = summarize_latencies(values, extra_percentile=75)
    assert summary["count"] == 100
    assert summary["avg"] == pytest.approx(50.5)
    assert summary["std"] == pytest.approx(np.std(np.arange(1, 101)))
    # n=100: index = floor(p*0.99 + 0.5)
    assert summary["p50"] == 51   # 49.5 -> 50 -> value 51
    assert summary["p90"] == 90   # 89.1 -> 89
    assert summary["p95"] == 95   # 94.05 -> 94
    assert summary["p99"] == 99   # 98.01 -> 98
    assert summary["p75"] == 75   # 74.25 -> 74
    assert set(summary) == {"count", "avg", "std", "p50", "p90", "p95", "p99", "p75"}


def test_summary_of_nothing_is_nan_not_an_error():
    summary = summarize_latencies([])
    assert summary["count"] == 0
    assert math.isnan(summary["avg"]) and math.isnan(summary["p99"])


# ---- stability ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "throughputs, latencies, stable",
    [
        ([100, 105, 110], [1.0, 1.05, 1.1], True),      # max/min exactly 1.1: inside the limit
        ([100, 105, 111], [1.0, 1.0, 1.0], False),      # throughput spread 11%
        ([100, 100, 100], [1.0, 1.0, 1.11], False),     # latency spread 11%
        ([50, 300, 100, 101, 102], [9, 1, 1, 1, 1], True),  # only the last three count
        ([100, 101, 102, 300], [1, 1, 1, 1], False),    # a late jump breaks it
        ([100, 100], [1, 1], False),                    # fewer than three windows
        ([0, 0, 0], [1, 1, 1], False),                  # zero throughput is never stable
        ([100, 100, 100], [1, 1, math.nan], False),     # a window without latencies
    ],
)
def test_stability_rule(throughputs, latencies, stable):
    assert is_stable(throughputs, latencies) is stable


def test_stability_threshold_and_window_count_are_parameters():
    assert is_stable([100, 115, 119], [1, 1, 1], stability=0.2)
    assert not is_stable([100, 115, 121], [1, 1, 1], stability=0.2)
    assert is_stable([100, 300, 101], [1, 1, 1], windows=1)
    assert not is_stable([100, 300, 101], [1, 1, 1], windows=2)


# ---- statistics snapshots ------------------------------------------------------------------------


def grpc_snapshot(success, fail, queue_ns, c_in_ns, c_inf_ns, c_out_ns, success_ns, inference_count,
                  execution_count, batches):
    """gRPC JSON spelling: uint64 as strings, zero-valued fields missing."""
    def pair(count, ns):
        return {"count": str(count), "ns": str(ns)} if count else {}
    return {"model_stats": [{
        "name": "m", "version": "1",
        "inference_count": str(inference_count), "execution_count": str(execution_count),
        "inference_stats": {
            "success": pair(success, success_ns), "fail": pair(fail, 0),
            "queue": pair(success, queue_ns), "compute_input": pair(success, c_in_ns),
            "compute_infer": pair(success, c_inf_ns), "compute_output": pair(success, c_out_ns),
            "cache_hit": {}, "cache_miss": {},
        },
        "batch_stats": [{"batch_size": str(b), "compute_infer": pair(n, ns)} for b, (n, ns) in batches.items()],
    }]}


def test_breakdown_per_request_times_batch_and_histogram():
    before = grpc_snapshot(10, 1, 10_000, 1_000, 50_000, 2_000, 80_000, 40, 10, {4: (10, 50_000)})
    # +100 requests of batch 1 (queue 3000 us in total, compute in 500, infer 20000, out 1000,
    # request 30000 us) that the dynamic batcher ran as 20 executions of 4 and 10 of 2.
    after = grpc_snapshot(110, 4, 10_000 + 3_000_000, 1_000 + 500_000, 50_000 + 20_000_000,
                          2_000 + 1_000_000, 80_000 + 30_000_000, 40 + 100, 10 + 30,
                          {4: (10 + 20, 50_000 + 8_000_000), 2: (10, 2_000_000)})
    s = server_breakdown(before, after, "m")
    assert s.requests == 100
    assert s.failures == 3
    assert s.inferences == 100
    assert s.executions == 30
    assert s.queue_us == pytest.approx(30.0)
    assert s.compute_input_us == pytest.approx(5.0)
    assert s.compute_infer_us == pytest.approx(200.0)
    assert s.compute_output_us == pytest.approx(10.0)
    assert s.request_us == pytest.approx(300.0)
    assert s.overhead_us == pytest.approx(300.0 - 30 - 5 - 200 - 10)
    assert s.avg_batch == pytest.approx(100 / 30)
    assert s.batch_histogram == {2: 10, 4: 20}
    assert s.execution_infer_us == pytest.approx((8_000_000 + 2_000_000) / 30 / 1000)
    assert s.throughput(2.0) == pytest.approx(50.0)


def test_overhead_is_floored_at_zero():
    # Window edges can make the accounted parts exceed the request time (in-flight requests).
    before = grpc_snapshot(0, 0, 0, 0, 0, 0, 0, 0, 0, {})
    after = grpc_snapshot(10, 0, 500_000, 10_000, 600_000, 10_000, 1_000_000, 10, 10, {1: (10, 600_000)})
    s = server_breakdown(before, after, "m")
    assert s.request_us == pytest.approx(100.0)
    assert s.queue_us + s.compute_infer_us > s.request_us
    assert s.overhead_us == 0.0


def test_no_traffic_gives_zeros_not_division_errors():
    snap = grpc_snapshot(5, 0, 1, 1, 1, 1, 1, 5, 5, {1: (5, 1)})
    s = server_breakdown(snap, snap, "m")
    assert (s.requests, s.inferences, s.executions, s.avg_batch, s.queue_us, s.overhead_us) == (0, 0, 0, 0.0, 0.0, 0.0)
    assert s.batch_histogram == {}


def test_http_spelling_and_version_sum():
    """HTTP returns ints and every field; several versions are summed unless one is chosen."""
    def entry(version, count, ns):
        pair = {"count": count, "ns": ns}
        return {"name": "m", "version": version, "inference_count": count * 2, "execution_count": count,
                "inference_stats": {k: dict(pair) for k in ("success", "queue", "compute_input", "compute_infer",
                                                               "compute_output")} | {"fail": {"count": 0, "ns": 0}},
                "batch_stats": [{"batch_size": 2, "compute_infer": dict(pair)}]}
    snap = {"model_stats": [entry("1", 10, 10_000), entry("2", 30, 90_000), {"name": "other", "version": "1"}]}
    both = model_counters(snap, "m")
    assert both["success"] == (40, 100_000)
    assert both["inference_count"] == 80
    assert both["batches"] == {2: (40, 100_000)}
    assert model_counters(snap, "m", "2")["success"] == (30, 90_000)
    empty = {"model_stats": [entry("1", 0, 0), entry("2", 0, 0)]}
    s = server_breakdown(empty, snap, "m")
    assert s.requests == 40 and s.avg_batch == 2.0 and s.compute_infer_us == pytest.approx(2.5)


def test_missing_model_and_counters_going_back_are_refused():
    snap = grpc_snapshot(5, 0, 1, 1, 1, 1, 1, 5, 5, {})
    with pytest.raises(StatsError, match="no statistics for nope"):
        server_breakdown(snap, snap, "nope")
    later = grpc_snapshot(9, 0, 1, 1, 1, 1, 1, 9, 9, {})
    with pytest.raises(StatsError, match="went backwards"):
        server_breakdown(later, snap, "m")


# ---- spread (block bootstrap) --------------------------------------------------------------------


def test_a_steady_measurement_has_no_spread():
    """100 requests spread evenly over 1 s, every latency 5: every resample is the same."""
    done = (np.arange(100) + 0.5) / 100
    spread = bootstrap_spread(done, np.full(100, 5.0), span_s=1.0, blocks=10, resamples=200)
    assert (spread.throughput_low, spread.throughput_high, spread.latency_low, spread.latency_high) == (100, 100, 5, 5)
    assert (spread.blocks, spread.resamples, spread.percentile, spread.confidence) == (10, 200, 99.0, 0.95)


def test_two_unlike_blocks_bound_the_interval_by_hand():
    """Block 0 (first second): 10 requests of latency 1; block 1: 30 of latency 3. A resample of two
    blocks is (0,0), (0,1), (1,0) or (1,1): 20, 40, 40 or 60 requests in 2 s, times batch 2 ->
    20, 40, 40, 60 inferences/s; p99 1, 3, 3, 3. Each extreme has probability 1/4, far above 2.5%."""
    done = np.concatenate([np.linspace(0.05, 0.95, 10), np.linspace(1.05, 1.95, 30)])
    latencies = np.concatenate([np.full(10, 1.0), np.full(30, 3.0)])
    spread = bootstrap_spread(done, latencies, span_s=2.0, batch_size=2, blocks=2, resamples=2000, seed=1)
    assert (spread.throughput_low, spread.throughput_high) == (20.0, 60.0)
    assert (spread.latency_low, spread.latency_high) == (1.0, 3.0)


def test_the_spread_is_deterministic_per_seed_and_holds_the_estimate():
    rng = np.random.default_rng(7)
    done = np.sort(rng.uniform(0, 3.0, 3000))
    latencies = rng.lognormal(0, 0.5, 3000)
    first = bootstrap_spread(done, latencies, span_s=3.0, seed=4)
    assert first == bootstrap_spread(done, latencies, span_s=3.0, seed=4)
    assert first.throughput_low <= 1000 <= first.throughput_high
    p99 = percentile(np.sort(latencies), 99)
    assert first.latency_low <= p99 <= first.latency_high
    assert first.latency_high > first.latency_low  # real noise: a real interval


def test_nothing_to_resample_is_nan_and_bad_arguments_are_refused():
    empty = bootstrap_spread([], [], span_s=1.0)
    assert math.isnan(empty.throughput_low) and math.isnan(empty.latency_high)
    assert math.isnan(bootstrap_spread([0.1], [1.0], span_s=0).throughput_low)
    assert math.isnan(Spread.unknown().latency_low)
    with pytest.raises(ValueError, match="one completion time per latency"):
        bootstrap_spread([0.1, 0.2], [1.0], span_s=1.0)
    with pytest.raises(ValueError, match="confidence"):
        bootstrap_spread([0.1], [1.0], span_s=1.0, confidence=1.0)
