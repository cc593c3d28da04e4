"""`workbench report RUN [OTHER]`: one self-contained HTML file of a saved run, or of OTHER against RUN."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from workbench.measure.store.results import ResultsError


def register(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "report",
        help="write one HTML file of a saved run (or two runs compared) that opens offline",
        description="Write one self-contained HTML file of a saved run: what was measured and how, the command "
        "that measures it again, the best configuration, every plot, the table and the unstable points. "
        "With a second run, the comparison of OTHER (B) against RUN (A).",
    )
    parser.add_argument(
        "run", metavar="RUN", help="run folder (run.json), results.json, or a backend comparison's folder"
    )
    parser.add_argument("other", metavar="OTHER", nargs="?", help="a second run: compare it (B) against RUN (A)")
    parser.add_argument(
        "--out", metavar="FILE", help="where to write (default RUN/report.html; with OTHER, OTHER/report-vs-<RUN>.html)"
    )
    parser.add_argument(
        "--latency-budget-ms",
        type=float,
        metavar="MS",
        help="name the best configuration with p99 <= MS (default: the run's own budget, if recorded)",
    )
    parser.set_defaults(func=_run)
    return parser


def _run(args: argparse.Namespace) -> int:
    # start-up: a command's modules load when it runs, not when `workbench` builds its parser
    from workbench.report.html import save_report

    try:
        path = save_report(args.run, args.other, args.out, args.latency_budget_ms)
    except ResultsError as err:
        print(f"workbench report: error: {err}", file=sys.stderr)
        return 2
    except OSError as err:  # --out a folder, a read-only place, a full disk: one line, nothing half-written
        where = args.out or err.filename or args.run
        print(f"workbench report: error: cannot write the report to {where}: {err.strerror or err}", file=sys.stderr)
        return 2
    print(f"wrote {path}")
    return 0
