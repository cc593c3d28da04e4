"""``generate --backend vllm``: Triton vLLM-backend model directories (config.pbtxt + 1/model.json).

Every validation problem in the CLI's words, collected before anything is written; the round trip
(write -> read back -> the same files); the preview (model.json, the core map with each instance's
NEURON_RT_VISIBLE_CORES) and the diff; the CLI's exit 2. model.json is parsed by the installed
vLLM's own AsyncEngineArgs (what Triton's vLLM backend does with it) in the vLLM environment
(conftest ``vllm_python``; skipped with its reason where absent). The Neuron-only keys live inside
vLLM's ``additional_config`` (a ``dict[str, Any]`` engine argument that only a platform plugin
reads: vllm-neuron on Trn2/Trn3, the NxDI plugin on Inf2/Trn1, neither installable here), so vLLM's
CPU parser accepts any key there -- the test shows it does -- and those keys are checked against
their cited docs instead (settings.NEURON_KEY_SOURCES).
"""

from __future__ import annotations

import argparse
import json
import subprocess
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings as hypothesis_settings, strategies as st

from workbench import generate as gen
from workbench.cli import generate as generate_cli
from workbench.generate import GenerateSettings, read_back, render, validate
from workbench.generate.config import parameters_of, read_config
from workbench.generate.repository import RepositoryError
from workbench.generate.vllm_backend import VLLM, VllmSettings
from workbench.generate.vllm_backend.engine_settings import (NEURON_KEY_SOURCES, NXDI_NEURON_CONFIG_DOC, NXDI_VLLM_DOC,
                                                      VLLM_NEURON_CONFIG_DOC, NxdiBuckets, VllmNeuronBuckets)


def run_generate(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="workbench", allow_abbrev=False)
    generate_cli.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["generate", *argv])
    return args.func(args)


def hf_shaped(folder: Path) -> Path:
    """``folder`` made a Hugging Face folder's shape (config.json, a tokenizer file): 8 heads, 4 KV heads,
    512 positions."""
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "num_attention_heads": 8,
                                                    "num_key_value_heads": 4, "max_position_embeddings": 512}))
    (folder / "tokenizer.json").write_text("{}")
    return folder


@pytest.fixture
def model(tmp_path) -> Path:
    """A Hugging Face folder's shape, fresh for each test (tests change it)."""
    return hf_shaped(tmp_path / "llm")


def settings(folder: Path, tmp_path: Path, target: str = "cpu", **vllm) -> GenerateSettings:
    base = {"model": str(folder), "dtype": "float32", "max_model_len": 256, "max_num_seqs": 4,
            "kv_cache_memory_bytes": 64 << 20}
    return GenerateSettings(triton_model_dir=str(tmp_path / "repo" / "llm"), backend="vllm", target=target,
                            backend_settings=VllmSettings(**{**base, **vllm}))


