"""FAKE tensorflow-neuron / tensorflow-neuronx internals shared by the two fake packages (tests
only; NOT the AWS SDK). Sources: SDK archive/tensorflow/tensorflow-neuronx/tfneuronx-python-tracing-api.rst
and archive/tensorflow/tensorflow-neuron/api-tracing-python-api.rst (arguments, "Special Flags"),
aws-neuron/aws-neuron-tensorflow @ 3fd68693 python/_trace.py (``trace``, ``_func_to_concrete_func``,
``_get_feed_dict``, ``AwsNeuronModel``, ``_make_keras_model_savable``, ``analyze_model``).

``trace`` follows _trace.py step by step on the CPU:

* example inputs that are not a tuple are wrapped as one: a Tensor or list means ``func(x)``, a
  tuple ``func(*x)``; a Python callable becomes ``tf.function(func).get_concrete_function(*x)``
  (so a dict reaches it as ONE positional argument), a ConcreteFunction is used as it is and fed
  from ``nest.flatten`` of the inputs (a dict: its values by sorted key) in its input order;
* no input placeholder: a warning and the original callable back, uncompiled;
* variables become constants (``convert_variables_to_constants_v2``), as without --extract-weights;
* without ``--dynamic-batch-size`` in NEURON_CC_FLAGS the graph keeps the traced batch size: other
  batch sizes fail at run time with InvalidArgumentError (the real graph's placeholders keep the
  example shapes unless ``maybe_relax_placeholder_shapes`` runs);
* the result has ``on_neuron_ratio`` computed by the real formula (no NeuronOp in a CPU graph: 0)
  and ``save(dir)`` writing a SavedModel whose ``serving_default`` takes the example inputs' keys
  (a dict's keys; ``input_1``, ``input_2``... otherwise: UNVERIFIED, Keras's naming) with dim 0
  variable (Keras ``_get_save_spec(dynamic_batch=True)``) and returns the function's output keys.

The real result is a Keras 2 ``keras.Model`` (``AwsNeuronModel``); Keras 3 here cannot save a
SavedModel with ``.save(dir)``, so the stand-in is a ``tf.Module`` with the same attributes.
"""

import logging
import os
import shlex
import threading
import time

import tensorflow as tf
from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

from fake_neuron_record import call, record

DYNAMIC_BATCH_FLAG = "--dynamic-batch-size"
_CONCURRENCY = {"now": 0, "max": 0, "calls": 0}
_COUNT_LOCK = threading.Lock()


class AwsNeuronModel(tf.Module):
    """What ``trace`` returns: callable, ``on_neuron_ratio``, ``save(dir)``."""

    def __init__(self, frozen, example, output_keys, dynamic):
        super().__init__()
        self.on_neuron_ratio = 0.0  # real formula: 0 when the graph holds no NeuronOp (a CPU graph never does)
        logging.warning(f"Warning: Your traced model has {self.on_neuron_ratio * 100}% of operators compiled to neuron.")
        flat = tf.nest.flatten(example)
        keys = sorted(example) if isinstance(example, dict) else [f"input_{i + 1}" for i in range(len(flat))]
        batch = int(flat[0].shape[0]) if flat and flat[0].shape.rank else None
        specs = [tf.TensorSpec([None, *t.shape[1:]] if t.shape.rank else t.shape, t.dtype, name=key)
                 for key, t in zip(keys, flat)]

        def serve(*args):
            if not dynamic and batch is not None:
                for arg in args:
                    tf.debugging.assert_equal(tf.shape(arg)[0], batch, message=(
                        f"FAKE tensorflow-neuron: compiled for batch {batch}; NEURON_CC_FLAGS had no "
                        f"{DYNAMIC_BATCH_FLAG}"))
            outputs = frozen(*args)
            outputs = outputs if isinstance(outputs, (list, tuple)) else [outputs]
            return dict(zip(output_keys, outputs)) if output_keys else list(outputs)

        self.serve = tf.function(serve, input_signature=specs)

    def __call__(self, *args):
        return self.serve(*args)

    def save(self, path):
        tf.saved_model.save(self, path, signatures={"serving_default": self.serve})


