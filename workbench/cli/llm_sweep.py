"""``workbench sweep``'s LLM mode: a model directory whose backend streams tokens (the backend switch's
``streams_tokens``: Triton's vLLM backend) is swept over max_num_seqs x tensor-parallel degree x
instances x concurrency (or request rate) and measured in tokens; ``--search adaptive`` walks each
variant's loads with the tensor sweeps' adaptive search (points a heavier load rules out left out,
each other point measured until decided: ``llm/slo_effort.py``). Its own flags are registered
here; the flags of the tensor sweep that mean nothing for it are refused, by name, before anything
starts, and so are these flags on a tensor model.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import Any

__all__ = [
    "add_llm_arguments",
    "LLM_FLAGS",
    "TENSOR_ONLY",
    "run_llm_cli",
    "misplaced_flags",
    "sweep_exit",
    "ray_refusal",
    "print_ray_notes",
]

_EXIT_BAD_INPUT = 2
_EXIT_CANCELLED = 130
# the window flags whose defaults are the tensor sweep's; left alone, an LLM sweep takes LLM_SETTINGS'
WINDOW_FLAGS = ("window_ms", "stable_windows", "max_windows", "time_limit_s")
# what `workbench sweep` says on Ctrl-C, in either mode
INTERRUPTED = "workbench sweep: interrupted; finishing the record (measured points are kept)"


def sweep_exit(result: Any) -> int:
    """`workbench sweep`'s exit for a finished run, in either mode: 0 complete; 1 failed (the
    server died, every point failed or none was measured: the reason said); 130 cancelled. A
    run that is not complete is continued with --resume, which measures what is missing."""
    if result.complete:
        return 0
    if result.status == "failed":
        why = (result.record.sessions[-1].get("failure") if result.record.sessions else None) or "it stopped"
        print(f"workbench sweep: run failed: {why}; continue it with --resume", file=sys.stderr)
        return 1
    print(f"workbench sweep: run {result.status}; continue it with --resume", file=sys.stderr)
    return _EXIT_CANCELLED


def ray_refusal(url: bool, search: bool, new_run: bool) -> str | None:
    """What ``--ray`` cannot take, in either mode, in one problem (None: nothing): each variant is a
    task on a node's own server, whose points are the whole grid's, into a new or resumed --out."""
    refused = [flag for flag, given in (("--url", url), ("--search", search), ("--new-run", new_run)) if given]
    if not refused:
        return None
    return f"--ray measures the whole grid into a new or resumed --out; drop {', '.join(refused)}"


def print_ray_notes(record: Any) -> None:
    """What a Ray run's record says beyond its table: the dashboard, the variants Ray started again
    after losing a node, and those that failed (on stderr)."""
    if record.get("dashboard"):
        print(f"Ray dashboard: {record['dashboard']}")
    for label, entry in record.get("retried", {}).items():
        print(f"retried: {label} started on {len(entry['started_on'])} nodes, measured on {entry['measured_on']}")
    for label, error in record.get("failed_variants", {}).items():
        print(f"workbench sweep: variant {label} failed: {error}", file=sys.stderr)


# dest -> flag of the LLM mode's own flags (default None: given or not)
LLM_FLAGS = {
    "max_num_seqs": "--max-num-seqs",
    "tensor_parallel": "--tensor-parallel",
    "instances": "--instances",
    "request_rate": "--request-rate",
    "input_tokens": "--input-tokens",
    "output_tokens": "--output-tokens",
    "slo_ttft_ms": "--slo-ttft-ms",
    "slo_itl_ms": "--slo-itl-ms",
    "min_goodput": "--min-goodput",
    "prompts": "--prompts",
    "metrics_url": "--metrics-url",
}
# dest -> flag of the tensor sweep's flags an LLM sweep has no use for
TENSOR_ONLY = {
    "batch_sizes": "--batch-sizes",
    "allocations": "--allocations",
    "max_batch_size": "--max-batch-size",
    "queue_delay_us": "--queue-delay-us",
    "preferred_batch_sizes": "--preferred-batch-sizes",
    "param": "--param",
    "compare": "--compare",
    "backend_param": "--backend-param",
    "min_gain": "--min-gain",
    "tries": "--tries",
    "screen_window_ms": "--screen-window-ms",
    "within": "--within",
    "perf_analyzer": "--perf-analyzer",
    "rtol": "--rtol",
    "atol": "--atol",
    "latency_budget_ms": "--latency-budget-ms",
    "min_throughput": "--min-throughput",
    "processes": "--processes",
    "min_latencies": "--min-latencies",
}


def add_llm_arguments(parser: argparse.ArgumentParser) -> None:
    """The LLM mode's flags (used when MODEL_DIR is served by Triton's vLLM backend)."""
    llm = parser.add_argument_group("LLM (a vLLM-backend model: measured in tokens)")
    llm.add_argument("--max-num-seqs", metavar="N,N", help="vLLM's max_num_seqs of each variant (default: the model's)")
    llm.add_argument(
        "--tensor-parallel",
        metavar="N,N",
        help="tensor-parallel degrees (default 1); on the CPU a degree above the NUMA nodes is generated, "
        "checked and reported as skipped",
    )
    llm.add_argument(
        "--instances",
        metavar="N,N",
        help="model instances of each variant (default 1); on Neuron "
        "each holds --tensor-parallel cores of --core-range",
    )
    llm.add_argument("--request-rate", metavar="R,R", help="requests per second instead of --concurrency levels")
    llm.add_argument("--input-tokens", type=int, metavar="N", help="prompt length in the model's tokens (default 32)")
    llm.add_argument("--output-tokens", type=int, metavar="N", help="output tokens per request (default 32)")
    llm.add_argument(
        "--slo-ttft-ms", type=float, metavar="MS", help="SLO: time to first token p99 at most MS (default 500)"
    )
    llm.add_argument(
        "--slo-itl-ms", type=float, metavar="MS", help="SLO: inter-token latency p99 at most MS (default 50)"
    )
    llm.add_argument(
        "--min-goodput", type=float, metavar="PCT", help="also require this share of requests meeting the SLO (percent)"
    )
    llm.add_argument("--prompts", type=int, metavar="N", help="distinct seeded prompts sent in turn (default 16)")
    llm.add_argument(
        "--metrics-url",
        metavar="URL",
        help="with --url: the server's Prometheus endpoint (http://HOST:8002/metrics), so its own "
        "output-token count is read beside the client's at every point",
    )


def misplaced_flags(args: argparse.Namespace, defaults: dict[str, Any], llm: bool) -> list[str]:
    """The flags given that the chosen mode does not read, one problem each."""
    if llm:
        return [
            f"{flag} is for tensor models' sweeps; {args.model_dir} is served by Triton's vLLM backend and is "
            "swept in tokens (leave it out)"
            for dest, flag in TENSOR_ONLY.items()
            if getattr(args, dest, None) != defaults.get(dest)
        ]
    return [
        f"{flag} is for vLLM-backend models (an LLM sweep); {args.model_dir} is not one (leave it out)"
        for dest, flag in LLM_FLAGS.items()
        if getattr(args, dest, None) is not None
    ]


def read_target(model_dir: Path) -> str | None:
    """The target the model directory is generated for (None where it cannot be read)."""
    from workbench.generate.backends import model_target
    from workbench.generate.config import ConfigError

    try:
        return model_target(model_dir)
    except (ConfigError, OSError, ValueError):
        return None


def _bounds(args: argparse.Namespace, values: dict[str, Any], vllm, problems: list[str]) -> None:
    """What this machine and the model cannot run (`llm.bounds`), in the flags' words, before a
    server starts; ``vllm``: the model's VllmSettings (None where unread)."""
    from workbench.measure.engine.streaming import Lengths
    from workbench.measure.grid.plan import SweepError
    from workbench.measure.llm.plan import parse_rates
    from workbench.measure.llm.sweep_limits import length_problems, load_problems, model_max_len

    rates = None
    if args.request_rate is not None:
        try:
            rates = parse_rates(args.request_rate)
        except SweepError as err:
            problems.append(f"--request-rate {err}")
            return
    inputs, outputs = Lengths(args.input_tokens or 32), Lengths(args.output_tokens or 32)
    problems += load_problems(
        input_tokens=inputs,
        output_tokens=outputs,
        prompts=args.prompts or 16,
        instances=values["instances"],
        concurrency=None if rates else values["concurrency"],
        request_rate=rates,
        what=LLM_FLAGS | {"concurrency": "--concurrency"},
    )
    if vllm is not None and not problems:
        problems += length_problems(inputs, outputs, model_max_len(vllm.max_model_len, vllm.model), LLM_FLAGS)


