"""Load times of one PyTorch-backend model directory: Triton's real PyTorch backend (LibTorch for the
TorchScript layout, its Python runtime for the PyTorch 2 layout) against the Python-backend twin
the launcher serves where the real backend is missing; the first load and each reload (unload,
then load) timed from this process, alternating real and twin servers in one run.

Target: a TorchScript model reloads on the real backend in under 1 s (what the preview tells users
choosing a backend for a sweep, whose every variant is a reload). The other figures are reported,
not judged. Needs the real backend ($WORKBENCH_LIBTORCH_BACKEND or what build_libtorch_backend.sh
cached); without one it says so and measures nothing.
Run: python benchmarks/pytorch_load_times.py [--rounds 3] [--size medium]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from _common import CORES, add_size_option, build_mlp, header

from workbench.generate import GenerateSettings, render, write
from workbench.server import TritonServer
from workbench.tutorial.backend_comparison import built_libtorch_backend

TARGET_S = 1.0
LAYOUTS = {"mlp_ts": "TorchScript", "mlp_pt2": "PyTorch 2 (runtime model.py)"}


def _models(repository: Path, artifact: Path) -> None:
    common = dict(backend="pytorch", target="cpu", compiled_model=str(artifact), max_batch_size=8,
                  instance_group_kind="KIND_CPU")
    write(render(GenerateSettings(triton_model_dir=str(repository / "mlp_ts"), **common,
                                  parameters={"INTRA_OP_THREAD_COUNT": CORES})))
    # the archive under the PyTorch 2 runtime (torch.jit.load, no torch.compile): the runtime's own start-up
    write(render(GenerateSettings(triton_model_dir=str(repository / "mlp_pt2"), runtime="model.py", **common,
                                  parameters={"NUM_THREADS": CORES,
                                              "TORCH_COMPILE_OPTIONAL_PARAMETERS": '{"disable": true}'})))


def _time_loads(server: TritonServer, name: str, loads: int) -> list[float]:
    times = []
    for _ in range(loads):
        started = time.monotonic()
        server.load(name)
        times.append(time.monotonic() - started)
        server.unload(name)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="real/twin rounds, alternating (default 3)")
    parser.add_argument("--loads", type=int, default=3, help="loads per model and round (default 3)")
    add_size_option(parser, "medium")
    args = parser.parse_args()
    header(f"PyTorch-backend load times, real backend vs twin, {args.size} MLP, {CORES} thread(s)")
    backend_dir = built_libtorch_backend()
    if backend_dir is None:
        print("no real PyTorch backend here ($WORKBENCH_LIBTORCH_BACKEND unset, nothing built by "
              "build_libtorch_backend.sh): not measured; target not evaluated")
        return
    times: dict[tuple[str, str], list[list[float]]] = {}
    with tempfile.TemporaryDirectory(prefix="workbench-bench-") as scratch:
        served = build_mlp(Path(scratch), size=args.size, name="mlp_python")
        _models(served.repository, served.artifact)
        for round_ in range(args.rounds):
            for label, backend in (("real", backend_dir), ("twin", False)):
                with TritonServer(served.repository, pytorch_backend=backend) as server:
                    for name in LAYOUTS:
                        loads = _time_loads(server, name, args.loads)
                        times.setdefault((label, name), []).append(loads)
                        print(f"round {round_ + 1} {label:4s} {name}: {', '.join(f'{t:.2f}' for t in loads)} s "
                              f"({server.served_by(name) if server.running else 'server down'})", flush=True)
    for name, layout in LAYOUTS.items():
        for label in ("real", "twin"):
            rounds = times[label, name]
            first = [r[0] for r in rounds]  # each server's first load of the model (backend start-up included)
            reloads = [t for r in rounds for t in r[1:]]
            print(f"{layout:28s} {label}: first load {min(first):.2f}-{max(first):.2f} s, reload median "
                  f"{statistics.median(reloads):.2f} s (range {min(reloads):.2f}-{max(reloads):.2f} s, "
                  f"{len(reloads)} reloads)")
    worst = max(t for r in times["real", "mlp_ts"] for t in r[1:])
    print(f"target: TorchScript reload on the real backend < {TARGET_S:.1f} s: slowest {worst:.2f} s, "
          f"{'met' if worst < TARGET_S else 'NOT met'}")


if __name__ == "__main__":
    main()
