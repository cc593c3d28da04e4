"""FAKE compiled-graph wrapper (tests only), shared by the fake torch_neuron and torch_neuronx: NOT
the AWS SDK. A real Neuron trace embeds a NEFF that "will always expect to consume tensors of the
same shape" as the example inputs (SDK api-torch-neuronx-trace.rst, "Dynamic Batching";
torch-neuron's trace page says the same of ``dynamic_batch_size=False``). The fake keeps the CPU
``torch.jit.trace`` of the model and wraps it in a scripted module that refuses any other input
shape unless dynamic batching was switched on, in which case dim 0 may vary (the SDK splits and pads
it into chunks of the traced batch; the CPU graph computes the same rows whole).

The wrapper is TorchScript, so ``torch.jit.save``/``load`` keep the traced shapes and the switch:
``dynamic_batch`` and DataParallel flip ``dynamic`` on the loaded module
(fake_neuron_record.set_dynamic) as the SDK's
``torch_neuronx.dynamic_batch(module, True)`` does (TNXSRC data_parallel.py).
"""

from typing import List

import torch


def _check(shapes: List[List[int]], dynamic: bool, index: int, tensor: torch.Tensor):
    expected = shapes[index]
    got = list(tensor.shape)
    if dynamic:
        ok = len(got) == len(expected) and got[1:] == expected[1:]
    else:
        ok = got == expected
    if not ok:
        raise RuntimeError("FAKE Neuron graph: input " + str(index) + " has shape " + str(got)
                           + " but the graph was compiled for " + str(expected)
                           + " (a NEFF takes one shape unless dynamic batching is on)")


class _Neff1(torch.nn.Module):
    def __init__(self, graph, shapes: List[List[int]], dynamic: bool):
        super().__init__()
        self.graph, self.shapes, self.dynamic = graph, shapes, dynamic

    def forward(self, a: torch.Tensor):
        _check(self.shapes, self.dynamic, 0, a)
        return self.graph(a)


class _Neff2(_Neff1):
    def forward(self, a: torch.Tensor, b: torch.Tensor):
        _check(self.shapes, self.dynamic, 0, a)
        _check(self.shapes, self.dynamic, 1, b)
        return self.graph(a, b)


class _Neff3(_Neff1):
    def forward(self, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor):
        _check(self.shapes, self.dynamic, 0, a)
        _check(self.shapes, self.dynamic, 1, b)
        _check(self.shapes, self.dynamic, 2, c)
        return self.graph(a, b, c)


_BY_ARITY = {1: _Neff1, 2: _Neff2, 3: _Neff3}


def compiled(graph, example_inputs, dynamic=False):
    """``graph`` (a CPU ``torch.jit.trace``) as a fixed-shape fake Neuron graph. Models of more than
    three tensor inputs stay unwrapped (their shapes are then not enforced: a gap of the fake)."""
    tensors = [t for t in example_inputs if isinstance(t, torch.Tensor)]
    wrapper = _BY_ARITY.get(len(tensors)) if len(tensors) == len(example_inputs) else None
    if wrapper is None:
        return graph
    return torch.jit.script(wrapper(graph, [list(t.shape) for t in tensors], dynamic))

