"""Record the per-window measurements that tests/test_effort.py replays: the zoo's add_sub served
on a local tritonserver (two allocations), a few points each measured for ``--windows`` windows of
``--window-ms``, every window's throughput, p99 and request count kept. Run once; the file is
test data (``tests/data/effort_windows.json``), not a result.

    PYTHONPATH=. python benchmarks/record_effort_windows.py --out tests/data/effort_windows.json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from workbench.measure.engine.measure_settings import MeasureSettings  # noqa: E402
from workbench.measure.grid.plan import SweepPlan  # noqa: E402
from workbench.measure.sweep import run_sweep  # noqa: E402
from workbench.measure.sweep.search.effort import WindowSummary, summaries  # noqa: E402
from workbench.server import TritonServer  # noqa: E402



def _recorded(window: WindowSummary) -> dict:
    """One window as tests/data/effort_windows.json keeps it."""
    return {"throughput": window.throughput, "p99_ms": window.latencies_ms["p99"], "requests": window.requests,
            "duration_s": window.duration_s}

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--windows", type=int, default=8)
    parser.add_argument("--window-ms", type=float, default=200)
    args = parser.parse_args()
    from conftest import _generate_cpu_model  # the tests' own model, so the data matches what they serve

    recorded: list[dict] = []

    class Recording:
        """A search that measures a fixed set of points, each for exactly ``--windows`` windows."""
        name, needs_budget, measures_by_window, reloads_to_confirm, latency_budget_ms = "record", False, True, False, None
        params = {}

        def to_dict(self):
            return {"name": self.name, "params": {}}

        def screening(self, settings):
            return None

        def run(self, space, measure, log, screen=None):
            for v in range(len(space.variants)):
                for b in range(len(space.batch_sizes)):
                    for c in range(len(space.concurrency)):
                        point = space.point(v, b, c)
                        kept: list = []

                        def until(windows, kept=kept):
                            if len(windows) < args.windows:
                                return None
                            kept.extend(summaries(windows))
                            return f"recorded {len(windows)} windows"
                        row = measure(point, until=until)
                        recorded.append({"variant": row.variant, "batch_size": row.batch_size,
                                         "concurrency": row.concurrency, "throughput": row.throughput,
                                         "throughput_low": row.throughput_low, "throughput_high": row.throughput_high,
                                         "p99_ms": row.p99_ms, "windows": [_recorded(w) for w in kept]})
            log.stop("recorded")

    with tempfile.TemporaryDirectory() as tmp:
        model_dir = _generate_cpu_model(Path(tmp), cpu_affinity=True)
        plan = SweepPlan(batch_sizes=[1, 8], allocations="1x1,2x1", concurrency=[1, 4], core_range="0:1")
        settings = MeasureSettings(engine="workbench", window_s=args.window_ms / 1000, warmup_requests=20,
                                   time_limit_s=None, max_windows=args.windows)
        with TritonServer(model_dir.parent) as server:
            server.load("add_sub")
            run_sweep(plan, server, model_dir, out_dir=Path(tmp) / "run", settings=settings, search=Recording())
    args.out.write_text(json.dumps({"model": "add_sub (tests/conftest.py)", "window_s": args.window_ms / 1000,
                                    "points": recorded}, indent=1) + "\n")
    print(f"{len(recorded)} points, {args.windows} windows each -> {args.out}")


if __name__ == "__main__":
    main()
