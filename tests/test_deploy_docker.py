"""The docker run for Neuron hosts beyond what tests/test_server.py covers: Trn2's logical cores,
the runtime environment, and the recipe's image per target and framework.

Facts checked (sources in workbench/deploy/facts.py): Trn2 presents 4 logical cores per device at
LNC=2 (the default) and 8 at LNC=1, the runtime reads NEURON_LOGICAL_NC_CONFIG (SDK-lnc); the
container guide passes --device per device and NEURON_RT_VISIBLE_CORES with global ids (SDK-ctr).
"""

from __future__ import annotations

import pytest

from workbench.coremap import CoreRange, CoreRangeError
from workbench.deploy.docker import CPU_IMAGE, DEFAULT_IMAGE, docker_run_command, docker_run_for_model
from workbench.deploy.devices import cores_per_device_at, instance_cores_at, neuron_devices
from workbench.deploy.recipe import RecipeError, recipe_for


def _env(run) -> list[str]:
    argv = list(run.argv)
    return [argv[i + 1] for i, a in enumerate(argv) if a == "--env"]


def test_trn2_devices_follow_the_lnc():
    assert cores_per_device_at("trn2.48xlarge") == 4 and cores_per_device_at("trn2.48xlarge", 1) == 8
    assert instance_cores_at("trn2.48xlarge") == 64 and instance_cores_at("trn2.48xlarge", 1) == 128
    assert neuron_devices(CoreRange(8, 15), instance_type="trn2.48xlarge") == [2, 3]
    assert neuron_devices(CoreRange(8, 15), instance_type="trn2.48xlarge", lnc=1) == [1]
    assert neuron_devices(CoreRange(120, 127), instance_type="trn2.48xlarge", lnc=1) == [15]
    with pytest.raises(CoreRangeError, match=r"trn2.48xlarge has cores 0..63 at LNC=2"):
        neuron_devices(CoreRange(120, 127), instance_type="trn2.48xlarge")
    assert cores_per_device_at("inf2.xlarge") == 2 and cores_per_device_at("inf1") == 4


def test_trn2_run_passes_the_lnc_only_when_not_the_default(tmp_path):
    default = docker_run_command(tmp_path, CoreRange(4, 7), instance_type="trn2.48xlarge")
    assert default.devices == (1,) and _env(default) == ["NEURON_RT_VISIBLE_CORES=4-7"]
    lnc1 = docker_run_command(tmp_path, CoreRange(4, 7), instance_type="trn2.48xlarge", lnc=1)
    assert lnc1.devices == (0,)
    assert _env(lnc1) == ["NEURON_RT_VISIBLE_CORES=4-7", "NEURON_LOGICAL_NC_CONFIG=1"]
    assert _env(docker_run_command(tmp_path, CoreRange(3, 3), instance_type="inf2")) == ["NEURON_RT_VISIBLE_CORES=3"]
    assert "--device /dev/neuron1" in default.pretty
    with pytest.raises(ValueError, match="lnc=1 applies only to Trn2 instances, not inf2.xlarge"):
        docker_run_command(tmp_path, CoreRange(0, 1), instance_type="inf2.xlarge", lnc=1)
    with pytest.raises(ValueError, match="lnc must be 1 or 2"):
        docker_run_command(tmp_path, CoreRange(0, 1), instance_type="trn2", lnc=4)


def test_the_image_is_the_recipes_for_the_target_and_framework(tmp_path):
    inf1 = docker_run_command(tmp_path, CoreRange(0, 3), instance_type="inf1.6xlarge")
    assert inf1.image == recipe_for("inf1").image and inf1.recipe.stack.key == "inf1-pytorch"
    tf = docker_run_command(tmp_path, CoreRange(0, 1), instance_type="inf2.xlarge", framework="tensorflow")
    assert tf.image == recipe_for("inf2", "tensorflow").image != DEFAULT_IMAGE
    assert docker_run_command(tmp_path, CoreRange(0, 1), instance_type="trn1.2xlarge").image == DEFAULT_IMAGE
    own = docker_run_command(tmp_path, CoreRange(0, 1), instance_type="inf2", image="me/triton-neuron:1")
    assert own.image == "me/triton-neuron:1" and own.recipe is None
    with pytest.raises(RecipeError, match="tensorflow has no Neuron SDK for trn2"):
        docker_run_command(tmp_path, CoreRange(0, 3), instance_type="trn2.48xlarge", framework="tensorflow")
    with pytest.raises(RecipeError, match="Python 3.12"):  # the stock 26.06 stub cannot import torch-neuron
        docker_run_command(tmp_path, CoreRange(0, 3), instance_type="inf1", image="nvcr.io/nvidia/tritonserver:26.06-py3")
    cpu = docker_run_command(tmp_path, CoreRange(0, 1), instance_type="cpu")
    assert cpu.image == CPU_IMAGE and cpu.recipe is None and _env(cpu) == []


def test_for_a_generated_model_it_takes_the_framework_too(tmp_path):
    from workbench.generate import GenerateSettings, render

    generated = render(GenerateSettings(
        triton_model_dir=str(tmp_path / "repo" / "tf"), compiled_model="m.inf2.savedmodel", framework="tensorflow",
        target="inf2", for_other_machine=True, neuron_core_range="2:3", max_batch_size=4,
        triton_input=["a,FP32,4"], triton_output=["sum,FP32,4"]))
    run = docker_run_for_model(generated, instance_type="inf2.24xlarge")
    assert run.recipe.stack.key == "neuronx-tensorflow" and run.devices == (1,)
    assert run.argv[-1] == "--load-model=tf" and f"{tmp_path / 'repo'}:/models" in run.argv
