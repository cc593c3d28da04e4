"""``workbench remote URL ACTION``: a tritonserver someone else runs, through its URL only.

Actions: ``list`` (version and repository index), ``load NAME [--config JSON]`` (a config
override), ``unload NAME``, ``check MODEL_DIR`` (served outputs against the compiled model run
here) and ``push SOURCE DEST`` (a model repository copied to the folder the server reads).
Only the model named is ever loaded or unloaded.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # annotations only: the client library is imported when a command runs
    from workbench.server.remote import RunningServer

_EXIT_BAD_INPUT = 2


def add_connection_args(parser: argparse.ArgumentParser) -> None:
    """The flags that say how to reach a remote server (shared with ``workbench sweep --url``)."""
    group = parser.add_argument_group("connection (TLS and headers go to tritonclient)")
    group.add_argument(
        "--protocol",
        choices=("grpc", "http"),
        help="for a bare host:port (default http); a URL scheme (grpcs://, https://) says it itself",
    )
    group.add_argument("--ssl", action="store_true", help="use TLS (implied by grpcs:// and https://)")
    group.add_argument("--root-certificates", metavar="PEM", help="CA certificates to trust (TLS)")
    group.add_argument("--client-key", metavar="PEM", help="client private key (gRPC mutual TLS)")
    group.add_argument("--client-cert", metavar="PEM", help="client certificate chain (gRPC mutual TLS)")
    group.add_argument(
        "--insecure", action="store_true", help="HTTP over TLS without checking that the certificate names the host"
    )
    group.add_argument(
        "--header",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="header sent with every request, e.g. Authorization=Bearer... (repeatable)",
    )
    group.add_argument(
        "--timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="bound in seconds on every call to the server, loads included (default 120; raise it for "
        "a model that takes longer to load, e.g. on NeuronCores)",
    )


def server_from_args(url: str, args: argparse.Namespace) -> RunningServer:
    """The `RunningServer` the flags describe (ValueError/FileNotFoundError name a bad flag)."""
    # start-up: a command's modules load when it runs, not when `workbench` builds its parser
    from workbench.server.control import DEFAULT_REMOTE_TIMEOUT, ClientOptions
    from workbench.server.remote import RunningServer, headers_from_items

    timeout = DEFAULT_REMOTE_TIMEOUT if args.timeout is None else args.timeout
    options = ClientOptions(
        ssl=args.ssl or url.startswith(("grpcs://", "https://")),
        root_certificates=args.root_certificates,
        private_key=args.client_key,
        certificate_chain=args.client_cert,
        insecure=args.insecure,
        headers=headers_from_items(args.header),
    )
    return RunningServer(url, args.protocol, options=options, timeout=timeout)


def register(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "remote",
        help="list, load, unload, check or push models on a tritonserver someone else runs",
        description="Drive a running tritonserver (explicit model control) by its URL: host:port, "
        "http://, https://, grpc:// or grpcs://.",
        allow_abbrev=False,
    )
    parser.add_argument("url", help="the server, e.g. grpcs://10.0.0.5:8001 or 10.0.0.5:8000 --protocol http")
    add_connection_args(parser)
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    actions.add_parser("list", help="server version and every model's state")
    load = actions.add_parser("load", help="load (or reload) a model, optionally with a config override")
    load.add_argument("name")
    load.add_argument("--config", metavar="JSON|FILE", help="config override: JSON text or a .json file")
    unload = actions.add_parser("unload", help="unload a model")
    unload.add_argument("name")
    check = actions.add_parser("check", help="compare the served outputs with the compiled model run here")
    check.add_argument("model_dir", type=Path, help="the generated model directory (the server serves its name)")
    check.add_argument("--batch-sizes", default="1,2,3,4", metavar="N,N")
    push = actions.add_parser("push", help="copy a model (or a whole repository) to the folder the server reads")
    push.add_argument("source", type=Path, help="a model directory or a model repository")
    push.add_argument("dest", type=Path, help="the server's model repository folder (a mounted or shared path)")
    push.add_argument("--force", action="store_true", help="replace models there (the old ones are kept as backups)")
    parser.set_defaults(func=run)
    return parser


def _config_text(value: str | None) -> str | None:
    if value is None:
        return None
    path = Path(value)
    return path.read_text(encoding="utf-8") if not value.lstrip().startswith("{") and path.is_file() else value


def _print_index(server: RunningServer) -> None:
    # start-up: a command's modules load when it runs, not when `workbench` builds its parser
    from workbench.cli.serve import print_index

    print(f"tritonserver {server.version} at {server.protocol}://{server.url}")
    print_index(server)


def run(args: argparse.Namespace) -> int:
    # start-up: a command's modules load when it runs, not when `workbench` builds its parser
    from workbench.server.errors import ServerError

    if args.action == "push":
        return _push(args)
    try:
        server = server_from_args(args.url, args)
    except (ValueError, FileNotFoundError) as err:
        print(f"workbench remote: error: {err}", file=sys.stderr)
        return _EXIT_BAD_INPUT
    try:
        if args.action == "list":
            _print_index(server)
        elif args.action == "load":
            server.load(args.name, config=_config_text(args.config))
            print(f"loaded {args.name}")
        elif args.action == "unload":
            server.unload(args.name)
            print(f"unloaded {args.name}")
        elif args.action == "check":
            return _check(server, args)
        return 0
    except (ValueError, ServerError) as err:
        print(f"workbench remote: error: {err}", file=sys.stderr)
        return _EXIT_BAD_INPUT if isinstance(err, ValueError) else 1
    except Exception as err:  # unreachable server, refused call: one line, not a traceback
        print(f"workbench remote: error: {args.url}: {err}", file=sys.stderr)
        return 1
    finally:
        server.close()


def _check(server: RunningServer, args: argparse.Namespace) -> int:
    # start-up: a command's modules load when it runs, not when `workbench` builds its parser
    from workbench.generate.config import read_config, spec_from_config
    from workbench.served_outputs import CheckError, check_served, eager_reference

    try:
        config = read_config(args.model_dir)
        eager = eager_reference(args.model_dir)
        sizes = tuple(int(v) for v in args.batch_sizes.split(","))
    except (CheckError, ValueError, OSError) as err:
        print(f"workbench remote: error: {err}", file=sys.stderr)
        return _EXIT_BAD_INPUT
    name = config.name or args.model_dir.name
    result = check_served(
        server.url,
        name,
        spec_from_config(config),
        eager,
        batch_sizes=sizes,
        protocol=server.protocol,
        batch_dim=config.max_batch_size > 0,
        options=server.options,
        timeout=server.timeout,
    )
    print(result.summary())
    return 0 if result.ok else 1


def _push(args: argparse.Namespace) -> int:
    # start-up: a command's modules load when it runs, not when `workbench` builds its parser
    from workbench.generate.push import PushError, push_repository

    try:
        pushed = push_repository(args.source, args.dest, overwrite=args.force)
    except PushError as err:
        print(f"workbench remote: error: {err}", file=sys.stderr)
        return _EXIT_BAD_INPUT
    for result in pushed:
        note = f" (previous kept in {result.backup})" if result.backup else ""
        print(f"pushed {result.path}{note}")
    return 0
