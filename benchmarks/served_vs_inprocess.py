"""Served vs in-process: the reference MLP's TorchScript file ("large" by default, a batch-8 call of
a few milliseconds) called directly in this process, and the same file served on a local
tritonserver two ways: by the generated model.py (Python backend) and, where Triton's real PyTorch
(LibTorch) backend is present, by LibTorch itself (the floor of serving without the Python
backend's hop). Both are measured by the workbench's load generator at concurrency 1 over gRPC and
HTTP (both by default: their fixed costs differ), batch 1 and 8, with the same thread count. The
in-process side is timed again right before each served measurement and every ratio is within that
pair (a neighbour's load drifts over minutes; a pair sees about the same).

Targets (issue 15): served throughput through the generated model.py >= 0.95x in-process at batch
8, concurrency 1; served p50 at most 0.3 ms above in-process at batch 1 over HTTP. The LibTorch row
shows how much of a miss is the Python backend's own hop.

The LibTorch backend directory: --libtorch-backend DIR, else $WORKBENCH_LIBTORCH_BACKEND, else what
the shared tools/build_libtorch_backend.sh builds (cached: seconds) when $WORKBENCH_SHARED or
../shared holds it; otherwise that row is skipped, saying why.
Run: python benchmarks/served_vs_inprocess.py [--window 2] [--libtorch-backend DIR]
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from _common import CORES, add_size_option, header, in_process, ratio, served_mlp

from workbench.generate import pytorch_backend as ptb
from workbench.measure import MeasureSettings, measure
from workbench.server import TritonServer
from workbench.tutorial_backends import build_libtorch_backend

THROUGHPUT_TARGET = 0.95  # served / in-process at batch 8
P50_OVERHEAD_TARGET_MS = 0.3  # served - in-process at batch 1, HTTP
LIBTORCH_NAME = "mlp_libtorch"


def _libtorch_backend(given: str | None) -> tuple[Path | None, str]:
    """(backend directory, where it came from) or (None, why there is none)."""
    named = given or os.environ.get("WORKBENCH_LIBTORCH_BACKEND")
    if named:
        return Path(named), "given" if given else "$WORKBENCH_LIBTORCH_BACKEND"
    shared = Path(os.environ.get("WORKBENCH_SHARED") or Path(__file__).resolve().parents[1] / ".." / "shared")
    script = shared / "tools" / "build_libtorch_backend.sh"
    if not script.is_file():
        return None, f"no LibTorch backend: --libtorch-backend and $WORKBENCH_LIBTORCH_BACKEND unset, {script} absent"
    try:
        return build_libtorch_backend(script), str(script)
    except RuntimeError as err:
        return None, str(err).splitlines()[0] + " " + " ".join(str(err).splitlines()[-1:])


def _libtorch_model(repository: Path, served) -> None:
    """The same TorchScript file as a LibTorch model, one intra-op thread per served core."""
    import torch

    cfg = ptb.build_pytorch_config(LIBTORCH_NAME, served.model.spec, max_batch_size=8,
                                   parameters={"INTRA_OP_THREAD_COUNT": CORES, "INTER_OP_THREAD_COUNT": 1})
    ptb.write_torchscript_model(repository, cfg, torch.jit.load(str(served.artifact)).eval())


def _measure_row(label: str, server: TritonServer, artifact: Path, name: str, x, batch: int, protocols,
                 window: float, rows: dict) -> None:
    """Each protocol's served measurement, the in-process one just before it: one pair per row."""
    for protocol in protocols:
        here = in_process(artifact, x, seconds=3 * window)
        print(f"batch {batch}: in-process          {here['throughput']:9.1f} infer/s p50 {here['p50_us'] / 1000:6.3f} ms",
              flush=True)
        url = server.grpc_url if protocol == "grpc" else server.http_url
        result = measure(url, name, [x], MeasureSettings(protocol=protocol, window_s=window),
                         batch_size=batch, concurrency=1)
        rows[label, protocol, batch] = result, here
        s = result.server
        # client = p50 minus the server's request time: what the load generator and the network add
        server_part = (f"server request {s.request_us / 1000:.3f} ms, compute infer {s.compute_infer_us / 1000:.3f} ms, "
                       f"client+network ~{(result.p50_us - s.request_us) / 1000:.3f} ms") if s else "no server statistics"
        print(f"batch {batch}: {label:9s} {protocol:4s} {result.throughput:9.1f} infer/s p50 {result.p50_us / 1000:6.3f} ms "
              f"(stable {result.stable}, failed {result.failed}; {server_part}; load {os.getloadavg()[0]:.1f})", flush=True)
        for warning in result.warnings:
            print(f"  warning: {warning}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--window", type=float, default=2.0, help="measurement window, seconds")
    parser.add_argument("--protocol", default="both", choices=("grpc", "http", "both"))
    parser.add_argument("--libtorch-backend", default=None, help="backend directory with Triton's PyTorch backend")
    add_size_option(parser, "large")
    args = parser.parse_args()
    protocols = ("grpc", "http") if args.protocol == "both" else (args.protocol,)
    header(f"served vs in-process, {args.size} MLP, {CORES} thread(s), concurrency 1, {' and '.join(protocols)}")
    backend, source = _libtorch_backend(args.libtorch_backend)
    print(f"LibTorch backend: {backend} ({source})" if backend else f"LibTorch row skipped: {source}", flush=True)
    rows: dict = {}
    with served_mlp(size=args.size) as (server, served):
        inputs = {batch: served.model.example_inputs(batch)[0].numpy() for batch in (1, 8)}
        for batch, x in inputs.items():
            _measure_row("model.py", server, served.artifact, served.name, x, batch, protocols, args.window, rows)
        if backend is not None:
            server.stop()  # one server at a time: the two would share the same cores
            _libtorch_model(served.repository, served)
            with TritonServer(served.repository, pytorch_backend=backend) as libtorch:
                libtorch.load(LIBTORCH_NAME)
                for batch, x in inputs.items():
                    _measure_row("LibTorch", libtorch, served.artifact, LIBTORCH_NAME, x, batch, protocols,
                                 args.window, rows)
    labels = ("model.py", "LibTorch") if backend is not None else ("model.py",)
    verdicts = []
    for label in labels:
        for protocol in protocols:
            (served8, local8), (served1, local1) = rows[label, protocol, 8], rows[label, protocol, 1]
            thr = served8.throughput / local8["throughput"]
            over = (served1.p50_us - local1["p50_us"]) / 1000
            judged = label == "model.py"
            thr_met, p50_met = thr >= THROUGHPUT_TARGET, over <= P50_OVERHEAD_TARGET_MS
            if judged:
                verdicts.append(thr_met)
                if protocol == "http":
                    verdicts.append(p50_met)
            tag = (lambda met: f" -> {'met' if met else 'NOT met'}") if judged else (lambda met: " (reference)")
            print(f"{label} {protocol}: throughput served/in-process at batch 8: {thr:.3f}x "
                  f"(target >= {THROUGHPUT_TARGET}x){tag(thr_met)}")
            print(f"{label} {protocol}: throughput served/in-process at batch 1: "
                  f"{ratio(served1.throughput, local1['throughput'])}")
            p50_tag = tag(p50_met) if protocol == "http" else (" (judged over HTTP)" if judged else " (reference)")
            print(f"{label} {protocol}: p50 served - in-process at batch 1: {over:.3f} ms "
                  f"(target <= {P50_OVERHEAD_TARGET_MS} ms over HTTP){p50_tag}")
            print(f"{label} {protocol}: p50 served - in-process at batch 8: "
                  f"{(served8.p50_us - local8['p50_us']) / 1000:.3f} ms (the fixed cost of serving)")
    print(f"targets (issue 15, through the generated model.py): {'MET' if all(verdicts) else 'NOT MET'} "
          f"(load average {', '.join(f'{v:.1f}' for v in os.getloadavg())})")


if __name__ == "__main__":
    main()
