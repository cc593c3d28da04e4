"""The generated model.py's Neuron seam, run by a real tritonserver against FAKE Neuron SDK packages.

There is no Neuron device or SDK here. tests/fake_neuron/ holds FAKE torch_neuron, torch_neuronx,
tensorflow_neuronx and transformers_neuronx packages (declared as such in their docstrings, held to
the SDK's signatures by test_fake_neuron_contract.py): they run the model on the CPU, so outputs stay
real, and record per instance what the real SDK would have been asked. The real model.py runs in the
real python-backend stub and imports them from the model's own folder: the stub's embedded Python
runs isolated (it ignores PYTHONPATH) but puts the model folder on sys.path, so each test model gets
symlinks to the fakes it should see. That also lets a test choose which SDK an upstream-style
directory finds. The test then compares the records with the core map. Nothing here measures Neuron.
"""

from __future__ import annotations

import functools
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import torch

from workbench.coremap import split_cores
from workbench.server import ModelLoadError, TritonServer

from test_python_model import (AddSub, burst, rng_inputs, save_module, template, tf_add_sub, tf_requests,  # noqa: F401
                               write_model)

FAKE_SDK = Path(__file__).parent / "fake_neuron"
TF_CALL_SECONDS = 0.3  # each FAKE TensorFlow call lasts this long, so calls run at once overlap visibly

# (model name, WORKBENCH_TARGET or None for an upstream-style directory, start, end, instances,
#  NUM_THREADS_PER_CORE (None: absent), the FAKE SDK packages the model can import, the target
#  model.py must end up with)
PLACEMENTS = [
    ("inf1_0to7_x3", "inf1", 0, 7, 3, 2, ["torch_neuron"], "inf1"),
    ("inf1_0to3_x2", "inf1", 0, 3, 2, None, ["torch_neuron"], "inf1"),
    ("inf2_0to7_x3", "inf2", 0, 7, 3, 1, ["torch_neuronx"], "inf2"),
    ("inf2_0to3_x2", "inf2", 0, 3, 2, 2, ["torch_neuronx"], "inf2"),
    ("trn1_4to5_x1", "trn1", 4, 5, 1, None, ["torch_neuronx"], "trn1"),
    # no WORKBENCH_* parameters: the target is inferred from the SDK that is importable, and upstream's
    # always-written NUM_THREADS_PER_CORE "1" counts as not given
    ("upstream_both_0to1_x1", None, 0, 1, 1, 1, ["torch_neuron", "torch_neuronx"], "inf2"),
    ("upstream_inf1_2to2_x1", None, 2, 2, 1, 1, ["torch_neuron"], "inf1"),
]
SDK_OF = {"inf1": "torch_neuron", "inf2": "torch_neuronx", "trn1": "torch_neuronx"}
TORCHNEURON = FAKE_SDK / "torchneuron" / "torch_neuronx"  # the FAKE TorchNeuron (torch-neuronx 2.14.3.1)


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
    env = {"FAKE_NEURON_RECORD_DIR": str(records), "FAKE_TF_CALL_SECONDS": str(TF_CALL_SECONDS),
           "FAKE_NEURON_DEVICE": "1"}  # the fakes stand for a host with a device
    with TritonServer(repo, env=env) as running:
        yield running


def _compiled_model(server: TritonServer, repo: Path, name: str, target: str | None) -> str:
    """Where a placement's model file goes: upstream inf1 directories open a relative COMPILED_MODEL
    from the server's working directory (upstream's meaning); the others from the model folder."""
    if target is None and name.startswith("upstream_inf1"):
        save_module(AddSub(), server.run_dir / "compiled" / f"{name}.pt", (torch.ones(2, 4), torch.ones(2, 4)))
        return f"compiled/{name}.pt"
    save_module(AddSub(), repo / name / "model.pt", (torch.ones(2, 4), torch.ones(2, 4)))
    return "model.pt"


# a placement's load takes 2-15 s here, 60 s on a starved machine: one with no answer in 5 min fails, not hangs
PLACEMENT_LOAD_S = 300.0


