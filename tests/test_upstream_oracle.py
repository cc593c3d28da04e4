"""The real upstream gen_triton_model.py as the oracle: its QA matrix and the guide's examples.

For every flag set, upstream's script (run as it ships, from ../shared/reference/upstream, or
$WORKBENCH_SHARED/reference/upstream; skipped with a reason where neither is there) and
``workbench generate`` with the same command line write a model directory. Their config.pbtxt files
are compared as parsed ModelConfig protobufs: equal, apart from the differences listed in
INTENDED_DIFFERENCES below. Then every upstream directory is read back and regenerated: the
settings must say what upstream meant (framework, target, batching mode, paths) and render the same
config as the workbench's own run. Upstream's code is run, never copied.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from workbench import generate as gen
from workbench.cli import generate as generate_cli
from workbench.generate.config import ConfigError, ModelConfig, from_text, read_config
from workbench.generate.repository import RepositoryError
from workbench.generate.python_backend.upstream import UpstreamModelPy, recognise

from shared_folder import SHARED

SCRIPT = SHARED / "reference" / "upstream" / "python_backend-inferentia" / "inferentia" / "scripts" / \
    "gen_triton_model.py"
pytestmark = pytest.mark.skipif(not SCRIPT.is_file(), reason=f"upstream gen_triton_model.py not found at {SCRIPT} "
                                "(set WORKBENCH_SHARED to the folder holding reference/upstream)")

# What the workbench writes differently from upstream, on purpose; each entry says why. The
# comparison below removes exactly these and requires everything else to be equal.
INTENDED_DIFFERENCES = {
    "parameters.WORKBENCH_TARGET": "upstream encodes the target in which model.py it writes (its imports); the "
                                   "workbench writes one model.py for every target and reads the target from here",
    "parameters.WORKBENCH_FRAMEWORK": "the same, for --model_type",
    "parameters.BATCH_REQUESTS": "upstream encodes --disable_batch_requests_to_neuron only in model.py's execute(); "
                                 "here it is \"false\" with that flag, else \"true\"",
    "parameters.CPU_AFFINITY": "the workbench's cpu-target option, written for every target (\"false\")",
    "parameters.TF_SIGNATURE_DEF_KEY": "TensorFlow: the signature the workbench's model.py calls by its keys",
    "NUM_THREADS_PER_CORE \"1\"": "upstream always writes NUM_THREADS_PER_CORE (\"1\" without --threads_per_core); "
                                  "the workbench writes it only when asked, leaving the Neuron SDK's DataParallel "
                                  "workers otherwise, and reads upstream's \"1\" back as not given",
    "tensorflow auto-detected names": "upstream records graph tensor names (serving_default_INPUT__0:0, "
                                      "PartitionedCall:1), which cannot be fed to the signature (verified: TypeError); "
                                      "the workbench writes the signature keys",
    "tensorflow auto-detected order": "upstream's order is protobuf map order and changed between runs on one "
                                      "SavedModel; the workbench sorts by key (so compare by name, never position)",
    "tensorflow auto-detected dims with max_batch_size": "upstream keeps the SavedModel's batch dim ([-1, 4] under "
                                                         "max_batch_size 8, so Triton adds a second one); the "
                                                         "workbench leaves it to max_batch_size ([4])",
    "lowercase dtype": "upstream writes TYPE_int64, which is not a ModelConfig enum (the config does not parse); "
                       "the workbench writes TYPE_INT64",
    "--model_version 2": "upstream creates 2/, writes config.pbtxt, then fails writing 1/model.py (half-written "
                         "directory, exit 1); the workbench writes 2/model.py",
}
WORKBENCH_PARAMETERS = [k.removeprefix("parameters.") for k in INTENDED_DIFFERENCES if k.startswith("parameters.")]

QA_MODEL = "add-sub-1x4"
PT_QA = "/home/ubuntu/add_sub_model_pyt.pt"  # QA: COMPILED_MODEL="$PWD/add_sub_model_pyt.pt"
TF_QA = "/home/ubuntu/add_sub_model_tf1"  # QA: COMPILED_MODEL="${PWD}/add_sub_model_tf1"
BERT_IO = ["--triton_input", "INPUT__0,INT64,4x384", "INPUT__1,INT64,4x384", "INPUT__2,INT64,4x384",
           "--triton_output", "OUTPUT__0,INT64,4x384", "OUTPUT__1,INT64,4x384"]


def qa_cases() -> list[tuple[str, str, list[str]]]:
    """The server repo's qa/L0_inferentia_perf_analyzer/test.sh create_inferentia_models (the QA that
    inferentia/qa/setup_test_enviroment_and_test.sh runs): TEST_TYPES x BATCHED_FLAGS x
    DISABLE_DEFAULT_BATCHING_FLAGS for pyt and tf1; plus the same matrix with --inf2, which the QA never ran."""
    cases = []
    for inf2 in (False, True):
        for framework, compiled, tag in (("pytorch", PT_QA, "pyt"), ("tensorflow", TF_QA, "tf1")):
            for no_batch in (False, True):
                for batched in (False, True):
                    for placement in ("single", "multiple"):
                        args = (["--inf2"] if inf2 else []) + ["--model_type", framework, "--compiled_model", compiled]
                        if no_batch:
                            args.append("--disable_batch_requests_to_neuron")
                        if batched:
                            args += ["--triton_input", "INPUT__0,INT64,4", "INPUT__1,INT64,4",
                                     "--triton_output", "OUTPUT__0,INT64,4", "OUTPUT__1,INT64,4",
                                     "--enable_dynamic_batching", "--max_batch_size", "1000",
                                     "--preferred_batch_size", "8", "--max_queue_delay_microseconds", "100"]
                        else:
                            args += ["--triton_input", "INPUT__0,INT64,-1x4", "INPUT__1,INT64,-1x4",
                                     "--triton_output", "OUTPUT__0,INT64,-1x4", "OUTPUT__1,INT64,-1x4"]
                        args += (["--neuron_core_range", "0:0"] if placement == "single" else
                                 ["--triton_model_instance_count", "3", "--neuron_core_range", "0:7"])
                        name = (f"qa_{placement}{'_batched' if batched else ''}_{tag}"
                                f"{'_no_batch' if no_batch else '_default_batch'}{'_inf2' if inf2 else ''}")
                        cases.append((name, QA_MODEL, args))
    return cases


GUIDE_CASES = [
    # inferentia/README.md's PyTorch example, verbatim (no --inf2: upstream means inf1)
    ("readme_bert_inf1", "bert-large-mlperf-bs1x4",
     ["--model_type", "pytorch", *BERT_IO, "--compiled_model",
      "/home/ubuntu/bert_large_mlperf_neuron_hack_bs1_dynamic.pt", "--neuron_core_range", "0:3"]),
    # its Inf2 section: --inf2 and a path relative to the model directory
    ("readme_bert_inf2_relative", "bert-large-mlperf-bs1x4",
     ["--inf2", "--model_type", "pytorch", *BERT_IO, "--compiled_model",
      "bert_large_mlperf_neuron_hack_bs1_dynamic.pt", "--neuron_core_range", "0:3"]),
    # the same relative path without --inf2: upstream's inf1 model.py opens it from the server's CWD
    ("readme_bert_inf1_relative", "bert-large-mlperf-bs1x4",
     ["--model_type", "pytorch", *BERT_IO, "--compiled_model",
      "bert_large_mlperf_neuron_hack_bs1_dynamic.pt", "--neuron_core_range", "0:3"]),
    ("readme_two_instances_four_cores", "bert-large-mlperf-bs1x4",
     ["--model_type", "pytorch", *BERT_IO, "--compiled_model", "/home/ubuntu/bert.pt", "--neuron_core_range", "0:3",
      "--triton_model_instance_count", "2"]),
    # --neuron_core_range's help text: 4 instances on cores 0:7
    ("help_four_instances_threads", "bert-large-mlperf-bs1x4",
     ["--model_type", "pytorch", *BERT_IO, "--compiled_model", "/home/ubuntu/bert.pt", "--neuron_core_range", "0:7",
      "--triton_model_instance_count", "4", "--threads_per_core", "2"]),
    # README "Using Triton's Dynamic Batching"
    ("readme_dynamic_batching", "bert-dyn",
     ["--model_type", "pytorch", "--triton_input", "INPUT__0,INT64,384", "INPUT__1,INT64,384", "INPUT__2,INT64,384",
      "--triton_output", "OUTPUT__0,INT64,384", "OUTPUT__1,INT64,384", "--compiled_model", "/home/ubuntu/bert.pt",
      "--neuron_core_range", "0:3", "--triton_model_instance_count", "2", "--enable_dynamic_batching",
      "--max_batch_size", "8", "--preferred_batch_size", "4", "--max_queue_delay_microseconds", "1000",
      "--disable_batch_requests_to_neuron"]),
    ("dynamic_batching_alone", "dyn-empty",  # an empty dynamic_batching block
     ["--model_type", "pytorch", "--triton_input", "INPUT__0,FP32,16", "--triton_output", "OUTPUT__0,FP32,16",
      "--compiled_model", "/m.pt", "--neuron_core_range", "0:0", "--max_batch_size", "4",
      "--enable_dynamic_batching"]),
    ("batching_flags_without_enable", "dyn-ignored",  # ignored without --enable_dynamic_batching
     ["--model_type", "pytorch", "--triton_input", "INPUT__0,FP32,16", "--triton_output", "OUTPUT__0,FP32,16",
      "--compiled_model", "/m.pt", "--neuron_core_range", "0:0", "--max_batch_size", "4",
      "--preferred_batch_size", "2", "--max_queue_delay_microseconds", "50"]),
    ("tensorflow_explicit_io_inf2", "tf-explicit",
     ["--inf2", "--model_type", "tensorflow", "--compiled_model", "/home/ubuntu/rn50_tf2", "--triton_input",
      "input_1,FP32,224x224x3", "--triton_output", "probs,FP32,1000", "--max_batch_size", "4",
      "--neuron_core_range", "0:1"]),
    ("lowercase_dtype", "lower",
     ["--model_type", "pytorch", "--triton_input", "INPUT__0,int64,4", "--triton_output", "OUTPUT__0,int64,4",
      "--compiled_model", "/m.pt", "--neuron_core_range", "0:0"]),
    ("model_version_2", "v2",
     ["--model_type", "pytorch", "--triton_input", "INPUT__0,FP32,4", "--triton_output", "OUTPUT__0,FP32,4",
      "--compiled_model", "/m.pt", "--neuron_core_range", "0:0", "--model_version", "2"]),
]
CASES = qa_cases() + GUIDE_CASES


def run_upstream(args: list[str], model_dir: Path, cwd: Path) -> subprocess.CompletedProcess:
    """Upstream's script as it ships (it imports only argparse and os unless it reads a SavedModel)."""
    return subprocess.run([sys.executable, str(SCRIPT), *args, "--triton_model_dir", str(model_dir)], cwd=cwd,
                          capture_output=True, text=True, timeout=300)


