"""Served vs in-process, judged on pairs: the reference MLP's TorchScript file ("large"
by default: ~100 MB of weights read per call) called directly, and the same file served on a local
tritonserver by the generated model.py (Python backend) and, where Triton's real PyTorch (LibTorch)
backend is present, by LibTorch itself (serving without the Python backend's hop). Concurrency 1,
batch 8 and 1, gRPC and HTTP, the workbench's load generator, one thread everywhere.

Why pairs of fresh processes, each served point bracketed: the large MLP's call is memory-bound
and its time varies from one process to the next (where its weights land), and on this shared VM
it also drifts over seconds and differs between the two vCPUs (the same call 11 or 18 ms). Each of
``--pairs`` pairs reloads the served model (a new backend stub with its own weights) and starts a
new in-process child; each served point is bracketed by in-process timings in that child just
before and just after it (their ratio prints as the drift). Each pair gives a ratio, the verdict is
on the median pair, and the spread (min-max over pairs) is printed.

Is the stub a slower place to compute? Before the pairs, a probe model.py runs the forward back to
back inside a stub (20 calls per request, their median returned), alternated within seconds with
the in-process child, both unpinned and then both pinned to one CPU (``--cpu``, default the last).

Where the time goes, measured in the same pairs:
* the hop floor: a model.py that computes nothing (the same tensors; it answers with rows of an
  array made at load) on the same server: its p50 is what the path costs with no model at all
  (client, HTTP/gRPC, Triton, the Python backend's shared-memory hop). At batch 8 the ratio this
  floor alone allows is in-process / (in-process + floor p50).
* model.py's own code: the generated model.py serving a TorchScript that computes nothing (rows of
  a zero buffer): its p50 minus the floor's.
* at batch 8, the server's compute_infer (the stub's execute) minus the in-process call: how much
  slower the same forward runs inside the stub; p50 minus compute_infer: the path outside execute.
* the CPU waking: the in-process call paced like the stub's (asleep before each call as long as the
  served path outside execute), in the pair's child after its HTTP points. On this VM a call after
  an idle gap is slower than back to back; the part of the stub's extra that this explains is the
  machine's, not the path's, and is printed beside the judged ratio (which stays against back to
  back).
* the path outside execute at batch 8 (client, HTTP/gRPC, Triton; after a forward that streamed
  100 MB through the caches): every backend pays it, LibTorch too, so the ratio it alone allows,
  in-process / (in-process + it), is the floor of any server on this machine.

The machine waking up (``--rounds``, default 12; root only): after the pairs, each backend is
measured in short interleaved rounds (`_awake_rounds`: a one-window served point between two
in-process timings) with Linux's PM QoS CPU latency request held at 0 (idle CPUs poll instead of
halting into the hypervisor) and without it, model.py and the in-process child pinned to one CPU
(the pinned copy of the MLP, ``mlp_pinned``, unless ``--cpu`` pinned the MLP itself; LibTorch
unpinned). The difference between the two states is the wake-ups' share of the gap; each state
prints how many of its idle entries polled, so a hold that did not take reads as such. Reference
rows, not judged.

Huge pages: the generated model.py sets THP_MEM_ALLOC_ENABLE=1 (the weights in 2 MB pages) unless
the environment says otherwise; this script sets the same default in its own environment, so the
in-process child and the LibTorch server get what the stub gets.

Targets (issue 15): served throughput through the generated model.py >= 0.95x in-process at batch
8, concurrency 1; served p50 at most 0.3 ms above in-process at batch 1 over HTTP. The LibTorch
rows are the reference floor without the Python hop.

The LibTorch backend directory: --libtorch-backend DIR, else $WORKBENCH_LIBTORCH_BACKEND, else what
the shared tools/build_libtorch_backend.sh builds (cached: seconds) when $WORKBENCH_SHARED or
../shared holds it; otherwise that row is skipped, saying why.
--cpu N pins the pairs' in-process child and the served model's execute thread (the generated
model.py's CPU_AFFINITY) to CPU N; the LibTorch model is not pinned.
Run: python benchmarks/served_vs_inprocess.py [--pairs 5] [--window 1] [--cpu N] [--rounds 12] [--libtorch-backend DIR]
"""

from __future__ import annotations

import argparse
import os
import statistics
from pathlib import Path

os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")  # what model.py does; before torch is imported

