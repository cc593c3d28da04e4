"""``workbench doctor``: check this machine (devices, SDK packages, one tiny model served per framework)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from workbench.deploy.doctor import FRAMEWORKS, run_doctor


def register(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "doctor",
        help="check this machine: Neuron devices, SDK packages, compile+serve+check one tiny model",
        description="Check the Neuron devices and who holds them (neuron-ls), the SDK packages, then compile, "
        "serve and check one tiny model per installed framework on one free core against the CPU; "
        "prints a report to paste into a bug. On a machine without Neuron it runs the CPU checks.",
        allow_abbrev=False,
    )
    parser.add_argument("--workdir", type=Path, help="keep what the checks make here (default: a temporary folder)")
    parser.add_argument("--instance-type", help="e.g. inf2.xlarge (read from the machine when not given)")
    parser.add_argument(
        "--framework",
        action="append",
        choices=FRAMEWORKS,
        dest="frameworks",
        help="check only this framework (repeat for several; default all)",
    )
    parser.set_defaults(func=_run)
    return parser


def _run(args: argparse.Namespace) -> int:
    def show(done: int, total: int, message: str) -> None:
        print(f"[{done}/{total}] {message}", file=sys.stderr, flush=True)

    report = run_doctor(
        args.workdir, instance_type=args.instance_type, frameworks=tuple(args.frameworks or FRAMEWORKS), progress=show
    )
    print(report.text())
    return 0 if report.ok else 1
