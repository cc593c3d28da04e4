"""The generated model.py vs PyTriton serving the same model: the reference MLP's TorchScript file
("small" by default: the serving path, not the matmul, is what differs),
the same thread count, the same tritonserver binary (the one in the nvidia-pytriton wheel),
measured by the workbench's load generator over gRPC, one server after the other.

PyTriton runs the inference function in this Python process and proxies every request to it from
a python-backend model; the generated model.py runs the model inside the backend stub itself.
Target: >= 3x PyTriton's throughput at batch 1.
Run: python benchmarks/generated_vs_pytriton.py [--window 2]
"""

from __future__ import annotations

import argparse
import os

import numpy as np
import torch
from _common import CORES, MLP_SIZES, add_size_option, header, ratio, served_mlp

from workbench.measure import MeasureSettings, measure
from workbench.server import find_free_port, find_tritonserver

POINTS = ((1, 1), (1, 4), (8, 1))  # (batch size, concurrency)


def measure_points(url: str, model: str, inputs: dict[int, np.ndarray], window: float) -> dict:
    settings = MeasureSettings(window_s=window)
    return {(b, c): measure(url, model, [inputs[b]], settings, batch_size=b, concurrency=c) for b, c in POINTS}


def pytriton_points(artifact, size: dict, inputs: dict[int, np.ndarray], window: float) -> dict:
    from pytriton.decorators import batch
    from pytriton.model_config import ModelConfig, Tensor
    from pytriton.triton import Triton, TritonConfig

    # The python backend stub must embed this interpreter's libpython (PyTriton passes our
    # environment on): the same library path the workbench's own server gets.
    env = find_tritonserver().env()
    os.environ.update({key: env[key] for key in ("LD_LIBRARY_PATH", "PATH") if key in env})
    torch.set_num_threads(CORES)
    module = torch.jit.load(str(artifact)).eval()

    @batch
    def infer(INPUT__0):
        with torch.no_grad():
            return {"OUTPUT__0": module(torch.from_numpy(INPUT__0)).numpy()}

    config = TritonConfig(http_address="127.0.0.1", http_port=find_free_port(), grpc_address="127.0.0.1",
                          grpc_port=find_free_port(), metrics_address="127.0.0.1", metrics_port=find_free_port())
    with Triton(config=config) as triton:
        triton.bind(model_name="mlp_pytriton", infer_func=infer,
                    inputs=[Tensor(name="INPUT__0", dtype=np.float32, shape=(size["features"],))],
                    outputs=[Tensor(name="OUTPUT__0", dtype=np.float32, shape=(size["classes"],))],
                    config=ModelConfig(max_batch_size=8))
        triton.run()
        return measure_points(f"127.0.0.1:{config.grpc_port}", "mlp_pytriton", inputs, window)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--window", type=float, default=2.0, help="measurement window, seconds")
    add_size_option(parser, "small")
    args = parser.parse_args()
    header(f"generated model.py vs PyTriton, {args.size} MLP, {CORES} thread(s), gRPC")
    with served_mlp(size=args.size) as (server, served):
        inputs = {b: served.model.example_inputs(b)[0].numpy() for b, _ in POINTS}
        ours = measure_points(server.grpc_url, served.name, inputs, args.window)
        artifact = served.artifact
        theirs = pytriton_points(artifact, MLP_SIZES[args.size], inputs, args.window)
    for point in POINTS:
        a, b = ours[point], theirs[point]
        print(f"batch {point[0]} concurrency {point[1]}: generated {a.throughput:9.1f} infer/s "
              f"p50 {a.p50_us / 1000:6.3f} ms | PyTriton {b.throughput:9.1f} infer/s p50 {b.p50_us / 1000:6.3f} ms "
              f"-> throughput {ratio(a.throughput, b.throughput)} (failed {a.failed}/{b.failed}, "
              f"stable {a.stable}/{b.stable})", flush=True)
    print("target: >= 3.00x at batch 1")


if __name__ == "__main__":
    main()
