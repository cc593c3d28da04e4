"""FAKE tensorflow-neuron (Inf1, TensorFlow 2) for tests: NOT the AWS SDK. The real package is
``tensorflow_neuron``, and ``tensorflow/neuron/__init__.py`` forwards ``tensorflow.neuron`` to it
(aws-neuron-tensorflow api/__init__.py); tests map ``sys.modules["tensorflow.neuron"]`` to this
module. ``trace(func, example_inputs, subgraph_builder_function=None)`` as the SDK's
tfn.trace (SDK archive/tensorflow/tensorflow-neuron/api-tracing-python-api.rst; python/_trace.py),
computed on the CPU: see ../fake_tf_neuron.py."""

import os

import fake_tf_neuron
from fake_neuron_record import record


def trace(func, example_inputs, subgraph_builder_function=None):
    return fake_tf_neuron.trace(func, example_inputs, subgraph_builder_function, sdk="tensorflow.neuron")


record(imported="tensorflow.neuron", sdk="tensorflow.neuron",
       visible_cores_at_import=os.environ.get("NEURON_RT_VISIBLE_CORES"))
fake_tf_neuron.record_saved_model_loads("tensorflow.neuron")
