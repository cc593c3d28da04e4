"""Soak: 64 requests kept outstanding for 60 s against the generated model.py (reference MLP,
dynamic batching on), counting failed requests. Target: zero failures.
Run: python benchmarks/soak.py [--seconds 60] [--concurrency 64]
"""

from __future__ import annotations

import argparse

from _common import add_size_option, header, served_mlp

from workbench.measure import MeasureSettings, measure


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--protocol", default="grpc", choices=("grpc", "http"))
    add_size_option(parser, "medium")
    args = parser.parse_args()
    header(f"soak: concurrency {args.concurrency} for {args.seconds:g} s, {args.protocol}")
    with served_mlp(size=args.size, dynamic_batching=True, queue_delay_us=500) as (server, served):
        url = server.grpc_url if args.protocol == "grpc" else server.http_url
        x = served.model.example_inputs(1)[0].numpy()
        # three windows that together last the soak: always exactly three, stable or not
        settings = MeasureSettings(protocol=args.protocol, window_s=args.seconds / 3, stable_windows=3, max_windows=3,
                                   warmup_requests=2 * args.concurrency)
        result = measure(url, served.name, [x], settings, concurrency=args.concurrency,
                         progress=lambda done, total, message: print(f"  [{done}/{total}] {message}", flush=True))
    seconds = sum(w.duration_s for w in result.windows)
    print(f"measured {seconds:.1f} s: sent {result.sent}, succeeded {result.succeeded}, failed {result.failed} "
          f"(target 0)")
    print(f"throughput {result.throughput:.1f} infer/s, p50 {result.p50_us / 1000:.2f} ms, "
          f"p99 {result.p99_us / 1000:.2f} ms, server avg batch {result.server.avg_batch:.2f}, "
          f"client loop busy {result.client_busy * 100:.0f}%")
    for message, count in result.errors.items():
        print(f"  error x{count}: {message}")
    for warning in result.warnings:
        print(f"  warning: {warning}")


if __name__ == "__main__":
    main()
