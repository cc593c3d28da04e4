"""One point through the adaptive search's path and the grid's, in pairs of both orders (issue 46).
Item 1 of issue 46: the search once read 1x2 b8 c1 of the large MLP at half the grid's
throughput; earlier pairs on add_sub at load average 11-46 found no difference in how the two paths
measure, only the machine's drift (benchmarks/README.md). This runs the pairs on the issue's point.
Each path is the public API as search_vs_grid.py calls it, on a space of that one point, in a fresh
run folder: the grid's path is `run_sweep` without a search (the point measured until stable), the
search's is `run_sweep(search=make_search("adaptive", latency_budget_ms=...))`, whose walk measures a
lone point once, by its effort rule (no incumbent: decided against the p99 budget, by default the
one search_vs_grid.py set in its last quiet full run). Should the search then re-measure its answer
(confirm.py: its p99 interval reaching past the budget), that is printed apart and not counted.
Before each pair the model is unloaded, so the first path's own load starts the instances; pair 1
measures the search's path first, pair 2 the grid's, and so on.
Target: the two paths' throughput intervals overlap in every pair, in both orders.
--quick: small MLP, short windows, to show it runs end to end; its figures say nothing.
--search-windows N: the search's reading fixed at N windows (60: as long as the grid's), to tell the
reading's length from the path.
Run: python benchmarks/search_paths.py [--pairs 6] [--allocation 1x2] [--batch-size 8] [--concurrency 1]
     [--search-windows N] [--quick]
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import tempfile
from dataclasses import dataclass
from pathlib import Path

from _common import (
    NO_AUTO_COMPLETE,
    QUICK_SIZE,
    SWEEP_CORE_RANGE,
    add_measuring_options,
    add_size_option,
    header,
    measuring_of,
    served_mlp,
)

from workbench.measure.engine.measure_settings import MeasureSettings
from workbench.measure.grid.rows import PointRow
from workbench.measure.store.folder import POINTS_FILE, read_points
from workbench.measure.sweep import SweepPlan, run_sweep
from workbench.measure.sweep.search import make_search
from workbench.measure.watch.settle import model_processes, wait_quiet
from workbench.server import TritonServer

SEARCH, GRID = "search", "grid"
# The search's p99 budget unless --budget-ms. search_vs_grid.py sets its own from the grid it
# measures first; these are the ones it set in its last quiet full run (README, run 4: 1x2 b8 c1
# then read p99 ~13 ms) and in its --quick smoke run.
BUDGET_MS, QUICK_BUDGET_MS = 31.6, 9.7
STUBS_GONE_S = 60.0  # how long to wait for an unloaded model's stubs to exit (and the server to go quiet)


@dataclass(frozen=True)
class SweptPoint:
    """The one point both paths measure."""

    allocation: str
    batch_size: int
    concurrency: int

    def plan(self) -> SweepPlan:
        return SweepPlan(
            batch_sizes=[self.batch_size],
            allocations=self.allocation,
            concurrency=[self.concurrency],
            core_range=SWEEP_CORE_RANGE,
        )

    def text(self) -> str:
        return f"{self.allocation} b{self.batch_size} c{self.concurrency}"


@dataclass(frozen=True)
class Setup:
    """What every measurement of the run shares."""

    server: TritonServer
    model_dir: Path  # <repository>/<model name>
    point: SweptPoint
    settings: MeasureSettings
    budget_ms: float
    scratch: Path
    search_windows: int | None = None  # the search's windows fixed at this many of the run's (None: its rule's)


@dataclass(frozen=True)
class Measurement:
    """One path's reading of the point (``position``: 1 measured first in its pair, 2 second): its
    row, the 1-minute load average just before its run, the variant's load time in that run, and
    the search's re-measurement of its answer (confirm.py) when it made one, kept apart: the walk's
    row is the search's reading."""

    path: str
    position: int
    row: PointRow
    load_average: float
    load_s: float
    remeasured: PointRow | None

    @property
    def failed(self) -> bool:
        return bool(self.row.error) or math.isnan(self.row.throughput)

    @property
    def low(self) -> float:
        return self.row.throughput if math.isnan(self.row.throughput_low) else self.row.throughput_low

    @property
    def high(self) -> float:
        return self.row.throughput if math.isnan(self.row.throughput_high) else self.row.throughput_high

    @property
    def measured_s(self) -> float:
        """The seconds its pooled windows lasted (windows lengthen past the first few)."""
        return self.row.requests * self.row.batch_size / self.row.throughput

    def lines(self) -> list[str]:
        row = self.row
        head = f"  {self.position}. {self.path:<6} load average {self.load_average:4.1f}, "
        head += f"variant load {self.load_s:.1f} s: "
        if self.failed:
            return [head + f"failed: {row.error}"]
        lines = [
            head + f"{row.throughput:.1f} infer/s [{self.low:.1f}, {self.high:.1f}], p99 {row.p99_ms:.2f} ms, "
            f"{row.windows:.0f} windows (the last {row.window_s:.2f} s) pooling {row.requests:.0f} requests "
            f"over {self.measured_s:.1f} s",
            f"       stopped: {row.stopped}",
        ]
        if self.remeasured is not None:
            again = self.remeasured
            lines.append(f"       the search then re-measured its answer (confirm.py, not counted): {again.summary()}")
        return lines