@pytest.mark.parametrize("target, vllm, message", [
    ("trn2", {"tensor_parallel_size": 3, "core_range": "0:2"},
     "--tensor-parallel-size 3 does not divide the model's 8 attention heads"),
    ("trn2", {"tensor_parallel_size": 3, "core_range": "0:2"},
     "--tensor-parallel-size 3 does not fit the model's 4 KV heads"),
    ("trn2", {"tensor_parallel_size": 4, "core_range": "0:1"},
     "--tensor-parallel-size 4 does not fit --neuron_core_range 0:1 (2 core(s))"),
    ("inf2", {"core_range": "0:99"}, "--neuron_core_range 0:99: core 99 exists on no inf2"),
    ("trn2", {"core_range": "0:64"}, "core 64 exists on no trn2 (the largest, trn2u.48xlarge, has 64 at LNC=2)"),
    ("cpu", {"max_model_len": 600}, "--max-model-len 600 is past the model's 512 positions"),
    ("cpu", {"model": "/nonexistent/llm"}, "--compiled_model /nonexistent/llm: no such model folder"),
    ("cpu", {"tokenizer": "/nonexistent/tok"}, "--tokenizer /nonexistent/tok: no such folder"),
    ("cpu", {"dtype": "fp8x"}, "--dtype 'fp8x' is not one of auto, half"),
    ("cpu", {"block_size": 0}, "--block-size 0: give a whole number from 1 to 2147483647"),
    ("cpu", {"block_size": 48}, "--block-size 48: vLLM's CPU attention takes multiples of 32"),
    ("cpu", {"gpu_memory_utilization": 0.05, "kv_cache_memory_bytes": None}, "refuses shares this small"),
    ("cpu", {"gpu_memory_utilization": 0.5}, "both size the KV cache; give one"),
    ("cpu", {"core_range": "0:1"}, "--neuron_core_range places NeuronCores; --target cpu has none"),
    ("inf2", {"lnc": 2}, "--lnc 2: --target inf2 has no LNC"),
    ("inf2", {"vllm_neuron": VllmNeuronBuckets(num_seqs_buckets=(1, 4))}, "are vLLM Neuron's (trn2"),
    ("trn2", {"nxdi": NxdiBuckets(context_encoding_buckets=(128,))}, "are the NxD Inference plugin's (inf2, trn1)"),
    ("trn2", {"vllm_neuron": VllmNeuronBuckets(num_seqs_buckets=(1, 2))},
     "--num-seqs-buckets: the largest bucket (2) must equal --max-num-seqs (4)"),
    ("trn2", {"vllm_neuron": VllmNeuronBuckets(num_seqs_buckets=(4, 1))}, "smallest first"),
    ("inf2", {"nxdi": NxdiBuckets(token_generation_buckets=(128, 512))},
     "--token-generation-buckets: the largest bucket (512) must be at most --max-model-len (256)"),
    ("inf1", {}, "--target inf1: Triton's vLLM backend serves cpu"),
    ("cpu", {"extra_engine_args": {"max_num_seqs": 2}}, "--engine-arg max_num_seqs: set by their own flags"),
    ("cpu", {"extra_engine_args": {"additional_config": []}}, "additional_config: must be a JSON object"),
])
def test_each_problem_is_named_before_anything_is_written(model, tmp_path, target, vllm, message):
    chosen = settings(model, tmp_path, target, **vllm)
    problems = validate(chosen)
    assert any(message in p for p in problems), problems
    with pytest.raises(gen.GenerateError):
        render(chosen)
    assert not (tmp_path / "repo").exists()


def test_a_missing_tokenizer_and_several_problems_are_all_collected(model, tmp_path):
    (model / "tokenizer.json").unlink()
    problems = validate(settings(model, tmp_path, "trn2", tensor_parallel_size=3, core_range="0:2", dtype="x",
                                 max_model_len=1024))
    assert any("no tokenizer there (tokenizer.json" in p for p in problems)
    assert sum("--tensor-parallel-size 3" in p for p in problems) == 2
    assert any("--dtype 'x'" in p for p in problems) and any("--max-model-len 1024" in p for p in problems)


def test_fields_the_vllm_backend_does_not_read_are_refused(model, tmp_path):
    chosen = replace(settings(model, tmp_path), max_batch_size=8, compiled_model="model.pt")
    problems = validate(chosen)
    assert "--max_batch_size is not read by Triton's vLLM backend (leave it out)" in problems
    assert "--compiled_model is not read by Triton's vLLM backend (leave it out)" in problems


