"""The two Neuron vLLM stacks a vLLM-backend model directory deploys with, every pin with its source.

A Triton vLLM-backend model (``workbench generate --backend vllm``) is served by Triton's vLLM
backend, which runs whatever vLLM the image holds; on Neuron that vLLM needs its platform plugin:

* Trn2/Trn3 -- vLLM Neuron (``vllm-neuron``, TorchNeuron underneath; GA in Neuron 2.34.0
  [SDK-2.34]). Its setup guide installs the plugin from the Neuron pip index, which brings vLLM,
  and the compiler, TorchNeuron and NKI separately [VN-setup]. The version pins are the 2.33.0
  component index's [SDK-2.33-components]: the 2.34.0 package list (which vllm-neuron it ships)
  was in no source read, so the recipe says so instead of guessing.
* Inf2/Trn1 -- vLLM 0.16 with the NxD Inference plugin (vllm-neuron 0.5.x) [SDK-vllm-paths,
  NXDI-vllm], the set Neuron's legacy vLLM 0.16 container ships (SDK 2.31.1, Python 3.12)
  [DLC-vllm-0.16]; NxD Inference is maintenance-only there [SDK-nxdi-trn].

Both build FROM the stock Triton image (stub Python 3.12, which both plugins' Pythons include),
add the Neuron runtime from the apt repository, the pins from the Neuron pip index, and Triton's
vLLM backend by its README's Option 3 (install vLLM, copy ``src/`` to the backends folder) at the
commit this project serves with [VB-opt3, VB-here]. Neuron's own vLLM containers run vLLM's
server, not Triton; their tags are in the notes for comparison. Nothing here ran on Neuron.
"""

from __future__ import annotations

from workbench.generate.vllm_backend.engine_settings import NXDI_TARGETS, VLLM_NEURON_TARGETS
from workbench.releases import STACKS, Fact, Stack, TritonBackend

__all__ = ["VLLM_FRAMEWORK", "VLLM_BACKEND", "VLLM_STACKS", "vllm_stack_of"]

VLLM_FRAMEWORK = "vllm"  # the recipe's framework key for a vLLM-backend model (Stack.framework)

VLLM_BACKEND = TritonBackend(
    name="vllm",
    repository="https://github.com/triton-inference-server/vllm_backend",
    commit=Fact(
        "8de0c148bda1da25de1e05ffaaf67116dacc7264",
        "VB-here",
        note=(
            "the commit served here with vLLM 0.32 (after a two-line import patch); with these stacks' vLLM "
            "0.16 / 0.29 and on Neuron it was not run"
        ),
        verified=False,
    ),
)

# Triton release and stub Python, as the PyTorch stacks use (26.10, stub Python 3.12)
_TORCHNEURON = next(s for s in STACKS if s.key == "torchneuron-pytorch")
_XLA = next(s for s in STACKS if s.key == "xla-pytorch")
_PIP_BREAK = Fact("images from 24.12 set PIP_BREAK_SYSTEM_PACKAGES=1, so pip installs into the stub's Python", "TS")


def _f(value: str, source: str, note: str = "", verified: bool = True) -> Fact:
    return Fact(value, source, verified, note)


