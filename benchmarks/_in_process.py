"""The TorchScript file timed in-process: in this process (`in_process`), or in a new Python
process kept for several timings (`FreshProcess`, which runs this file). Only torch and numpy are
imported, so the child is what a user's own script would be.

Why a new process: the large MLP (~100 MB of weights read per call) is memory-bound, and the
same call varies from one process to the next with where its weights land, so a served process
(the backend stub, new at every load) is paired with a new in-process one, not with this one.
Why kept: on a shared VM the same call's speed drifts over seconds (and differs between vCPUs),
so a served measurement is bracketed by in-process timings just before and just after it, in the
same child (`FreshProcess.time`).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch


def _warm(module, x: torch.Tensor, calls: int) -> None:
    """``calls`` untimed calls: TorchScript's profiling runs, and the weights brought in."""
    with torch.inference_mode():
        for _ in range(calls):
            module(x)


def _time_calls(module, x: torch.Tensor, seconds: float, idle_us: float = 0.0, warmup: int = 5) -> dict:
    """Call ``module(x)`` for ``seconds`` after ``warmup`` calls; ``idle_us``: asleep that long
    before each call, as a served model's thread waits between requests."""
    _warm(module, x, warmup)
    with torch.inference_mode():
        latencies, idled = [], 0
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            if idle_us:
                t0 = time.perf_counter_ns()
                time.sleep(idle_us / 1e6)
                idled += time.perf_counter_ns() - t0
            t0 = time.perf_counter_ns()
            module(x)
            latencies.append(time.perf_counter_ns() - t0)
    total_s = sum(latencies) / 1e9
    return {"throughput": len(latencies) * x.shape[0] / total_s,
            "p50_us": statistics.median(latencies) / 1000.0, "calls": len(latencies),
            "idle_us": idled / len(latencies) / 1000.0}


def _load(artifact: Path, threads: int):
    torch.set_num_threads(threads)
    return torch.jit.load(str(artifact)).eval()


def in_process(artifact: Path, batch: np.ndarray, *, seconds: float = 3.0, threads: int = 1) -> dict:
    """Time the TorchScript file called directly: calls/s x batch, and the median call, under
    ``inference_mode`` as the generated model.py calls it."""
    return _time_calls(_load(artifact, threads), torch.from_numpy(batch), seconds, warmup=20)


def bracket(before: dict, after: dict) -> dict:
    """Two in-process timings around a served one, as one: the mean call time and the mean p50."""
    ms = (1 / before["throughput"] + 1 / after["throughput"]) / 2
    return {"throughput": 1 / ms, "p50_us": (before["p50_us"] + after["p50_us"]) / 2,
            "calls": before["calls"] + after["calls"], "drift": after["throughput"] / before["throughput"]}


class FreshProcess:
    """The TorchScript file loaded once in a new Python process, timed on request: ``time(batch,
    seconds, idle_us)`` returns what `in_process` does. ``cpu``: pin the child to that CPU."""

    def __init__(self, artifact: Path, inputs: dict[int, np.ndarray], *, threads: int = 1,
                 cpu: int | None = None) -> None:
        self._scratch = tempfile.TemporaryDirectory(prefix="workbench-bench-")
        arrays = Path(self._scratch.name) / "inputs.npz"
        np.savez(arrays, **{str(batch): x for batch, x in inputs.items()})
        self._child = subprocess.Popen(
            [sys.executable, __file__, str(artifact), str(arrays), str(threads), "" if cpu is None else str(cpu)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self._answer()  # the child's first line: loaded and warm

    def _ask(self, line: str) -> str:
        self._child.stdin.write(line + "\n")
        self._child.stdin.flush()
        return self._answer()

    def _answer(self) -> str:
        answer = self._child.stdout.readline()
        if not answer:
            self._child.wait()
            raise RuntimeError(f"in-process timing failed (exit {self._child.returncode}):\n"
                               f"{self._child.stderr.read()[-2000:]}")
        return answer

    def time(self, batch: int, seconds: float, idle_us: float = 0.0) -> dict:
        return json.loads(self._ask(f"{batch} {seconds} {idle_us}"))

    def close(self) -> None:
        if self._child.poll() is None:
            self._child.stdin.close()
            try:
                self._child.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._child.kill()
                self._child.wait()
        self._child.stdout.close()
        self._child.stderr.close()
        self._scratch.cleanup()

    def __enter__(self) -> "FreshProcess":
        return self

    def __exit__(self, *_exc) -> None:
        self.close()


def _serve_timings(artifact: str, arrays: str, threads: str, cpu: str) -> None:
    """The child: load once and say so ("{}"), then answer each stdin line BATCH SECONDS IDLE_US
    with one JSON line."""
    if cpu:
        os.sched_setaffinity(0, {int(cpu)})
    module = _load(Path(artifact), int(threads))
    with np.load(arrays) as loaded:
        tensors = {int(batch): torch.from_numpy(loaded[batch]) for batch in loaded.files}
    for x in tensors.values():
        _warm(module, x, 20)
    print("{}", flush=True)
    for line in sys.stdin:
        batch, seconds, idle_us = line.split()
        print(json.dumps(_time_calls(module, tensors[int(batch)], float(seconds), float(idle_us))), flush=True)


if __name__ == "__main__":  # FreshProcess's child: ARTIFACT INPUTS.npz THREADS CPU (empty: unpinned)
    _serve_timings(*sys.argv[1:5])
