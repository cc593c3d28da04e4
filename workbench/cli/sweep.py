"""``workbench sweep``: the notebook's sweep, headless. It starts its own tritonserver on the model's
repository (or uses a running one with ``--url``), prints the table and the best configuration,
and writes the CSV/JSON run and the plots, so a long sweep can run in a terminal or CI and be
opened in the notebook afterwards. Ctrl-C stops at the next check and keeps what was measured.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import Any

from workbench.cli.llm_sweep import (
    INTERRUPTED,
    TENSOR_ONLY,
    WINDOW_FLAGS,
    add_llm_arguments,
    misplaced_flags,
    print_ray_notes,
    ray_refusal,
    run_llm_cli,
    sweep_exit,
)
from workbench.refusals import WorkbenchError
from workbench.tasks import Task, run_to_the_end

# measure.search.choice.search_names(), written out so that building the parser imports no pandas
# (tests/test_search.py keeps the two equal)
SEARCH_NAMES = ("grid", "bisection", "early-stop", "hill-climb", "halving", "adaptive")
# the searches only an LLM sweep takes (measure.llm.slo_effort.LLM_SEARCHES beyond the tensor sweep's)
LLM_ONLY_SEARCHES = ("capacity",)

_EXIT_BAD_INPUT = 2
_EXIT_CANCELLED = 130


def register(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "sweep",
        help="measure batch sizes x core allocations x concurrency on one tritonserver (a vLLM-backend "
        "model: max_num_seqs x tensor-parallel x instances x load, in tokens)",
        description="Load each core allocation of a generated model as a config override on one "
        "tritonserver, measure every batch size and concurrency, check outputs against the "
        "compiled model run in-process, and save the table, run record and plots.",
        allow_abbrev=False,
    )
    parser.add_argument("model_dir", help="generated model directory (its parent is the model repository)")
    grid = parser.add_argument_group("grid")
    grid.add_argument("--batch-sizes", default="1", metavar="N,N", help="batch size of each request (default 1)")
    grid.add_argument(
        "--allocations",
        default="1x1",
        metavar="IxC,...",
        help="instances x cores per instance, e.g. 1x1,2x1,1x2 (default 1x1)",
    )
    grid.add_argument(
        "--core-range",
        metavar="A:B",
        help="cores the allocations are packed into (default: the model's NEURON_CORE range)",
    )
    grid.add_argument("--concurrency", default="1", metavar="N,N", help="requests kept in flight (default 1)")
    grid.add_argument(
        "--max-batch-size",
        type=int,
        metavar="N",
        help="max_batch_size of every variant (default: the model's, raised to the largest batch)",
    )
    grid.add_argument(
        "--queue-delay-us", metavar="US,US", help="try dynamic batching with each of these queue delays (microseconds)"
    )
    grid.add_argument(
        "--preferred-batch-sizes", metavar="N,N", help="preferred batch sizes of the dynamic batching variants"
    )
    grid.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="KEY=V1,V2",
        help="also sweep a model parameter, e.g. NUM_THREADS_PER_CORE=1,2 (repeatable)",
    )
    grid.add_argument(
        "--compare",
        action="append",
        default=[],
        metavar="MODEL_DIR",
        help="also measure this model directory (the same model generated for another backend, e.g. "
        "'workbench generate --backend pytorch'; same repository, where a bare name is looked up) "
        "with the same grid; the runs go to OUT/<model name> and are joined, grouped by the "
        "backend that served them (repeatable)",
    )
    grid.add_argument(
        "--backend-param",
        action="append",
        default=[],
        metavar="SETTING=V1,V2",
        help="sweep a setting of Triton's PyTorch backend on each PyTorch-backend model: threads, "
        "interop_threads, inference_mode, optimized_execution (TorchScript), torch_compile "
        "(PyTorch 2), e.g. threads=1,2 or torch_compile=on,off (repeatable, or ';' between "
        "settings)",
    )
    grid.add_argument(
        "--search",
        default="grid",
        choices=SEARCH_NAMES + LLM_ONLY_SEARCHES,
        help="measure the whole grid (default) or only the points a search picks "
        "(bisection, hill-climb, halving and adaptive need --latency-budget-ms; adaptive "
        "leaves out the points a heavier point's throughput rules out and measures each other "
        "point until it is decided, with --engine workbench). A vLLM-backend model "
        "takes grid or adaptive, the same walk over each variant's loads: adaptive measures each point until "
        "decided against the best point so far under the SLO and the --slo-ttft-ms / --slo-itl-ms limits "
        "(3 windows at least, --max-windows at most, default 10), its rows' stopped column says why, and it "
        "leaves out the loads past one that broke the SLO and the variants whose heaviest load's output "
        "tokens/s ends below the best so far (the run record and report name them); capacity (LLM sweeps "
        "only) bisects each variant's loads for the highest one meeting the SLO, each level until decided",
    )
    grid.add_argument(
        "--min-gain",
        type=float,
        metavar="PCT",
        help="early-stop/hill-climb: the throughput gain in percent that keeps a walk going (default 5/0)",
    )
    grid.add_argument(
        "--tries", type=int, metavar="N", help="early-stop: steps without that gain before a walk ends (default 1)"
    )
    grid.add_argument(
        "--screen-window-ms",
        type=float,
        metavar="MS",
        help="halving/hill-climb: the short window every cell is screened with first (default 200)",
    )
    grid.add_argument(
        "--within",
        type=float,
        metavar="PCT",
        help="halving/hill-climb: a cell is dropped only when its screen's 95%% interval ends below the best "
        "screen's and it is more than this percentage below it (default 30)",
    )
    run = parser.add_argument_group("measurement")
    run.add_argument("--window-ms", type=float, default=1000.0, help="measurement window (default 1000 ms)")
    run.add_argument(
        "--max-windows", type=int, default=10, help="windows of one length before they get longer (default 10)"
    )
    run.add_argument(
        "--time-limit-s",
        type=float,
        default=30.0,
        metavar="S",
        help="seconds a point may measure until stable (default 30; 0 = stop after --max-windows)",
    )
    run.add_argument(
        "--min-latencies",
        type=int,
        default=2000,
        metavar="N",
        help="latencies a point pools at least, so p99 is not a guess (default 2000)",
    )
    run.add_argument(
        "--processes",
        type=int,
        metavar="N",
        help="sending processes of the built-in engine (default: as the load and cores need)",
    )
    run.add_argument("--stability", type=float, default=10.0, help="stability limit in percent (default 10)")
    run.add_argument(
        "--warmup", type=int, metavar="N", help="warm-up requests per point (default max(20, 2xconcurrency))"
    )
    run.add_argument("--protocol", choices=("grpc", "http"), default="grpc")
    run.add_argument(
        "--engine",
        choices=("auto", "workbench", "perf_analyzer"),
        default="auto",
        help="auto (default): Triton's perf_analyzer where it runs here, else the built-in load generator; or name one",
    )
    run.add_argument(
        "--perf-analyzer",
        metavar="CMD",
        help="perf_analyzer to run (path or wrapper; default $PERF_ANALYZER, then PATH)",
    )
    run.add_argument(
        "--stable-windows", type=int, default=3, help="windows that must agree to call a point stable (default 3)"
    )
    run.add_argument("--seed", type=int, default=0, help="seed of the request inputs (default 0)")
    run.add_argument(
        "--rtol",
        type=float,
        help="relative tolerance of the output check (default: the model's target's, "
        "1e-4 on the CPU, 1e-2 on NeuronCores; workbench.targets)",
    )
    run.add_argument(
        "--atol",
        type=float,
        help="absolute tolerance of the output check (default: the model's target's, "
        "1e-5 on the CPU, 1e-2 on NeuronCores)",
    )
    run.add_argument(
        "--url",
        metavar="HOST:PORT",
        action="append",
        default=[],
        help="use this running tritonserver (explicit model control) instead of starting one; "
        "several machines are measured with --ray",
    )
    run.add_argument(
        "--ray",
        nargs="?",
        const="",
        default=None,
        metavar="ADDRESS",
        help="measure each variant as a Ray task on a Ray cluster's nodes (its own tritonserver "
        "there, the model folder shipped by Ray; a vLLM-backend model's weights with it); ADDRESS: the "
        "cluster's (default: RAY_ADDRESS, else a Ray started here). Needs the ray extra",
    )
    run.add_argument(
        "--timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="bound on every model-control call to the server, loads included (default with --url 120; "
        "an LLM sweep's variant loads 300)",
    )
    out = parser.add_argument_group("output")
    out.add_argument(
        "--out", required=True, metavar="DIR", help="run folder (results.csv, results.json, run.json, plots/)"
    )
    out.add_argument("--resume", action="store_true", help="continue the run in --out: measured points are kept")
    out.add_argument(
        "--new-run",
        action="store_true",
        dest="new_run",
        help="start afresh in --out; the run there is moved to OUT.replaced-N beside it",
    )
    out.add_argument("--label", help="name of this run in comparisons (default: the folder name)")
    out.add_argument("--latency-budget-ms", type=float, metavar="MS", help="name the best configuration with p99 <= MS")
    out.add_argument("--min-throughput", type=float, metavar="N", help="name the best configuration with >= N infer/s")
    out.add_argument(
        "--instance-type",
        metavar="TYPE",
        help="also name the cheapest configuration per million inferences on this instance type",
    )
    out.add_argument(
        "--price-per-hour",
        type=float,
        metavar="USD",
        help="on-demand price of --instance-type "
        "(default: the workbench's price table, workbench.measure.store.cost.PRICES)",
    )
    out.add_argument(
        "--instance-cores",
        type=int,
        metavar="N",
        help="cores of --instance-type a variant's share is counted against (default: its NeuronCores)",
    )
    out.add_argument("--no-plots", action="store_true", help="do not write plots")
    add_llm_arguments(parser)
    parser.set_defaults(func=run_cli)
    parser.set_defaults(flag_defaults={dest: parser.get_default(dest) for dest in (*TENSOR_ONLY, *WINDOW_FLAGS)})
    return parser


def plan_from_args(args: argparse.Namespace):
    """The SweepPlan the flags describe (SweepError names a bad flag value)."""
    # start-up: a command's modules load when it runs, not when `workbench` builds its parser
    from workbench.measure.grid.plan import Batching, SweepError, SweepPlan

    batching: tuple = (None,)
    preferred = tuple(args.preferred_batch_sizes.split(",")) if args.preferred_batch_sizes else ()
    if args.queue_delay_us:
        try:
            delays = [int(v) for v in args.queue_delay_us.split(",")]
        except ValueError:
            raise SweepError(f"--queue-delay-us {args.queue_delay_us!r}: give whole microseconds, e.g. 0,100") from None
        batching = tuple(Batching(True, preferred, delay) for delay in delays)
    elif preferred:
        batching = (Batching(True, preferred),)
    parameters: dict[str, tuple[str, ...]] = {}
    for item in args.param:
        key, sep, values = item.partition("=")
        if not sep or not key.strip() or not values.strip():
            raise SweepError(f"--param {item!r}: write KEY=V1,V2")
        parameters[key.strip()] = tuple(v.strip() for v in values.split(","))
    return SweepPlan(
        batch_sizes=args.batch_sizes,
        allocations=args.allocations,
        concurrency=args.concurrency,
        core_range=args.core_range,
        batching=batching,
        parameters=parameters,
        max_batch_size=args.max_batch_size,
    )


def search_from_args(args: argparse.Namespace):
    """The search strategy the flags name (None: the full grid); SweepError names a bad value."""
    # start-up: a command's modules load when it runs, not when `workbench` builds its parser
    from workbench.measure.grid.plan import SweepError
    from workbench.measure.sweep.search.choice import SearchChoice

    if args.search in LLM_ONLY_SEARCHES:
        raise SweepError(
            f"--search {args.search} is for LLM sweeps (a vLLM-backend model); a tensor model takes "
            f"{', '.join(SEARCH_NAMES)}"
        )
    percent = lambda value: None if value is None else value / 100.0  # noqa: E731
    choice = SearchChoice(
        args.search,
        latency_budget_ms=args.latency_budget_ms if args.search != "grid" else None,
        min_gain=percent(args.min_gain),
        tries=args.tries,
        within=percent(args.within),
        screen_window_s=None if args.screen_window_ms is None else args.screen_window_ms / 1000.0,
    )
    return choice.strategy(strict=True)


def settings_from_args(args: argparse.Namespace):
    """The MeasureSettings the flags describe (MeasureError names a bad value)."""
    # start-up: a command's modules load when it runs, not when `workbench` builds its parser
    from workbench.measure.engine.measure_settings import MeasureSettings

    return MeasureSettings(
        engine=args.engine,
        perf_analyzer=args.perf_analyzer,
        protocol=args.protocol,
        window_s=args.window_ms / 1000.0,
        stability=args.stability / 100.0,
        stable_windows=args.stable_windows,
        max_windows=args.max_windows,
        time_limit_s=args.time_limit_s or None,
        min_latencies=args.min_latencies,
        processes=args.processes,
        warmup_requests=args.warmup,
        seed=args.seed,
        **_tolerances(args),
    )


def _tolerances(args: argparse.Namespace) -> dict[str, float]:
    """--rtol/--atol as given, else those of the target the model directory is generated for."""
    # start-up: a command's modules load when it runs, not when `workbench` builds its parser
    from workbench.generate.backends import model_target
    from workbench.targets import CPU_TOLERANCES, output_tolerances

    given = {"rtol": args.rtol, "atol": args.atol}
    if None not in given.values():
        return given
    model_dir = Path(args.model_dir)  # without a config.pbtxt the run is refused just after this
    target = output_tolerances(model_target(model_dir)) if (model_dir / "config.pbtxt").is_file() else CPU_TOLERANCES
    return {key: target[key] if value is None else value for key, value in given.items()}


class _Bar:
    """tqdm over the points of the sweep; the message shows the point in progress."""

    def __init__(self, total: int) -> None:
        from tqdm import tqdm

        self.bar = tqdm(total=total, unit="point", file=sys.stderr, dynamic_ncols=True)

    def __call__(self, done: int, total: int, message: str) -> None:
        self.bar.total = total
        self.bar.n = done
        self.bar.set_postfix_str(message[-70:], refresh=True)

    def close(self) -> None:
        self.bar.close()


def _command(args: argparse.Namespace) -> str | None:
    """The command line as typed (`workbench.cli.main` keeps it), for the run record."""
    argv = getattr(args, "argv", None)
    return shlex.join(["workbench", *argv]) if argv is not None else None


def _cost_line(frame, record, args: argparse.Namespace) -> str:
    """The cheapest point per million inferences under the budget, or why there is none (a type
    of other hardware than the run's is not priced: `price_for_run`)."""
    # start-up: a command's modules load when it runs, not when `workbench` builds its parser
    from workbench.measure.store.cost import CostError, best_by_cost, price_for_run

    prices = {args.instance_type: args.price_per_hour} if args.price_per_hour is not None else None
    try:
        price = price_for_run(args.instance_type, record, prices)
        best = best_by_cost(
            frame,
            args.instance_type,
            latency_budget_ms=args.latency_budget_ms,
            prices=prices,
            instance_cores=args.instance_cores,
        )
    except CostError as err:
        return f"cost: {err}"
    where = f"{args.instance_type} at {price.describe()}"
    if best is None:
        return f"cost on {where}: no usable point qualifies"
    return (
        f"Cheapest on {where}: {best['variant']}, batch {int(best['batch_size'])}, concurrency "
        f"{int(best['concurrency'])}: ${float(best['cost_per_million_usd']):.4f} per million inferences "
        f"({float(best['throughput']):.1f} infer/s, p99 {float(best['p99_ms']):.2f} ms, "
        f"${float(best['usd_per_hour']):.4f}/h for its share of the cores)"
    )


def run_cli(args: argparse.Namespace) -> int:
    """0 complete, 1 failed, 2 bad input (nothing measured), 130 interrupted (partial run kept)."""
    # start-up: a command's modules load when it runs, not when `workbench` builds its parser
    from workbench.measure.store.plots import plot_run
    from workbench.measure.sweep import run_sweep
    from workbench.measure.sweep.preflight import INPUT_ERRORS, preflight
    from workbench.server import RunningServer, ServerError, TritonServer
    from workbench.server.control import DEFAULT_REMOTE_TIMEOUT, timeout_problem

    model_dir = Path(args.model_dir)
    if _streams_tokens(model_dir):  # the backend switch: a token-streaming backend is swept in tokens
        return run_llm_cli(args, args.flag_defaults)
    misplaced = misplaced_flags(args, args.flag_defaults, llm=False)
    if misplaced:
        print(f"workbench sweep: error: {'; '.join(misplaced)}", file=sys.stderr)
        return _EXIT_BAD_INPUT
    checked = preflight(
        model_dir,
        plan=lambda: plan_from_args(args),
        settings=lambda: settings_from_args(args),
        search=lambda: search_from_args(args),
        backends=lambda: backend_sweep_from_args(args),
        out_dir=Path(args.out),
        resume=args.resume,
        new_run=args.new_run,
        urls=len(args.url),
    )
    remote = None
    if args.timeout is not None and (problem := timeout_problem(args.timeout)):
        checked.problems.append(problem)
    if checked.settings is not None and len(args.url) == 1:  # several: refused by preflight
        try:  # a bad URL, port or scheme: said before anything is asked of it
            remote = RunningServer(
                args.url[0], checked.settings.protocol, timeout=args.timeout or DEFAULT_REMOTE_TIMEOUT
            )
        except ValueError as err:
            checked.problems.append(str(err))
    plan, settings, search, backends = checked.plan, checked.settings, checked.search, checked.backends
    if not checked.ok or plan is None or settings is None or backends is None:  # each None: a problem says why
        print(f"workbench sweep: error: {'; '.join(checked.problems)}", file=sys.stderr)
        return _EXIT_BAD_INPUT
    if backends.active:
        return _run_backends(args, plan, settings, backends)
    if args.ray is not None:
        return _run_on_ray(args, plan, settings, search)
    try:
        if remote is not None:  # a closed port, a stalled peer or not Triton: one line, within the timeout
            remote.version  # noqa: B018 (asked once, bounded)
        server = remote if remote is not None else TritonServer(model_dir.resolve().parent).start()
    except Exception as err:  # no binary, port clash, start failure, bad URL: say so without a traceback
        print(f"workbench sweep: error: cannot start or reach tritonserver: {err}", file=sys.stderr)
        return 1
    bar = _Bar(plan.size)
    task = Task(
        run_sweep,
        plan,
        server,
        model_dir,
        out_dir=args.out,
        settings=settings,
        resume=args.resume,
        new_run=args.new_run,
        label=args.label,
        restore=remote is not None,
        search=search,
        command=_command(args),
        on_progress=bar,
    )
    try:
        run_to_the_end(task, INTERRUPTED)
    finally:
        bar.close()
        if remote is not None:
            remote.close()
        else:
            server.stop()
    if task.state == "failed":
        failure = task.error
        if isinstance(failure, INPUT_ERRORS):
            print(f"workbench sweep: error: {failure}", file=sys.stderr)
            return _EXIT_BAD_INPUT
        if isinstance(failure, ServerError):  # the server died under the sweep: say so, no traceback
            reason = str(failure).strip().splitlines()[0] if str(failure).strip() else type(failure).__name__
            print(
                f"workbench sweep: error: {reason}; the measured points are kept in {args.out} "
                "(continue with --resume)",
                file=sys.stderr,
            )
            tail = server.log_tail(15)
            if tail:
                print("tritonserver log (last lines):\n" + "\n".join(f"  {line}" for line in tail), file=sys.stderr)
            return 1
        if isinstance(failure, OSError):  # a full disk or a folder taken away: one line, the points kept so far
            print(
                f"workbench sweep: error: cannot write the run in {args.out}: {failure.strerror or failure} "
                f"({failure.filename or args.out}); the points written before are kept (continue with --resume)",
                file=sys.stderr,
            )
            return 1
        print(task.error_text, file=sys.stderr)
        return 1
    result = task.result
    print(result.engine_note)
    for warning in result.record.core_check or []:
        print(f"workbench sweep: warning: {warning}", file=sys.stderr)
    print(result.table().to_string(index=False, float_format=lambda v: f"{v:.2f}"))
    print()
    print(result.describe_best(latency_budget_ms=args.latency_budget_ms, min_throughput=args.min_throughput))
    if search is not None:
        from workbench.measure.sweep.search import answer

        log = result.record.search or {}
        print(
            f"search {search.name}: {log.get('measured_points')} of {log.get('space_points')} points measured; "
            f"stopped: {log.get('stopped')}"
        )
        bounded = result.record.bounded or []
        if bounded:
            print(f"{len(bounded)} point(s) left out by a bound (the report lists each with its reading)")
        print(answer(result.frame, search.latency_budget_ms).describe())
    if args.instance_type:
        print(_cost_line(result.frame, result.record, args))
    print(f"results: {result.path / 'results.csv'}, {result.path / 'results.json'}, {result.path / 'run.json'}")
    if not args.no_plots and len(result.frame):
        written = plot_run(result)
        print(f"plots: {result.path / 'plots'} ({', '.join(sorted(written))}; PNG and SVG)")
    return sweep_exit(result)


def _failure_exit(task: Task) -> int | None:
    """A failed task's exit code, its error said (a bad input in one line); None when it did not fail."""
    # start-up: a command's modules load when it runs, not when `workbench` builds its parser
    from workbench.measure.sweep.preflight import INPUT_ERRORS

    if task.state != "failed":
        return None
    if isinstance(task.error, INPUT_ERRORS):
        print(f"workbench sweep: error: {task.error}", file=sys.stderr)
        return _EXIT_BAD_INPUT
    print(task.error_text, file=sys.stderr)
    return 1


def _run_on_ray(args: argparse.Namespace, plan, settings, search) -> int:
    """``--ray``: the plan's variants as Ray tasks (measure/cluster); the same table and exit codes."""
    # start-up: a command's modules load when it runs, not when `workbench` builds its parser
    from workbench.measure.cluster import run_sweep_on_ray

    refused = ray_refusal(bool(args.url), search is not None, args.new_run)
    if refused:
        print(f"workbench sweep: error: {refused}", file=sys.stderr)
        return _EXIT_BAD_INPUT
    bar = _Bar(plan.size)
    task = Task(
        run_sweep_on_ray,
        plan,
        Path(args.model_dir),
        out_dir=args.out,
        settings=settings,
        address=args.ray or None,
        resume=args.resume,
        label=args.label,
        command=_command(args),
        on_progress=bar,
    )
    try:
        run_to_the_end(task, INTERRUPTED)
    finally:
        bar.close()
    failed = _failure_exit(task)
    if failed is not None:
        return failed
    result = task.result
    print(result.engine_note)
    print(result.table().to_string(index=False, float_format=lambda v: f"{v:.2f}"))
    print()
    print(result.describe_best(latency_budget_ms=args.latency_budget_ms, min_throughput=args.min_throughput))
    print_ray_notes(result.record)
    print(f"results: {result.path / 'results.csv'}, {result.path / 'results.json'}, {result.path / 'run.json'}")
    if not result.complete:
        print(f"workbench sweep: run {result.status}; continue it with --resume", file=sys.stderr)
        return _EXIT_CANCELLED if result.status == "cancelled" else 1
    return 0


def _streams_tokens(model_dir: Path) -> bool:
    """Whether ``model_dir``'s backend streams tokens (the backend switch's ``streams_tokens``);
    False where it cannot be read (the pre-run check then says why)."""
    # start-up: a command's modules load when it runs, not when `workbench` builds its parser
    from workbench.generate.backends import backend_of_config
    from workbench.generate.config import ConfigError, read_config

    if not (model_dir / "config.pbtxt").is_file():
        return False
    try:
        return backend_of_config(read_config(model_dir)).streams_tokens
    except (ConfigError, OSError, ValueError):
        return False


def backend_sweep_from_args(args: argparse.Namespace):
    """``--compare`` and ``--backend-param`` as one `measure.backends.BackendSweep` (the sweep
    panel makes the same object from its fields); SweepError names a bad value."""
    # start-up: a command's modules load when it runs, not when `workbench` builds its parser
    from workbench.generate.config import ConfigError
    from workbench.generate.pytorch_backend.sweep import parse_backend_grid
    from workbench.measure.grid.plan import SweepError
    from workbench.measure.sweep.compare_backends import BackendSweep

    try:
        return BackendSweep(compare=tuple(args.compare), grid=parse_backend_grid(args.backend_param))
    except (SweepError, ConfigError) as err:
        raise SweepError(f"--backend-param {err}") from None


def _run_backends(args: argparse.Namespace, plan, settings, backends) -> int:
    """``--compare`` / ``--backend-param``: each model directory swept on one local server, joined
    (the values already checked by `preflight`)."""
    # start-up: a command's modules load when it runs, not when `workbench` builds its parser
    from workbench.measure.store.plots import plot_run
    from workbench.measure.sweep.compare_backends import compare_backends
    from workbench.server import TritonServer

    dirs = backends.model_dirs(args.model_dir)
    try:
        server = TritonServer(dirs[0].resolve().parent).start()
    except (WorkbenchError, OSError, ValueError) as err:  # no tritonserver, a port taken, a refused setting
        print(f"workbench sweep: error: cannot start tritonserver: {err}", file=sys.stderr)
        return 1
    bar = _Bar(plan.size * len(dirs))
    task = Task(
        compare_backends,
        plan,
        server,
        dirs,
        args.out,
        backend_grid=backends.grid,
        settings=settings,
        resume=args.resume,
        label=args.label,
        command=_command(args),
        on_progress=bar,
    )
    try:
        run_to_the_end(task, INTERRUPTED)
    finally:
        bar.close()
        server.stop()
    failed = _failure_exit(task)
    if failed is not None:
        return failed
    comparison = task.result
    joined = comparison.result()
    print(comparison.table().to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    print()
    print(comparison.summary())
    out = Path(args.out)
    print(f"results: each model's run in {out}/<model>; joined: {out / 'results.csv'}, {out / 'results.json'}")
    if not args.no_plots and len(joined.frame):
        written = plot_run(joined, out / "plots")
        print(f"plots: {out / 'plots'} ({', '.join(sorted(written))}; PNG and SVG), grouped by backend")
    incomplete = [name for name, run in comparison.runs.items() if not run.complete]
    if incomplete or len(comparison.runs) < len(dirs):
        print(
            f"workbench sweep: not complete ({', '.join(incomplete) or 'stopped early'}); continue with --resume",
            file=sys.stderr,
        )
        return _EXIT_CANCELLED
    return 0