@pytest.mark.parametrize("target, vllm", [
    ("cpu", {"block_size": 32, "extra_engine_args": {"disable_log_stats": True, "seed": 3}}),
    ("trn2", {"tensor_parallel_size": 2, "core_range": "2:7", "lnc": 1, "max_num_batched_tokens": 256,
              "vllm_neuron": VllmNeuronBuckets((128, 256), (1, 2, 4)),
              "extra_engine_args": {"additional_config": {"neuron_config": {"on_device_sampling_config": {}}}}}),
    ("inf2", {"tensor_parallel_size": 2, "nxdi": NxdiBuckets(True, (64, 256), (256,))}),
])
def test_written_directory_reads_back_with_nothing_lost(model, tmp_path, target, vllm):
    original = settings(model, tmp_path, target, **vllm)
    generated = render(original)
    gen.write(generated)
    config = read_config(generated.dest)
    assert config.backend == "vllm" and config.max_batch_size == 0 and config.model_transaction_policy.decoupled
    assert [g.kind for g in config.instance_group] == [3]  # KIND_MODEL
    back = read_back(generated.dest)
    assert back.settings.backend == "vllm" and back.settings.target == target
    assert back.settings.backend_settings == original.backend_settings
    regenerated = render(back.settings)
    assert regenerated.files == generated.files
    assert regenerated.changes().empty


def test_preview_shows_model_json_and_each_instances_cores(model, tmp_path):
    generated = render(settings(model, tmp_path, "trn2", tensor_parallel_size=2, core_range="0:6"))
    text = generated.dry_run()
    assert f"# ---- {generated.dest / '1' / 'model.json'}" in text and '"tensor_parallel_size": 2' in text
    for k, cores in enumerate(("0-1", "2-3", "4-5")):
        assert f"instance {k}: NEURON_RT_VISIBLE_CORES={cores} NEURON_LOGICAL_NC_CONFIG=2" in text
    assert "cores 6-6 of 0:6 stay idle" in text
    assert generated.config.instance_group[0].count == 3
    assert parameters_of(generated.config)["NEURON_CORE_START_INDEX"] == "0"


def test_a_range_that_does_not_divide_gives_each_instance_exactly_its_tensor_parallel_cores(model, tmp_path):
    """tp 4 over 0:9 is two instances of 4 cores (0-3, 4-7) and 8-9 idle, not two of 5."""
    generated = render(settings(model, tmp_path, "trn2", tensor_parallel_size=4, core_range="0:9"))
    text = generated.dry_run()
    for k, cores in enumerate(("0-3", "4-7")):
        assert f"instance {k}: NEURON_RT_VISIBLE_CORES={cores} NEURON_LOGICAL_NC_CONFIG=2" in text
    assert "cores 8-9 of 0:9 stay idle" in text and generated.config.instance_group[0].count == 2
    from workbench.deploy.vllm_instances import deployment_for_model

    deployment = deployment_for_model(generated, instance_type="trn2.48xlarge")
    assert [deployment.core_map.visible_cores(k) for k in range(deployment.core_map.instances)] == ["0-3", "4-7"]


def test_diff_names_the_changed_engine_argument_and_write_needs_confirming(model, tmp_path):
    first = settings(model, tmp_path)
    gen.write(render(first))
    changed = replace(first, backend_settings=replace(first.backend_settings, max_num_seqs=8))
    diff = gen.diff(changed)
    assert '-  "max_num_seqs": 4,' in diff and '+  "max_num_seqs": 8,' in diff
    with pytest.raises(RepositoryError, match="already exists"):
        gen.write(render(changed))
    assert json.loads((tmp_path / "repo" / "llm" / "1" / "model.json").read_text())["max_num_seqs"] == 4
    generated = render(changed)
    gen.write(generated, confirm=generated.changes())
    assert json.loads((tmp_path / "repo" / "llm" / "1" / "model.json").read_text())["max_num_seqs"] == 8


