"""Shared set-up for the benchmarks: a reference MLP traced, generated and served the way a user
would (workbench.compiler + workbench.generate + the shared model.py on a local tritonserver),
and the same TorchScript file timed in-process. Benchmarks print ratios measured side by side in
one run; they are not tests and assert nothing."""

from __future__ import annotations

import dataclasses
import os
import sys
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import torch

from _in_process import FreshProcess, bracket, in_process  # noqa: F401 (re-exported)

from workbench import zoo
from workbench.compiler import compile_model
from workbench.coremap import CoreRange
from workbench.generate import render, write
from workbench.measure.engine.measure_settings import MeasureSettings
from workbench.quickstart import quickstart_settings
from workbench.server import TritonServer

# Reference MLP sizes. Serving adds a fixed cost per request (client, network, scheduler, the
# python backend's shared-memory hop), so every served/in-process ratio depends on how long the
# model computes: "small" shows the fixed cost (where PyTriton's extra process hop shows most),
# "large" a model whose batch-8 call takes milliseconds. Each script says which it uses and
# prints the compute time next to its ratios.
MLP_SIZES = {
    "small": dict(features=16, hidden=32, classes=4),
    "medium": dict(features=512, hidden=2048, classes=256),
    "large": dict(features=2048, hidden=8192, classes=1000),
}
# Threads for the in-process run = cores of the served instance (one instance, one thread per core).
# Default 1: on a 2-core machine the client and the server need the other core, and two-thread
# OpenMP stalls whenever another process takes a core. WORKBENCH_BENCH_CORES overrides it.
CORES = int(os.environ.get("WORKBENCH_BENCH_CORES", 1))

# The sweeps of search_vs_grid.py and search_paths.py: their allocations' cores, the tritonserver
# flag they serve with unless asked otherwise (no auto-complete stub per load), and --quick's MLP.
SWEEP_CORE_RANGE = "0:1"
NO_AUTO_COMPLETE = ("--disable-auto-complete-config",)
QUICK_SIZE = "small"


@dataclass(frozen=True)
class SweepMeasuring:
    """How those sweeps measure a point: the built-in engine, windows of ``window_s`` (twice as
    long after every 6) until the last ones agree and hold ``min_latencies`` latencies, or
    ``time_limit_s`` seconds."""

    window_s: float = 0.5
    min_latencies: int = 2000
    time_limit_s: float = 30.0

    def settings(self) -> MeasureSettings:
        return MeasureSettings(engine="workbench", window_s=self.window_s, max_windows=6,
                               min_latencies=self.min_latencies, time_limit_s=self.time_limit_s)


QUICK_MEASURING = SweepMeasuring(window_s=0.2, min_latencies=200, time_limit_s=5.0)  # --quick: a smoke run


def add_measuring_options(parser) -> None:
    """--window, --min-latencies and --time-limit-s, SweepMeasuring's defaults (read by `measuring_of`)."""
    defaults = SweepMeasuring()
    parser.add_argument("--window", type=float, default=defaults.window_s,
                        help=f"measurement window, seconds (default {defaults.window_s:g})")
    parser.add_argument("--min-latencies", type=int, default=defaults.min_latencies,
                        help=f"latencies a grid point pools at least (default {defaults.min_latencies}, the "
                             "workbench's default)")
    parser.add_argument("--time-limit-s", type=float, default=defaults.time_limit_s,
                        help=f"seconds a grid point may take (default {defaults.time_limit_s:g})")


def measuring_of(args) -> SweepMeasuring:
    """How the options say to measure; QUICK_MEASURING with --quick."""
    return QUICK_MEASURING if args.quick else SweepMeasuring(args.window, args.min_latencies, args.time_limit_s)


@dataclass
class ServedModel:
    name: str
    repository: Path
    artifact: Path
    model: zoo.ZooModel


def build_mlp(workdir: Path, *, size: str = "medium", name: str = "mlp", **options) -> ServedModel:
    """Trace the zoo MLP on the CPU and generate its model directory (`generate_traced`)."""
    model = zoo.get("mlp", **MLP_SIZES[size])
    artifact = generate_traced(workdir, model.module, model.example_inputs(2), name, **options)
    return ServedModel(name, workdir / "repository", artifact, model)


def generate_traced(workdir: Path, module: torch.nn.Module, example: tuple, name: str, *, max_batch_size: int = 8,
                    dynamic_batching: bool = False, queue_delay_us: int | None = None, instances: int = 1,
                    pin_cpu: int | None = None) -> Path:
    """Trace ``module`` on the CPU into ``workdir/artifacts`` and generate its model directory in
    ``workdir/repository`` (one instance over CORES cores, so the served model gets the same thread
    count as the in-process run; ``pin_cpu``: those cores start there and execute is pinned to them,
    the generated model.py's CPU_AFFINITY); returns the TorchScript file."""
    artifact = compile_model(module, example, "cpu", out_dir=workdir / "artifacts", name=name, overwrite=True)
    settings = dataclasses.replace(
        quickstart_settings(artifact, workdir / "repository", name, max_batch_size=max_batch_size, cores=CORES),
        triton_model_instance_count=instances,
        enable_dynamic_batching=dynamic_batching,
        max_queue_delay_microseconds=queue_delay_us,
    )
    if pin_cpu is not None:
        settings = dataclasses.replace(settings, cpu_affinity=True,
                                       neuron_core_range=CoreRange(pin_cpu, pin_cpu + CORES - 1))
    write(render(settings))
    return Path(artifact.path)


@contextmanager
def served_mlp(*, server_args: tuple[str, ...] = (), **options) -> Iterator[tuple[TritonServer, ServedModel]]:
    """A started server (``server_args``: extra tritonserver flags) with the MLP loaded; stopped
    (and its files removed) on exit."""
    with tempfile.TemporaryDirectory(prefix="workbench-bench-") as scratch:
        served = build_mlp(Path(scratch), **options)
        server = TritonServer(served.repository, extra_args=server_args)
        with server:
            server.load(served.name)
            yield server, served


def outside_execute_us(result) -> float:
    """A served result's mean latency minus the server's compute infer: the path outside execute
    (client, HTTP/gRPC, Triton), which every backend pays."""
    return result.latency["avg"] - result.server.compute_infer_us


def add_size_option(parser, default: str) -> None:
    parser.add_argument("--size", default=default, choices=sorted(MLP_SIZES),
                        help=f"reference MLP size (default {default}): " +
                        ", ".join(f"{k} {v['features']}->{v['hidden']}->{v['classes']}" for k, v in MLP_SIZES.items()))


def header(title: str) -> None:
    print(f"\n== {title} ==", flush=True)
    print(f"python {sys.version.split()[0]}, torch {torch.__version__}, {os.cpu_count()} CPU(s), "
          f"load average {', '.join(f'{x:.1f}' for x in os.getloadavg())}", flush=True)


def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b else "n/a"
