"""Which Neuron PyTorch library serves which target, as of Neuron 2.34.0 (2026-11-30), and which
stacks the SDK no longer supports. Plain data and pure functions (no imports of the SDK or of the
rest of the workbench); `workbench.system` re-exports them with the target lists they refine.
"""

from __future__ import annotations

import re

__all__ = ["XLA_TARGETS", "TORCHNEURON_TARGETS", "OUT_OF_SUPPORT", "torch_neuronx_line", "torch_neuronx_problem"]

# Which PyTorch library serves each NeuronCore-v2+ target, as of Neuron 2.34.0 (2026-11-30):
# * inf2/trn1: PyTorch/XLA torch-neuronx (``torch_neuronx.trace`` + DataParallel), in maintenance for
#   inference since 2.31, last build 2.9.0.2.15.32035 (DOCS archive/frameworks/torch/
#   inference-torch-neuronx.html "Maintenance status"; SDK announce-maintenance-pytorch-xla-inference.rst).
#   The trace page itself says "Currently this only supports NeuronCore-v2 type instances (e.g. trn1,
#   inf2)" (SDK api-torch-neuronx-trace.rst:30).
# * trn2/trn3: TorchNeuron, the native backend (``torch.compile(backend="neuron")``): "Starting with
#   Neuron Release 2.34.0, Neuron no longer supports PyTorch/XLA for inference workloads on Trn2 and
#   Trn3" (DOCS about-neuron/announcements/neuron2.x/announce-no-support-torch-xla-inference-trn.html).
XLA_TARGETS = ("inf2", "trn1")
TORCHNEURON_TARGETS = ("trn2", "trn3")
# Stacks the SDK no longer supports, kept because the seed's workflow used them, with their last
# working build (the recipe and the compile log print this). Sources: "torch-neuron (Inf1) is no
# longer officially supported" and "Inf1 instances are no longer supported" (DOCS v2.31.1
# archive/torch-neuron/setup/pytorch-install-prev-al2.html; SDK archive/torch-neuron/*); "TensorFlow is
# no longer officially supported", last builds in 2.28.1 (SDK archive/tensorflow/** warnings, MAN);
# transformers-neuronx end of support at 2.26, last 0.13.1315 (MAN 2.26.1 entry).
OUT_OF_SUPPORT = {
    "inf1": "torch-neuron (Inf1) is out of support; its last working stack is torch-neuron 1.13.1.2.11.13.0 "
    "with neuron-cc 1.24.0.0 on Python 3.9/3.10 (Neuron 2.32.0 manifest)",
    "tensorflow": "TensorFlow on Neuron is out of support; its last working stack is Neuron 2.28.1 "
    "(tensorflow-neuron 2.10.1.2.12.2.0, tensorflow-neuronx 2.10.1.2.1.0)",
    "transformers_neuronx": "transformers-neuronx is out of support (ended with Neuron 2.26); its last working "
    "stack is transformers-neuronx 0.13.1315 with transformers 4.48 on Python 3.9-3.11",
}


def torch_neuronx_line(version: str) -> str:
    """Which library a ``torch-neuronx`` version is: ``"torchneuron"`` for PyTorch >= 2.10 builds
    (2.13.3.x / 2.14.3.x in Neuron 2.33-2.34: "torch-neuronx for PyTorch 2.13 and 2.14 is TorchNeuron",
    DOCS release-notes/components/torchneuron.html; "torch-neuronx 2.14.x is the native backend;
    earlier versions are the legacy XLA-based library", DOCS torch/troubleshooting.html), else
    ``"xla"`` (PyTorch/XLA builds end at 2.9.0.2.15.32035: DOCS archive/.../pytorch-update-u24.html).
    The version reads ``<torch major>.<torch minor>.<...>``; a local suffix (``+fake``) is ignored."""
    parts = re.findall(r"\d+", version.split("+", 1)[0])[:2]
    if len(parts) < 2:
        raise ValueError(f"torch-neuronx version {version!r} does not start with <major>.<minor>")
    return "torchneuron" if (int(parts[0]), int(parts[1])) >= (2, 10) else "xla"


def torch_neuronx_problem(target: str, version: str) -> str | None:
    """Why torch-neuronx ``version`` cannot serve ``target`` (None when it can, or the target needs
    no torch-neuronx)."""
    if target not in (*XLA_TARGETS, *TORCHNEURON_TARGETS):
        return None
    line = torch_neuronx_line(version)
    if target in XLA_TARGETS and line == "torchneuron":
        return (
            f"torch-neuronx {version} is TorchNeuron, the native PyTorch backend: it runs on Trn2/Trn3 only "
            f"and has no torch_neuronx.trace or DataParallel, which {target} needs"
        )
    if target in TORCHNEURON_TARGETS and line == "xla":
        return (
            f"torch-neuronx {version} is the PyTorch/XLA library (torch_neuronx.trace), which Neuron no "
            f"longer supports for inference on Trn2/Trn3 from release 2.34.0; {target} needs TorchNeuron"
        )
    return None
