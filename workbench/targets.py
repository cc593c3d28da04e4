"""Targets as a notebook, the CLI and the panels meet them: which one to compile for and serve on
here (`choose_target`), and how closely served outputs must match the in-process reference there
(`output_tolerances`). The target names and the SDK each needs live in `workbench.system`.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

from workbench.coremap import CoreRange
from workbench.system import (
    NEURON_TARGETS,
    TARGET_PACKAGES,
    MissingSDKError,
    SystemInfo,
    detect,
    install_hint,
    require_sdk,
    target_problem,
    usable_cpu_ids,
)

__all__ = ["CPU_TOLERANCES", "NEURON_TOLERANCES", "output_tolerances", "TargetChoice", "choose_target"]

# ``rtol``/``atol`` for comparing served with eager outputs. NeuronCore outputs are compared more
# loosely than the CPU's: neuron-cc (Inf1) casts FP32 to BF16 by default (``--fast-math``), and
# neuronx-cc did so for matrix multiplies before Neuron 2.27, which made ``--auto-cast none`` the
# default (SDK compiler release notes, neuronx-cc 2.22.12471.0); --auto-cast flags still lower
# precision on request.
CPU_TOLERANCES = {"rtol": 1e-4, "atol": 1e-5}
NEURON_TOLERANCES = {"rtol": 1e-2, "atol": 1e-2}

# framework -> (module that must import for any target, the extra that brings it)
_FRAMEWORK_MODULES = {
    "pytorch": ("torch", None),
    "tensorflow": ("tensorflow", "tensorflow"),
    "transformers_neuronx": ("transformers", "transformers"),
}


def output_tolerances(target: str) -> dict[str, float]:
    """``rtol``/``atol`` for outputs served on ``target`` (a Neuron target: `NEURON_TOLERANCES`)."""
    return dict(NEURON_TOLERANCES if target in NEURON_TARGETS else CPU_TOLERANCES)


@dataclass(frozen=True)
class TargetChoice:
    """Where a notebook's steps run here. ``compile_target``/``serve_target`` are ``cpu`` or the
    wanted Neuron target; ``framework_ready`` is False when even the CPU path lacks its framework
    (an optional extra), and the notebook then only shows what it would generate."""

    wanted: str
    framework: str
    compile_target: str
    serve_target: str
    framework_ready: bool
    has_device: bool
    missing: tuple[str, ...] = ()
    hint: str = ""
    framework_module: str = ""
    neuron_cores: int | None = None  # this machine's NeuronCores when known (neuron-ls or instance type)

    @property
    def on_neuron(self) -> bool:
        return self.serve_target != "cpu"

    @property
    def message(self) -> str:
        what = f"{self.framework} for {self.wanted}"
        if not self.framework_ready:
            return (
                f"{self.framework_module} is not installed here ({self.hint}): this notebook shows what it would "
                f"generate for {self.wanted} (a dry run for another machine) instead of serving a model."
            )
        if self.on_neuron:
            return f"Neuron SDK and device found: compiling {what} and serving on NeuronCores."
        cpu_numbers = "Every number below is a CPU number, not a Neuron number."
        if self.compile_target != "cpu":
            return (
                f"Neuron SDK for {self.wanted} found but no Neuron device: compiling {what} here (the artifact "
                f"runs on a Neuron host) and serving its CPU twin on the CPU. {cpu_numbers}"
            )
        return (
            f"No Neuron SDK here for {self.wanted} (missing {', '.join(self.missing)}): running the same "
            f"steps with the CPU target. {cpu_numbers} On a Neuron host: {self.hint}."
        )

    def core_range(self, wanted: CoreRange, instances: int = 1, *, cpus: int | None = None) -> CoreRange:
        """``wanted`` on NeuronCores; on the CPU as many of this machine's cores as the range
        asks for (at least one per instance), so the instances still split them evenly."""
        if self.on_neuron:
            return wanted
        cpus = cpus or len(usable_cpu_ids())
        count = max(instances, min(wanted.size, cpus) // instances * instances)
        return CoreRange(0, count - 1)

    def all_cores(self, *, cpus: int | None = None) -> CoreRange:
        """Every core the serving target has here: all NeuronCores, or all usable CPUs."""
        if self.on_neuron:
            if not self.neuron_cores:
                raise ValueError("the NeuronCore count is unknown here (no neuron-ls): give the core range yourself")
            return CoreRange(0, self.neuron_cores - 1)
        return CoreRange(0, (cpus or len(usable_cpu_ids())) - 1)

    @property
    def tolerances(self) -> dict[str, float]:
        """``rtol``/``atol`` for comparing served with eager outputs where this serves (`output_tolerances`)."""
        return output_tolerances(self.serve_target)

    def servable(self, artifact):
        """The artifact to serve here: the Neuron one on a device, else its CPU twin."""
        if self.on_neuron or artifact.cpu_artifact is None:
            return artifact
        return artifact.cpu_artifact


def _sdk_key(wanted: str, framework: str) -> str:
    if framework == "tensorflow":
        return f"tensorflow-{wanted}"
    if framework == "transformers_neuronx":
        return "transformers_neuronx"
    return wanted


def choose_target(wanted: str, framework: str = "pytorch", *, system: SystemInfo | None = None) -> TargetChoice:
    """Compile for ``wanted`` when its SDK is installed, serve on it when a device is there too;
    otherwise the CPU target for both, with a message that says so."""
    if wanted not in NEURON_TARGETS:
        raise ValueError(f"target {wanted!r}: choose one of {', '.join(NEURON_TARGETS)}")
    if framework not in _FRAMEWORK_MODULES:
        raise ValueError(f"framework {framework!r}: choose one of {', '.join(_FRAMEWORK_MODULES)}")
    if target_problem(framework, wanted):
        raise ValueError(target_problem(framework, wanted))
    system = system or detect()
    module, extra = _FRAMEWORK_MODULES[framework]
    ready = importlib.util.find_spec(module) is not None
    key = _sdk_key(wanted, framework)
    try:
        require_sdk(key, system.packages)
        missing: tuple[str, ...] = ()
    except MissingSDKError as err:
        missing = tuple(err.missing)
    sdk = ready and not missing
    hint = install_hint(extra) if not ready and extra else install_hint(key)
    return TargetChoice(
        wanted=wanted,
        framework=framework,
        compile_target=wanted if sdk else "cpu",
        serve_target=wanted if sdk and system.has_device else "cpu",
        framework_ready=ready,
        has_device=system.has_device,
        missing=missing or (() if ready else TARGET_PACKAGES.get(extra or "", ())),
        hint=hint,
        framework_module=module,
        neuron_cores=system.neuron_cores,
    )
