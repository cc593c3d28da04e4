"""One point's throughput window by window for the first seconds after a fresh load, several times
(issue 46, item 1): does a reading taken in the first seconds after a load differ from a later one,
and how does the point's throughput move within a run? search_paths.py found readings of a few
seconds (the search's) apart from readings of 30 s (the grid's) in either direction.
Each load: the model unloaded (its stubs gone, the server quiet), then a one-point `run_sweep` whose
windows never end early (no stability test, no latency floor, ``--seconds`` of windows), its
per-window throughput and p50 read from the sweep's progress lines.
Target: none; it prints what the windows read. A window is "slow" below 2/3 of the run's median.
Run: python benchmarks/window_trace.py [--loads 3] [--seconds 20] [--window 0.5] [--allocation 1x2] [--batch-size 8] [--concurrency 1] [--quick]
"""

from __future__ import annotations

import argparse
import math
import re
import statistics
import tempfile
from dataclasses import dataclass
from pathlib import Path

from _common import NO_AUTO_COMPLETE, QUICK_SIZE, add_size_option, header, served_mlp
from search_paths import SweptPoint, fresh_instances

from workbench.measure.engine.measure_settings import MeasureSettings
from workbench.measure.sweep import run_sweep
from workbench.server import TritonServer

# the engine's per-window progress line: "window 3, ... (0.5 s): 352.0 infer/s, p50 22.10 ms"
_WINDOW = re.compile(r"window \d+[^(]*\(([\d.]+) s\): ([\d.]+) infer/s, p50 ([\d.]+) ms")
SLOW = 2 / 3  # a window below this share of its run's median throughput is slow


@dataclass(frozen=True)
class Window:
    seconds: float
    throughput: float
    p50_ms: float


def trace(
    server: TritonServer, model_dir: Path, point: SweptPoint, settings: MeasureSettings, out_dir: Path
) -> list[Window]:
    """The point measured once after a fresh load, every window as the engine reported it."""
    fresh_instances(server, model_dir.name)
    windows: list[Window] = []

    def progress(done: int, total: int, message: str) -> None:
        found = _WINDOW.search(message)
        if found:
            windows.append(Window(*(float(x) for x in found.groups())))

    run_sweep(point.plan(), server, model_dir, out_dir=out_dir, settings=settings, restore=False, progress=progress)
    return windows


def slow_spells(windows: list[Window]) -> list[int]:
    """The lengths (in windows) of the runs of consecutive slow windows."""
    median = statistics.median(w.throughput for w in windows)
    spells, current = [], 0
    for w in windows:
        if w.throughput < SLOW * median:
            current += 1
        elif current:
            spells.append(current)
            current = 0
    if current:
        spells.append(current)
    return spells


def lines(number: int, windows: list[Window]) -> list[str]:
    if not windows:
        return [f"load {number}: no window reported"]
    median = statistics.median(w.throughput for w in windows)
    spells = slow_spells(windows)
    head = min(len(windows), 4)
    first = statistics.mean(w.throughput for w in windows[:head])
    return [
        f"load {number}: {len(windows)} windows, median {median:.0f} infer/s, range "
        f"{min(w.throughput for w in windows):.0f}-{max(w.throughput for w in windows):.0f}; first {head} windows "
        f"{first / median:.2f}x the median; slow spells (windows): {spells or 'none'}",
        "  infer/s: " + " ".join(f"{w.throughput:.0f}" for w in windows),
        "  p50 ms:  " + " ".join(f"{w.p50_ms:.1f}" for w in windows),
    ]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loads", type=int, default=3, help="fresh loads, one trace each (default 3)")
    parser.add_argument("--seconds", type=float, default=20.0, help="seconds of windows per load (default 20)")
    parser.add_argument("--window", type=float, default=0.5, help="window length in seconds (default 0.5)")
    parser.add_argument("--allocation", default="1x2", help="instances x cores (default 1x2)")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="small MLP, 1 load of 2 s: shows it runs")
    add_size_option(parser, "large")
    args = parser.parse_args()
    if args.loads < 1 or args.seconds <= 0 or args.window <= 0:
        parser.error("--loads must be >= 1, --seconds and --window > 0")
    if args.quick:
        args.size, args.loads, args.seconds = QUICK_SIZE, 1, 2.0
    return args


def main() -> None:
    args = parse_args()
    point = SweptPoint(args.allocation, args.batch_size, args.concurrency)
    count = max(1, math.ceil(args.seconds / args.window))
    settings = MeasureSettings(
        engine="workbench",
        window_s=args.window,
        stable_windows=count,
        max_windows=count,
        time_limit_s=None,
        min_latencies=0,
    )
    header(
        f"window trace: {point.text()} of the {args.size} MLP, {args.loads} fresh load(s), {count} windows of "
        f"{args.window:g} s each"
    )
    with (
        served_mlp(size=args.size, dynamic_batching=True, server_args=NO_AUTO_COMPLETE) as (server, served),
        tempfile.TemporaryDirectory(prefix="window-trace-") as scratch,
    ):
        model_dir = served.repository / served.name
        for number in range(1, args.loads + 1):
            windows = trace(server, model_dir, point, settings, Path(scratch) / f"{number:02d}")
            print("\n".join(lines(number, windows)), flush=True)


if __name__ == "__main__":
    main()
