"""System detection on this machine (no Neuron device) and on laid-out device trees.

Device nodes and /proc/devices are read from folders the test writes; ``neuron-ls`` is a FAKE
script standing in for the Neuron tool (it cannot be installed here).
"""

from __future__ import annotations

import json
import os
from importlib import metadata

import pytest

from workbench import system
from workbench.system import MissingSDKError, detect, install_hint, require_sdk


def test_this_machine_has_no_neuron_device_and_defaults_to_cpu():
    info = detect()
    assert not info.has_device and info.neuron_devices == [] and info.neuron_cores is None
    assert info.default_target == "cpu"
    assert info.packages["torch"] == metadata.version("torch")
    assert info.cpu_count == os.cpu_count() and 1 <= info.usable_cpus <= info.cpu_count
    assert info.cpu_model
    assert info.can_compile("cpu")
    assert "no device" in info.describe()
    assert json.loads(json.dumps(info.to_dict()))["has_device"] is False


def test_device_nodes_are_listed_in_numeric_order(tmp_path):
    for name in ("neuron10", "neuron0", "neuron2", "neuron_monitor", "neuronx"):
        (tmp_path / name).touch()
    assert system.neuron_devices(tmp_path) == [str(tmp_path / n) for n in ("neuron0", "neuron2", "neuron10")]


def test_driver_in_proc_devices_counts_as_a_device(tmp_path):
    proc = tmp_path / "devices"
    proc.write_text("Character devices:\n  1 mem\n 10 misc\n240 neuron\n\nBlock devices:\n  8 sd\n")
    assert system.has_neuron_device(tmp_path / "nodev", proc)
    proc.write_text("Character devices:\n  1 mem\n240 neuronx_fake\n")
    assert not system.has_neuron_device(tmp_path / "nodev", proc)


def test_instance_type_gives_cores_and_target_when_neuron_ls_is_absent(tmp_path):
    (tmp_path / "neuron0").touch()
    info = detect("inf2.24xlarge", dev_dir=tmp_path, proc_devices=tmp_path / "none")
    assert info.has_device and info.neuron_cores == 12 and info.cores_source == "instance table (inf2.24xlarge)"
    assert info.default_target == "inf2"
    assert detect("trn1n.32xlarge", dev_dir=tmp_path, proc_devices=tmp_path / "none").default_target == "trn1"
    odd = detect("m5.large", dev_dir=tmp_path, proc_devices=tmp_path / "none")
    assert odd.neuron_cores is None and "'m5.large' is not in the NeuronCore table" in odd.notes[0]


def test_neuron_ls_json_sums_nc_count(tmp_path):
    records = [{"neuron_device": i, "bdf": f"00:1{i}.0", "nc_count": 2, "memory_size": 34359738368,
                "neuroncore_ids": [2 * i, 2 * i + 1], "neuron_processes": []} for i in range(3)]
    fake = tmp_path / "neuron-ls"  # FAKE neuron-ls: prints what the real tool's --json-output prints
    fake.write_text(f"#!/bin/sh\n[ \"$1\" = --json-output ] || exit 2\ncat <<'EOF'\n{json.dumps(records)}\nEOF\n")
    fake.chmod(0o755)
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "neuron0").touch()
    info = detect("inf2.xlarge", dev_dir=tmp_path / "dev", proc_devices=tmp_path / "none", neuron_ls_path=str(fake))
    assert info.neuron_cores == 6 and info.cores_source == "neuron-ls"  # the tool wins over the table
    assert info.device_records == records
    broken = tmp_path / "broken-ls"
    broken.write_text("#!/bin/sh\necho not json\n")
    broken.chmod(0o755)
    assert system.neuron_ls(str(broken)) is None
    assert system.neuron_ls(str(tmp_path / "missing")) is None


def test_cores_table_matches_the_reference_notes():
    assert system.cores_for_instance("inf1.6xlarge") == 16
    assert system.cores_for_instance("INF2.48XLARGE") == 24
    assert system.cores_for_instance("trn1.32xlarge") == 32
    assert system.cores_for_instance("c5.large") is None


@pytest.mark.parametrize("target, expected", [
    ("inf2", "pip install torch-neuronx neuronx-cc from the AWS Neuron pip repository"),
    ("trn1", "pip install torch-neuronx neuronx-cc from the AWS Neuron pip repository"),
    ("inf1", "pip install torch-neuron neuron-cc from the AWS Neuron pip repository"),
    ("tensorflow-inf2", "pip install tensorflow-neuronx from the AWS Neuron pip repository"),
    ("tensorflow", "pip install tensorflow-cpu (or pip install 'triton-neuron-workbench[tensorflow]')"),
])
def test_install_hints_name_the_packages_and_where_they_come_from(target, expected):
    assert install_hint(target).startswith(expected)
    with pytest.raises(ValueError, match="unknown target 'inf9'"):
        install_hint("inf9")


def test_require_sdk_reads_metadata_and_spots_pypi_placeholders():
    with pytest.raises(MissingSDKError, match="compiling for inf2: missing neuronx-cc; pip install"):
        require_sdk("inf2", {"torch-neuronx": "2.9.0.2.15.32035", "neuronx-cc": None})
    with pytest.raises(MissingSDKError, match="torch-neuronx 1.0 is the PyPI placeholder"):
        require_sdk("inf2", {"torch-neuronx": "1.0", "neuronx-cc": "2.27.5334.0"})
    require_sdk("inf2", {"torch-neuronx": "2.9.0.2.15.32035", "neuronx-cc": "2.27.5334.0"})
    require_sdk("cpu")
    installed = metadata.version("torch")
    assert system.installed_versions(("torch", "surely-not-installed-pkg")) == {
        "torch": installed, "surely-not-installed-pkg": None}
    info = detect()
    info.packages.update({"torch-neuronx": "2.9.0.2.15.32035", "neuronx-cc": "2.27.5334.0"})
    assert info.can_compile("inf2") and info.can_compile("trn1") and info.can_compile("cpu")
    info.packages["neuronx-cc"] = None
    assert not info.can_compile("inf2")


