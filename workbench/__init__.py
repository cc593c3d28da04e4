"""Triton + Neuron workbench: compile models for AWS Inferentia/Trainium (or the CPU), generate
Triton model directories, serve them on a local tritonserver and sweep batch sizes x core
allocations, from plain Python or from notebook widgets."""

from workbench.coremap import CoreMap, CoreRangeError, split_cores
from workbench.spec import ModelSpec, SpecError, TensorSpec

__version__ = "0.1.0"

__all__ = ["ModelSpec", "TensorSpec", "SpecError", "CoreMap", "CoreRangeError", "split_cores"]