def run_workbench(args: list[str], model_dir: Path, capsys) -> tuple[int, str]:
    """``workbench generate`` in-process with upstream's command line verbatim. --for-other-machine: the
    workbench checks that the compiled model exists, upstream never opens it."""
    parser = argparse.ArgumentParser(prog="workbench", allow_abbrev=False)
    generate_cli.register(parser.add_subparsers(dest="command"))
    parsed = parser.parse_args(["generate", *args, "--for-other-machine", "--triton_model_dir", str(model_dir)])
    code = parsed.func(parsed)
    return code, capsys.readouterr().err


def upstream_flags(args: list[str]) -> dict:
    """What the flags say, for the read-back expectations."""
    def value(flag, default=None):
        return args[args.index(flag) + 1] if flag in args else default
    return dict(inf2="--inf2" in args, framework=value("--model_type"), compiled=value("--compiled_model"),
                per_request="--disable_batch_requests_to_neuron" in args, version=int(value("--model_version", 1)),
                core_range=value("--neuron_core_range"), instances=int(value("--triton_model_instance_count", 1)),
                threads=None if value("--threads_per_core", "1") == "1" else int(value("--threads_per_core")),
                mbs=int(value("--max_batch_size", 0)),
                dynamic="--enable_dynamic_batching" in args)


