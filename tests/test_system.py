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
    ("inf2", "pip install neuronx-cc==2.26.6360.0 torch-neuronx==2.9.0.2.15.32035 from the AWS Neuron pip repository"),
    ("trn1", "pip install neuronx-cc==2.26.6360.0 torch-neuronx==2.9.0.2.15.32035 from the AWS Neuron pip repository"),
    ("trn2", "pip install torch-neuronx==2.14.3.1 neuronx-cc==2.28.7631.0 nki==0.7.0 from the AWS Neuron pip repository"),
    ("trn3", "pip install torch-neuronx==2.14.3.1 neuronx-cc==2.28.7631.0 nki==0.7.0 from the AWS Neuron pip repository"),
    ("inf1", "pip install torch-neuron==1.13.1.2.11.13.0 'neuron-cc[tensorflow]==1.24.0.0' 'protobuf<3.20'"),
    ("tensorflow-inf2", "pip install tensorflow-neuronx==2.10.1.2.1.0 neuronx-cc==2.23.6484.0 'protobuf<3.20' from"),
    ("transformers_neuronx", "pip install transformers-neuronx==0.13.1315 'transformers==4.48.*'"),
    ("tensorflow", "pip install tensorflow-cpu (or pip install 'triton-neuron-workbench[tensorflow]')"),
])
def test_install_hints_are_pinned_and_say_where_they_come_from(target, expected):
    """Every Neuron hint is pinned to the stack releases.py cites (an unpinned torch-neuronx now installs
    TorchNeuron, which has no trace); out-of-support stacks say so with their last working stack."""
    from workbench.releases import pins_for

    assert install_hint(target).startswith(expected)
    if target in system.TARGET_PACKAGES and target not in ("tensorflow", "transformers"):
        assert " ".join(pins_for(target)) in install_hint(target)
    if target in ("inf1", "tensorflow-inf2", "transformers_neuronx"):
        assert "out of support" in install_hint(target)
    if target in ("trn2", "trn3"):  # the SDK's own command takes torch from PyTorch's CPU index
        assert "https://download.pytorch.org/whl/cpu" in install_hint(target)
    with pytest.raises(ValueError, match="unknown target 'inf9'"):
        install_hint("inf9")


def test_require_sdk_reads_metadata_and_spots_pypi_placeholders():
    with pytest.raises(MissingSDKError, match="compiling for inf2: missing neuronx-cc; pip install"):
        require_sdk("inf2", {"torch-neuronx": "2.9.0.2.15.32035", "neuronx-cc": None})
    with pytest.raises(MissingSDKError, match="torch-neuronx 1.0 is the PyPI placeholder"):
        require_sdk("inf2", {"torch-neuronx": "1.0", "neuronx-cc": "2.27.5334.0"})
    require_sdk("inf2", {"torch-neuronx": "2.9.0.2.15.32035", "neuronx-cc": "2.27.5334.0"})
    require_sdk("trn3", {"torch-neuronx": "2.14.3.1", "neuronx-cc": "2.28.7631.0"})
    require_sdk("cpu")
    installed = metadata.version("torch")
    assert system.installed_versions(("torch", "surely-not-installed-pkg")) == {
        "torch": installed, "surely-not-installed-pkg": None}
    info = detect()
    info.packages.update({"torch-neuronx": "2.9.0.2.15.32035", "neuronx-cc": "2.27.5334.0"})
    assert info.can_compile("inf2") and info.can_compile("trn1") and info.can_compile("cpu")
    info.packages["neuronx-cc"] = None
    assert not info.can_compile("inf2")


@pytest.mark.parametrize("version, line", [
    ("2.9.0.2.15.32035", "xla"), ("2.7.0.2.10.16998", "xla"), ("1.13.1.1.12.0", "xla"),
    ("2.14.3.1", "torchneuron"), ("2.13.3.0", "torchneuron"), ("2.14.3.1+fake", "torchneuron"),
])
def test_the_torch_neuronx_version_says_which_library_it_is(version, line):
    """From 2.33, torch-neuronx for PyTorch 2.13/2.14 is TorchNeuron (torchneuron release notes)."""
    assert system.torch_neuronx_line(version) == line


