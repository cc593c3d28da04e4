"""vLLM-backend model directories for the deploy tests, written by the real generator (the same
render + write as ``workbench generate --backend vllm``) from a Hugging Face folder's shape:
config.json with 8 attention heads, 4 KV heads, 512 positions, and a tokenizer file. No vLLM is
needed to write them (the generator checks the folder, it does not load it). Also the repository
the vLLM tests serve: the zoo's tiny LLM as a vLLM-backend model (`tiny_llm_repository`)."""

from __future__ import annotations

import json
from pathlib import Path

from workbench.generate import GenerateSettings, render, write
from workbench.generate.vllm_backend import VllmSettings


TINY_LLM = "tiny_llm"  # the zoo's tiny LLM's model name in a test repository


def hf_folder(root: Path) -> Path:
    folder = root / "llm-weights"
    if not folder.is_dir():
        folder.mkdir(parents=True)
        (folder / "config.json").write_text(json.dumps({
            "architectures": ["LlamaForCausalLM"], "num_attention_heads": 8, "num_key_value_heads": 4,
            "max_position_embeddings": 512}))
        (folder / "tokenizer.json").write_text("{}")
    return folder


def vllm_model_dir(root: Path, name: str, target: str, *, tp: int = 1, core_range: str | None = None,
                   lnc: int | None = None) -> Path:
    """``root/model_repository/<name>``, a vLLM-backend model directory for ``target``."""
    extra = {"kv_cache_memory_bytes": 64 << 20} if target == "cpu" else {}
    settings = GenerateSettings(
        triton_model_dir=str(root / "model_repository" / name), backend="vllm", target=target,
        backend_settings=VllmSettings(model=str(hf_folder(root)), dtype="bfloat16", max_model_len=256,
                                      max_num_seqs=4, tensor_parallel_size=tp, core_range=core_range, lnc=lnc,
                                      **extra))
    return write(render(settings)).path


def tiny_llm_repository(repo: Path) -> Path:
    """``repo`` holding the zoo's tiny LLM as a vLLM-backend model named TINY_LLM, its token counter
    on (REPORT_CUSTOM_METRICS, disable_log_stats false); returns ``repo``."""
    import json

    from workbench import zoo

    (repo / TINY_LLM / "1").mkdir(parents=True)
    (repo / TINY_LLM / "config.pbtxt").write_text(
        'backend: "vllm"\ninstance_group [ { count: 1, kind: KIND_MODEL } ]\n'
        'parameters { key: "REPORT_CUSTOM_METRICS" value: { string_value: "true" } }\n')
    args = {"model": str(zoo.tiny_llm().path), "dtype": "float32", "max_model_len": 256, "max_num_seqs": 4,
            "kv_cache_memory_bytes": 64 << 20, "enforce_eager": True, "disable_log_stats": False}
    (repo / TINY_LLM / "1" / "model.json").write_text(json.dumps(args, indent=2))
    return repo
