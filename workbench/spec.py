"""What a model takes and returns: tensor names, Triton data types and dims.

`ModelSpec` is the one description of a model's interface that every step shares: tracing builds
example inputs from it, generation turns it into config.pbtxt inputs/outputs, the check and the
load generator build requests from it. It accepts the spellings people already use (upstream
``NAME,DTYPE,SHAPE`` items, ``TYPE_FP32``, ``fp32``, ``float32``, numpy and torch dtypes) and
rejects anything else with a message that names the bad item.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from workbench.limits import integer_problem, setting_range, tensor_name_problem
from workbench.refusals import WorkbenchError

__all__ = [
    "SpecError",
    "TRITON_DTYPES",
    "TensorSpec",
    "ModelSpec",
    "parse_dtype",
    "numpy_dtype",
    "torch_dtype",
    "config_dtype",
    "tensor_index",
    "tensor_spec",
    "tensors_from_rows",
    "upstream_item",
]


class SpecError(WorkbenchError, ValueError):
    """A model interface that cannot be served as given; the message names the bad item."""


# Triton's wire names (what tritonclient and the HTTP/gRPC protocol use).
TRITON_DTYPES = (
    "BOOL",
    "UINT8",
    "UINT16",
    "UINT32",
    "UINT64",
    "INT8",
    "INT16",
    "INT32",
    "INT64",
    "FP16",
    "FP32",
    "FP64",
    "BF16",
    "BYTES",
)

_ALIASES = {
    "STRING": "BYTES",
    "STR": "BYTES",
    "OBJECT": "BYTES",
    "OBJECT_": "BYTES",
    "BYTES_": "BYTES",
    "BOOL_": "BOOL",
    "BOOLEAN": "BOOL",
    "FLOAT16": "FP16",
    "HALF": "FP16",
    "F16": "FP16",
    "FLOAT32": "FP32",
    "FLOAT": "FP32",
    "F32": "FP32",
    "FLOAT64": "FP64",
    "DOUBLE": "FP64",
    "F64": "FP64",
    "BFLOAT16": "BF16",
    "LONG": "INT64",
    "INT": "INT32",
    "SHORT": "INT16",
}

_NUMPY = {
    "BOOL": np.bool_,
    "UINT8": np.uint8,
    "UINT16": np.uint16,
    "UINT32": np.uint32,
    "UINT64": np.uint64,
    "INT8": np.int8,
    "INT16": np.int16,
    "INT32": np.int32,
    "INT64": np.int64,
    "FP16": np.float16,
    "FP32": np.float32,
    "FP64": np.float64,
    "BYTES": np.object_,
}

_TORCH = {
    "BOOL": "bool",
    "UINT8": "uint8",
    "UINT16": "uint16",
    "UINT32": "uint32",
    "UINT64": "uint64",
    "INT8": "int8",
    "INT16": "int16",
    "INT32": "int32",
    "INT64": "int64",
    "FP16": "float16",
    "FP32": "float32",
    "FP64": "float64",
    "BF16": "bfloat16",
}


def parse_dtype(value: Any) -> str:
    """Return the Triton wire name (``FP32``, ``INT64``, ``BYTES``...) for any accepted spelling.

    Accepted: Triton names with or without ``TYPE_``, lower case, numpy names and dtypes,
    torch dtypes. ``STRING`` (config.pbtxt's name) maps to ``BYTES`` (the protocol's name).
    """
    if isinstance(value, str):
        text = value.strip()
    elif _is_torch_dtype(value):
        text = str(value).removeprefix("torch.")
    else:
        try:
            text = np.dtype(value).name
        except TypeError:
            raise SpecError(f"unknown data type {value!r}") from None
        if np.dtype(value).kind in ("O", "S", "U"):
            text = "BYTES"
    key = text.upper()
    key = key.removeprefix("TYPE_")
    key = _ALIASES.get(key, key)
    if key in TRITON_DTYPES:
        return key
    # numpy / torch spellings: uint8, int64, float16 ...
    for triton, np_type in _NUMPY.items():
        if triton != "BYTES" and np.dtype(np_type).name.upper() == key:
            return triton
    allowed = ", ".join(TRITON_DTYPES)
    raise SpecError(f"unknown data type {value!r}; use one of {allowed} (or TYPE_*, numpy/torch names)")


def _is_torch_dtype(value: Any) -> bool:
    return type(value).__module__ == "torch" and type(value).__name__ == "dtype"


def numpy_dtype(dtype: str) -> Any:
    """numpy dtype used on the wire for a Triton type. BF16 has no numpy type: it travels as FP32
    tensors converted at the model boundary, so it is refused here."""
    dtype = parse_dtype(dtype)
    if dtype == "BF16":
        raise SpecError("BF16 has no numpy dtype; send FP32 and convert inside the model")
    return np.dtype(_NUMPY[dtype])


def torch_dtype(dtype: str) -> Any:
    import torch

    dtype = parse_dtype(dtype)
    if dtype == "BYTES":
        raise SpecError("BYTES (string) tensors have no torch dtype")
    return getattr(torch, _TORCH[dtype])


def config_dtype(dtype: str) -> str:
    """config.pbtxt enum name: ``TYPE_FP32``; Triton calls BYTES ``TYPE_STRING`` there."""
    dtype = parse_dtype(dtype)
    return "TYPE_STRING" if dtype == "BYTES" else f"TYPE_{dtype}"


def tensor_index(name: str) -> int | None:
    """The ``i`` of a ``NAME__i`` tensor name, else None: the one rule for the whole package.

    It is the PyTorch backend's (libtorch.cc, r24.10): the name splits at its *first* ``__`` and
    the rest must be ASCII digits, so ``a__1__2`` and ``a___0`` have no index and fall back to
    config order; upstream gen_triton_model.py's model.py (``name.split('__')`` into exactly two
    parts, the second numeric) agrees. One deliberate difference: LibTorch reads an empty rest
    (``INPUT__``) as index 0 through ``atoi``; here that name has no index. The self-contained
    templates keep copies of this rule (tests/test_request_handling.py holds them to it).
    """
    _, sep, digits = name.partition("__")
    if sep and digits and digits.isascii() and digits.isdigit():
        return int(digits)
    return None


def upstream_item(name: str, dtype: str, dims: Iterable[int]) -> str:
    """``NAME,DTYPE,SHAPE`` as gen_triton_model.py takes it (``INPUT__0,INT64,4x384``), values as given."""
    return f"{name},{dtype},{'x'.join(str(d) for d in dims)}"


def _parse_dims(text: str, item: str) -> tuple[int, ...]:
    if not text.strip():
        raise SpecError(f"{item!r}: empty shape; write dims like 4x384 (-1 for a variable dim)")
    dims = []
    for part in text.lower().replace(",", "x").split("x"):
        try:
            dims.append(int(part))
        except ValueError:
            raise SpecError(f"{item!r}: malformed shape {text!r}; write dims like 4x384") from None
    return tuple(dims)


@dataclass(frozen=True)
class TensorSpec:
    """One input or output: its name, Triton wire dtype and dims (without the batch dim when the
    model config has max_batch_size > 0)."""

    name: str
    dtype: str
    dims: tuple[int, ...]

    def __post_init__(self) -> None:
        problem = tensor_name_problem(self.name)
        if problem:
            raise SpecError(problem)
        object.__setattr__(self, "dtype", parse_dtype(self.dtype))
        if isinstance(self.dims, (str, bytes)) or not isinstance(self.dims, Iterable):
            raise SpecError(f"{self.name}: dims must be a list of whole numbers, got {self.dims!r}")
        low, high, kind = setting_range("dims")
        for d in self.dims:
            problem = integer_problem(d, f"{self.name}: dim", low, high, kind)
            if problem:
                raise SpecError(problem)
        dims = tuple(int(d) for d in self.dims)
        if not dims:
            raise SpecError(f"{self.name}: needs at least one dim")
        bad = [d for d in dims if d == 0 or d < -1]
        if bad:
            raise SpecError(f"{self.name}: dim {bad[0]} is invalid; dims are positive or -1 (variable)")
        object.__setattr__(self, "dims", dims)

    @classmethod
    def parse(cls, item: str) -> TensorSpec:
        """Parse the upstream gen_triton_model.py form ``NAME,DTYPE,SHAPE`` (``INPUT__0,INT64,4x384``)."""
        parts = [p.strip() for p in str(item).split(",")]
        if len(parts) != 3:
            raise SpecError(f"{item!r}: expected NAME,DTYPE,SHAPE such as INPUT__0,INT64,4x384")
        name, dtype, shape = parts
        try:
            dtype = parse_dtype(dtype)
        except SpecError as err:
            raise SpecError(f"{item!r}: {err}") from None
        return cls(name, dtype, _parse_dims(shape, item))

    @classmethod
    def from_row(cls, name: str, dtype: str, dims: str) -> TensorSpec:
        """A row of an editable table: a name, a dtype and the dims as typed (``4x384``)."""
        name = str(name).strip()
        try:
            dtype = parse_dtype(dtype)
        except SpecError as err:
            raise SpecError(f"{name!r}: {err}") from None
        return cls(name, dtype, _parse_dims(str(dims), name))

    def row(self) -> tuple[str, str, str]:
        """``from_row``'s inverse: ``("INPUT__0", "INT64", "4x384")``."""
        return self.name, self.dtype, "x".join(str(d) for d in self.dims)

    def upstream(self) -> str:
        """The ``NAME,DTYPE,SHAPE`` form gen_triton_model.py takes."""
        return upstream_item(self.name, self.dtype, self.dims)

    @property
    def index(self) -> int | None:
        """The ``i`` of an upstream ``NAME__i`` name (the position PyTorch passes it in), else None."""
        return tensor_index(self.name)

    def numpy_dtype(self) -> Any:
        return numpy_dtype(self.dtype)


