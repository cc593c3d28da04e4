"""``workbench quickstart``: trace an example model, generate, serve and check it on the CPU."""

from __future__ import annotations

import argparse
from typing import Any

from workbench import zoo
from workbench.quickstart import quickstart


def register(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "quickstart",
        help="trace an example model, generate, serve and check it on the CPU",
        description="Trace a zoo model on the CPU, generate its Triton model directory, start a local "
        "tritonserver, check served outputs against eager outputs, and say where everything went.",
        allow_abbrev=False,
    )
    parser.add_argument("--workdir", default="workbench-quickstart", help="where artifacts and the repository go")
    parser.add_argument("--model", default="add_sub", choices=zoo.names(), help="example model (default add_sub)")
    parser.add_argument("--max-batch-size", type=int, default=8)
    parser.add_argument("--force", action="store_true", help="replace an existing model directory (kept as a backup)")
    parser.set_defaults(func=_run)
    return parser


def _run(args: argparse.Namespace) -> int:
    def show(done: int, total: int, message: str) -> None:
        print(f"[{done}/{total}] {message}", flush=True)

    result = quickstart(
        args.workdir, args.model, max_batch_size=args.max_batch_size, overwrite=args.force, progress=show
    )
    print(result.summary())
    return 0 if result.check.ok else 1
