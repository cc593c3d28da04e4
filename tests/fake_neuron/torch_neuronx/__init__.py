"""FAKE torch-neuronx (Inf2/Trn1/Trn2) for tests: NOT the AWS SDK. Each function has the real
name, signature and defaults (SDK frameworks/torch/torch-neuronx/api-reference-guide/inference/
api-torch-neuronx-{trace,analyze,data-parallel}.rst @ aws-neuron-sdk 81ce03ae; analyze's parameter
names from torch_neuronx/xla_impl/analyze.py) and returns what the real one returns, computed on
the CPU:

* ``trace``: a CPU ``torch.jit.ScriptModule`` (the real one embeds a NEFF); ``cpu_backend=True``
  without ``--target`` raises the SDK's RuntimeError (message quoted in optimum-neuron PR #961);
  positional arguments after ``example_inputs`` warn (keyword-only since 2.15, trace page); an
  operator in ``UNSUPPORTED`` raises (the page: unsupported operators fail the trace unless a
  ``partitioner_config`` is given). It prints the compiler command it stands for.
* ``dynamic_batch``: modifies in place and returns the same object (trace page, "Dynamic Batching").
* ``analyze``: the report of ``create_final_report`` (analyze.py): ``support_percentage`` a string
  ``"NN.NN%"``, ``supported_operators`` ``{kind: count}``, ``unsupported_operators`` one dict per
  node (``kind``, ``failureAt``, ``call``, ``opGraph``); INFO lines on the ``Neuron`` logger;
  RuntimeError("neuronx-cc is not installed...") when ``import neuronxcc`` fails.
* ``DataParallel(model, device_ids=None, dim=0, set_dynamic_batching=True)`` and
  ``move_trace_to_device(trace, device_id)``.

``IMPORT_ENV`` holds NEURON_PLATFORM_TARGET_OVERRIDE and NEURON_RT_VISIBLE_CORES as they were when
this module was imported (the real library reads them then). See ../README.md.
"""

import logging
import os
import shlex
import warnings

import torch

from fake_neuron_record import DataParallelBase, call, record, record_jit_loads

__version__ = "2.9.0.2.15.32035+fake"
UNSUPPORTED = {"aten::fft_fft"}  # the trace and analyze pages' example of an unsupported operator
IMPORT_ENV = {key: os.environ.get(key) for key in ("NEURON_PLATFORM_TARGET_OVERRIDE", "NEURON_RT_VISIBLE_CORES")}
_OPS_TO_NOT_ANALYZE = {"aten::to", "aten::copy"}  # analyze.py OPS_TO_NOT_ANALYZE
_logger = logging.getLogger("Neuron")


def _compiler_args(compiler_args):
    if compiler_args is None:
        return []
    return shlex.split(compiler_args) if isinstance(compiler_args, str) else list(compiler_args)


def _aten_nodes(traced):
    return [node for node in traced.inlined_graph.nodes()
            if node.kind().startswith("aten::") and node.kind() not in _OPS_TO_NOT_ANALYZE]


def trace(func, example_inputs, *_, input_output_aliases={}, compiler_workdir=None, compiler_args=None,
          partitioner_config=None, inline_weights_to_neff=True, cpu_backend=False):
    call("torch_neuronx.trace", func, example_inputs, *_, input_output_aliases=input_output_aliases,
         compiler_workdir=compiler_workdir, compiler_args=compiler_args, partitioner_config=partitioner_config,
         inline_weights_to_neff=inline_weights_to_neff, cpu_backend=cpu_backend)
    if _:
        warnings.warn("FAKE torch_neuronx.trace: arguments after example_inputs must be given by keyword")
    args = _compiler_args(compiler_args)
    if cpu_backend and not any(a == "--target" or a.startswith("--target=") for a in args):
        raise RuntimeError('If you want to compile on CPU, please supply compiler argument target, with one of '
                           'options trn1, inf2, trn1n, or trn2. Ex: "--target trn1"')
    print(f"FAKE neuronx-cc compile --framework XLA {' '.join(args)}".rstrip(), flush=True)
    traced = torch.jit.trace(func, example_inputs)
    bad = sorted({node.kind() for node in _aten_nodes(traced) if node.kind() in UNSUPPORTED})
    if bad and partitioner_config is None:
        raise RuntimeError(f"FAKE neuronx-cc: unsupported operator(s) {bad}")
    return traced


def dynamic_batch(neuron_script):
    call("torch_neuronx.dynamic_batch", neuron_script)
    return neuron_script


def move_trace_to_device(trace, device_id):
    call("torch_neuronx.move_trace_to_device", trace, device_id)


def analyze(model, ex_input, compiler_workdir=None, additional_ignored_ops=set([]), max_workers=4,
            is_hf_transformers=False, cleanup=False):
    call("torch_neuronx.analyze", model, ex_input, compiler_workdir=compiler_workdir,
         additional_ignored_ops=additional_ignored_ops, max_workers=max_workers,
         is_hf_transformers=is_hf_transformers, cleanup=cleanup)
    try:
        import neuronxcc
    except ImportError as e:
        raise RuntimeError("neuronx-cc is not installed.\nneuronx-cc can be installed using:\n"
                           "python3 -m pip install --extra-index-url=https://pip.repos.neuron.amazonaws.com "
                           "neuronx-cc") from e
    if not isinstance(ex_input, tuple):
        ex_input = (ex_input,)
    traced = torch.jit.trace(model, ex_input)
    report = {"torch_neuronx_version": __version__, "neuronx_cc_version": neuronxcc.__version__,
              "support_percentage": "", "supported_operators": {}, "unsupported_operators": []}
    for node in _aten_nodes(traced):
        kind = node.kind()
        if kind in additional_ignored_ops:
            continue
        if kind in UNSUPPORTED:
            report["unsupported_operators"].append({"kind": kind, "failureAt": "neuronx-cc",
                                                    "call": str(node.sourceRange()), "opGraph": str(node)})
        else:
            report["supported_operators"][kind] = report["supported_operators"].get(kind, 0) + 1
    supported = sum(report["supported_operators"].values())
    total = supported + len(report["unsupported_operators"])
    report["support_percentage"] = f"{supported * 100 / total:.2f}%"  # ZeroDivisionError on no ops, as the SDK
    _logger.info("The following operations are currently supported:")
    for kind in report["supported_operators"]:
        _logger.info(kind)
    _logger.info("The following operations are currently not supported:")
    for entry in report["unsupported_operators"]:
        _logger.info(f"{entry['kind']}, {entry['call']}")
    _logger.info(f"{report['support_percentage']} of arithmetic operations ({supported} of {total}) are supported")
    return report


class DataParallel(DataParallelBase):
    sdk = "torch_neuronx"

    def __init__(self, model, device_ids=None, dim=0, set_dynamic_batching=True):
        self._setup(model, device_ids, dim, dynamic_batching=set_dynamic_batching)


record(imported="torch_neuronx", visible_cores_at_import=os.environ.get("NEURON_RT_VISIBLE_CORES"))
record_jit_loads(torch, "torch_neuronx")
