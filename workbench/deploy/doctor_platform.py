"""`workbench doctor`'s platform check: this host's OS and Python against what the installed Neuron SDK
documents (`workbench.releases`: each stack's Python range and supported OS, with their sources).

A Python outside the SDK's range fails (its wheels are not built for it); an OS outside the documented
list is reported, not failed (the SDK may still run there, it just does not say so).
"""

from __future__ import annotations

import platform
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from workbench.neuron_libraries import torch_neuronx_line
from workbench.releases import STACKS, SUPPORTED_OS, Stack

__all__ = ["host_os", "installed_stack", "platform_check"]

# installed distribution -> the stack whose pins install it (torch-neuronx: by its line, see installed_stack)
_STACK_OF_PACKAGE = {
    "torch-neuron": "inf1-pytorch",
    "tensorflow-neuron": "inf1-tensorflow",
    "tensorflow-neuronx": "neuronx-tensorflow",
    "transformers-neuronx": "neuronx-transformers_neuronx",
}


class _Report(Protocol):
    def add(self, name: str, status: str, detail: str) -> object: ...


def host_os(os_release: str | Path = "/etc/os-release") -> str:
    """``"<id> <version_id>"`` from os-release (e.g. ``ubuntu 24.04``); ``unknown`` without one."""
    fields: dict[str, str] = {}
    try:
        for line in Path(os_release).read_text().splitlines():
            key, sep, value = line.partition("=")
            if sep:
                fields[key.strip()] = value.strip().strip('"')
    except OSError:
        return "unknown"
    return f"{fields.get('ID', 'unknown')} {fields.get('VERSION_ID', '')}".strip()


def installed_stack(packages: Mapping[str, str | None]) -> tuple[str, Stack] | None:
    """(package + version, stack) of the framework SDK installed here, None when there is none."""
    by_key = {s.key: s for s in STACKS}
    version = packages.get("torch-neuronx")
    if version:
        line = torch_neuronx_line(version)
        return f"torch-neuronx {version}", by_key["torchneuron-pytorch" if line == "torchneuron" else "xla-pytorch"]
    for name, key in _STACK_OF_PACKAGE.items():
        if packages.get(name):
            return f"{name} {packages[name]}", by_key[key]
    return None


def platform_check(
    report: _Report,
    packages: Mapping[str, str | None],
    *,
    os_release: str | Path = "/etc/os-release",
    python: str | None = None,
) -> None:
    """Add the ``platform`` check: OS and Python here, and whether the installed SDK supports them."""
    python = python or ".".join(platform.python_version_tuple()[:2])
    here = f"{host_os(os_release)}, Python {python}"
    found = installed_stack(packages)
    if found is None:
        report.add("platform", "info", f"{here}; no Neuron framework SDK installed to compare with")
        return
    package, stack = found
    problems = []
    if python not in stack.pythons:
        problems.append(
            f"{package} wheels are built for Python {stack.python_range.value} "
            f"[{stack.python_range.cite()}], not {python}"
        )
    supported = SUPPORTED_OS.get(stack.key)
    os_note = ""
    if supported is not None and host_os(os_release) not in [o.strip() for o in supported.value.split(",")]:
        os_note = f"; the SDK documents {package} for {supported.value} [{supported.cite()}], not {host_os(os_release)}"
    if problems:
        report.add("platform", "fail", f"{here}: " + "; ".join(problems) + os_note)
    else:
        report.add(
            "platform",
            "ok" if not os_note else "info",
            f"{here}: {package} supports Python {stack.python_range.value}" + os_note,
        )
