"""The docker run for Neuron hosts beyond what tests/test_server.py covers: Trn2's logical cores,
the runtime environment, and the recipe's image per target and framework.

Facts checked (sources in workbench/releases.py): Trn2 presents 4 logical cores per device at
LNC=2 (the default) and 8 at LNC=1, the runtime reads NEURON_LOGICAL_NC_CONFIG (SDK-lnc); the
container guide passes --device per device and NEURON_RT_VISIBLE_CORES with global ids (SDK-ctr).
"""

from __future__ import annotations

import re

import pytest
from hypothesis import assume, given, settings as hypothesis_settings, strategies as st

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
    with pytest.raises(ValueError, match="lnc=1 applies only to Trn2/Trn3 instances, not inf2.xlarge"):
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


def test_a_pytorch_backend_model_runs_on_its_configs_cpu_range(tmp_path):
    """Triton's PyTorch backend places nothing on NeuronCores (no core map): the run pins the CPU
    range its config holds, as `workbench deploy` does, instead of failing on the missing map."""
    import torch

    from workbench.generate import GenerateSettings, render

    torch.jit.trace(torch.nn.Linear(4, 3).eval(), torch.zeros(1, 4)).save(str(tmp_path / "net.pt"))
    generated = render(GenerateSettings(
        backend="pytorch", triton_model_dir=str(tmp_path / "repo" / "ts"), compiled_model=str(tmp_path / "net.pt"),
        triton_input=["INPUT__0,FP32,4"], triton_output=["OUTPUT__0,FP32,3"], max_batch_size=8))
    assert generated.core_map is None and generated.settings.target == "cpu"
    run = docker_run_for_model(generated)
    assert run.image == CPU_IMAGE and run.devices == () and _env(run) == []
    assert "--cpuset-cpus=0-0" in run.argv and run.argv[-1] == "--load-model=ts"


# ---- vLLM-backend model directories: one container per instance, the stack by target --------------

def _vllm_deployment(root, name, target, model: dict, **deploy):
    """Generate a vLLM model directory with ``model``'s settings, then check it for ``deploy``'s host."""
    from workbench.generate import load_settings
    from workbench.deploy.vllm_instances import vllm_deployment
    from vllm_model_dirs import vllm_model_dir

    model = dict(model)
    relative = model.pop("relative", False)
    model_dir = vllm_model_dir(root, name, target, **model)
    settings = load_settings(model_dir)
    if relative:  # model.json as a hand edit (or a relative --compiled_model) leaves it
        settings.backend_settings.model = "llm-weights"
    return vllm_deployment(model_dir, settings, **deploy)


def _mounts(argv: list[str]) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv) if a == "-v"]


@pytest.mark.parametrize("lnc, devices, env_lnc", [(None, [[0], [0], [1], [1]], []),
                                                   (1, [[0], [0], [0], [0]], ["NEURON_LOGICAL_NC_CONFIG=1"])])
def test_a_trn2_vllm_model_runs_one_container_per_instance_on_its_cores(tmp_path, lnc, devices, env_lnc):
    """Tensor-parallel 2 over cores 0-7: four containers, each with its two cores (global ids) and
    the devices holding them at the model's LNC (4 logical cores per trn2 device at LNC=2, 8 at 1),
    the vLLM Neuron image, the repository, the weights at their own path and the one-instance config."""
    import shlex

    from tritonclient.grpc import model_config_pb2

    from workbench.deploy.vllm_instances import docker_runs, one_instance_config
    from workbench.generate.config import from_text

    dep = _vllm_deployment(tmp_path, "llm", "trn2", {"tp": 2, "core_range": "0:7", "lnc": lnc},
                           instance_type="trn2.48xlarge")
    assert dep.lnc == (lnc or 2) and dep.core_map.instances == 4
    config = tmp_path / "one.pbtxt"
    text = one_instance_config(dep)
    kind = model_config_pb2.ModelInstanceGroup.Kind.Name
    assert [(g.count, kind(g.kind)) for g in from_text(text).instance_group] == [(1, "KIND_MODEL")]
    config.write_text(text)
    runs = docker_runs(dep, config_file=config)
    assert len(runs) == 4
    image = recipe_for("trn2", "vllm").image
    assert image.endswith("vllm-neuron-2.33.0")
    ports = set()
    for k, run in enumerate(runs):
        argv = shlex.split(run.command)  # what a shell makes of the printed line
        assert argv == list(run.argv)
        assert _env(run) == [f"NEURON_RT_VISIBLE_CORES={2 * k}-{2 * k + 1}", *env_lnc]
        assert [int(argv[i + 1].removeprefix("/dev/neuron")) for i, a in enumerate(argv) if a == "--device"] \
            == devices[k]
        assert argv[argv.index(image) + 1:] == ["tritonserver", "--model-repository=/models",
                                                "--model-control-mode=explicit", "--load-model=llm"]
        weights = str(tmp_path / "llm-weights")
        assert _mounts(argv) == [f"{tmp_path / 'model_repository'}:/models", f"{weights}:{weights}:ro",
                                 f"{config}:/models/llm/config.pbtxt:ro"]
        ports |= {a for i, a in enumerate(argv) if argv[i - 1] == "-p"}
        assert argv[argv.index("--name") + 1] == f"triton-llm-{k}" and "-d" in argv
    assert len(ports) == 12  # http, grpc, metrics of four containers: none shared


