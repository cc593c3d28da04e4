"""What this machine can compile for and run: Neuron devices and cores, SDK packages, CPUs.

Nothing here imports a Neuron SDK: importing torch_neuronx without a device can start the
runtime or fail in odd ways, and a missing package should read as "install X for target Y", not
as a traceback. Package versions come from installed metadata; devices from ``/dev/neuron*`` and
``/proc/devices``; core counts from ``neuron-ls --json-output`` or, failing that, the instance-type
table (the instance type cannot be read from IMDS here, so it is an argument).
"""

from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path

from workbench.neuron_devices import driver_loaded, has_neuron_device, neuron_devices, neuron_ls, neuroncore_ids
from workbench.neuron_libraries import (
    OUT_OF_SUPPORT,
    TORCHNEURON_TARGETS,
    XLA_TARGETS,
    torch_neuronx_line,
    torch_neuronx_problem,
)
from workbench.refusals import WorkbenchError

__all__ = [
    "ENV_PREFIX",
    "MissingSDKError",
    "WrongSDKError",
    "SystemInfo",
    "TARGETS",
    "NEURON_TARGETS",
    "XLA_TARGETS",
    "TORCHNEURON_TARGETS",
    "OUT_OF_SUPPORT",
    "FRAMEWORK_TARGETS",
    "DEFAULT_LNC",
    "LNC_VALUES",
    "CORES_PER_DEVICE",
    "DEVICES_BY_INSTANCE",
    "SDK_PACKAGES",
    "TARGET_PACKAGES",
    "detect",
    "has_neuron_device",
    "neuron_devices",
    "neuron_ls",
    "neuroncore_ids",
    "torch_neuronx_line",
    "installed_versions",
    "install_hint",
    "require_sdk",
    "check_torch_neuronx_line",
    "cores_for_instance",
    "cores_per_device",
    "instance_family",
    "target_problem",
    "usable_cpu_ids",
]

# The one list of targets: every module that names targets (compile, generate, model.py, the UI,
# the tutorials) reads these. inf1 = NeuronCore-v1 (torch-neuron); inf2/trn1 = NeuronCore-v2,
# trn2 = NeuronCore-v3, trn3 = NeuronCore-v4 (``--target trn2``/``trn3`` for neuronx-cc: SDK compiler
# CLI reference; NEURON_PLATFORM_TARGET_OVERRIDE trn3|gen4: SDK nki/api/nki/__init__.py; Trainium3:
# SDK about-neuron/arch/neuron-hardware/trainium3.rst).
NEURON_TARGETS = ("inf1", "inf2", "trn1", "trn2", "trn3")
# The workbench's own environment variables all start with it (its runs folder, the vLLM environment's
# Python, the shared folder...); a lab started with the README's commands has none of them set.
ENV_PREFIX = "WORKBENCH_"
TARGETS = ("cpu", *NEURON_TARGETS)
# Which targets each framework's Neuron SDK ever supported (Neuron release manifest n2-manifest.json,
# "supported_instances"): tensorflow-neuronx lists trn1/inf2 only, transformers-neuronx trn1/inf2 only.
FRAMEWORK_TARGETS = {
    "pytorch": TARGETS,
    "tensorflow": ("cpu", "inf1", "inf2", "trn1"),
    "transformers_neuronx": ("cpu", "inf2", "trn1"),
}


def target_problem(framework: str, target: str) -> str | None:
    """Why ``framework`` cannot be served on ``target`` (None when it can or either is unknown)."""
    allowed = FRAMEWORK_TARGETS.get(framework)
    if allowed is None or target not in TARGETS or target in allowed:
        return None
    return f"{framework} runs on {'/'.join(t for t in allowed if t != 'cpu')} (or cpu), not {target}"


# Families with a logical NeuronCore config (LNC), and its default: two physical cores per logical
# core (SDK about-neuron/arch/neuron-features/logical-neuroncore-config.rst: "LNC=2 (default)", and
# ":14 LNC applies only to Trn2 and Trn3 instances"; Trainium3 "Similar to Trainium2, AWS Neuron adds
# support for LNC", trainium3.rst). Compiler ``--logical-nc-config``/``-lnc`` in {1, 2}.
DEFAULT_LNC = {"trn2": 2, "trn3": 2}
LNC_VALUES = (1, 2)

