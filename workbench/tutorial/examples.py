"""Small pieces the tutorial notebooks would otherwise define inline: the same model retargeted for
a Neuron host, a progress bar, the allocations that fit a core count, a TensorFlow SavedModel and
its in-process reference, greedy generation as the reference for the sampling model.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from workbench.compiler.tensorflow import saved_model_reference, tiny_saved_model  # re-exported for the notebooks
from workbench.coremap import Allocation, CoreRange
from workbench.generate import GenerateSettings
from workbench.targets import TargetChoice

__all__ = [
    "for_neuron_host",
    "progress_bar",
    "allocations",
    "tiny_saved_model",
    "saved_model_reference",
    "greedy_generate",
]


def for_neuron_host(
    settings: GenerateSettings,
    choice: TargetChoice,
    artifact: Any,
    *,
    core_range: CoreRange,
    repository: str | os.PathLike,
) -> GenerateSettings:
    """``settings`` (what is served here) retargeted to ``choice.wanted`` on NeuronCores ``core_range``,
    written under ``repository``. The Neuron artifact is copied in when it was compiled here; otherwise
    the model refers to the file the Neuron compile will produce (``--for-other-machine``), with its
    tensors spelled out because there is no file here to read them from."""
    target = choice.wanted
    name = Path(settings.triton_model_dir).name if not settings.name else settings.name
    common: dict[str, Any] = dict(  # GenerateSettings fields, whichever machine compiled
        triton_model_dir=str(Path(repository) / name),
        name=None,
        target=target,
        neuron_core_range=core_range,
        cpu_affinity=False,
    )
    if artifact.target == target:
        return dataclasses.replace(settings, compiled_model=str(artifact.path), copy_compiled_model=True, **common)
    if settings.framework == "tensorflow":
        compiled = f"{artifact.name}.{target}.savedmodel"
    elif settings.framework == "transformers_neuronx":
        compiled = Path(artifact.path).name
    else:
        compiled = f"{artifact.name}.{target}.pt"
    tensors: dict[str, Any] = (
        {}
        if settings.triton_input or settings.framework == "transformers_neuronx"
        else dict(triton_input=list(artifact.spec.inputs), triton_output=list(artifact.spec.outputs))
    )
    return dataclasses.replace(
        settings, compiled_model=compiled, copy_compiled_model=False, for_other_machine=True, **tensors, **common
    )


@contextmanager
def progress_bar(description: str) -> Iterator[Callable[[int, int, str], None]]:
    """A ``progress(done, total, message)`` callback drawn as a tqdm bar (a widget in Jupyter)."""
    from tqdm.auto import tqdm

    bar = tqdm(total=1, desc=description)

    def update(done: int, total: int, message: str = "") -> None:
        bar.total, bar.n = max(total, 1), done
        bar.set_postfix_str(message[:60], refresh=False)
        bar.refresh()

    try:
        yield update
    finally:
        bar.close()


def allocations(cores: int) -> tuple[Allocation, ...]:
    """Every INSTANCESxCORES split whose cores divide ``cores`` evenly (``4`` -> 1x1, 2x1, 4x1, 1x2, 2x2, 1x4),
    for a sweep over core allocations."""
    if cores < 1:
        raise ValueError(f"cores must be at least 1, got {cores}")
    return tuple(
        Allocation(n, c) for c in range(1, cores + 1) for n in range(1, cores // c + 1) if cores % (n * c) == 0
    )


def greedy_generate(model: Any, prompt_ids: np.ndarray, length: int) -> np.ndarray:
    """``transformers``' greedy generation to exactly ``length`` tokens: what the served sampling model
    must return on the CPU target."""
    import torch

    ids = torch.from_numpy(np.asarray(prompt_ids, dtype=np.int64))
    with torch.inference_mode():
        out = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_length=length,
            min_length=length,
            do_sample=False,
            pad_token_id=model.config.pad_token_id,
        )
    return out.numpy()