def test_an_inf2_vllm_model_takes_the_nxdi_stack_and_needs_no_config_override(tmp_path):
    from workbench.deploy.vllm_instances import docker_runs, one_instance_config

    dep = _vllm_deployment(tmp_path, "llm", "inf2", {"tp": 2, "core_range": "2:3"}, instance_type="inf2.24xlarge")
    assert dep.stack.key == "vllm-nxdi" and dep.lnc is None and one_instance_config(dep) is None
    (run,) = docker_runs(dep)
    assert run.image == recipe_for("inf2", "vllm").image and run.image.endswith("vllm-nxdi-2.31.1")
    assert _env(run) == ["NEURON_RT_VISIBLE_CORES=2-3"] and run.devices == (1,)
    assert run.recipe.stack.key == "vllm-nxdi"


@pytest.mark.parametrize("target, model, deploy, message", [
    ("cpu", {}, {}, "this vLLM model's target is cpu (its config.pbtxt WORKBENCH_TARGET), which no Neuron vLLM"),
    ("inf2", {"tp": 4, "core_range": "0:3"}, {"instance_type": "inf2.xlarge"},
     "--tensor-parallel-size 4 needs 4 NeuronCores per instance, but inf2.xlarge has 2"),
    ("trn2", {"tp": 4, "core_range": "0:7"}, {"instance_type": "trn2.3xlarge"},
     "--neuron_core_range 0:7 needs core 7, but trn2.3xlarge has cores 0..3 at LNC=2"),
    ("trn2", {"tp": 2, "lnc": 1}, {"lnc": 2}, "--lnc 2 contradicts the model's LNC 1"),
    ("trn2", {"tp": 2}, {"instance_type": "inf2.xlarge"}, "--instance-type inf2.xlarge is not a trn2 instance"),
    ("inf2", {"tp": 2}, {"lnc": 1}, "lnc=1 applies only to Trn2/Trn3 instances"),
    ("inf2", {"tp": 2, "relative": True}, {}, "by a relative path, which a container cannot mount"),
])
def test_a_vllm_model_no_stack_can_serve_as_asked_is_refused(tmp_path, target, model, deploy, message):
    from workbench.deploy.vllm_instances import VllmDeployError

    with pytest.raises(ValueError, match=re.escape(message)) as caught:
        _vllm_deployment(tmp_path, "llm", target, model, **deploy)
    assert caught.type is VllmDeployError or "lnc=" in message


