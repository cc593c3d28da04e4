"""The LLM capacity search against the full LLM grid on the tiny LLM, in one run on one server
(issue 46, item 3): the same answer, or one the grid's own intervals cannot separate from it, in
at most a quarter of the grid's wall time?

The tiny LLM is generated as notebook 09 generates it (`workbench.tutorial.llm`) and served by a
real tritonserver with Triton's real vLLM backend (started and stopped here). The grid measures
every point of ``--max-num-seqs`` x ``--concurrency`` until stable (the LLM sweep's default
windows, `LLM_SETTINGS`, unless ``--window`` is given); then ``search="capacity"`` bisects each
variant's loads, each level measured until the effort rule (``--min-windows`` to
``--max-windows`` windows of the same length) decides it against the SLO. Each run loads every
variant it measures (a vLLM engine start), as a user's run would.

The SLO: ``--slo-ttft-ms`` and ``--slo-itl-ms`` (default 100 ms, loose: the TTFT limit decides);
without a TTFT limit it is set from the grid, the median of its points' TTFT p99, so about half the
loads meet it on whatever machine runs this (the grid's rows do not depend on the SLO; its answer
is taken under the same SLO as the search's).

Printed: each run's wall time, its engine-load time and the rest (measuring), its points; each
answer with its interval; the verdict on both targets; the machine's load average before and
after. Not a test: it asserts nothing.

Run: python benchmarks/llm_capacity_vs_grid.py [--concurrency 1 2 4 8 16 32] [--max-num-seqs 1 4]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from _common import header  # benchmarks/_common.py: the title line with the machine and its load
from workbench.generate import render, write
from workbench.measure.engine.streaming import Slo
from workbench.measure.llm import LlmPlan, LlmSearch, LlmSweepResult, run_llm_sweep
from workbench.measure.llm.run import LLM_SETTINGS
from workbench.server import TritonServer
from workbench.tutorial import llm as tutorial_llm

TARGET_RATIO = 0.25  # issue 46 item 3: at most a quarter of the grid's wall time


def _timed(label: str, call) -> tuple[LlmSweepResult, float, float]:
    """The run ``call`` makes, its wall time, and the part of it that went to measuring (not to
    engine loads)."""
    started = time.perf_counter()
    result = call()
    wall = time.perf_counter() - started
    loads = sum((t or {}).get("load_s", 0.0) for t in (result.record.variant_times or {}).values())
    print(f"{label:<9} {len(result.frame):>2} point(s), {wall:6.1f} s wall: engine loads {loads:6.1f} s, "
          f"the rest {wall - loads:6.1f} s; status {result.status}", flush=True)
    return result, wall, wall - loads


def _answer_text(row) -> str:
    if row is None:
        return "none meets the SLO"
    low, high = row["output_tokens_per_s_low"], row["output_tokens_per_s_high"]
    return (f"{row['variant']} at concurrency {int(row['concurrency'])}, {row['output_tokens_per_s']:.1f} output "
            f"tok/s [{low:.1f}, {high:.1f}], TTFT p99 {row['ttft_p99_ms']:.1f} ms, ITL p99 {row['itl_p99_ms']:.2f} ms")


def _same_or_inseparable(grid: LlmSweepResult, best, grid_best) -> tuple[bool, str]:
    """The search's answer is the grid's, or the grid's own intervals of the two points overlap."""
    if best is None or grid_best is None:
        return best is None and grid_best is None, "both name none" if best is None else "one names none"
    key = (best["variant"], int(best["concurrency"]))
    if key == (grid_best["variant"], int(grid_best["concurrency"])):
        return True, "the grid's answer"
    rows = grid.frame.set_index(["variant", "concurrency"])
    if key not in rows.index:
        return False, "a point the grid did not measure"
    theirs = rows.loc[key]
    overlap = theirs["output_tokens_per_s_high"] >= grid_best["output_tokens_per_s_low"]
    text = (f"the grid read it at {theirs['output_tokens_per_s']:.1f} [{theirs['output_tokens_per_s_low']:.1f}, "
            f"{theirs['output_tokens_per_s_high']:.1f}]: " + ("its interval overlaps the grid's best" if overlap
                                                              else "below the grid's best, separable"))
    return bool(overlap), text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--max-num-seqs", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32])
    parser.add_argument("--input-tokens", type=int, default=16)
    parser.add_argument("--output-tokens", type=int, default=8)
    parser.add_argument("--window", type=float, default=None, help="window seconds (default: LLM_SETTINGS')")
    parser.add_argument("--min-windows", type=int, default=3)
    parser.add_argument("--max-windows", type=int, default=10)
    parser.add_argument("--slo-ttft-ms", type=float, default=None, help="default: the grid's median TTFT p99")
    parser.add_argument("--slo-itl-ms", type=float, default=100.0, help="default 100: the TTFT limit decides")
    args = parser.parse_args()

    llm = tutorial_llm.tiny_llm()
    here = tutorial_llm.vllm_here()
    if llm is None or not here.ready:
        raise SystemExit(here.message if llm is not None else "the tiny LLM needs transformers")
    settings = LLM_SETTINGS if args.window is None else replace(LLM_SETTINGS, window_s=args.window)
    search = LlmSearch("capacity", min_windows=args.min_windows, max_windows=args.max_windows)
    header("LLM capacity search vs the full grid, tiny LLM")
    print(f"plan: max_num_seqs {args.max_num_seqs} x concurrency {args.concurrency}, "
          f"{args.input_tokens} input / {args.output_tokens} output tokens; windows {settings.window_s:g} s "
          f"(grid: until {settings.stable_windows} agree, at most {settings.max_windows}, {settings.time_limit_s:g} s; "
          f"capacity: {args.min_windows}-{args.max_windows} until decided)", flush=True)
    with tempfile.TemporaryDirectory(prefix="wb-llm-capacity-") as scratch:
        root = Path(scratch)
        model = render(tutorial_llm.tiny_llm_settings(llm.path, root / "repository", "cpu"))
        write(model)
        server = TritonServer(root / "repository", vllm_backend=here.backend_dir, vllm_python=here.python,
                              pytorch_backend=False)
        try:
            server.start(timeout=180)
            server.load("tiny_llm", timeout=900)
            plan = LlmPlan(max_num_seqs=tuple(args.max_num_seqs), concurrency=tuple(args.concurrency),
                           input_tokens=args.input_tokens, output_tokens=args.output_tokens,
                           slo=Slo(ttft_ms=args.slo_ttft_ms, itl_ms=args.slo_itl_ms), prompts=16)
            grid, grid_s, grid_rest = _timed("grid", lambda: run_llm_sweep(
                plan, server, model.dest, out_dir=root / "grid", settings=settings, restore=False))
            ttft = args.slo_ttft_ms or round(statistics.median(grid.frame["ttft_p99_ms"].astype(float)), 1)
            slo = Slo(ttft_ms=ttft, itl_ms=args.slo_itl_ms)
            print(f"SLO: TTFT p99 <= {ttft:g} ms" + ("" if args.slo_ttft_ms else " (the grid's median TTFT p99)")
                  + f" and ITL p99 <= {args.slo_itl_ms:g} ms", flush=True)
            found, found_s, found_rest = _timed("capacity", lambda: run_llm_sweep(
                replace(plan, slo=slo), server, model.dest, out_dir=root / "capacity", settings=settings,
                restore=False, search=search))
        finally:
            server.stop()
    grid_answer, answer = grid.answer(slo), found.answer()
    print(f"grid's best:     {_answer_text(grid_answer.best)}\ncapacity's best: {_answer_text(answer.best)}; "
          f"confidence: {answer.confidence.statement}")
    for line in found.search_lines():
        print(f"  {line}")
    same, why = _same_or_inseparable(grid, answer.best, grid_answer.best)
    ratio = found_s / grid_s
    print(f"answer: {'met' if same else 'missed'} ({why})\nwall time: {ratio:.2f}x the grid's "
          f"({'met' if ratio <= TARGET_RATIO else 'missed'}: target <= {TARGET_RATIO:g}x); "
          f"without the engine loads {found_rest / grid_rest:.2f}x\nload average after: "
          + ", ".join(f"{x:.1f}" for x in os.getloadavg()), flush=True)


if __name__ == "__main__":
    main()