@dataclass(frozen=True)
class Pair:
    """Both paths' readings of the point, seconds apart, in the order measured."""

    number: int
    first: Measurement
    second: Measurement

    def by_path(self, path: str) -> Measurement:
        return self.first if self.first.path == path else self.second

    @property
    def measured(self) -> bool:
        return not (self.first.failed or self.second.failed)

    @property
    def overlap(self) -> bool:
        return self.first.low <= self.second.high and self.second.low <= self.first.high

    @property
    def ratio(self) -> float:
        """Throughput, search over grid."""
        return self.by_path(SEARCH).row.throughput / self.by_path(GRID).row.throughput

    def lower(self) -> Measurement:
        return min(self.first, self.second, key=lambda m: m.row.throughput)

    def line(self) -> str:
        if not self.measured:
            return f"  pair {self.number}: a measurement failed, not compared"
        verdict = "intervals overlap" if self.overlap else f"intervals apart, {self.lower().path} lower"
        return f"  pair {self.number} ({self.first.path} first): {verdict}; search/grid {self.ratio:.2f}x"


def fresh_instances(server: TritonServer, name: str) -> None:
    """Unload the model and wait, as a sweep waits after a load (settle.wait_quiet), for its stubs
    to exit and the server to go quiet, so the next load starts new instances on an idle server."""
    stubs = model_processes(server.pid, name)
    server.unload(name)
    quiet = wait_quiet(server.pid, leaving=stubs, timeout_s=STUBS_GONE_S)
    if quiet is not None and not quiet.settled:
        print(
            f"  ({quiet.left} stub(s) of {name} still running, or the server busy, {STUBS_GONE_S:g} s after the unload)"
        )


def measure(setup: Setup, path: str, position: int, run_number: int) -> Measurement:
    """The point through ``path`` in a one-point run of its own: the walk's (or the grid's)
    measurement is the first row the run wrote."""
    load_average = os.getloadavg()[0]
    # the adaptive search as search_vs_grid.py makes it; with --search-windows N, N windows of the run's length
    fixed = (
        {}
        if setup.search_windows is None
        else {"min_windows": setup.search_windows, "max_windows": setup.search_windows, "window_s": None}
    )
    search = make_search("adaptive", latency_budget_ms=setup.budget_ms, **fixed) if path == SEARCH else None
    out_dir = setup.scratch / f"{run_number:02d}-{path}"
    run = run_sweep(
        setup.point.plan(),
        setup.server,
        setup.model_dir,
        out_dir=out_dir,
        settings=setup.settings,
        search=search,
        restore=False,
    )
    rows = [PointRow.from_dict(row) for row in read_points(out_dir / POINTS_FILE)]
    times = next(iter((run.record.variant_times or {}).values()), {})
    return Measurement(
        path,
        position,
        rows[0],
        load_average,
        float(times.get("load_s", math.nan)),
        rows[1] if len(rows) > 1 else None,
    )


def measure_pair(setup: Setup, number: int) -> Pair:
    """Pair ``number``: odd ones measure the search's path first, even ones the grid's."""
    order = (SEARCH, GRID) if number % 2 else (GRID, SEARCH)
    fresh_instances(setup.server, setup.model_dir.name)
    print(f"\npair {number}: {order[0]} first", flush=True)
    readings = []
    for position, path in enumerate(order, 1):
        reading = measure(setup, path, position, 2 * number + position - 2)
        print("\n".join(reading.lines()), flush=True)
        readings.append(reading)
    pair = Pair(number, *readings)
    print(pair.line(), flush=True)
    return pair