def without_intended_differences(cfg: ModelConfig) -> ModelConfig:
    copy = ModelConfig()
    copy.CopyFrom(cfg)
    for key in WORKBENCH_PARAMETERS:
        if key in copy.parameters:
            del copy.parameters[key]
    return copy


def upstream_config(up_dir: Path) -> ModelConfig:
    """Upstream's config without its always-written NUM_THREADS_PER_CORE "1" (INTENDED_DIFFERENCES)."""
    cfg = read_config(up_dir)
    if cfg.parameters["NUM_THREADS_PER_CORE"].string_value == "1":
        del cfg.parameters["NUM_THREADS_PER_CORE"]
    return cfg


def tensors(cfg: ModelConfig) -> dict[str, list]:
    return {kind: sorted((t.data_type, tuple(t.dims)) for t in getattr(cfg, kind)) for kind in ("input", "output")}


@pytest.mark.parametrize("name, model, args", CASES, ids=[c[0] for c in CASES])
def test_workbench_matches_upstream_and_reads_its_directory_back(tmp_path, capsys, name, model, args):
    flags = upstream_flags(args)
    up_dir, wb_dir = tmp_path / "upstream" / model, tmp_path / "workbench" / model
    done = run_upstream(args, up_dir, tmp_path)
    code, err = run_workbench(args, wb_dir, capsys)
    assert code == 0, err
    ours = read_config(wb_dir)
    # issue item 2: upstream's command line keeps upstream's meaning, with one note when it is inf1
    target = "inf2" if flags["inf2"] else "inf1"
    assert ours.parameters["WORKBENCH_TARGET"].string_value == target
    notes = [line for line in err.splitlines() if ": note: " in line]
    assert notes == ([] if flags["inf2"] else
                     ["workbench generate: note: no --target or --inf2: generating for inf1, as upstream "
                      "gen_triton_model.py did (--target cpu|inf2|trn1|trn2 for another)"])
    assert ours.parameters["BATCH_REQUESTS"].string_value == ("false" if flags["per_request"] else "true")
    assert (wb_dir / str(flags["version"]) / "model.py").is_file()

    if name == "model_version_2":  # INTENDED_DIFFERENCES["--model_version 2"]
        assert done.returncode == 1 and "FileNotFoundError" in done.stderr
        assert (up_dir / "config.pbtxt").is_file() and not (up_dir / "2" / "model.py").exists()
        assert without_intended_differences(ours) == upstream_config(up_dir)
        return
    assert done.returncode == 0, done.stderr
    if name == "lowercase_dtype":  # INTENDED_DIFFERENCES["lowercase dtype"]
        assert "TYPE_int64" in (up_dir / "config.pbtxt").read_text()
        with pytest.raises(ConfigError, match="TYPE_int64"):
            read_config(up_dir)
        assert ours.input[0].data_type == ours.output[0].data_type == 9  # TYPE_INT64
        with pytest.raises(ConfigError, match="TYPE_int64"):
            gen.load_settings(up_dir)
        return
    upstream = upstream_config(up_dir)
    assert without_intended_differences(ours) == upstream

    # upstream's model.py is the variant its flags select, and read-back says what upstream meant
    text = (up_dir / "1" / "model.py").read_text()
    assert recognise(text) == UpstreamModelPy(flags["framework"], target, not flags["per_request"])
    back = gen.read_back(up_dir)
    loaded = back.settings
    assert (loaded.framework, loaded.target) == (flags["framework"], target)
    assert loaded.disable_batch_requests_to_neuron == flags["per_request"]
    assert loaded.compiled_model == flags["compiled"]
    assert (str(loaded.neuron_core_range), loaded.triton_model_instance_count, loaded.threads_per_core) == (
        flags["core_range"], flags["instances"], flags["threads"])
    assert (loaded.max_batch_size, loaded.enable_dynamic_batching) == (flags["mbs"], flags["dynamic"])
    assert loaded.extra_files == {} and loaded.model_py is None and loaded.extra_config == ""
    assert any("upstream's" in note and "variant" in note for note in back.notes)
    relative_inf1 = target == "inf1" and not Path(flags["compiled"]).is_absolute()
    if relative_inf1:  # server-CWD relative: keep the meaning or refuse, never change it silently
        assert loaded.compiled_model_base == "server_cwd"
        with pytest.raises(gen.GenerateError, match="relative to tritonserver's working directory"):
            gen.render(loaded)
        fixed = gen.render(replace(loaded, compiled_model="/srv/cwd/" + flags["compiled"],
                                   compiled_model_base="model_dir"))
        assert fixed.config.parameters["COMPILED_MODEL"].string_value == "/srv/cwd/" + flags["compiled"]
        return
    assert loaded.compiled_model_base == "model_dir"
    regenerated = gen.render(loaded)
    assert regenerated.config == ours  # the same behaviour as the workbench given upstream's flags
    assert regenerated.model_py == (wb_dir / "1" / "model.py").read_text()


