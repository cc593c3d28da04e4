"""``workbench cpu-compile``: the environment and command that make a vLLM Neuron model directory's
NEFFs on a CPU host (vLLM Neuron CPU compilation; `workbench.generate.vllm_backend.cpu_compile`)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from workbench.generate.vllm_backend.cpu_compile import CpuCompileError, cpu_compile_plan


def register(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "cpu-compile",
        help="print how to make a vLLM Neuron directory's NEFFs on a CPU host",
        description="Print the environment and command that make a vLLM Neuron model directory's NEFFs on a "
        "CPU host (vLLM Neuron CPU compilation); nothing is run or written.",
        allow_abbrev=False,
    )
    parser.add_argument("model_dir", help="a directory `workbench generate --backend vllm` wrote for trn2/trn3")
    parser.add_argument("--remote-cache", help="shared NFS/FSx folder for the NEFFs (NEURON_LIBTORCH_REMOTE_CACHE)")
    parser.add_argument("--cache-root", help="vLLM's cache root (VLLM_CACHE_ROOT; default ~/.cache/vllm)")
    parser.add_argument("--python", default="python3", help="the vLLM Neuron environment's interpreter")
    parser.set_defaults(func=_run)
    return parser


def _run(args: argparse.Namespace) -> int:
    try:
        plan = cpu_compile_plan(
            args.model_dir, remote_cache=args.remote_cache, cache_root=args.cache_root, python=args.python
        )
    except CpuCompileError as err:
        print(f"workbench cpu-compile: error: {err}", file=sys.stderr)
        return 2
    sys.stdout.write(plan.shell())
    return 0