@pytest.fixture(scope="module")
def placed(server, repo):
    """Every PLACEMENTS model written and loaded, two at a time: each instance is a stub importing torch,
    and on a starved machine Triton's python backend can miss a stub's health beat during start-up and
    then wait for that (live) stub to exit forever (stub_launcher.cc Launch): the load's stub watch
    (workbench/server/stub_watch.py) ends it and loads again, and each load is bounded in time."""
    paths = {}
    for name, target, start, end, count, threads, fakes, _ in PLACEMENTS:
        (repo / name).mkdir()
        link_fakes(repo / name, fakes)
        compiled = _compiled_model(server, repo, name, target)
        paths[name] = (server.run_dir if compiled.startswith("compiled/") else repo / name) / compiled
        write_model(repo, name, ["INPUT__0,FP32,4", "INPUT__1,FP32,4"], ["OUTPUT__0,FP32,4", "OUTPUT__1,FP32,4"],
                    compiled_model=compiled, max_batch_size=8, instance_count=count, NEURON_CORE_START_INDEX=start,
                    NEURON_CORE_END_INDEX=end, NUM_THREADS_PER_CORE=threads,
                    WORKBENCH_TARGET=target, WORKBENCH_FRAMEWORK="pytorch" if target else None)
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda name: server.load(name, timeout=PLACEMENT_LOAD_S), [p[0] for p in PLACEMENTS]))
    return paths


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
    name, target, start, end, count, threads, _, expected_target = placement
    core_map = split_cores(start, end, count, threads or 1)
    sdk = SDK_OF[expected_target]
    asked = threads is not None and not (target is None and threads == 1)
    for k in range(count):
        record = read_record(records, f"{name}_0_{k}")
        visible = core_map.visible_cores(k)
        assert record["imported"] == sdk and record["sdk"] == sdk
        # set before the SDK (and so the runtime) was imported, and still the same at load time
        assert record["visible_cores_at_import"] == visible
        assert record["visible_cores_at_load"] == visible
        assert record["device_ids"] == list(range(core_map.cores_per_instance))
        # NUM_THREADS_PER_CORE asks for cores x threads workers; otherwise the SDK's default: 2 x cores in
        # torch-neuron's docs, 2 (one module loaded on the consecutive cores) in torch-neuronx's source
        assert record["num_workers_set"] is asked
        default = 2 if sdk == "torch_neuronx" else 2 * core_map.cores_per_instance
        assert record["num_workers"] == (core_map.threads() if asked else default)
        assert record["load_path"] == str(placed[name])
    assert not (records / f"{name}_0_{count}.json").exists()
    log = "\n".join(server.log_tail(2000))
    for k in range(count):
        assert f"workbench instance {k}/{count}: target {expected_target} framework pytorch" in log
    requests = rng_inputs([1, 3, 2, 8], seed=11)
    for arrays, result in zip(requests, burst(server, name, requests)):
        assert not isinstance(result, Exception), result
        np.testing.assert_allclose(result.as_numpy("OUTPUT__0"), arrays["INPUT__0"] + arrays["INPUT__1"], rtol=1e-6)
        np.testing.assert_allclose(result.as_numpy("OUTPUT__1"), arrays["INPUT__0"] - arrays["INPUT__1"], rtol=1e-6)


@pytest.mark.server
def test_upstream_inf1_paths_are_relative_to_the_server_directory(placed, server, repo):
    """Upstream's inf1 model.py opened COMPILED_MODEL as written (the server's working directory);
    only its --inf2 variant joined it with the model folder. The model folder has no such file."""
    assert placed["upstream_inf1_2to2_x1"] == server.run_dir / "compiled" / "upstream_inf1_2to2_x1.pt"
    assert not (repo / "upstream_inf1_2to2_x1" / "compiled").exists()
    assert placed["upstream_both_0to1_x1"] == repo / "upstream_both_0to1_x1" / "model.pt"  # inf2: model folder


