"""workbench.limits (issue 17, points 1 and 2): numbers against the real protobuf field types, the
version folders Triton's std::stoll cannot survive, one tensor-name rule, in the API as in the CLI
and before anything is written; and a real tritonserver kept from loading what would crash it."""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tritonclient.grpc import model_config_pb2

from workbench.cli import generate as generate_cli
from workbench.generate import GenerateError, GenerateSettings, load_settings, render, validate
from workbench.generate.config import from_text, validate_config
from workbench.limits import field_range, model_dir_problems, tensor_name_problem, triton_version
from workbench.server import ModelLoadError, ModelRefusedError
from workbench.spec import SpecError, TensorSpec

INT32, INT64, UINT64 = 2 ** 31 - 1, 2 ** 63 - 1, 2 ** 64 - 1
BASE = dict(compiled_model="/opt/models/add_sub.pt", for_other_machine=True, target="cpu",
            triton_input=["INPUT__0,INT64,4"], triton_output=["OUTPUT__0,INT64,4"])


def run_generate(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="workbench", allow_abbrev=False)
    generate_cli.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["generate", *argv])
    return args.func(args)


@pytest.mark.parametrize("message, field", [
    ("ModelConfig", "max_batch_size"), ("ModelInput", "dims"), ("ModelInstanceGroup", "count"),
    ("ModelDynamicBatching", "max_queue_delay_microseconds"), ("ModelDynamicBatching", "priority_levels"),
    ("ModelQueuePolicy", "default_timeout_microseconds"), ("ModelVersionPolicy.Specific", "versions"),
])
def test_field_ranges_are_what_the_protobuf_itself_enforces(message, field):
    """The range is read from the descriptor; protobuf accepts its ends and refuses one past them."""
    low, high, kind = field_range(message, field)
    cls = model_config_pb2
    for part in message.split("."):
        cls = getattr(cls, part)
    expected = {"max_batch_size": "int32", "dims": "int64", "count": "int32", "versions": "int64"}.get(field, "uint64")
    assert kind == expected
    for value, ok in ((high, True), (high + 1, False), (low, True), (low - 1, False)):
        msg = cls()
        target = getattr(msg, field)
        try:
            target.append(value) if hasattr(target, "append") else setattr(msg, field, value)
            accepted = True
        except ValueError:
            accepted = False
        assert accepted is ok, (field, value)


@pytest.mark.parametrize("overrides, message", [
    (dict(model_version=1.5), "--model_version must be a whole number (int), got 1.5 (float)"),
    (dict(model_version="2"), "--model_version must be a whole number (int), got '2' (str)"),
    (dict(model_version=True), "--model_version must be a whole number (int), got True (bool)"),
    (dict(model_version=10 ** 20), f"--model_version {10 ** 20} is too large: at most {INT64}"),
    (dict(max_batch_size=2.0), "--max_batch_size must be a whole number (int), got 2.0 (float)"),
    (dict(max_batch_size=INT32 + 1), f"--max_batch_size {INT32 + 1} is too large: at most {INT32} "
                                     "(the ModelConfig.max_batch_size int32"),
    (dict(triton_model_instance_count="2"), "--triton_model_instance_count must be a whole number"),
    (dict(triton_model_instance_count=INT32 + 1), "ModelInstanceGroup.count int32"),
    (dict(enable_dynamic_batching=True, max_batch_size=4, max_queue_delay_microseconds=UINT64 + 1),
     f"--max_queue_delay_microseconds {UINT64 + 1} is too large: at most {UINT64}"),
    (dict(enable_dynamic_batching=True, max_batch_size=4, preferred_batch_size=[2, 2.5]),
     "--preferred_batch_size must be a whole number (int), got 2.5"),
    (dict(preferred_batch_size="8"), "--preferred_batch_size must be a list of whole numbers"),
    (dict(threads_per_core=1.0), "--threads_per_core must be a whole number"),
    (dict(enable_dynamic_batching="no"), "--enable_dynamic_batching must be True or False, got 'no'"),
    (dict(name=5), "--name must be a string, got 5 (int)"),
    (dict(framework="transformers_neuronx", triton_input=[], triton_output=[], tnx_batch_size="2"),
     "--tnx-batch-size must be a whole number (int), got '2'"),
    (dict(triton_input=[("INPUT__0", "INT64", [4.5])]), "INPUT__0: dim must be a whole number (int), got 4.5"),
    (dict(triton_input=[("INPUT__0", "INT64", ["4"])]), "INPUT__0: dim must be a whole number (int), got '4'"),
    (dict(triton_input=[f"INPUT__0,INT64,{INT64 + 1}"]), f"INPUT__0: dim {INT64 + 1} is too large"),
    (dict(triton_input=["IN PUT__0,INT64,4"]), "bad tensor name 'IN PUT__0': use letters, digits, '_', '-', '.'"),
])
def test_wrong_types_and_out_of_range_numbers_name_the_field_and_write_nothing(tmp_path, overrides, message):
    settings = GenerateSettings(triton_model_dir=str(tmp_path / "m"), **{**BASE, **overrides})
    problems = validate(settings)
    assert any(message in p for p in problems), problems
    with pytest.raises(GenerateError):
        render(settings)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("target, largest", [("inf1", "0:63"), ("inf2", "0:23"), ("trn1", "0:31"), ("trn2", "0:127")])