# The README's TensorFlow example (no IO flags: both tools read the SavedModel), the same with batching,
# and --inf2 with the SavedModel inside the model folder (upstream reads it from its CWD, then).
TF_AUTO_CASES = {
    "readme_tensorflow": ["--model_type", "tensorflow", "--neuron_core_range", "0:3"],
    "batched_two_instances": ["--model_type", "tensorflow", "--neuron_core_range", "0:1", "--max_batch_size", "8",
                              "--enable_dynamic_batching", "--preferred_batch_size", "4",
                              "--triton_model_instance_count", "2"],
    "inf2_relative_in_model_dir": ["--inf2", "--model_type", "tensorflow", "--neuron_core_range", "0:0"],
}


# Upstream's script run for several command lines in one interpreter, each as ``python SCRIPT ARGS``
# runs it (runpy as __main__, its own argv, working directory and stderr), so TensorFlow, which its
# SavedModel reading imports, is imported once. argv: the script, a JSON {case: [args, cwd]}, where
# to write the JSON {case: [exit status, stderr]}.
_RUN_UPSTREAM_EACH = r"""
import contextlib, io, json, os, runpy, sys, traceback
script, cases, report = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
sys.path[0] = os.path.dirname(script)  # where python SCRIPT looks first
outcome = {}
for name, (args, cwd) in cases.items():
    os.chdir(cwd)
    sys.argv = [script, *args]
    err, status = io.StringIO(), 0
    with contextlib.redirect_stderr(err):
        try:
            runpy.run_path(script, run_name="__main__")
        except SystemExit as stop:
            status = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
        except BaseException:
            traceback.print_exc()
            status = 1
    outcome[name] = [status, err.getvalue()]
with open(report, "w") as out:
    json.dump(outcome, out)
"""


