"""FAKE torch-neuronx (Inf2/Trn1) for tests: NOT the AWS SDK. A recording DataParallel that runs
the CPU TorchScript module (see ../README.md)."""

import os

import torch

from fake_neuron_record import FakeDataParallel, record, record_jit_loads


class DataParallel(FakeDataParallel):
    sdk = "torch_neuronx"


record(imported="torch_neuronx", visible_cores_at_import=os.environ.get("NEURON_RT_VISIBLE_CORES"))
record_jit_loads(torch, "torch_neuronx")
