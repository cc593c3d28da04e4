"""FAKE torch-neuronx, the PyTorch/XLA library (Inf2/Trn1; version 2.9.0.2.15.32035, the last XLA
build), for tests: NOT the AWS SDK. (TorchNeuron, the 2.13/2.14 library of the same name, is the
fake in ../torchneuron/.) Each function has the real name, signature and defaults (SDK
frameworks/torch/torch-neuronx/api-reference-guide/inference/
api-torch-neuronx-{trace,analyze,data-parallel,async-lazy-load}.rst @ aws-neuron-sdk 81ce03ae;
analyze's parameter names from torch_neuronx/xla_impl/analyze.py) and returns what the real one
returns, computed on the CPU:

* ``trace``: a fake Neuron graph (fake_neff.py: the CPU ``torch.jit.trace`` that takes only the
  traced shapes, as a NEFF does; trace page "Dynamic Batching"). It fails where the SDK fails:
  without a device and without ``cpu_backend=True`` with the PJRT error of aws-neuron-sdk #902/#910
  ("a Neuron device is currently required for torch 2.x compilation"); ``cpu_backend=True`` without
  ``--target`` with the SDK's RuntimeError (message quoted in optimum-neuron PR #961); a ``--target``
  neuronx-cc does not know (CLI reference :85-94: inf2, trn1, trn1n, trn2) or trn2, whose PyTorch/XLA
  inference is unsupported from Neuron 2.34 (DOCS announce-no-support-torch-xla-inference-trn.html;
  already "only supports NeuronCore-v2 type instances (e.g. trn1, inf2)", trace page :30); an LNC
  value other than 1/2, or LNC 2 on trn1 (NCC_EARG001, SDK compiler/error-codes/EARG001.rst:18-21).
  Positional arguments after ``example_inputs`` warn (keyword-only since 2.15, trace page); an
  operator in ``UNSUPPORTED`` raises (the page: unsupported operators fail the trace unless a
  ``partitioner_config`` is given). It prints the compiler command it stands for.
* ``dynamic_batch``: switches the graph's dynamic batching on in place and returns the same object
  (trace page, "Dynamic Batching").
* ``lazy_load(trace)``: marks the trace, in place (async-lazy-load page :34-37).
* ``analyze``: the report of ``create_final_report`` (analyze.py): ``support_percentage`` a string
  ``"NN.NN%"``, ``supported_operators`` ``{kind: count}``, ``unsupported_operators`` one dict per
  node (``kind``, ``failureAt``, ``call``, ``opGraph``); INFO lines on the ``Neuron`` logger;
  RuntimeError("neuronx-cc is not installed...") when ``import neuronxcc`` fails.
* ``DataParallel(model, device_ids=None, dim=0, set_dynamic_batching=True)``: chunking and
  ``num_workers`` as the public source does (fake_neuron_record.DataParallelBase), and
  ``move_trace_to_device(trace, device_id)``.

``IMPORT_ENV`` holds NEURON_PLATFORM_TARGET_OVERRIDE and NEURON_RT_VISIBLE_CORES as they were when
this module was imported (the real library reads them then). See ../README.md.
"""

import logging
import os
import shlex
import warnings

import torch

from fake_neuron_record import DataParallelBase, call, device_present, record, record_jit_loads, set_dynamic

__version__ = "2.9.0.2.15.32035+fake"
UNSUPPORTED = {"aten::fft_fft"}  # the trace and analyze pages' example of an unsupported operator
IMPORT_ENV = {key: os.environ.get(key) for key in ("NEURON_PLATFORM_TARGET_OVERRIDE", "NEURON_RT_VISIBLE_CORES")}
_OPS_TO_NOT_ANALYZE = {"aten::to", "aten::copy"}  # analyze.py OPS_TO_NOT_ANALYZE
_TARGETS = ("inf2", "trn1", "trn1n", "trn2")  # neuronx-cc --target choices (CLI reference :85-94)
_LNC_FLAGS = ("--logical-nc-config", "-lnc", "--lnc")
_logger = logging.getLogger("Neuron")


def _compiler_args(compiler_args):
    if compiler_args is None:
        return []
    return shlex.split(compiler_args) if isinstance(compiler_args, str) else list(compiler_args)


def _aten_nodes(traced):
    return [node for node in traced.inlined_graph.nodes()
            if node.kind().startswith("aten::") and node.kind() not in _OPS_TO_NOT_ANALYZE]


def _flag(args, names):
    for i, arg in enumerate(args):
        for name in names:
            if arg == name and i + 1 < len(args):
                return args[i + 1]
            if arg.startswith(name + "="):
                return arg.split("=", 1)[1]
    return None


def _check_compiler_args(args):
    """neuronx-cc's own refusals of --target and LNC (CLI reference; NCC_EARG001)."""
    target = _flag(args, ("--target",))
    if target is not None and target not in _TARGETS:
        raise RuntimeError(f"FAKE neuronx-cc: argument --target: invalid choice: {target!r} "
                           f"(choose from {', '.join(_TARGETS)})")
    if target == "trn2":
        raise RuntimeError("FAKE torch_neuronx.trace: PyTorch/XLA inference is not supported on Trn2/Trn3 from "
                           "Neuron 2.34.0; use TorchNeuron (torch.compile(backend=\"neuron\"))")
    lnc = _flag(args, _LNC_FLAGS)
    if lnc is not None:
        if lnc not in ("1", "2"):
            raise RuntimeError(f"FAKE neuronx-cc: argument --logical-nc-config: invalid choice: {lnc!r} "
                               "(choose from 1, 2)")
        if lnc == "2" and target in ("trn1", "trn1n"):
            raise RuntimeError("FAKE neuronx-cc: [NCC_EARG001] On trn1, only lnc=1 is supported")


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
    if not cpu_backend and not device_present():
        raise RuntimeError("FAKE torch_neuronx.trace: PJRT_Client_Create failed: Init: error condition "
                           "!(num_devices > 0): no Neuron device (compile on CPU with cpu_backend=True)")
    _check_compiler_args(args)
    print(f"FAKE neuronx-cc compile --framework XLA {' '.join(args)}".rstrip(), flush=True)
    example = example_inputs if isinstance(example_inputs, tuple) else (example_inputs,)
    traced = torch.jit.trace(func, example)
    bad = sorted({node.kind() for node in _aten_nodes(traced) if node.kind() in UNSUPPORTED})
    if bad and partitioner_config is None:
        raise RuntimeError(f"FAKE neuronx-cc: unsupported operator(s) {bad}")
    from fake_neff import compiled  # only compiles need it (a stub links the package alone)

    return compiled(traced, example)


def dynamic_batch(neuron_script):
    call("torch_neuronx.dynamic_batch", neuron_script)
    return set_dynamic(neuron_script, True)


def lazy_load(trace, enable_lazy_load=True):
    """``torch_neuronx.lazy_load(trace, enable_lazy_load=True)`` (SDK api-torch-neuronx-async-lazy-load
    page): the first forward or DataParallel loads the trace; the fake only notes the call."""
    call("torch_neuronx.lazy_load", trace, enable_lazy_load=enable_lazy_load)


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
    SPLIT_BY_SOURCE = True  # TNXSRC data_parallel.py (torch-neuronx 1.13.1.1.12.0, the only public source)

    def __init__(self, model, device_ids=None, dim=0, set_dynamic_batching=True):
        self._setup(model, device_ids, dim, dynamic_batching=set_dynamic_batching)


record(imported="torch_neuronx", visible_cores_at_import=os.environ.get("NEURON_RT_VISIBLE_CORES"))
record_jit_loads(torch, "torch_neuronx")
