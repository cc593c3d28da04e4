"""Package a causal LM for the sampling model.py (transformers-neuronx on Inf2/Trn1, HF on the CPU).

The served folder is a ``save_pretrained`` checkpoint (config.json + weights): model.py loads it
with ``<ModelClass>.from_pretrained(...).to_neuron()`` on a Neuron host and with
``AutoModelForCausalLM.from_pretrained`` on the CPU. Where the SDK is present the model is also
compiled here once (``to_neuron`` with a device, ``cpu_compile`` without) so a compiler failure
shows up now, not when Triton loads the model. GPT-J and GPT-NeoX have neither ``cpu_compile`` nor
``save`` (transformers-neuronx: they are plain ``PretrainedModel``s, not ``NeuronModelBase``; SDK
developer guide "CPU Compilation Support"), so they are packaged uncompiled and compiled by
model.py at load time. With nothing to download, the tiny models below are built from
``transformers`` config classes with seeded random weights.
"""

from __future__ import annotations

import importlib
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from workbench.compiler.artifact import Artifact, ArtifactError, sidecar_path
from workbench.spec import ModelSpec, TensorSpec
from workbench.system import (
    FRAMEWORK_TARGETS,
    OUT_OF_SUPPORT,
    TARGET_PACKAGES,
    MissingSDKError,
    has_neuron_device,
    installed_versions,
)
from workbench.tasks import check_cancel

__all__ = [
    "LM_SPEC",
    "TNX_TARGETS",
    "SAMPLING_CLASSES",
    "STOPS_AT_EOS",
    "NOT_SERIALIZABLE",
    "tiny_causal_lm",
    "sampling_options",
    "package_causal_lm",
]

TNX_TARGETS = FRAMEWORK_TARGETS["transformers_neuronx"]
# What the sampling model.py takes and gives: prompt ids in, prompt + generated ids out.
LM_SPEC = ModelSpec((TensorSpec("input_ids", "INT64", (-1,)),), (TensorSpec("output_ids", "INT64", (-1,)),))
# transformers-neuronx sampling classes by Hugging Face model_type: the SDK's own table
# (transformers-neuronx modeling_auto.NEURON_MODEL_FOR_CAUSAL_LM_MAPPING @ 1ade6d74). GPT-2 is
# GPT2ForSamplingWithContextBroadcasting: the package exports no GPT2ForSampling at top level.
SAMPLING_CLASSES = {
    "bloom": "BloomForSampling",
    "code_llama": "LlamaForSampling",
    "gpt2": "GPT2ForSamplingWithContextBroadcasting",
    "gpt_neox": "GPTNeoXForSampling",
    "gptj": "GPTJForSampling",
    "llama": "LlamaForSampling",
    "mistral": "MistralForSampling",
    "mixtral": "MixtralForSampling",
    "opt": "OPTForSampling",
}
# Classes whose sample() is sampling.sample_llama: stops once every row has produced EOS and fills
# rows after their EOS with it. The others (sample_loop) ban EOS and always return
# sequence_length columns (transformers-neuronx sampling.py). model.py keeps the same table.
STOPS_AT_EOS = ("LlamaForSampling", "MistralForSampling", "MixtralForSampling")
# No cpu_compile/save/load: plain PretrainedModels (transformers-neuronx gptj/gptneox model.py).
NOT_SERIALIZABLE = ("GPTJForSampling", "GPTNeoXForSampling")


def _require_transformers() -> Any:
    try:
        import transformers
    except ImportError:
        raise MissingSDKError("transformers", ["transformers"]) from None
    return transformers


def tiny_causal_lm(
    arch: str = "llama",
    *,
    seed: int = 0,
    vocab_size: int = 128,
    hidden_size: int = 32,
    layers: int = 2,
    heads: int = 2,
    max_positions: int = 64,
) -> Any:
    """A few-hundred-KB causal LM with seeded random weights (``llama`` or ``gpt2``), in eval mode."""
    import torch

    transformers = _require_transformers()
    special = {"bos_token_id": 0, "eos_token_id": 1, "pad_token_id": 1}
    if arch == "llama":
        config = transformers.LlamaConfig(
            vocab_size=vocab_size,
            hidden_size=hidden_size,
            intermediate_size=2 * hidden_size,
            num_hidden_layers=layers,
            num_attention_heads=heads,
            num_key_value_heads=heads,
            max_position_embeddings=max_positions,
            **special,
        )
        cls = transformers.LlamaForCausalLM
    elif arch == "gpt2":
        config = transformers.GPT2Config(
            vocab_size=vocab_size,
            n_embd=hidden_size,
            n_layer=layers,
            n_head=heads,
            n_positions=max_positions,
            **special,
        )
        cls = transformers.GPT2LMHeadModel
    else:
        raise ValueError(f"unknown tiny LM architecture {arch!r}; use llama or gpt2")
    torch.manual_seed(seed)
    return cls(config).eval()