def test_cli_writes_a_servable_directory(model, tmp_path, capsys):
    dest = tmp_path / "repo" / "llm"
    assert run_generate(["--backend", "vllm", "--target", "trn2", "--compiled_model", str(model),
                         "--triton_model_dir", str(dest), "--tensor-parallel-size", "4", "--neuron_core_range", "0:7",
                         "--max-model-len", "256", "--max-num-seqs", "4", "--num-seqs-buckets", "1,2,4",
                         "--engine-arg", "disable_log_stats=true"]) == 0
    args = json.loads((dest / "1" / "model.json").read_text())
    assert args["tensor_parallel_size"] == 4 and args["disable_log_stats"] is True
    assert args["additional_config"] == {"neuron_config": {"num_seqs_buckets": [1, 2, 4]}}
    assert "instance 1: cores 4-7" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["--max-model-len", "600"], "--max-model-len 600 is past the model's 512 positions"),
    (["--tensor-parallel-size", "16"], "--tensor-parallel-size 16 does not divide the model's 8 attention heads"),
    (["--engine-arg", "seed"], "--engine-arg 'seed': write KEY=JSON"),
])
def test_cli_bad_input_exits_2_with_one_line_and_writes_nothing(model, tmp_path, capsys, argv, message):
    dest = tmp_path / "repo" / "llm"
    code = run_generate(["--backend", "vllm", "--target", "inf2", "--compiled_model", str(model),
                         "--triton_model_dir", str(dest), *argv])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and message in err[0], err
    assert not (tmp_path / "repo").exists()


def test_vllm_flags_need_the_vllm_backend(model, tmp_path, capsys):
    assert run_generate(["--compiled_model", "m.pt", "--triton_model_dir", str(tmp_path / "m"),
                         "--tensor-parallel-size", "2"]) == 2
    assert "--tensor-parallel-size: for Triton's vLLM backend; add --backend vllm" in capsys.readouterr().err


def test_the_switch_serves_vllm_configs():
    assert gen.BACKENDS["vllm"] is VLLM
    from workbench.generate.backends import backend_of_config
    from workbench.generate.config import from_text
    assert backend_of_config(from_text('backend: "vllm"')) is VLLM
    assert VLLM.config_problems(from_text('backend: "vllm"\nmax_batch_size: 4\ninstance_group { kind: KIND_GPU }')) \
        == ["max_batch_size 4: Triton's vLLM backend batches in vLLM; use 0",
            "instance_group kind KIND_GPU: Triton's vLLM backend places the model itself; use KIND_MODEL"]


# ---- vLLM's own parser, and the docs for the keys it cannot check

# One vLLM process for the module (importing vLLM costs tens of seconds on 2 cores): each model.json in
# argv[1] is given to AsyncEngineArgs as Triton's vLLM backend does (src/model.py), each in argv[2]
# also builds its engine config (no engine started). Every file is read on its own: what one raises
# is recorded for that file, so a test sees only its own files' outcome.
_VLLM_READS = r"""
import dataclasses, json, sys, traceback
from vllm.engine.arg_utils import AsyncEngineArgs
fields = {f.name for f in dataclasses.fields(AsyncEngineArgs)}
out = {"unknown": {}, "engine": {}, "raised": {}}
for path in json.loads(sys.argv[1]):
    try:
        args = json.load(open(path))
        out["unknown"][path] = sorted(set(args) - fields)
        AsyncEngineArgs(**args)  # what Triton's vLLM backend does with model.json (src/model.py)
    except Exception:
        out["raised"][path] = traceback.format_exc()[-3000:]
for path in json.loads(sys.argv[2]):
    try:
        config = AsyncEngineArgs(**json.load(open(path))).create_engine_config()
        out["engine"][path] = {
            "block_size": config.cache_config.block_size, "dtype": str(config.model_config.dtype),
            "max_num_seqs": config.scheduler_config.max_num_seqs, "max_model_len": config.model_config.max_model_len,
            "kv_cache_memory_bytes": config.cache_config.kv_cache_memory_bytes,
            "enforce_eager": config.model_config.enforce_eager}
    except Exception:
        out["raised"][path] = traceback.format_exc()[-3000:]
print(json.dumps(out))
"""


@dataclass(frozen=True)
class VllmReads:
    """What the installed vLLM made of the written model.json files: ``parsed`` (target -> path) by
    AsyncEngineArgs, ``nonsense`` too, ``engine_built`` into an engine config; ``unknown`` keys and
    ``engine`` values per path, ``raised`` (path -> traceback), the process's exit ``status`` and stderr."""

    parsed: dict[str, str]
    nonsense: str
    engine_built: str
    unknown: dict[str, list[str]]
    engine: dict[str, dict]
    raised: dict[str, str]
    status: int
    stderr: str