def _plan(args: argparse.Namespace, vllm, problems: list[str]):
    from workbench.measure.engine.streaming import Slo
    from workbench.measure.grid.plan import SweepError, parse_counts
    from workbench.measure.llm.plan import LlmPlan

    base_seqs = getattr(vllm, "max_num_seqs", None)

    values: dict[str, Any] = {}
    for dest, flag, default in (
        ("max_num_seqs", "--max-num-seqs", base_seqs or 4),
        ("tensor_parallel", "--tensor-parallel", 1),
        ("instances", "--instances", 1),
        ("concurrency", "--concurrency", 1),
    ):
        try:
            values[dest] = parse_counts(getattr(args, dest) or default, flag)
        except SweepError as err:
            problems.append(str(err))
    for dest, flag in (
        ("input_tokens", "--input-tokens"),
        ("output_tokens", "--output-tokens"),
        ("prompts", "--prompts"),
    ):
        value = getattr(args, dest)
        if value is not None and value < 1:
            problems.append(f"{flag} {value}: give a whole number >= 1")
    for dest, flag in (("slo_ttft_ms", "--slo-ttft-ms"), ("slo_itl_ms", "--slo-itl-ms")):
        value = getattr(args, dest)
        if value is not None and not value > 0:
            problems.append(f"{flag} {value}: give milliseconds above 0")
    if args.min_goodput is not None and not 0 < args.min_goodput <= 100:
        problems.append(f"--min-goodput {args.min_goodput}: give a percentage in (0, 100]")
    if args.request_rate is not None and args.concurrency not in (None, "1"):
        problems.append("give --concurrency or --request-rate, not both")
    if problems:
        return None
    _bounds(args, values, vllm, problems)
    if problems:
        return None
    try:
        return LlmPlan(
            max_num_seqs=values["max_num_seqs"],
            tensor_parallel=values["tensor_parallel"],
            instances=values["instances"],
            concurrency=values["concurrency"] if args.request_rate is None else None,
            request_rate=args.request_rate,
            input_tokens=args.input_tokens or 32,
            output_tokens=args.output_tokens or 32,
            slo=Slo(ttft_ms=args.slo_ttft_ms or 500.0, itl_ms=args.slo_itl_ms or 50.0),
            core_range=args.core_range,
            prompts=args.prompts or 16,
            seed=args.seed,
        )
    except SweepError as err:
        flag = "--request-rate" if "rate" in str(err) else "--core-range" if "core range" in str(err) else ""
        problems.append(f"{flag} {err}".strip())
        return None