import _awake  # noqa: E402
import _awake_rounds  # noqa: E402
import torch  # noqa: E402
from _common import (CORES, FreshProcess, add_size_option, bracket, generate_traced, header,  # noqa: E402
                     outside_execute_us, served_mlp)

from workbench.generate import pytorch_backend as ptb  # noqa: E402
from workbench.generate.config import build_config, to_text  # noqa: E402
from workbench.measure import MeasureSettings, measure  # noqa: E402
from workbench.server import TritonServer  # noqa: E402
from workbench.tutorial.backend_comparison import build_libtorch_backend  # noqa: E402

THROUGHPUT_TARGET = 0.95  # served / in-process at batch 8
P50_OVERHEAD_TARGET_MS = 0.3  # served - in-process at batch 1, HTTP
LIBTORCH_NAME = "mlp_libtorch"
FLOOR_NAME = "hop_floor"  # a model.py that computes nothing
ZERO_NAME = "zero_compute"  # the generated model.py over a TorchScript that computes nothing
BATCHES = (8, 1)

FLOOR_MODEL_PY = '''"""The Python backend's hop floor: no compute; each request gets rows of an array made at load."""
import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.input, output = config["input"][0]["name"], config["output"][0]
        self.output = output["name"]
        self.rows = np.zeros([int(config["max_batch_size"])] + [int(d) for d in output["dims"]], np.float32)

    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
                    self.output, self.rows[:pb_utils.get_input_tensor_by_name(r, self.input).as_numpy().shape[0]])])
                for r in requests]
'''

PINNED_NAME = "mlp_pinned"  # the MLP again, execute pinned to one CPU, for the awake rounds
BURST_NAME = "burst"  # the same TorchScript called back to back inside the stub
BURST_MODEL_PY = '''"""The forward alone inside the stub: each request runs CALLS calls back to back on its input and
answers with their median (ms) in every element; pinned to CPU when it is not None."""
import json
import os
import statistics
import time

import numpy as np
import torch
import triton_python_backend_utils as pb_utils

ARTIFACT, CPU, CALLS = {artifact!r}, {cpu!r}, 20


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.input, output = config["input"][0]["name"], config["output"][0]
        self.output, self.classes = output["name"], int(output["dims"][-1])
        torch.set_num_threads(1)
        self.module = torch.jit.load(ARTIFACT, map_location="cpu").eval()

    def execute(self, requests):
        if CPU is not None:
            os.sched_setaffinity(0, {{CPU}})  # the thread running execute
        responses = []
        for request in requests:
            x = torch.from_numpy(pb_utils.get_input_tensor_by_name(request, self.input).as_numpy().copy())
            times = []
            with torch.inference_mode():
                for _ in range(5):
                    self.module(x)
                for _ in range(CALLS):
                    t0 = time.perf_counter_ns()
                    self.module(x)
                    times.append(time.perf_counter_ns() - t0)
            ms = np.full((x.shape[0], self.classes), statistics.median(times) / 1e6, np.float32)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor(self.output, ms)]))
        return responses
'''


