"""The inputs and outputs Triton's vLLM backend declares for a model, read from its model.py without
importing it, so that a local server serves vLLM models without Triton's auto-complete.

With auto-complete on, every load of a vLLM model starts one more backend stub whose only job is
the backend's ``auto_complete_config``: it imports vLLM (about 9 s of CPU on 2 cores) to add the
inputs and outputs the backend takes, a decoupled policy and max_batch_size 0. The backend lists
those inputs and outputs as literals (src/model.py, ``_auto_complete_inputs_and_outputs``), so they
are read with `ast`, and only where both functions have the shape this reading knows: a release
that decides them another way keeps Triton's auto-complete (`declared_io` is None).
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass
from pathlib import Path

from google.protobuf import json_format
from tritonclient.grpc import model_config_pb2

from workbench.generate.config import ModelConfig

__all__ = ["BackendIO", "declared_io"]

_FILLS = "_auto_complete_inputs_and_outputs"
# the calls the filling function may make besides building its two lists: read the config, collect
# the names it has, add what is missing (anything else might decide the lists at run time)
_FILLING_CALLS = frozenset({"as_dict", "append", "add_input", "add_output"})


@dataclass(frozen=True)
class BackendIO:
    """What the backend's auto-complete adds to a config: each input and output it declares, added
    where the config has none of that name."""

    inputs: tuple[model_config_pb2.ModelInput, ...]
    outputs: tuple[model_config_pb2.ModelOutput, ...]

    def completes(self, config: ModelConfig) -> bool:
        """Whether the backend's auto-complete takes ``config`` as it is: it refuses one that batches
        (max_batch_size above 0) or whose policy is set and not decoupled, and Triton's own
        auto-complete should then say so."""
        set_policy = config.HasField("model_transaction_policy")
        return config.max_batch_size == 0 and (not set_policy or config.model_transaction_policy.decoupled)

    def complete(self, config: ModelConfig) -> ModelConfig:
        """``config`` (not changed) as the backend's auto-complete leaves it (where it `completes`)."""
        done = ModelConfig()
        done.CopyFrom(config)
        have = {i.name for i in done.input}
        done.input.extend(i for i in self.inputs if i.name not in have)
        have = {o.name for o in done.output}
        done.output.extend(o for o in self.outputs if o.name not in have)
        done.model_transaction_policy.decoupled = True
        done.max_batch_size = 0
        return done


def declared_io(model_py: Path) -> BackendIO | None:
    """The inputs and outputs the vLLM backend at ``model_py`` declares, or None where its
    auto-complete is not the shape read here (or the file cannot be read)."""
    try:
        stat = model_py.stat()
    except OSError:
        return None
    return _read(model_py, stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=8)
def _read(model_py: Path, mtime_ns: int, size: int) -> BackendIO | None:
    try:
        tree = ast.parse(model_py.read_bytes())
    except (OSError, SyntaxError, ValueError):
        return None
    model = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "TritonPythonModel"), None)
    if model is None:
        return None
    methods = {n.name: n for n in model.body if isinstance(n, ast.FunctionDef)}
    entry, fills = methods.get("auto_complete_config"), methods.get(_FILLS)
    if entry is None or fills is None or not _sets_only_what_is_known(entry):
        return None
    return _literal_lists(fills)


def _sets_only_what_is_known(entry: ast.FunctionDef) -> bool:
    """Whether ``auto_complete_config`` does exactly: fill the inputs and outputs, set a
    decoupled policy, set max_batch_size 0, return the config."""
    calls = []
    for statement in entry.body:
        if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant):
            continue  # a docstring
        if isinstance(statement, ast.Return):
            continue
        if not (isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call)):
            return False
        call = statement.value
        name = ast.unparse(call.func).rsplit(".", 1)[-1]
        arguments = "" if name == _FILLS else ", ".join(ast.unparse(a) for a in call.args)  # _FILLS: the config
        calls.append(f"{name}:{arguments}")
    known = {
        f"{_FILLS}:",
        "set_model_transaction_policy:dict(decoupled=True)",
        "set_max_batch_size:0",
    }
    return sorted(calls) == sorted(known)


def _literal_lists(fills: ast.FunctionDef) -> BackendIO | None:
    """The ``inputs`` and ``outputs`` lists of the filling function, where they are literals that
    nothing else in it changes."""
    lists: dict[str, list[dict]] = {}
    for node in ast.walk(fills):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            if name in ("inputs", "outputs"):
                if name in lists:
                    return None  # assigned twice
                try:
                    value = ast.literal_eval(node.value)
                except ValueError:
                    return None
                if not (isinstance(value, list) and all(isinstance(v, dict) and "name" in v for v in value)):
                    return None
                lists[name] = value
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            return None
        elif isinstance(node, ast.Call):
            func = node.func
            if not (isinstance(func, ast.Attribute) and func.attr in _FILLING_CALLS):
                return None
            if isinstance(func.value, ast.Name) and func.value.id in ("inputs", "outputs"):
                return None  # a list grown after it was written
    if set(lists) != {"inputs", "outputs"}:
        return None
    try:
        inputs = tuple(json_format.ParseDict(i, model_config_pb2.ModelInput()) for i in lists["inputs"])
        outputs = tuple(json_format.ParseDict(o, model_config_pb2.ModelOutput()) for o in lists["outputs"])
    except json_format.ParseError:
        return None
    return BackendIO(inputs, outputs)
