"""FAKE tensorflow-neuronx (Inf2/Trn1) for tests: NOT the AWS SDK. Importing it records the visible
cores and wraps tf.saved_model.load to record the path; the SavedModel runs on the CPU with real
TensorFlow (see ../README.md)."""

import os

import tensorflow as tf

from fake_neuron_record import record

record(imported="tensorflow_neuronx", sdk="tensorflow_neuronx",
       visible_cores_at_import=os.environ.get("NEURON_RT_VISIBLE_CORES"))
_original_load = tf.saved_model.load


def _load(path, *args, **kwargs):
    record(load_path=str(path), visible_cores_at_load=os.environ.get("NEURON_RT_VISIBLE_CORES"))
    return _original_load(path, *args, **kwargs)


tf.saved_model.load = _load