@pytest.mark.server
def test_idle_cores_are_visible_to_no_instance(placed, records):
    """0:7 over 3 instances: cores 6 and 7 are left idle, as the core map says."""
    seen = set()
    for k in range(3):
        first, _, last = read_record(records, f"inf1_0to7_x3_0_{k}")["visible_cores_at_load"].partition("-")
        seen |= set(range(int(first), int(last or first) + 1))
    assert seen == {0, 1, 2, 3, 4, 5}
    assert set(split_cores(0, 7, 3).idle) == {6, 7}


# --- transformers-neuronx ------------------------------------------------------------------------

def _tiny_gpt2(path: Path):
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(vocab_size=64, n_positions=32, n_embd=16, n_layer=1, n_head=2,
                                     bos_token_id=0, eos_token_id=0)
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config).eval()
    model.save_pretrained(str(path))
    return model


def _greedy(model, ids: np.ndarray, length: int, **options) -> np.ndarray:
    tensor = torch.from_numpy(ids)
    with torch.inference_mode():
        return model.generate(tensor, attention_mask=torch.ones_like(tensor), max_length=length, do_sample=False,
                              **options).numpy()


@pytest.mark.server
def test_transformers_neuronx_sampling(server, repo, records, unload_after):
    """inf2 transformers-neuronx, GPT-2: the SDK's context-broadcasting class gets the TNX_* settings,
    one prompt per row and the instance's cores; sample() is fed chunks of TNX_BATCH_SIZE rows; it
    never samples EOS, so outputs equal greedy generation with EOS banned for the whole length.
    One instance on cores 2:3 (not 0): its pin comes from the range; the split over several instances
    is the placements' test (each instance here is a stub importing transformers)."""
    name = "tnx_inf2"
    model = _tiny_gpt2(repo / name / "hf")
    link_fakes(repo / name, ["transformers_neuronx"])
    write_model(repo, name, ["input_ids,INT64,-1"], ["output_ids,INT64,-1"], compiled_model="hf", max_batch_size=4,
                NEURON_CORE_START_INDEX=2, NEURON_CORE_END_INDEX=3, WORKBENCH_TARGET="inf2",
                WORKBENCH_FRAMEWORK="transformers_neuronx",
                TNX_MODEL_CLASS="GPT2ForSamplingWithContextBroadcasting", TNX_BATCH_SIZE=2, TNX_TP_DEGREE=2,
                TNX_N_POSITIONS=32, TNX_AMP="bf16", TNX_SEQUENCE_LENGTH=12, TNX_COMPILED_DIR="hf-neuron")
    (repo / name / "hf-neuron").mkdir()  # where compiler/tnx.py saves the compiled graphs
    server.load(name)
    unload_after(name)
    record = read_record(records, f"{name}_0_0")
    assert record["model_class"] == "GPT2ForSamplingWithContextBroadcasting" and record["to_neuron"] is True
    assert record["load_path"] == str(repo / name / "hf")
    assert record["visible_cores_at_load"] == split_cores(2, 3, 1).visible_cores(0) == "2-3"
    assert record["from_pretrained"] == {"batch_size": 2, "prompt_batch_size": 2, "tp_degree": 2,
                                         "n_positions": 32, "amp": "bf16"}
    assert record["loaded_compiled_dir"] == str(repo / name / "hf-neuron")
    rng = np.random.default_rng(2)
    requests = [{"input_ids": rng.integers(1, 64, size=(rows, 5)).astype(np.int64)} for rows in (1, 3, 2)]
    for arrays, result in zip(requests, burst(server, name, requests)):
        assert not isinstance(result, Exception), result
        expected = _greedy(model, arrays["input_ids"], 12, min_length=12, pad_token_id=0)
        np.testing.assert_array_equal(result.as_numpy("output_ids"), expected)
        assert 0 not in result.as_numpy("output_ids")[:, 5:]  # EOS (0) is never sampled