def test_neuron_core_ranges_past_the_largest_instance_are_refused(tmp_path, target, largest):
    """inf1.24xlarge 16 x 4, inf2.48xlarge 12 x 2, trn1.32xlarge 16 x 2, trn2.48xlarge 16 x 8 physical."""
    ok = GenerateSettings(triton_model_dir=str(tmp_path / "m"), **{**BASE, "target": target, "neuron_core_range": largest})
    assert not any("--neuron_core_range" in p for p in validate(ok))
    end = int(largest.split(":")[1]) + 1
    past = replace_range(ok, f"0:{end}")
    assert any(f"core {end} exists on no {target} instance" in p for p in validate(past)), validate(past)
    huge = replace_range(ok, f"0:{2 ** 40}")
    assert any("exists on no" in p for p in validate(huge))


def test_a_cpu_core_range_past_this_machines_cpus_is_refused_unless_for_another_machine(tmp_path):
    """Issue 31 #7: on the cpu target 0:99 was a warning (and a 100-cell core map) where inf2 refused it."""
    from dataclasses import replace

    from workbench.system import cpu_cores

    cores = cpu_cores()
    here = GenerateSettings(triton_model_dir=str(tmp_path / "m"), **{**BASE, "for_other_machine": False,
                                                                      "neuron_core_range": f"0:{cores - 1}"})
    assert not any("--neuron_core_range" in p for p in validate(here))
    past = replace_range(here, f"0:{cores}")
    assert f"--neuron_core_range 0:{cores}: core {cores} exists on no CPU of this machine; it has {cores} CPU cores " \
        f"(0:{cores - 1})" in validate(past)
    with pytest.raises(GenerateError):
        render(past)
    assert not any("--neuron_core_range" in p for p in validate(replace(past, for_other_machine=True)))


def replace_range(settings: GenerateSettings, core_range: str) -> GenerateSettings:
    from dataclasses import replace

    return replace(settings, neuron_core_range=core_range)


