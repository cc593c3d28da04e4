"""What a vLLM variant load leaves running after it returns: the server's process group's CPU use
until it goes quiet, and its idle use after, per load of alternating variants of the tiny LLM.

The LLM sweep measures a variant's first point right after its load. If the previous variant's
engine (its stub, EngineCore and worker) is still exiting then, the point shares the cores with
it. The sweep waits for the group to go quiet (`workbench.measure.watch.settle.wait_quiet`, as the
tensor sweep does); this prints how long that is and how busy the group was meanwhile.

The tiny LLM is generated as notebook 09 generates it and served by a real tritonserver with
Triton's real vLLM backend (started and stopped here). Printed per load: the load's own time, the
wait until quiet (the group under 5% of a CPU for 0.5 s), its busiest share, then the group's share
over 5 idle seconds. Not a test: it asserts nothing.

Run: python benchmarks/llm_load_quiet.py [--loads seqs4 seqs1 seqs4]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from _common import header  # benchmarks/_common.py: the title line with the machine and its load

from workbench.generate import render, write
from workbench.measure.llm import LlmPlan
from workbench.measure.watch.settle import busy_share, group_cpu, wait_quiet
from workbench.server import TritonServer
from workbench.tutorial import llm as tutorial_llm

IDLE_S = 5.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--loads", nargs="+", default=["seqs4", "seqs1", "seqs4"],
                        help="variants to load in turn, by max_num_seqs (default: seqs4 seqs1 seqs4)")
    args = parser.parse_args()
    wanted = [int(name.removeprefix("seqs")) for name in args.loads]
    llm = tutorial_llm.tiny_llm()
    here = tutorial_llm.vllm_here() if llm is not None else None
    if llm is None or here is None or not here.ready:
        raise SystemExit(here.message if here is not None else "the tiny LLM needs transformers")
    header("What a vLLM variant load leaves running, tiny LLM")
    with tempfile.TemporaryDirectory(prefix="wb-llm-quiet-") as scratch:
        settings = tutorial_llm.tiny_llm_settings(llm.path, Path(scratch) / "repository", "cpu")
        model = render(settings)
        write(model)
        variants = {v.max_num_seqs: v for v in LlmPlan(max_num_seqs=tuple(sorted(set(wanted)))).variants(settings)}
        server = TritonServer(Path(scratch) / "repository", vllm_backend=here.backend_dir, vllm_python=here.python,
                              pytorch_backend=False)
        try:
            server.start(timeout=180)
            pid = server.pid
            if pid is None:
                raise SystemExit("the server's process is not this one's child: its group cannot be read")
            for seqs in wanted:
                variant = variants[seqs]
                started = time.perf_counter()
                server.load("tiny_llm", config=variant.config, files=variant.load_files(), timeout=900)
                load_s = time.perf_counter() - started
                quiet = wait_quiet(pid, timeout_s=120)
                before = group_cpu(pid)
                time.sleep(IDLE_S)
                idle = busy_share(before, group_cpu(pid), IDLE_S)
                waited = f"quiet after {quiet.waited_s:4.1f} s (settled {quiet.settled}, peak {quiet.peak:.2f} CPUs, " \
                    f"{quiet.processes} processes)" if quiet is not None else "no group to read"
                print(f"{variant.label}: load {load_s:5.1f} s, then {waited}; idle {idle:.3f} CPUs over {IDLE_S:g} s",
                      flush=True)
        finally:
            server.stop()


if __name__ == "__main__":
    main()
