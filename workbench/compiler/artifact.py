"""What a compile produced, kept beside the compiled file so later steps need not guess.

A TorchScript file carries no names, dtypes or dims, and a Neuron ``.pt`` looks exactly like a CPU
one until loading it fails on a machine without a NeuronCore. The `Artifact` record (and its
sidecar ``<path>.workbench.json``) says which target a file is for, how it was made, and the
`ModelSpec` the generator checks config dims against.
"""

from __future__ import annotations

import json
import os
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from workbench.files import atomic_write  # re-exported: the compilers write through it
from workbench.refusals import WorkbenchError
from workbench.spec import ModelSpec

__all__ = [
    "Artifact",
    "ArtifactError",
    "NeuronArtifactError",
    "SIDECAR_SUFFIX",
    "sidecar_path",
    "read_artifact",
    "load_artifact",
    "atomic_write",
]

SIDECAR_SUFFIX = ".workbench.json"


class ArtifactError(WorkbenchError, ValueError):
    """An artifact record or file that cannot be used; the message names the file."""


class NeuronArtifactError(ArtifactError):
    """A Neuron-compiled model asked to run where there is no NeuronCore."""


def sidecar_path(path: str | os.PathLike) -> Path:
    """``model.pt`` -> ``model.pt.workbench.json`` (a SavedModel folder gets ``folder.workbench.json``)."""
    path = Path(path)
    return path.with_name(path.name + SIDECAR_SUFFIX)


@dataclass
class Artifact:
    """One compiled model file (or folder) and how it was made.

    ``runs_on_cpu`` is False for every Neuron target: those files hold NEFF graphs that only a
    NeuronCore executes, so `load_artifact` refuses them here and points at ``cpu_artifact``.
    """

    path: str
    target: str
    spec: ModelSpec
    batch_dim: bool = True
    framework: str = "pytorch"
    name: str = ""
    sdk_versions: dict[str, str] = field(default_factory=dict)
    compiler_args: list[str] = field(default_factory=list)
    compile_seconds: float = 0.0
    size_bytes: int = 0
    log: str = ""
    max_abs_diff: float | None = None
    dynamic_batch: bool | None = None
    operator_counts: dict[str, int] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    cpu_artifact: Artifact | None = None

    @property
    def runs_on_cpu(self) -> bool:
        return self.target == "cpu"

    @property
    def sidecar(self) -> Path:
        return sidecar_path(self.path)

    def to_dict(self) -> dict:
        data = asdict(self)
        data["spec"] = self.spec.to_dict()
        data["cpu_artifact"] = self.cpu_artifact.to_dict() if self.cpu_artifact else None
        data["runs_on_cpu"] = self.runs_on_cpu
        return data

    @classmethod
    def from_dict(cls, data: dict) -> Artifact:
        data = dict(data)
        data.pop("runs_on_cpu", None)
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(data) - known)
        if unknown:
            raise ArtifactError(f"artifact record has unknown keys {unknown}")
        missing = sorted(k for k in ("path", "target", "spec") if k not in data)
        if missing:
            raise ArtifactError(f"artifact record lacks {missing}")
        data["spec"] = ModelSpec.from_dict(data["spec"])
        if data.get("cpu_artifact"):
            data["cpu_artifact"] = cls.from_dict(data["cpu_artifact"])
        return cls(**data)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Artifact:
        return cls.from_dict(json.loads(text))

    def write_sidecar(self) -> Path:
        """Write ``<path>.workbench.json`` atomically; the generator reads spec and batch_dim from it."""
        atomic_write(self.sidecar, self.to_json().encode())
        return self.sidecar

    def describe(self) -> str:
        lines = [
            f"{self.name or Path(self.path).name}: {self.target} {self.framework} artifact at {self.path}",
            f"  size {self.size_bytes} bytes, compiled in {self.compile_seconds:.1f} s",
        ]
        if self.compiler_args:
            lines.append(f"  compiler args: {' '.join(self.compiler_args)}")
        for kind, tensors in (("in ", self.spec.inputs), ("out", self.spec.outputs)):
            for t in tensors:
                dims = ("[batch] + " if self.batch_dim else "") + str(list(t.dims))
                lines.append(f"  {kind} {t.name} {t.dtype} {dims}")
        if self.max_abs_diff is not None:
            lines.append(f"  traced vs eager max abs diff: {self.max_abs_diff:.3g}")
        if self.dynamic_batch is not None:
            lines.append(f"  other batch sizes: {'ok' if self.dynamic_batch else 'NOT supported by this trace'}")
        if not self.runs_on_cpu:
            lines.append(
                "  runs only on a Neuron device"
                + (f"; CPU twin: {self.cpu_artifact.path}" if self.cpu_artifact else "")
            )
        return "\n".join(lines)


def read_artifact(path: str | os.PathLike) -> Artifact:
    """Read the record for a compiled file (give the file or its sidecar)."""
    path = Path(path)
    side = path if path.name.endswith(SIDECAR_SUFFIX) else sidecar_path(path)
    if not side.is_file():
        raise ArtifactError(f"{path}: no {SIDECAR_SUFFIX} record beside it; compile it with workbench.compile")
    try:
        return Artifact.from_json(side.read_text())
    except (json.JSONDecodeError, KeyError, TypeError) as err:
        raise ArtifactError(f"{side}: unreadable artifact record ({err})") from None


def load_artifact(artifact: Artifact | str | os.PathLike, *, has_device: bool | None = None):
    """Load a PyTorch artifact for running in this process.

    A Neuron artifact is refused without a Neuron device: the SDKs either fail with runtime
    errors or, in old versions, silently return wrong numbers.
    """
    import torch

    if not isinstance(artifact, Artifact):
        artifact = read_artifact(artifact)
    if artifact.framework != "pytorch":
        raise ArtifactError(f"{artifact.path}: a {artifact.framework} artifact is not a TorchScript file")
    if not artifact.runs_on_cpu:
        # start-up: the device probe loads only for a Neuron artifact
        from workbench.system import has_neuron_device

        if not (has_neuron_device() if has_device is None else has_device):
            twin = f"; use its CPU twin {artifact.cpu_artifact.path}" if artifact.cpu_artifact else ""
            raise NeuronArtifactError(
                f"{artifact.path} was compiled for {artifact.target} and runs only on a Neuron device; "
                f"this machine has none{twin}"
            )
        from workbench.compiler.neuron import import_sdk

        import_sdk(artifact.target)  # registers the neuron:: ops torch.jit.load needs
    if not Path(artifact.path).is_file():
        raise ArtifactError(f"{artifact.path}: file not found")
    if artifact.extra.get("format") == "torch.export":  # trn2/trn3 (workbench.compiler.torchneuron): the
        return torch.export.load(artifact.path).module()  # program itself, run here on the CPU (a reference)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # torch 2.x marks TorchScript deprecated
        return torch.jit.load(artifact.path, map_location="cpu")
