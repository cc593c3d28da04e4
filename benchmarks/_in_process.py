"""The TorchScript file timed in-process: in this process (`in_process`), or in a new Python
process (`in_fresh_process`, which runs this file). Only torch and numpy are imported, so the
child is what a user's own script would be.

Why a fresh process: the large MLP (~100 MB of weights read per call) is memory-bound, and the
same call varies from one process to the next with where its weights land, so a served process
(the backend stub, new at every load) is paired with a new in-process one, not with this one.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch


def in_process(artifact: Path, batch: np.ndarray, *, seconds: float = 3.0, threads: int = 1,
               idle_us: float = 0.0) -> dict:
    """Time the TorchScript file called directly: calls/s x batch, and the median call.
    ``inference_mode``, as the generated model.py calls it. ``idle_us``: sleep that long before
    each call, as a served model's thread waits between requests (a VM's idle CPU wakes slower)."""
    torch.set_num_threads(threads)
    module = torch.jit.load(str(artifact)).eval()
    x = torch.from_numpy(batch)
    with torch.inference_mode():
        for _ in range(20):
            module(x)
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
    return {"throughput": len(latencies) * batch.shape[0] / total_s,
            "p50_us": statistics.median(latencies) / 1000.0, "calls": len(latencies),
            "idle_us": idled / len(latencies) / 1000.0}


def in_fresh_process(artifact: Path, inputs: dict[int, np.ndarray], *, seconds: float, threads: int = 1,
                     env: dict[str, str] | None = None, idle_us: dict[int, float] | None = None) -> dict[int, dict]:
    """`in_process` for each batch size in ``inputs``, in one new Python process (``env``: its
    environment, default this one's; ``idle_us``: the idle gap per batch size, default none)."""
    with tempfile.TemporaryDirectory(prefix="workbench-bench-") as scratch:
        arrays = Path(scratch) / "inputs.npz"
        np.savez(arrays, **{str(batch): x for batch, x in inputs.items()})
        idle = json.dumps({str(batch): us for batch, us in (idle_us or {}).items()})
        done = subprocess.run([sys.executable, __file__, str(artifact), str(arrays), str(seconds), str(threads), idle],
                              capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"in-process timing failed (exit {done.returncode}):\n{done.stderr[-2000:]}")
    return {int(batch): figures for batch, figures in json.loads(done.stdout.splitlines()[-1]).items()}


if __name__ == "__main__":  # in_fresh_process's child: ARTIFACT INPUTS.npz SECONDS THREADS IDLE_JSON
    _artifact, _arrays, _seconds, _threads, _idle = sys.argv[1:]
    _idle_us = json.loads(_idle)
    with np.load(_arrays) as _loaded:
        print(json.dumps({batch: in_process(Path(_artifact), _loaded[batch], seconds=float(_seconds),
                                            threads=int(_threads), idle_us=_idle_us.get(batch, 0.0))
                          for batch in _loaded.files}))