def test_a_rendered_vllm_model_gets_its_runs_and_the_single_run_helper_refuses_it(tmp_path):
    """Before anything is written (a notebook's preview): the rendered model's own config and core
    map give the runs; docker_run_for_model, which makes ONE container, says to use them instead."""
    from vllm_model_dirs import hf_folder
    from workbench.deploy.vllm_instances import deployment_for_model, docker_runs, one_instance_config
    from workbench.generate import GenerateSettings, render
    from workbench.generate.vllm_backend import VllmSettings

    generated = render(GenerateSettings(
        triton_model_dir=str(tmp_path / "repo" / "llm"), backend="vllm", target="trn2",
        backend_settings=VllmSettings(model=str(hf_folder(tmp_path)), max_model_len=256, tensor_parallel_size=4,
                                      core_range="4:11")))
    dep = deployment_for_model(generated, instance_type="trn2.48xlarge")
    assert not (tmp_path / "repo").exists() and one_instance_config(dep) is not None
    runs = docker_runs(dep, config_file=tmp_path / "one.pbtxt")
    assert [(_env(r), r.devices) for r in runs] == [(["NEURON_RT_VISIBLE_CORES=4-7"], (1,)),
                                                    (["NEURON_RT_VISIBLE_CORES=8-11"], (2,))]
    with pytest.raises(ValueError, match="runs one container per instance"):
        docker_run_for_model(generated, instance_type="trn2.48xlarge")
    with pytest.raises(ValueError, match="asks for 2 instances: each container needs the one-instance config"):
        docker_runs(dep)


@given(lnc=st.sampled_from((1, 2)), tp=st.sampled_from((1, 2, 4, 8)), instances=st.integers(1, 4),
       first=st.integers(0, 7))
@hypothesis_settings(max_examples=25, deadline=None)
def test_the_instances_runs_split_the_range_into_disjoint_visible_cores(tmp_path_factory, lnc, tp, instances, first):
    """Whatever the degree, count, start and LNC on a trn2.48xlarge: the runs' NEURON_RT_VISIBLE_CORES
    are consecutive blocks of ``tp`` cores covering the range once, and each run's devices are
    exactly those holding its cores at that LNC."""
    from vllm_model_dirs import hf_folder
    from workbench.deploy.devices import cores_per_device_at
    from workbench.deploy.vllm_instances import deployment_for_model, docker_runs
    from workbench.generate import GenerateSettings, render
    from workbench.generate.vllm_backend import VllmSettings

    root = tmp_path_factory.getbasetemp() / "split"
    start = first * tp
    assume(start + tp * instances <= 64 * 2 // lnc)  # the instance's logical cores at that LNC
    generated = render(GenerateSettings(
        triton_model_dir=str(root / "repo" / "llm"), backend="vllm", target="trn2",
        backend_settings=VllmSettings(model=str(hf_folder(root)), max_model_len=256, tensor_parallel_size=tp,
                                      core_range=f"{start}:{start + tp * instances - 1}", lnc=lnc)))
    runs = docker_runs(deployment_for_model(generated, instance_type="trn2.48xlarge"), config_file=root / "one")
    per_device = cores_per_device_at("trn2.48xlarge", lnc)
    seen = []
    for run in runs:
        low, _, high = _env(run)[0].removeprefix("NEURON_RT_VISIBLE_CORES=").partition("-")
        cores = list(range(int(low), int(high or low) + 1))
        assert len(cores) == tp
        assert run.devices == tuple(sorted({c // per_device for c in cores}))
        seen += cores
    assert seen == list(range(start, start + tp * instances))


@pytest.mark.parametrize("repository, words", [
    ("/", "a system folder of the host"), ("/etc", "a system folder of the host"),
    ("/usr/local/models", "a system folder of the host"), ("/proc/self", "a system folder of the host"),
    ("/srv/models:rw", "cannot mount a path holding ':'"), ("/srv/a,b", "cannot mount a path holding ':' or ','"),
])
def test_a_repository_docker_cannot_mount_safely_is_refused_with_the_reason(repository, words):
    with pytest.raises(ValueError, match=words):
        docker_run_command(repository, CoreRange(0, 0), instance_type="cpu")


@hypothesis_settings(max_examples=40, deadline=None)
@given(path=st.text(alphabet="/:,abe tc.", min_size=1, max_size=16))
def test_every_mounted_repository_is_one_docker_reads_as_written(path):
    """Whatever the folder, the -v option docker gets names exactly that folder at the container's
    repository, or the command is refused: docker splits -v at ':'."""
    import os

    try:
        run = docker_run_command(path, CoreRange(0, 0), instance_type="cpu")
    except ValueError as err:
        assert "system folder" in str(err) or "cannot mount" in str(err)
        return
    volume = run.argv[run.argv.index("-v") + 1]
    host, container = volume.rsplit(":", 1)
    assert host == os.path.abspath(path) and ":" not in host and container == "/models"