# NeuronCores per Neuron device (chip), by instance family, as the runtime numbers them (logical
# cores: trn2/trn3 at LNC=2 have 4 of their 8 physical cores). SDK about-neuron/arch/neuron-hardware/
# {inferentia,inferentia2,trainium,trainium2,trainium3}.rst ("A Trainium3 device contains eight
# NeuronCore-v4 cores").
CORES_PER_DEVICE = {"inf1": 4, "inf2": 2, "trn1": 2, "trn1n": 2, "trn2": 4, "trn3": 4}
# Instance families that are variants of a target family (network or UltraServer variants). The Trn3
# names are the runtime's and driver's (SDK src/libnrt/include/nrt/nrt.h NRT_INSTANCE_TRN3,
# NRT_INSTANCE_TRN3PDS98; EKS ultraserver-operator page "Trn3pds").
_FAMILY_OF = {
    "trn1n": "trn1",
    "trn2u": "trn2",
    "trn2n": "trn2",
    "trn3pds98": "trn3",
    "trn3pds": "trn3",
    "trn3p": "trn3",
    "trn3u": "trn3",
}

# Neuron devices per instance type; cores = devices x cores per device of the family.
# Sources: SDK about-neuron/arch/neuron-hardware/{inf1,inf2,trn1,trn2}-arch.rst; trn2n.48xlarge from
# the neuron-ls example output (tools/neuron-sys-tools/neuron-ls.rst, 16 devices x 4 cores).
# No Trn3 instance size has a documented chip count in the sources read (trn3-arch.rst names
# UltraServers of 64 and 144 chips, not instance sizes): on Trn3 the cores come from neuron-ls.
DEVICES_BY_INSTANCE = {
    "inf1.xlarge": 1,
    "inf1.2xlarge": 1,
    "inf1.6xlarge": 4,
    "inf1.24xlarge": 16,
    "inf2.xlarge": 1,
    "inf2.8xlarge": 1,
    "inf2.24xlarge": 6,
    "inf2.48xlarge": 12,
    "trn1.2xlarge": 1,
    "trn1.32xlarge": 16,
    "trn1n.32xlarge": 16,
    "trn2.48xlarge": 16,
    "trn2u.48xlarge": 16,
    "trn2n.48xlarge": 16,
    # UNVERIFIED: the SDK names trn2.3xlarge (deploy/files/manifests/daemonset.yaml) but its stored
    # docs give no chip count; one Trainium2 chip is assumed.
    "trn2.3xlarge": 1,
}

SDK_PACKAGES = (
    "torch",
    "torch-neuron",
    "neuron-cc",
    "torch-neuronx",
    "neuronx-cc",
    "libneuronxla",
    "torch-xla",
    "tensorflow",
    "tensorflow-cpu",
    "tensorflow-neuron",
    "tensorflow-neuronx",
    "transformers",
    "transformers-neuronx",
    "neuronx-distributed-inference",
)

# target -> packages a compile for it needs (distribution names, as pip spells them)
TARGET_PACKAGES = {
    "inf1": ("torch-neuron", "neuron-cc"),
    "inf2": ("torch-neuronx", "neuronx-cc"),
    "trn1": ("torch-neuronx", "neuronx-cc"),
    "trn2": ("torch-neuronx", "neuronx-cc"),
    "trn3": ("torch-neuronx", "neuronx-cc"),
    "tensorflow-inf1": ("tensorflow-neuron",),
    "tensorflow-inf2": ("tensorflow-neuronx",),
    "tensorflow-trn1": ("tensorflow-neuronx",),
    "transformers_neuronx": ("transformers-neuronx", "neuronx-cc"),
    "tensorflow": ("tensorflow-cpu",),
    "transformers": ("transformers",),
}
# targets whose packages are on the public index, with the workbench extra that brings them
_PUBLIC_EXTRAS = {"tensorflow": "tensorflow", "transformers": "transformers"}

