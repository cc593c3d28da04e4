"""The streaming load generator (``measure.engine.streaming``) vs AIPerf, side by side in one run, on
the tiny LLM served by Triton's real vLLM backend (the benchmark starts and stops the server).

Same points: concurrency levels (``--concurrency``), the same prompts (built from the model's own
tokenizer at exactly ``--input-tokens`` tokens, sent in the same order), the same output lengths
(``--output-tokens`` with ignore_eos), the same endpoint: HTTP ``generate_stream`` (server-sent
events) with the same request body. AIPerf 0.13.0 has no Triton endpoint type; its ``template``
endpoint posts our body to that path (``_aiperf``). Our gRPC stream has no AIPerf counterpart.
Each point runs ``--repeats`` pairs, the two engines alternating which goes first, and the ratios
are taken within each pair (a busy neighbour slows both sides of a pair alike); the verdict is on
the median ratio.

Targets (issue 34): TTFT p50, ITL p50 and output tokens/s within 10% of AIPerf's where AIPerf is
stable (its profiling phase cut into our windows, judged by our stopping rule); each client's
output-token count within 1% of the server's own (``vllm:generation_tokens_total`` on Triton's
/metrics, diffed around each run, warm-up included); our client CPU per token at most AIPerf's.

Counting differs (see ``_aiperf``): AIPerf re-tokenizes the text it received, ours reads the
backend's ``num_output_tokens``. Its throughput and ITL therefore rest on its own token count;
the "server count" line prints the same ratios against AIPerf's request times over the tokens the
server generated, so a miss that is only counting reads as such.

CPU: ours is this process's CPU over its pooled windows per token received there; AIPerf's its
whole process tree's CPU (psutil, sampled every 0.2 s) over its profiling phase per token the
server generated for the requests in it, and, beside it, over its whole run (start-up included).

Run: python benchmarks/llm_vs_aiperf.py [--concurrency 1 2 4] [--repeats 2] [--window 2]
AIPerf comes from --aiperf, $AIPERF, or $AIPERF_VENV/bin/aiperf (bash benchmarks/aiperf_env.sh).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from _aiperf import AiperfPoint, aiperf_command, find_aiperf, read_export, run_aiperf, write_inputs
from _common import header

from workbench import zoo
from workbench.measure.engine.measure_settings import MeasureSettings
from workbench.measure.engine.streaming import (VLLM_TOKEN_METRIC, Lengths, ModelTokenizer, Slo, StreamResult,
                                                build_prompts, measure_stream)
from workbench.measure.engine.streaming.server_counts import counts_between, take_snapshot
from workbench.server import TritonServer
from workbench.server.vllm_backend import ENV_PYTHON

MODEL = "tiny_llm"
ROOT = Path(__file__).resolve().parents[1]
BACKEND_SCRIPT = ROOT.parent / "shared" / "tools" / "vllm_backend_here.sh"
WITHIN_AIPERF = 0.10
WITHIN_SERVER = 0.01
SLOS = (Slo(ttft_ms=None, itl_ms=None),)


@contextmanager
def served_tiny_llm(max_num_seqs: int) -> Iterator[tuple[TritonServer, zoo.TinyLLM]]:
    """tritonserver with the tiny LLM on Triton's vLLM backend (its token counter on /metrics);
    stopped and its files removed on exit."""
    named = os.environ.get(ENV_PYTHON)
    python = Path(named) if named else ROOT / ".venv-vllm" / "bin" / "python"
    if not python.is_file() or not BACKEND_SCRIPT.is_file():
        raise SystemExit(f"needs the vLLM environment ({python}: set ${ENV_PYTHON}) and {BACKEND_SCRIPT}")
    done = subprocess.run(["bash", str(BACKEND_SCRIPT), str(python), str(python.parent.parent / "triton-vllm-backend")],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "WB_STUB_LOCALE_FIX": "1"},
                          check=True)
    backend = done.stdout.strip().splitlines()[-1]
    llm = zoo.tiny_llm()
    with tempfile.TemporaryDirectory(prefix="workbench-bench-llm-") as scratch:
        folder = Path(scratch) / MODEL
        (folder / "1").mkdir(parents=True)
        (folder / "config.pbtxt").write_text(
            'backend: "vllm"\ninstance_group [ { count: 1, kind: KIND_MODEL } ]\n'
            'parameters { key: "REPORT_CUSTOM_METRICS" value: { string_value: "true" } }\n')
        engine = {"model": str(llm.path), "dtype": "float32", "max_model_len": 256, "max_num_seqs": max_num_seqs,
                  "kv_cache_memory_bytes": 64 << 20, "enforce_eager": True, "disable_log_stats": False}
        (folder / "1" / "model.json").write_text(json.dumps(engine, indent=2))
        with TritonServer(Path(scratch), vllm_backend=backend, vllm_python=python, pytorch_backend=False) as server:
            server.load(MODEL, timeout=900)
            yield server, llm


@dataclass(frozen=True)
class Theirs:
    point: AiperfPoint
    server_tokens: int  # the server's count over AIPerf's whole run
    cpu_us_per_token: float  # its process tree over the profiling phase
    whole_cpu_us_per_token: float  # over its whole run, start-up included


def run_theirs(server: TritonServer, aiperf: Path, llm: zoo.TinyLLM, inputs: tuple[Path, Path], work: Path,
               concurrency: int, args: argparse.Namespace, tag: str) -> Theirs:
    artifacts = work / f"aiperf-{tag}"
    command = aiperf_command(aiperf, server.http_url, MODEL, dataset=inputs[0], template=inputs[1],
                             tokenizer=llm.path, concurrency=concurrency, duration_s=args.duration,
                             warmup_requests=concurrency, artifacts=artifacts)
    before = take_snapshot(server, MODEL, VLLM_TOKEN_METRIC)
    cpu = run_aiperf(command, work / f"aiperf-{tag}.log")
    point = read_export(artifacts, window_s=args.window, stability=0.10, stable_windows=args.stable_windows)
    deadline = time.monotonic() + 3.0  # the engine's counter may lag its last step
    while True:
        counts = counts_between(before, take_snapshot(server, MODEL, VLLM_TOKEN_METRIC))
        if counts is None or counts.output_tokens >= point.total_max_tokens or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    profiled_tokens = point.server_tokens_per_s * point.seconds
    whole = cpu.samples[-1][1]
    return Theirs(point, counts.output_tokens if counts else -1,
                  (cpu.at(point.end_ns) - cpu.at(point.start_ns)) / profiled_tokens * 1e6,
                  whole / point.total_max_tokens * 1e6)


def run_ours(server: TritonServer, prompts, concurrency: int, args: argparse.Namespace) -> StreamResult:
    settings = MeasureSettings(protocol="http", window_s=args.window, stable_windows=args.stable_windows,
                               max_windows=args.max_windows, time_limit_s=None, min_latencies=0)
    return measure_stream(server.http_url, MODEL, prompts, settings, concurrency=concurrency, slos=SLOS,
                          counts_from=server, token_metric=VLLM_TOKEN_METRIC, count_output="num_output_tokens")


def _ratio(ours: float, theirs: float) -> float:
    return ours / theirs if theirs else math.nan


def _median(values: list[float]) -> float:
    """The median of the finite values (a ratio is NaN where AIPerf's figure was 0)."""
    finite = [v for v in values if math.isfinite(v)]
    return statistics.median(finite) if finite else math.nan


def _within(value: float, band: float) -> bool:
    return abs(value - 1) <= band


def _count_line(name: str, client: int, server: int) -> tuple[str, bool]:
    ok = server > 0 and abs(client / server - 1) <= WITHIN_SERVER
    return f"{name} {client} vs server {server} ({client / server:.3f}x)" if server > 0 else \
        f"{name} {client} vs server ?", ok


def pair(server, aiperf, llm, prompts, inputs, work, concurrency, args, k) -> dict:
    """One measurement by each engine, back to back (AIPerf first on odd pairs)."""
    run = {}
    order = ("theirs", "ours") if k % 2 else ("ours", "theirs")
    for side in order:
        if side == "ours":
            run["ours"] = run_ours(server, prompts, concurrency, args)
        else:
            run["theirs"] = run_theirs(server, aiperf, llm, inputs, work, concurrency, args, f"c{concurrency}-{k}")
    ours, theirs = run["ours"], run["theirs"]
    ai = theirs.point
    out = {"ttft": _ratio(ours.ttft_ms["p50"], ai.ttft_ms_p50), "itl": _ratio(ours.itl_ms["p50"], ai.itl_ms_p50),
           "thr": _ratio(ours.output_tokens_per_s, ai.output_tokens_per_s),
           "itl_server": _ratio(ours.itl_ms["p50"], ai.server_itl_ms_p50),
           "thr_server": _ratio(ours.output_tokens_per_s, ai.server_tokens_per_s),
           "ai_stable": ai.stable, "cpu": ours.client_cpu_us_per_token, "ai_cpu": theirs.cpu_us_per_token}
    ours_count, out["ours_count_ok"] = _count_line("ours", ours.client_total_tokens,
                                                   ours.server.output_tokens if ours.server else -1)
    ai_count, out["ai_count_ok"] = _count_line("AIPerf", ai.total_tokens, theirs.server_tokens)
    print(f"  pair {k + 1} ({' then '.join(order)}), load {os.getloadavg()[0]:.1f}:\n"
          f"    ours   TTFT p50 {ours.ttft_ms['p50']:7.2f} ms  ITL p50 {ours.itl_ms['p50']:6.3f} ms  "
          f"{ours.output_tokens_per_s:7.1f} tok/s  e2e p50 {ours.e2e_ms['p50']:7.2f} ms  "
          f"in flight {ours.requests_per_s * ours.e2e_ms['avg'] / 1000:.2f}  "
          f"stable {ours.stable} ({ours.windows} windows)  "
          f"{ours.tokens_per_response:.2g} tokens/response  CPU {ours.client_cpu_us_per_token:.0f} us/token\n"
          f"    AIPerf TTFT p50 {ai.ttft_ms_p50:7.2f} ms  ITL p50 {ai.itl_ms_p50:6.3f} ms  "
          f"{ai.output_tokens_per_s:7.1f} tok/s  e2e p50 {ai.e2e_ms_p50:7.2f} ms  "
          f"in flight {ai.in_flight:.2f}  stable {ai.stable} ({ai.windows} windows)  "
          f"CPU {theirs.cpu_us_per_token:.0f} us/token ({theirs.whole_cpu_us_per_token:.0f} whole run)\n"
          f"    AIPerf first byte p50 {ai.first_byte_ms_p50:7.2f} ms; "
          f"over the server's count: ITL p50 {ai.server_itl_ms_p50:6.3f} ms  "
          f"{ai.server_tokens_per_s:7.1f} tok/s\n"
          f"    ratios ours/AIPerf: TTFT {out['ttft']:.3f}x  ITL {out['itl']:.3f}x  tok/s {out['thr']:.3f}x;  "
          f"over the server's count: ITL {out['itl_server']:.3f}x  tok/s {out['thr_server']:.3f}x\n"
          f"    output tokens: {ours_count}; {ai_count}", flush=True)
    return out


def verdict(concurrency: int, pairs: list[dict]) -> list[bool]:
    """Prints the point's median ratios and the targets met/missed; returns the judged targets."""
    med = {key: _median([p[key] for p in pairs])
           for key in ("ttft", "itl", "thr", "itl_server", "thr_server", "cpu", "ai_cpu")}
    stable = all(p["ai_stable"] for p in pairs)

    def mark(ok: bool) -> str:
        return "met" if ok else "MISSED"

    judged = []
    print(f"concurrency {concurrency}: median of {len(pairs)} pair(s) (of the finite ratios)", flush=True)
    for label, key in (("TTFT p50", "ttft"), ("ITL p50", "itl"), ("output tok/s", "thr")):
        ok = _within(med[key], WITHIN_AIPERF)
        if stable:
            judged.append(ok)
        extra = f"  (over the server's count: {med[key + '_server']:.3f}x " \
                f"{mark(_within(med[key + '_server'], WITHIN_AIPERF))})" if key + "_server" in med else ""
        print(f"  {label:12s} {med[key]:.3f}x  within 10% of AIPerf: "
              f"{mark(ok) if stable else 'not judged (AIPerf unstable)'}{extra}")
    for who in ("ours", "ai"):
        ok = all(p[f"{who}_count_ok"] for p in pairs)
        judged.append(ok)
        print(f"  {'ours' if who == 'ours' else 'AIPerf':6s} output tokens within 1% of the server's count in every "
              f"run: {mark(ok)}")
    ok = med["cpu"] <= med["ai_cpu"]
    judged.append(ok)
    print(f"  client CPU per token ours {med['cpu']:.0f} us vs AIPerf {med['ai_cpu']:.0f} us "
          f"({med['cpu'] / med['ai_cpu']:.2f}x), at most AIPerf's: {mark(ok)}", flush=True)
    return judged


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--repeats", type=int, default=2, help="pairs per point (default 2)")
    parser.add_argument("--input-tokens", type=int, default=32)
    parser.add_argument("--output-tokens", type=int, default=64)
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--window", type=float, default=2.0, help="window seconds (both engines' stability)")
    parser.add_argument("--stable-windows", type=int, default=3)
    parser.add_argument("--max-windows", type=int, default=8)
    parser.add_argument("--duration", type=float, default=None,
                        help="AIPerf's profiling seconds (default 2 x stable-windows x window)")
    parser.add_argument("--aiperf", default=None, help="aiperf command (default $AIPERF, $AIPERF_VENV/bin/aiperf)")
    args = parser.parse_args()
    # a TERM (a job stopped from outside) unwinds like Ctrl-C: AIPerf's process group (its own
    # session) is killed and the server stopped on the way out
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    args.duration = args.duration or 2 * args.stable_windows * args.window
    aiperf = find_aiperf(args.aiperf)
    try:  # its version from the pip beside it (a venv's), else unknown
        version = subprocess.run([str(aiperf.parent / "pip"), "show", "aiperf"], capture_output=True, text=True,
                                 timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        version = ""
    header("streaming load generator vs AIPerf on the tiny LLM (Triton vLLM backend, HTTP generate_stream)")
    print(f"AIPerf {next((l.split()[-1] for l in version.splitlines() if l.startswith('Version')), '?')} at {aiperf}; "
          f"{args.input_tokens} input tokens, {args.output_tokens} output tokens (ignore_eos), {args.prompts} prompts; "
          f"windows {args.window:g} s, AIPerf profiles {args.duration:g} s. Same endpoint: both post the same body to "
          "/v2/models/tiny_llm/generate_stream (AIPerf through its template endpoint; it has no Triton endpoint)",
          flush=True)
    judged: list[bool] = []
    with served_tiny_llm(max(args.concurrency)) as (server, llm), \
            tempfile.TemporaryDirectory(prefix="workbench-bench-aiperf-") as scratch:
        prompts = build_prompts(ModelTokenizer(llm.path), args.prompts, Lengths(args.input_tokens),
                                Lengths(args.output_tokens), seed=1)
        inputs = write_inputs(Path(scratch), prompts)
        for concurrency in args.concurrency:
            print(f"\n-- concurrency {concurrency} --", flush=True)
            pairs = [pair(server, aiperf, llm, prompts, inputs, Path(scratch), concurrency, args, k)
                     for k in range(args.repeats)]
            judged += verdict(concurrency, pairs)
    print(f"\n{sum(judged)} of {len(judged)} judged targets met", flush=True)


if __name__ == "__main__":
    main()
