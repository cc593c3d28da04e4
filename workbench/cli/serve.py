"""`workbench serve`: run a local tritonserver on a model repository until Ctrl-C.

Also prints the ``docker run`` for a Neuron host (``--docker CORES``) instead of serving here,
so the same command line covers both places a repository gets served.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path

from workbench.coremap import CoreRange
from workbench.deploy.docker import docker_run_command
from workbench.server.errors import ModelLoadError
from workbench.server.protocol import Server
from workbench.system import LNC_VALUES


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "serve",
        help="run tritonserver on a model repository (Ctrl-C stops it), or print its docker run",
        description="Start a local tritonserver with explicit model control on free (or given) ports, "
        "load the named models, print the URLs and each model's state, and serve until Ctrl-C.",
    )
    parser.add_argument("--model-repository", required=True, type=Path, metavar="DIR")
    parser.add_argument(
        "--load",
        action="append",
        default=[],
        metavar="NAME",
        help="model to load at start (repeat for several); a model that fails to load stops the command",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--http-port", type=int, help="default: a free port")
    parser.add_argument("--grpc-port", type=int, help="default: a free port")
    parser.add_argument("--metrics-port", type=int, help="default: a free port")
    parser.add_argument(
        "--tritonserver", metavar="PATH", help="tritonserver binary (default: $TRITONSERVER, PATH, the pytriton wheel)"
    )
    parser.add_argument("--log-verbose", type=int, default=0)
    parser.add_argument(
        "--model-config-name",
        metavar="NAME",
        help="serve each model with its configs/NAME.pbtxt (config.pbtxt where it has none)",
    )
    parser.add_argument("--show-log", action="store_true", help="echo the server log while serving")
    docker = parser.add_argument_group("docker preview for a Neuron host (prints, runs nothing)")
    docker.add_argument("--docker", metavar="CORES", help="print the docker run for NeuronCores a:b and exit")
    docker.add_argument("--instance-type", help="e.g. inf2.24xlarge (or a family: inf1, inf2, trn1, trn2; cpu)")
    docker.add_argument("--cores-per-device", type=int, help="instead of --instance-type")
    docker.add_argument("--lnc", type=int, choices=LNC_VALUES, help="Trn2 logical NeuronCore config (default 2)")
    docker.add_argument(
        "--framework",
        default="pytorch",
        choices=("pytorch", "tensorflow", "transformers_neuronx"),
        help="picks the host recipe's image (default pytorch)",
    )
    docker.add_argument("--image", help="image to run (default: the one `workbench deploy` writes the recipe for)")
    parser.set_defaults(func=run)


def _print_docker(args: argparse.Namespace) -> int:
    command = docker_run_command(
        args.model_repository,
        CoreRange.parse(args.docker),  # where the text enters: CoreRangeError in the parser's words
        instance_type=args.instance_type,
        cores_per_device=args.cores_per_device,
        lnc=args.lnc,
        framework=args.framework,
        image=args.image,
        http_port=args.http_port or 8000,
        grpc_port=args.grpc_port or 8001,
        metrics_port=args.metrics_port or 8002,
        load_models=args.load,
    )
    print(command.pretty)
    return 0


def print_index(server: Server) -> None:
    """The repository index of ``server`` (local or remote), one model a line."""
    rows = server.index()
    if not rows:
        print("  (no models in the repository)")
    width = max([len(r["name"]) for r in rows] + [5])
    for row in rows:
        reason = f"  {row['reason']}" if row["reason"] else ""
        print(f"  {row['name']:<{width}}  v{row['version'] or '-':<3} {row['state'] or 'not loaded'}{reason}")


def _interrupt(signum: int, frame: object) -> None:
    """SIGTERM (a process manager, `kill`) stops as cleanly as Ctrl-C."""
    raise KeyboardInterrupt


def run(args: argparse.Namespace) -> int:
    from workbench.server.process import TritonServer  # here, so `workbench serve --help` need not load it

    if args.docker:
        return _print_docker(args)
    server = TritonServer(
        args.model_repository,
        binary=args.tritonserver,
        host=args.host,
        http_port=args.http_port,
        grpc_port=args.grpc_port,
        metrics_port=args.metrics_port,
        log_verbose=args.log_verbose,
        model_config_name=args.model_config_name,
    )
    previous = signal.signal(signal.SIGTERM, _interrupt)
    original_int = signal.getsignal(signal.SIGINT)
    try:
        server.start()
        print(f"tritonserver {server.version} ({server.install.source}) pid {server.pid}")
        print(f"  HTTP     {server.http_url}")
        print(f"  gRPC     {server.grpc_url}")
        print(f"  metrics  {server.metrics_url}")
        print(f"  log      {server.log_path}")
        for name in args.load:
            try:
                server.load(name)
            except ModelLoadError as err:
                print(f"workbench serve: error: {err}", file=sys.stderr)
                return 1
        print("models:")
        print_index(server)
        # From here Ctrl-C and SIGTERM only set a flag. Raised as KeyboardInterrupt inside the loop's
        # Popen.poll(), between its lock's acquire and its try, the interrupt leaves that lock held,
        # and stopping the server then waits on it for ever (seen once in CI: 60 s, then killed).
        asked = threading.Event()
        signal.signal(signal.SIGINT, lambda _signum, _frame: asked.set())
        signal.signal(signal.SIGTERM, lambda _signum, _frame: asked.set())
        print("serving; Ctrl-C to stop", flush=True)
        stop_echo = server.follow_log_in_thread(print) if args.show_log else threading.Event()
        try:
            while server.running and not asked.wait(0.5):
                pass
        finally:
            stop_echo.set()
        if asked.is_set():
            print("\nstopping tritonserver...", flush=True)
            return 0
        print("tritonserver exited on its own. Last log lines:", file=sys.stderr)
        print("\n".join(server.log_tail(20)), file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\nstopping tritonserver...", flush=True)
        return 0
    finally:
        # A second Ctrl-C must not cut the shutdown short (stop() is bounded by its timeout).
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            server.stop(timeout=10)
        finally:
            signal.signal(signal.SIGINT, original_int)
            signal.signal(signal.SIGTERM, previous)
        print("stopped", flush=True)
