"""The limits that really apply to numbers and names, checked in one place before anything is written.

Where a value ends up in config.pbtxt, its range is the protobuf field's own type, read from
``tritonclient.grpc.model_config_pb2``'s descriptors (max_batch_size is int32, dims int64, the
queue delay uint64 ...), never guessed. Where it ends up as a folder name, the rule is Triton's:
core's ``model_lifecycle.cc`` (r24.10, ``VersionsToLoad``) skips ``configs``/``warmup``/
``initial_state`` and names with a leading zero, then reads the rest with ``std::stoll``, catching
only ``std::invalid_argument``: a name past int64 throws ``std::out_of_range`` and aborts the
server; ``stoll`` also reads ``1.5`` or ``+1`` as version 1, whose files Triton then looks for in
``1/`` (the load hangs in LOADING). Wrong types are errors naming the field, never converted.
"""

from __future__ import annotations

import functools
import numbers
import os
import re
import resource
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeGuard

from workbench.refusals import WorkbenchError

__all__ = [
    "LimitError",
    "INT32_MAX",
    "TENSOR_NAME_RULE",
    "MODEL_NAME_RULE",
    "field_range",
    "field_problem",
    "is_whole",
    "integer_problem",
    "tensor_name_problem",
    "model_name_problem",
    "triton_version",
    "version_folder_problems",
    "model_dir_problems",
    "dataclass_problems",
    "HostLimit",
    "host_task_limit",
    "thread_count_limit",
    "memory_available",
]

# The one rule for tensor names (CLI items, the API, read-back): what a NAME,DTYPE,SHAPE item,
# config.pbtxt and TensorFlow's "name:0" signature names can all carry.
TENSOR_NAME_RULE = "letters, digits, '_', '-', '.', ':' or '/', starting with a letter, digit or '_'"
_TENSOR_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:/\-]*")
# Model names are directory names in the repository and URL path segments in Triton's HTTP API.
MODEL_NAME_RULE = "letters, digits, '_', '-' or '.' (not '.' or '..')"
_MODEL_NAME = re.compile(r"[A-Za-z0-9_.\-]+")

# folders of a model directory Triton never reads as versions (model_lifecycle.cc's skip_dirs)
TRITON_SKIPPED_FOLDERS = ("warmup", "initial_state", "configs")
_INT64 = (-(2**63), 2**63 - 1)
INT32_MAX = 2**31 - 1  # C's int: what std::stoi and int-taking C APIs (torch.set_num_threads) hold
_C_WHITESPACE = " \t\n\v\f\r"


class LimitError(WorkbenchError, ValueError):
    """A value outside the limits that apply; the message names the field."""


@functools.cache
def _ranges() -> dict[int, tuple[int, int]]:
    from google.protobuf.descriptor import FieldDescriptor as F

    return {
        F.CPPTYPE_INT32: (-(2**31), 2**31 - 1),
        F.CPPTYPE_INT64: _INT64,
        F.CPPTYPE_UINT32: (0, 2**32 - 1),
        F.CPPTYPE_UINT64: (0, 2**64 - 1),
    }


@functools.cache
def field_range(message: str, field: str) -> tuple[int, int, str]:
    """(lowest, highest, type name) of ``message.field`` in Triton's ModelConfig protobuf, e.g.
    ``field_range("ModelInput", "dims")``; ``message`` may be dotted (``ModelVersionPolicy.Specific``)."""
    from google.protobuf.descriptor import FieldDescriptor as F
    from tritonclient.grpc import model_config_pb2

    cls: Any = model_config_pb2
    for part in message.split("."):
        cls = getattr(cls, part)
    descriptor = cls.DESCRIPTOR.fields_by_name[field]
    names = {F.CPPTYPE_INT32: "int32", F.CPPTYPE_INT64: "int64", F.CPPTYPE_UINT32: "uint32", F.CPPTYPE_UINT64: "uint64"}
    if descriptor.cpp_type not in names:
        raise KeyError(f"{message}.{field} is not an integer field")
    low, high = _ranges()[descriptor.cpp_type]
    return low, high, names[descriptor.cpp_type]