@pytest.fixture(scope="module")
def vllm_reads(vllm_python, tmp_path_factory) -> VllmReads:
    """The generator's model.json for cpu, trn2 and inf2 (from a Hugging Face folder's shape), one with a
    key vLLM's CPU parser cannot check inside additional_config, and the zoo's tiny LLM's cpu model.json,
    read by vLLM in one process."""
    from workbench import zoo

    root = tmp_path_factory.mktemp("vllm_reads")
    folder = hf_shaped(root / "llm")
    parsed = {}
    for target, vllm in (("cpu", {"block_size": 32, "enforce_eager": True, "max_num_batched_tokens": 256,
                                  "extra_engine_args": {"disable_log_stats": True}}),
                         ("trn2", {"tensor_parallel_size": 2, "max_num_batched_tokens": 256,
                                   "vllm_neuron": VllmNeuronBuckets((128, 256), (1, 4))}),
                         ("inf2", {"tensor_parallel_size": 2, "nxdi": NxdiBuckets(True, (128, 256), (256,))})):
        chosen = settings(folder, root / target, target, **vllm)
        gen.write(render(chosen))
        parsed[target] = str(chosen.model_dir / "1" / "model.json")
    nonsense = root / "nonsense.json"
    nonsense.write_text(json.dumps({"model": str(folder), "additional_config": {"neuron_config": {"no_such": 1}}}))
    tiny = GenerateSettings(triton_model_dir=str(root / "tiny" / "repo" / "llm"), backend="vllm", target="cpu",
                            backend_settings=VllmSettings(model=str(zoo.tiny_llm().path), dtype="float32",
                                                          max_model_len=256, max_num_seqs=4, block_size=32,
                                                          kv_cache_memory_bytes=64 << 20, enforce_eager=True))
    gen.write(render(tiny))
    built = str(tiny.model_dir / "1" / "model.json")
    done = subprocess.run([str(vllm_python), "-c", _VLLM_READS, json.dumps([*parsed.values(), str(nonsense)]),
                           json.dumps([built])], capture_output=True, text=True, timeout=600,
                          env={"LC_ALL": "C.UTF-8", "LANG": "C.UTF-8", "PATH": "/usr/bin:/bin"})
    out = json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else {}
    return VllmReads(parsed, str(nonsense), built, out.get("unknown", {}), out.get("engine", {}),
                     out.get("raised", {}), done.returncode, done.stderr[-3000:])


def test_every_model_json_key_is_a_vllm_engine_argument(vllm_reads):
    assert vllm_reads.status == 0, vllm_reads.stderr
    written = list(vllm_reads.parsed.values())
    assert {path: vllm_reads.raised.get(path) for path in written} == {path: None for path in written}
    assert {path: vllm_reads.unknown.get(path) for path in written} == {path: [] for path in written}  # every key
    # the CPU parser takes any key inside additional_config: it cannot check the Neuron ones
    assert vllm_reads.nonsense in vllm_reads.unknown and vllm_reads.nonsense not in vllm_reads.raised, \
        vllm_reads.raised.get(vllm_reads.nonsense)


def test_neuron_only_keys_are_those_their_docs_define(model, tmp_path):
    """Every key written inside additional_config is one of the cited docs' keys, in the namespace
    the doc gives it (vLLM Neuron: ``neuron_config``; NxDI plugin: ``override_neuron_config``)."""
    trn2 = gen.render(settings(model, tmp_path, "trn2", max_num_batched_tokens=256,
                               vllm_neuron=VllmNeuronBuckets((128, 256), (1, 4))))
    inf2 = gen.render(settings(model, tmp_path, "inf2", nxdi=NxdiBuckets(False, (128, 256), (256,))))
    written = set()
    for generated in (trn2, inf2):
        additional = json.loads(generated.files["1/model.json"])["additional_config"]
        written |= {(space, key) for space, keys in additional.items() for key in keys}
    assert written == set(NEURON_KEY_SOURCES)
    assert {NEURON_KEY_SOURCES[("neuron_config", k)] for k in ("num_batched_tokens_buckets", "num_seqs_buckets")} \
        == {VLLM_NEURON_CONFIG_DOC}
    assert all(url.startswith("https://awsdocs-neuron.readthedocs-hosted.com/") for url in
               (VLLM_NEURON_CONFIG_DOC, NXDI_VLLM_DOC, NXDI_NEURON_CONFIG_DOC))
    # the cpu target writes none of them
    assert "additional_config" not in json.loads(render(settings(model, tmp_path)).files["1/model.json"])


