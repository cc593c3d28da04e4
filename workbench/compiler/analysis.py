"""Operator support before compiling, read as the SDKs report it.

torch_neuronx.analyze returns ``"NN.NN%"`` and one dict per unsupported node; torch.neuron.analyze_model
logs at INFO on the ``Neuron`` logger (lowered for the call, as the SDK's own tutorials do) and, in
SDK 1.x, returned a dict. Both are normalised to one shape here, so an unsupported operator shows
as unsupported.
"""

from __future__ import annotations

import contextlib
import logging
import re
from typing import Any

from workbench.compiler.cpu import CompileError, as_tensors
from workbench.compiler.neuron import _captured, import_sdk
from workbench.system import TORCHNEURON_TARGETS

__all__ = ["analyze_neuron"]


class _Records(logging.Handler):
    """Collects the messages of one logger."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@contextlib.contextmanager
def _neuron_logger_at_info():
    """The SDKs log their analysis at INFO on the ``Neuron`` logger; records below a logger's level
    are never made, so it is lowered for the call (as the SDK's own tutorials do) and restored."""
    logger = logging.getLogger("Neuron")
    level, records = logger.level, _Records()
    logger.setLevel(logging.INFO)
    logger.addHandler(records)
    try:
        yield records.messages
    finally:
        logger.removeHandler(records)
        logger.setLevel(level)


def _json_safe(value: Any) -> Any:
    """Sets (torch.neuron's supported_operators) as sorted lists, mappings as plain dicts."""
    if isinstance(value, (set, frozenset)):
        return sorted(_json_safe(v) for v in value)
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def _percentage(value: Any) -> float | None:
    """``"66.67%"`` (torch_neuronx) or 66.67 (torch.neuron) as a float."""
    if value is None or value == "":
        return None
    return float(str(value).strip().rstrip("%"))


def _inf1_unsupported_from_log(messages: list[str]) -> list[str]:
    """The operator names torch.neuron.analyze_model logs after "...not supported..." (issues #630,
    #698: one name per record, until the "NN.NN% of all operations" summary)."""
    names: list[str] = []
    collecting = False
    for message in messages:
        if "currently not supported" in message:
            collecting = True
        elif collecting and ("% of" in message or "currently supported" in message):
            collecting = False
        elif collecting and message.strip():
            names.append(message.strip().split(",")[0])
    return names


def analyze_neuron(model: Any, example_inputs: Any, target: str) -> dict[str, Any]:
    """Operator support for ``target`` without compiling, normalised from the SDK's own report:
    ``support_percentage`` (float or None), ``unsupported`` (sorted operator kinds), ``raw`` (the
    SDK's report, JSON-safe) and ``log``.

    inf2/trn1: ``torch_neuronx.analyze`` returns ``{"support_percentage": "NN.NN%",
    "supported_operators": {kind: count}, "unsupported_operators": [{"kind", "failureAt", "call",
    "opGraph"}, ...]}`` (one dict per node; SDK torch_neuronx.analyze page). inf1:
    ``torch.neuron.analyze_model`` logs the lists and percentages and, in SDK 1.x, returned a dict
    with ``percent_supported`` and ``unsupported_operators`` (names); both are read.
    """
    if target in TORCHNEURON_TARGETS:
        raise CompileError(
            f"{target} serves through TorchNeuron, which has no operator analyzer (its API "
            "reference lists the supported-operator table only: DOCS torch/reference/api/index.html); "
            "analyze for cpu to see the model's operators, or compile: TorchNeuron falls back to the CPU "
            "for unsupported operators in eager mode and refuses them under torch.compile(fullgraph=True)"
        )
    inputs = as_tensors(example_inputs)
    sdk = import_sdk(target)
    lines: list[str] = []
    with _captured(lines.append), _neuron_logger_at_info() as messages:
        if target == "inf1":
            raw = sdk.analyze_model(model, example_inputs=list(inputs))
        else:
            raw = sdk.analyze(model, tuple(inputs))
    raw = _json_safe(dict(raw)) if isinstance(raw, dict) else {}
    log = "\n".join(lines)
    if target != "inf1":
        # torch_neuronx.analyze takes no target and checks each operator with neuronx-cc --target trn1
        # (TNXSRC torch_neuronx/xla_impl/analyze.py check_supported_unsupported), so say whose support it is
        log = (
            f"NOTE torch_neuronx.analyze checks operators for trn1 whatever the target ({target}); "
            "inf2 and trn1 share NeuronCore-v2\n" + log
        )
    if target == "inf1":
        percentage = _percentage(raw.get("percent_supported"))
        if percentage is None:
            match = re.search(r"([\d.]+)% of all operations", log)
            percentage = float(match[1]) if match else None
        unsupported = raw.get("unsupported_operators")
        if unsupported is None:
            unsupported = _inf1_unsupported_from_log(messages)
    else:
        percentage = _percentage(raw.get("support_percentage"))
        unsupported = [
            entry["kind"] if isinstance(entry, dict) else str(entry) for entry in raw.get("unsupported_operators") or []
        ]
    return {"support_percentage": percentage, "unsupported": sorted(set(map(str, unsupported))), "raw": raw, "log": log}
