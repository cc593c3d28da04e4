"""FAKE tensorflow-neuronx (Inf2/Trn1) for tests: NOT the AWS SDK. ``trace(func, example_inputs,
subgraph_builder_function=None)`` as the SDK's tensorflow_neuronx.trace (SDK
archive/tensorflow/tensorflow-neuronx/tfneuronx-python-tracing-api.rst; aws-neuron-tensorflow
python/_trace.py), computed on the CPU: see ../fake_tf_neuron.py for what it does and why. Inside a
Triton stub, importing it records the visible cores and wraps tf.saved_model.load to record loads
and count concurrent signature calls (see ../README.md)."""

import os

import fake_tf_neuron
from fake_neuron_record import record

IMPORT_ENV = {"NEURON_RT_VISIBLE_CORES": os.environ.get("NEURON_RT_VISIBLE_CORES")}


def trace(func, example_inputs, subgraph_builder_function=None):
    return fake_tf_neuron.trace(func, example_inputs, subgraph_builder_function, sdk="tensorflow_neuronx")


record(imported="tensorflow_neuronx", sdk="tensorflow_neuronx",
       visible_cores_at_import=os.environ.get("NEURON_RT_VISIBLE_CORES"))
fake_tf_neuron.record_saved_model_loads("tensorflow_neuronx")
