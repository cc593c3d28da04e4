"""The host-recipe facts: which Triton container, Neuron SDK release and pins fit together, each with its source.

Every value a recipe prints comes from this table, and every row names where it was read and when,
so a reader can check it and a later SDK release is a one-place edit. Rows marked
``verified=False`` were inferred or remembered, not read; the recipe prints them as such. Nothing
here was run on Neuron hardware: these are documented package combinations, not measurements.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from workbench.system import FRAMEWORK_TARGETS

__all__ = ["Source", "Fact", "Stack", "SOURCES", "STACKS", "NEURON_APT_REPO", "NEURON_APT_KEY", "NEURON_PIP_INDEX",
           "TRITON_IMAGE", "stub_python_of"]


@dataclass(frozen=True)
class Source:
    title: str
    where: str
    date: str  # when the text was read at that revision (YYYY-MM-DD)


_SDK = "aws-neuron/aws-neuron-sdk @ 81ce03ae"
SOURCES = {
    "SDK-man": Source("Neuron release manifest 2.32.0 (packages, versions, Pythons, instances per release)",
                      f"{_SDK} src/helperscripts/n2-manifest.json (manifest_date 08/17/2026)", "2026-08-21"),
    "SDK-setup": Source("PyTorch (torch-neuronx) manual setup, Neuron 2.32",
                        f"{_SDK} setup/pytorch/manual.rst", "2026-08-21"),
    "SDK-inf1-driver": Source("Correction: Neuron driver support for Inf1 is version 2.24",
                              f"{_SDK} about-neuron/announcements/neuron2.x/"
                              "announce-correction-neuron-driver-support-inf1.rst (posted 2026-03-12)", "2026-08-21"),
    "SDK-inf1-setup": Source("Inf1 legacy PyTorch setup (driver + tools + pip only)",
                             f"{_SDK} archive/setup/legacy-inf1/pytorch.rst", "2026-08-21"),
    "SDK-libnrt": Source("Introducing libnrt: libnrt.so ships inside the Inf1 framework packages",
                         f"{_SDK} archive/appnotes/neuron1x/introducing-libnrt.rst", "2026-08-21"),
    "SDK-rc": Source("Release content: protobuf ranges per framework package",
                     f"{_SDK} release-notes/releasecontent.rst", "2026-08-21"),
    "SDK-tf-inf2": Source("TensorFlow on Inf2 no longer supported from Neuron 2.29",
                          f"{_SDK} about-neuron/announcements/neuron2.x/"
                          "announce-no-longer-support-tensorflow-inf2.rst", "2026-08-21"),
    "SDK-lnc": Source("Logical NeuronCore configuration (LNC 1 or 2; default 2 on Trn2; NEURON_LOGICAL_NC_CONFIG)",
                      f"{_SDK} about-neuron/arch/neuron-features/logical-neuroncore-config.rst", "2026-08-21"),
    "SDK-ctr": Source("Build and run a Neuron container: --device per device, global core ids, "
                      "NEURON_RT_VISIBLE_CORES", f"{_SDK} deploy/tutorials/build-run-container.rst", "2026-08-21"),
    "SDK-k8s": Source("Neuron device plugin: resources aws.amazon.com/neuroncore and aws.amazon.com/neuron",
                      f"{_SDK} deploy/includes/k8s-neuron-device-plugin.rst", "2026-08-21"),
    "SDK-k8s-name": Source("'neurondevice' resource name no longer supported from Neuron 2.20 (renamed 'neuron')",
                           f"{_SDK} about-neuron/announcements/neuron2.x/announce-no-support-device-version.rst",
                           "2026-08-21"),
    "SDK-k8s-flow": Source("Neuron scheduler extension flow: the plugin exports --device and "
                           "NEURON_RT_VISIBLE_CORES of the cores it allocated",
                           f"{_SDK} deploy/infrastructure/scheduler-flow.rst", "2026-08-21"),
    "TS": Source("Triton container base OS per release (build.py: ubuntu:22.04 up to v2.51.0, ubuntu:24.04 "
                 "from v2.52.0; v2.71.0 sets PIP_BREAK_SYSTEM_PACKAGES=1)",
                 "triton-inference-server/server tags v2.51.0, v2.52.0, v2.71.0 build.py", "2026-08-19"),
    "TS-24.12": Source("Triton 24.12 release notes: Ubuntu 24.04 including Python 3.12",
                       "docs.nvidia.com Triton release notes archive (2.53.0)", "2026-08-19"),
    "PB": Source("Python backend: the stub embeds one libpython; EXECUTION_ENV_PATH needs the stub's Python; "
                 "another Python needs a stub built for it", "triton-inference-server/python_backend @ f9088ff "
                 "README.md (Managing Python Runtime and Libraries, Creating Custom Execution Environments, "
                 "Important Notes)", "2026-07-17"),
    "PB-r24.10": Source("Python backend r24.10: the container uses Python 3.10",
                        "triton-inference-server/python_backend branch r24.10 README.md", "2026-07-17"),
    "audit": Source("Researcher's audit for issue 13 (sections 5.1-5.3), from the sources above",
                    "notes/neuron_audit.md", "2026-11-30"),
}

NEURON_APT_REPO = "https://apt.repos.neuron.amazonaws.com"  # SDK-setup, SDK-man repos_n2
NEURON_APT_KEY = f"{NEURON_APT_REPO}/GPG-PUB-KEY-AMAZON-AWS-NEURON.PUB"  # SDK-setup
NEURON_PIP_INDEX = "https://pip.repos.neuron.amazonaws.com"  # an extra index, SDK-setup
TRITON_IMAGE = "nvcr.io/nvidia/tritonserver:{tag}-py3"


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

    @property
    def pythons(self) -> tuple[str, ...]:
        low, _, high = self.python_range.value.partition("-")
        minor = range(int(low.split(".")[1]), int((high or low).split(".")[1]) + 1)
        return tuple(f"3.{m}" for m in minor)


def _f(value: str, source: str, note: str = "", verified: bool = True) -> Fact:
    return Fact(value, source, verified, note)


_HOST_HEADERS = _f("linux-headers-$(uname -r)", "SDK-setup", "the driver is a DKMS module built for the running kernel")
_INF1_HOST = (
    _HOST_HEADERS,
    _f("aws-neuronx-dkms=2.24.*", "SDK-inf1-driver", "drivers above 2.24 do not support Inf1"),
    _f("aws-neuronx-tools=2.*", "SDK-inf1-setup", "neuron-ls / neuron-top for the host"),
)
_INF1_NOTES = (
    _f("no Neuron runtime package in the image: libnrt.so ships inside torch-neuron / tensorflow-neuron",
       "SDK-libnrt"),
    _f("protobuf < 3.20 for torch-neuron and tensorflow-neuron(x); >= 3.20 for torch-neuronx: "
       "separate images", "SDK-rc"),
)
_CONTAINER_2410 = _f("24.10", "TS", "Triton 2.51, Ubuntu 22.04 (jammy)")
_STUB_310 = _f("3.10", "PB-r24.10")

def _neuronx_targets(framework: str) -> tuple[str, ...]:
    """The NeuronCore-v2+ targets ``framework``'s SDK supports (`workbench.system.FRAMEWORK_TARGETS`)."""
    return tuple(t for t in FRAMEWORK_TARGETS[framework] if t not in ("cpu", "inf1"))