def tensor_spec(item: Any, kind: str = "tensor") -> TensorSpec:
    """A TensorSpec from any accepted form: upstream ``NAME,DTYPE,SHAPE``, a dict of its fields,
    a ``(name, dtype, dims)`` triple, or a TensorSpec."""
    if isinstance(item, TensorSpec):
        return item
    if isinstance(item, str):
        return TensorSpec.parse(item)
    try:
        if isinstance(item, dict):
            return TensorSpec(**item)
        if isinstance(item, (tuple, list)) and len(item) == 3:
            return TensorSpec(*item)
    except TypeError as err:
        raise SpecError(f"bad {kind} {item!r}: {err}") from None
    raise SpecError(f"bad {kind} {item!r}: give NAME,DTYPE,SHAPE, a dict or a TensorSpec")


def tensors_from_rows(rows: Iterable[Sequence[str]], kind: str = "tensor") -> tuple[TensorSpec, ...]:
    """Table rows ``(name, dtype, dims text)`` as TensorSpecs; a SpecError names the row
    (``input row 2: ...``) and what is wrong with it."""
    tensors = []
    for number, row in enumerate(rows, start=1):
        try:
            tensors.append(TensorSpec.from_row(*row))
        except SpecError as err:
            raise SpecError(f"{kind} row {number}: {err}") from None
    return tuple(tensors)


