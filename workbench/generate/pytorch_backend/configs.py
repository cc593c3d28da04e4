"""config.pbtxt for the PyTorch backend: build either layout's config and name what Triton would refuse."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from tritonclient.grpc import model_config_pb2

from workbench.generate.config import (
    ConfigError,
    ModelConfig,
    build_config,
    parameters_of,
    spec_from_config,
    validate_config,
)
from workbench.generate.pytorch_backend.layouts import (
    PYTORCH2,
    TORCHSCRIPT,
    PyTorchConfigError,
    layout_of,
    parameter_problems,
)
from workbench.generate.pytorch_backend.real_backend import misserved
from workbench.spec import ModelSpec, SpecError

__all__ = ["INSTANCE_KINDS", "build_pytorch_config", "check_pytorch_config", "pytorch_problems"]

INSTANCE_KINDS = ("KIND_GPU", "KIND_CPU", "KIND_MODEL")


def build_pytorch_config(
    name: str,
    spec: ModelSpec,
    *,
    layout: str = TORCHSCRIPT,
    max_batch_size: int = 0,
    dynamic_batching: bool = False,
    preferred_batch_sizes: Iterable[int] = (),
    max_queue_delay_us: int | None = None,
    instance_kind: str = "KIND_CPU",
    instance_count: int = 1,
    gpus: Iterable[int] = (),
    parameters: Mapping[str, Any] | None = None,
) -> ModelConfig:
    """A checked ModelConfig for either layout. Parameter values may be Python values (``True``,
    ``4``, a dict for ``TORCH_COMPILE_OPTIONAL_PARAMETERS``) or the strings Triton stores."""
    if layout not in (TORCHSCRIPT, PYTORCH2):
        raise PyTorchConfigError(f"layout {layout!r} is not {TORCHSCRIPT!r} or {PYTORCH2!r}")
    if instance_kind not in INSTANCE_KINDS:
        raise PyTorchConfigError(
            f"instance kind {instance_kind!r} is not one the PyTorch backend supports: {', '.join(INSTANCE_KINDS)}"
        )
    cfg = build_config(
        name,
        spec,
        max_batch_size=max_batch_size,
        dynamic_batching=dynamic_batching,
        preferred_batch_sizes=preferred_batch_sizes,
        max_queue_delay_us=max_queue_delay_us,
        instance_count=instance_count,
        kind=instance_kind,
        parameters=parameters,
        backend="pytorch",
    )
    if layout == TORCHSCRIPT:
        try:
            spec.check_indexed_names()  # generated configs use the one convention that needs no model
        except SpecError as err:
            raise PyTorchConfigError(str(err)) from None
    if layout == PYTORCH2:
        cfg.runtime = "model.py"
    cfg.instance_group[0].gpus.extend(int(g) for g in gpus)
    if cfg.max_batch_size > 0:
        # A batched string tensor arrives as [batch, 1]; LibTorch wants a 1-D List[str], so the
        # documented reshape to [] turns it into [batch].
        for entry in list(cfg.input) + list(cfg.output):
            if entry.data_type == model_config_pb2.TYPE_STRING and list(entry.dims) == [1]:
                entry.reshape.SetInParent()
    check_pytorch_config(cfg)
    problems = misserved(cfg)  # what the r24.10 backend would answer wrongly is not generated
    if problems:
        raise PyTorchConfigError("; ".join(problems))
    return cfg


def check_pytorch_config(cfg: ModelConfig) -> ModelConfig:
    """Raise PyTorchConfigError listing every problem; return ``cfg`` when there is none."""
    problems = validate_config(cfg) + pytorch_problems(cfg)
    if problems:
        raise PyTorchConfigError("; ".join(problems))
    return cfg


def pytorch_problems(cfg: ModelConfig) -> list[str]:
    """What the PyTorch backend (or its Python runtime) would refuse or silently misread."""
    problems: list[str] = []
    if cfg.backend != "pytorch" and cfg.platform != "pytorch_libtorch":
        problems.append(f'backend is {cfg.backend or cfg.platform!r}; the PyTorch backend needs backend: "pytorch"')
    if cfg.runtime not in ("", "model.py"):
        problems.append(
            f"runtime {cfg.runtime!r} is not supported: leave it empty (TorchScript on LibTorch) "
            'or use "model.py" (PyTorch 2)'
        )
    layout = layout_of(cfg)
    problems += _instance_problems(cfg)
    problems += _tensor_problems(cfg, layout)
    for key, value in parameters_of(cfg).items():
        problems += parameter_problems(key, value, layout)
    return problems


def _instance_problems(cfg: ModelConfig) -> list[str]:
    problems = []
    for group in cfg.instance_group:
        kind = model_config_pb2.ModelInstanceGroup.Kind.Name(group.kind)
        label = f"instance_group {group.name!r}" if group.name else "instance_group"
        # KIND_AUTO is protobuf's default when a hand-written config leaves `kind` out; Triton
        # resolves it to KIND_GPU or KIND_CPU, so it is accepted on read.
        if kind not in INSTANCE_KINDS + ("KIND_AUTO",):
            problems.append(
                f"{label}: kind {kind} is not supported by the PyTorch backend ({', '.join(INSTANCE_KINDS)})"
            )
        if kind == "KIND_CPU" and len(group.gpus):
            problems.append(f"{label}: KIND_CPU cannot list gpus {list(group.gpus)}; use KIND_GPU or drop gpus")
    return problems


def _tensor_problems(cfg: ModelConfig, layout: str) -> list[str]:
    problems = []
    try:
        spec = spec_from_config(cfg)
    except (ConfigError, SpecError):
        return []  # validate_config already reported the tensors
    if layout == TORCHSCRIPT:
        # LibTorch maps inputs by forward-argument name, else by NAME__i, else by config order
        # (outputs: NAME__i, else config order). Only an all-indexed set can be checked without
        # the model: its indices must cover 0..n-1 or forward() gets a hole.
        for kind, tensors in (("input", spec.inputs), ("output", spec.outputs)):
            indices = [t.index for t in tensors if t.index is not None]
            if len(indices) == len(tensors) and sorted(indices) != list(range(len(indices))):
                problems.append(
                    f"{kind} indices {sorted(indices)} of the NAME__i names must cover "
                    f"0..{len(indices) - 1} exactly: the index is the position in forward()"
                )
    for kind, entries in (("input", cfg.input), ("output", cfg.output)):
        for entry in entries:
            if entry.data_type != model_config_pb2.TYPE_STRING:
                continue
            if layout == PYTORCH2:
                problems.append(
                    f"{kind} {entry.name!r}: TYPE_STRING is not supported by the PyTorch 2 runtime "
                    "(it passes tensors through DLPack, which has no string type); use the TorchScript layout"
                )
                continue
            shape = list(entry.reshape.shape) if entry.HasField("reshape") else list(entry.dims)
            full = ([-1] if cfg.max_batch_size > 0 else []) + shape
            if len(full) != 1:
                hint = (
                    "dims: [1] with reshape: { shape: [] }"
                    if cfg.max_batch_size > 0
                    else "a single dim such as dims: [-1]"
                )
                problems.append(
                    f"{kind} {entry.name!r}: TYPE_STRING tensors must be 1-D for the PyTorch backend "
                    f"(strings travel as a List[str]); this one is {len(full)}-D {full}; use {hint}"
                )
    return problems
