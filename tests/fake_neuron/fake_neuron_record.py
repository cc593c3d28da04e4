"""FAKE Neuron SDK helper (tests only): records, per Triton model instance, what model.py asked
the SDK for, so a test can compare it with the core map. See README.md in this folder."""

import json
import os
import tempfile


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
    """Merge ``fields`` into this instance's record file (rewritten atomically)."""
    directory = os.environ["FAKE_NEURON_RECORD_DIR"]
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


def check_device_ids(device_ids, sdk):
    """The real DataParallel numbers device ids from 0 within the visible cores and refuses others."""
    count = visible_core_count()
    if count is None:
        raise RuntimeError(f"FAKE {sdk}: NEURON_RT_VISIBLE_CORES is not set; the process would claim every core")
    bad = [d for d in device_ids if not 0 <= d < count]
    if bad:
        raise RuntimeError(f"FAKE {sdk}: device ids {bad} are not among the {count} visible core(s)")


class FakeDataParallel:
    """Stands in for torch.neuron.DataParallel / torch_neuronx.DataParallel: records the request and
    runs the wrapped CPU TorchScript module."""

    sdk = "fake"

    def __init__(self, module, device_ids=None, dim=0, **kwargs):
        device_ids = list(range(visible_core_count() or 1)) if device_ids is None else list(device_ids)
        check_device_ids(device_ids, self.sdk)
        self.module = module
        self._num_workers = 2 * len(device_ids)  # the SDK's documented default
        record(sdk=self.sdk, device_ids=device_ids, dim=dim, options=sorted(kwargs),
               visible_cores_at_data_parallel=os.environ.get("NEURON_RT_VISIBLE_CORES"),
               num_workers=self._num_workers)

    @property
    def num_workers(self):
        return self._num_workers

    @num_workers.setter
    def num_workers(self, value):
        self._num_workers = value
        record(num_workers=value)

    def __call__(self, *args):
        return self.module(*args)


def record_jit_loads(torch, sdk):
    """Wrap torch.jit.load (which the real SDK makes able to load Neuron graphs) to record the path
    and the visible cores at load time."""
    original = torch.jit.load
    if getattr(original, "_fake_neuron", False):
        return

    def load(path, *args, **kwargs):
        record(load_path=str(path), visible_cores_at_load=os.environ.get("NEURON_RT_VISIBLE_CORES"), load_sdk=sdk)
        return original(path, *args, **kwargs)

    load._fake_neuron = True
    torch.jit.load = load