# PyPI holds name-squatting placeholders of every Neuron package (their versions as PyPI lists them);
# the real ones live in the AWS Neuron pip repository. A placeholder imports as an empty module, so
# it is worth naming.
_PLACEHOLDER_VERSIONS = {
    "torch-neuron": "1.0",
    "torch-neuronx": "1.0",
    "neuron-cc": "1.0.post1",
    "neuronx-cc": "1.0.post1",
    "tensorflow-neuron": "1.0",
    "tensorflow-neuronx": "1.0",
    "libneuronxla": "1.0",
    "transformers-neuronx": "0.1",
}

_NEURON_REPO_HINT = (
    "from the AWS Neuron pip repository (add it as pip's extra index URL, see the Neuron setup "
    "guide; the PyPI packages of these names are placeholders)"
)


class MissingSDKError(WorkbenchError, RuntimeError):
    """The SDK a target needs is not installed; the message says what to install."""

    def __init__(self, target: str, missing: list[str], detail: str = "") -> None:
        self.target, self.missing = target, list(missing)
        what = f"{target} models" if target in _PUBLIC_EXTRAS else f"compiling for {target}"
        message = f"{what}: missing {', '.join(missing)}; {install_hint(target)}"
        if detail:
            message += f" ({detail})"
        super().__init__(message)


class WrongSDKError(MissingSDKError):
    """The installed torch-neuronx is the other library of that name (TorchNeuron where the target
    needs PyTorch/XLA, or the reverse); the message says which is installed and what to install."""

    def __init__(self, target: str, version: str) -> None:
        self.target, self.missing, self.version = target, ["torch-neuronx"], version
        why = torch_neuronx_problem(target, version) or f"torch-neuronx {version} does not serve {target}"
        RuntimeError.__init__(self, f"compiling for {target}: {why}; {install_hint(target)}")


def install_hint(target: str) -> str:
    """The pip command that brings a target's SDK, pinned to the release `workbench.releases`
    names for it (its source there), with where it comes from."""
    packages = TARGET_PACKAGES.get(target)
    if packages is None:
        raise ValueError(f"unknown target {target!r}; use one of {', '.join(TARGET_PACKAGES)}")
    if target in _PUBLIC_EXTRAS:
        return f"pip install {' '.join(packages)} (or pip install 'triton-neuron-workbench[{_PUBLIC_EXTRAS[target]}]')"
    from workbench.releases import pins_for  # releases reads this module's tables: imported late

    pins = pins_for(target)
    extra = ""
    if target == "inf1":
        extra = (
            " in a Python 3.9/3.10 environment of its own (torch-neuron needs torch 1.13 and protobuf<3.20); "
            + OUT_OF_SUPPORT["inf1"]
        )
    elif target == "tensorflow-inf1":
        extra = f" in a Python 3.9/3.10 environment of its own; {OUT_OF_SUPPORT['tensorflow']}"
    elif target.startswith("tensorflow-"):
        extra = f"; {OUT_OF_SUPPORT['tensorflow']}"
    elif target == "transformers_neuronx":
        extra = (
            f" (Python 3.9-3.11); {OUT_OF_SUPPORT['transformers_neuronx']}; for LLMs the SDK now documents "
            "vLLM Neuron on Trn2/Trn3 and vLLM 0.16 with NxD Inference on Inf2/Trn1"
        )
    elif target in TORCHNEURON_TARGETS:
        from workbench.releases import PYTORCH_CPU_INDEX

        extra = (
            f" and PyTorch's CPU index {PYTORCH_CPU_INDEX} (without it pip takes PyPI's CUDA torch) "
            "(TorchNeuron: Python 3.12-3.14, Trn2/Trn3 only)"
        )
    elif target in XLA_TARGETS:
        extra = " (the PyTorch/XLA line, in maintenance; an unpinned torch-neuronx now installs TorchNeuron)"
    return f"pip install {' '.join(pins)} {_NEURON_REPO_HINT}{extra}"