def effort_rule(args: argparse.Namespace, defaults: dict[str, Any], problems: list[str]):
    """``--search adaptive``'s rule (None for the grid): 3 windows at least, ``--max-windows`` at
    most when given (else the rule's default, 10). A bad value is a problem named by its flag."""
    search = llm_search(args, defaults, problems)
    return search.effort() if search is not None else None


def llm_search(args: argparse.Namespace, defaults: dict[str, Any], problems: list[str]):
    """The `LlmSearch` ``--search`` names (with ``--max-windows`` as its cap when given); None with
    a problem named by its flag."""
    from workbench.measure.llm.slo_effort import LLM_SEARCHES, LlmSearch

    if args.search not in LLM_SEARCHES:
        problems.append(
            f"--search {args.search} is for tensor models' sweeps; an LLM sweep takes --search grid "
            "(every point until stable), adaptive (the points a heavier load's reading cannot rule out, "
            "each until decided against the best so far and the SLO) or capacity (per variant the highest "
            "load meeting the SLO, by bisection)"
        )
        return None
    if args.search == "grid":
        return LlmSearch()
    given = args.max_windows if args.max_windows != defaults.get("max_windows") else None
    try:
        return LlmSearch(args.search, **({} if given is None else {"max_windows": given}))
    except ValueError as err:
        problems.append(f"--max-windows {given}: with --search {args.search}, {err}")
        return None


def llm_settings(args: argparse.Namespace, defaults: dict[str, Any]):
    """How each point is measured: the window flags given, else the LLM sweep's own defaults
    (`LLM_SETTINGS`: a streamed request takes seconds), as the Python call and the panel measure,
    so runs made either way compare. A flag given at the tensor sweep's default value reads as left
    alone (argparse cannot tell them apart). MeasureError names a bad value."""
    from workbench.measure.engine.measure_settings import MeasureSettings
    from workbench.measure.llm.run import LLM_SETTINGS

    given = {dest: getattr(args, dest) for dest in WINDOW_FLAGS if getattr(args, dest) != defaults.get(dest)}
    window_s = given["window_ms"] / 1000.0 if "window_ms" in given else LLM_SETTINGS.window_s
    time_limit_s = (given["time_limit_s"] or None) if "time_limit_s" in given else LLM_SETTINGS.time_limit_s
    return MeasureSettings(
        engine="workbench",
        protocol=args.protocol,
        window_s=window_s,
        stability=args.stability / 100.0,
        stable_windows=given.get("stable_windows", LLM_SETTINGS.stable_windows),
        max_windows=given.get("max_windows", LLM_SETTINGS.max_windows),
        time_limit_s=time_limit_s,
        min_latencies=0,
        warmup_requests=args.warmup,
        seed=args.seed,
    )