def test_the_wrong_torch_neuronx_is_named_before_any_work():
    """torch-neuronx 2.14.x on inf2: this is TorchNeuron, Trn2/Trn3 only; 2.9 on trn2: PyTorch/XLA,
    unsupported there from 2.34. Both name the pinned install for the target."""
    with pytest.raises(system.WrongSDKError, match="compiling for inf2: torch-neuronx 2.14.3.1 is TorchNeuron, the "
                                                   "native PyTorch backend: it runs on Trn2/Trn3 only.*"
                                                   "torch-neuronx==2.9.0.2.15.32035"):
        require_sdk("inf2", {"torch-neuronx": "2.14.3.1", "neuronx-cc": "2.28.7631.0"})
    with pytest.raises(system.WrongSDKError, match="compiling for trn3: torch-neuronx 2.9.0.2.15.32035 is the "
                                                   "PyTorch/XLA library.*from release 2.34.0.*torch-neuronx==2.14.3.1"):
        require_sdk("trn3", {"torch-neuronx": "2.9.0.2.15.32035", "neuronx-cc": "2.26.6360.0"})
    info = detect()
    info.packages.update({"torch-neuronx": "2.14.3.1", "neuronx-cc": "2.28.7631.0"})
    assert info.can_compile("trn2") and not info.can_compile("inf2")


def test_the_default_target_follows_the_installed_library(tmp_path):
    (tmp_path / "neuron0").touch()
    real = system.installed_versions
    for version, target in (("2.14.3.1", "trn2"), ("2.9.0.2.15.32035", "inf2")):
        system.installed_versions = lambda packages=system.SDK_PACKAGES, v=version: {**real(packages), "torch-neuronx": v}
        try:
            assert detect(dev_dir=tmp_path, proc_devices=tmp_path / "none").default_target == target, version
        finally:
            system.installed_versions = real


def test_neuroncore_ids_with_and_without_the_neuroncore_ids_key():
    """neuron-ls from tools 2.25 lists neuroncore_ids; the v2.24.0 JSON has only nc_count (SDK
    neuron-ls.rst at v2.24.0 vs v2.25.0): the running sum of nc_count gives the same ids."""
    new = [{"neuron_device": i, "nc_count": 4, "neuroncore_ids": [4 * i + k for k in range(4)]} for i in range(3)]
    old = [{"neuron_device": i, "nc_count": 4} for i in range(3)]
    assert system.neuroncore_ids(new) == system.neuroncore_ids(old) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
    assert system.neuroncore_ids([{"nc_count": 2}, {"nc_count": 0}, {"nc_count": 2}]) == [[0, 1], [], [2, 3]]


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


def test_trn3_is_a_target_with_lnc_and_its_cores_come_from_neuron_ls(tmp_path):
    """Trainium3: 8 NeuronCore-v4 per device, 4 logical at the default LNC=2 (trainium3.rst, LNC page);
    no instance size has a documented chip count, so the table has none and neuron-ls counts."""
    assert "trn3" in system.NEURON_TARGETS and system.DEFAULT_LNC["trn3"] == 2
    assert system.cores_per_device("trn3") == 4 and system.instance_family("trn3pds98.48xlarge") == "trn3"
    assert system.cores_for_instance("trn3.48xlarge") is None
    (tmp_path / "neuron0").touch()
    info = detect("trn3.48xlarge", dev_dir=tmp_path, proc_devices=tmp_path / "none")
    assert info.default_target == "trn3" and info.neuron_cores is None


def test_the_one_target_list():
    """Everything that lists targets reads system.TARGETS (model.py keeps a copy a test compares)."""
    from workbench import compiler, targets
    from workbench.compiler import tensorflow as tf_compiler, tnx
    from workbench.generate import config

    assert system.TARGETS == ("cpu", "inf1", "inf2", "trn1", "trn2", "trn3")
    assert system.XLA_TARGETS + system.TORCHNEURON_TARGETS == system.NEURON_TARGETS[1:]
    assert compiler.TARGETS is system.TARGETS and config.TARGETS is system.TARGETS
    assert targets.NEURON_TARGETS is system.NEURON_TARGETS
    assert tf_compiler.TF_TARGETS == ("cpu", "inf1", "inf2", "trn1")  # tensorflow-neuronx: trn1/inf2 only
    assert tnx.TNX_TARGETS == ("cpu", "inf2", "trn1")  # transformers-neuronx never supported trn2/trn3
    assert set(system.TARGET_PACKAGES) >= set(system.NEURON_TARGETS)
    assert system.target_problem("tensorflow", "trn2") == "tensorflow runs on inf1/inf2/trn1 (or cpu), not trn2"
    assert system.target_problem("pytorch", "trn2") is None and system.target_problem("pytorch", "gpu") is None


def test_deploy_and_the_ui_read_the_system_facts():
    """One place per fact: deploy's families, LNC defaults, core counts and recipe targets, and the UI's
    target dropdowns, come from workbench.system."""
    from workbench import releases
    from workbench.deploy import devices
    from workbench.ui import ModelPanel, SettingsPanel

    assert devices.family_of is system.instance_family and devices.DEFAULT_LNC is system.DEFAULT_LNC
    assert {(t, s.framework) for s in releases.STACKS for t in s.targets} == \
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
