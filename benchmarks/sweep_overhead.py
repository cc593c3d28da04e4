"""Sweep wall time vs the sum of its measurement windows: a 2 batch sizes x 2 core allocations x
2 concurrency sweep of the reference MLP on one server (variants loaded as config overrides).
Everything that is not a measurement window (warm-up, loading variants, output checks, writing
results) is overhead. Target: wall time <= 1.2x the windows.
Run: python benchmarks/sweep_overhead.py [--window 1]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from _common import add_size_option, header, served_mlp

import workbench.measure.sweep.point as point_module
from workbench.measure.engine.measure_settings import MeasureSettings
from workbench.measure.sweep import SweepPlan, run_sweep


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--window", type=float, default=1.0, help="measurement window, seconds")
    add_size_option(parser, "medium")
    args = parser.parse_args()
    # one instance on one core, then two instances of one core each (a second core when there is one)
    two = (os.cpu_count() or 1) >= 2
    allocations = ("1x1", "2x1") if two else ("1x1",)
    plan = SweepPlan(batch_sizes=(1, 8), allocations=allocations, concurrency=(1, 4),
                     core_range="0:1" if two else "0:0")
    header(f"sweep overhead: {plan.size} points, window {args.window:g} s")

    # Record every window the sweep measures, and where the rest of the time goes, by wrapping
    # the load generator and the server's load call the sweep makes.
    windows: list[float] = []
    spent = {"measure": 0.0, "load": 0.0}
    measure = point_module.measure

    def recording_measure(*a, **kw):
        start = time.perf_counter()
        result = measure(*a, **kw)
        spent["measure"] += time.perf_counter() - start
        windows.extend(w.duration_s for w in result.windows)
        return result

    point_module.measure = recording_measure
    with served_mlp(size=args.size) as (server, served), tempfile.TemporaryDirectory() as out:
        load = server.load

        def timed_load(*a, **kw):
            start = time.perf_counter()
            try:
                return load(*a, **kw)
            finally:
                spent["load"] += time.perf_counter() - start

        server.load = timed_load
        start = time.perf_counter()
        result = run_sweep(plan, server, served.repository / served.name, out_dir=Path(out) / "run",
                           settings=MeasureSettings(engine="workbench", window_s=args.window))
        wall = time.perf_counter() - start
    frame = result.frame
    print(frame[["allocation", "batch_size", "concurrency", "throughput", "p50_ms", "stable", "windows",
                 "outputs_ok"]].to_string(index=False))
    for _, row in frame[frame["error"].notna()].iterrows():
        print(f"  {row['allocation']} batch {row['batch_size']} concurrency {row['concurrency']}: {row['error']}")
    total = sum(windows)
    print(f"wall {wall:.1f} s, windows {total:.1f} s ({len(windows)} windows) -> {wall / total:.2f}x (target <= 1.20x)")
    print(f"  outside the windows: measure() set-up/warm-up/drain {spent['measure'] - total:.1f} s, "
          f"loading {len(allocations) + 1} configs {spent['load']:.1f} s, "
          f"the rest (references, checks, results files) {wall - spent['measure'] - spent['load']:.1f} s")


if __name__ == "__main__":
    main()