def share(part: int, whole: int) -> str:
    return f"{part} of {whole}"


def summary(pairs: list[Pair]) -> list[str]:
    """The pairs against the target: how many overlap, which path and which position read lower
    where they do not, the median ratio (in all and per order), the load average."""
    compared = [p for p in pairs if p.measured]
    apart = [p for p in compared if not p.overlap]
    loads = [m.load_average for p in pairs for m in (p.first, p.second)]
    lines = [
        f"summary over {len(pairs)} pair(s), {len(compared)} with both measured:",
        f"  intervals overlap: {share(len(compared) - len(apart), len(compared))} "
        "(target: all of them, in both orders)",
    ]
    if apart:
        search_lower = sum(p.lower().path == SEARCH for p in apart)
        first_lower = sum(p.lower() is p.first for p in apart)
        lines.append(
            f"  of the {len(apart)} apart: the search's path read lower in {share(search_lower, len(apart))}, "
            f"the path measured first in {share(first_lower, len(apart))}"
        )
    if compared:
        ratios = [p.ratio for p in compared]
        lines.append(
            f"  throughput search/grid: median {statistics.median(ratios):.2f}x "
            f"(range {min(ratios):.2f}-{max(ratios):.2f}x)"
        )
    for first in (SEARCH, GRID):
        ordered = [p for p in compared if p.first.path == first]
        if ordered:
            lines.append(
                f"  {first} first: overlap in {share(sum(p.overlap for p in ordered), len(ordered))}, "
                f"median search/grid {statistics.median(p.ratio for p in ordered):.2f}x"
            )
    lines.append(f"  1-minute load average before each measurement: {min(loads):.1f}-{max(loads):.1f}")
    return lines


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=6, help="pairs of measurements (default 6)")
    parser.add_argument("--allocation", default="1x2", help="the point's allocation, instances x cores (default 1x2)")
    parser.add_argument("--batch-size", type=int, default=8, help="the point's batch size (default 8)")
    parser.add_argument("--concurrency", type=int, default=1, help="the point's concurrency (default 1)")
    parser.add_argument(
        "--budget-ms",
        type=float,
        help=f"the search's p99 budget (default {BUDGET_MS:g} ms, with --quick {QUICK_BUDGET_MS:g} ms)",
    )
    add_measuring_options(parser)
    parser.add_argument(
        "--search-windows",
        type=int,
        help="the search's reading fixed at this many windows of --window (60: as long as the grid's 30 s); "
        "default: as its effort rule decides",
    )
    parser.add_argument(
        "--auto-complete", action="store_true", help="leave Triton's config auto-complete on (as search_vs_grid.py)"
    )
    parser.add_argument(
        "--quick", action="store_true", help="smoke run: small MLP, 0.2 s windows, short limits (shows it works)"
    )
    add_size_option(parser, "large")
    args = parser.parse_args()
    if args.pairs < 1:
        parser.error("--pairs must be >= 1")
    if args.search_windows is not None and args.search_windows < 1:
        parser.error("--search-windows must be >= 1")
    if args.quick:
        args.size = QUICK_SIZE
    if args.budget_ms is None:
        args.budget_ms = QUICK_BUDGET_MS if args.quick else BUDGET_MS
    return args


def main() -> None:
    args = parse_args()
    point = SweptPoint(args.allocation, args.batch_size, args.concurrency)
    measuring = measuring_of(args)
    settings = measuring.settings()
    server_args = () if args.auto_complete else NO_AUTO_COMPLETE
    header(
        f"search path vs grid path{' (--quick smoke run)' if args.quick else ''}: {point.text()} of the "
        f"{args.size} MLP, {args.pairs} pair(s), window {measuring.window_s:g} s, p99 budget {args.budget_ms:g} ms"
        + (f", the search's reading fixed at {args.search_windows} windows" if args.search_windows else "")
    )
    print(f"tritonserver flags: {' '.join(server_args) or '(defaults)'}")
    with (
        served_mlp(size=args.size, dynamic_batching=True, server_args=server_args) as (server, served),
        tempfile.TemporaryDirectory(prefix="search-paths-") as scratch,
    ):
        model_dir = served.repository / served.name
        setup = Setup(server, model_dir, point, settings, args.budget_ms, Path(scratch), args.search_windows)
        pairs = [measure_pair(setup, number) for number in range(1, args.pairs + 1)]
    print("\n" + "\n".join(summary(pairs)))


if __name__ == "__main__":
    main()
