"""FAKE torch-neuron (Inf1) for tests: NOT the AWS SDK. Importing it registers ``torch.neuron`` (as
``import torch_neuron`` does, SDK archive/torch-neuron/api-compilation-python-api.rst) with:

* ``trace(model, example_inputs, **kwargs)``: SDK api-compilation-python-api.rst ("torch_neuron.trace");
  a Tensor is wrapped in a tuple, a list/tuple passed positionally (torch.jit.trace's rule); the known
  keyword arguments are consumed, the rest forwarded to ``torch.jit.trace`` as documented. Returns a
  fake Neuron graph (fake_neff.py: the CPU trace taking only the traced shapes, dim 0 free with
  ``dynamic_batch_size=True``) where the real one embeds Neuron graphs. ``fallback=False`` with an
  operator in ``UNSUPPORTED`` raises ``AttributeError`` (documented). Operators go to Neuron only in
  runs of at least ``minimum_segment_size`` (default 2) consecutive supported operators (the trace
  page's partitioning parameters); when no run is that long it logs the SDK's WARNING "No operator
  is placed on Neuron runtime; returning a CPU trace" and returns the plain CPU trace: aws-neuron-sdk
  issue #827 shows it for a 100%-supported one-convolution model.
* ``analyze_model(model, example_inputs)``: logs at INFO on the ``Neuron`` logger with the SDK's
  line texts (aws-neuron-sdk issues #630, #698) and returns the OrderedDict of the SDK 1.11
  tutorial (tag 1.11.0 getting_started.rst; unverified for torch-neuron 1.13.1.2.x).
* ``DataParallel(model, device_ids=None, dim=0)``: SDK archive/torch-neuron/api-torch-neuron-dataparallel-api.rst.

Operators in ``UNSUPPORTED`` (a set a test may change) count as unsupported. See ../README.md.
"""

import collections
import logging
import os
import sys
import types

import torch

from fake_neuron_record import DataParallelBase, call, record, record_jit_loads

UNSUPPORTED = set()
_TRACE_KEYWORDS = ("compiler_args", "compiler_timeout", "compiler_workdir", "subgraph_builder_function",
                   "minimum_segment_size", "single_fusion_ratio_threshold", "fallback", "dynamic_batch_size",
                   "optimizations", "separate_weights")
_logger = logging.getLogger("Neuron")


def _operators(traced):
    return [node.kind() for node in traced.inlined_graph.nodes() if node.kind().startswith("aten::")]


def _as_tuple(example_inputs):
    return example_inputs if isinstance(example_inputs, tuple) else (
        tuple(example_inputs) if isinstance(example_inputs, list) else (example_inputs,))


def trace(model, example_inputs, **kwargs):
    call("torch.neuron.trace", model, example_inputs, **kwargs)
    options = {key: kwargs.pop(key) for key in list(kwargs) if key in _TRACE_KEYWORDS}
    traced = torch.jit.trace(model, _as_tuple(example_inputs), **kwargs)
    kinds = _operators(traced)
    bad = [k for k in kinds if k in UNSUPPORTED]
    if bad and options.get("fallback", True) is False:
        raise AttributeError(f"FAKE torch.neuron.trace: unsupported operator(s) {sorted(set(bad))} with fallback=False")
    longest = run = 0
    for kind in kinds:
        run = 0 if kind in UNSUPPORTED else run + 1
        longest = max(longest, run)
    if longest < options.get("minimum_segment_size", 2):
        _logger.warning("No operator is placed on Neuron runtime; returning a CPU trace")
        return traced
    from fake_neff import compiled  # only compiles need it (a stub links the package alone)

    return compiled(traced, _as_tuple(example_inputs), dynamic=bool(options.get("dynamic_batch_size", False)))


def analyze_model(model, example_inputs):
    call("torch.neuron.analyze_model", model, example_inputs)
    kinds = _operators(torch.jit.trace(model, _as_tuple(example_inputs)))
    counts = collections.OrderedDict((k, kinds.count(k)) for k in sorted(set(kinds)))
    supported = {k for k in counts if k not in UNSUPPORTED}
    unsupported = sorted(k for k in counts if k in UNSUPPORTED)
    supported_count = sum(counts[k] for k in supported)
    percent = 100.0 * supported_count / max(1, len(kinds))
    _logger.info("The following operations are currently supported in torch-neuron for this model:")
    for kind in sorted(supported):
        _logger.info(kind)
    if unsupported:
        _logger.info("The following operations are currently not supported in torch-neuron for this model:")
        for kind in unsupported:
            _logger.info(kind)
    _logger.info(f"{percent:.2f}% of all operations (including primitives) ({supported_count} of {len(kinds)}) "
                 "are supported")
    _logger.info(f"{percent:.2f}% of arithmetic operations ({supported_count} of {len(kinds)}) are supported")
    return collections.OrderedDict([
        ("percent_supported", percent), ("percent_supported_arithmetic", percent),
        ("supported_count", supported_count), ("total_count", len(kinds)),
        ("supported_count_arithmetic", supported_count), ("total_count_arithmetic", len(kinds)),
        ("supported_operators", supported), ("unsupported_operators", unsupported),
        ("operators", sorted(counts)), ("operator_count", counts),
    ])


class DataParallel(DataParallelBase):
    sdk = "torch_neuron"

    def __init__(self, model, device_ids=None, dim=0):
        self._setup(model, device_ids, dim, dynamic_batching=dim == 0)  # "switched on automatically when dim=0"


record(imported="torch_neuron", visible_cores_at_import=os.environ.get("NEURON_RT_VISIBLE_CORES"))
record_jit_loads(torch, "torch_neuron")
neuron = types.ModuleType("torch.neuron")
neuron.__doc__ = "FAKE torch.neuron namespace (registered by the FAKE torch_neuron)"
neuron.trace, neuron.analyze_model, neuron.DataParallel = trace, analyze_model, DataParallel
torch.neuron = neuron
sys.modules["torch.neuron"] = neuron
