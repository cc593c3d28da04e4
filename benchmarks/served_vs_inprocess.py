"""Served vs in-process: the reference MLP's TorchScript file ("large" by default, a batch-8 call of
a few milliseconds) called directly in this process, and
the same file served by the generated model.py on a local tritonserver, measured by the workbench's
load generator at concurrency 1 over gRPC and HTTP (both by default: their fixed costs differ), batch 1
and 8, with the same thread count. The in-process side is timed once per batch size, before the served
side, and every ratio is against it.

Targets: served throughput >= 0.9x in-process at batch 8; served p50 within 0.5 ms of in-process
at batch 1. Run: python benchmarks/served_vs_inprocess.py [--window 2]
"""

from __future__ import annotations

import argparse

from _common import CORES, add_size_option, header, in_process, ratio, served_mlp

from workbench.measure import MeasureSettings, measure


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--window", type=float, default=2.0, help="measurement window, seconds")
    parser.add_argument("--protocol", default="both", choices=("grpc", "http", "both"))
    add_size_option(parser, "large")
    args = parser.parse_args()
    protocols = ("grpc", "http") if args.protocol == "both" else (args.protocol,)
    header(f"served vs in-process, {args.size} MLP, {CORES} thread(s), concurrency 1, {' and '.join(protocols)}")
    local, served_rows = {}, {}
    with served_mlp(size=args.size) as (server, served):
        for batch in (1, 8):
            x = served.model.example_inputs(batch)[0].numpy()
            local[batch] = here = in_process(served.artifact, x, seconds=3 * args.window)
            print(f"batch {batch}: in-process {here['throughput']:9.1f} infer/s p50 {here['p50_us'] / 1000:6.3f} ms",
                  flush=True)
            for protocol in protocols:
                url = server.grpc_url if protocol == "grpc" else server.http_url
                result = measure(url, served.name, [x], MeasureSettings(protocol=protocol, window_s=args.window),
                                 batch_size=batch, concurrency=1)
                served_rows[protocol, batch] = result
                s = result.server
                # client = p50 minus the server's request time: what the load generator and the network add
                print(f"batch {batch}: served {protocol:4s} {result.throughput:9.1f} infer/s p50 "
                      f"{result.p50_us / 1000:6.3f} ms (stable {result.stable}, failed {result.failed}; server "
                      f"request {s.request_us / 1000:.3f} ms, compute infer {s.compute_infer_us / 1000:.3f} ms, "
                      f"client+network ~{(result.p50_us - s.request_us) / 1000:.3f} ms)", flush=True)
                for warning in result.warnings:
                    print(f"  warning: {warning}")
    for protocol in protocols:
        served8, served1 = served_rows[protocol, 8], served_rows[protocol, 1]
        print(f"{protocol}: throughput served/in-process at batch 8: "
              f"{ratio(served8.throughput, local[8]['throughput'])} (target >= 0.90x)")
        print(f"{protocol}: throughput served/in-process at batch 1: {ratio(served1.throughput, local[1]['throughput'])}")
        print(f"{protocol}: p50 served - in-process at batch 1: {(served1.p50_us - local[1]['p50_us']) / 1000:.3f} ms "
              "(target <= 0.5 ms)")
        print(f"{protocol}: p50 served - in-process at batch 8: {(served8.p50_us - local[8]['p50_us']) / 1000:.3f} ms "
              "(the fixed cost of serving; the throughput ratio is this against the model's compute)")


if __name__ == "__main__":
    main()