VLLM_STACKS: tuple[Stack, ...] = (
    Stack(
        key="vllm-neuron",
        targets=VLLM_NEURON_TARGETS,
        framework=VLLM_FRAMEWORK,
        container=_TORCHNEURON.container,
        stub_python=_TORCHNEURON.stub_python,
        python_range=_f("3.12-3.14", "SDK-tn", "TorchNeuron's Pythons; vLLM Neuron asks for 3.11 or later [VN-setup]"),
        release=_f(
            "2.33.0",
            "SDK-2.33-components",
            "vLLM Neuron is GA in 2.34.0 [SDK-2.34], but the 2.34.0 package list (its vllm-neuron, compiler "
            "and runtime versions) was in no source read: these are the last listed pins, 2.33.0's",
        ),
        pip=(
            _f(
                "vllm-neuron==0.29.0.1.2.0",
                "SDK-2.33-components",
                "the plugin, by the 2.33.0 index's version; the setup guide documents installing it from source "
                "(git clone vllm-project/vllm-neuron, pip install with the Neuron index) [VN-setup], and no wheel "
                "of this name and version was found: if pip cannot find it, install it the documented way",
                verified=False,
            ),
            _f(
                "torch-neuronx==2.14.3.0",
                "SDK-2.33-components",
                "TorchNeuron (PyTorch 2.14), installed separately "
                "[VN-setup]; vLLM Neuron does not compile through it but through libtorch-neuronx-lite [VN-lite], "
                "which 2.34 is the last release to ship (from 2.35 vLLM Neuron moves to torch-neuronx, issue 42)",
            ),
            _f("neuronx-cc==2.28.7631.0", "SDK-2.33-components", "installed separately [VN-setup]"),
            _f("nki==0.7.0", "SDK-2.33-components", "installed separately [VN-setup]"),
        ),
        container_apt=(
            _f("aws-neuronx-runtime-lib=2.35.30.0*", "SDK-2.33-components"),
            _f("aws-neuronx-collectives=2.35.43.0*", "SDK-2.33-components"),
        ),
        host_apt=(
            *_TORCHNEURON.host_apt[:1],
            _f("aws-neuronx-dkms=2.31.7.0*", "SDK-2.33-components"),
            _f("aws-neuronx-tools=2.33.38.0*", "SDK-2.33-components"),
        ),
        notes=(
            _PIP_BREAK,
            _f(
                "vllm-neuron for Neuron 2.34.0: its version is in no source read (the 2.34.0 release notes say "
                "vLLM Neuron is GA, not which wheel)",
                "SDK-2.34",
                verified=False,
            ),
            _f(
                "Neuron's own vLLM container for 2.33 (vLLM's server, no Triton): public.ecr.aws/neuron/"
                "pytorch-inference-vllm-neuronx:0.29.0.1.2.0-neuronx-py314-sdk2.33.0-ubuntu26.04",
                "DLC-vllm-2.33",
            ),
            _f(
                "trn2/trn3 run at LNC=2 unless NEURON_LOGICAL_NC_CONFIG=1: the model's tensor-parallel degree "
                "counts logical cores at that LNC",
                "SDK-lnc",
            ),
            _f(
                "NEFFs can be made on a CPU host: VLLM_NEURON_CPU_COMPILE=1 with NEURON_PLATFORM_TARGET_OVERRIDE "
                "compiles without running",
                "VN-cpu-compile",
            ),
        ),
        serving_backend=VLLM_BACKEND,
        extra_indexes=_TORCHNEURON.extra_indexes,
    ),
    Stack(
        key="vllm-nxdi",
        targets=NXDI_TARGETS,
        framework=VLLM_FRAMEWORK,
        container=_XLA.container,
        stub_python=_XLA.stub_python,
        python_range=_f(
            "3.11-3.13", "SDK-man", "torch-neuronx 2.9's Pythons; the vLLM 0.16 DLC runs 3.12 [DLC-vllm-0.16]"
        ),
        release=_f(
            "2.31.1",
            "DLC-vllm-0.16",
            "the SDK of Neuron's legacy vLLM 0.16 container; NxD Inference is "
            "maintenance-only on Inf2/Trn1 [SDK-nxdi-trn]",
        ),
        pip=(
            _f(
                "vllm-neuron @ git+https://github.com/vllm-project/vllm-neuron.git@0.5.3",
                "SDK-vllm-paths",
                "the NxD Inference plugin (0.5.x line); it installs vLLM",
            ),
            _f("vllm==0.16.0", "NXDI-vllm", "the vLLM the 0.5 plugin is built for"),
            _f("neuronx-distributed-inference==0.10.18399", "SDK-2.31-content"),
            _f("torch-neuronx==2.9.0.2.15.32035", "DLC-2.31.1", "the 2.31.1 container's build"),
            _f("neuronx-cc==2.26.6360.0", "SDK-2.31-content"),
        ),
        container_apt=(
            _f("aws-neuronx-runtime-lib=2.33.10.0*", "SDK-2.31-content"),
            _f("aws-neuronx-collectives=2.33.10.0*", "SDK-2.31-content"),
        ),
        host_apt=_XLA.host_apt,
        notes=(
            _PIP_BREAK,
            _f(
                "the 0.5.3 tag of vllm-project/vllm-neuron is named by the overview page; the NxDI user guide "
                "read documents plugin 0.5.0 with vLLM 0.16.0 (SDK 2.29)",
                "NXDI-vllm",
            ),
            _f(
                "Neuron's own vLLM 0.16 container (vLLM's server, no Triton): pytorch-inference-vllm-neuronx:"
                "0.16.0-neuronx-py312-sdk2.31.1-ubuntu24.04",
                "DLC-vllm-0.16",
            ),
        ),
        serving_backend=VLLM_BACKEND,
    ),
)


def vllm_stack_of(target: str) -> Stack | None:
    """The vLLM stack that serves ``target`` (None: no Neuron vLLM for it, e.g. inf1 or cpu)."""
    return next((s for s in VLLM_STACKS if target in s.targets), None)
