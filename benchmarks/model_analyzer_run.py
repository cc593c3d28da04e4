"""Model Analyzer on the benchmark's model and space, in local launch mode, for search_vs_grid.py.

It is found as ``$MODEL_ANALYZER``, ``model-analyzer`` on PATH, or in the benchmark's own venv
(``~/.cache/workbench/model-analyzer-venv``), which is created with ``pip install
triton-model-analyzer`` when missing. Wrappers give it the workbench's tritonserver (library path,
python backend directory, a unique shm prefix) and perf_analyzer. A NeuronCore allocation can only
be written for it as instance count x NEURON_CORE_END_INDEX, so it also tries the split that
overlaps cores (2 instances on core 0); every config it profiles restarts the server.

Two search modes: ``brute`` sweeps exactly that cross product (client batch sizes x concurrency per
config); ``quick`` is MA's hill climb over its own axes (instance count, the model's max_batch_size,
concurrency; the client's batch size as MA chooses it), bounded here by the same space's limits:
it cannot express a NeuronCore split, so its configs are instance counts on the model's own cores.
Its concurrency sweep of the top configs for its reports, after the search has its answer, is
turned off (``concurrency_sweep_disable``): it is not part of finding the answer (in one smoke run
here it was still sweeping when a 900 s limit ended it).

Its perf_analyzer is given the workbench's input values (``perf_analyzer_flags: input-data``):
perf_analyzer's default "random" input is random bytes (src/data_loader.cc fills its buffer with
``rand()``), which read as FP32 hold NaN, infinities and denormals, and the large MLP's forward
took 26 ms on such an input against 13 ms on normal values (one process, back to back), so Model
Analyzer measured a slower model than the workbench did.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from workbench.generate.config import parameters_of, read_config
from workbench.measure.engine.perf_analyzer import PerfAnalyzerNotFound, find_perf_analyzer, write_input_data
from workbench.server.discovery import find_tritonserver
from workbench.server.ports import pick_ports

VERSION = "1.58.0"
VENV = Path.home() / ".cache" / "workbench" / "model-analyzer-venv"


@dataclass
class MAOutcome:
    ran: bool
    why: str = ""
    wall_s: float = 0.0
    table: pd.DataFrame | None = None
    best: dict | None = None
    configs: int = 0
    allocations: dict | None = None  # MA's config name -> the allocation it describes ("2x1")
    mode: str = "brute"

    def describe(self, grid_s: float) -> str:
        if not self.ran:
            return f"  did not run: {self.why}"
        text = [f"  wall {self.wall_s:.1f} s ({self.wall_s / grid_s:.2f}x the workbench grid's {grid_s:.1f} s), "
                f"{self.configs} model configs, {0 if self.table is None else len(self.table)} measurements"]
        if self.why:
            text.append(f"  note: {self.why}")
        if self.best:
            b = self.best
            text.append(f"  its best under the budget: {b['allocation']} ({b['config']}), batch {b['batch']}, "
                        f"concurrency {b['concurrency']}: {b['throughput']:.1f} infer/s, p99 {b['p99_ms']:.2f} ms")
        elif self.table is not None:
            text.append("  no measurement met the budget")
        return "\n".join(text)


def find_model_analyzer(install: bool = True) -> tuple[Path | None, str]:
    """The model-analyzer executable and where it came from, or None and why not."""
    for candidate, source in ((os.environ.get("MODEL_ANALYZER"), "$MODEL_ANALYZER"),
                              (shutil.which("model-analyzer"), "PATH"),
                              (str(VENV / "bin" / "model-analyzer"), f"the benchmark's venv {VENV}")):
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return Path(candidate), source
    if not install:
        return None, "model-analyzer is not installed"
    print(f"  installing triton-model-analyzer=={VERSION} into {VENV} (pip)", flush=True)
    try:
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True, capture_output=True, timeout=300)
        subprocess.run([str(VENV / "bin" / "pip"), "install", "-q", f"triton-model-analyzer=={VERSION}"],
                       check=True, capture_output=True, text=True, timeout=1200)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as err:
        detail = getattr(err, "stderr", "") or str(err)
        return None, f"pip install triton-model-analyzer failed: {str(detail).strip().splitlines()[-1:]}"
    return VENV / "bin" / "model-analyzer", f"installed into {VENV}"


def _perf_analyzer() -> list[str]:
    """perf_analyzer as the workbench finds it ($PERF_ANALYZER, PATH), else the shared folder's
    wrapper for this glibc ($WORKBENCH_SHARED or ../shared beside the repository, as the tests look)."""
    try:
        return find_perf_analyzer()
    except PerfAnalyzerNotFound:
        shared = Path(os.environ.get("WORKBENCH_SHARED") or Path(__file__).resolve().parents[2] / "shared")
        wrapper = shared / "tools" / "perf_analyzer_here.sh"
        if wrapper.is_file():
            return [str(wrapper)]
        raise


def _wrappers(folder: Path) -> tuple[Path, Path]:
    """Executables MA can be pointed at: tritonserver as TritonServer runs it, and perf_analyzer."""
    install = find_tritonserver()
    env = install.env({"LD_LIBRARY_PATH": "", "PATH": ""})
    server = folder / "tritonserver.sh"
    backend = f"--backend-directory={install.backend_dir} " if install.backend_dir else ""
    server.write_text("#!/bin/bash\n"
                      f"export LD_LIBRARY_PATH={env['LD_LIBRARY_PATH']}${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}\n"
                      f"export PATH={env['PATH']}:$PATH\n"
                      f"exec {install.binary} {backend}--backend-config=python,shm-region-prefix-name=ma$$- \"$@\"\n")
    analyzer = folder / "perf_analyzer.sh"
    command = " ".join(f"'{part}'" for part in _perf_analyzer())
    analyzer.write_text(f"#!/bin/bash\nexec {command} \"$@\"\n")
    for path in (server, analyzer):
        path.chmod(0o755)
    return server, analyzer


def _stop_its_servers(scratch: Path) -> int:
    """SIGKILL every tritonserver Model Analyzer started on a repository under ``scratch`` (told
    apart by the wrapper's ``shm-region-prefix-name=ma<pid>-`` and the path) and its stubs: MA starts
    each server in a session of its own, so stopping MA's session leaves a server it was running
    when it was stopped (one was found still alive after a timeout). Returns how many were stopped."""
    stopped = 0
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        if any(a.startswith("--backend-config=python,shm-region-prefix-name=ma") for a in argv) \
                and any(a.startswith(str(scratch)) for a in argv):
            try:
                os.killpg(int(proc.name), signal.SIGKILL)  # the server leads its session's group, stubs included
                stopped += 1
            except (ProcessLookupError, PermissionError):
                pass
    return stopped


def _search(mode: str, served, batch_sizes, allocations, concurrency, input_data: Path) -> str:
    """The profile's search section: brute over the space as written, or quick within its bounds."""
    counts = sorted({int(a.split("x")[0]) for a in allocations})
    if mode == "quick":
        return f"""run_config_search_mode: quick
run_config_search_max_instance_count: {max(counts)}
run_config_search_min_model_batch_size: {min(batch_sizes)}
run_config_search_max_model_batch_size: {max(batch_sizes)}
run_config_search_min_concurrency: {min(concurrency)}
run_config_search_max_concurrency: {max(concurrency)}
concurrency_sweep_disable: true
profile_models:
  {served.name}:
    cpu_only: true
    perf_analyzer_flags: {{input-data: {input_data}}}
"""
    ends = sorted({str(int(a.split("x")[0]) * int(a.split("x")[1]) - 1) for a in allocations})
    return f"""run_config_search_mode: brute
profile_models:
  {served.name}:
    cpu_only: true
    parameters: {{batch_sizes: {list(batch_sizes)}, concurrency: {list(concurrency)}}}
    perf_analyzer_flags: {{input-data: {input_data}}}
    model_config_parameters:
      max_batch_size: {max(batch_sizes)}
      dynamic_batching: {{}}
      instance_group: [{{kind: KIND_MODEL, count: {counts}}}]
      parameters: {{NEURON_CORE_END_INDEX: {{string_value: {ends}}}}}
"""


def _profile(served, run: Path, batch_sizes, allocations, concurrency, budget_ms: float, wrappers,
             input_data: Path, mode: str = "brute") -> str:
    ports = pick_ports("127.0.0.1", {"http": None, "grpc": None, "metrics": None})
    return f"""model_repository: {served.repository}
checkpoint_directory: {run}/checkpoints
output_model_repository_path: {run}/output_model_repository
override_output_model_repository: true
export_path: {run}/export
triton_launch_mode: local
triton_server_path: {wrappers[0]}
perf_analyzer_path: {wrappers[1]}
triton_http_endpoint: 127.0.0.1:{ports['http']}
triton_grpc_endpoint: 127.0.0.1:{ports['grpc']}
triton_metrics_url: http://127.0.0.1:{ports['metrics']}/metrics
triton_server_flags: {{http_address: 127.0.0.1, grpc_address: 127.0.0.1, metrics_address: 127.0.0.1}}
client_protocol: grpc
constraints: {{perf_latency_p99: {{max: {budget_ms:.3f}}}}}
""" + _search(mode, served, batch_sizes, allocations, concurrency, input_data)


def _column(frame: pd.DataFrame, *words: str) -> str:
    """The column named ``words`` (e.g. "Batch"), else the first containing them all."""
    exact = [c for c in frame.columns if c.strip().lower() == " ".join(words).lower()]
    if exact:
        return exact[0]
    for column in frame.columns:
        if all(w.lower() in column.lower() for w in words):
            return column
    raise KeyError(f"no column with {words} in {list(frame.columns)}")


def _allocation(config_dir: Path) -> str:
    cfg = read_config(config_dir)
    params = parameters_of(cfg)
    count = cfg.instance_group[0].count if cfg.instance_group else 1
    cores = int(params.get("NEURON_CORE_END_INDEX", "0")) - int(params.get("NEURON_CORE_START_INDEX", "0")) + 1
    return f"{count}x{cores // count}" if cores % count == 0 and cores >= count else f"{count} on {cores} core(s), overlapping"


def run_model_analyzer(served, batch_sizes, allocations, concurrency, budget_ms: float, *, timeout: float,
                       mode: str = "brute") -> MAOutcome:
    executable, source = find_model_analyzer()
    if executable is None:
        return MAOutcome(False, source, mode=mode)
    try:
        wrappers_dir = Path(served.repository).parent / f"ma-{mode}"
        wrappers_dir.mkdir(exist_ok=True)
        wrappers = _wrappers(wrappers_dir)
    except PerfAnalyzerNotFound as err:
        return MAOutcome(False, f"Model Analyzer drives perf_analyzer, which is not found: {err}", mode=mode)
    run = wrappers_dir / "run"
    run.mkdir(exist_ok=True)  # MA checks its checkpoint directory's parent exists
    profile = wrappers_dir / "profile.yaml"
    spec = served.model.spec
    inputs = write_input_data(dict(zip([t.name for t in spec.by_index("input")], spec.example_inputs())),
                              wrappers_dir / "inputs.json")  # one sample, as the workbench's own engine sends
    profile.write_text(_profile(served, run, batch_sizes, allocations, concurrency, budget_ms, wrappers, inputs, mode))
    print(f"  model-analyzer from {source}; log {wrappers_dir / 'ma.log'}", flush=True)
    start = time.perf_counter()
    with open(wrappers_dir / "ma.log", "w") as log:
        process = subprocess.Popen([str(executable), "profile", "-f", str(profile)], stdout=log, stderr=subprocess.STDOUT,
                                   start_new_session=True, cwd=wrappers_dir)
        try:
            code = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            code = None
        finally:  # MA's own tritonserver and perf_analyzer are in its session
            try:
                os.killpg(process.pid, signal.SIGTERM)
                process.wait(30)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass
            _stop_its_servers(Path(served.repository).parent)
    wall = time.perf_counter() - start
    if code is None:
        return MAOutcome(False, f"it did not finish within {timeout:.0f} s (--ma-timeout); log in {wrappers_dir}", wall,
                         mode=mode)
    csv = run / "export" / "results" / "metrics-model-inference.csv"
    if code != 0 or not csv.is_file():
        tail = (wrappers_dir / "ma.log").read_text(errors="replace").strip().splitlines()[-3:]
        return MAOutcome(False, f"it exited {code} without {csv.name}: {' | '.join(tail)}", wall, mode=mode)
    table = pd.read_csv(csv)
    config, thr, p99 = _column(table, "config", "path"), _column(table, "throughput"), _column(table, "p99")
    batch, conc = _column(table, "batch"), _column(table, "concurrency")
    configs = sorted(set(table[config]))
    loaded = {c: _allocation(run / "output_model_repository" / Path(str(c)).name) for c in configs
              if (run / "output_model_repository" / Path(str(c)).name / "config.pbtxt").is_file()}
    ok = table[table[p99].astype(float) <= budget_ms]
    best = None
    if len(ok):
        row = ok.sort_values(thr, ascending=False).iloc[0]
        best = {"config": Path(str(row[config])).name, "allocation": loaded.get(row[config], "?"), "batch": int(row[batch]),
                "concurrency": int(row[conc]), "throughput": float(row[thr]), "p99_ms": float(row[p99])}
    note = "allocations it profiled: " + ", ".join(f"{Path(str(c)).name}={a}" for c, a in loaded.items())
    return MAOutcome(True, note, wall, table, best, len(configs), {Path(str(c)).name: a for c, a in loaded.items()},
                     mode)


def compare_points(grid: pd.DataFrame, outcome: MAOutcome, within: float = 0.10) -> tuple[list[str], bool | None]:
    """Per point measured by both, the workbench grid's throughput and p99 as ratios of Model
    Analyzer's own measurement (MA's measurements of one point, e.g. its default config and the
    same allocation generated, are taken at their median), the median of each ratio, and whether
    both medians are within ``within`` of 1 (issue #15's target). (lines, verdict; None: no point shared)."""
    table = outcome.table
    if table is None or not outcome.allocations:
        return ["  no Model Analyzer measurements to compare"], None
    config, thr, p99 = _column(table, "config", "path"), _column(table, "throughput"), _column(table, "p99")
    batch, conc = _column(table, "batch"), _column(table, "concurrency")
    ma = pd.DataFrame({"allocation": [outcome.allocations.get(Path(str(c)).name) for c in table[config]],
                       "batch_size": table[batch].astype(int), "concurrency": table[conc].astype(int),
                       "ma_throughput": table[thr].astype(float), "ma_p99_ms": table[p99].astype(float)})
    ma = ma.dropna(subset=["allocation"]).groupby(["allocation", "batch_size", "concurrency"], as_index=False).agg(
        ma_throughput=("ma_throughput", "median"), ma_p99_ms=("ma_p99_ms", "median"), ma_runs=("ma_p99_ms", "size"))
    ours = grid[["allocation", "batch_size", "concurrency", "throughput", "p99_ms"]].copy()
    ours[["batch_size", "concurrency"]] = ours[["batch_size", "concurrency"]].astype(int)
    both = ours.merge(ma, on=["allocation", "batch_size", "concurrency"])
    if both.empty:
        return ["  no point measured by both (allocations MA profiled: "
                f"{sorted(set(outcome.allocations.values()))})"], None
    both["thr_ratio"] = both["throughput"] / both["ma_throughput"]
    both["p99_ratio"] = both["p99_ms"] / both["ma_p99_ms"]
    lines = [f"  per point, the workbench grid (built-in engine) / Model Analyzer's own measurement "
             f"({len(both)} points measured by both):"]
    for _i, r in both.sort_values(["allocation", "batch_size", "concurrency"]).iterrows():
        lines.append(f"    {r['allocation']} b{int(r['batch_size'])} c{int(r['concurrency'])}: throughput "
                     f"{r['throughput']:.1f} vs {r['ma_throughput']:.1f} ({r['thr_ratio']:.2f}x), p99 {r['p99_ms']:.2f} vs "
                     f"{r['ma_p99_ms']:.2f} ms ({r['p99_ratio']:.2f}x)" + (f" [MA x{int(r['ma_runs'])}]" if r["ma_runs"] > 1 else ""))
    thr_med, p99_med = float(both["thr_ratio"].median()), float(both["p99_ratio"].median())
    met = abs(thr_med - 1) <= within and abs(p99_med - 1) <= within
    lines.append(f"  median ratio: throughput {thr_med:.2f}x (range {both['thr_ratio'].min():.2f}-"
                 f"{both['thr_ratio'].max():.2f}), p99 {p99_med:.2f}x (range {both['p99_ratio'].min():.2f}-"
                 f"{both['p99_ratio'].max():.2f})")
    lines.append(f"  target (issue #15): the built-in engine's throughput and p99 within {within:.0%} of Model "
                 f"Analyzer's at the median point: {'met' if met else 'not met'}")
    return lines, met