def run_llm_cli(args: argparse.Namespace, defaults: dict[str, Any]) -> int:
    """0 complete, 1 failed, 2 bad input (nothing measured), 130 interrupted (partial run kept).
    ``defaults``: the parser's defaults, to tell the tensor flags given from those left alone."""
    # start-up: a command's modules load when it runs, not when `workbench` builds its parser
    from workbench.generate.backends import read_back
    from workbench.generate.config import ConfigError
    from workbench.measure.engine.measure_settings import MeasureError
    from workbench.measure.grid.plan import SweepError
    from workbench.measure.llm.run import LOAD_TIMEOUT_S, run_llm_sweep
    from workbench.measure.store.cost import CostError, price_for_run
    from workbench.measure.sweep.lock import RunFolderLock
    from workbench.measure.sweep.swept import check_out_dir, machine
    from workbench.server import RunningServer, TritonServer
    from workbench.server.control import DEFAULT_REMOTE_TIMEOUT, timeout_problem
    from workbench.system import cores_for_instance
    from workbench.tasks import Task, run_to_the_end

    model_dir = Path(args.model_dir)
    problems = misplaced_flags(args, defaults, llm=True)
    if args.core_range and read_target(model_dir) == "cpu":
        problems.append(
            f"--core-range {args.core_range} places NeuronCores; {model_dir} is for the CPU, where vLLM's "
            "CPU engine places its own threads (leave it out)"
        )
    if args.engine == "perf_analyzer":
        problems.append(
            "--engine perf_analyzer: an LLM sweep is measured by the streaming engine (perf_analyzer "
            "has no token mode here)"
        )
    if args.metrics_url and not args.url:
        problems.append("--metrics-url is for a server given with --url (a server started here is read already)")
    if len(args.url) > 1:
        problems.append(
            f"--url given {len(args.url)} times: an LLM sweep runs on one server, or on a Ray cluster's "
            "nodes with --ray; give one --url"
        )
    if args.ray is not None and (refused := ray_refusal(bool(args.url), args.search != "grid", args.new_run)):
        problems.append(refused)
    try:
        vllm = read_back(model_dir).settings.backend_settings
    except (ConfigError, OSError, ValueError) as err:
        problems.append(f"{model_dir}: {err}")
        vllm = None
    plan = _plan(args, vllm, problems)
    search = llm_search(args, defaults, problems)
    settings = None
    try:
        settings = llm_settings(args, defaults)
    except MeasureError as err:
        problems.append(str(err))
    if args.timeout is not None and timeout_problem(args.timeout):  # it bounds every variant's load
        problems.append(str(timeout_problem(args.timeout)))
    try:
        check_out_dir(Path(args.out), args.resume or args.new_run)
        RunFolderLock.check_free(Path(args.out))  # before a server starts, as the tensor sweep's preflight
    except SweepError as err:
        problems.append(f"--out {err}")
    prices = {args.instance_type: args.price_per_hour} if args.instance_type and args.price_per_hour else None
    if args.instance_type:
        try:  # priced only as the hardware it will be measured on (a CPU model's tokens: a CPU type)
            price_for_run(
                args.instance_type,
                {"target": read_target(model_dir), "url": args.url[0] if args.url else "", "machine": machine()},
                prices,
            )
        except CostError as err:
            problems.append(f"--instance-type {err}")
        if args.instance_cores is None and not cores_for_instance(args.instance_type):
            problems.append(
                f"--instance-cores: how many cores has {args.instance_type}? (a variant pays for its share of them)"
            )
    if problems or settings is None:  # settings None: its MeasureError is among the problems
        print(f"workbench sweep: error: {'; '.join(problems)}", file=sys.stderr)
        return _EXIT_BAD_INPUT
    argv = getattr(args, "argv", None)
    command = shlex.join(["workbench", *argv]) if argv is not None else None
    printer = lambda done, total, message: print(f"[{done}/{total}] {message}", file=sys.stderr)  # noqa: E731
    if args.ray is not None:
        from workbench.measure.cluster import run_sweep_on_ray

        task = Task(
            run_sweep_on_ray,
            plan,
            model_dir,
            out_dir=args.out,
            settings=settings,
            address=args.ray or None,
            resume=args.resume,
            label=args.label,
            load_timeout_s=args.timeout or LOAD_TIMEOUT_S,
            command=command,
            on_progress=printer,
        )
        run_to_the_end(task, INTERRUPTED)
        failed = _failure_exit(task)
        if failed is not None:
            return failed
        print_ray_notes(task.result.record)
        return _report(task.result, args, prices)
    try:
        server = (
            RunningServer(
                args.url[0],
                settings.protocol,
                metrics_url=args.metrics_url,
                timeout=args.timeout or DEFAULT_REMOTE_TIMEOUT,
            )
            if args.url
            else TritonServer(model_dir.resolve().parent).start()
        )
    except Exception as err:  # no binary, port clash, bad URL: one line
        print(f"workbench sweep: error: cannot start or reach tritonserver: {err}", file=sys.stderr)
        return 1
    task = Task(
        run_llm_sweep,
        plan,
        server,
        model_dir,
        out_dir=args.out,
        settings=settings,
        resume=args.resume,
        load_timeout_s=args.timeout or LOAD_TIMEOUT_S,  # --timeout bounds loads, as its help says
        restart_stuck=not args.url,  # its own server: a hung load is ended by a restart, and the sweep goes on
        new_run=args.new_run,
        label=args.label,
        restore=bool(args.url),
        search=search,
        command=command,
        on_progress=printer,
    )
    try:
        run_to_the_end(task, INTERRUPTED)
    finally:
        if args.url:
            server.close()
        else:
            server.stop()
    failed = _failure_exit(task)
    if failed is not None:
        return failed
    return _report(task.result, args, prices)


