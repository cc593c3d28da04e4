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


def visible_cores(value):
    """The core ids of a NEURON_RT_VISIBLE_CORES value: ``"2"``, ``"4-7"`` (SDK runtime configuration
    guide) or a comma list of either, ``"2,3"``, which the device plugin exports (SDK
    deploy/infrastructure/scheduler-flow.rst)."""
    cores = []
    for part in value.split(","):
        first, _, last = part.strip().partition("-")
        cores.extend(range(int(first), int(last or first) + 1))
    return cores


def visible_core_count():
    """How many cores NEURON_RT_VISIBLE_CORES gives this process; None when unset."""
    value = os.environ.get("NEURON_RT_VISIBLE_CORES")
    return None if not value else len(visible_cores(value))


def device_present():
    """Whether the fake sees a Neuron device: a ``/dev/neuron0`` node, or ``FAKE_NEURON_DEVICE=1``
    (what a test sets to stand for one)."""
    return os.environ.get("FAKE_NEURON_DEVICE") == "1" or os.path.exists("/dev/neuron0")


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
    pages): replicate the module over ``device_ids`` and scatter the inputs along ``dim``;
    ``disable_dynamic_batching()``. With dynamic batching on (the default for dim 0) the module's own
    dynamic batching is switched on, as the SDK does (TNXSRC data_parallel.py calls
    ``torch_neuronx.dynamic_batch(module, True)``), so chunks of any size run; with it off every
    chunk must have the compiled shape (the fake graph of fake_neff.py refuses others).

    How the subclasses differ, each from its source:

    * ``SPLIT_BY_SOURCE`` (torch_neuronx, TNXSRC ``scatter_map``): ``divmod`` the rows into exactly
      ``len(device_ids)`` chunks, the remainder spread over the first ones, empty chunks skipped;
      ``num_workers`` = 2 x the loaded modules, and consecutive ids load ONE module on all cores
      (``_load_modules``), so 2. Otherwise (torch_neuron, whose source is not public) the docs:
      ``split_size`` = ``max(1, rows // cores)`` and ``num_workers`` = 2 x cores.
    """

    sdk = "fake"
    SPLIT_BY_SOURCE = False

    def _setup(self, module, device_ids, dim, dynamic_batching):
        count = visible_core_count()
        ids = list(range(count or 1)) if device_ids is None else [core_index(d, self.sdk) for d in device_ids]
        if os.environ.get("FAKE_NEURON_RECORD_DIR"):
            check_device_ids(ids, self.sdk)
        self.module, self.device_ids, self.dim = module, ids, dim
        self.dynamic_batching = dynamic_batching
        if dynamic_batching:
            set_dynamic(module, True)
        self.split_size = None  # computed per call unless set
        consecutive = ids == list(range(ids[0], ids[0] + len(ids))) if ids else True
        loaded = 1 if (self.SPLIT_BY_SOURCE and consecutive) else len(ids)
        self._num_workers = 2 * loaded
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
        set_dynamic(self.module, False)

    def _chunks(self, rows):
        """(start, length) of each chunk the inputs are scattered into."""
        if self.split_size is None and self.SPLIT_BY_SOURCE:
            size, extra = divmod(rows, len(self.device_ids))
            lengths = [size + (1 if i < extra else 0) for i in range(len(self.device_ids))]
        else:
            split = self.split_size or max(1, rows // len(self.device_ids))
            lengths = [min(split, rows - start) for start in range(0, rows, split)]
        starts = [sum(lengths[:i]) for i in range(len(lengths))]
        return [(start, length) for start, length in zip(starts, lengths) if length > 0]

    def __call__(self, *inputs):
        import torch

        rows = inputs[0].shape[self.dim]
        chunks = [self.module(*[t.narrow(self.dim, start, length) for t in inputs])
                  for start, length in self._chunks(rows)]
        record(last_chunks=[length for _, length in self._chunks(rows)])
        if isinstance(chunks[0], (tuple, list)):
            return type(chunks[0])(torch.cat(parts, dim=self.dim) for parts in zip(*chunks))
        return torch.cat(chunks, dim=self.dim)


def set_dynamic(module, on=True):
    """Switch dynamic batching of a fake Neuron graph (fake_neff.py; also a loaded one) in place; other
    modules are left alone. Here, not in fake_neff, so a stub needs only this file and the package."""
    import torch

    if isinstance(module, torch.jit.ScriptModule) and hasattr(module, "dynamic"):
        module.dynamic = bool(on)
    return module


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