def trace(func, example_inputs, subgraph_builder_function=None, *, sdk):
    call(f"{sdk}.trace", func, example_inputs, subgraph_builder_function=subgraph_builder_function,
         NEURON_CC_FLAGS=os.environ.get("NEURON_CC_FLAGS"))
    original = func
    inputs = example_inputs if isinstance(example_inputs, tuple) else (example_inputs,)
    if not isinstance(func, (tf.types.experimental.PolymorphicFunction, tf.types.experimental.ConcreteFunction)):
        signature = None
        if all(isinstance(item, tf.Tensor) for item in inputs):
            signature = [tf.TensorSpec(t.shape, t.dtype) for t in inputs]
        func = tf.function(input_signature=signature)(func)
    if not isinstance(func, tf.types.experimental.ConcreteFunction):
        func = func.get_concrete_function(*inputs)
    if not any(t.dtype != tf.resource for t in func.inputs):
        logging.warning(f"{func} does not seem to have any input; returning an uncompiled callable")
        return original
    feed = inputs[0] if len(inputs) == 1 else inputs
    flat = tf.nest.flatten([feed] if isinstance(feed, tf.Tensor) else feed)
    frozen = convert_variables_to_constants_v2(func)
    if len(flat) != len(frozen.inputs):
        raise ValueError(f"FAKE {sdk}.trace: {len(flat)} example input(s) for a function of {len(frozen.inputs)}")
    outputs = func.structured_outputs
    output_keys = sorted(outputs) if isinstance(outputs, dict) else None
    dynamic = DYNAMIC_BATCH_FLAG in shlex.split(os.environ.get("NEURON_CC_FLAGS", ""))
    frozen(*flat)  # the trace runs the function once on the example inputs
    return AwsNeuronModel(frozen, feed, output_keys, dynamic)


class _CountingSignature:
    """A loaded signature that counts how many calls run at once (inside a stub, for the pool
    test); ``FAKE_TF_CALL_SECONDS`` makes each call last long enough to overlap."""

    def __init__(self, signature):
        self._signature = signature

    def __getattr__(self, name):
        return getattr(self._signature, name)

    def __call__(self, *args, **kwargs):
        with _COUNT_LOCK:
            _CONCURRENCY["now"] += 1
            _CONCURRENCY["calls"] += 1
            number = _CONCURRENCY["calls"]
            _CONCURRENCY["max"] = max(_CONCURRENCY["max"], _CONCURRENCY["now"])
        try:
            time.sleep(float(os.environ.get("FAKE_TF_CALL_SECONDS", "0")))
            result = self._signature(*args, **kwargs)
        finally:
            with _COUNT_LOCK:
                _CONCURRENCY["now"] -= 1
        rows = {int(v.shape[0]) for v in kwargs.values() if getattr(v.shape, "rank", 0)}
        with _COUNT_LOCK:  # held while recording, so a slower thread cannot write older counts last
            record(max_concurrent_calls=_CONCURRENCY["max"], signature_calls=_CONCURRENCY["calls"],
                   **{f"rows_call_{number}": rows.pop() if len(rows) == 1 else sorted(rows)})
        return result


class _LoadedProxy:
    def __init__(self, loaded):
        self._loaded = loaded
        self.signatures = {key: _CountingSignature(sig) for key, sig in loaded.signatures.items()}

    def __getattr__(self, name):
        return getattr(self._loaded, name)


_LOADS = []


def record_saved_model_loads(sdk):
    """Inside a stub only: wrap tf.saved_model.load to record each load (path, visible cores, how
    many copies) and count concurrent signature calls."""
    if not os.environ.get("FAKE_NEURON_RECORD_DIR") or getattr(tf.saved_model.load, "_fake_neuron", False):
        return
    original = tf.saved_model.load

    def load(path, *args, **kwargs):
        _LOADS.append(str(path))
        record(load_path=str(path), visible_cores_at_load=os.environ.get("NEURON_RT_VISIBLE_CORES"),
               load_count=len(_LOADS), load_sdk=sdk)
        return _LoadedProxy(original(path, *args, **kwargs))

    load._fake_neuron = True
    tf.saved_model.load = load
