"""The compile step's record beside a compiled model (``<artifact>.workbench.json``): reading it, the
tensor spec it holds, and settings checked against it, for every backend that takes a compiled model.
"""

from __future__ import annotations

import json
from pathlib import Path

from workbench.compiler.artifact import sidecar_path
from workbench.generate.settings import GenerateSettings
from workbench.spec import ModelSpec

__all__ = ["read_sidecar", "check_against_record", "spec_from_record"]


def read_sidecar(artifact: Path | None, problems: list[str]) -> dict | None:
    """The compile step's record beside the artifact, or None when there is none."""
    if artifact is None:
        return None
    side = sidecar_path(artifact)
    if not side.is_file():
        return None
    try:
        data = json.loads(side.read_text())
        data["spec"] = ModelSpec.from_dict(data["spec"])
    except (OSError, ValueError, KeyError, TypeError) as err:
        problems.append(f"{side}: unreadable compile record ({err})")
        return None
    return data


def _dims_match(given: tuple[int, ...], expected: tuple[int, ...]) -> bool:
    return len(given) == len(expected) and all(g == e or -1 in (g, e) for g, e in zip(given, expected))


def check_against_record(settings: GenerateSettings, spec: ModelSpec, record: dict, where: str) -> list[str]:
    """Config dims, names and dtypes against what the compiled model takes (dims there exclude the batch)."""
    problems = []
    compiled: ModelSpec = record["spec"]
    batch_dim = bool(record.get("batch_dim", True))
    mbs = settings.max_batch_size
    if record.get("target") and record["target"] != settings.target:
        problems.append(
            f"--compiled_model was compiled for {record['target']} ({where}), but the target is "
            f"{settings.target}; use --target {record['target']} or compile for {settings.target}"
        )
    if record.get("framework") and record["framework"] != settings.framework:
        problems.append(
            f"--compiled_model is a {record['framework']} model ({where}), but --model_type is {settings.framework}"
        )
    if not batch_dim and mbs > 0:
        problems.append(
            f"--max_batch_size {mbs}: the compiled model has no batch dim ({where}); "
            "Triton cannot batch it, use --max_batch_size 0"
        )
    for kind, given, known in (("input", spec.inputs, compiled.inputs), ("output", spec.outputs, compiled.outputs)):
        by_name = {t.name: t for t in known}
        for tensor in given:
            model_tensor = by_name.get(tensor.name)
            if model_tensor is None:
                names = ", ".join(by_name)
                problems.append(f"{kind} {tensor.name!r} is not one of the compiled model's {kind}s ({names}; {where})")
                continue
            if model_tensor.dtype != tensor.dtype:
                problems.append(
                    f"{kind} {tensor.name!r}: dtype {tensor.dtype}, but the compiled model's is "
                    f"{model_tensor.dtype} ({where})"
                )
            expected = model_tensor.dims if (mbs > 0 or not batch_dim) else (-1, *model_tensor.dims)
            if _dims_match(tensor.dims, expected):
                continue
            if settings.framework == "transformers_neuronx" and _dims_match(tensor.dims, model_tensor.dims):
                continue  # its model.py also takes one unbatched prompt
            if mbs > 0 and _dims_match(tensor.dims[1:], model_tensor.dims):
                problems.append(
                    f"{kind} {tensor.name!r}: dims {list(tensor.dims)} include a batch dim, but with "
                    f"max_batch_size {mbs} Triton adds it; use {list(model_tensor.dims)}"
                )
            elif mbs == 0 and batch_dim and _dims_match(tensor.dims, model_tensor.dims):
                problems.append(
                    f"{kind} {tensor.name!r}: dims {list(tensor.dims)} lack the batch dim the compiled "
                    f"model takes; with max_batch_size 0 use {[-1, *model_tensor.dims]}"
                )
            else:
                shown = ("[batch] + " if batch_dim else "") + str(list(model_tensor.dims))
                problems.append(
                    f"{kind} {tensor.name!r}: dims {list(tensor.dims)} disagree with the compiled "
                    f"model's {shown} ({where})"
                )
        missing = [name for name in by_name if name not in {t.name for t in given}]
        if missing:
            problems.append(f"the compiled model also takes {kind}(s) {', '.join(missing)} ({where})")
    return problems


def spec_from_record(settings: GenerateSettings, record: dict) -> ModelSpec:
    spec: ModelSpec = record["spec"]
    if settings.max_batch_size == 0 and record.get("batch_dim", True):
        return spec.with_batch_dim(-1)
    return spec
