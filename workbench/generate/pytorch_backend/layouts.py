"""The PyTorch backend's two layouts and the config parameters each reads: tables and value checks.

Triton reports a bad value here only when it loads the model, and some mistakes (``"yes"`` for a
boolean, ``0`` threads, an unknown ``torch.compile`` key) are rejected there with terse messages
or silently ignored. The tables below say what each key means and what the backend does when it
is absent (pytorch_backend r24.10: libtorch.cc for TorchScript, src/model.py for PyTorch 2); every
value is checked against them and each error names the key.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from workbench.generate.config import ConfigError, ModelConfig
from workbench.limits import INT32_MAX, thread_count_limit

__all__ = [
    "TORCHSCRIPT",
    "PYTORCH2",
    "PyTorchConfigError",
    "Parameter",
    "TORCHSCRIPT_PARAMETERS",
    "PYTORCH2_PARAMETERS",
    "TORCH_COMPILE_KEYS",
    "TORCH_COMPILE_MODES",
    "TRUE_SPELLINGS",
    "FALSE_SPELLINGS",
    "WORKBENCH_KEYS",
    "layout_of",
    "parameter_table",
    "parameter_problems",
    "parse_torch_compile_parameters",
]

TORCHSCRIPT = "torchscript"
PYTORCH2 = "pytorch2"


class PyTorchConfigError(ConfigError):
    """A PyTorch-backend config or layout that Triton would refuse or misserve; names the key."""


@dataclass(frozen=True)
class Parameter:
    """One config.pbtxt parameter the backend reads: ``kind`` is ``bool``, ``count`` (an integer
    >= 1) or ``json``; ``default`` is what the backend does when the key is absent."""

    key: str
    kind: str
    default: str
    meaning: str


def _params(*items: Parameter) -> dict[str, Parameter]:
    return {p.key: p for p in items}


TORCHSCRIPT_PARAMETERS = _params(
    Parameter(
        "DISABLE_OPTIMIZED_EXECUTION",
        "bool",
        "false",
        "skip TorchScript's graph optimisations (long first-call warm-up; sometimes slower)",
    ),
    Parameter("INFERENCE_MODE", "bool", "true", "run under torch.inference_mode (no autograd bookkeeping)"),
    Parameter("DISABLE_CUDNN", "bool", "false", "turn cuDNN off (GPU only)"),
    Parameter(
        "ENABLE_WEIGHT_SHARING",
        "bool",
        "false",
        "instances on the same device share one copy of the weights (not for stateful models)",
    ),
    Parameter("ENABLE_CACHE_CLEANING", "bool", "false", "empty the CUDA cache after every execution (GPU only)"),
    Parameter("INTER_OP_THREAD_COUNT", "count", "all cores", "inter-op thread pool size (process-wide)"),
    Parameter("INTRA_OP_THREAD_COUNT", "count", "all cores", "intra-op threads (process-wide)"),
    Parameter("ENABLE_JIT_EXECUTOR", "bool", "true", "use the JIT's profiling executor"),
    Parameter("ENABLE_JIT_PROFILING", "bool", "true", "use the JIT's profiling mode"),
    # The seed page announces three extra optimisation switches but lists two; the backend's
    # third is the tensor-expression fuser.
    Parameter("ENABLE_TENSOR_FUSER", "bool", "true", "use the JIT's tensor-expression fuser"),
)

PYTORCH2_PARAMETERS = _params(
    Parameter("NUM_THREADS", "count", "1", "torch.set_num_threads: intra-op threads on the CPU"),
    Parameter("NUM_INTEROP_THREADS", "count", "1", "torch.set_num_interop_threads: inter-op threads on the CPU"),
    Parameter(
        "TORCH_COMPILE_OPTIONAL_PARAMETERS", "json", "{}", "keyword arguments for torch.compile, as a JSON object"
    ),
    # The PyTorch 2 runtime runs inside the Python backend, which reads this one key itself.
    Parameter("EXECUTION_ENV_PATH", "path", "", "conda-pack'ed Python environment for the Python backend"),
)

# torch.compile keyword -> accepted JSON types (None = JSON null).
TORCH_COMPILE_KEYS: dict[str, tuple[type | None, ...]] = {
    "fullgraph": (bool,),
    "dynamic": (bool, None),
    "backend": (str,),
    "mode": (str,),
    "options": (dict,),
    "disable": (bool,),
}
# torch 2.13's list (its error for a bad mode names these five, "lite" included).
TORCH_COMPILE_MODES = ("default", "lite", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")

# Spellings LibTorch's ParseBoolValue accepts: any case, but no surrounding spaces (r24.10 refuses
# ' true' with "failed to convert ' true' to boolean").
TRUE_SPELLINGS = ("true", "on", "1")
FALSE_SPELLINGS = ("false", "off", "0")

# Keys the workbench itself writes into a config it loads (measure/plan.py marks each sweep
# variant with one, so every variant is a full reload); both runtimes ignore unknown keys.
WORKBENCH_KEYS = ("WORKBENCH_SWEEP_VARIANT",)


def layout_of(cfg: ModelConfig) -> str:
    """``pytorch2`` when the config asks for the Python runtime, else ``torchscript``."""
    return PYTORCH2 if cfg.runtime == "model.py" else TORCHSCRIPT


def parameter_table(layout: str) -> dict[str, Parameter]:
    return PYTORCH2_PARAMETERS if layout == PYTORCH2 else TORCHSCRIPT_PARAMETERS


def parameter_problems(key: str, value: str, layout: str) -> list[str]:
    table = parameter_table(layout)
    if key in WORKBENCH_KEYS:
        return []
    if key not in table:
        other = TORCHSCRIPT_PARAMETERS if layout == PYTORCH2 else PYTORCH2_PARAMETERS
        if key in other:
            where = 'the PyTorch 2 layout (runtime: "model.py")' if layout == TORCHSCRIPT else "the TorchScript layout"
            return [
                f"parameter {key} belongs to {where}; this config uses the {layout} layout, "
                f"which reads: {', '.join(table)}"
            ]
        return [f"parameter {key} is not read by the PyTorch backend ({layout} layout); known keys: {', '.join(table)}"]
    spec = table[key]
    if spec.kind == "bool" and value.lower() not in TRUE_SPELLINGS + FALSE_SPELLINGS:
        spaces = (
            " (without spaces: Triton refuses them)"
            if value.strip().lower() in TRUE_SPELLINGS + FALSE_SPELLINGS
            else ""
        )
        return [f'parameter {key} = {value!r} is not a boolean; use "true" or "false"{spaces}']
    if spec.kind == "count":
        if not re.fullmatch(r"\s*[+-]?[0-9]+\s*", value):
            return [f"parameter {key} = {value!r} is not an integer thread count"]
        number = int(value)
        if number > INT32_MAX:
            # the LibTorch backend reads counts with std::stoi: past int32 it throws out_of_range
            # while loading and tritonserver aborts, taking every loaded model with it
            return [
                f"parameter {key} = {number} is too large: at most {INT32_MAX} (the backend reads it "
                "with std::stoi, an int32)"
            ]
        cap = thread_count_limit()
        if number > cap.value:
            # a thread count the host cannot create: the backend's pool fails with EAGAIN while
            # loading and tritonserver aborts (seen: 100000 with 32768 allowed, issue 47)
            return [
                f"parameter {key} = {number} is more threads than this machine can run: at most "
                f"{cap.value} ({cap.source})"
            ]
        if number < 1:
            return [
                f"parameter {key} = {number} must be at least 1 thread"
                + (" (the backend silently ignores 0 and negative counts)" if layout == TORCHSCRIPT else "")
            ]
    if spec.kind == "json":
        try:
            parse_torch_compile_parameters(value)
        except PyTorchConfigError as err:
            return [str(err)]
    return []


def parse_torch_compile_parameters(text: str | Mapping[str, Any]) -> dict[str, Any]:
    """Check ``TORCH_COMPILE_OPTIONAL_PARAMETERS`` (JSON text or a dict) and return the keyword
    arguments the runtime passes to ``torch.compile``."""
    key = "TORCH_COMPILE_OPTIONAL_PARAMETERS"
    if isinstance(text, Mapping):
        params = dict(text)
    else:
        try:
            params = json.loads(text)
        except json.JSONDecodeError as err:
            raise PyTorchConfigError(
                f"parameter {key} is not valid JSON ({err.msg} at line {err.lineno}, column {err.colno}): {text!r}"
            ) from None
    if not isinstance(params, dict):
        raise PyTorchConfigError(f'parameter {key} must be a JSON object such as {{"disable": true}}, got {text!r}')
    for name, value in params.items():
        if name not in TORCH_COMPILE_KEYS:
            raise PyTorchConfigError(
                f"parameter {key}: unknown torch.compile option {name!r}; allowed: {', '.join(TORCH_COMPILE_KEYS)}"
            )
        allowed = TORCH_COMPILE_KEYS[name]
        if not any(value is None if t is None else isinstance(value, t) for t in allowed):
            wanted = " or ".join(
                "null" if t is None else {bool: "true/false", str: "a string", dict: "an object"}[t] for t in allowed
            )
            raise PyTorchConfigError(f"parameter {key}: {name!r} must be {wanted}, got {json.dumps(value)}")
    if "backend" in params and not params["backend"].strip():
        raise PyTorchConfigError(
            f"parameter {key}: 'backend' is empty; name a torch.compile backend such as \"inductor\""
        )
    if "mode" in params and params["mode"] not in TORCH_COMPILE_MODES:
        raise PyTorchConfigError(
            f"parameter {key}: mode {params['mode']!r} is not one of {', '.join(TORCH_COMPILE_MODES)}"
        )
    if "mode" in params and "options" in params:
        raise PyTorchConfigError(f"parameter {key}: give 'mode' or 'options', not both (torch.compile refuses both)")
    for option in params.get("options", {}):
        if not isinstance(option, str) or not option:
            raise PyTorchConfigError(f"parameter {key}: 'options' keys must be non-empty strings")
    return params
