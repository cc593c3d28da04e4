"""What upstream's gen_triton_model.py meant: its eight model.py variants, recognised, and its target rule.

Upstream's model.py depends only on ``--model_type``, ``--inf2`` and
``--disable_batch_requests_to_neuron`` (its ``create_model_file``), and config.pbtxt records none of
them, so reading an upstream directory back takes framework, target and batching mode from model.py.
Each group of marker lines below is present in every variant of its kind and in no other (held to
the real script's output by tests/test_upstream_oracle.py). Lines are compared stripped: upstream's
import block carries stray indentation. A model.py that has lost any marker of its variant was
edited by hand (the README's transformers-neuronx recipe replaces the loader and the forward call),
so it is not upstream's any more and read-back keeps it as the user's.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["UpstreamModelPy", "recognise", "is_workbench_model_py", "UPSTREAM_DEFAULT_TARGET"]

# Without --inf2 upstream generated inf1 code, on any host (its --inf2 help: "default is inf1").
UPSTREAM_DEFAULT_TARGET = "inf1"

_FRAMEWORK = {
    "pytorch": (
        "import torch",
        "def _validate_and_get_index(self, name):",
        'os.environ["NEURON_RT_VISIBLE_CORES"] = cores_range',
        "self.model_neuron.num_workers = num_threads",
    ),
    "tensorflow": (
        "import tensorflow as tf",
        "from concurrent import futures",
        "def _one_thread(self, pred, model_feed_dict):",
        'os.environ["NEURON_RT_NUM_CORES"] = str(cores_per_instance)',
    ),
}
_INF2_JOIN = "compiled_model = os.path.join(args['model_repository'], compiled_model)"
_TARGET = {
    ("pytorch", "inf2"): (_INF2_JOIN, "import torch_neuronx", "self.model_neuron = torch.jit.load(compiled_model)"),
    ("pytorch", "inf1"): (
        "import torch.neuron",
        "self.model_neuron = torch.neuron.DataParallel(",
        "torch.jit.load(compiled_model), device_ids=consumed_cores_list)",
    ),
    ("tensorflow", "inf2"): (_INF2_JOIN, "tf.keras.models.load_model(compiled_model)"),
    ("tensorflow", "inf1"): ("tf.contrib.predictor.from_saved_model(compiled_model)",),
}
_BATCHING = {
    # (framework, batch requests) -> lines of that execute()
    ("pytorch", False): ("for request in requests:", "results = self.model_neuron(*inputs)"),
    ("pytorch", True): (
        "num_requests = len(requests)",
        "request_batch_sizes = []",
        "for j in range(1, num_requests):",
        "batched_results = self.model_neuron(*inputs)",
    ),
    ("tensorflow", False): ("for request in requests:",),
    ("tensorflow", True): (
        "num_requests = len(requests)",
        "request_batch_sizes = []",
        "for j in range(1, num_requests):",
        "chuncky_tensors = []",
    ),
}


@dataclass(frozen=True)
class UpstreamModelPy:
    """Which upstream variant a model.py is: the flags it was generated with."""

    framework: str  # --model_type
    target: str  # inf2 with --inf2, else inf1
    batch_requests: bool  # False with --disable_batch_requests_to_neuron


def is_workbench_model_py(text: str) -> bool:
    """Ours (templates/python_model.py, any version): it reads WORKBENCH_TARGET."""
    return "WORKBENCH_TARGET" in text and "class TritonPythonModel" in text


def recognise(text: str) -> UpstreamModelPy | None:
    """The upstream variant ``text`` is, or None (ours, edited by hand, or anything else)."""
    if is_workbench_model_py(text):
        return None
    lines = {line.strip() for line in text.splitlines()}
    found = []
    for framework, markers in _FRAMEWORK.items():
        if not set(markers) <= lines:
            continue
        for target in ("inf1", "inf2"):
            for batched in (True, False):
                if set(_TARGET[framework, target]) <= lines and set(_BATCHING[framework, batched]) <= lines:
                    found.append(UpstreamModelPy(framework, target, batched))
    # the variants' marker sets exclude each other, so more than one match means text pasted together
    return found[0] if len(found) == 1 else None
