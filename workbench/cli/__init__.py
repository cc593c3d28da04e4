"""The `workbench` command. Each subcommand lives with the logic it runs:
a module listed in SUBCOMMANDS defines ``register(subparsers)`` which adds its parser and sets
``func`` to a callable taking the parsed args and returning an exit status."""

from __future__ import annotations

import argparse
import importlib
import sys

# name -> module that defines register(subparsers)
SUBCOMMANDS = {
    "quickstart": "workbench.cli.quickstart",
    "generate": "workbench.cli.generate",
    "serve": "workbench.cli.serve",
    "remote": "workbench.cli.remote",
    "sweep": "workbench.cli.sweep",
    "report": "workbench.cli.report",
    "deploy": "workbench.cli.deploy",
    "doctor": "workbench.cli.doctor",
    "cpu-compile": "workbench.cli.cpu_compile",
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole CLI, or only ``command``'s subparser: each module imports what its command needs
    (the quickstart loads torch), and `workbench generate` should not wait for that."""
    parser = argparse.ArgumentParser(
        prog="workbench",
        description="Compile, generate, serve and sweep Triton models for AWS Neuron and the CPU.",
        allow_abbrev=False,
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name, module in SUBCOMMANDS.items():
        if command in (None, name):
            importlib.import_module(module).register(sub)
    return parser


def _user_errors() -> tuple[type[BaseException], ...]:
    """Errors that mean "your input or your machine", reported in one line with exit status 2."""
    # start-up: a command's modules load when it runs, not when `workbench` builds its parser
    from workbench.compiler import ArtifactError, CompileError, MissingSDKError
    from workbench.coremap import CoreRangeError
    from workbench.deploy.kubernetes import ManifestError
    from workbench.deploy.recipe import RecipeError
    from workbench.generate import GenerateError
    from workbench.generate.repository import RepositoryError
    from workbench.server import ServerError, TritonNotFoundError
    from workbench.spec import SpecError

    return (
        ArtifactError,
        CompileError,
        MissingSDKError,
        CoreRangeError,
        GenerateError,
        RepositoryError,
        ServerError,
        TritonNotFoundError,
        SpecError,
        FileNotFoundError,
        FileExistsError,
        RecipeError,
        ManifestError,
    )


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    first = next((a for a in argv if not a.startswith("-")), None)
    parser = build_parser(first if first in SUBCOMMANDS else None)
    args = parser.parse_args(argv)
    args.argv = argv  # the command as typed, for a run record that says how to run it again
    try:
        return int(args.func(args) or 0)
    except _user_errors() as err:
        print(f"workbench {args.command}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"workbench {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