def _failure_exit(task: Any) -> int | None:
    """A failed task's exit code, its error said (a bad input in one line); None when it did not fail."""
    from workbench.measure.engine.measure_settings import MeasureError
    from workbench.measure.grid.plan import SweepError

    if task.state != "failed":
        return None
    if isinstance(task.error, (SweepError, MeasureError)):
        print(f"workbench sweep: error: {task.error}", file=sys.stderr)
        return _EXIT_BAD_INPUT
    print(task.error_text, file=sys.stderr)
    return 1


def _report(result, args: argparse.Namespace, prices) -> int:
    from workbench.measure.llm.answers import load_text

    min_goodput = args.min_goodput / 100.0 if args.min_goodput is not None else None
    table = result.table()
    shown = table.drop(columns=[c for c in ("stopped", "warnings") if c in table.columns])
    print(shown.to_string(index=False, float_format=lambda v: f"{v:.2f}"))
    for line in result.verdicts():  # the effort rule's verdicts: a sentence each, too long for a column
        print(line)
    for line in result.search_lines():  # what the search measured, left out, and on what reading
        print(line)
    print()
    for label, why in result.skipped.items():
        print(f"skipped {label}: {why}")
    if len(result.frame) and (result.frame["server_output_tokens"].astype(float) < 0).all():
        print(
            "the server's own token count was not read (give --metrics-url with --url; the vLLM backend counts "
            "with REPORT_CUSTOM_METRICS)",
            file=sys.stderr,
        )
    print(result.describe_best(min_goodput=min_goodput))
    front = result.pareto()
    if len(front):
        print(
            "Pareto front (output tokens/s per user / total): "
            + "; ".join(
                f"{r['variant']} at {load_text(r.get('concurrency'), r.get('request_rate'))}: "
                f"{r['tokens_per_user_per_s']:.1f} / {r['output_tokens_per_s']:.1f}"
                for _, r in front.iterrows()
            )
        )
    if args.instance_type:
        from workbench.measure.store.cost import CostError  # with the report, as the result's own

        try:
            print(
                result.describe_cheapest(
                    args.instance_type, min_goodput=min_goodput, prices=prices, instance_cores=args.instance_cores
                )
            )
        except CostError as err:  # the measured run stands; only its price cannot be worked out
            print(f"workbench sweep: no cost per million output tokens: {err}", file=sys.stderr)
    print(f"results: {result.path / 'results.csv'}, {result.path / 'results.json'}, {result.path / 'run.json'}")
    if not args.no_plots and len(result.frame):
        written = result.save_plots()
        print(f"plots: {result.path / 'plots'} ({', '.join(sorted(written))}; PNG and SVG)")
    return sweep_exit(result)