def _tensors(items: Iterable[Any], kind: str) -> tuple[TensorSpec, ...]:
    return tuple(tensor_spec(item, kind) for item in items)


@dataclass(frozen=True)
class ModelSpec:
    """A model's inputs and outputs, in the order the model takes and returns them."""

    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    extra: dict = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "inputs", _tensors(self.inputs, "input"))
        object.__setattr__(self, "outputs", _tensors(self.outputs, "output"))
        if not self.inputs:
            raise SpecError("a model needs at least one input")
        if not self.outputs:
            raise SpecError("a model needs at least one output")
        seen: dict[str, str] = {}
        for kind, tensors in (("input", self.inputs), ("output", self.outputs)):
            for t in tensors:
                if t.name in seen:
                    raise SpecError(f"duplicate tensor name {t.name!r} ({seen[t.name]} and {kind})")
                seen[t.name] = kind

    @classmethod
    def parse(cls, inputs: Sequence[Any], outputs: Sequence[Any]) -> ModelSpec:
        """Build from upstream items (``["INPUT__0,INT64,4x384", ...]``), dicts or TensorSpecs."""
        return cls(tuple(inputs), tuple(outputs))

    def check_indexed_names(self) -> None:
        """Upstream PyTorch rule: every name is ``NAME__i`` and the indices cover 0..n-1.

        The index, not the declaration order, is the position in ``forward()``; a gap would leave
        a positional argument unfilled, so it is refused before anything is written.
        """
        for kind, tensors in (("input", self.inputs), ("output", self.outputs)):
            indices = []
            for t in tensors:
                if t.index is None:
                    raise SpecError(
                        f"{kind} {t.name!r}: PyTorch models need names of the form NAME__i "
                        f"(e.g. {kind.upper()}__0) so the index gives the argument position"
                    )
                indices.append(t.index)
            if sorted(indices) != list(range(len(indices))):
                missing = sorted(set(range(len(indices))) - set(indices))
                dup = sorted({i for i in indices if indices.count(i) > 1})
                detail = f"missing index {missing}" if missing else f"repeated index {dup}"
                raise SpecError(f"{kind} indices must cover 0..{len(indices) - 1}: {detail}")

    def by_index(self, kind: str = "input") -> tuple[TensorSpec, ...]:
        """Tensors in argument order: by ``__i`` index when all have one, else declaration order."""
        tensors = self.inputs if kind == "input" else self.outputs
        indexed = [(t.index, t) for t in tensors if t.index is not None]
        if len(indexed) == len(tensors):
            return tuple(t for _, t in sorted(indexed, key=lambda pair: pair[0]))
        return tensors

    def upstream_args(self) -> dict[str, list[str]]:
        return {
            "triton_input": [t.upstream() for t in self.inputs],
            "triton_output": [t.upstream() for t in self.outputs],
        }

    def without_batch_dim(self) -> ModelSpec:
        """Drop the leading dim of every tensor (for configs with max_batch_size > 0)."""

        def strip(t: TensorSpec) -> TensorSpec:
            if len(t.dims) < 2:
                raise SpecError(f"{t.name}: dims {list(t.dims)} have no batch dim to drop")
            return replace(t, dims=t.dims[1:])

        return ModelSpec(tuple(map(strip, self.inputs)), tuple(map(strip, self.outputs)))

    def with_batch_dim(self, size: int = -1) -> ModelSpec:
        def add(t: TensorSpec) -> TensorSpec:
            return replace(t, dims=(size, *t.dims))

        return ModelSpec(tuple(map(add, self.inputs)), tuple(map(add, self.outputs)))

    def example_inputs(
        self,
        batch_size: int | None = None,
        *,
        seed: int = 0,
        variable_dim: int = 8,
        int_range: tuple[int, int] = (0, 100),
    ) -> list[np.ndarray]:
        """Seeded random inputs in argument order, ``batch_size`` prepended when given.

        Integer inputs fall in ``int_range`` (token ids for a small vocabulary); -1 dims become
        ``variable_dim``.
        """
        rng = np.random.default_rng(seed)
        arrays = []
        for t in self.by_index("input"):
            shape = tuple(variable_dim if d == -1 else d for d in t.dims)
            if batch_size is not None:
                shape = (batch_size, *shape)
            dtype = "FP32" if t.dtype == "BF16" else t.dtype
            np_type = numpy_dtype(dtype)
            if t.dtype == "BYTES":
                arr = np.array(
                    [str(v).encode() for v in rng.integers(*int_range, size=shape).ravel()], dtype=object
                ).reshape(shape)
            elif t.dtype == "BOOL":
                arr = rng.integers(0, 2, size=shape).astype(np.bool_)
            elif np.issubdtype(np_type, np.integer):
                arr = rng.integers(*int_range, size=shape).astype(np_type)
            else:
                arr = rng.standard_normal(size=shape).astype(np_type)
            arrays.append(arr)
        return arrays

    def to_dict(self) -> dict:
        return {
            "inputs": [{"name": t.name, "dtype": t.dtype, "dims": list(t.dims)} for t in self.inputs],
            "outputs": [{"name": t.name, "dtype": t.dtype, "dims": list(t.dims)} for t in self.outputs],
        }

    @classmethod
    def from_dict(cls, data: dict) -> ModelSpec:
        return cls(tuple(data["inputs"]), tuple(data["outputs"]))
