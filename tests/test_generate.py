"""workbench.generate: golden configs for upstream's QA matrix, every validation message, the CLI as a
subprocess, read-back of upstream-style and generated directories, and a generated CPU model
served by a real tritonserver.

Golden files live in tests/golden/generate/; they are rewritten only when WORKBENCH_REGENERATE_GOLDEN=1.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from workbench import generate as gen
from workbench.coremap import CoreRange
from workbench.generate.config import from_text, parameters_of, read_config, to_json, validate_config
from workbench.generate import GenerateError, GenerateSettings, load_settings, render, validate, write
from workbench.cli import generate as generate_cli
from workbench.generate.python_backend import model_py_text
from workbench.spec import ModelSpec

GOLDEN = Path(__file__).parent / "golden" / "generate"
REGEN = os.environ.get("WORKBENCH_REGENERATE_GOLDEN") == "1"
TEMPLATE_TEXT = model_py_text()
COMPILED = "/opt/models/add_sub.pt"  # absolute and absent: goldens use --for-other-machine


def run_generate(argv: list[str]) -> int:
    """The `generate` subcommand in-process (its own parser, so other subcommands do not matter)."""
    parser = argparse.ArgumentParser(prog="workbench", allow_abbrev=False)
    generate_cli.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["generate", *argv])
    return args.func(args)


# --- golden files: upstream's QA matrix for every framework/target ---------------------------------

TARGET_FLAGS = {
    "pytorch-cpu": ["--model_type", "pytorch", "--target", "cpu"],
    "pytorch-inf1": ["--model_type", "pytorch", "--target", "inf1"],
    "pytorch-inf2": ["--model_type", "pytorch", "--inf2"],
    "pytorch-trn1": ["--model_type", "pytorch", "--inf2", "--target", "trn1"],
    "tensorflow-inf1": ["--model_type", "tensorflow", "--target", "inf1"],
    "tensorflow-inf2": ["--model_type", "tensorflow", "--inf2"],
}
PLACEMENT = {
    "single": ["--neuron_core_range", "0:0", "--triton_model_instance_count", "1"],
    "multiple": ["--neuron_core_range", "0:7", "--triton_model_instance_count", "3"],
}
BATCHING = {
    "batched": ["--triton_input", "INPUT__0,INT64,4", "INPUT__1,INT64,4",
                "--triton_output", "OUTPUT__0,INT64,4", "--triton_output", "OUTPUT__1,INT64,4",
                "--enable_dynamic_batching", "--max_batch_size", "1000", "--preferred_batch_size", "8",
                "--max_queue_delay_microseconds", "100"],
    "notbatched": ["--triton_input", "INPUT__0,INT64,-1x4", "INPUT__1,INT64,-1x4",
                   "--triton_output", "OUTPUT__0,INT64,-1x4", "OUTPUT__1,INT64,-1x4", "--max_batch_size", "0"],
}
REQUESTS = {"batch": [], "perrequest": ["--disable_batch_requests_to_neuron"]}

MATRIX = [
    (f"{target}-{placement}-{batching}-{requests}",
     TARGET_FLAGS[target] + PLACEMENT[placement] + BATCHING[batching] + REQUESTS[requests])
    for target in TARGET_FLAGS for placement in PLACEMENT for batching in BATCHING for requests in REQUESTS
]
EXTRA = [
    ("pytorch-cpu-affinity-threads-version3",
     ["--target", "cpu", "--cpu-affinity", "--threads_per_core", "2", "--neuron_core_range", "0:1",
      "--triton_model_instance_count", "2", "--model_version", "3", "--triton_input", "INPUT__0,FP32,1x384",
      "--triton_output", "OUTPUT__0,FP32,1x2"]),
    ("transformers-neuronx-inf2",
     ["--model_type", "transformers_neuronx", "--inf2", "--neuron_core_range", "0:1", "--tnx-batch-size", "4",
      "--tnx-model-class", "GPT2ForSamplingWithContextBroadcasting", "--tnx-compiled-dir", "/opt/models/add_sub-neuron",
      "--tnx-n-positions", "1024", "--tnx-amp", "bf16", "--tnx-sequence-length", "256", "--tnx-unroll", "4",
      "--triton_input", "input_ids,INT64,-1", "sequence_length,INT64,1", "--triton_output", "output_ids,INT64,-1",
      "--max_batch_size", "4", "--enable_dynamic_batching"]),
    ("pytorch-trn2",
     ["--model_type", "pytorch", "--target", "trn2", "--neuron_core_range", "4:11", "--triton_model_instance_count",
      "2", "--triton_input", "INPUT__0,FP32,4", "--triton_output", "OUTPUT__0,FP32,4", "--max_batch_size", "8"]),
    ("tensorflow-inf2-signature",
     ["--model_type", "tensorflow", "--inf2", "--signature_def_key", "predict", "--triton_input", "x,FP32,-1x4",
      "--triton_output", "y,FP32,-1x2", "--preferred_batch_size", "8"]),
]


@pytest.mark.parametrize("case, flags", MATRIX + EXTRA, ids=[case for case, _ in MATRIX + EXTRA])
def test_golden_config(tmp_path, case, flags):
    dest = tmp_path / "repo" / "add-sub-1x4"
    argv = [*flags, "--compiled_model", COMPILED, "--for-other-machine", "--triton_model_dir", str(dest)]
    assert run_generate(argv) == 0
    version = flags[flags.index("--model_version") + 1] if "--model_version" in flags else "1"
    assert sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file()) == [
        f"{version}/model.py", "config.pbtxt"]
    assert (dest / version / "model.py").read_text() == TEMPLATE_TEXT
    text = (dest / "config.pbtxt").read_text()
    golden = GOLDEN / f"{case}.pbtxt"
    if REGEN:
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(text)
    assert golden.is_file(), f"{golden} missing: run with WORKBENCH_REGENERATE_GOLDEN=1 once and review it"
    assert text == golden.read_text()
    cfg = from_text(text)
    assert validate_config(cfg) == []
    params = parameters_of(cfg)
    for key in ("COMPILED_MODEL", "NEURON_CORE_START_INDEX", "NEURON_CORE_END_INDEX",
                "WORKBENCH_TARGET", "WORKBENCH_FRAMEWORK", "BATCH_REQUESTS", "CPU_AFFINITY"):
        assert key in params
    # only when asked for: absent leaves the Neuron SDK's DataParallel workers (1 thread per core on the cpu)
    assert ("NUM_THREADS_PER_CORE" in params) == ("--threads_per_core" in flags)
    assert params["BATCH_REQUESTS"] == ("false" if "--disable_batch_requests_to_neuron" in flags else "true")
    assert cfg.backend == "python" and len(cfg.instance_group) == 1


def test_golden_directory_has_no_stale_files():
    expected = {f"{case}.pbtxt" for case, _ in MATRIX + EXTRA}
    assert {p.name for p in GOLDEN.iterdir()} == expected


def test_matrix_configs_carry_the_upstream_semantics():
    """Spot checks of what the goldens encode, so a wrong golden cannot be regenerated unnoticed."""
    batched = from_text((GOLDEN / "pytorch-inf1-multiple-batched-batch.pbtxt").read_text())
    assert batched.max_batch_size == 1000 and list(batched.input[0].dims) == [4]
    assert list(batched.dynamic_batching.preferred_batch_size) == [8]
    assert batched.dynamic_batching.max_queue_delay_microseconds == 100
    assert batched.instance_group[0].count == 3
    assert parameters_of(batched)["NEURON_CORE_END_INDEX"] == "7"
    assert parameters_of(batched)["WORKBENCH_TARGET"] == "inf1"
    plain = from_text((GOLDEN / "pytorch-trn1-single-notbatched-perrequest.pbtxt").read_text())
    assert plain.max_batch_size == 0 and not plain.HasField("dynamic_batching")
    assert list(plain.output[1].dims) == [-1, 4]
    assert parameters_of(plain)["WORKBENCH_TARGET"] == "trn1" and parameters_of(plain)["BATCH_REQUESTS"] == "false"
    tf = from_text((GOLDEN / "tensorflow-inf2-signature.pbtxt").read_text())
    assert parameters_of(tf)["TF_SIGNATURE_DEF_KEY"] == "predict" and not tf.HasField("dynamic_batching")
    tnx = parameters_of(from_text((GOLDEN / "transformers-neuronx-inf2.pbtxt").read_text()))
    assert {k: tnx[k] for k in tnx if k.startswith("TNX_")} == {
        "TNX_AMP": "bf16", "TNX_BATCH_SIZE": "4", "TNX_MODEL_CLASS": "GPT2ForSamplingWithContextBroadcasting", "TNX_N_POSITIONS": "1024",
        "TNX_SEQUENCE_LENGTH": "256", "TNX_UNROLL": "4", "TNX_COMPILED_DIR": "/opt/models/add_sub-neuron"}


# --- validation: every problem named before anything is written --------------------------------

def settings(tmp_path, **overrides) -> GenerateSettings:
    base = dict(triton_model_dir=str(tmp_path / "m"), compiled_model=COMPILED, for_other_machine=True, target="cpu",
                triton_input=["INPUT__0,INT64,4", "INPUT__1,INT64,4"], triton_output=["OUTPUT__0,INT64,4"])
    base.update(overrides)
    return GenerateSettings(**base)


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(triton_input=["INPUT__0,FLOAT128,4"]), "--triton_input 'INPUT__0,FLOAT128,4': unknown data type"),
        (dict(triton_input=["INPUT__0,INT64,4xfour"]), "malformed shape '4xfour'"),
        (dict(triton_input=["INPUT__0,INT64"]), "expected NAME,DTYPE,SHAPE"),
        (dict(triton_input=["INPUT__0,INT64,4", "INPUT__0,INT64,4"]), "duplicate tensor name 'INPUT__0'"),
        (dict(triton_input=["tokens,INT64,4"]), "input 'tokens': PyTorch models need names of the form NAME__i"),
        (dict(triton_input=["INPUT__0,INT64,4", "INPUT__2,INT64,4"]), "input indices must cover 0..1: missing index [1]"),
        (dict(triton_output=["OUTPUT__1,INT64,4"]), "output indices must cover 0..0: missing index [0]"),
        (dict(triton_input=[], triton_output=[]), "--triton_input and --triton_output are required for PyTorch"),
        (dict(triton_output=[]), "--triton_output is missing"),
        (dict(triton_input=["INPUT__0,BYTES,4"]), "input 'INPUT__0': BYTES tensors are not supported"),
        (dict(neuron_core_range="0-3"), "--neuron_core_range: core range '0-3' is malformed"),
        (dict(neuron_core_range="3:1"), "--neuron_core_range: core range 3:1 is reversed"),
        (dict(neuron_core_range="0:1", triton_model_instance_count=3),
         "--triton_model_instance_count: cannot give 3 instances a core each from 2 core(s) in 0:1"),
        (dict(triton_model_instance_count=0), "--triton_model_instance_count: instance count must be >= 1"),
        (dict(threads_per_core=0), "--threads_per_core: threads per core must be >= 1, got 0"),
        (dict(max_batch_size=4, enable_dynamic_batching=True, preferred_batch_size=[8]),
         "--preferred_batch_size 8 is larger than --max_batch_size 4"),
        (dict(enable_dynamic_batching=True, preferred_batch_size=[2]), "--preferred_batch_size 2 needs --max_batch_size > 0"),
        (dict(max_batch_size=4, enable_dynamic_batching=True, preferred_batch_size=[0]),
         "--preferred_batch_size 0 must be at least 1"),
        (dict(max_batch_size=-1), "--max_batch_size -1 is negative"),
        (dict(enable_dynamic_batching=True, max_batch_size=4, max_queue_delay_microseconds=-5),
         "--max_queue_delay_microseconds -5 is negative"),
        (dict(model_version=0), "--model_version 0 is invalid; versions start at 1"),
        (dict(for_other_machine=False), "--compiled_model /opt/models/add_sub.pt not found"),
        (dict(copy_compiled_model=True), "does not exist, so it cannot be copied"),
        (dict(compiled_model=""), "--compiled_model is required"),
        (dict(triton_model_dir=""), "--triton_model_dir is required"),
        (dict(name="bad name"), "model name 'bad name' is not usable"),
        (dict(framework="onnx"), "--model_type 'onnx' is not one of pytorch, tensorflow, transformers_neuronx"),
        (dict(target="gpu"), "--target 'gpu' is not one of cpu, inf1, inf2, trn1"),
        (dict(framework="transformers_neuronx", target="inf1", triton_input=[], triton_output=[]),
         "transformers_neuronx runs on inf2/trn1 (or cpu), not inf1"),
        (dict(framework="transformers_neuronx", target="trn2", triton_input=[], triton_output=[]),
         "transformers_neuronx runs on inf2/trn1 (or cpu), not trn2"),
        (dict(framework="tensorflow", target="trn2", triton_input=[], triton_output=[]),
         "tensorflow runs on inf1/inf2/trn1 (or cpu), not trn2"),
        (dict(framework="transformers_neuronx", triton_input=["ids,INT64,-1"], triton_output=["o,INT64,-1"]),
         "transformers_neuronx models take input_ids"),
        (dict(framework="transformers_neuronx", triton_input=[], triton_output=[], tnx_sequence_length=4096),
         "--tnx-sequence-length 4096 exceeds --tnx-n-positions 2048"),
        (dict(framework="transformers_neuronx", triton_input=[], triton_output=[], tnx_batch_size=0),
         "--tnx-batch-size 0 must be at least 1"),
        (dict(framework="transformers_neuronx", triton_input=[], triton_output=[], tnx_amp="f8"),
         "--tnx-amp 'f8' is not one of f32, f16, bf16"),
        (dict(framework="tensorflow", triton_input=["x,FP32,4"], triton_output=[]),
         "give both --triton_input and --triton_output, or neither to read them from the SavedModel"),
        (dict(framework="tensorflow", triton_input=[], triton_output=[]),
         "the SavedModel is not on this machine to read them from"),
    ],
)
def test_each_validation_problem_is_named(tmp_path, overrides, message):
    problems = validate(settings(tmp_path, **overrides))
    assert any(message in p for p in problems), problems
    with pytest.raises(GenerateError) as err:
        render(settings(tmp_path, **overrides))
    assert message in str(err.value)
    assert list(tmp_path.iterdir()) == []


def test_all_problems_are_reported_at_once(tmp_path):
    problems = validate(settings(tmp_path, neuron_core_range="5:1", model_version=0, max_batch_size=-2,
                                 triton_input=["x,INT64,4"]))
    assert len(problems) == 4, problems


def test_relative_compiled_model_outside_the_model_dir_gets_a_hint(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("model.pt").write_bytes(b"w")
    problems = validate(settings(tmp_path, compiled_model="model.pt", for_other_machine=False))
    assert any("model.py resolves relative paths against the model directory" in p for p in problems), problems


def write_sidecar(artifact: Path, spec: ModelSpec, *, batch_dim=True, target="cpu", framework="pytorch") -> None:
    artifact.write_bytes(b"torchscript")
    record = {"spec": spec.to_dict(), "batch_dim": batch_dim, "target": target, "framework": framework}
    artifact.with_name(artifact.name + ".workbench.json").write_text(json.dumps(record))


COMPILED_SPEC = ModelSpec.parse(["INPUT__0,INT64,4", "INPUT__1,INT64,4"], ["OUTPUT__0,INT64,4", "OUTPUT__1,INT64,4"])


@pytest.mark.parametrize(
    "overrides, sidecar, message",
    [
        (dict(max_batch_size=8, triton_input=["INPUT__0,INT64,1x4", "INPUT__1,INT64,4"]), {},
         "input 'INPUT__0': dims [1, 4] include a batch dim, but with max_batch_size 8 Triton adds it; use [4]"),
        (dict(max_batch_size=0), {},
         "input 'INPUT__0': dims [4] lack the batch dim the compiled model takes; with max_batch_size 0 use [-1, 4]"),
        (dict(max_batch_size=8, triton_input=["INPUT__0,INT64,5", "INPUT__1,INT64,4"]), {},
         "input 'INPUT__0': dims [5] disagree with the compiled model's [batch] + [4]"),
        (dict(max_batch_size=8, triton_input=["INPUT__0,FP32,4", "INPUT__1,INT64,4"]), {},
         "input 'INPUT__0': dtype FP32, but the compiled model's is INT64"),
        (dict(max_batch_size=8, triton_input=["INPUT__0,INT64,4"]), {},
         "the compiled model also takes input(s) INPUT__1"),
        (dict(max_batch_size=8, triton_output=["OUTPUT__0,INT64,4", "OUTPUT__1,INT64,4", "OUTPUT__2,INT64,4"]), {},
         "output 'OUTPUT__2' is not one of the compiled model's outputs (OUTPUT__0, OUTPUT__1"),
        (dict(max_batch_size=8), dict(batch_dim=False),
         "--max_batch_size 8: the compiled model has no batch dim"),
        (dict(max_batch_size=8), dict(target="inf2"),
         "--compiled_model was compiled for inf2 (per "),
        (dict(max_batch_size=8), dict(framework="tensorflow"),
         "--compiled_model is a tensorflow model"),
    ],
)
def test_dims_are_checked_against_the_compiled_models_record(tmp_path, overrides, sidecar, message):
    artifact = tmp_path / "add_sub.pt"
    write_sidecar(artifact, COMPILED_SPEC, **sidecar)
    base = dict(compiled_model=str(artifact), for_other_machine=False,
                triton_output=["OUTPUT__0,INT64,4", "OUTPUT__1,INT64,4"])
    problems = validate(settings(tmp_path, **{**base, **overrides}))
    assert any(message in p for p in problems), problems
    assert not (tmp_path / "m").exists()


def test_record_that_agrees_passes_and_fills_missing_inputs(tmp_path):
    artifact = tmp_path / "add_sub.pt"
    write_sidecar(artifact, COMPILED_SPEC)
    ok = settings(tmp_path, compiled_model=str(artifact), for_other_machine=False, max_batch_size=8,
                  triton_output=["OUTPUT__0,INT64,4", "OUTPUT__1,INT64,4"])
    assert validate(ok) == []
    filled = render(settings(tmp_path, compiled_model=str(artifact), for_other_machine=False, max_batch_size=0,
                             triton_input=[], triton_output=[]))
    assert filled.spec == COMPILED_SPEC.with_batch_dim(-1)


def test_tensorflow_auto_detection_without_its_reader_says_what_to_do(tmp_path, monkeypatch):
    """The SavedModel reader (workbench.compiler.tensorflow) is made unimportable here, as when the
    tensorflow extra is not installed."""
    monkeypatch.setitem(sys.modules, "workbench.compiler.tensorflow", None)
    saved = tmp_path / "saved"
    saved.mkdir()
    (saved / "saved_model.pb").write_bytes(b"")
    problems = validate(settings(tmp_path, framework="tensorflow", compiled_model=str(saved), for_other_machine=False,
                                 triton_input=[], triton_output=[]))
    assert len(problems) == 1
    assert "pass --triton_input and --triton_output, or install the tensorflow extra" in problems[0]


def test_warnings_for_idle_cores_and_ignored_batching_flags(tmp_path):
    generated = render(settings(tmp_path, neuron_core_range="0:7", triton_model_instance_count=3,
                                preferred_batch_size=[8], max_queue_delay_microseconds=100))
    assert any("cores 6-7 of 0:7 stay idle" in w for w in generated.warnings)
    assert any("--preferred_batch_size and --max_queue_delay_microseconds ignored without "
               "--enable_dynamic_batching" in w for w in generated.warnings)
    assert not generated.config.HasField("dynamic_batching")
    dry = generated.dry_run()
    assert "instance 2: cores 4-5" in dry and "idle: cores 6-7" in dry
    assert generated.config_text in dry and TEMPLATE_TEXT.rstrip("\n") in dry


def test_model_version_writes_that_version_and_copies_the_artifact_there(tmp_path):
    artifact = tmp_path / "add_sub.pt"
    write_sidecar(artifact, COMPILED_SPEC)
    generated = render(settings(tmp_path, compiled_model=str(artifact), for_other_machine=False, copy_compiled_model=True,
                                model_version=3, max_batch_size=8, triton_output=["OUTPUT__0,INT64,4", "OUTPUT__1,INT64,4"]))
    result = write(generated)
    dest = result.path
    assert sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file()) == [
        "3/add_sub.pt", "3/add_sub.pt.workbench.json", "3/model.py", "config.pbtxt"]
    assert parameters_of(read_config(dest))["COMPILED_MODEL"] == "3/add_sub.pt"


def test_trailing_slash_and_single_values_are_accepted(tmp_path):
    """Upstream wrote name: "" for a trailing slash; notebook callers pass one preferred size as an int."""
    generated = render(settings(tmp_path, triton_model_dir=str(tmp_path / "m") + "/", max_batch_size=16,
                                enable_dynamic_batching=True, preferred_batch_size=8,
                                triton_input="INPUT__0,INT64,4",
                                triton_output=[{"name": "OUTPUT__0", "dtype": "INT64", "dims": [4]}]))
    assert generated.config.name == "m" and list(generated.config.dynamic_batching.preferred_batch_size) == [8]
    assert [t.name for t in generated.spec.inputs] == ["INPUT__0"]


def test_dynamic_batching_without_max_batch_size_warns(tmp_path):
    """Measured on Triton 2.51: 8 concurrent requests ran as 8 executions with max_batch_size 0."""
    generated = render(settings(tmp_path, enable_dynamic_batching=True))
    assert any("Triton still runs each request alone" in w for w in generated.warnings)


def test_name_other_than_the_directory_puts_the_model_inside_it(tmp_path):
    generated = render(settings(tmp_path, triton_model_dir=str(tmp_path / "repo"), name="add_sub"))
    assert generated.dest == tmp_path / "repo" / "add_sub" and generated.config.name == "add_sub"
    same = render(settings(tmp_path, triton_model_dir=str(tmp_path / "repo" / "add_sub"), name="add_sub"))
    assert same.dest == tmp_path / "repo" / "add_sub"


# --- read back and regenerate -------------------------------------------------------------------

UPSTREAM_CONFIG = (
    # byte for byte what gen_triton_model.py writes for the QA "multiple batched" PyTorch case with
    # COMPILED_MODEL /home/ubuntu/add_sub.pt (test_upstream_oracle.py runs the script and compares):
    # its blank lines and trailing spaces included, so the backup below is checked against real bytes
    'name: "add-sub-1x4"\n'
    'backend: "python"\n'
    'max_batch_size: 1000\n\n'
    'dynamic_batching {\n\n'
    '    preferred_batch_size: 8\n\n'
    '    max_queue_delay_microseconds: 100\n\n'
    '}\n\n'
    'input [\n  {\n    name: "INPUT__0"\n    data_type: TYPE_INT64\n    dims: [4]\n  }\n]\n\n'
    'input [\n  {\n    name: "INPUT__1"\n    data_type: TYPE_INT64\n    dims: [4]\n  }\n]\n\n'
    'output [\n  {\n    name: "OUTPUT__0"\n    data_type: TYPE_INT64\n    dims: [4]\n  }\n]\n\n'
    'output [\n  {\n    name: "OUTPUT__1"\n    data_type: TYPE_INT64\n    dims: [4]\n  }\n]\n'
    '\ninstance_group [\n    {\n        kind: KIND_MODEL\n        count: 3\n    }\n]\n'
    'parameters: {key: "COMPILED_MODEL", value: {string_value: "/home/ubuntu/add_sub.pt"}} \n'
    'parameters: {key: "NEURON_CORE_START_INDEX", value: {string_value: "0"}} \n'
    'parameters: {key: "NEURON_CORE_END_INDEX", value: {string_value: "7"}} \n'
    'parameters: {key: "NUM_THREADS_PER_CORE", value: {string_value: "1"}} \n'
)
HAND_MODEL_PY = (
    # a model.py rewritten by hand around torch_neuronx: not one of upstream's variants (those are
    # recognised against the real script in test_upstream_oracle.py), so it is kept as written
    "import json\nimport numpy as np\nimport os\nimport sys\nimport torch\nimport torch_neuronx\n\n"
    "import triton_python_backend_utils as pb_utils\n"
)


def test_upstream_config_with_a_rewritten_model_py_reads_back_and_keeps_it(tmp_path):
    model_dir = tmp_path / "add-sub-1x4"
    (model_dir / "1").mkdir(parents=True)
    (model_dir / "config.pbtxt").write_text(UPSTREAM_CONFIG)
    (model_dir / "1" / "model.py").write_text(HAND_MODEL_PY)
    back = gen.read_back(model_dir)
    loaded = back.settings
    assert any("1/model.py is neither the workbench's nor one of upstream's: kept as written" in n for n in back.notes)
    assert loaded.model_py == str((model_dir / "1" / "model.py").resolve()) and loaded.extra_files == {}
    assert loaded.framework == "pytorch" and loaded.target == "inf2"  # from what it imports
    assert loaded.triton_input == ["INPUT__0,INT64,4", "INPUT__1,INT64,4"]
    assert loaded.triton_output == ["OUTPUT__0,INT64,4", "OUTPUT__1,INT64,4"]
    # upstream writes NUM_THREADS_PER_CORE "1" whether asked or not: read as not given
    assert loaded.neuron_core_range == CoreRange(0, 7)
    assert (loaded.triton_model_instance_count, loaded.threads_per_core) == (3, None)
    assert (loaded.max_batch_size, loaded.enable_dynamic_batching) == (1000, True)
    assert (loaded.preferred_batch_size, loaded.max_queue_delay_microseconds) == ([8], 100)
    assert loaded.compiled_model == "/home/ubuntu/add_sub.pt" and loaded.for_other_machine
    assert loaded.model_version == 1 and not loaded.disable_batch_requests_to_neuron

    generated = render(loaded)
    upstream = from_text(UPSTREAM_CONFIG)
    ours = generated.config
    for key in ("WORKBENCH_TARGET", "WORKBENCH_FRAMEWORK", "BATCH_REQUESTS", "CPU_AFFINITY"):
        del ours.parameters[key]
    del upstream.parameters["NUM_THREADS_PER_CORE"]  # upstream's default "1": model.py reads both as not given
    assert ours == upstream  # same model, same semantics; only the workbench parameters are added
    assert any("1/model.py is kept as written" in w for w in generated.warnings)
    changes = gen.diff(loaded)
    assert "+    string_value: \"inf2\"" in changes and "model.py" not in changes
    result = write(generated, overwrite=True)
    assert (result.backup / "config.pbtxt").read_text() == UPSTREAM_CONFIG
    assert (model_dir / "1" / "model.py").read_text() == HAND_MODEL_PY
    assert load_settings(model_dir) == loaded


def test_upstream_inf1_relative_compiled_model_keeps_its_meaning(tmp_path, monkeypatch):
    """Upstream's inf1 model.py opened a relative COMPILED_MODEL from the server's working directory
    (only --inf2 joined it with the model folder): read back, it is made absolute against the
    working directory, so the regenerated directory points at the same file."""
    model_dir = tmp_path / "add-sub-1x4"
    (model_dir / "1").mkdir(parents=True)
    (model_dir / "config.pbtxt").write_text(UPSTREAM_CONFIG.replace("/home/ubuntu/add_sub.pt", "traced/add_sub.pt"))
    (model_dir / "1" / "model.py").write_text("import torch\nimport torch.neuron\n")
    server_dir = tmp_path / "server"
    (server_dir / "traced").mkdir(parents=True)
    (server_dir / "traced" / "add_sub.pt").write_bytes(b"x")
    monkeypatch.chdir(server_dir)
    loaded = load_settings(model_dir)
    assert loaded.target == "inf1" and loaded.compiled_model == str(server_dir / "traced" / "add_sub.pt")
    assert not loaded.for_other_machine
    assert parameters_of(render(loaded).config)["COMPILED_MODEL"] == str(server_dir / "traced" / "add_sub.pt")
    inf2 = tmp_path / "inf2"
    (inf2 / "1").mkdir(parents=True)
    (inf2 / "config.pbtxt").write_text(UPSTREAM_CONFIG.replace("/home/ubuntu/add_sub.pt", "traced/add_sub.pt"))
    (inf2 / "1" / "model.py").write_text(HAND_MODEL_PY)  # imports torch_neuronx: inf2
    assert load_settings(inf2).compiled_model == "traced/add_sub.pt"  # --inf2: the model folder's, as written


def test_threads_per_core_absent_and_one_stay_apart_through_read_back(tmp_path):
    base = dict(triton_input=["INPUT__0,INT64,4"], triton_output=["OUTPUT__0,INT64,4"], max_batch_size=4)
    for threads in (None, 1, 2):
        s = settings(tmp_path / str(threads), threads_per_core=threads, target="inf2", **base)
        write(render(s))
        params = parameters_of(read_config(s.model_dir))
        assert params.get("NUM_THREADS_PER_CORE") == (None if threads is None else str(threads))
        assert load_settings(s.model_dir).threads_per_core == threads


def test_upstream_tensorflow_and_hand_written_directories(tmp_path):
    tf_dir = tmp_path / "rn50"
    (tf_dir / "1").mkdir(parents=True)
    (tf_dir / "config.pbtxt").write_text(
        'name: "rn50"\nbackend: "python"\nmax_batch_size: 0\n'
        'input [\n  {\n    name: "input_1:0"\n    data_type: TYPE_FP16\n    dims: [-1, 224, 224, 3]\n  }\n]\n'
        'output [\n  {\n    name: "probs:0"\n    data_type: TYPE_FP16\n    dims: [-1, 1000]\n  }\n]\n'
        'instance_group [\n    {\n        kind: KIND_MODEL\n        count: 1\n    }\n]\n'
        'parameters: {key: "COMPILED_MODEL", value: {string_value: "/home/ubuntu/rn50_saved"}} \n'
        'parameters: {key: "NEURON_CORE_START_INDEX", value: {string_value: "0"}} \n'
        'parameters: {key: "NEURON_CORE_END_INDEX", value: {string_value: "3"}} \n'
        'parameters: {key: "NUM_THREADS_PER_CORE", value: {string_value: "2"}} \n')
    (tf_dir / "1" / "model.py").write_text("import tensorflow as tf\npredictor = tf.contrib.predictor\n")
    loaded = load_settings(tf_dir)
    assert (loaded.framework, loaded.target, loaded.threads_per_core) == ("tensorflow", "inf1", 2)
    assert loaded.triton_input == ["input_1:0,FP16,-1x224x224x3"] and not loaded.enable_dynamic_batching

    hand = tmp_path / "hand"
    hand.mkdir()
    (hand / "config.pbtxt").write_text(
        'name: "hand" backend: "python" input { name: "INPUT__0" data_type: TYPE_FP32 dims: [-1, 3] } '
        'output { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [-1, 3] }')
    loaded = load_settings(hand)
    assert (loaded.framework, loaded.target, loaded.compiled_model) == ("pytorch", "cpu", "")
    assert loaded.neuron_core_range == CoreRange(0, 0)
    assert "--compiled_model is required" in validate(loaded)[0]


@pytest.mark.parametrize("case, flags", [MATRIX[0], MATRIX[13], MATRIX[-1], *EXTRA], ids=lambda v: v if isinstance(v, str) else "")
def test_generated_directory_round_trips(tmp_path, case, flags):
    dest = tmp_path / "add-sub-1x4"
    assert run_generate([*flags, "--compiled_model", COMPILED, "--for-other-machine", "--triton_model_dir", str(dest)]) == 0
    loaded = load_settings(dest)
    assert gen.diff(loaded) == ""
    assert render(loaded).config == read_config(dest)


def test_regenerating_keeps_a_copied_artifact(tmp_path):
    artifact = tmp_path / "add_sub.pt"
    write_sidecar(artifact, COMPILED_SPEC)
    write(render(settings(tmp_path, compiled_model=str(artifact), for_other_machine=False, copy_compiled_model=True,
                          max_batch_size=8, triton_output=["OUTPUT__0,INT64,4", "OUTPUT__1,INT64,4"])))
    loaded = load_settings(tmp_path / "m")
    assert loaded.compiled_model == "1/add_sub.pt" and not loaded.for_other_machine
    result = write(render(replace(loaded, neuron_core_range="0:1", triton_model_instance_count=2)), overwrite=True)
    assert (result.path / "1" / "add_sub.pt").read_bytes() == b"torchscript"
    assert (result.path / "1" / "add_sub.pt.workbench.json").is_file()
    assert read_config(result.path).instance_group[0].count == 2


# --- the CLI as a subprocess ----------------------------------------------------------------------

def cli(*argv: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "workbench", "generate", *argv], cwd=cwd, capture_output=True,
                          text=True, timeout=120)


QA_FLAGS = ["--model_type", "pytorch", "--triton_input", "INPUT__0,INT64,-1x4", "INPUT__1,INT64,-1x4",
            "--triton_output", "OUTPUT__0,INT64,-1x4", "OUTPUT__1,INT64,-1x4", "--compiled_model", "add_sub.pt",
            "--copy-compiled-model", "--target", "cpu", "--triton_model_dir", "repo/add-sub"]


def test_cli_writes_refuses_with_the_changes_and_backs_up(tmp_path):
    (tmp_path / "add_sub.pt").write_bytes(b"w")
    done = cli(*QA_FLAGS, "--model_version", "2", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "wrote repo/add-sub" in done.stdout and "instance 0: cores 0" in done.stdout
    assert (tmp_path / "repo" / "add-sub" / "2" / "model.py").read_text() == TEMPLATE_TEXT
    assert (tmp_path / "repo" / "add-sub" / "2" / "add_sub.pt").read_bytes() == b"w"
    same = cli(*QA_FLAGS, "--model_version", "2", cwd=tmp_path)
    assert same.returncode == 0 and "unchanged repo/add-sub" in same.stdout, same.stderr
    again = cli(*QA_FLAGS, cwd=tmp_path)
    assert again.returncode == 2 and "already exists; nothing was written" in again.stderr
    assert "rerun with --force" in again.stderr and len(again.stderr.strip().splitlines()) == 1, again.stderr
    assert "removes 2/model.py" in again.stdout and "adds 1/model.py" in again.stdout
    assert 'changes parameters.COMPILED_MODEL.string_value: "2/add_sub.pt" -> "1/add_sub.pt"' in again.stdout
    assert "--- a/2/model.py\n+++ /dev/null" in again.stdout
    assert not (tmp_path / "repo" / "add-sub" / "1").exists()
    forced = cli(*QA_FLAGS, "--force", cwd=tmp_path)
    assert forced.returncode == 0 and "previous directory kept as" in forced.stdout
    assert (tmp_path / "repo" / "add-sub" / "1" / "model.py").is_file()
    assert sorted(p.name for p in (tmp_path / "repo").iterdir()) == ["add-sub"]
    backups = list((tmp_path / "repo.backups").iterdir())
    assert len(backups) == 1 and (backups[0] / "2" / "model.py").is_file()


def test_cli_dry_run_writes_nothing(tmp_path):
    (tmp_path / "add_sub.pt").write_bytes(b"w")
    done = cli(*QA_FLAGS, "--neuron_core_range", "0:1", "--triton_model_instance_count", "2", "--dry-run", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert 'name: "add-sub"' in done.stdout and "class TritonPythonModel" in done.stdout
    assert "instance 1: cores 1" in done.stdout and "1/add_sub.pt  <- copy of add_sub.pt" in done.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["add_sub.pt"]


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--neuron_core_range", "7:0"], "error: --neuron_core_range: core range 7:0 is reversed"),
        (["--triton_input", "INPUT__0,INT64,4x", "--max_batch_size", "0"], "malformed shape '4x'"),
        (["--max_batch_siz", "4"], "error: unrecognized arguments: --max_batch_siz 4"),
        (["--model_type", "onnx"], "argument --model_type: invalid choice: 'onnx'"),
        (["--max_batch_size", "many"], "argument --max_batch_size: invalid int value: 'many'"),
        (["--inf2", "--target", "cpu"], "error: --inf2 contradicts --target cpu"),
    ],
)
def test_cli_errors_exit_2_with_one_line_and_write_nothing(tmp_path, extra, message):
    (tmp_path / "add_sub.pt").write_bytes(b"w")
    done = cli(*QA_FLAGS, *extra, cwd=tmp_path)
    assert done.returncode == 2
    assert message in done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["add_sub.pt"]


def test_cli_missing_required_flag_is_a_usage_error(tmp_path):
    done = cli("--triton_model_dir", "m", cwd=tmp_path)
    assert done.returncode == 2 and "the following arguments are required: --compiled_model" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and list(tmp_path.iterdir()) == []


# --- a generated CPU model served by a real tritonserver ------------------------------------------

@pytest.fixture(scope="module")
def served(tmp_path_factory, triton_server_module):
    """One repository with two generated CPU models (the QA batched and not-batched shapes) and one server."""
    import torch

    class AddSub(torch.nn.Module):
        def forward(self, a, b):
            return a + b, a - b

    work = tmp_path_factory.mktemp("served")
    artifact = work / "add_sub.pt"
    example = (torch.zeros(2, 4, dtype=torch.int64), torch.zeros(2, 4, dtype=torch.int64))
    torch.jit.trace(AddSub(), example).save(str(artifact))
    repo = work / "repo"
    common = ["--target", "cpu", "--compiled_model", str(artifact), "--copy-compiled-model",
              "--neuron_core_range", "0:1", "--triton_input", "INPUT__0,INT64,DIMS", "INPUT__1,INT64,DIMS",
              "--triton_output", "OUTPUT__0,INT64,DIMS", "OUTPUT__1,INT64,DIMS"]
    batched = [a.replace("DIMS", "4") for a in common] + [
        "--triton_model_instance_count", "2", "--max_batch_size", "1000", "--enable_dynamic_batching",
        "--preferred_batch_size", "8", "--max_queue_delay_microseconds", "100", "--triton_model_dir",
        str(repo / "add-sub-batched")]
    plain = [a.replace("DIMS", "-1x4") for a in common] + [
        "--max_batch_size", "0", "--disable_batch_requests_to_neuron", "--model_version", "2",
        "--triton_model_dir", str(repo / "add-sub-plain")]
    assert run_generate(batched) == 0 and run_generate(plain) == 0
    return triton_server_module(repo), repo


def infer(server, name, a, b):
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(server.http_url)
    try:
        inputs = [httpclient.InferInput("INPUT__0", list(a.shape), "INT64"),
                  httpclient.InferInput("INPUT__1", list(b.shape), "INT64")]
        inputs[0].set_data_from_numpy(a)
        inputs[1].set_data_from_numpy(b)
        result = client.infer(name, inputs)
        return result.as_numpy("OUTPUT__0"), result.as_numpy("OUTPUT__1")
    finally:
        client.close()


@pytest.mark.server
@pytest.mark.parametrize("name", ["add-sub-batched", "add-sub-plain"])
def test_triton_serves_the_generated_model(served, name):
    server, repo = served
    server.load(name)
    assert server.is_model_ready(name)
    a = np.arange(24, dtype=np.int64).reshape(6, 4)
    b = np.full((6, 4), 5, dtype=np.int64)
    total, difference = infer(server, name, a, b)
    np.testing.assert_array_equal(total, a + b)
    np.testing.assert_array_equal(difference, a - b)
    served_config = server.model_config(name, as_proto=True)
    written = read_config(repo / name)
    assert served_config.max_batch_size == written.max_batch_size
    assert [t.name for t in served_config.input] == [t.name for t in written.input]
    assert parameters_of(served_config) == parameters_of(written)


@pytest.mark.server
def test_triton_accepts_the_json_override_and_rejects_what_validation_rejects(served):
    server, repo = served
    cfg = read_config(repo / "add-sub-batched")
    cfg.dynamic_batching.max_queue_delay_microseconds = 50
    server.load("add-sub-batched", config=to_json(cfg))
    assert server.model_config("add-sub-batched", as_proto=True).dynamic_batching.max_queue_delay_microseconds == 50

    from workbench.server import ModelLoadError

    bad = read_config(repo / "add-sub-plain")
    bad.max_batch_size = 4
    bad.dynamic_batching.preferred_batch_size.append(16)
    for tensor in list(bad.input) + list(bad.output):
        del tensor.dims[0]
    assert any("preferred_batch_size 16 is larger than max_batch_size 4" in p for p in validate_config(bad))
    with pytest.raises(ModelLoadError):
        server.load("add-sub-plain", config=to_json(bad))


@pytest.mark.parametrize("machine", ["cpu", "inf2"])
def test_an_upstream_command_line_keeps_upstreams_inf1_on_every_host(tmp_path, monkeypatch, capsys, machine):
    """Upstream without --inf2 generated inf1 code wherever it ran; the machine's detection is replaced
    (this host has no /dev/neuron*) to show the machine does not matter. --target overrides, --inf2 is inf2."""
    monkeypatch.setattr(generate_cli, "default_target", lambda: machine)
    flags = ["--model_type", "pytorch", "--triton_input", "INPUT__0,INT64,4", "--triton_output", "OUTPUT__0,INT64,4",
             "--compiled_model", COMPILED, "--for-other-machine"]
    assert run_generate([*flags, "--triton_model_dir", str(tmp_path / "a")]) == 0
    notes = [line for line in capsys.readouterr().err.splitlines() if "note:" in line]
    assert notes == ["workbench generate: note: no --target or --inf2: generating for inf1, as upstream "
                     "gen_triton_model.py did (--target cpu|inf2|trn1|trn2 for another)"]
    assert parameters_of(read_config(tmp_path / "a"))["WORKBENCH_TARGET"] == "inf1"
    assert run_generate([*flags, "--target", "cpu", "--triton_model_dir", str(tmp_path / "b")]) == 0
    assert "note:" not in capsys.readouterr().err
    assert parameters_of(read_config(tmp_path / "b"))["WORKBENCH_TARGET"] == "cpu"
    assert run_generate([*flags, "--inf2", "--triton_model_dir", str(tmp_path / "c")]) == 0
    assert "note:" not in capsys.readouterr().err
    assert parameters_of(read_config(tmp_path / "c"))["WORKBENCH_TARGET"] == "inf2"


def test_tensorflow_inputs_and_outputs_come_from_a_real_saved_model(tmp_path):
    """A real SavedModel written by TensorFlow; names are the signature keys, the batch dim is dropped
    only with max_batch_size > 0 (upstream kept it, doubling it)."""
    tf = pytest.importorskip("tensorflow")
    pytest.importorskip("workbench.compiler.tensorflow")

    class Scale(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
        def serve(self, x):
            return {"y": x * 2.0}

    module = Scale()
    saved = tmp_path / "scale_saved"
    tf.saved_model.save(module, str(saved), signatures={"serving_default": module.serve})
    base = dict(framework="tensorflow", compiled_model=str(saved), for_other_machine=False, triton_input=[],
                triton_output=[])
    plain = render(settings(tmp_path, **base))
    assert plain.spec == ModelSpec.parse(["x,FP32,-1x4"], ["y,FP32,-1x4"])
    batched = render(settings(tmp_path, max_batch_size=8, **base))
    assert batched.spec == ModelSpec.parse(["x,FP32,4"], ["y,FP32,4"])
    assert parameters_of(batched.config)["TF_SIGNATURE_DEF_KEY"] == "serving_default"
    problems = validate(settings(tmp_path, signature_def_key="nope", **base))
    assert len(problems) == 1 and "no signature 'nope'" in problems[0]


def write_lm(tmp_path: Path, *, target="inf2", graphs=True) -> Path:
    """A packaged causal LM as the compile step leaves it: checkpoint folder, saved Neuron graphs
    beside it, and the sidecar whose "extra" records the settings the graphs were compiled with."""
    folder = tmp_path / "lm"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    extra = {"model_class": "GPT2ForSamplingWithContextBroadcasting", "batch_size": 2, "n_positions": 128, "tp_degree": 2, "amp": "f32",
             "model_type": "gpt2"}
    if graphs:
        (tmp_path / "lm-neuron").mkdir()
        (tmp_path / "lm-neuron" / "graph.neff").write_bytes(b"neff")
        extra["compiled_dir"] = str(tmp_path / "lm-neuron")
    record = {"spec": ModelSpec.parse(["input_ids,INT64,-1"], ["output_ids,INT64,-1"]).to_dict(), "batch_dim": True,
              "target": target, "framework": "transformers_neuronx", "extra": extra}
    (tmp_path / "lm.workbench.json").write_text(json.dumps(record))
    return folder


def lm_settings(tmp_path, folder, **overrides):
    base = dict(framework="transformers_neuronx", target="inf2", compiled_model=str(folder), for_other_machine=False,
                triton_input=[], triton_output=[], neuron_core_range="0:1", max_batch_size=2,
                enable_dynamic_batching=True, triton_model_dir=str(tmp_path / "repo" / "lm"))
    base.update(overrides)
    return GenerateSettings(**base)


def test_transformers_neuronx_settings_and_graphs_come_from_the_compile_record(tmp_path):
    folder = write_lm(tmp_path)
    generated = render(lm_settings(tmp_path, folder, copy_compiled_model=True, tnx_sequence_length=64))
    params = parameters_of(generated.config)
    assert {k: v for k, v in params.items() if k.startswith("TNX_")} == {
        "TNX_MODEL_CLASS": "GPT2ForSamplingWithContextBroadcasting", "TNX_BATCH_SIZE": "2", "TNX_N_POSITIONS": "128", "TNX_TP_DEGREE": "2",
        "TNX_AMP": "f32", "TNX_SEQUENCE_LENGTH": "64", "TNX_COMPILED_DIR": "1/lm-neuron"}
    assert params["COMPILED_MODEL"] == "1/lm"
    dest = write(generated).path
    assert (dest / "1" / "lm-neuron" / "graph.neff").read_bytes() == b"neff"
    assert (dest / "1" / "lm" / "config.json").is_file() and (dest / "1" / "lm.workbench.json").is_file()
    loaded = load_settings(dest)
    assert (loaded.tnx_compiled_dir, loaded.tnx_batch_size, loaded.tnx_sequence_length) == ("1/lm-neuron", 2, 64)
    assert gen.diff(loaded) == ""


def test_transformers_neuronx_record_problems(tmp_path):
    folder = write_lm(tmp_path)
    problems = validate(lm_settings(tmp_path, folder, tnx_batch_size=4))
    assert any("--tnx-batch-size 4 differs from the 2 its saved Neuron graphs were compiled with" in p
               for p in problems), problems
    problems = validate(lm_settings(tmp_path, folder, tnx_sequence_length=512))
    assert any("--tnx-sequence-length 512 exceeds --tnx-n-positions 128" in p for p in problems), problems
    cpu = render(lm_settings(tmp_path, folder, target="cpu", tnx_compiled_dir=str(tmp_path / "lm-neuron")))
    assert "TNX_COMPILED_DIR" not in parameters_of(cpu.config)
    assert any("--tnx-compiled-dir is ignored on the cpu target" in w for w in cpu.warnings)


def test_missing_saved_graphs_warn_that_model_py_compiles_at_load(tmp_path):
    folder = write_lm(tmp_path)
    (tmp_path / "lm-neuron" / "graph.neff").unlink()
    (tmp_path / "lm-neuron").rmdir()
    generated = render(lm_settings(tmp_path, folder))
    assert "TNX_COMPILED_DIR" not in parameters_of(generated.config)
    assert any("recorded by the compile are missing; model.py will compile the model at load time" in w
               for w in generated.warnings)


def test_transformers_neuronx_takes_an_unbatched_prompt_too(tmp_path):
    folder = write_lm(tmp_path)
    for dims in ("-1", "-1x-1"):
        items = dict(triton_input=[f"input_ids,INT64,{dims}"], triton_output=[f"output_ids,INT64,{dims}"])
        assert validate(lm_settings(tmp_path, folder, max_batch_size=0, enable_dynamic_batching=False, **items)) == []


def test_trn2_generates_and_previews_a_docker_run_on_the_devices_of_its_cores(tmp_path):
    """trn2 at LNC=2: 4 logical cores per device, so cores 4-11 live on /dev/neuron1 and /dev/neuron2
    (core ids stay global inside the container: SDK deploy/tutorials/build-run-container.rst)."""
    from workbench.deploy.docker import docker_run_for_model

    generated = render(settings(tmp_path, target="trn2", neuron_core_range="4:11", triton_model_instance_count=2,
                                triton_input=["INPUT__0,FP32,4"], triton_output=["OUTPUT__0,FP32,4"], max_batch_size=8))
    params = parameters_of(generated.config)
    assert params["WORKBENCH_TARGET"] == "trn2" and "NUM_THREADS_PER_CORE" not in params
    assert [generated.core_map.visible_cores(k) for k in range(2)] == ["4-7", "8-11"]
    run = docker_run_for_model(generated)
    assert run.devices == (1, 2)
    assert run.argv[run.argv.index("--device") + 1] == "/dev/neuron1" and "/dev/neuron2" in run.argv
    wide = docker_run_for_model(generated, instance_type="trn2.48xlarge")
    assert wide.devices == (1, 2)
