"""The workbench's built-in load generator vs Triton's perf_analyzer, side by side in one run: the
same server, model (reference MLP, generated model.py), points (batch 1 and 8, concurrency 1 and 4),
protocols (gRPC and HTTP), window, stability rule, warm-up and input values. Each point is measured
``--repeats`` times, the two engines alternating, and the ratios are taken within each pair (a
busy neighbour slows both sides of a pair alike); the median ratio is what the target is judged on.

Target (issue 15): throughput within 0.95x-1.05x and p50 within 10% of perf_analyzer's at every
point where perf_analyzer itself is stable. Points where perf_analyzer never stabilised are shown
and left out of the verdict, as the target says.

perf_analyzer comes from --perf-analyzer, $PERF_ANALYZER or PATH (on a machine whose glibc is too
old for the wheel, a wrapper such as perf_analyzer_here.sh works: pass it as the command).
Run: python benchmarks/loadgen_vs_perf_analyzer.py [--perf-analyzer CMD] [--window 1] [--repeats 3]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics

from _common import add_size_option, header, served_mlp

from workbench.measure import MeasureSettings, measure
from workbench.measure.perf_analyzer import PerfAnalyzerError, run_perf_analyzer

POINTS = ((1, 1), (8, 1), (1, 4), (8, 4))  # (batch size, concurrency)
THROUGHPUT_BAND = (0.95, 1.05)
P50_BAND = (0.90, 1.10)


def _pair(url: str, name: str, x, settings: MeasureSettings, batch: int, concurrency: int) -> dict | None:
    """One measurement by each engine, back to back; None when perf_analyzer failed outright."""
    ours = measure(url, name, [x], dataclasses.replace(settings, engine="workbench"), batch_size=batch,
                   concurrency=concurrency)
    try:
        (pa,) = run_perf_analyzer(url, name, settings, batch_size=batch, concurrency=concurrency,
                                  inputs={"INPUT__0": x[0]})
    except PerfAnalyzerError as err:
        print(f"    perf_analyzer failed: {str(err).splitlines()[-1]}", flush=True)
        return None
    return {"thr": ours.throughput / pa["throughput"], "p50": ours.p50_us / pa["p50_us"],
            "ours_thr": ours.throughput, "pa_thr": pa["throughput"], "ours_p50": ours.p50_us / 1000,
            "pa_p50": pa["p50_us"] / 1000, "ours_stable": ours.stable, "pa_stable": bool(pa.get("stable", True)),
            "cpu_us": ours.client_cpu_us, "delay_us": ours.send_delay_us, "requests": ours.requests,
            "pa_requests": pa.get("requests")}


def _within(value: float, band: tuple[float, float]) -> bool:
    return band[0] <= value <= band[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--perf-analyzer", default=None, help="perf_analyzer path or command prefix")
    parser.add_argument("--window", type=float, default=1.0, help="measurement window, seconds (default 1)")
    parser.add_argument("--repeats", type=int, default=3, help="pairs per point (default 3)")
    parser.add_argument("--time-limit", type=float, default=20.0, help="seconds each side may measure a point")
    parser.add_argument("--protocol", default="both", choices=("grpc", "http", "both"))
    add_size_option(parser, "medium")
    args = parser.parse_args()
    # one settings value for both engines: the same windows, stability, limits and warm-up
    settings = MeasureSettings(engine="perf_analyzer", perf_analyzer=args.perf_analyzer, window_s=args.window,
                               max_windows=10, warmup_requests=50, time_limit_s=args.time_limit, min_latencies=1000)
    command = settings.engine_command()
    protocols = ("grpc", "http") if args.protocol == "both" else (args.protocol,)
    header(f"built-in load generator vs perf_analyzer ({' '.join(command)}), MLP {args.size}, "
           f"window {args.window:g} s, {args.repeats} pair(s) per point")
    verdicts: list[bool] = []
    with served_mlp(size=args.size) as (server, served):
        for protocol in protocols:
            url = server.grpc_url if protocol == "grpc" else server.http_url
            each = dataclasses.replace(settings, protocol=protocol)
            for batch, concurrency in POINTS:
                x = served.model.example_inputs(batch)[0].numpy()
                print(f"{protocol} batch {batch} concurrency {concurrency}:", flush=True)
                pairs = []
                for _ in range(args.repeats):
                    pair = _pair(url, served.name, x, each, batch, concurrency)
                    if pair is None:
                        continue
                    pairs.append(pair)
                    print(f"    throughput ours {pair['ours_thr']:8.1f} pa {pair['pa_thr']:8.1f} -> {pair['thr']:.3f}x; "
                          f"p50 ours {pair['ours_p50']:.3f} ms pa {pair['pa_p50']:.3f} ms -> {pair['p50']:.3f}x; "
                          f"stable ours {pair['ours_stable']} pa {pair['pa_stable']}; "
                          f"client CPU {pair['cpu_us']:.0f} us/request, send delay {pair['delay_us']:.0f} us", flush=True)
                stable = [p for p in pairs if p["pa_stable"]]
                if not stable:
                    print("  -> perf_analyzer never stable here: left out of the verdict", flush=True)
                    continue
                thr = statistics.median(p["thr"] for p in stable)
                p50 = statistics.median(p["p50"] for p in stable)
                met = _within(thr, THROUGHPUT_BAND) and _within(p50, P50_BAND)
                verdicts.append(met)
                print(f"  -> median of {len(stable)} stable pair(s): throughput {thr:.3f}x "
                      f"(range {min(p['thr'] for p in stable):.3f}-{max(p['thr'] for p in stable):.3f}), "
                      f"p50 {p50:.3f}x (range {min(p['p50'] for p in stable):.3f}-{max(p['p50'] for p in stable):.3f}): "
                      f"{'met' if met else 'NOT met'}", flush=True)
    print(f"target: throughput {THROUGHPUT_BAND[0]}x-{THROUGHPUT_BAND[1]}x and p50 {P50_BAND[0]}x-{P50_BAND[1]}x "
          f"of perf_analyzer's where it is stable: met at {sum(verdicts)} of {len(verdicts)} point(s) -> "
          f"{'MET' if verdicts and all(verdicts) else 'NOT MET'}")


if __name__ == "__main__":
    main()