def is_whole(value: Any) -> TypeGuard[int]:
    """An integer (numpy's too, which count as int), not a bool and not a float, however integral."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def integer_problem(value: Any, flag: str, low: int, high: int, kind: str = "") -> str | None:
    """The problem with ``value`` as the whole number ``flag`` takes, or None. ``low`` is only
    enforced below zero (callers state their own "at least 1"-style rules); ``kind`` names the type."""
    if not is_whole(value):
        shown = f"{value!r} ({type(value).__name__})"
        return f"{flag} must be a whole number (int), got {shown}"
    where = f" (the {kind} field's range)" if kind else ""
    if value > high:
        return f"{flag} {value} is too large: at most {high}{where}"
    if low < 0 and value < low:
        return f"{flag} {value} is too small: at least {low}{where}"
    return None


def field_problem(value: Any, flag: str, message: str, field: str) -> str | None:
    """`integer_problem` with the range of Triton's ``message.field`` (`field_range`): the value
    must fit the protobuf field it is written to, or the config cannot even be built."""
    low, high, kind = field_range(message, field)
    return integer_problem(value, flag, low, high, f"{message}.{field} {kind}")


def tensor_name_problem(name: Any) -> str | None:
    if isinstance(name, str) and _TENSOR_NAME.fullmatch(name):
        return None
    return f"bad tensor name {name!r}: use {TENSOR_NAME_RULE}"


def model_name_problem(name: Any) -> str | None:
    if isinstance(name, str) and name not in (".", "..") and _MODEL_NAME.fullmatch(name):
        return None
    return f"model name {name!r} is not usable; use {MODEL_NAME_RULE}"


def triton_version(folder: str) -> int | None:
    """The version Triton 2.51 reads from a folder of a model directory, None when it skips the
    folder; raises LimitError where its ``std::stoll`` would throw out_of_range (the server aborts)."""
    if folder in TRITON_SKIPPED_FOLDERS or (len(folder) > 1 and folder[0] == "0"):
        return None
    match = re.match(r"[+-]?[0-9]+", folder.lstrip(_C_WHITESPACE))
    if match is None:
        return None  # std::invalid_argument: skipped with a warning
    value = int(match[0])
    if not _INT64[0] <= value <= _INT64[1]:
        raise LimitError(
            f"version folder {folder!r} is past int64: Triton's std::stoll throws out_of_range "
            "and tritonserver aborts, taking every loaded model down"
        )
    return value


def version_folder_problems(folders: Iterable[str], where: str = "") -> list[str]:
    """What in these folder names of a model directory would crash or hang Triton: a name past
    int64, one it reads as a version whose files it then looks for elsewhere (``1.5/`` is read as
    1, served from ``1/``), or a negative version. ``where`` prefixes each message."""
    problems = []
    for folder in sorted(set(folders)):
        try:
            version = triton_version(folder)
        except LimitError as err:
            problems.append(f"{where}{folder}/: {err}")
            continue
        if version is None:
            continue
        if version < 0:
            problems.append(f"{where}{folder}/: Triton reads it as version {version}; versions are >= 0")
        elif str(version) != folder:
            problems.append(
                f"{where}{folder}/: Triton reads it as version {version} but looks for that "
                f"version's files in {version}/, so the load hangs; rename it {version}/"
            )
    return problems


def model_dir_problems(model_dir: str | Path) -> list[str]:
    """`version_folder_problems` of a model directory on disk (none when it is not there)."""
    root = Path(model_dir)
    if not root.is_dir():
        return []
    return version_folder_problems((p.name for p in root.iterdir() if p.is_dir()), f"{root.name}/")


# Integer settings -> the ModelConfig field each one is written to (its protobuf type bounds it).
PROTO_FIELDS = {
    "max_batch_size": ("ModelConfig", "max_batch_size"),
    "triton_model_instance_count": ("ModelInstanceGroup", "count"),
    "preferred_batch_size": ("ModelDynamicBatching", "preferred_batch_size"),
    "max_queue_delay_microseconds": ("ModelDynamicBatching", "max_queue_delay_microseconds"),
    "priority_levels": ("ModelDynamicBatching", "priority_levels"),
    "default_priority_level": ("ModelDynamicBatching", "default_priority_level"),
    "default_timeout_microseconds": ("ModelQueuePolicy", "default_timeout_microseconds"),
    "max_queue_size": ("ModelQueuePolicy", "max_queue_size"),
    "model_version": ("ModelVersionPolicy.Specific", "versions"),  # and Triton's stoll: int64 too
    "dims": ("ModelInput", "dims"),
}
# Integers written as config parameters for model.py, which reads them with int() and hands them
# to C ints (torch.set_num_threads, transformers-neuronx sizes): a C int's range.
_C_INT = (-INT32_MAX - 1, INT32_MAX, "C int")


def setting_range(name: str) -> tuple[int, int, str]:
    if name in PROTO_FIELDS:
        low, high, kind = field_range(*PROTO_FIELDS[name])
        return low, high, f"{PROTO_FIELDS[name][0]}.{PROTO_FIELDS[name][1]} {kind}"
    return _C_INT


def _hint_kinds(hint: Any) -> set[type]:
    import types
    import typing

    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        return {k for arg in typing.get_args(hint) for k in _hint_kinds(arg)}
    origin = typing.get_origin(hint)
    return {origin if origin is not None else hint}


def dataclass_problems(obj: Any, flag=lambda name: f"--{name}") -> list[str]:
    """Type and range problems of a settings dataclass's int, bool and str fields (by their
    annotations), one message per field naming ``flag(name)``; lists of ints are checked item by
    item. Fields of other types (tensor items, core ranges) have their own parsers."""
    import dataclasses
    import typing

    hints = typing.get_type_hints(type(obj))
    problems = []
    for f in dataclasses.fields(obj):
        value, kinds = getattr(obj, f.name), _hint_kinds(hints.get(f.name))
        if value is None and type(None) in kinds:
            continue
        if kinds <= {int, type(None)}:
            problem = integer_problem(value, flag(f.name), *setting_range(f.name))
        elif kinds <= {bool, type(None)}:
            problem = (
                None
                if isinstance(value, bool)
                else f"{flag(f.name)} must be True or False, got {value!r} ({type(value).__name__})"
            )
        elif kinds <= {str, type(None)}:
            problem = (
                None
                if isinstance(value, str)
                else f"{flag(f.name)} must be a string, got {value!r} ({type(value).__name__})"
            )
        elif f.name in PROTO_FIELDS and kinds <= {list, tuple}:
            problem = (
                f"{flag(f.name)} must be a list of whole numbers, got {value!r}"
                if not isinstance(value, (list, tuple))
                else next(filter(None, (integer_problem(v, flag(f.name), *setting_range(f.name)) for v in value)), None)
            )
        else:
            continue
        if problem:
            problems.append(problem)
    return problems


def neuron_core_limit(target: str) -> tuple[str, int] | None:
    """(largest instance type, its NeuronCores) of a Neuron target family, counting physical cores
    (trn2's LNC=1 view, the most any setting exposes); None for cpu or an unknown target. A core
    index at or past it exists on no instance (`workbench.system`'s instance tables)."""
    # start-up: the instance tables load only when a core index is checked against them
    from workbench.system import CORES_PER_DEVICE, DEFAULT_LNC, DEVICES_BY_INSTANCE, instance_family

    if target not in CORES_PER_DEVICE:
        return None
    sizes = [
        (devices * CORES_PER_DEVICE[target] * DEFAULT_LNC.get(target, 1), name)
        for name, devices in DEVICES_BY_INSTANCE.items()
        if instance_family(name) == target
    ]
    if not sizes:
        return None
    cores, name = max(sizes)
    return name, cores


@dataclass(frozen=True)
class HostLimit:
    """A bound this machine sets, and where it comes from (said in every refusal it causes)."""

    value: int
    source: str


def host_task_limit() -> HostLimit:
    """How many threads and processes this host lets one user run at once: the smallest of the
    kernel's threads-max and pid_max and the RLIMIT_NPROC soft limit (``ulimit -u``). A thread past
    it fails with EAGAIN, and a server whose backend starts it aborts, taking every model down."""
    found = []
    for path in ("/proc/sys/kernel/threads-max", "/proc/sys/kernel/pid_max"):
        try:
            found.append(HostLimit(int(Path(path).read_text().strip()), path))
        except (OSError, ValueError):
            pass
    soft, _ = resource.getrlimit(resource.RLIMIT_NPROC)
    if soft != resource.RLIM_INFINITY and soft > 0:
        found.append(HostLimit(int(soft), "RLIMIT_NPROC (ulimit -u)"))
    return min(found, key=lambda limit: limit.value) if found else HostLimit(32768, "Linux's default pid_max")


# Threads one count setting may ask for: 8 per core (oversubscribed already) and at least 256, so a
# model generated here for a larger machine (192 vCPUs on the largest inf2) is not refused.
THREADS_PER_CORE = 8
MIN_THREAD_CAP = 256
HOST_SHARE = 4  # one setting may take a quarter of the host's threads: the server and others need the rest


def thread_count_limit() -> HostLimit:
    """The most threads a single setting (a backend's thread count, a sweep's requests in flight)
    may ask for on this machine: `THREADS_PER_CORE` per core, at least `MIN_THREAD_CAP`, and never
    more than a quarter of `host_task_limit`."""
    cores = os.cpu_count() or 1
    cap = HostLimit(
        max(MIN_THREAD_CAP, THREADS_PER_CORE * cores),
        f"{THREADS_PER_CORE} per core of this machine's {cores}, at least {MIN_THREAD_CAP}",
    )
    host = host_task_limit()
    shared = HostLimit(
        host.value // HOST_SHARE, f"a quarter of the {host.value} threads the host allows ({host.source})"
    )
    return min((cap, shared), key=lambda limit: limit.value)


def memory_available() -> int:
    """Bytes of memory this machine can still give (``MemAvailable`` of /proc/meminfo; the
    physical memory where the kernel does not say)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