@functools.cache
def _llama_with_early_eos():
    """A tiny Llama whose EOS is a token some prompts produce after a few steps and others never do,
    so a batch mixes rows that stop early with rows that run to the full length: (model, prompts, EOS,
    each prompt's generation alone). Made once for the module; each test saves it into its own folder."""
    pytest.importorskip("transformers")
    from workbench.compiler.tnx import tiny_causal_lm

    model = tiny_causal_lm("llama")
    prompts = np.random.default_rng(5).integers(2, 128, size=(6, 4)).astype(np.int64)
    free = _greedy(model, prompts, 14, min_length=14, pad_token_id=1)[:, 4:]
    candidates = sorted({int(t) for t in free[:, 1:4].ravel()} - {int(t) for t in prompts.ravel()},
                        key=lambda t: -sum(t in row for row in free.tolist()))
    eos = next(t for t in candidates if 0 < sum(t in row for row in free.tolist()) < len(free))
    model.config.eos_token_id = model.generation_config.eos_token_id = eos
    model.config.pad_token_id = model.generation_config.pad_token_id = eos
    return model, prompts, eos, [_one_row(model, row, 14, eos) for row in prompts]


def _one_row(model, row: np.ndarray, length: int, eos: int) -> list[int]:
    """One prompt alone: generation until its EOS (kept) or the full length."""
    return _greedy(model, row[None], length, pad_token_id=eos, eos_token_id=eos)[0].tolist()


@pytest.mark.server
@pytest.mark.parametrize("target", ["trn1", "cpu"])
def test_llama_sampling_stops_at_eos_and_pads_the_batch(server, repo, unload_after, target):
    """LlamaForSampling stops when every row has produced EOS and fills finished rows with it; a
    request's rows all have one width; the CPU target computes the same function."""
    name = f"tnx_llama_{target}"
    model, prompts, eos, alone = _llama_with_early_eos()
    model.save_pretrained(str(repo / name / "hf"))
    link_fakes(repo / name, ["transformers_neuronx"])
    write_model(repo, name, ["input_ids,INT64,-1"], ["output_ids,INT64,-1"], compiled_model="hf", max_batch_size=4,
                NEURON_CORE_START_INDEX=0, NEURON_CORE_END_INDEX=1, WORKBENCH_TARGET=target,
                WORKBENCH_FRAMEWORK="transformers_neuronx", TNX_BATCH_SIZE=2, TNX_N_POSITIONS=64,
                TNX_SEQUENCE_LENGTH=14)  # TNX_MODEL_CLASS left out: the SDK's class for model_type llama
    server.load(name)
    unload_after(name)
    requests = [{"input_ids": prompts[rows]} for rows in ([0, 1, 2], [3], [4, 5])]
    assert len({len(row) for row in alone}) > 1, "the test model must mix early and full-length rows"
    for arrays, rows, result in zip(requests, ([0, 1, 2], [3], [4, 5]), burst(server, name, requests)):
        assert not isinstance(result, Exception), result
        out = result.as_numpy("output_ids")
        assert out.shape[1] <= 14 and out.shape[1] >= max(len(alone[r]) for r in rows)
        for line, r in zip(out.tolist(), rows):
            assert line[:len(alone[r])] == alone[r]
            assert set(line[len(alone[r]):]) <= {eos}  # filled with EOS after the row's end
    whole = _greedy(model, prompts[[0, 1, 2]], 14, pad_token_id=eos, eos_token_id=eos)
    assert whole.shape[1] == max(len(alone[r]) for r in (0, 1, 2))  # the reference stops when all rows have


@pytest.mark.server
def test_transformers_neuronx_tp_degree_beyond_the_instance_cores_is_refused(server, repo):
    name = "tnx_too_wide"
    _tiny_gpt2(repo / name / "hf")
    link_fakes(repo / name, ["transformers_neuronx"])
    write_model(repo, name, ["input_ids,INT64,-1"], ["output_ids,INT64,-1"], compiled_model="hf", max_batch_size=4,
                instance_count=2, NEURON_CORE_START_INDEX=0, NEURON_CORE_END_INDEX=1, WORKBENCH_TARGET="trn1",
                WORKBENCH_FRAMEWORK="transformers_neuronx", TNX_TP_DEGREE=2)
    with pytest.raises(ModelLoadError) as caught:
        server.load(name)
    assert "TNX_TP_DEGREE = 2 needs more cores than the 1 each instance owns" in str(caught.value)


