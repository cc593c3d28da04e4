"""FAKE Neuron SDK helper (tests only), shared by the fake packages in this folder.

Two ways a fake tells a test what it was asked:

* in this process: every fake call is appended to ``CALLS`` as ``(name, args, kwargs)``;
* inside a Triton python-backend stub: with ``FAKE_NEURON_RECORD_DIR`` set, ``record()`` merges
  fields into ``$FAKE_NEURON_RECORD_DIR/<model instance name>.json``.

See README.md in this folder. Nothing here is the AWS Neuron SDK.
"""

import json
import os
import tempfile
import threading

CALLS = []  # (name, args, kwargs) of every fake SDK call made in this process
_LOCK = threading.Lock()


def call(name, *args, **kwargs):
    """Note one SDK call for an in-process test (and return nothing)."""
    CALLS.append((name, args, kwargs))


def instance_name():
    """The python-backend stub's command line ends with the model instance name and the runtime."""
    with open("/proc/self/cmdline", "rb") as handle:
        argv = [part.decode() for part in handle.read().split(b"\0") if part]
    return argv[-2] if len(argv) >= 2 else "unknown"


def visible_core_count():
    """How many cores NEURON_RT_VISIBLE_CORES ("2" or "4-7") gives this process; None when unset."""
    value = os.environ.get("NEURON_RT_VISIBLE_CORES")
    if not value:
        return None
    first, _, last = value.partition("-")
    return int(last or first) - int(first) + 1


def record(**fields):
    """Merge ``fields`` into this instance's record file (rewritten atomically); a no-op outside a
    stub (no ``FAKE_NEURON_RECORD_DIR``)."""
    directory = os.environ.get("FAKE_NEURON_RECORD_DIR")
    if not directory:
        return
    with _LOCK:
        path = os.path.join(directory, instance_name() + ".json")
        data = {}
        if os.path.exists(path):
            with open(path) as handle:
                data = json.load(handle)
        data.update(fields)
        handle, temporary = tempfile.mkstemp(dir=directory, suffix=".tmp")
        with os.fdopen(handle, "w") as out:
            json.dump(data, out)
        os.replace(temporary, path)


def core_index(device_id, sdk):
    """A DataParallel device id as an int: the SDK takes ints or ``'nc:#'`` strings (DataParallel
    API pages, ``device_ids``)."""
    if isinstance(device_id, str):
        if not device_id.startswith("nc:") or not device_id[3:].isdigit():
            raise ValueError(f"FAKE {sdk}: device id {device_id!r} is neither an int nor 'nc:#'")
        return int(device_id[3:])
    return int(device_id)


def check_device_ids(device_ids, sdk):
    """The real DataParallel numbers device ids from 0 within the visible cores (DataParallel API
    pages, "NEURON_RT_VISIBLE_CORES=12-23 ... device_ids=['nc:1']"). Refusing others is the fake's
    stand-in for the runtime failing (the pages do not document the error)."""
    count = visible_core_count()
    if count is None:
        raise RuntimeError(f"FAKE {sdk}: NEURON_RT_VISIBLE_CORES is not set; the process would claim every core")
    bad = [d for d in device_ids if not 0 <= d < count]
    if bad:
        raise RuntimeError(f"FAKE {sdk}: device ids {bad} are not among the {count} visible core(s)")


class DataParallelBase:
    """What torch.neuron.DataParallel and torch_neuronx.DataParallel share (SDK DataParallel API
    pages): ``num_workers`` defaults to 2 x the cores used, ``split_size`` to
    ``max(1, batch // cores)`` at call time, ``disable_dynamic_batching()``. The fake runs the
    wrapped CPU TorchScript module once per chunk of ``split_size`` rows."""

    sdk = "fake"

    def _setup(self, module, device_ids, dim, dynamic_batching):
        count = visible_core_count()
        ids = list(range(count or 1)) if device_ids is None else [core_index(d, self.sdk) for d in device_ids]
        if os.environ.get("FAKE_NEURON_RECORD_DIR"):
            check_device_ids(ids, self.sdk)
        self.module, self.device_ids, self.dim = module, ids, dim
        self.dynamic_batching = dynamic_batching
        self.split_size = None  # computed per call unless set
        self._num_workers = 2 * len(ids)
        call(f"{self.sdk}.DataParallel", module, device_ids=device_ids, dim=dim)
        record(sdk=self.sdk, device_ids=ids, dim=dim, num_workers=self._num_workers, num_workers_set=False,
               visible_cores_at_data_parallel=os.environ.get("NEURON_RT_VISIBLE_CORES"))

    @property
    def num_workers(self):
        return self._num_workers

    @num_workers.setter
    def num_workers(self, value):
        self._num_workers = value
        record(num_workers=value, num_workers_set=True)

    def disable_dynamic_batching(self):
        self.dynamic_batching = False

    def __call__(self, *inputs):
        import torch

        rows = inputs[0].shape[self.dim]
        split = self.split_size or max(1, rows // len(self.device_ids))
        if not self.dynamic_batching:
            return self.module(*inputs)
        chunks = [self.module(*[t.narrow(self.dim, start, min(split, rows - start)) for t in inputs])
                  for start in range(0, rows, split)]
        if isinstance(chunks[0], (tuple, list)):
            return type(chunks[0])(torch.cat(parts, dim=self.dim) for parts in zip(*chunks))
        return torch.cat(chunks, dim=self.dim)


def record_jit_loads(torch, sdk):
    """Inside a stub only: wrap torch.jit.load (which the real SDK makes able to load Neuron graphs)
    to record the path and the visible cores at load time."""
    if not os.environ.get("FAKE_NEURON_RECORD_DIR"):
        return
    original = torch.jit.load
    if getattr(original, "_fake_neuron", False):
        return

    def load(path, *args, **kwargs):
        record(load_path=str(path), visible_cores_at_load=os.environ.get("NEURON_RT_VISIBLE_CORES"), load_sdk=sdk)
        return original(path, *args, **kwargs)

    load._fake_neuron = True
    torch.jit.load = load
