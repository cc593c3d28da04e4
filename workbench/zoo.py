"""Example models built in code with seeded weights: no downloads, same numbers on every machine.

Each entry comes with its `ModelSpec` (per-request dims, the batch dim left out) and a way to make
valid example inputs at any batch size, so a notebook can go compile -> generate -> serve -> check
without bringing a model of its own. ``add_sub`` is upstream's Inferentia QA model; ``bert`` has
the three INT64 inputs of upstream's BERT example (sequence 384) but only a few thousand weights.
``tiny_llm`` is of another kind: a Hugging Face folder (config, safetensors, tokenizer) that vLLM
loads, for the generative paths (Triton's vLLM backend).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import inspect
import math
import os
import random
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from workbench.spec import ModelSpec
from workbench.system import MissingSDKError

__all__ = ["ZooModel", "get", "names", "TinyLLM", "tiny_llm"]


@dataclass
class ZooModel:
    """A model ready to trace: the module (eval mode), its spec, and an example-input maker."""

    name: str
    module: nn.Module
    spec: ModelSpec
    description: str
    make_inputs: Callable[[int, int], tuple]
    hf_model: Any = None  # the transformers model behind a causal LM entry (for tnx packaging)

    def example_inputs(self, batch: int = 1, *, seed: int = 0) -> tuple:
        """Valid inputs (token ids within the vocabulary, masks of 0/1) with ``batch`` rows."""
        if batch < 1:
            raise ValueError(f"batch must be at least 1, got {batch}")
        return self.make_inputs(batch, seed)

    def eager(self, arrays: list[np.ndarray]) -> list[np.ndarray]:
        """The module run in-process on numpy inputs, outputs as numpy: what a served model must match."""
        with torch.no_grad():
            out = self.module(*(torch.from_numpy(np.asarray(a)) for a in arrays))
        out = out if isinstance(out, (tuple, list)) else (out,)
        return [t.numpy() for t in out]


def _seeded(seed: int, build: Callable[[], nn.Module]) -> nn.Module:
    """Build with a fixed seed without disturbing the caller's random state."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return build().eval()


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


class AddSub(nn.Module):
    """Upstream QA model: OUTPUT__0 = a + b, OUTPUT__1 = a - b."""

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return a + b, a - b


class SmallCNN(nn.Module):
    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
        )
        self.head = nn.Linear(16, classes)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(image).flatten(1))