def test_vllm_builds_its_engine_config_from_the_cpu_model_json(vllm_reads):
    """The values arrive, not only the keys: vLLM's CPU engine config from the written model.json of
    the zoo's tiny LLM (no engine started)."""
    assert vllm_reads.status == 0, vllm_reads.stderr
    assert vllm_reads.engine_built not in vllm_reads.raised, vllm_reads.raised[vllm_reads.engine_built]
    assert vllm_reads.engine[vllm_reads.engine_built] == {
        "block_size": 32, "dtype": "torch.float32", "max_num_seqs": 4, "max_model_len": 256,
        "kv_cache_memory_bytes": 64 << 20, "enforce_eager": True}


def test_a_hand_written_directory_reads_back_naming_what_regenerating_drops(model, tmp_path):
    """The shape tests/test_vllm_served.py wrote by hand before the generator: read back, every
    engine argument kept; a hand-added response cache and instance count are named."""
    dest = tmp_path / "repo" / "llm"
    (dest / "1").mkdir(parents=True)
    (dest / "config.pbtxt").write_text('backend: "vllm"\ninstance_group [ { count: 2, kind: KIND_MODEL } ]\n'
                                       'response_cache { enable: true }\n')
    args = {"model": str(model), "dtype": "float32", "max_model_len": 256, "disable_log_stats": True}
    (dest / "1" / "model.json").write_text(json.dumps(args))
    back = read_back(dest)
    assert back.settings.backend_settings.extra_engine_args == {"disable_log_stats": True}
    assert back.settings.target == "cpu"
    assert any("response_cache" in note for note in back.notes)
    assert any("2 instance(s) in instance_group; regenerating writes 1" in note for note in back.notes)
    assert json.loads(render(back.settings).files["1/model.json"]) == {**args, "tensor_parallel_size": 1}


@st.composite
def _valid(draw):
    target = draw(st.sampled_from(("cpu", "trn2", "inf2")))
    tp = 1 if target == "cpu" else draw(st.sampled_from((1, 2, 4, 8)))
    seqs = draw(st.integers(1, 64))
    length = draw(st.integers(16, 512))
    vllm = {"tensor_parallel_size": tp, "max_num_seqs": seqs, "max_model_len": length,
            "dtype": draw(st.sampled_from(("auto", "float32", "bfloat16"))),
            "enforce_eager": draw(st.booleans()), "block_size": draw(st.sampled_from((None, 32, 64)))}
    if target != "cpu":
        cores = tp * draw(st.integers(1, 3))
        start = draw(st.integers(0, 24 - cores))  # inf2.48xlarge has 24 NeuronCores
        vllm["core_range"] = f"{start}:{start + cores - 1}"
    if target == "trn2":
        vllm["vllm_neuron"] = VllmNeuronBuckets((), tuple(sorted({1, seqs})))
    if target == "inf2":
        vllm["nxdi"] = NxdiBuckets(draw(st.sampled_from((None, True, False))), (length,), tuple(sorted({16, length})))
    return target, vllm, draw(st.integers(1, 3))


@hypothesis_settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=_valid())
def test_any_valid_settings_round_trip(model, tmp_path_factory, case):
    target, vllm, version = case
    tmp = tmp_path_factory.mktemp("rt")
    original = replace(settings(model, tmp, target, **vllm), model_version=version)
    generated = render(original)
    gen.write(generated)
    back = read_back(generated.dest).settings
    assert (back.target, back.model_version) == (target, version)
    assert render(back).files == generated.files