@pytest.fixture(scope="module")
def tensorflow_upstream(tmp_path_factory):
    """A TF2 SavedModel, and upstream run over it for every TF_AUTO_CASES entry (in one interpreter:
    each run imports TensorFlow for seconds)."""
    tf = pytest.importorskip("tensorflow")

    class AddSub(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.int64, name="INPUT__0"),
                                      tf.TensorSpec([None, 4], tf.int64, name="INPUT__1")])
        def serve(self, INPUT__0, INPUT__1):  # noqa: N803 - the signature keys
            return {"OUTPUT__0": INPUT__0 + INPUT__1, "OUTPUT__1": INPUT__0 - INPUT__1}

    root = tmp_path_factory.mktemp("tf-upstream")
    saved = root / "add_sub_tf2"
    module = AddSub()
    tf.saved_model.save(module, str(saved), signatures={"serving_default": module.serve})
    cases, done = {}, {}
    for name, args in TF_AUTO_CASES.items():
        model_dir, cwd, compiled = root / "upstream" / name / "add-sub-tf", root, str(saved)
        if name == "inf2_relative_in_model_dir":
            shutil.copytree(saved, model_dir / "add_sub_tf2")
            cwd, compiled = model_dir, "add_sub_tf2"
        full = [*args, "--compiled_model", compiled]
        cases[name] = ([*full, "--triton_model_dir", str(model_dir)], str(cwd))
        done[name] = (full, model_dir)
    report = root / "upstream-runs.json"
    process = subprocess.run([sys.executable, "-c", _RUN_UPSTREAM_EACH, str(SCRIPT), json.dumps(cases), str(report)],
                             capture_output=True, text=True, timeout=600)
    assert process.returncode == 0 and report.is_file(), process.stderr[-2000:]
    outcome = json.loads(report.read_text())
    for name in TF_AUTO_CASES:
        status, err = outcome[name]
        assert status == 0, err[-2000:]
    return saved, done


