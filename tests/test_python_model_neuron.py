"""The generated model.py's Neuron seam, run by a real tritonserver against FAKE Neuron SDK packages.

There is no Neuron device or SDK here. tests/fake_neuron/ holds FAKE torch_neuron, torch_neuronx and
transformers_neuronx packages (declared as such in their docstrings): they run the model on the CPU,
so outputs stay real, and record per instance what the real SDK would have been asked. The real
model.py runs in the real python-backend stub and imports them from the model's own folder: the
stub's embedded Python runs isolated (it ignores PYTHONPATH) but puts the model folder on sys.path,
so each test model gets symlinks to the fakes it should see. That also lets a test choose which SDK
an upstream-style directory finds. The test then compares the records with the core map. Nothing
here measures Neuron.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import torch

from workbench.coremap import split_cores
from workbench.server import ModelLoadError, TritonServer

from test_python_model import AddSub, tf_add_sub, burst, rng_inputs, save_module, tf_requests, write_model

FAKE_SDK = Path(__file__).parent / "fake_neuron"

# (model name, WORKBENCH_TARGET or None for an upstream-style directory, start, end, instances,
#  threads per core, the FAKE SDK packages the model can import, the target model.py must end up with)
PLACEMENTS = [
    ("inf1_0to7_x3", "inf1", 0, 7, 3, 2, ["torch_neuron"], "inf1"),
    ("inf1_0to3_x2", "inf1", 0, 3, 2, 1, ["torch_neuron"], "inf1"),
    ("inf2_0to7_x3", "inf2", 0, 7, 3, 1, ["torch_neuronx"], "inf2"),
    ("inf2_0to3_x2", "inf2", 0, 3, 2, 2, ["torch_neuronx"], "inf2"),
    ("trn1_4to5_x1", "trn1", 4, 5, 1, 1, ["torch_neuronx"], "trn1"),
    # no WORKBENCH_* parameters: the target is inferred from the SDK that is importable
    ("upstream_both_0to1_x1", None, 0, 1, 1, 1, ["torch_neuron", "torch_neuronx"], "inf2"),
    ("upstream_inf1_2to2_x1", None, 2, 2, 1, 1, ["torch_neuron"], "inf1"),
]
SDK_OF = {"inf1": "torch_neuron", "inf2": "torch_neuronx", "trn1": "torch_neuronx"}


def link_fakes(model_dir: Path, packages: list[str]) -> None:
    """Make the FAKE packages importable by this model's stub (its folder is on the stub's sys.path)."""
    for item in ["fake_neuron_record.py", *packages]:
        (model_dir / item).symlink_to(FAKE_SDK / item)


@pytest.fixture(scope="module")
def records(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fake-neuron-records")


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("neuron-repository")


@pytest.fixture(scope="module")
def server(repo, records):
    with TritonServer(repo, env={"FAKE_NEURON_RECORD_DIR": str(records)}) as running:
        yield running


@pytest.fixture(scope="module")
def placed(server, repo):
    """Every PLACEMENTS model written and loaded (concurrently: each instance is a stub importing torch)."""
    for name, target, start, end, count, threads, fakes, _ in PLACEMENTS:
        (repo / name).mkdir()
        link_fakes(repo / name, fakes)
        save_module(AddSub(), repo / name / "model.pt", (torch.ones(2, 4), torch.ones(2, 4)))
        write_model(repo, name, ["INPUT__0,FP32,4", "INPUT__1,FP32,4"], ["OUTPUT__0,FP32,4", "OUTPUT__1,FP32,4"],
                    max_batch_size=8, instance_count=count, NEURON_CORE_START_INDEX=start,
                    NEURON_CORE_END_INDEX=end, NUM_THREADS_PER_CORE=threads,
                    WORKBENCH_TARGET=target, WORKBENCH_FRAMEWORK="pytorch" if target else None)
    with ThreadPoolExecutor(3) as pool:
        list(pool.map(server.load, [p[0] for p in PLACEMENTS]))
    return PLACEMENTS


@pytest.fixture
def unload_after(server):
    """Unloads the models a single test loaded (the PLACEMENTS models stay for the whole module)."""
    names: list[str] = []
    yield names.append
    for name in names:
        server.unload(name)


def read_record(records: Path, instance: str) -> dict:
    path = records / f"{instance}.json"
    assert path.is_file(), f"no FAKE SDK record for instance {instance}: {sorted(p.name for p in records.iterdir())}"
    return json.loads(path.read_text())


@pytest.mark.server
@pytest.mark.parametrize("placement", PLACEMENTS, ids=[p[0] for p in PLACEMENTS])
def test_each_instance_gets_its_cores_and_all_of_them(placed, server, repo, records, placement):
    name, _, start, end, count, threads, _, target = placement
    core_map = split_cores(start, end, count, threads)
    sdk = SDK_OF[target]
    for k in range(count):
        record = read_record(records, f"{name}_0_{k}")
        visible = core_map.visible_cores(k)
        assert record["imported"] == sdk and record["sdk"] == sdk
        # set before the SDK (and so the runtime) was imported, and still the same at load time
        assert record["visible_cores_at_import"] == visible
        assert record["visible_cores_at_load"] == visible
        assert record["device_ids"] == list(range(core_map.cores_per_instance))
        assert record["num_workers"] == core_map.threads()
        assert record["load_path"] == str(repo / name / "model.pt")  # COMPILED_MODEL relative to the model dir
    assert not (records / f"{name}_0_{count}.json").exists()
    log = "\n".join(server.log_tail(2000))
    for k in range(count):
        assert f"workbench instance {k}/{count}: target {target} framework pytorch" in log
    requests = rng_inputs([1, 3, 2, 8], seed=11)
    for arrays, result in zip(requests, burst(server, name, requests)):
        assert not isinstance(result, Exception), result
        np.testing.assert_allclose(result.as_numpy("OUTPUT__0"), arrays["INPUT__0"] + arrays["INPUT__1"], rtol=1e-6)
        np.testing.assert_allclose(result.as_numpy("OUTPUT__1"), arrays["INPUT__0"] - arrays["INPUT__1"], rtol=1e-6)


@pytest.mark.server
def test_idle_cores_are_visible_to_no_instance(placed, records):
    """0:7 over 3 instances: cores 6 and 7 are left idle, as the core map says."""
    seen = set()
    for k in range(3):
        first, _, last = read_record(records, f"inf1_0to7_x3_0_{k}")["visible_cores_at_load"].partition("-")
        seen |= set(range(int(first), int(last or first) + 1))
    assert seen == {0, 1, 2, 3, 4, 5}
    assert set(split_cores(0, 7, 3).idle) == {6, 7}


def _tiny_causal_lm(path: Path):
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(vocab_size=64, n_positions=32, n_embd=16, n_layer=1, n_head=2,
                                     bos_token_id=0, eos_token_id=0)
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config).eval()
    model.save_pretrained(str(path))
    return model


def greedy(model, ids: np.ndarray, length: int) -> np.ndarray:
    tensor = torch.from_numpy(ids)
    with torch.inference_mode():
        return model.generate(tensor, attention_mask=torch.ones_like(tensor), max_length=length, min_length=length,
                              do_sample=False, pad_token_id=0).numpy()


@pytest.mark.server
def test_transformers_neuronx_sampling(server, repo, records, unload_after):
    """inf2 transformers-neuronx: from_pretrained gets the TNX_* settings and the instance's cores,
    sample() is fed chunks of TNX_BATCH_SIZE rows; outputs equal greedy generation on the CPU."""
    name = "tnx_inf2"
    model = _tiny_causal_lm(repo / name / "hf")
    link_fakes(repo / name, ["transformers_neuronx"])
    write_model(repo, name, ["input_ids,INT64,-1"], ["output_ids,INT64,-1"], compiled_model="hf", max_batch_size=4,
                instance_count=2, NEURON_CORE_START_INDEX=0, NEURON_CORE_END_INDEX=3, WORKBENCH_TARGET="inf2",
                WORKBENCH_FRAMEWORK="transformers_neuronx", TNX_MODEL_CLASS="GPT2ForSampling", TNX_BATCH_SIZE=2,
                TNX_TP_DEGREE=2, TNX_N_POSITIONS=32, TNX_AMP="bf16", TNX_SEQUENCE_LENGTH=12,
                TNX_COMPILED_DIR="hf-neuron")
    (repo / name / "hf-neuron").mkdir()  # where compiler/tnx.py saves the compiled graphs
    server.load(name)
    unload_after(name)
    for k in range(2):
        record = read_record(records, f"{name}_0_{k}")
        assert record["model_class"] == "GPT2ForSampling" and record["to_neuron"] is True
        assert record["load_path"] == str(repo / name / "hf")
        assert record["visible_cores_at_load"] == split_cores(0, 3, 2).visible_cores(k)
        assert record["from_pretrained"] == {"batch_size": 2, "tp_degree": 2, "n_positions": 32, "amp": "bf16"}
        assert record["loaded_compiled_dir"] == str(repo / name / "hf-neuron")
    rng = np.random.default_rng(2)
    requests = [{"input_ids": rng.integers(1, 64, size=(rows, 5)).astype(np.int64)} for rows in (1, 3, 2)]
    for arrays, result in zip(requests, burst(server, name, requests)):
        assert not isinstance(result, Exception), result
        np.testing.assert_array_equal(result.as_numpy("output_ids"), greedy(model, arrays["input_ids"], 12))


@pytest.mark.server
def test_transformers_neuronx_tp_degree_beyond_the_instance_cores_is_refused(server, repo):
    name = "tnx_too_wide"
    _tiny_causal_lm(repo / name / "hf")
    link_fakes(repo / name, ["transformers_neuronx"])
    write_model(repo, name, ["input_ids,INT64,-1"], ["output_ids,INT64,-1"], compiled_model="hf", max_batch_size=4,
                instance_count=2, NEURON_CORE_START_INDEX=0, NEURON_CORE_END_INDEX=1, WORKBENCH_TARGET="trn1",
                WORKBENCH_FRAMEWORK="transformers_neuronx", TNX_TP_DEGREE=2)
    with pytest.raises(ModelLoadError) as caught:
        server.load(name)
    assert "TNX_TP_DEGREE = 2 needs more cores than the 1 each instance owns" in str(caught.value)


@pytest.mark.server
def test_tensorflow_neuronx_pins_cores_and_feeds_signature_keys(server, repo, records, unload_after):
    """inf2 TensorFlow: NEURON_RT_VISIBLE_CORES per instance (upstream set only NEURON_RT_NUM_CORES, so
    the runtime picked any free cores), tensorflow_neuronx imported, SavedModel loaded from the model
    folder and called by signature keys."""
    name = "tf_inf2"
    tf_add_sub(repo / name / "saved")
    link_fakes(repo / name, ["tensorflow_neuronx"])
    write_model(repo, name, ["b,FP32,4", "a,FP32,4"], ["sum,FP32,4", "diff,FP32,4"], compiled_model="saved",
                max_batch_size=8, instance_count=2, NEURON_CORE_START_INDEX=2, NEURON_CORE_END_INDEX=5,
                WORKBENCH_TARGET="inf2", WORKBENCH_FRAMEWORK="tensorflow")
    server.load(name)
    unload_after(name)
    core_map = split_cores(2, 5, 2)
    for k in range(2):
        record = read_record(records, f"{name}_0_{k}")
        assert record["imported"] == "tensorflow_neuronx"
        assert record["visible_cores_at_import"] == record["visible_cores_at_load"] == core_map.visible_cores(k)
        assert record["load_path"] == str(repo / name / "saved")
    requests = tf_requests([2, 1, 3], seed=13)
    for arrays, result in zip(requests, burst(server, name, requests)):
        assert not isinstance(result, Exception), result
        np.testing.assert_allclose(result.as_numpy("diff"), arrays["a"] - arrays["b"], rtol=1e-6)