def installed_versions(packages=SDK_PACKAGES) -> dict[str, str | None]:
    """Installed version of each distribution (None when absent), read without importing it."""
    versions: dict[str, str | None] = {}
    for name in packages:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def require_sdk(target: str, versions: dict[str, str | None] | None = None) -> None:
    """Raise `MissingSDKError` unless the packages for ``target`` are installed (and not placeholders),
    and `WrongSDKError` when the installed torch-neuronx is the other library of that name."""
    packages = TARGET_PACKAGES.get(target)
    if packages is None:
        return
    versions = installed_versions(packages) if versions is None else versions
    missing = [p for p in packages if versions.get(p) is None]
    if missing:
        raise MissingSDKError(target, missing)
    fake = [p for p in packages if _PLACEHOLDER_VERSIONS.get(p) == versions.get(p)]
    if fake:
        raise MissingSDKError(
            target,
            fake,
            f"installed {', '.join(f'{p} {versions[p]}' for p in fake)} is the PyPI placeholder, not the SDK",
        )
    check_torch_neuronx_line(target, versions.get("torch-neuronx"))


def check_torch_neuronx_line(target: str, version: str | None) -> None:
    """`WrongSDKError` when ``version`` of torch-neuronx is not the library ``target`` needs."""
    if version is not None and torch_neuronx_problem(target, version):
        raise WrongSDKError(target, version)


def instance_family(instance_type: str) -> str:
    """The target family of an instance type or family: ``trn2u.48xlarge`` -> ``trn2``,
    ``trn1n`` -> ``trn1``, ``inf2.xlarge`` -> ``inf2`` (unknown families come back as given)."""
    family = instance_type.strip().lower().split(".", 1)[0]
    return _FAMILY_OF.get(family, family)


def cores_per_device(instance_type: str) -> int:
    """NeuronCores per device for ``inf2.xlarge`` (or just the family, ``inf2``)."""
    family = instance_family(instance_type)
    if family not in CORES_PER_DEVICE:
        raise ValueError(
            f"unknown Neuron instance type {instance_type!r}; known families: {', '.join(sorted(CORES_PER_DEVICE))}"
        )
    return CORES_PER_DEVICE[family]


def cores_for_instance(instance_type: str) -> int | None:
    """NeuronCores of an instance type (``inf2.24xlarge`` -> 12); None when the type is unknown."""
    devices = DEVICES_BY_INSTANCE.get(instance_type.strip().lower())
    return None if devices is None else devices * cores_per_device(instance_type)


def instance_size(instance_type: str) -> int:
    """How big an instance is within its family, from its name (xlarge 1, 8xlarge 8, 48xlarge 48; 0
    when the name has no size): two sizes with the same NeuronCores differ in vCPUs and price."""
    match = re.fullmatch(r"(\d*)xlarge", instance_type.strip().lower().partition(".")[2])
    return int(match.group(1) or 1) if match else 0


def cpu_cores() -> int:
    """How many CPUs this machine has (numbered from 0, the affinity mask's highest counted too):
    a CPU core index at or past it exists nowhere here, while one inside it that `usable_cpu_ids`
    leaves out exists but is not this process's."""
    return max(os.cpu_count() or 1, max(usable_cpu_ids(), default=0) + 1)


def usable_cpu_ids() -> frozenset[int]:
    """The CPUs this process may run on (its affinity mask, which a container or taskset narrows);
    what a CPU core range is checked against."""
    if hasattr(os, "sched_getaffinity"):
        return frozenset(os.sched_getaffinity(0))
    return frozenset(range(os.cpu_count() or 1))


def _cpu_model(cpuinfo: str | os.PathLike = "/proc/cpuinfo") -> str:
    try:
        for line in Path(cpuinfo).read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("model name", "Model", "cpu model"):
                return value.strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine()