@pytest.mark.parametrize("flags, message", [
    (["--model_version", "99999999999999999999"], "--model_version 99999999999999999999 is too large"),
    (["--max_batch_size", "3000000000"], "--max_batch_size 3000000000 is too large: at most 2147483647"),
    (["--triton_model_instance_count", "2147483648"], "--triton_model_instance_count 2147483648 is too large"),
    (["--enable_dynamic_batching", "--max_batch_size", "4", "--max_queue_delay_microseconds", str(UINT64 + 1)],
     "--max_queue_delay_microseconds 18446744073709551616 is too large"),
    (["--triton_input", f"INPUT__0,INT64,{INT64 + 1}"], "is too large: at most 9223372036854775807"),
])
def test_cli_refuses_numbers_past_the_limits_with_status_2(tmp_path, capsys, flags, message):
    argv = ["--target", "cpu", "--compiled_model", "/opt/m.pt", "--for-other-machine",
            "--triton_input", "INPUT__0,INT64,4", "--triton_output", "OUTPUT__0,INT64,4",
            "--triton_model_dir", str(tmp_path / "m"), *flags]
    assert run_generate(argv) == 2
    assert message in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_cli_non_integral_value_is_a_usage_error_naming_the_flag(tmp_path):
    done = subprocess.run([sys.executable, "-m", "workbench", "generate", "--target", "cpu", "--compiled_model",
                           "m.pt", "--triton_model_dir", "m", "--model_version", "1.5"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "--model_version: invalid int value: '1.5'" in done.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("folder, version", [
    ("1", 1), ("10", 10), ("0", 0), ("1.5", 1), ("+2", 2), ("3abc", 3), (" 7", 7), ("-3", -3),
    ("01", None), ("abc", None), ("configs", None), ("warmup", None), ("initial_state", None),
])
def test_triton_version_is_what_std_stoll_reads(folder, version):
    assert triton_version(folder) == version


def test_model_dir_problems_name_each_folder_that_would_break_the_server(tmp_path):
    for name in ("1", "1.5", "99999999999999999999", "-1", "01", "configs"):
        (tmp_path / "m" / name).mkdir(parents=True)
    problems = model_dir_problems(tmp_path / "m")
    assert len(problems) == 3, problems
    assert any("m/99999999999999999999/" in p and "tritonserver aborts" in p for p in problems)
    assert any("m/1.5/: Triton reads it as version 1 but looks for that version's files in 1/" in p for p in problems)
    assert any("m/-1/" in p and "versions are >= 0" in p for p in problems)


def test_one_tensor_name_rule_in_the_api_the_cli_items_and_read_back(tmp_path):
    for good in ("INPUT__0", "input_1:0", "model/dense.bias", "_x-1"):
        assert tensor_name_problem(good) is None and TensorSpec(good, "FP32", (1,)).name == good
    for bad in ("a b", "a,b", 'a"b', "", "-x", "é", "a\nb", None):
        message = tensor_name_problem(bad)
        assert message and "use letters, digits, '_', '-', '.', ':' or '/'" in message
        with pytest.raises(SpecError, match="use letters, digits"):
            TensorSpec(bad, "FP32", (1,))
    # read-back and config validation keep to the same rule
    text = ('name: "m" backend: "python" input { name: "in put" data_type: TYPE_FP32 dims: [4] } '
            'output { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [4] }')
    problems = validate_config(from_text(text))
    assert any("bad tensor name 'in put': use letters, digits" in p for p in problems), problems
    (tmp_path / "m" / "1").mkdir(parents=True)
    (tmp_path / "m" / "config.pbtxt").write_text(text)
    for name in ("in put", "a,b"):
        (tmp_path / "m" / "config.pbtxt").write_text(text.replace("in put", name))
        problems = validate(load_settings(tmp_path / "m"))
        assert any(f"bad tensor name {name!r}: use letters, digits" in p for p in problems), problems


# --- a real server: the load guard -----------------------------------------------------------------

IDENTITY_CONFIG = ('name: "{name}" backend: "python" max_batch_size: 0 '
                   'input {{ name: "INPUT0" data_type: TYPE_FP32 dims: [-1] }} '
                   'output {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [-1] }} '
                   'instance_group {{ kind: KIND_CPU count: 1 }}')
IDENTITY_MODEL = '''import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(
            r, "INPUT0").as_numpy())]) for r in requests]
'''


def identity_model(repo: Path, name: str, version_folder: str = "1") -> None:
    (repo / name / version_folder).mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(IDENTITY_CONFIG.format(name=name))
    (repo / name / version_folder / "model.py").write_text(IDENTITY_MODEL)


@pytest.mark.server
def test_the_load_guard_refuses_what_would_abort_or_hang_a_real_server(tmp_path, triton_server):
    """Ground truth first: the folder past int64 does abort Triton 2.51 when loaded behind the
    guard's back (raw tritonclient), taking the good model down; then, on a fresh server, the
    guarded load refuses it (and 1.5/) with a message while the good model keeps serving."""
    import tritonclient.http as httpclient

    repo = tmp_path / "repo"
    identity_model(repo, "good")
    identity_model(repo, "huge", "99999999999999999999")
    identity_model(repo, "fractional", "1.5")
    identity_model(repo, "fractional_files", "1")

    server = triton_server(repo)
    server.load("good")
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        with pytest.raises(Exception):
            client.load_model("huge")
    finally:
        client.close()
    deadline = time.monotonic() + 30
    while server.running and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not server.running, "Triton survived a version folder past int64: the guard's premise is wrong"
    server.stop(timeout=10)

    server = triton_server(repo)
    server.load("good")
    with pytest.raises(ModelRefusedError) as refused:
        server.load("huge")
    assert "huge/99999999999999999999/" in str(refused.value) and "tritonserver aborts" in str(refused.value)
    assert isinstance(refused.value, ModelLoadError)
    with pytest.raises(ModelRefusedError, match=r"fractional/1\.5/: Triton reads it as version 1"):
        server.load("fractional")
    config = IDENTITY_CONFIG.format(name="fractional_files")
    with pytest.raises(ModelRefusedError, match=r"fractional_files/2\.0/"):
        server.load("fractional_files", config=from_text(config), files={"2.0/model.py": IDENTITY_MODEL.encode()})
    assert server.running and server.is_model_ready("good")
    assert [m["name"] for m in server.index() if m["state"] == "READY"] == ["good"]
