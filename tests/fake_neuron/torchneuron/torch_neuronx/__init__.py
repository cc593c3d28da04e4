"""FAKE TorchNeuron (``torch-neuronx`` 2.14.3.1, the native PyTorch backend for Trn2/Trn3) for tests:
NOT the AWS SDK. A test puts ``tests/fake_neuron/torchneuron`` before ``tests/fake_neuron`` on the
path, so ``import torch_neuronx`` finds this library instead of the PyTorch/XLA fake, as a Trn2/Trn3
image from Neuron 2.33 on would (the same package name: DOCS release-notes/components/
torchneuron.html; "torch-neuronx 2.14.x is the native backend", DOCS torch/troubleshooting.html).

What it has, each from its source:

* ``__version__`` ``2.14.3.1`` (Neuron 2.34.0: GitHub release aws-neuron/torch-neuronx v2.34.0).
* The ``neuron`` backend of ``torch.compile`` (DOCS torch/compile/index.html: "selected with
  torch.compile(model, backend="neuron")"), registered at import. Like the real one it compiles on
  the first call per input signature and reuses it after (how-to-optimize page step 2), and it
  rejects symbolic shapes ("dynamic=True is rejected during compilation", reference-torch-compile
  page, parameter table). The fake "compiles" by running the captured FX graph on the CPU and records
  each signature in ``COMPILED`` (and, in a stub, ``compiled_shapes`` of the record file).
* The device: TorchNeuron registers a ``neuron`` device ("change .to('cuda') to .to('neuron')",
  DOCS torch/index.rst). With a (fake) device present the fake registers the name and keeps tensors
  on the CPU (`_register_device`), so outputs stay real.

What it does NOT have, as the real library (its API reference lists the operator table and the
torch.compile backend only: DOCS torch/reference/api/index.html; that trace, dynamic_batch,
DataParallel and analyze are absent is the audit's inference from the docs, not read from a wheel):
``trace``, ``dynamic_batch``, ``DataParallel``, ``analyze``, ``lazy_load`` raise AttributeError like
any missing attribute. Nothing here says anything about Neuron performance.
"""

import os

import torch
from torch._dynamo.backends.registry import _BACKENDS, _COMPILER_FNS, register_backend

from fake_neuron_record import call, device_present, record, visible_core_count

__version__ = "2.14.3.1+fake"
COMPILED = []  # the input shapes of every graph the fake backend compiled, in order
IMPORT_ENV = {key: os.environ.get(key) for key in ("NEURON_RT_VISIBLE_CORES", "NEURON_LOGICAL_NC_CONFIG")}


def _neuron_backend(graph_module, example_inputs):
    shapes = [list(t.shape) for t in example_inputs if isinstance(t, torch.Tensor)]
    symbolic = any(isinstance(t, torch.SymInt) for t in example_inputs)  # dynamic=True passes sizes as inputs
    if symbolic or any(not isinstance(d, int) for shape in shapes for d in shape):
        raise RuntimeError("FAKE TorchNeuron: dynamic shapes are not supported (dynamic=True is rejected during "
                           "compilation); compile with dynamic=False")
    COMPILED.append(shapes)
    call("torch_neuronx.neuron_backend", shapes)
    record(compiled_shapes=COMPILED)
    return graph_module.forward


_BACKENDS.pop("neuron", None)
_COMPILER_FNS.pop("neuron", None)
register_backend(compiler_fn=_neuron_backend, name="neuron")

class _Device:
    """The fake ``torch.neuron`` device module: torch asks it whether the device is available; the
    stand-in answers no, so torch itself keeps computing on the CPU."""

    __doc__ = "FAKE torch.neuron device module (registered by the FAKE TorchNeuron)"

    @staticmethod
    def is_available():
        return False

    @staticmethod
    def device_count():
        return visible_core_count() or 1

    @staticmethod
    def _is_in_bad_fork():
        return False

    @staticmethod
    def manual_seed_all(seed):
        return None


def _on_cpu(value):
    if isinstance(value, (str, torch.device)):
        try:
            if torch.device(value).type == "neuron":
                return torch.device("cpu")
        except RuntimeError:
            pass
    return value


def _stand_in(original):
    def to(self, *args, **kwargs):
        args = tuple(_on_cpu(a) for a in args)
        if "device" in kwargs:
            kwargs["device"] = _on_cpu(kwargs["device"])
        return original(self, *args, **kwargs)
    return to


def _register_device():
    """What TorchNeuron does at import, through PyTorch's PrivateUse1 mechanism (DOCS
    torch/about-pytorch-neuron.html): a ``neuron`` device. The fake maps ``.to("neuron")`` of tensors
    and modules to the CPU. Only where a device is present (FAKE_NEURON_DEVICE=1, in a child process:
    the renaming cannot be undone); elsewhere ``torch.device("neuron")`` raises RuntimeError, as
    ``.to('neuron')`` does on a machine without Trainium (DOCS torch/troubleshooting.html)."""
    torch.utils.rename_privateuse1_backend("neuron")
    if not hasattr(torch, "neuron"):
        torch._register_device_module("neuron", _Device())
    torch.Tensor.to = _stand_in(torch.Tensor.to)
    torch.nn.Module.to = _stand_in(torch.nn.Module.to)


def restore():
    """Drop the fake backend (in-process tests call it when they finish)."""
    _BACKENDS.pop("neuron", None)
    _COMPILER_FNS.pop("neuron", None)


def _record_export_loads():
    """Inside a stub only: note the path torch.export.load reads and the visible cores then."""
    if not os.environ.get("FAKE_NEURON_RECORD_DIR") or getattr(torch.export.load, "_fake_neuron", False):
        return
    original = torch.export.load

    def load(path, *args, **kwargs):
        record(load_path=str(path), visible_cores_at_load=os.environ.get("NEURON_RT_VISIBLE_CORES"))
        return original(path, *args, **kwargs)

    load._fake_neuron = True
    torch.export.load = load


if device_present():
    _register_device()
_record_export_loads()
record(imported="torch_neuronx", library="torchneuron", visible_cores_at_import=os.environ.get("NEURON_RT_VISIBLE_CORES"))
