"""One repository for several machines: configs/<name>.pbtxt beside config.pbtxt, each named config
served by a real tritonserver started with --model-config-name <name>.

The generator writes model ``multi`` once, with variants ``cpu``, ``inf2`` and ``trn1``; the
hand-edited ``add_sub`` of test_config_roundtrip.py brings ``prio`` and ``ordered``. There is no Neuron
device here: the model folder carries the FAKE torch_neuronx of tests/fake_neuron (the stub imports
it from the model folder), which records the cores each instance was given; nothing here measures
Neuron. --model-config-name is server-wide, so each name needs its own server: each loads one model
with one instance.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from workbench import generate as gen
from workbench.generate import GenerateSettings
from workbench.generate.config import parameters_of, read_config

from test_config_roundtrip import hand_edited_directory

FAKE_SDK = Path(__file__).parent / "fake_neuron"
# name -> (model it is for, WORKBENCH_TARGET, NEURON_RT_VISIBLE_CORES of instance 0 or None, cache)
NAMED = {
    "cpu": ("multi", "cpu", None, True),
    "inf2": ("multi", "inf2", "0-1", False),
    "trn1": ("multi", "trn1", "4-5", False),
    "prio": ("add_sub", "cpu", None, True),
    "ordered": ("add_sub", "cpu", None, False),
}


class AddSub(torch.nn.Module):
    def forward(self, a, b):
        return a + b, a - b


def multi_settings(repo: Path, compiled: Path) -> GenerateSettings:
    """A cpu default (2 instances) and a config per machine; the FAKE SDK travels as extra files."""
    return GenerateSettings(
        triton_model_dir=str(repo / "multi"), compiled_model=str(compiled), target="cpu",
        triton_input=["INPUT__0,FP32,4", "INPUT__1,FP32,4"], triton_output=["OUTPUT__0,FP32,4", "OUTPUT__1,FP32,4"],
        max_batch_size=8, enable_dynamic_batching=True, neuron_core_range="0:1", triton_model_instance_count=2,
        parameters={"VARIANT": "default"},
        extra_files={"torch_neuronx": str(FAKE_SDK / "torch_neuronx"),
                     "fake_neuron_record.py": str(FAKE_SDK / "fake_neuron_record.py")},
        variants={
            "cpu": {"triton_model_instance_count": 1, "neuron_core_range": "0:0", "max_batch_size": 4,
                    "response_cache": True, "parameters": {"VARIANT": "cpu"}},
            "inf2": {"target": "inf2", "triton_model_instance_count": 1, "parameters": {"VARIANT": "inf2"}},
            "trn1": {"target": "trn1", "triton_model_instance_count": 1, "neuron_core_range": "4:5",
                     "parameters": {"VARIANT": "trn1"}},
        })


@pytest.fixture(scope="module")
def repos(tmp_path_factory) -> dict[str, Path]:
    """model -> its repository (apart: the launcher scans the whole repository for the cache)."""
    root = tmp_path_factory.mktemp("variants")
    compiled = root / "add_sub.pt"
    torch.jit.script(AddSub()).save(str(compiled))
    gen.write(gen.render(multi_settings(root / "multi-repo", compiled)))
    hand_edited_directory(root / "hand-repo")
    return {"multi": root / "multi-repo", "add_sub": root / "hand-repo"}


def test_the_repository_holds_a_config_per_machine_and_reads_back_whole(repos):
    model = repos["multi"] / "multi"
    assert sorted(p.name for p in (model / "configs").iterdir()) == ["cpu.pbtxt", "inf2.pbtxt", "trn1.pbtxt"]
    default = read_config(model)
    assert parameters_of(default)["WORKBENCH_TARGET"] == "cpu" and default.instance_group[0].count == 2
    assert not default.response_cache.enable
    for name, (owner, target, _, cache) in NAMED.items():
        if owner != "multi":
            continue
        cfg = read_config(model / "configs" / f"{name}.pbtxt")
        assert cfg.name == "multi" and parameters_of(cfg)["VARIANT"] == name
        assert parameters_of(cfg)["WORKBENCH_TARGET"] == target and cfg.response_cache.enable == cache
        assert cfg.input == default.input and cfg.output == default.output  # one model, whatever the machine
    loaded = gen.load_settings(model)
    assert set(loaded.variants) == {"cpu", "inf2", "trn1"} and loaded.variants["trn1"]["target"] == "trn1"
    assert "torch_neuronx/__init__.py" in loaded.extra_files
    assert gen.render(loaded).changes().empty


def infer(server, model: str, a: np.ndarray, b: np.ndarray, priority: int = 0):
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(server.http_url)
    try:
        inputs = [httpclient.InferInput(name, list(x.shape), "FP32") for name, x in (("INPUT__0", a), ("INPUT__1", b))]
        for item, x in zip(inputs, (a, b)):
            item.set_data_from_numpy(x)
        result = client.infer(model, inputs, priority=priority)
        return result.as_numpy("OUTPUT__0"), result.as_numpy("OUTPUT__1")
    finally:
        client.close()


@pytest.mark.server
@pytest.mark.parametrize("name", list(NAMED))
def test_each_named_config_is_served_with_model_config_name(repos, tmp_path, triton_server, name):
    model, target, visible, cache = NAMED[name]
    server = triton_server(repos[model], model_config_name=name, env={"FAKE_NEURON_RECORD_DIR": str(tmp_path)})
    command = server.command()
    assert f"--model-config-name={name}" in command
    # the launcher read the config this name selects: only a config that asks for the cache gets it
    assert any(a.startswith("--cache-config=local") for a in command) == cache
    server.load(model)
    served = server.model_config(model, as_proto=True)
    assert parameters_of(served)["VARIANT"] == name and parameters_of(served)["WORKBENCH_TARGET"] == target
    assert served.instance_group[0].count == 1
    a = np.arange(4, dtype=np.float32).reshape(1, 4)
    sent = [(a, 1), (a + 10, 2), (a, 1)] if name == "prio" else [(a, 0), (a, 0)]  # one repeat: a hit if cached
    for x, priority in sent:
        total, difference = infer(server, model, x, x + 1, priority=priority)
        np.testing.assert_array_equal(total, x + x + 1)
        np.testing.assert_array_equal(difference, -np.ones_like(x))
    stats = server.stats(model)["model_stats"][0]["inference_stats"]
    assert int(stats["cache_hit"]["count"]) == (1 if cache else 0)
    if name == "prio":
        assert served.dynamic_batching.priority_levels == 2 and not served.model_warmup
    if name == "ordered":
        assert served.dynamic_batching.preserve_ordering and not served.response_cache.enable
    record = tmp_path / f"{model}_0_0.json"
    if visible is None:  # the cpu configs never import the (FAKE) SDK
        assert not record.exists()
    else:
        data = json.loads(record.read_text())
        assert data["imported"] == "torch_neuronx" and data["visible_cores_at_load"] == visible
        assert data["load_path"] == str(repos[model].parent / "add_sub.pt")
