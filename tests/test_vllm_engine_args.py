"""vLLM settings parsed strictly (issue 47 item 3), driven by Hypothesis through `workbench generate
--backend vllm` in one worker under an address-space and a time limit (tests/bounded_worker.py):
any JSON value for any engine argument is accepted or refused in one line, never a traceback;
deep, repeated or mistyped values are refused naming the argument; numbers past what vLLM can use
are refused; --name follows the model-name rule and never replaces a repository; relative model
folders are written absolute. The kinds table is checked against the vLLM installed here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from bounded_worker import worker_fixture
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from vllm_model_dirs import hf_folder

from workbench.generate.vllm_backend.engine_args import MAX_MEMORY_BYTES, engine_arg_kinds
from workbench.limits import INT32_MAX, model_name_problem

QUICK = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
ROOT = Path(__file__).resolve().parents[1]
KINDS = engine_arg_kinds()
MODELLED = {"model", "tokenizer", "dtype", "max_model_len", "max_num_seqs", "max_num_batched_tokens",
            "tensor_parallel_size", "block_size", "kv_cache_memory_bytes", "gpu_memory_utilization"}
FREE = sorted(set(KINDS) - MODELLED)
INT_ARGS = sorted(name for name in FREE if KINDS[name] == ("int",) and not name.endswith("_bytes") and name != "seed")
_dirs = iter(range(10 ** 9))

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2 ** 70, 2 ** 70) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8)


worker = worker_fixture("engine_args")


@pytest.fixture(scope="module")
def hf(tmp_path_factory):
    return hf_folder(tmp_path_factory.mktemp("hf"))


def _generate(worker, hf, root, *flags, write=False):
    target = root / f"m{next(_dirs)}"
    rc, out, err = worker.cli("generate", "--backend", "vllm", "--target", "cpu", "--compiled_model", str(hf),
                              "--max-model-len", "256", "--kv-cache-memory-bytes", str(64 << 20),
                              "--triton_model_dir", str(target), *flags, *([] if write else ["--dry-run"]))
    return rc, err, target


def _one_line(rc, err, *words, code=2):
    lines = [line for line in err.strip().splitlines() if line.strip() and "warning" not in line]
    assert rc == code, err
    assert len(lines) == 1 and lines[0].startswith("workbench generate: error: "), err
    assert "Traceback" not in err and all(word in lines[0] for word in words), err


def _kind(value) -> str:
    return {bool: "bool", int: "int", float: "number", str: "str", list: "list", dict: "object",
            type(None): "null"}[type(value)]


@QUICK
@given(name=st.sampled_from(FREE), value=json_values)
def test_any_json_for_any_engine_argument_is_taken_or_refused_in_one_line(worker, hf, tmp_path, name, value):
    text = json.dumps(value)
    rc, err, _ = _generate(worker, hf, tmp_path, "--engine-arg", f"{name}={text}")
    allowed = KINDS[name]
    kind = _kind(value)
    if kind not in allowed and not (kind == "int" and "number" in allowed):
        _one_line(rc, err, f"--engine-arg {name}: must be")
    else:
        assert rc in (0, 2) and "Traceback" not in err, err


@QUICK
@given(depth=st.one_of(st.just(30000), st.integers(65, 5000)), bracket=st.sampled_from(["[]", '{"a":}']))
def test_deep_json_is_refused_in_one_line(worker, hf, tmp_path, depth, bracket):
    opening, closing = (bracket[0], bracket[1]) if bracket == "[]" else ('{"a":', "}")
    value = opening * depth + "1" + closing * depth
    rc, err, _ = _generate(worker, hf, tmp_path, "--engine-arg", f"hf_overrides={value}")
    _one_line(rc, err, "--engine-arg")
    assert "levels deep; at most 64" in err or f"{len(value)} characters; at most 65536" in err, err


@QUICK
@given(key=st.text(min_size=1, max_size=6), first=json_values, second=json_values)
def test_a_key_repeated_in_one_object_is_refused(worker, hf, tmp_path, key, first, second):
    value = "{" + f"{json.dumps(key)}: {json.dumps(first)}, {json.dumps(key)}: {json.dumps(second)}" + "}"
    _one_line(*_generate(worker, hf, tmp_path, "--engine-arg", f"hf_overrides={value}")[:2], "given twice")


@QUICK
@given(name=st.sampled_from(FREE), first=json_values, second=json_values)
def test_a_repeated_engine_arg_is_refused(worker, hf, tmp_path, name, first, second):
    rc, err, _ = _generate(worker, hf, tmp_path, "--engine-arg", f"{name}={json.dumps(first)}",
                           "--engine-arg", f"{name}={json.dumps(second)}")
    _one_line(rc, err, f"--engine-arg {name} is given twice")


@QUICK
@given(name=st.sampled_from(INT_ARGS),
       value=st.one_of(st.integers(INT32_MAX + 1, 2 ** 80), st.integers(-2 ** 80, -INT32_MAX - 2)))
def test_whole_numbers_past_32_bits_are_refused(worker, hf, tmp_path, name, value):
    _one_line(*_generate(worker, hf, tmp_path, "--engine-arg", f"{name}={value}")[:2], f"--engine-arg {name} {value}")


@QUICK
@given(value=st.one_of(st.just(2 ** 63 - 1), st.integers(MAX_MEMORY_BYTES + 1, 2 ** 80)))
def test_kv_cache_bytes_past_any_machine_are_refused(worker, hf, tmp_path, value):
    rc, _out, err = worker.cli("generate", "--backend", "vllm", "--target", "cpu", "--compiled_model", str(hf),
                               "--kv-cache-memory-bytes", str(value), "--triton_model_dir", str(tmp_path / "kv"),
                               "--dry-run")
    _one_line(rc, err, f"--kv-cache-memory-bytes {value}", str(MAX_MEMORY_BYTES))


@QUICK
@given(name=st.one_of(st.sampled_from([".", "..", "x/y", "a b", "$(touch PWNED)", "`id`", "a;b", ""]),
                      st.text(max_size=12)))
def test_the_name_follows_the_model_name_rule(worker, hf, tmp_path, name):
    repo = tmp_path / f"repo{next(_dirs)}"
    rc, _out, err = worker.cli("generate", "--backend", "vllm", "--target", "cpu", "--compiled_model", str(hf),
                               "--triton_model_dir", str(repo), "--name", name, "--force")
    if name and model_name_problem(name):
        _one_line(rc, err, "--name")
        assert not repo.exists() and not (tmp_path / "PWNED").exists()
    else:
        assert rc == 0, err


def test_a_repository_is_never_replaced_force_or_not(worker, hf, tmp_path):
    repo = tmp_path / "repo"
    assert _generate(worker, hf, repo, write=True)[0] == 0
    before = sorted(p.name for p in repo.iterdir())
    for flags in ([], ["--force"], ["--name", ".", "--force"], ["--name", repo.name, "--force"]):
        rc, _out, err = worker.cli("generate", "--backend", "vllm", "--target", "cpu", "--compiled_model", str(hf),
                                   "--triton_model_dir", str(repo), *flags)
        _one_line(rc, err, code=rc if rc in (1, 2) else 2)  # 1: refused by the write, as "already exists"
        assert sorted(p.name for p in repo.iterdir()) == before
        if flags == ["--force"]:
            assert "is a model repository (it holds m" in err and rc == 1, err


def test_a_relative_model_folder_is_written_absolute_and_works_from_anywhere(hf, tmp_path):
    from workbench.generate.backends import read_back

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    relative = os.path.relpath(hf, elsewhere)
    subprocess.run([sys.executable, "-m", "workbench", "generate", "--backend", "vllm", "--target", "cpu",
                    "--compiled_model", relative, "--tokenizer", relative, "--triton_model_dir", "repo/llm"],
                   cwd=elsewhere, env={**os.environ, "PYTHONPATH": str(ROOT)}, check=True, capture_output=True)
    args = json.loads((elsewhere / "repo/llm/1/model.json").read_text())
    assert args["model"] == str(hf) and args["tokenizer"] == str(hf)
    assert read_back(elsewhere / "repo/llm").settings.backend_settings.model == str(hf)  # read from here too


@pytest.mark.parametrize("text, words", [("[1, 2]", "must be a JSON object"), ("5", "must be a JSON object"),
                                         ("{\"a\": 1, \"a\": 2}", "given twice"), ("\xff", "not UTF-8")])
def test_a_config_json_that_is_not_an_object_is_one_line(worker, tmp_path, text, words):
    folder = tmp_path / "hf"
    folder.mkdir()
    (folder / "config.json").write_bytes(text.encode("latin-1"))
    (folder / "tokenizer.json").write_text("{}")
    rc, _out, err = worker.cli("generate", "--backend", "vllm", "--target", "cpu", "--compiled_model", str(folder),
                               "--triton_model_dir", str(tmp_path / "m"), "--dry-run")
    _one_line(rc, err, "config.json", words)


def test_the_kinds_table_is_the_installed_vllms(tmp_path):
    """engine_arg_kinds.json is what scripts/vllm_engine_arg_kinds.py writes from vLLM here."""
    python = os.environ.get("WORKBENCH_VLLM_PYTHON")
    if not python or not Path(python).exists():
        pytest.skip("no vLLM environment (WORKBENCH_VLLM_PYTHON) to read EngineArgs from")
    table = ROOT / "workbench/generate/vllm_backend/engine_arg_kinds.json"
    script = (ROOT / "scripts/vllm_engine_arg_kinds.py").read_text().replace(
        'OUT = Path(__file__).resolve().parents[1] / "workbench/generate/vllm_backend/engine_arg_kinds.json"',
        f'OUT = Path({str(tmp_path / "kinds.json")!r})')
    subprocess.run([python, "-c", script], check=True, capture_output=True, timeout=300)
    assert json.loads((tmp_path / "kinds.json").read_text()) == json.loads(table.read_text())
