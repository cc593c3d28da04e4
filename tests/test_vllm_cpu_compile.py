"""NEFFs for a vLLM Neuron model directory on a CPU host (vLLM Neuron's CPU compilation).

The directory is a real one ``generate --backend vllm`` writes for trn2; the plan is checked against
the FAKE vLLM Neuron engine start (tests/fake_neuron/fake_vllm_neuron.py, which follows the SDK's
cpu_compilation.md and compilation_cache.md), so the environment the workbench sets is the one the
plugin accepts and the NEFFs land where the plan says. The command's flags are parsed by the
installed vLLM's own CLI parser back into the directory's engine arguments (conftest ``vllm_python``).
Nothing here says anything about Neuron performance.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from workbench import generate as gen
from workbench.generate import GenerateSettings, render
from workbench.generate.vllm_backend import VllmSettings
from workbench.generate.vllm_backend.cpu_compile import (
    CPU_COMPILE_DOC,
    CpuCompileError,
    cpu_compile_plan,
    engine_cli_args,
)
from workbench.generate.vllm_backend.engine_settings import VllmNeuronBuckets


@pytest.fixture
def fake_vllm_neuron(neuron_fakes):
    import fake_vllm_neuron

    return fake_vllm_neuron


def model_dir(tmp_path: Path, target: str = "trn2", **vllm) -> Path:
    folder = tmp_path / "llm"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "num_attention_heads": 8,
                                                    "num_key_value_heads": 4, "max_position_embeddings": 512}))
    (folder / "tokenizer.json").write_text("{}")
    base = {"model": str(folder), "dtype": "bfloat16", "max_model_len": 256, "max_num_seqs": 4,
            "tensor_parallel_size": 2, "max_num_batched_tokens": 256,
            "vllm_neuron": VllmNeuronBuckets((128, 256), (1, 2, 4))}
    chosen = GenerateSettings(triton_model_dir=str(tmp_path / "repo" / "llm"), backend="vllm", target=target,
                              backend_settings=VllmSettings(**{**base, **vllm}))
    gen.write(render(chosen))
    return chosen.model_dir


def engine_args(directory: Path) -> dict:
    return json.loads((directory / "1" / "model.json").read_text())


def test_the_plan_compiles_every_bucket_into_the_cache_it_names(tmp_path, fake_vllm_neuron):
    directory = model_dir(tmp_path)
    plan = cpu_compile_plan(directory, cache_root=str(tmp_path / "cache"), remote_cache=str(tmp_path / "fsx"),
                            environ={})
    assert plan.environment["VLLM_NEURON_CPU_COMPILE"] == "1"
    assert plan.environment["NEURON_PLATFORM_TARGET_OVERRIDE"] == "trn2"
    engine = fake_vllm_neuron.start_engine(plan.environ({"VLLM_NEURON_CPU_MODE": "1"}), engine_args(directory))
    local = sorted(p.name for p in Path(plan.cache_dir).glob("*/*.neff"))
    remote = sorted(p.name for p in Path(plan.remote_cache).glob("*/*.neff"))
    assert local == remote == ["decode_seqs1.neff", "decode_seqs2.neff", "decode_seqs4.neff"]
    assert all(json.loads(p.read_text())["target"] == "trn2" for p in engine.neffs)
    with pytest.raises(RuntimeError, match="inference cannot run"):
        engine.generate("hello")


def test_trn3_directories_compile_for_trn3(tmp_path, fake_vllm_neuron):
    directory = model_dir(tmp_path, "trn3")
    plan = cpu_compile_plan(directory, cache_root=str(tmp_path / "cache"), environ={})
    assert fake_vllm_neuron.start_engine(plan.environ({}), engine_args(directory)).target == "trn3"


def test_the_generate_preview_names_the_cpu_compile(tmp_path):
    directory = model_dir(tmp_path)
    chosen = GenerateSettings(triton_model_dir=str(directory), backend="vllm", target="trn2",
                              backend_settings=VllmSettings(model=str(tmp_path / "llm"), max_model_len=256,
                                                            max_num_seqs=4, tensor_parallel_size=2))
    line = f"NEFFs without a device: workbench cpu-compile {directory} prints"
    assert line in render(chosen).dry_run()
    cpu = GenerateSettings(triton_model_dir=str(tmp_path / "cpu"), backend="vllm", target="cpu",
                           backend_settings=VllmSettings(model=str(tmp_path / "llm"), max_model_len=256,
                                                         kv_cache_memory_bytes=64 << 20))
    assert "NEFFs without a device" not in render(cpu).dry_run()


def test_the_shell_lines_and_the_command_line(tmp_path):
    directory = model_dir(tmp_path)
    plan = cpu_compile_plan(directory, cache_root=str(tmp_path / "cache"), environ={})
    text = plan.shell()
    assert "unset VLLM_NEURON_CPU_MODE\n" in text and "export VLLM_NEURON_CPU_COMPILE=1\n" in text
    assert "export NEURON_PLATFORM_TARGET_OVERRIDE=trn2\n" in text and CPU_COMPILE_DOC in text
    assert f"{tmp_path / 'cache'}/neuron/compile_cache/<hash>/" in text
    assert "python3 -m vllm.entrypoints.openai.api_server --model " in text and "--tensor-parallel-size 2" in text
    done = subprocess.run([sys.executable, "-m", "workbench", "cpu-compile", str(directory),
                           "--cache-root", str(tmp_path / "cache")], check=False, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout == text
    cpu = model_dir(tmp_path / "cpu", "cpu", tensor_parallel_size=1, vllm_neuron=VllmNeuronBuckets())
    done = subprocess.run([sys.executable, "-m", "workbench", "cpu-compile", str(cpu)],
                          check=False, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("workbench cpu-compile: error: ") and "is generated for cpu" in done.stderr


@pytest.mark.parametrize("target, environ, extra, message", [
    ("inf2", {}, {}, "is generated for inf2; vLLM Neuron's CPU compilation makes NEFFs for trn2/trn3 only"),
    ("trn2", {"VLLM_NEURON_CPU_MODE": "1"}, {}, "cannot be enabled together"),
    ("trn2", {"NEURON_PLATFORM_TARGET_OVERRIDE": "trn1"}, {}, "NEURON_PLATFORM_TARGET_OVERRIDE=trn1 is set but"),
    ("trn2", {}, {"speculative_config": {"method": "eagle3", "num_speculative_tokens": 2}},
     "speculative decoding is not supported"),
])
def test_what_the_plan_refuses_before_anything_runs(tmp_path, target, environ, extra, message):
    vllm = {} if target == "trn2" else {"vllm_neuron": VllmNeuronBuckets()}
    directory = model_dir(tmp_path, target, extra_engine_args=extra, **vllm)
    with pytest.raises(CpuCompileError, match=message):
        cpu_compile_plan(directory, environ=environ)


def test_a_folder_that_is_not_a_model_directory_is_refused(tmp_path):
    with pytest.raises(CpuCompileError, match="no such model directory"):
        cpu_compile_plan(tmp_path / "absent", environ={})
    (tmp_path / "empty").mkdir()
    with pytest.raises(CpuCompileError, match="config.pbtxt cannot be read"):
        cpu_compile_plan(tmp_path / "empty", environ={})


_PARSE = """
import json, sys
from vllm.engine.arg_utils import AsyncEngineArgs
from vllm.utils.argparse_utils import FlexibleArgumentParser
parser = AsyncEngineArgs.add_cli_args(FlexibleArgumentParser())
ns = parser.parse_args(sys.argv[1:])
args = AsyncEngineArgs.from_cli_args(ns)
print(json.dumps({k: getattr(args, k) for k in ("model", "dtype", "max_model_len", "max_num_seqs",
      "tensor_parallel_size", "max_num_batched_tokens", "additional_config")}, default=str))
"""


def test_vllms_own_parser_reads_the_command_back_into_the_directorys_engine_arguments(vllm_python, tmp_path):
    """The CPU compile must start the engine the Trn host starts, or its NEFFs are cache misses there."""
    directory = model_dir(tmp_path)
    args = engine_args(directory)
    done = subprocess.run([str(vllm_python), "-c", _PARSE, *engine_cli_args(args)], check=False, capture_output=True,
                          text=True, timeout=600)
    if done.returncode != 0 and "argparse_utils" in done.stderr:
        done = subprocess.run([str(vllm_python), "-c", _PARSE.replace("vllm.utils.argparse_utils", "vllm.utils"),
                               *engine_cli_args(args)], check=False, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    parsed = json.loads(done.stdout.strip().splitlines()[-1])
    assert parsed == {k: args[k] for k in parsed}