@pytest.mark.parametrize("name", list(TF_AUTO_CASES))
def test_upstream_tensorflow_auto_detection_on_a_real_saved_model(tmp_path, capsys, tensorflow_upstream, name):
    saved, done = tensorflow_upstream
    args, up_dir = done[name]
    wb_dir = tmp_path / "wb" / "add-sub-tf"
    extra = []
    if name == "inf2_relative_in_model_dir":  # the SavedModel is already in the model folder: replace around it
        shutil.copytree(saved, wb_dir / "add_sub_tf2")
        extra = ["--force"]
    code, err = run_workbench(args + extra, wb_dir, capsys)
    assert code == 0, err
    upstream, ours = upstream_config(up_dir), without_intended_differences(read_config(wb_dir))
    # INTENDED_DIFFERENCES["tensorflow auto-detected names"] and ["... order"]: compare by name set and tensors
    assert sorted(t.name for t in upstream.input) == ["serving_default_INPUT__0:0", "serving_default_INPUT__1:0"]
    assert [t.name for t in ours.input] == ["INPUT__0", "INPUT__1"]
    assert [t.name for t in ours.output] == ["OUTPUT__0", "OUTPUT__1"]
    if upstream.max_batch_size:  # INTENDED_DIFFERENCES["tensorflow auto-detected dims with max_batch_size"]
        assert {tuple(t.dims) for t in upstream.input} == {(-1, 4)}
        for t in list(upstream.input) + list(upstream.output):
            assert t.dims[0] == -1
            del t.dims[0]
    assert tensors(upstream) == tensors(ours)
    for cfg in (upstream, ours):
        cfg.ClearField("input")
        cfg.ClearField("output")
    assert upstream == ours
    back = gen.read_back(up_dir)
    target = "inf2" if "--inf2" in args else "inf1"
    assert (back.settings.framework, back.settings.target) == ("tensorflow", target)
    assert back.settings.compiled_model == args[args.index("--compiled_model") + 1]
    assert back.settings.compiled_model_base == "model_dir"  # absolute, or inf2 (model-folder relative)
    assert any("graph tensor names" in note for note in back.notes)