@dataclass
class SystemInfo:
    """A snapshot of the machine, for the UI's system panel and for choosing a default target."""

    neuron_devices: list[str]
    driver_loaded: bool
    neuron_cores: int | None
    cores_source: str
    device_records: list[dict] | None
    instance_type: str | None
    packages: dict[str, str | None]
    cpu_model: str
    cpu_count: int
    usable_cpus: int
    default_target: str
    notes: list[str] = field(default_factory=list)

    @property
    def has_device(self) -> bool:
        return self.driver_loaded or bool(self.neuron_devices)

    def can_compile(self, target: str) -> bool:
        if target == "cpu":
            return True
        try:
            require_sdk(target, self.packages)
        except MissingSDKError:
            return False
        return True

    def to_dict(self) -> dict:
        data = asdict(self)
        data["has_device"] = self.has_device
        return data

    def describe(self) -> str:
        lines = [f"CPU: {self.cpu_model} ({self.usable_cpus} of {self.cpu_count} usable)"]
        if self.has_device:
            cores = "unknown" if self.neuron_cores is None else self.neuron_cores
            lines.append(f"Neuron: {len(self.neuron_devices)} device(s), {cores} NeuronCore(s) ({self.cores_source})")
        else:
            lines.append(
                "Neuron: no device (compiles for inf2/trn1 use cpu_backend=True; trn2/trn3 compile on first "
                "use on the Trn host; artifacts run on a Neuron host)"
            )
        present = {k: v for k, v in self.packages.items() if v}
        lines.append("packages: " + (", ".join(f"{k} {v}" for k, v in present.items()) or "none"))
        lines.append(f"default target: {self.default_target}")
        lines.extend(self.notes)
        return "\n".join(lines)


def ec2_instance_type(product_name: str | os.PathLike = "/sys/devices/virtual/dmi/id/product_name") -> str | None:
    """The EC2 instance type (``inf2.xlarge``) as the machine's DMI product name reports it, without
    the metadata service; None elsewhere."""
    try:
        text = Path(product_name).read_text().strip().lower()
    except OSError:
        return None
    return text if re.fullmatch(r"[a-z][a-z0-9-]*\.[a-z0-9-]+", text) else None


def detect(
    instance_type: str | None = None,
    *,
    dev_dir: str | os.PathLike = "/dev",
    proc_devices: str | os.PathLike = "/proc/devices",
    neuron_ls_path: str | None = None,
    cpuinfo: str | os.PathLike = "/proc/cpuinfo",
) -> SystemInfo:
    """Describe this machine. ``instance_type`` (e.g. ``inf2.xlarge``) fills in the core count and
    the default target when neuron-ls is not there to ask; on a Neuron host it is read from DMI when
    not given."""
    devices = neuron_devices(dev_dir)
    driver = driver_loaded(proc_devices)
    if instance_type is None and (devices or driver):
        instance_type = ec2_instance_type()
    notes: list[str] = []
    records = neuron_ls(neuron_ls_path) if (devices or driver or neuron_ls_path) else None
    cores, source = None, "none"
    if records:
        cores, source = sum(int(r.get("nc_count", 0)) for r in records), "neuron-ls"
    elif instance_type:
        cores = cores_for_instance(instance_type)
        if cores is None:
            notes.append(f"instance type {instance_type!r} is not in the NeuronCore table")
        else:
            source = f"instance table ({instance_type})"
    packages = installed_versions()
    for name, version in _PLACEHOLDER_VERSIONS.items():
        if packages.get(name) == version:
            notes.append(
                f"{name} {version} is the PyPI placeholder, not the SDK; install the real one {_NEURON_REPO_HINT}"
            )
    return SystemInfo(
        neuron_devices=devices,
        driver_loaded=driver,
        neuron_cores=cores,
        cores_source=source,
        device_records=records,
        instance_type=instance_type,
        packages=packages,
        cpu_model=_cpu_model(cpuinfo),
        cpu_count=cpu_cores(),
        usable_cpus=len(usable_cpu_ids()),
        default_target=_default_target(bool(devices or driver), instance_type, packages),
        notes=notes,
    )


def _default_target(has_device: bool, instance_type: str | None, packages: dict[str, str | None]) -> str:
    """The instance family when known; else what the installed SDK compiles for (TorchNeuron: trn2,
    PyTorch/XLA torch-neuronx: inf2); else cpu. Without a device the artifacts cannot be run here, so
    the default stays cpu."""
    if not has_device:
        return "cpu"
    family = instance_family(instance_type or "")
    if family in NEURON_TARGETS:
        return family
    version = packages.get("torch-neuronx")
    if version and version != _PLACEHOLDER_VERSIONS["torch-neuronx"]:
        return "trn2" if torch_neuronx_line(version) == "torchneuron" else "inf2"
    if packages.get("torch-neuron"):
        return "inf1"
    return "cpu"