class _EncoderLayer(nn.Module):
    """Post-norm self-attention + feed-forward, written out so it traces to plain aten ops."""

    def __init__(self, hidden: int, heads: int, ffn: int) -> None:
        super().__init__()
        self.heads, self.scale = heads, 1.0 / math.sqrt(hidden // heads)
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.out = nn.Linear(hidden, hidden)
        self.norm1 = nn.LayerNorm(hidden)
        self.ffn = nn.Sequential(nn.Linear(hidden, ffn), nn.GELU(), nn.Linear(ffn, hidden))
        self.norm2 = nn.LayerNorm(hidden)

    def forward(self, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        batch, seq, hidden = x.shape
        q, k, v = self.qkv(x).reshape(batch, seq, 3, self.heads, hidden // self.heads).permute(2, 0, 3, 1, 4).unbind(0)
        scores = q @ k.transpose(-1, -2) * self.scale + bias
        context = (scores.softmax(-1) @ v).transpose(1, 2).reshape(batch, seq, hidden)
        x = self.norm1(x + self.out(context))
        return self.norm2(x + self.ffn(x))


class TinyBert(nn.Module):
    """BERT-style encoder with a SQuAD head: (input_ids, attention_mask, token_type_ids) ->
    (start_logits, end_logits), like upstream's BERT example but tiny."""

    def __init__(
        self, vocab: int = 100, seq_len: int = 384, hidden: int = 32, layers: int = 2, heads: int = 2, ffn: int = 64
    ) -> None:
        super().__init__()
        self.words = nn.Embedding(vocab, hidden)
        self.positions = nn.Embedding(seq_len, hidden)
        self.types = nn.Embedding(2, hidden)
        self.norm = nn.LayerNorm(hidden)
        self.layers = nn.ModuleList(_EncoderLayer(hidden, heads, ffn) for _ in range(layers))
        self.qa = nn.Linear(hidden, 2)

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        x = self.norm(self.words(input_ids) + self.positions(positions) + self.types(token_type_ids))
        bias = (1.0 - attention_mask.to(x.dtype))[:, None, None, :] * -1e4
        for layer in self.layers:
            x = layer(x, bias)
        start, end = self.qa(x).unbind(-1)
        return start, end


class _LogitsOnly(nn.Module):
    """A transformers causal LM as a plain tensor function (ids -> logits) that torch.jit.trace accepts."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=input_ids, use_cache=False, return_dict=False)[0]


def _add_sub(seed: int = 0) -> ZooModel:
    spec = ModelSpec.parse(["INPUT__0,FP32,4", "INPUT__1,FP32,4"], ["OUTPUT__0,FP32,4", "OUTPUT__1,FP32,4"])

    def inputs(batch: int, s: int) -> tuple:
        g = _generator(seed + s)
        return torch.randn(batch, 4, generator=g), torch.randn(batch, 4, generator=g)

    return ZooModel("add_sub", AddSub().eval(), spec, "upstream QA model: a+b and a-b on [N,4] FP32", inputs)


def _mlp(seed: int = 0, features: int = 16, hidden: int = 32, classes: int = 4) -> ZooModel:
    module = _seeded(seed, lambda: nn.Sequential(nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, classes)))
    spec = ModelSpec.parse([f"INPUT__0,FP32,{features}"], [f"OUTPUT__0,FP32,{classes}"])
    return ZooModel(
        "mlp",
        module,
        spec,
        f"two-layer perceptron {features}->{hidden}->{classes}",
        lambda batch, s: (torch.randn(batch, features, generator=_generator(seed + s)),),
    )


def _cnn(seed: int = 0, size: int = 32, classes: int = 10) -> ZooModel:
    module = _seeded(seed, lambda: SmallCNN(classes))
    spec = ModelSpec.parse([f"INPUT__0,FP32,3x{size}x{size}"], [f"OUTPUT__0,FP32,{classes}"])
    return ZooModel(
        "cnn",
        module,
        spec,
        f"two-conv image classifier, 3x{size}x{size} -> {classes} logits",
        lambda batch, s: (torch.randn(batch, 3, size, size, generator=_generator(seed + s)),),
    )


def _bert(seed: int = 0, seq_len: int = 384, vocab: int = 100) -> ZooModel:
    module = _seeded(seed, lambda: TinyBert(vocab=vocab, seq_len=seq_len))
    spec = ModelSpec.parse(
        [f"INPUT__{i},INT64,{seq_len}" for i in range(3)], [f"OUTPUT__{i},FP32,{seq_len}" for i in range(2)]
    )

    def inputs(batch: int, s: int) -> tuple:
        g = _generator(seed + s)
        ids = torch.randint(0, vocab, (batch, seq_len), generator=g)
        lengths = torch.randint(1, seq_len + 1, (batch, 1), generator=g)
        columns = torch.arange(seq_len)[None, :]
        mask = (columns < lengths).long()
        types = (columns >= lengths // 2).long() * mask
        return ids * mask, mask, types

    return ZooModel(
        "bert", module, spec, f"tiny BERT-style QA encoder: 3 x INT64[{seq_len}] -> start/end logits", inputs
    )


def _causal_lm(seed: int = 0, arch: str = "llama", seq_len: int = 8) -> ZooModel:
    # start-up: transformers loads only for the causal-LM example
    from workbench.compiler.tnx import tiny_causal_lm

    model = tiny_causal_lm(arch, seed=seed)
    vocab = model.config.vocab_size
    spec = ModelSpec.parse([f"INPUT__0,INT64,{seq_len}"], [f"OUTPUT__0,FP32,{seq_len}x{vocab}"])
    return ZooModel(
        "causal_lm",
        _LogitsOnly(model).eval(),
        spec,
        f"tiny {arch} causal LM (random weights): ids[{seq_len}] -> logits",
        lambda batch, s: (torch.randint(2, vocab, (batch, seq_len), generator=_generator(seed + s)),),
        hf_model=model,
    )


_BUILDERS: dict[str, Callable[..., ZooModel]] = {
    "add_sub": _add_sub,
    "mlp": _mlp,
    "cnn": _cnn,
    "bert": _bert,
    "causal_lm": _causal_lm,
}


def names() -> list[str]:
    """Zoo entries available here (``causal_lm`` only when transformers is installed)."""
    have_transformers = importlib.util.find_spec("transformers") is not None
    return [n for n in _BUILDERS if n != "causal_lm" or have_transformers]


def get(name: str, **options: Any) -> ZooModel:
    """Build a zoo model; ``options`` are its size knobs (e.g. ``get("bert", seq_len=128)``) and ``seed``."""
    if name not in _BUILDERS:
        raise KeyError(f"no zoo model {name!r}; choose one of {', '.join(names())}")
    if name not in names():
        raise MissingSDKError("transformers", ["transformers"])
    accepted = set(inspect.signature(_BUILDERS[name]).parameters)
    unknown = sorted(set(options) - accepted)
    if unknown:
        raise TypeError(
            f"zoo model {name!r} has no option {', '.join(unknown)}; it takes {', '.join(sorted(accepted))}"
        )
    return _BUILDERS[name](**options)


# ---- a tiny LLM as a Hugging Face folder -------------------------------------------------------

_LLM_RECIPE = "tiny-llama-1"  # bump when anything below changes what is written
_WORDS = (
    "the a one every some cat dog bird fish model server core chip token batch request answer "
    "runs sleeps sings reads sends waits starts stops loads serves checks counts small large fast "
    "slow red green blue quiet busy and but then so because while on in under over near with"
).split()


@dataclass(frozen=True)
class TinyLLM:
    """A seeded Llama-shaped causal LM saved as a Hugging Face folder vLLM loads: ``config.json``,
    ``model.safetensors`` and a fast tokenizer (``tokenizer.json`` + ``tokenizer_config.json``).
    ``prompts`` are sentences of the text its tokenizer was trained on."""

    path: Path
    seed: int
    vocab_size: int
    max_positions: int
    prompts: tuple[str, ...]


def _llm_corpus(seed: int, sentences: int = 3000) -> list[str]:
    """Generated sentences (seeded): the text the BPE tokenizer is trained on."""
    rng = random.Random(seed)
    # made-up words beside the real ones: enough distinct pairs for 512 tokens' worth of merges
    syllables = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]
    vocabulary = list(_WORDS) + ["".join(rng.choices(syllables, k=rng.randint(2, 4))) for _ in range(400)]
    lines = []
    for _ in range(sentences):
        words = [rng.choice(_WORDS if rng.random() < 0.6 else vocabulary) for _ in range(rng.randint(4, 12))]
        lines.append(" ".join(words).capitalize() + rng.choice(".!?"))
    return lines


def _llm_tokenizer(seed: int, vocab_size: int):
    """A byte-level BPE tokenizer trained in code on `_llm_corpus` (``<s>`` 0, ``</s>`` 1), wrapped
    as transformers' fast tokenizer: BOS is prepended, as Llama's tokenizer does."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<s>", "</s>"],
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(_llm_corpus(seed), trainer=trainer)
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", 0)]
    )
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>", pad_token="</s>")


def _write_tiny_llm(out: Path, seed: int, vocab_size: int, max_positions: int) -> None:
    import transformers

    tokenizer = _llm_tokenizer(seed, vocab_size)
    # hidden 256 / 4 heads / 2 KV heads: head_dim 64, which vLLM's CPU attention takes (16 it refuses)
    config = transformers.LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        max_position_embeddings=max_positions,
        bos_token_id=0,
        eos_token_id=1,
        pad_token_id=1,
        tie_word_embeddings=False,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = transformers.LlamaForCausalLM(config).eval()
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)