def sampling_options(model_class: str, batch_size: int, tp_degree: int, n_positions: int, amp: str) -> dict[str, Any]:
    """``from_pretrained`` keywords for a sampling class. GPT-2's context-broadcasting class gets
    ``prompt_batch_size=batch_size``: its default of 1 encodes one prompt and broadcasts its cache to
    every row (``share_caches = prompt_batch_size == batch_size``, transformers-neuronx gpt2/model.py),
    while each row here is a prompt of its own."""
    options: dict[str, Any] = {"batch_size": batch_size, "tp_degree": tp_degree, "n_positions": n_positions, "amp": amp}
    if model_class == "GPT2ForSamplingWithContextBroadcasting":
        options["prompt_batch_size"] = batch_size  # model.py passes the same
    return options


def package_causal_lm(
    model: Any,
    target: str = "cpu",
    *,
    out_dir: str | os.PathLike,
    name: str = "causal_lm",
    model_class: str | None = None,
    batch_size: int = 1,
    n_positions: int | None = None,
    tp_degree: int = 2,
    amp: str = "f32",
    overwrite: bool = False,
    has_device: bool | None = None,
    progress: Callable[[int, int, str], None] | None = None,
    cancel: Any = None,
    log: Callable[[str], None] | None = None,
) -> Artifact:
    """Write ``out_dir/<name>/`` (a save_pretrained checkpoint) and, for inf2/trn1, compile it.

    ``model`` is a transformers model or the path of a save_pretrained folder. For Neuron targets
    the compiled graphs go to ``out_dir/<name>-neuron/`` (``.save``); the Artifact's ``extra`` holds
    the settings model.py's ``TNX_*`` parameters should repeat.
    """
    if target not in TNX_TARGETS:
        raise ValueError(f"transformers-neuronx target {target!r}: use one of {', '.join(TNX_TARGETS)}")
    if amp not in ("f32", "f16", "bf16"):
        raise ValueError(f"amp {amp!r}: use f32, f16 or bf16")
    for key, value in (("batch_size", batch_size), ("tp_degree", tp_degree)):
        if int(value) < 1:
            raise ValueError(f"{key} must be at least 1, got {value}")
    transformers = _require_transformers()
    if isinstance(model, (str, os.PathLike)):
        if not Path(model, "config.json").is_file():
            raise ArtifactError(f"{model}: not a save_pretrained folder (no config.json)")
        model = transformers.AutoModelForCausalLM.from_pretrained(model)
    model_type = getattr(model.config, "model_type", "")
    model_class = model_class or SAMPLING_CLASSES.get(model_type)
    if model_class is None:
        raise ValueError(
            f"no transformers-neuronx sampling class known for model_type {model_type!r}; "
            "pass model_class (e.g. LlamaForSampling)"
        )
    config_positions = getattr(model.config, "max_position_embeddings", 0) or getattr(model.config, "n_positions", 2048)
    n_positions = int(n_positions or config_positions)
    heads = getattr(model.config, "num_attention_heads", None)
    if target != "cpu" and heads and heads % tp_degree:
        raise ValueError(f"tp_degree {tp_degree} must divide the model's {heads} attention heads")
    neuronx: Any = None  # the transformers_neuronx module for a Neuron target
    if target != "cpu":
        has_device = has_neuron_device() if has_device is None else has_device
        if not has_device:  # read by the Neuron libraries when they are imported (optimum-neuron PR #961)
            os.environ["NEURON_PLATFORM_TARGET_OVERRIDE"] = target
        try:
            neuronx = importlib.import_module("transformers_neuronx")
        except (ImportError, OSError, RuntimeError) as err:
            raise MissingSDKError(
                "transformers_neuronx",
                list(TARGET_PACKAGES["transformers_neuronx"]),
                f"import transformers_neuronx failed: {err}",
            ) from None
        if getattr(neuronx, model_class, None) is None:
            raise ValueError(f"transformers_neuronx has no class {model_class!r}")
    out_dir = Path(out_dir)
    folder = out_dir / name
    compiled = out_dir / f"{name}-neuron"
    targets = [folder, sidecar_path(folder)] + ([compiled] if target != "cpu" else [])
    taken = [str(p) for p in targets if p.exists()]
    if taken and not overwrite:
        raise ArtifactError(f"{', '.join(taken)} already exist(s); pick another name or pass overwrite=True")

    lines: list[str] = []

    def step(k: int, total: int, message: str) -> None:
        check_cancel(cancel)
        lines.append(message)
        if log is not None:
            log(message)
        if progress is not None:
            progress(k, total, message)

    total = 2 if target == "cpu" else 3
    if target != "cpu":
        lines.append(f"{target}: NOTE {OUT_OF_SUPPORT['transformers_neuronx']}")
        if log is not None:
            log(lines[-1])
    start = time.perf_counter()
    staging = out_dir / f".{name}.staging"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        step(0, total, f"saving the checkpoint ({model_type}) to {folder}")
        model.save_pretrained(staging / "checkpoint")
        extra = {
            "model_class": model_class,
            "batch_size": int(batch_size),
            "n_positions": n_positions,
            "amp": amp,
            "model_type": model_type,
        }
        if neuronx is not None:
            extra["tp_degree"] = int(tp_degree)  # a Neuron setting: on the cpu target it would only cap the cores
            serializable = model_class not in NOT_SERIALIZABLE
            if not serializable and not has_device:
                step(
                    1,
                    total,
                    f"{target}: {model_class} has no cpu_compile or save in transformers-neuronx; "
                    "packaged uncompiled, model.py compiles it on the Neuron host at load time",
                )
            else:
                step(
                    1,
                    total,
                    f"{target}: {model_class}.from_pretrained + "
                    f"{'to_neuron' if has_device else 'cpu_compile (no device)'}",
                )
                neuron_model = getattr(neuronx, model_class).from_pretrained(
                    str(staging / "checkpoint"),
                    **sampling_options(model_class, int(batch_size), int(tp_degree), n_positions, amp),
                )
                if has_device:
                    neuron_model.to_neuron()
                elif hasattr(neuron_model, "cpu_compile"):
                    neuron_model.cpu_compile()
                else:
                    raise MissingSDKError(
                        target,
                        ["transformers-neuronx>=0.13 (Neuron 2.21+)"],
                        "this transformers-neuronx has no cpu_compile; compile on a Neuron host",
                    )
                if serializable:
                    neuron_model.save(str(staging / "neuron"))
                    extra["compiled_dir"] = str(compiled)
        step(total - 1, total, f"moving {folder} into place")
        for src, dst in ((staging / "checkpoint", folder), (staging / "neuron", compiled)):
            if src.exists():
                if dst.exists():
                    shutil.rmtree(dst)
                os.replace(src, dst)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    versions = {
        k: v
        for k, v in installed_versions(("torch", "transformers", "transformers-neuronx", "neuronx-cc")).items()
        if v
    }
    size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
    seconds = time.perf_counter() - start
    artifact = Artifact(
        path=str(folder),
        target=target,
        spec=LM_SPEC,
        batch_dim=True,
        framework="transformers_neuronx",
        name=name,
        sdk_versions=versions,
        compile_seconds=seconds,
        size_bytes=size,
        log="\n".join(lines),
        extra=extra,
    )
    if target != "cpu":  # the checkpoint itself is what the CPU model.py serves
        cpu_extra = {k: v for k, v in extra.items() if k not in ("compiled_dir", "tp_degree")}
        artifact.cpu_artifact = Artifact(
            path=str(folder),
            target="cpu",
            spec=LM_SPEC,
            batch_dim=True,
            framework="transformers_neuronx",
            name=name,
            sdk_versions=versions,
            size_bytes=size,
            extra=cpu_extra,
        )
    artifact.write_sidecar()
    return artifact