# --- TensorFlow ------------------------------------------------------------------------------------

@pytest.mark.server
def test_tensorflow_neuronx_pins_cores_and_serves_a_pool(server, repo, records, unload_after):
    """inf2 TensorFlow: NEURON_RT_VISIBLE_CORES per instance (upstream set only NEURON_RT_NUM_CORES, so
    the runtime picked any free cores), tensorflow_neuronx imported, one SavedModel copy per core
    loaded from the model folder, called by signature keys, and a batch split over the pool so its
    pieces run at once (as upstream's thread pool did)."""
    name = "tf_inf2"
    tf_add_sub(repo / name / "saved")
    link_fakes(repo / name, ["tensorflow_neuronx", "fake_tf_neuron.py"])
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
        assert record["load_count"] == core_map.cores_per_instance  # one copy per core
    requests = tf_requests([2, 1, 3], seed=13)
    for arrays, result in zip(requests, burst(server, name, requests)):
        assert not isinstance(result, Exception), result
        np.testing.assert_allclose(result.as_numpy("diff"), arrays["a"] - arrays["b"], rtol=1e-6)
        np.testing.assert_allclose(result.as_numpy("sum"), arrays["a"] + arrays["b"], rtol=1e-6)
    served = [read_record(records, f"{name}_0_{k}") for k in range(2)]
    assert max(r.get("max_concurrent_calls", 0) for r in served) == 2  # a 2+ row batch ran as 2 pieces at once
    rows = [value for r in served for key, value in r.items() if key.startswith("rows_call_")]
    assert sum(rows) == 2 + 1 + 3 and 0 not in rows  # every row served once, no empty piece sent


@pytest.mark.server
def test_tensorflow_threads_per_core_widen_the_pool(server, repo, records, unload_after):
    name = "tf_inf2_threads"
    tf_add_sub(repo / name / "saved")
    link_fakes(repo / name, ["tensorflow_neuronx", "fake_tf_neuron.py"])
    write_model(repo, name, ["a,FP32,4", "b,FP32,4"], ["sum,FP32,4", "diff,FP32,4"], compiled_model="saved",
                max_batch_size=8, NEURON_CORE_START_INDEX=0, NEURON_CORE_END_INDEX=1, NUM_THREADS_PER_CORE=2,
                WORKBENCH_TARGET="inf2", WORKBENCH_FRAMEWORK="tensorflow")
    server.load(name)
    unload_after(name)
    arrays, = tf_requests([8], seed=3)
    result, = burst(server, name, [arrays])
    assert not isinstance(result, Exception), result
    np.testing.assert_allclose(result.as_numpy("sum"), arrays["a"] + arrays["b"], rtol=1e-6)
    record = read_record(records, f"{name}_0_0")
    assert record["load_count"] == 2 and record["max_concurrent_calls"] == 4  # 2 cores x 2 threads
    assert [value for key, value in record.items() if key.startswith("rows_call_")] == [2, 2, 2, 2]
    single, = burst(server, name, tf_requests([1], seed=4))
    assert not isinstance(single, Exception), single
    assert read_record(records, f"{name}_0_0")["signature_calls"] == 5  # one row: one call, no empty pieces


# --- trn2/trn3: TorchNeuron -----------------------------------------------------------------------

def _torchneuron_model(repo: Path, name: str, version: str = "2.14.3.1") -> Path:
    """A model folder whose stub finds the FAKE TorchNeuron as torch_neuronx, with the dist-info an
    installed torch-neuronx of ``version`` has (model.py reads the version from metadata)."""
    (repo / name).mkdir()
    (repo / name / "fake_neuron_record.py").symlink_to(FAKE_SDK / "fake_neuron_record.py")
    (repo / name / "torch_neuronx").symlink_to(TORCHNEURON)
    info = repo / name / f"torch_neuronx-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: torch-neuronx\nVersion: {version}\n")
    return repo / name