class Zeros(torch.nn.Module):
    """The MLP's tensors with no compute: the first rows of a zero buffer."""

    def __init__(self, rows: int, classes: int) -> None:
        super().__init__()
        self.register_buffer("out", torch.zeros(rows, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out[: x.shape[0]]


def _libtorch_backend(given: str | None) -> tuple[Path | None, str]:
    """(backend directory, where it came from) or (None, why there is none)."""
    named = given or os.environ.get("WORKBENCH_LIBTORCH_BACKEND")
    if named:
        return Path(named), "given" if given else "$WORKBENCH_LIBTORCH_BACKEND"
    shared = Path(os.environ.get("WORKBENCH_SHARED") or Path(__file__).resolve().parents[1] / ".." / "shared")
    script = shared / "tools" / "build_libtorch_backend.sh"
    if not script.is_file():
        return None, f"no LibTorch backend: --libtorch-backend and $WORKBENCH_LIBTORCH_BACKEND unset, {script} absent"
    try:
        return build_libtorch_backend(script), str(script)
    except RuntimeError as err:
        return None, str(err).splitlines()[0] + " " + " ".join(str(err).splitlines()[-1:])


def _libtorch_model(repository: Path, served) -> None:
    """The same TorchScript file as a LibTorch model, one intra-op thread per served core."""
    cfg = ptb.build_pytorch_config(LIBTORCH_NAME, served.model.spec, max_batch_size=8,
                                   parameters={"INTRA_OP_THREAD_COUNT": CORES, "INTER_OP_THREAD_COUNT": 1})
    ptb.write_torchscript_model(repository, cfg, torch.jit.load(str(served.artifact)).eval())


def _python_model(served, name: str, source: str) -> None:
    """A hand-written model.py with the MLP's tensors as ``name``, beside the MLP in its repository."""
    directory = served.repository / name
    (directory / "1").mkdir(parents=True)
    config = build_config(name, served.model.spec, max_batch_size=8, kind="KIND_CPU")
    (directory / "config.pbtxt").write_text(to_text(config))
    (directory / "1" / "model.py").write_text(source)


def _floor_models(served) -> None:
    """The hop floor and the zero-compute model, beside the MLP in its repository."""
    _python_model(served, FLOOR_NAME, FLOOR_MODEL_PY)
    classes = served.model.spec.outputs[0].dims[-1]
    generate_traced(served.repository.parent, Zeros(8, classes).eval(), served.model.example_inputs(2), ZERO_NAME)


def _same_moments(server: TritonServer, served, x, cpu: int | None, rounds: int = 10) -> list[float]:
    """The forward back to back inside a stub against the in-process child, alternated ``rounds``
    times within seconds (so the VM's drift falls on both), both pinned to ``cpu`` or both not:
    in-process p50 / the stub's median, one ratio per round."""
    import tritonclient.http as httpclient

    name = f"{BURST_NAME}_{'unpinned' if cpu is None else f'cpu{cpu}'}"
    _python_model(served, name, BURST_MODEL_PY.format(artifact=str(served.artifact), cpu=cpu))
    server.load(name)
    client = httpclient.InferenceServerClient(server.http_url.split("://", 1)[-1])
    request = httpclient.InferInput(served.model.spec.inputs[0].name, list(x.shape), "FP32")
    request.set_data_from_numpy(x)
    ratios = []
    try:
        with FreshProcess(served.artifact, {x.shape[0]: x}, threads=1, cpu=cpu) as local:
            for _ in range(rounds):
                stub_ms = float(client.infer(name, [request]).as_numpy(served.model.spec.outputs[0].name)[0, 0])
                ratios.append(local.time(x.shape[0], 0.3)["p50_us"] / 1000 / stub_ms)
    finally:
        client.close()
        server.unload(name)
    return ratios


def _served(server: TritonServer, name: str, x, batch: int, protocol: str, window: float):
    url = server.grpc_url if protocol == "grpc" else server.http_url
    # p50 and throughput only: 50 latencies are enough, and a 30 ms call gives ~30 per window
    settings = MeasureSettings(engine="workbench", protocol=protocol, window_s=window, min_latencies=50,
                               max_windows=6, time_limit_s=None)
    result = measure(url, name, [x], settings, batch_size=batch, concurrency=1)
    for warning in result.warnings:
        print(f"    warning ({name} {protocol} batch {batch}): {warning}")
    return result


def _pair(k: int, server: TritonServer, name: str, served, inputs: dict, protocols, window: float,
          floors: bool, cpu: int | None) -> dict:
    """One pair: a new in-process child and the model reloaded (a new stub); each served point is
    bracketed by in-process timings just before and after it; with ``floors`` the hop floor and
    zero-compute models too, and the in-process call paced as the stub's (after the HTTP points)."""
    figures: dict = {}
    server.unload(name)
    server.load(name)
    with FreshProcess(served.artifact, inputs, threads=CORES, cpu=cpu) as local:
        for protocol in protocols:
            for batch in BATCHES:
                before = local.time(batch, window)
                figures[protocol, batch] = result = _served(server, name, inputs[batch], batch, protocol, window)
                figures["local", protocol, batch] = bracket(before, local.time(batch, window))
                if floors and protocol == _paced_protocol(protocols) and result.server:
                    figures["paced", batch] = local.time(batch, window, max(0.0, outside_execute_us(result)))
    if floors:
        for protocol in protocols:
            for batch in BATCHES:
                figures[FLOOR_NAME, protocol, batch] = _served(server, FLOOR_NAME, inputs[batch], batch, protocol, window)
        for batch in BATCHES:
            figures[ZERO_NAME, "http", batch] = _served(server, ZERO_NAME, inputs[batch], batch, "http", window)
    parts = []
    for protocol in protocols:
        r8, r1 = figures[protocol, 8], figures[protocol, 1]
        here8, here1 = figures["local", protocol, 8], figures["local", protocol, 1]
        infer = f", compute infer {r8.server.compute_infer_us / 1000:.2f} ms" if r8.server else ""
        parts.append(f"{protocol} b8 {r8.throughput / here8['throughput']:.3f}x (p50 {r8.p50_us / 1000:.2f} ms{infer}; "
                     f"in-process {here8['p50_us'] / 1000:.2f} ms, drift {here8['drift']:.2f}x), "
                     f"b1 p50 {(r1.p50_us - here1['p50_us']) / 1000:+.3f} ms (in-process {here1['p50_us'] / 1000:.2f} ms)")
    if ("paced", 8) in figures:
        paced = {batch: figures["paced", batch] for batch in BATCHES}
        parts.append(f"paced in-process {paced[8]['p50_us'] / 1000:.2f} ms (b8, after {paced[8]['idle_us'] / 1000:.2f} ms "
                     f"idle) {paced[1]['p50_us'] / 1000:.2f} ms (b1, after {paced[1]['idle_us'] / 1000:.2f} ms)")
    if floors:
        parts.append("floor http b1 " + f"{figures[FLOOR_NAME, 'http', 1].p50_us / 1000:.3f} ms, zero-compute model.py "
                     f"http b1 {figures[ZERO_NAME, 'http', 1].p50_us / 1000:.3f} ms")
    print(f"  pair {k + 1}: " + "; ".join(parts) + f"; load {os.getloadavg()[0]:.1f}", flush=True)
    return figures


def _paced_protocol(protocols) -> str:
    """The protocol whose served path the paced call copies: HTTP where measured."""
    return "http" if "http" in protocols else protocols[0]


def _spread(values: list[float], fmt: str, unit: str, over: str = "pairs") -> str:
    """The median and min-max (over ``over``) of ``values``, formatted with ``fmt`` and ``unit``."""
    def show(v: float) -> str:
        return format(v, fmt) + unit
    return f"{show(statistics.median(values))} ({over} {show(min(values))} to {show(max(values))}, n={len(values)})"


def _summary(label: str, pairs: list[dict], protocols, floors: bool) -> list[bool]:
    """Print the rows of one backend; returns the verdicts (model.py rows only)."""
    judged, verdicts = label == "model.py", []
    tag = (lambda met: f" -> {'met' if met else 'NOT met'}") if judged else (lambda met: " (reference)")
    for protocol in protocols:
        local = {batch: [p["local", protocol, batch] for p in pairs] for batch in BATCHES}
        thr = [p[protocol, 8].throughput / p["local", protocol, 8]["throughput"] for p in pairs]
        met = statistics.median(thr) >= THROUGHPUT_TARGET
        print(f"{label} {protocol}: throughput served/in-process at batch 8: {_spread(thr, '.3f', 'x')} "
              f"(target >= {THROUGHPUT_TARGET}x){tag(met)}")
        verdicts += [met] if judged else []
        # the split in means (the throughput ratio is one): in-process call, execute's extra, the rest
        here_ms = [1000 * 8 / x["throughput"] for x in local[8]]
        timed = [(p[protocol, 8], ms) for p, ms in zip(pairs, here_ms) if p[protocol, 8].server]
        infer = [r.server.compute_infer_us / 1000 - ms for r, ms in timed]
        outside = [outside_execute_us(r) / 1000 for r, _ in timed]
        if timed:
            print(f"  batch 8 split (means): in-process call {_spread(here_ms, '.2f', ' ms')}; the stub's compute "
                  f"infer minus it {_spread(infer, '+.2f', ' ms')}; served latency minus compute infer (outside "
                  f"execute) {_spread(outside, '.2f', ' ms')}")
            allowed = [ms / (ms + o) for (_, ms), o in zip(timed, outside)]
            print(f"  batch 8, the ratio the path outside execute alone allows (client, {protocol}, Triton; every "
                  f"backend has it): {_spread(allowed, '.3f', 'x')}")
        if floors and protocol == _paced_protocol(protocols) and all(("paced", 8) in p for p in pairs):
            paced_ms = [1000 * 8 / p["paced", 8]["throughput"] for p in pairs]
            woken = [p[protocol, 8].server.compute_infer_us / 1000 - ms for p, ms in zip(pairs, paced_ms)
                     if p[protocol, 8].server]
            thr_paced = [p[protocol, 8].throughput / p["paced", 8]["throughput"] for p in pairs]
            print(f"  batch 8, the in-process call paced (asleep as long as the served path outside execute before "
                  f"each call): {_spread(paced_ms, '.2f', ' ms')}; the stub's compute infer minus it "
                  f"{_spread(woken, '+.2f', ' ms')}; served throughput / paced in-process "
                  f"{_spread(thr_paced, '.3f', 'x')} (reference: the part of the gap that is the CPU waking from idle)")
        if floors:
            floor8 = [p[FLOOR_NAME, protocol, 8].p50_us / 1000 for p in pairs]
            allowed = [ms / (ms + f) for ms, f in zip(here_ms, floor8)]
            print(f"  batch 8 hop floor (model.py computing nothing): p50 {_spread(floor8, '.3f', ' ms')}: the ratio "
                  f"it alone allows {_spread(allowed, '.3f', 'x')}")
        over = [p[protocol, 1].p50_us / 1000 - x["p50_us"] / 1000 for p, x in zip(pairs, local[1])]
        p50_met = statistics.median(over) <= P50_OVERHEAD_TARGET_MS
        p50_tag = tag(p50_met) if protocol == "http" else (" (judged over HTTP)" if judged else " (reference)")
        print(f"{label} {protocol}: p50 served - in-process at batch 1: {_spread(over, '+.3f', ' ms')} "
              f"(target <= {P50_OVERHEAD_TARGET_MS} ms over HTTP){p50_tag}")
        verdicts += [p50_met] if judged and protocol == "http" else []
        outside1 = [outside_execute_us(p[protocol, 1]) / 1000 for p in pairs if p[protocol, 1].server]
        if outside1:
            print(f"  batch 1, the path outside execute (mean latency minus compute infer; every backend has it): "
                  f"{_spread(outside1, '.3f', ' ms')}")
        if floors:
            floor1 = [p[FLOOR_NAME, protocol, 1].p50_us / 1000 for p in pairs]
            print(f"  batch 1 hop floor (model.py computing nothing): p50 {_spread(floor1, '.3f', ' ms')}")
            if protocol == "http" and all(("paced", 1) in p for p in pairs):
                own = [(p[ZERO_NAME, "http", 1].p50_us - p[FLOOR_NAME, "http", 1].p50_us) / 1000 for p in pairs]
                rest = [o - (p[ZERO_NAME, "http", 1].p50_us / 1000) for o, p in zip(over, pairs)]
                own8 = [(p[ZERO_NAME, "http", 8].p50_us - p[FLOOR_NAME, "http", 8].p50_us) / 1000 for p in pairs]
                print(f"  batch 1 over HTTP = hop floor + model.py's own code {_spread(own, '+.3f', ' ms')} (the "
                      f"generated model.py on a zero-compute TorchScript minus the floor; at batch 8 "
                      f"{_spread(own8, '+.3f', ' ms')}) + the rest {_spread(rest, '+.3f', ' ms')} (the forward inside "
                      "the stub vs in-process, and noise)")
                woken1 = [(p["paced", 1]["p50_us"] - x["p50_us"]) / 1000 for p, x in zip(pairs, local[1])]
                print(f"  of the rest, the in-process call paced as served minus back to back (batch 1): "
                      f"{_spread(woken1, '+.3f', ' ms')}")
    return verdicts


def _awake_section(label: str, server: TritonServer, name: str, artifact: Path, inputs: dict, protocol: str,
                   cpu: int | None, count: int, window: float) -> None:
    """The awake rounds of one backend at both batch sizes (reference rows: not judged)."""
    targets = {8: f">= {THROUGHPUT_TARGET}x", 1: f"p50 <= +{P50_OVERHEAD_TARGET_MS} ms"}
    for batch in BATCHES:
        figures, entries = _awake_rounds.rounds(server, name, artifact, inputs, batch, protocol, cpu=cpu,
                                                count=count, window=window)
        _awake_rounds.report(label, protocol, batch, figures, entries, targets[batch])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=5, help="pairs per backend (default 5)")
    parser.add_argument("--window", type=float, default=1.0, help="measurement window, seconds")
    parser.add_argument("--protocol", default="both", choices=("grpc", "http", "both"))
    parser.add_argument("--libtorch-backend", default=None, help="backend directory with Triton's PyTorch backend")
    parser.add_argument("--cpu", type=int, default=None,
                        help="pin the in-process child and the served model's execute thread (CPU_AFFINITY) to this "
                             "CPU; the LibTorch model is not pinned (its backend has no such setting)")
    parser.add_argument("--rounds", type=int, default=12,
                        help="awake rounds per backend and batch size (default 12; 0 skips them)")
    parser.add_argument("--round-window", type=float, default=0.5, help="an awake round's window, seconds")
    add_size_option(parser, "large")
    args = parser.parse_args()
    if args.pairs < 1:
        parser.error("--pairs must be at least 1")
    if args.rounds < 0:
        parser.error("--rounds must be 0 or more")
    protocols = ("grpc", "http") if args.protocol == "both" else (args.protocol,)
    header(f"served vs in-process, {args.size} MLP, {CORES} thread(s), concurrency 1, {' and '.join(protocols)}, "
           f"{args.pairs} pair(s) per backend, THP_MEM_ALLOC_ENABLE={os.environ['THP_MEM_ALLOC_ENABLE']}, "
           + ("unpinned" if args.cpu is None else f"model.py and in-process pinned to CPU {args.cpu}"))
    backend, source = _libtorch_backend(args.libtorch_backend)
    print(f"LibTorch backend: {backend} ({source})" if backend else f"LibTorch row skipped: {source}", flush=True)
    awake_problem = _awake.unavailable() if args.rounds else "--rounds 0"
    print(f"awake rounds skipped: {awake_problem}" if awake_problem else
          f"awake rounds: {args.rounds} per backend and batch size, {args.round_window} s windows", flush=True)
    results: dict[str, list[dict]] = {}
    with served_mlp(size=args.size, pin_cpu=args.cpu) as (server, served):
        _floor_models(served)
        pin = os.cpu_count() - 1 if args.cpu is None else args.cpu
        pinned = served.artifact  # the rounds' model: the MLP when --cpu pinned it, else a pinned copy
        if not awake_problem and args.cpu is None:
            pinned = generate_traced(served.repository.parent, served.model.module, served.model.example_inputs(2),
                                     PINNED_NAME, pin_cpu=pin)
        for name in (FLOOR_NAME, ZERO_NAME):
            server.load(name)
        inputs = {batch: served.model.example_inputs(batch)[0].numpy() for batch in BATCHES}
        same = {cpu: _same_moments(server, served, inputs[8], cpu) for cpu in (None, pin)}
        for cpu, ratios in same.items():
            print(f"the forward back to back inside a stub vs in-process, alternated within seconds, batch 8, "
                  f"{'unpinned' if cpu is None else f'both pinned to CPU {cpu}'}: in-process / stub "
                  f"{_spread(ratios, '.3f', 'x', 'rounds')}", flush=True)
        print("model.py (Python backend):", flush=True)
        results["model.py"] = [_pair(k, server, served.name, served, inputs, protocols, args.window, True, args.cpu)
                               for k in range(args.pairs)]
        round_protocol = _paced_protocol(protocols)
        if not awake_problem:
            pinned_name = served.name if args.cpu is not None else PINNED_NAME
            server.unload(served.name)  # one copy of the weights in memory at a time
            server.load(pinned_name)
            print(f"awake rounds (PM QoS CPU latency 0 held vs not, interleaved; model.py and in-process pinned to "
                  f"CPU {pin}; reference rows):", flush=True)
            _awake_section("model.py", server, pinned_name, pinned, inputs, round_protocol, pin, args.rounds,
                           args.round_window)
        if backend is not None:
            server.stop()  # one server at a time: the two would share the same cores
            _libtorch_model(served.repository, served)
            with TritonServer(served.repository, pytorch_backend=backend) as libtorch:
                libtorch.load(LIBTORCH_NAME)
                print("LibTorch backend:", flush=True)
                results["LibTorch"] = [_pair(k, libtorch, LIBTORCH_NAME, served, inputs, protocols, args.window, False,
                                             None) for k in range(args.pairs)]
                if not awake_problem:
                    print("awake rounds, LibTorch (unpinned: its backend has no affinity setting; reference rows):",
                          flush=True)
                    _awake_section("LibTorch", libtorch, LIBTORCH_NAME, served.artifact, inputs, round_protocol, None,
                                   args.rounds, args.round_window)
    verdicts = []
    for label, pairs in results.items():
        verdicts += _summary(label, pairs, protocols, label == "model.py")
    print(f"targets (issue 15, through the generated model.py): {'MET' if all(verdicts) else 'NOT MET'} "
          f"(load average {', '.join(f'{v:.1f}' for v in os.getloadavg())})")


if __name__ == "__main__":
    main()
