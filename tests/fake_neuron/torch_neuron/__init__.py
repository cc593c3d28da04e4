"""FAKE torch-neuron (Inf1) for tests: NOT the AWS SDK. Importing it registers ``torch.neuron``
with a recording DataParallel that runs the CPU TorchScript module (see ../README.md)."""

import os
import sys
import types

import torch

from fake_neuron_record import FakeDataParallel, record, record_jit_loads


class DataParallel(FakeDataParallel):
    sdk = "torch_neuron"


record(imported="torch_neuron", visible_cores_at_import=os.environ.get("NEURON_RT_VISIBLE_CORES"))
record_jit_loads(torch, "torch_neuron")
neuron = types.ModuleType("torch.neuron")
neuron.DataParallel = DataParallel
torch.neuron = neuron
sys.modules["torch.neuron"] = neuron