@functools.cache
def _add_sub_program() -> torch.export.ExportedProgram:
    """AddSub exported with a dynamic batch dim, once for the module (two tests serve it)."""
    batch = torch.export.Dim("batch")
    example = (torch.ones(2, 4), torch.ones(2, 4))
    return torch.export.export(AddSub(), example, dynamic_shapes=({0: batch}, {0: batch}))


def _exported_add_sub(path: Path) -> None:
    torch.export.save(_add_sub_program(), str(path))


@pytest.mark.server
def test_trn2_serves_a_torch_export_program_through_torch_compile_backend_neuron(server, repo, records,
                                                                                 unload_after):
    """One NeuronCore per instance (TorchNeuron has no DataParallel), pinned before the import; each
    batch size Triton forms compiles once through the "neuron" backend, statically."""
    folder = _torchneuron_model(repo, "trn2_4to5_x2")
    _exported_add_sub(folder / "model.pt2")
    write_model(repo, "trn2_4to5_x2", ["INPUT__0,FP32,4", "INPUT__1,FP32,4"], ["OUTPUT__0,FP32,4", "OUTPUT__1,FP32,4"],
                compiled_model="model.pt2", max_batch_size=8, instance_count=2, NEURON_CORE_START_INDEX=4,
                NEURON_CORE_END_INDEX=5, WORKBENCH_TARGET="trn2", WORKBENCH_FRAMEWORK="pytorch")
    server.load("trn2_4to5_x2")
    unload_after("trn2_4to5_x2")
    requests = rng_inputs([1, 3, 8], seed=5)
    for arrays, result in zip(requests, burst(server, "trn2_4to5_x2", requests)):
        assert not isinstance(result, Exception), result
        np.testing.assert_allclose(result.as_numpy("OUTPUT__0"), arrays["INPUT__0"] + arrays["INPUT__1"], rtol=1e-6)
        np.testing.assert_allclose(result.as_numpy("OUTPUT__1"), arrays["INPUT__0"] - arrays["INPUT__1"], rtol=1e-6)
    compiled = []
    for k, core in enumerate(("4", "5")):
        record = read_record(records, f"trn2_4to5_x2_0_{k}")
        assert record["library"] == "torchneuron" and record["visible_cores_at_import"] == core
        assert record["visible_cores_at_load"] == core and record["load_path"] == str(folder / "model.pt2")
        assert "device_ids" not in record  # no DataParallel
        compiled += record.get("compiled_shapes", [])
    batches = sorted({shapes[-1][0] for shapes in compiled})  # the inputs' batch dim, per compiled graph
    assert batches and set(batches) <= {1, 2, 3, 4, 8, 9, 11, 12}  # sizes Triton formed from 1, 3 and 8 rows
    assert "workbench instance 1/2: target trn2 framework pytorch" in "\n".join(server.log_tail(500))


@pytest.mark.server
def test_workbench_generate_target_trn3_writes_the_torchneuron_path(server, repo, records, tmp_path, unload_after):
    """`workbench generate --target trn3` on a torch.export program: model.py's TorchNeuron loader
    serves it (here on the FAKE TorchNeuron)."""
    from workbench.cli import main

    program = tmp_path / "add_sub.trn3.pt"
    _exported_add_sub(program)
    assert main(["generate", "--triton_input", "INPUT__0,FP32,4", "--triton_input", "INPUT__1,FP32,4",
                 "--triton_output", "OUTPUT__0,FP32,4", "--triton_output", "OUTPUT__1,FP32,4",
                 "--compiled_model", str(program), "--copy-compiled-model", "--triton_model_dir",
                 str(repo / "gen_trn3"), "--target", "trn3", "--neuron_core_range", "6:6", "--max_batch_size", "4",
                 "--enable_dynamic_batching"]) == 0
    assert 'string_value: "trn3"' in (repo / "gen_trn3" / "config.pbtxt").read_text()
    folder = repo / "gen_trn3"
    (folder / "fake_neuron_record.py").symlink_to(FAKE_SDK / "fake_neuron_record.py")
    (folder / "torch_neuronx").symlink_to(TORCHNEURON)
    info = folder / "torch_neuronx-2.14.3.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: torch-neuronx\nVersion: 2.14.3.1\n")
    server.load("gen_trn3")
    unload_after("gen_trn3")
    (arrays,) = rng_inputs([3], seed=9)
    (result,) = burst(server, "gen_trn3", [arrays])
    assert not isinstance(result, Exception), result
    np.testing.assert_allclose(result.as_numpy("OUTPUT__1"), arrays["INPUT__0"] - arrays["INPUT__1"], rtol=1e-6)
    record = read_record(records, "gen_trn3_0_0")
    assert record["library"] == "torchneuron" and record["visible_cores_at_load"] == "6"
    assert [shapes[-1][0] for shapes in record["compiled_shapes"]] == [3]


