"""Served vs in-process: the reference MLP's TorchScript file ("large" by default, a batch-8 call of
a few milliseconds) called directly in this process, and
the same file served by the generated model.py on a local tritonserver, measured by the workbench's
load generator at concurrency 1 (gRPC), batch 1 and 8, with the same thread count.

Targets: served throughput >= 0.9x in-process at batch 8; served p50 within 0.5 ms of in-process
at batch 1. Run: python benchmarks/served_vs_inprocess.py [--window 2]
"""

from __future__ import annotations

import argparse

from _common import CORES, add_size_option, header, in_process, ratio, served_mlp

from workbench.measure import measure


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--window", type=float, default=2.0, help="measurement window, seconds")
    parser.add_argument("--protocol", default="grpc", choices=("grpc", "http"))
    add_size_option(parser, "large")
    args = parser.parse_args()
    header(f"served vs in-process, {args.size} MLP, {CORES} thread(s), concurrency 1, {args.protocol}")
    rows = {}
    with served_mlp(size=args.size) as (server, served):
        url = server.grpc_url if args.protocol == "grpc" else server.http_url
        for batch in (1, 8):
            x = served.model.example_inputs(batch)[0].numpy()
            local = in_process(served.artifact, x, seconds=3 * args.window)
            result = measure(url, served.name, [x], protocol=args.protocol, batch_size=batch, concurrency=1,
                             window_s=args.window)
            rows[batch] = (local, result)
            s = result.server
            print(f"batch {batch}: in-process {local['throughput']:9.1f} infer/s p50 {local['p50_us'] / 1000:6.3f} ms | "
                  f"served {result.throughput:9.1f} infer/s p50 {result.p50_us / 1000:6.3f} ms "
                  f"(stable {result.stable}, failed {result.failed}; server request {s.request_us / 1000:.3f} ms, "
                  f"compute infer {s.compute_infer_us / 1000:.3f} ms)", flush=True)
            for warning in result.warnings:
                print(f"  warning: {warning}")
    local8, served8 = rows[8]
    local1, served1 = rows[1]
    print(f"throughput served/in-process at batch 8: {ratio(served8.throughput, local8['throughput'])} (target >= 0.90x)")
    print(f"throughput served/in-process at batch 1: {ratio(served1.throughput, local1['throughput'])}")
    print(f"p50 served - in-process at batch 1: {(served1.p50_us - local1['p50_us']) / 1000:.3f} ms (target <= 0.5 ms)")
    print(f"p50 served - in-process at batch 8: {(served8.p50_us - local8['p50_us']) / 1000:.3f} ms "
          "(the fixed cost of serving; the throughput ratio is this against the model's compute)")


if __name__ == "__main__":
    main()
