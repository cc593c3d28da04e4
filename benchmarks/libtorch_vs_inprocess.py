"""LibTorch vs model.py vs in-process: the reference MLP's TorchScript file ("medium" by default)
called directly in this process, served by the generated model.py (Python backend) and served by
Triton's real PyTorch (LibTorch) backend, on one local tritonserver, measured one after the other
in one run by the workbench's load generator at concurrency 1, batch 1 and 8, with the same thread
count everywhere (INTRA_OP_THREAD_COUNT for LibTorch, which the launcher turns into the server's
OMP_NUM_THREADS).

Target: LibTorch backend throughput at batch 8 >= 0.95x in-process. Needs the real backend
($WORKBENCH_LIBTORCH_BACKEND or what build_libtorch_backend.sh cached); without one it says so and
measures nothing (the twin is not LibTorch).
Run: python benchmarks/libtorch_vs_inprocess.py [--window 2] [--protocol http|grpc]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from _common import CORES, add_size_option, build_mlp, header, in_process, ratio

from workbench.generate import GenerateSettings, render, write
from workbench.measure import MeasureSettings, measure
from workbench.server import TritonServer
from workbench.tutorial.backend_comparison import built_libtorch_backend

TARGET = 0.95


def _libtorch_model(repository: Path, artifact: Path, name: str) -> None:
    write(render(GenerateSettings(triton_model_dir=str(repository / name), backend="pytorch", target="cpu",
                                  compiled_model=str(artifact), max_batch_size=8, instance_group_kind="KIND_CPU",
                                  parameters={"INTRA_OP_THREAD_COUNT": CORES})))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--window", type=float, default=2.0, help="measurement window, seconds")
    parser.add_argument("--protocol", default="http", choices=("grpc", "http"))
    add_size_option(parser, "medium")
    args = parser.parse_args()
    header(f"LibTorch backend vs model.py vs in-process, {args.size} MLP, {CORES} thread(s), concurrency 1, "
           f"{args.protocol}")
    backend_dir = built_libtorch_backend()
    if backend_dir is None:
        print("no real PyTorch backend here ($WORKBENCH_LIBTORCH_BACKEND unset, nothing built by "
              "build_libtorch_backend.sh): not measured; target not evaluated")
        return
    with tempfile.TemporaryDirectory(prefix="workbench-bench-") as scratch:
        served = build_mlp(Path(scratch), size=args.size, name="mlp_python")
        _libtorch_model(served.repository, served.artifact, "mlp_libtorch")
        results: dict = {}
        local = {}
        with TritonServer(served.repository, pytorch_backend=backend_dir) as server:
            for name in ("mlp_python", "mlp_libtorch"):
                server.load(name)
                print(server.served_by(name), flush=True)
            url = server.grpc_url if args.protocol == "grpc" else server.http_url
            for batch in (1, 8):
                x = served.model.example_inputs(batch)[0].numpy()
                local[batch] = here = in_process(served.artifact, x, seconds=3 * args.window, threads=CORES)
                print(f"batch {batch}: in-process   {here['throughput']:9.1f} infer/s p50 "
                      f"{here['p50_us'] / 1000:6.3f} ms", flush=True)
                for name in ("mlp_python", "mlp_libtorch"):
                    result = measure(url, name, [x], MeasureSettings(protocol=args.protocol, window_s=args.window),
                                     batch_size=batch, concurrency=1)
                    results[name, batch] = result
                    s = result.server
                    print(f"batch {batch}: {name:12s} {result.throughput:9.1f} infer/s p50 {result.p50_us / 1000:6.3f} ms "
                          f"(stable {result.stable}, failed {result.failed}; server: queue {s.queue_us / 1000:.3f} ms, "
                          f"compute input {s.compute_input_us / 1000:.3f}, infer {s.compute_infer_us / 1000:.3f}, "
                          f"output {s.compute_output_us / 1000:.3f} ms)", flush=True)
                    for warning in result.warnings:
                        print(f"  warning: {warning}")
    for batch in (1, 8):
        lib, py = results["mlp_libtorch", batch], results["mlp_python", batch]
        print(f"batch {batch}: throughput LibTorch/in-process {ratio(lib.throughput, local[batch]['throughput'])}, "
              f"model.py/in-process {ratio(py.throughput, local[batch]['throughput'])}, "
              f"LibTorch/model.py {ratio(lib.throughput, py.throughput)}; p50 LibTorch {lib.p50_us / 1000:.3f} ms, "
              f"model.py {py.p50_us / 1000:.3f} ms, in-process {local[batch]['p50_us'] / 1000:.3f} ms")
    achieved = results["mlp_libtorch", 8].throughput / local[8]["throughput"]
    print(f"target: LibTorch backend throughput at batch 8 >= {TARGET:.2f}x in-process: {achieved:.2f}x, "
          f"{'met' if achieved >= TARGET else 'NOT met'}")


if __name__ == "__main__":
    main()
