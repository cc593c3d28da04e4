"""Per-NeuronCore use recorded with each point on Neuron, read from neuron-monitor's JSON stream.

There is no Neuron device here: the neuron-monitor below is a FAKE, declared as such. It prints
the report shape of the AWS Neuron SDK's neuron-monitor guide
(tools/neuron-sys-tools/neuron-monitor-user-guide.rst; /work/shared/reference/neuron_api.md):
``neuron_runtime_data[]`` with ``pid``, ``neuron_runtime_tag`` and
``report.neuroncore_counters.neuroncores_in_use{"<core>": {"neuroncore_utilization", "flops"}}``,
after checking it was given a ``-c`` config asking for ``neuroncore_counters``. Unlike the real
tool (period 1 s as configured), it reports every 0.05 s so the test is short.
"""

from __future__ import annotations

import json
import sys
import time

from workbench.measure.watch.cpu_use import format_busy
from workbench.measure.watch.neuron_use import MONITOR_CONFIG, NeuronUse, core_utilization

_FAKE = '''#!PYTHON
# FAKE neuron-monitor for tests: NOT the AWS tool. Checks its -c config, then streams reports.
import json, sys, time
config = json.load(open(sys.argv[sys.argv.index("-c") + 1]))
metrics = [m["type"] for r in config["neuron_runtimes"] for m in r["metrics"]]
if "neuroncore_counters" not in metrics:
    sys.exit("config asks for no neuroncore_counters")
def runtime(pid, cores):
    in_use = {str(c): {"neuroncore_utilization": u, "flops": 0} for c, u in cores.items()}
    counters = {"period": 0.05, "error": "", "neuroncores_in_use": in_use}
    return {"pid": pid, "neuron_runtime_tag": str(pid), "error": "", "report": {"neuroncore_counters": counters}}
report = {"neuron_runtime_data": [runtime(101, {0: 40.0}), runtime(102, {1: 75.5})], "system_data": {},
          "instance_info": {}, "neuron_hardware_info": {"neuron_device_count": 1, "neuroncore_per_device_count": 2}}
while True:
    print(json.dumps(report), flush=True)
    time.sleep(0.05)
'''


def _fake_monitor(tmp_path):
    script = tmp_path / "neuron-monitor"
    script.write_text(_FAKE.replace("PYTHON", sys.executable, 1))
    script.chmod(0o755)
    return str(script)


def test_each_cores_use_is_the_mean_of_the_reports_while_the_point_ran(tmp_path):
    use = NeuronUse([0, 1, 2], executable=_fake_monitor(tmp_path)).start()
    deadline = time.monotonic() + 30
    while len(use._reports) < 3 and time.monotonic() < deadline:  # a few reports arrive
        time.sleep(0.05)
    monitor = use._monitor.process
    busy = use.stop()
    assert busy == {0: 40.0, 1: 75.5, 2: 0.0}  # core 2: no runtime uses it
    assert format_busy(busy) == "0:40.0 1:75.5 2:0.0"
    assert use._monitor is None and monitor.poll() is not None  # the monitor was stopped


def test_reports_sum_runtimes_per_core_and_nothing_is_read_without_neuron_monitor(tmp_path, monkeypatch):
    report = {"neuron_runtime_data": [
        {"pid": 1, "report": {"neuroncore_counters": {"neuroncores_in_use": {"0": {"neuroncore_utilization": 12.5}}}}},
        {"pid": 2, "report": {"neuroncore_counters": {"neuroncores_in_use": {"3": {"neuroncore_utilization": 50}}}}},
        {"pid": 3, "report": {}}]}
    assert core_utilization(report) == {0: 12.5, 3: 50.0} and core_utilization({}) == {}
    assert MONITOR_CONFIG["neuron_runtimes"][0]["metrics"] == [{"type": "neuroncore_counters"}]
    json.dumps(MONITOR_CONFIG)
    monkeypatch.setenv("PATH", str(tmp_path))  # no neuron-monitor here
    use = NeuronUse([0, 1]).start()
    assert use.executable is None and use.stop() == {} and format_busy(use.stop()) is None
