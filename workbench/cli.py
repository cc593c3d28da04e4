"""The `workbench` command. Each subcommand lives with the logic it runs:
a module listed in SUBCOMMANDS defines ``register(subparsers)`` which adds its parser and sets
``func`` to a callable taking the parsed args and returning an exit status."""

from __future__ import annotations

import argparse
import importlib
import sys

# name -> module that defines register(subparsers)
SUBCOMMANDS = {
    "quickstart": "workbench.quickstart",
    "generate": "workbench.generate",
    "serve": "workbench.server.cli",
    "sweep": "workbench.measure.cli",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="workbench",
        description="Compile, generate, serve and sweep Triton models for AWS Neuron and the CPU.",
        allow_abbrev=False,
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name, module in SUBCOMMANDS.items():
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as err:
            if err.name is None or not module.startswith(err.name):
                raise
            continue  # subcommand not built yet
        mod.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
