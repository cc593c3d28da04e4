"""The workbench's load generator vs Triton's perf_analyzer on the same points (reference MLP,
generated model.py, gRPC or HTTP), same window, stability rule, warm-up and input values, one after the
other against the same server. Target: throughput and p50 within 10% of perf_analyzer's.

perf_analyzer comes from --perf-analyzer, $PERF_ANALYZER or PATH (on a machine whose glibc is too
old for the wheel, a wrapper such as perf_analyzer_here.sh works: pass it as the command).
Run: python benchmarks/loadgen_vs_perf_analyzer.py [--perf-analyzer CMD] [--window 2]
"""

from __future__ import annotations

import argparse
import time

from _common import add_size_option, header, ratio, served_mlp

from workbench.measure import MeasureSettings, measure
from workbench.measure.perf_analyzer import PerfAnalyzerError, run_perf_analyzer

POINTS = ((1, 1), (8, 1), (1, 4), (8, 4))  # (batch size, concurrency)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--perf-analyzer", default=None, help="perf_analyzer path or command prefix")
    parser.add_argument("--window", type=float, default=2.0, help="measurement window, seconds")
    parser.add_argument("--stability", type=float, default=0.10)
    parser.add_argument("--protocol", default="grpc", choices=("grpc", "http"))
    add_size_option(parser, "medium")
    args = parser.parse_args()
    # one settings value for both engines: the same windows, stability and warm-up
    settings = MeasureSettings(engine="perf_analyzer", perf_analyzer=args.perf_analyzer, protocol=args.protocol,
                               window_s=args.window, stability=args.stability, max_windows=10, warmup_requests=50)
    command = settings.engine_command()
    header(f"load generator vs perf_analyzer ({' '.join(command)}), MLP, {args.protocol}, window {args.window:g} s")
    with served_mlp(size=args.size) as (server, served):
        url = server.grpc_url if args.protocol == "grpc" else server.http_url
        for batch, concurrency in POINTS:
            x = served.model.example_inputs(batch)[0].numpy()
            cpu = time.process_time()
            ours = measure(url, served.name, [x], settings, batch_size=batch, concurrency=concurrency)
            cpu_us = (time.process_time() - cpu) / ours.sent * 1e6  # this process: loop + gRPC/HTTP threads
            try:
                (pa,) = run_perf_analyzer(url, served.name, settings, batch_size=batch, concurrency=concurrency,
                                          inputs={"INPUT__0": x[0]})
            except PerfAnalyzerError as err:
                print(f"batch {batch} concurrency {concurrency}: perf_analyzer failed: {str(err).splitlines()[-1]}")
                continue
            print(f"batch {batch} concurrency {concurrency}: "
                  f"throughput ours {ours.throughput:9.1f} pa {pa['throughput']:9.1f} -> {ratio(ours.throughput, pa['throughput'])}; "
                  f"p50 ours {ours.p50_us / 1000:6.3f} ms pa {pa['p50_us'] / 1000:6.3f} ms -> {ratio(ours.p50_us, pa['p50_us'])} "
                  f"(ours stable {ours.stable}, client CPU {cpu_us:.0f} us/request)", flush=True)
    print("target: both ratios within 0.90x..1.10x")


if __name__ == "__main__":
    main()
