"""What a Ray sweep costs per variant against a local one: the same plan (3 variants of the small
MLP, batch 1 and 8, concurrency 1) measured by `run_sweep` on one local tritonserver, then by
`run_sweep_on_ray` on a Ray cluster on this machine (tests/ray_cluster.py: a head and two one-CPU
worker nodes). Prints the wall times, and per variant the task's wait to start, the model folder
shipped (its bytes, packing it, unpacking it on the node), the node-local server's start and stop,
and the measuring itself. No target: the figures are for benchmarks/README.
Run: python benchmarks/ray_vs_local.py [--window 0.5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from ray_cluster import local_cluster  # noqa: E402 (sets Ray's address rule before ray is imported)

from _common import build_mlp, header  # noqa: E402

from workbench.measure.cluster import run_sweep_on_ray  # noqa: E402
from workbench.measure.engine.measure_settings import MeasureSettings  # noqa: E402
from workbench.measure.grid.plan import Batching, SweepPlan  # noqa: E402
from workbench.measure.sweep import run_sweep  # noqa: E402
from workbench.server import TritonServer  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--window", type=float, default=0.5, help="measurement window, seconds")
    args = parser.parse_args()
    settings = MeasureSettings(engine="workbench", window_s=args.window, max_windows=3, time_limit_s=None,
                               warmup_requests=20)
    plan = SweepPlan(batch_sizes=[1, 8], allocations="1x1", concurrency=[1],
                     batching=tuple(Batching(True, (), delay) for delay in (0, 100, 200)))
    header(f"Ray sweep vs local sweep: 3 variants x 2 points, {args.window:g} s windows "
           f"(load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)")
    with tempfile.TemporaryDirectory(prefix="workbench-bench-") as scratch:
        served = build_mlp(Path(scratch), size="small")
        model_dir = served.repository / served.name
        clock = time.perf_counter()
        with TritonServer(served.repository) as server:
            started = time.perf_counter() - clock
            local = run_sweep(plan, server, model_dir, out_dir=Path(scratch) / "local", settings=settings)
        local_wall = time.perf_counter() - clock
        print(f"local: {local_wall:.1f} s wall (its one server started in {started:.1f} s), status {local.status}")
        clock = time.perf_counter()
        with local_cluster([{"num_cpus": 1}] * 2):
            up = time.perf_counter() - clock
            clock = time.perf_counter()
            result = run_sweep_on_ray(plan, model_dir, out_dir=Path(scratch) / "ray", settings=settings)
            ray_wall = time.perf_counter() - clock
    print(f"ray:   {ray_wall:.1f} s wall on 2 nodes (the cluster started in {up:.1f} s, not counted), "
          f"status {result.status}")
    shipped = result.record["sessions"][-1]["shipped"]
    print(f"model folder shipped once: {shipped['bytes']} bytes tar.gz, packed in {shipped['pack_s'] * 1000:.0f} ms")
    times = result.record["task_times"]
    for label, t in times.items():
        print(f"  {label}: queued {t['queued_s']:.2f} s, imports {t['import_s']:.2f} s, unpacked {t['unpack_s'] * 1000:.0f} ms, server start "
              f"{t['server_start_s']:.2f} s, measured {t['measure_s']:.2f} s, server stop {t['server_stop_s']:.2f} s")
    first_start = min(t["queued_s"] for t in times.values())
    per_variant = statistics.median(t["unpack_s"] + t["server_start_s"] + t["server_stop_s"] for t in times.values())
    print(f"per variant on Ray: a task starts {first_start:.2f} s after submission (the first, on an idle node); "
          f"shipping + node-local server start/stop {per_variant:.2f} s (median), which a local sweep pays once "
          f"({started:.1f} s) and then reloads the model per variant")


if __name__ == "__main__":
    main()