def test_instance_type_from_dmi(tmp_path):
    product = tmp_path / "product_name"
    product.write_text("inf2.24xlarge\n")
    assert system.ec2_instance_type(product) == "inf2.24xlarge"
    product.write_text("Standard PC (Q35 + ICH9, 2009)\n")
    assert system.ec2_instance_type(product) is None
    assert system.ec2_instance_type(tmp_path / "missing") is None


def test_trn2_instances_cores_and_target(tmp_path):
    """trn2 at its default LNC=2: 4 logical cores per Trainium2 device (SDK trainium2.rst, LNC page);
    the UltraServer and network variants are the trn2 family."""
    assert system.cores_for_instance("trn2.48xlarge") == 64
    assert system.cores_for_instance("trn2u.48xlarge") == 64
    assert system.cores_for_instance("trn2n.48xlarge") == 64
    assert system.cores_for_instance("trn2.3xlarge") == 4  # one chip: unverified, see DEVICES_BY_INSTANCE
    assert system.cores_per_device("trn2u.48xlarge") == 4 and system.cores_per_device("trn2") == 4
    assert system.instance_family("TRN2U.48xlarge") == "trn2" and system.instance_family("trn1n") == "trn1"
    (tmp_path / "neuron0").touch()
    for instance in ("trn2.48xlarge", "trn2u.48xlarge", "trn2.3xlarge"):
        info = detect(instance, dev_dir=tmp_path, proc_devices=tmp_path / "none")
        assert info.default_target == "trn2" and info.neuron_cores == system.cores_for_instance(instance)
    with pytest.raises(ValueError, match="unknown Neuron instance type 'trn9.large'"):
        system.cores_per_device("trn9.large")


def test_the_one_target_list():
    """Everything that lists targets reads system.TARGETS (model.py keeps a copy a test compares)."""
    from workbench import compiler, tutorial
    from workbench.compiler import tensorflow as tf_compiler, tnx
    from workbench.generate import config

    assert system.TARGETS == ("cpu", "inf1", "inf2", "trn1", "trn2")
    assert compiler.TARGETS is system.TARGETS and config.TARGETS is system.TARGETS
    assert tutorial.NEURON_TARGETS is system.NEURON_TARGETS
    assert tf_compiler.TF_TARGETS == ("cpu", "inf1", "inf2", "trn1")  # tensorflow-neuronx: trn1/inf2 only
    assert tnx.TNX_TARGETS == ("cpu", "inf2", "trn1")  # transformers-neuronx never supported trn2
    assert set(system.TARGET_PACKAGES) >= set(system.NEURON_TARGETS)
    assert system.target_problem("tensorflow", "trn2") == "tensorflow runs on inf1/inf2/trn1 (or cpu), not trn2"
    assert system.target_problem("pytorch", "trn2") is None and system.target_problem("pytorch", "gpu") is None


def test_deploy_and_the_ui_read_the_system_facts():
    """One place per fact: deploy's families, LNC defaults, core counts and recipe targets, and the UI's
    target dropdowns, come from workbench.system."""
    from workbench.deploy import devices, facts
    from workbench.ui import ModelPanel, SettingsPanel

    assert devices.family_of is system.instance_family and devices.DEFAULT_LNC is system.DEFAULT_LNC
    assert {(t, s.framework) for s in facts.STACKS for t in s.targets} == \
        {(t, f) for f, targets in system.FRAMEWORK_TARGETS.items() for t in targets if t != "cpu"}
    for instance in system.DEVICES_BY_INSTANCE:
        assert devices.instance_cores_at(instance) == system.cores_for_instance(instance), instance
    assert devices.instance_cores_at("trn2.48xlarge", lnc=1) == 2 * system.cores_for_instance("trn2.48xlarge")
    assert tuple(SettingsPanel().controls["target"].options) == system.TARGETS
    assert tuple(ModelPanel().controls["target"].options.values()) == system.TARGETS


@pytest.mark.parametrize("package, placeholder", [
    ("torch-neuron", "1.0"), ("torch-neuronx", "1.0"), ("neuron-cc", "1.0.post1"), ("neuronx-cc", "1.0.post1"),
    ("tensorflow-neuron", "1.0"), ("tensorflow-neuronx", "1.0"), ("libneuronxla", "1.0"),
    ("transformers-neuronx", "0.1"),
])
def test_every_pypi_placeholder_is_named(tmp_path, monkeypatch, package, placeholder):
    """PyPI holds a name-squatting placeholder of each Neuron package (versions as PyPI lists them)."""
    real = system.installed_versions
    monkeypatch.setattr(system, "installed_versions",
                        lambda packages=system.SDK_PACKAGES: {**real(packages), package: placeholder})
    note = [n for n in detect().notes if n.startswith(f"{package} {placeholder} is the PyPI placeholder")]
    assert note and "AWS Neuron pip repository" in note[0]
    targets = [t for t, packages in system.TARGET_PACKAGES.items() if package in packages]
    for target in targets:
        versions = {p: "9.9" for p in system.TARGET_PACKAGES[target]} | {package: placeholder}
        with pytest.raises(MissingSDKError, match=f"{package} {placeholder} is the PyPI placeholder"):
            require_sdk(target, versions)