@pytest.mark.server
@pytest.mark.parametrize("case", ["torchneuron_on_inf2", "xla_file_on_trn3", "two_cores_on_trn2", "no_batch_dim"])
def test_what_torchneuron_and_dataparallel_cannot_serve_is_refused_at_load(server, repo, case):
    """Each refusal names the cause before anything loads: TorchNeuron installed for inf2 (Trn2/Trn3
    only), a torch_neuronx.trace file for trn3, several cores per TorchNeuron instance, and
    DataParallel over a model without a batch dim (it would split dim 0 over the cores)."""
    name = f"refuse_{case}"
    inputs, outputs = ["INPUT__0,FP32,4", "INPUT__1,FP32,4"], ["OUTPUT__0,FP32,4", "OUTPUT__1,FP32,4"]
    settings = dict(NEURON_CORE_START_INDEX=0, NEURON_CORE_END_INDEX=0, WORKBENCH_FRAMEWORK="pytorch",
                    max_batch_size=8)
    if case == "no_batch_dim":
        (repo / name).mkdir()
        link_fakes(repo / name, ["torch_neuronx"])
        save_module(AddSub(), repo / name / "model.pt", (torch.ones(4), torch.ones(4)))
        settings.update(WORKBENCH_TARGET="inf2", NEURON_CORE_END_INDEX=1, max_batch_size=0)
        expected = "no batch dim.*DataParallel would split its dim 0 over the instance's 2 cores"
    else:
        folder = _torchneuron_model(repo, name)
        save_module(AddSub(), folder / "model.pt", (torch.ones(2, 4), torch.ones(2, 4)))
        if case == "torchneuron_on_inf2":
            settings.update(WORKBENCH_TARGET="inf2")
            expected = "torch-neuronx 2.14.3.1 is TorchNeuron, the native PyTorch backend for Trn2/Trn3 only"
        elif case == "xla_file_on_trn3":
            settings.update(WORKBENCH_TARGET="trn3")
            expected = "'model.pt' is not a torch.export program.*compile it again with workbench compile --target trn3"
        else:
            settings.update(WORKBENCH_TARGET="trn2", NEURON_CORE_END_INDEX=1)
            expected = "TorchNeuron, which has no DataParallel.*set the instance count to 2"
    write_model(repo, name, inputs, outputs, **settings)
    with pytest.raises(ModelLoadError, match=expected):
        server.load(name)


@pytest.mark.parametrize("version", ["2.9.0.2.15.32035", "2.7.0.2.10.16998", "2.13.3.1", "2.14.3.1", "2.14.3.1+fake"])
def test_model_py_tells_the_libraries_apart_as_the_workbench_does(template, version):
    """model.py runs without the workbench, so it keeps its own copy of the rule and the tables."""
    from workbench import system
    from workbench.neuron_libraries import torch_neuronx_problem

    assert template.XLA_TARGETS == system.XLA_TARGETS and template.TORCHNEURON_TARGETS == system.TORCHNEURON_TARGETS
    assert template.is_torchneuron(version) == (system.torch_neuronx_line(version) == "torchneuron")
    for target in system.NEURON_TARGETS:
        refused = torch_neuronx_problem(target, version) is not None
        if refused:
            with pytest.raises(template.SettingsError, match=f"target {target}: the installed torch-neuronx"):
                template.check_torch_neuronx(target, version)
        else:
            template.check_torch_neuronx(target, version)
