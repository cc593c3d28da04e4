"""FAKE vLLM Neuron engine start, for its CPU compilation mode only: NOT the AWS plugin.

What it accepts and refuses, each from the SDK's vLLM Neuron docs (SDK = aws-neuron/aws-neuron-sdk
@ 81ce03ae):

* ``VLLM_NEURON_CPU_COMPILE=1`` compiles the graphs without executing them (SDK vllm-neuron/docs/
  design/compilation/cpu_compilation.md, first paragraph).
* without ``NEURON_PLATFORM_TARGET_OVERRIDE`` it is refused (same page, "Requirements": "required
  to specify the target platform for compilation, since no hardware is present to auto-detect it").
  The real plugin's error text is in no source read; the fake's message is that sentence.
* an override that is not one of neuronx-cc's ``--target`` choices is refused (same, "Valid list of
  target values ... --target flag ... neuronx-cc compile --help"); the choices are the CLI
  reference's inf2/trn1/trn1n/trn2 (SDK compiler/neuronx-cc/api-reference-guide/index.rst:85-94)
  plus trn3 (NEURON_PLATFORM_TARGET_OVERRIDE trn3|gen4, SDK nki/api/nki/__init__.py).
* with ``VLLM_NEURON_CPU_MODE`` as well it is refused (same, "Requirements": "cannot be enabled
  together").
* a speculative_config is refused (same, "Limitations").
* the NEFFs go to ``$VLLM_CACHE_ROOT/neuron/compile_cache/<hash>/`` (default ``~/.cache/vllm``) and,
  with ``NEURON_LIBTORCH_REMOTE_CACHE``, to ``$NEURON_LIBTORCH_REMOTE_CACHE/<hash>/`` (SDK
  vllm-neuron/docs/design/compilation/compilation_cache.md, "Cache Tiers"). The fake writes one
  placeholder file per decode bucket there (not a NEFF: a JSON line naming the graph).
* inference in this mode is refused ("You cannot run inference or validate numerical outputs in
  this mode", cpu_compilation.md "How It Works").

Nothing here says anything about Neuron performance.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path

COMPILER_TARGETS = ("inf2", "trn1", "trn1n", "trn2", "trn3")
ON = ("1", "true", "True")


class FakeCpuCompiledEngine:
    """The engine after a CPU compile: its NEFFs are in the cache; it serves nothing."""

    def __init__(self, target: str, neffs: list[Path]) -> None:
        self.target, self.neffs = target, neffs

    def generate(self, *args, **kwargs):
        raise RuntimeError("FAKE vLLM Neuron: VLLM_NEURON_CPU_COMPILE=1 only compiles graphs; inference cannot run "
                           "in this mode")


def start_engine(environ: Mapping[str, str], engine_args: Mapping[str, object]) -> FakeCpuCompiledEngine:
    """Start vLLM Neuron under ``environ`` with ``engine_args`` (model.json's) in CPU compile mode."""
    if environ.get("VLLM_NEURON_CPU_COMPILE") not in ON:
        raise RuntimeError("FAKE vLLM Neuron: only VLLM_NEURON_CPU_COMPILE=1 is modelled; without it a Neuron device "
                           "is needed")
    if environ.get("VLLM_NEURON_CPU_MODE") in ON:
        raise RuntimeError("FAKE vLLM Neuron: VLLM_NEURON_CPU_COMPILE and VLLM_NEURON_CPU_MODE cannot be enabled "
                           "together")
    target = environ.get("NEURON_PLATFORM_TARGET_OVERRIDE")
    if not target:
        raise RuntimeError("FAKE vLLM Neuron: NEURON_PLATFORM_TARGET_OVERRIDE is required to specify the target "
                           "platform for compilation, since no hardware is present to auto-detect it")
    if target not in COMPILER_TARGETS:
        raise RuntimeError(f"FAKE vLLM Neuron: NEURON_PLATFORM_TARGET_OVERRIDE={target} is not a neuronx-cc --target "
                           f"choice ({', '.join(COMPILER_TARGETS)})")
    if engine_args.get("speculative_config"):
        raise RuntimeError("FAKE vLLM Neuron: speculative decoding is not supported with VLLM_NEURON_CPU_COMPILE")
    key = hashlib.sha256(json.dumps([target, dict(engine_args)], sort_keys=True).encode()).hexdigest()[:16]
    root = environ.get("VLLM_CACHE_ROOT") or os.path.expanduser("~/.cache/vllm")
    places = [Path(root) / "neuron" / "compile_cache" / key]
    if environ.get("NEURON_LIBTORCH_REMOTE_CACHE"):
        places.append(Path(environ["NEURON_LIBTORCH_REMOTE_CACHE"]) / key)
    config = engine_args.get("additional_config") or {}
    buckets = (config.get("neuron_config", {}) if isinstance(config, dict) else {}).get("num_seqs_buckets") \
        or [engine_args.get("max_num_seqs") or 1]
    neffs = []
    for place in places:
        place.mkdir(parents=True, exist_ok=True)
        for seqs in buckets:
            neff = place / f"decode_seqs{seqs}.neff"
            neff.write_text(json.dumps({"fake": True, "target": target, "num_seqs": seqs}) + "\n")
            neffs.append(neff)
    return FakeCpuCompiledEngine(target, neffs)