STACKS: tuple[Stack, ...] = (
    Stack(
        key="inf1-pytorch", targets=("inf1",), framework="pytorch",
        container=_CONTAINER_2410, stub_python=_STUB_310,
        python_range=_f("3.9-3.10", "SDK-man"),
        release=_f("2.32.0", "SDK-man", "torch-neuron 1.13.1.2.11.13.0 is still listed in 2.32.0"),
        pip=(_f("torch-neuron==1.13.1.2.11.13.0", "SDK-man", "PyTorch 1.13.1"),
             _f("neuron-cc[tensorflow]==1.24.0.0", "SDK-man"),
             _f("protobuf<3.20", "SDK-rc"),
             _f("numpy<2", "audit", "torch 1.13 wheels predate NumPy 2", verified=False)),
        container_apt=(), host_apt=_INF1_HOST, notes=_INF1_NOTES,
    ),
    Stack(
        key="inf1-tensorflow", targets=("inf1",), framework="tensorflow",
        container=_CONTAINER_2410, stub_python=_STUB_310,
        python_range=_f("3.9-3.10", "SDK-man"),
        release=_f("2.28.1", "SDK-man", "the last release that lists tensorflow-neuron"),
        pip=(_f("tensorflow-neuron[cc]==2.10.1.2.12.2.0", "SDK-man"),
             _f("protobuf<3.20", "SDK-rc")),
        container_apt=(), host_apt=_INF1_HOST, notes=_INF1_NOTES,
    ),
    Stack(
        key="neuronx-pytorch", targets=_neuronx_targets("pytorch"), framework="pytorch",
        container=_f("26.07", "TS", "Triton 2.71, Ubuntu 24.04 (noble), the latest tag read"),
        stub_python=_f("3.12", "TS-24.12", "every container from 24.12 on"),
        python_range=_f("3.11-3.13", "SDK-man"),
        release=_f("2.32.0", "SDK-setup", "torch-neuronx is pinned to its last build, from 2.31.1 "
                   "(PyTorch/XLA support ended there)"),
        pip=(_f("neuronx-cc==2.27.5334.0", "SDK-setup"),
             _f("torch-neuronx==2.9.0.2.15.32035", "SDK-setup")),
        container_apt=(_f("aws-neuronx-runtime-lib=2.34.10.0*", "SDK-setup"),
                       _f("aws-neuronx-collectives=2.34.10.0*", "SDK-setup")),
        host_apt=(_HOST_HEADERS, _f("aws-neuronx-dkms=2.30.2.0*", "SDK-setup"),
                  _f("aws-neuronx-tools=2.32.28.0*", "SDK-setup")),
        notes=(_f("images from 24.12 set PIP_BREAK_SYSTEM_PACKAGES=1, so pip installs into the stub's Python",
                  "TS"),
               _f("trn2 runs at LNC=2 unless NEURON_LOGICAL_NC_CONFIG=1; compile with the same LNC", "SDK-lnc")),
    ),
    Stack(
        key="neuronx-tensorflow", targets=_neuronx_targets("tensorflow"), framework="tensorflow",
        container=_CONTAINER_2410, stub_python=_STUB_310,
        python_range=_f("3.10-3.12", "SDK-man", "TensorFlow 2.10.1 wheels themselves stop at Python 3.10",
                        verified=False),
        release=_f("2.28.1", "SDK-man", "the last release with TensorFlow for Inf2 (unsupported from 2.29)"),
        pip=(_f("tensorflow-neuronx==2.10.1.2.1.0", "SDK-man"),
             _f("neuronx-cc==2.23.6484.0", "SDK-man"),
             _f("protobuf<3.20", "SDK-rc")),
        container_apt=(_f("aws-neuronx-runtime-lib=2.30.51.0*", "SDK-man"),
                       _f("aws-neuronx-collectives=2.30.59.0*", "SDK-man")),
        host_apt=(_HOST_HEADERS, _f("aws-neuronx-dkms=2.26.10.0*", "SDK-man"),
                  _f("aws-neuronx-tools=2.28.23.0*", "SDK-man")),
        notes=(_f("an archived SDK: whether a newer host driver serves this runtime is not documented",
                  "audit", verified=False),
               _f("TensorFlow on Inf2 is unsupported from Neuron 2.29", "SDK-tf-inf2")),
    ),
    Stack(
        key="neuronx-transformers_neuronx", targets=_neuronx_targets("transformers_neuronx"), framework="transformers_neuronx",
        container=_CONTAINER_2410, stub_python=_STUB_310,
        python_range=_f("3.9-3.11", "SDK-man"),
        release=_f("2.26.1", "SDK-man", "transformers-neuronx ended with 2.26 (never for trn2)"),
        pip=(_f("transformers-neuronx==0.13.1315", "SDK-man"),
             _f("torch-neuronx==2.7.0.2.10.16998", "SDK-man",
                "2.26.1 ships it; transformers-neuronx itself only requires torch-neuronx", verified=False),
             _f("neuronx-cc==2.21.33363.0", "SDK-man")),
        container_apt=(_f("aws-neuronx-runtime-lib=2.28.23.0*", "SDK-man"),
                       _f("aws-neuronx-collectives=2.28.27.0*", "SDK-man")),
        host_apt=(_HOST_HEADERS, _f("aws-neuronx-dkms=2.24.7.0*", "SDK-man"),
                  _f("aws-neuronx-tools=2.26.14.0*", "SDK-man")),
        notes=(_f("an archived SDK: whether a newer host driver serves this runtime is not documented",
                  "audit", verified=False),),
    ),
)


def stub_python_of(image: str) -> Fact | None:
    """The python backend stub's Python in a stock ``tritonserver:<yy.mm>-py3`` image; None when the
    image is not one (a custom image's Python cannot be known from its name)."""
    match = re.fullmatch(r"(?:nvcr\.io/)?nvidia/tritonserver:(\d\d)\.(\d\d)-py3", image.strip())
    if match is None:
        return None
    release = (int(match[1]), int(match[2]))
    if release <= (23, 4):
        return Fact("3.8", "TS", "Ubuntu 20.04")
    if release <= (24, 10):
        return Fact("3.10", "PB-r24.10", "Ubuntu 22.04")
    if release == (24, 11):
        return Fact("3.12", "TS", "from the Ubuntu 24.04 base; its README still says 3.10", verified=False)
    return Fact("3.12", "TS-24.12")
