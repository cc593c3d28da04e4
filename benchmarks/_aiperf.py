"""AIPerf (PyPI ``aiperf``, NVIDIA's LLM benchmark) driven against Triton's vLLM backend, and its
exports read into the figures the streaming engine reports.

AIPerf 0.13.0 speaks HTTP only and has no Triton/KServe endpoint type. Its ``template`` endpoint
sends a Jinja-rendered JSON body to any path and reads each server-sent event's text through a
JMESPath field, so it can drive ``POST /v2/models/<model>/generate_stream`` with the body our HTTP
client sends (``text_input``, ``stream``, ``sampling_parameters`` as JSON text with ``max_tokens``
and ``ignore_eos``, ``return_num_output_tokens``) and read ``text_output``: the same wire.

What differs is counting. AIPerf counts a request's output tokens by re-tokenizing the text it
received with ``--tokenizer`` (its ``--use-server-token-count`` reads OpenAI ``usage`` fields, which
Triton's generate_stream does not send), and takes a response with an empty ``text_output`` for
no response. Ours counts the backend's own ``num_output_tokens``. So `AiperfPoint` keeps both:
AIPerf's figures as it reports them, and the same request times over the tokens the server made.

AIPerf is kept out of the project's environment (it pins its own transformers): it lives in its
own venv, made by ``benchmarks/aiperf_env.sh``; `find_aiperf` looks for it.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import psutil

from workbench.measure.engine.stats import is_stable, percentile
from workbench.measure.engine.streaming import Prompt

__all__ = ["AIPERF_VENV", "find_aiperf", "AiperfPoint", "TreeCpu", "write_inputs", "aiperf_command",
           "read_export", "run_aiperf"]

AIPERF_VENV = Path(os.environ.get("AIPERF_VENV", "/work/aiperf-venv"))
SUMMARY_FILE = "profile_export_aiperf.json"
RECORDS_FILE = "profile_export.jsonl"
# The body our HttpStreamClient sends, as AIPerf's template endpoint renders it per request
# (``text``: the prompt, ``max_tokens``: the dataset entry's output_length; autoescape is on, so
# every value goes through tojson; sampling_parameters is a JSON object sent as JSON text).
TEMPLATE = ('{"text_input": {{ text|tojson }}, "stream": {{ stream|tojson }}, '
            '"sampling_parameters": {{ {"max_tokens": max_tokens, "ignore_eos": true}|tojson|tojson }}, '
            '"return_num_output_tokens": true}\n')


def find_aiperf(given: str | None = None) -> Path:
    """The ``aiperf`` command: ``given``, else ``$AIPERF``, else ``$AIPERF_VENV/bin/aiperf``."""
    named = given or os.environ.get("AIPERF")
    path = Path(named) if named else AIPERF_VENV / "bin" / "aiperf"
    if not path.is_file():
        found = shutil.which(str(path)) if named else None
        if found is None:
            raise SystemExit(f"no aiperf at {path}: run `bash benchmarks/aiperf_env.sh` (makes {AIPERF_VENV}) "
                             "or pass --aiperf / set $AIPERF")
        path = Path(found)
    return path


def write_inputs(folder: Path, prompts: Sequence[Prompt]) -> tuple[Path, Path]:
    """AIPerf's single_turn dataset (our prompts, their max_tokens as output_length) and the
    request template, written into ``folder``; returns (dataset, template)."""
    folder.mkdir(parents=True, exist_ok=True)
    dataset, template = folder / "prompts.jsonl", folder / "generate_stream.j2"
    dataset.write_text("".join(json.dumps({"text": p.text, "output_length": p.max_tokens}) + "\n" for p in prompts))
    template.write_text(TEMPLATE)
    return dataset, template


def aiperf_command(aiperf: Path, http_url: str, model: str, *, dataset: Path, template: Path, tokenizer: Path,
                   concurrency: int, duration_s: float, warmup_requests: int, artifacts: Path,
                   seed: int = 0) -> list[str]:
    """One AIPerf profile of ``model``'s generate_stream at ``concurrency``: ``warmup_requests``
    first, then new requests for ``duration_s`` seconds, the last ones waited for."""
    return [str(aiperf), "profile", "-m", model, "--url", http_url, "--endpoint-type", "template",
            "--custom-endpoint", f"/v2/models/{model}/generate_stream", "--streaming",
            "--extra-inputs", f"payload_template:{template}", "--extra-inputs", "response_field:text_output",
            "--input-file", str(dataset), "--custom-dataset-type", "single_turn",
            "--dataset-sampling-strategy", "sequential", "--tokenizer", str(tokenizer),
            "--concurrency", str(concurrency), "--benchmark-duration", f"{duration_s:g}",
            "--benchmark-grace-period", "60", "--warmup-request-count", str(warmup_requests),
            "--artifact-dir", str(artifacts), "--ui-type", "none", "--random-seed", str(seed)]


class TreeCpu:
    """The CPU time of a process and every descendant, sampled on the wall clock (AIPerf runs as
    a tree: controller, dataset, timing, workers, record processors). A pid's last sample stays
    counted after it exits, so the sum is the tree's CPU so far (to within one interval)."""

    def __init__(self, pid: int, every_s: float = 0.2) -> None:
        self.root, self.every = psutil.Process(pid), every_s
        self.last: dict[int, float] = {}
        self.samples: list[tuple[int, float]] = []  # (time.time_ns(), tree CPU seconds)
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True, name="aiperf-cpu")

    def _sample(self) -> None:
        try:
            processes = [self.root, *self.root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return
        for process in processes:
            try:
                times = process.cpu_times()
            except psutil.NoSuchProcess:
                continue
            self.last[process.pid] = times.user + times.system
        self.samples.append((time.time_ns(), sum(self.last.values())))

    def _run(self) -> None:
        while not self.stopping.wait(self.every):
            self._sample()

    def __enter__(self) -> "TreeCpu":
        self._sample()
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stopping.set()
        self.thread.join()

    def at(self, wall_ns: int) -> float:
        """The tree's CPU seconds at ``wall_ns`` (time.time_ns), interpolated between samples."""
        stamps = np.array([s[0] for s in self.samples], dtype=np.float64)
        return float(np.interp(float(wall_ns), stamps, [s[1] for s in self.samples]))


@dataclass(frozen=True)
class AiperfPoint:
    """One AIPerf run's profiling phase, as AIPerf reports it and over the server's token count.

    ``ttft_ms_p50``, ``itl_ms_p50``, ``e2e_ms_p50``, ``output_tokens_per_s``: AIPerf's own summary
    (its tokens are its tokenizer's count of the text received; its TTFT runs to the first response
    whose text is not empty, ``first_byte_ms_p50`` to the response's first byte); ``in_flight``: its mean requests
    in flight over the phase (its effective_concurrency: below the concurrency asked when it sends
    late). ``server_itl_ms_p50`` and ``server_tokens_per_s``: the same requests' times over
    ``max_tokens`` each (what the server generated under ignore_eos; checked against its counter
    by the caller). ``stable``: the last
    ``stable_windows`` windows of the profiling phase agree within the stability, the rule our
    engine stops on (a request counts in the window in which it ended). Token totals span every
    request, warm-up included, as the server's counter does."""

    requests: int
    seconds: float
    ttft_ms_p50: float
    itl_ms_p50: float
    e2e_ms_p50: float
    first_byte_ms_p50: float
    in_flight: float
    output_tokens_per_s: float
    server_itl_ms_p50: float
    server_tokens_per_s: float
    stable: bool
    windows: int
    total_requests: int
    total_tokens: int
    total_max_tokens: int
    start_ns: int
    end_ns: int
    ttft_ms_p99: float = math.nan  # its summary's (numpy's interpolated percentile)
    itl_ms_p99: float = math.nan
    ttfts_ms: tuple[float, ...] = ()  # its profiled requests' own values, for percentiles taken our way
    itls_ms: tuple[float, ...] = ()
    tokens_per_request: float = math.nan  # its count (re-tokenized text) per profiled request
    asked_per_request: float = math.nan  # what the server generated per profiled request (max_tokens)


def _records(path: Path) -> list[dict]:
    out = []
    for line in path.read_text().splitlines():
        if line.strip():
            out.append(json.loads(line))
    return out


def _value(record: dict, metric: str) -> float:
    entry = record["metrics"].get(metric)
    return math.nan if entry is None else float(entry["value"])


def read_export(artifacts: Path, *, window_s: float, stability: float, stable_windows: int) -> AiperfPoint:
    """AIPerf's figures from ``artifacts``: its summary JSON, its per-request JSONL, and its
    inputs.json (the body it sent per conversation, for each request's max_tokens)."""
    summary = json.loads((artifacts / SUMMARY_FILE).read_text())
    records = [r for r in _records(artifacts / RECORDS_FILE) if not r.get("error")]
    asked = _asked(artifacts)
    profiled = [r for r in records if r["metadata"]["benchmark_phase"] == "profiling"]
    if not profiled:
        raise ValueError(f"AIPerf's {artifacts / RECORDS_FILE} holds no profiling-phase request")
    start = min(r["metadata"]["request_start_ns"] for r in profiled)
    end = max(r["metadata"]["request_end_ns"] for r in profiled)
    seconds = (end - start) / 1e9
    wanted = [asked[r["metadata"]["conversation_id"]] for r in profiled]
    gaps = sorted((_value(r, "request_latency") - _value(r, "time_to_first_token")) / (n - 1)
                  for r, n in zip(profiled, wanted) if n > 1)
    windows = _windows(profiled, start, end, window_s)
    return AiperfPoint(
        requests=len(profiled), seconds=seconds, ttft_ms_p50=float(summary["time_to_first_token"]["p50"]),
        itl_ms_p50=float(summary["inter_token_latency"]["p50"]), e2e_ms_p50=float(summary["request_latency"]["p50"]),
        in_flight=float(summary["effective_concurrency"]["avg"]),
        first_byte_ms_p50=float(summary["http_req_waiting"]["p50"]),
        output_tokens_per_s=float(summary["output_token_throughput"]["avg"]),
        server_itl_ms_p50=percentile(gaps, 50), server_tokens_per_s=sum(wanted) / seconds if seconds else math.nan,
        stable=is_stable([w[0] for w in windows], [w[1] for w in windows], stability=stability,
                         windows=stable_windows),
        windows=len(windows), total_requests=len(records),
        total_tokens=int(sum(_value(r, "output_sequence_length") for r in records)),
        total_max_tokens=sum(asked[r["metadata"]["conversation_id"]] for r in records), start_ns=start, end_ns=end,
        ttft_ms_p99=float(summary["time_to_first_token"]["p99"]),
        itl_ms_p99=float(summary["inter_token_latency"]["p99"]),
        ttfts_ms=tuple(_value(r, "time_to_first_token") for r in profiled),
        itls_ms=tuple(_value(r, "inter_token_latency") for r in profiled),
        tokens_per_request=float(np.mean([_value(r, "output_sequence_length") for r in profiled])),
        asked_per_request=float(np.mean(wanted)))


def _asked(artifacts: Path) -> dict[str, int]:
    """Conversation id -> the max_tokens AIPerf sent for it (from its inputs.json payloads)."""
    sent = json.loads((artifacts / "inputs.json").read_text())
    out = {}
    for entry in sent["data"]:
        (payload,) = entry["payloads"]
        out[entry["session_id"]] = int(json.loads(payload["sampling_parameters"])["max_tokens"])
    return out


def _windows(records: list[dict], start: int, end: int, window_s: float) -> list[tuple[float, float]]:
    """(AIPerf's output tokens/s, mean TTFT) per whole window of the profiling phase."""
    step = int(window_s * 1e9)
    out = []
    for left in range(start, end - step + 1, step):
        inside = [r for r in records if left < r["metadata"]["request_end_ns"] <= left + step]
        tokens = sum(_value(r, "output_sequence_length") for r in inside)
        ttfts = [_value(r, "time_to_first_token") for r in inside]
        out.append((tokens / window_s, float(np.mean(ttfts)) if ttfts else math.nan))
    return out


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    """Send ``sig`` to process group ``pgid``; a group that is gone already has nothing left to end."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:  # every member exited and the leader was reaped (the interrupt came late)
        pass


def end_group(process: subprocess.Popen, grace_s: float = 10.0) -> None:
    """End ``process`` and its process group (it was started with ``start_new_session``): SIGTERM,
    ``grace_s`` for the leader to exit, then SIGKILL. Never raises for a group that is gone, so the
    interrupt that called it is the error the caller sees."""
    _signal_group(process.pid, signal.SIGTERM)
    try:
        process.wait(grace_s)
    except subprocess.TimeoutExpired:
        _signal_group(process.pid, signal.SIGKILL)
        process.wait()


def run_aiperf(command: list[str], log: Path) -> TreeCpu:
    """Run AIPerf to the end (its output into ``log``), sampling its process tree's CPU."""
    with open(log, "w") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            with TreeCpu(process.pid) as cpu:
                code = process.wait()
        except BaseException:  # interrupted: its whole process group goes (it runs in its own session)
            end_group(process)
            raise
    if code != 0:
        raise RuntimeError(f"aiperf exited {code}; its output: {log}")
    return cpu