def test_a_hand_edited_upstream_model_py_is_kept(tmp_path):
    """The README's transformers-neuronx recipe edits upstream's inf2 model.py (its loader and its
    forward call): it is no longer upstream's, so read-back keeps it and regenerating does not replace it."""
    model_dir = tmp_path / "opt"
    args = ["--inf2", "--model_type", "pytorch", "--triton_input", "INPUT__0,INT64,-1", "--triton_output",
            "OUTPUT__0,INT64,-1", "--compiled_model", "opt-125m-model", "--neuron_core_range", "0:11"]
    assert run_upstream(args, model_dir, tmp_path).returncode == 0
    model_py = model_dir / "1" / "model.py"
    text = model_py.read_text()
    assert "self.model_neuron = torch.jit.load(compiled_model)" in text
    edited = text.replace("self.model_neuron = torch.jit.load(compiled_model)",
                          "self.model_neuron = OPTForSampling.from_pretrained(compiled_model, batch_size=1)\n"
                          "        self.model_neuron.to_neuron()")
    edited = edited.replace("batched_results = self.model_neuron(*inputs)",
                            "batched_results = self.model_neuron.sample(batched_tensor, 2048)")
    model_py.write_text("from transformers_neuronx.opt.model import OPTForSampling\n" + edited)
    assert recognise(model_py.read_text()) is None
    back = gen.read_back(model_dir)
    assert back.settings.model_py == str(model_py.resolve()) and back.settings.target == "inf2"
    generated = gen.render(back.settings)
    assert generated.files["1/model.py"] == model_py.resolve()
    changes = generated.changes()
    assert "1/model.py" not in changes.modified and changes.modified == ("config.pbtxt",)
    assert any(c.startswith("adds parameters.WORKBENCH_TARGET") for c in changes.config_changes)


def test_the_upstream_config_test_generate_transcribes_is_what_the_script_writes(tmp_path):
    """test_generate.py reads back UPSTREAM_CONFIG where the script is absent; here the script
    writes it, so that stand-in stays upstream's own bytes."""
    from test_generate import UPSTREAM_CONFIG

    _, model, args = next(case for case in qa_cases() if case[0] == "qa_multiple_batched_pyt_default_batch")
    args = [("/home/ubuntu/add_sub.pt" if arg == PT_QA else arg) for arg in args]
    assert run_upstream(args, tmp_path / model, tmp_path).returncode == 0
    assert (tmp_path / model / "config.pbtxt").read_text() == UPSTREAM_CONFIG


def test_regenerating_an_upstream_directory_shows_the_changes_and_asks(tmp_path):
    """Read back + regenerate replaces upstream's model.py by the workbench's (same behaviour, other
    code) and adds the workbench parameters: write refuses until those changes are confirmed."""
    model_dir = tmp_path / QA_MODEL
    name, _, args = qa_cases()[2]  # qa_single_batched_pyt_default_batch
    assert run_upstream(args, model_dir, tmp_path).returncode == 0
    before = {p: p.read_bytes() for p in model_dir.rglob("*") if p.is_file()}
    generated = gen.render(gen.load_settings(model_dir))
    with pytest.raises(RepositoryError, match="already exists; nothing was written"):
        gen.write(generated)
    assert {p: p.read_bytes() for p in model_dir.rglob("*") if p.is_file()} == before
    changes = generated.changes()
    assert changes.modified == ("1/model.py", "config.pbtxt") and not changes.removed
    assert 'adds parameters.BATCH_REQUESTS.string_value = "true"' in changes.config_changes
    assert "-import torch.neuron" in changes.diff
    result = gen.write(generated, confirm=changes)
    assert result.backup is not None and (result.backup / "1" / "model.py").read_bytes() == before[
        model_dir / "1" / "model.py"]
    assert from_text((model_dir / "config.pbtxt").read_text()) == generated.config