def tiny_llm(
    seed: int = 0, *, vocab_size: int = 512, max_positions: int = 512, cache_dir: str | os.PathLike[str] | None = None
) -> TinyLLM:
    """The seeded tiny LLM's folder, built once (atomically) and reused: the same seed and library
    versions give the same files. Cached under ``cache_dir``, else ``$WORKBENCH_ZOO_CACHE``, else
    ``${XDG_CACHE_HOME:-~/.cache}/workbench/zoo``, so tests and notebooks share one copy."""
    if importlib.util.find_spec("transformers") is None or importlib.util.find_spec("tokenizers") is None:
        raise MissingSDKError("transformers", ["transformers", "tokenizers"])
    versions = "-".join(importlib.metadata.version(p) for p in ("transformers", "tokenizers", "torch"))
    key = hashlib.sha1(f"{_LLM_RECIPE}/{seed}/{vocab_size}/{max_positions}/{versions}".encode()).hexdigest()[:12]
    root = Path(
        cache_dir
        or os.environ.get("WORKBENCH_ZOO_CACHE")
        or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "workbench" / "zoo"
    )
    path = root / f"tiny-llm-s{seed}-{key}"
    if not (path / ".complete").is_file():
        root.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{path.name}-", dir=root))
        try:
            _write_tiny_llm(staging, seed, vocab_size, max_positions)
            (staging / ".complete").touch()
            try:
                os.rename(staging, path)
            except OSError:  # another process finished first: its copy is the same
                if not (path / ".complete").is_file():
                    raise
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    corpus = _llm_corpus(seed)
    return TinyLLM(path, seed, vocab_size, max_positions, tuple(line.rsplit(" ", 1)[0] for line in corpus[:4]))
