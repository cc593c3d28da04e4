"""Example models built in code with seeded weights: no downloads, same numbers on every machine.

Each entry comes with its `ModelSpec` (per-request dims, the batch dim left out) and a way to make
valid example inputs at any batch size, so a notebook can go compile -> generate -> serve -> check
without bringing a model of its own. ``add_sub`` is upstream's Inferentia QA model; ``bert`` has
the three INT64 inputs of upstream's BERT example (sequence 384) but only a few thousand weights.
"""

from __future__ import annotations

import importlib.util
import inspect
import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch
from torch import nn

from workbench.system import MissingSDKError
from workbench.spec import ModelSpec

__all__ = ["ZooModel", "get", "names"]


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
            nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
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

    def __init__(self, vocab: int = 100, seq_len: int = 384, hidden: int = 32, layers: int = 2, heads: int = 2,
                 ffn: int = 64) -> None:
        super().__init__()
        self.words = nn.Embedding(vocab, hidden)
        self.positions = nn.Embedding(seq_len, hidden)
        self.types = nn.Embedding(2, hidden)
        self.norm = nn.LayerNorm(hidden)
        self.layers = nn.ModuleList(_EncoderLayer(hidden, heads, ffn) for _ in range(layers))
        self.qa = nn.Linear(hidden, 2)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                token_type_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
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
    return ZooModel("mlp", module, spec, f"two-layer perceptron {features}->{hidden}->{classes}",
                    lambda batch, s: (torch.randn(batch, features, generator=_generator(seed + s)),))


def _cnn(seed: int = 0, size: int = 32, classes: int = 10) -> ZooModel:
    module = _seeded(seed, lambda: SmallCNN(classes))
    spec = ModelSpec.parse([f"INPUT__0,FP32,3x{size}x{size}"], [f"OUTPUT__0,FP32,{classes}"])
    return ZooModel("cnn", module, spec, f"two-conv image classifier, 3x{size}x{size} -> {classes} logits",
                    lambda batch, s: (torch.randn(batch, 3, size, size, generator=_generator(seed + s)),))


def _bert(seed: int = 0, seq_len: int = 384, vocab: int = 100) -> ZooModel:
    module = _seeded(seed, lambda: TinyBert(vocab=vocab, seq_len=seq_len))
    spec = ModelSpec.parse([f"INPUT__{i},INT64,{seq_len}" for i in range(3)],
                           [f"OUTPUT__{i},FP32,{seq_len}" for i in range(2)])

    def inputs(batch: int, s: int) -> tuple:
        g = _generator(seed + s)
        ids = torch.randint(0, vocab, (batch, seq_len), generator=g)
        lengths = torch.randint(1, seq_len + 1, (batch, 1), generator=g)
        columns = torch.arange(seq_len)[None, :]
        mask = (columns < lengths).long()
        types = (columns >= lengths // 2).long() * mask
        return ids * mask, mask, types

    return ZooModel("bert", module, spec, f"tiny BERT-style QA encoder: 3 x INT64[{seq_len}] -> start/end logits",
                    inputs)


def _causal_lm(seed: int = 0, arch: str = "llama", seq_len: int = 8) -> ZooModel:
    from workbench.compiler.tnx import tiny_causal_lm

    model = tiny_causal_lm(arch, seed=seed)
    vocab = model.config.vocab_size
    spec = ModelSpec.parse([f"INPUT__0,INT64,{seq_len}"], [f"OUTPUT__0,FP32,{seq_len}x{vocab}"])
    return ZooModel("causal_lm", _LogitsOnly(model).eval(), spec,
                    f"tiny {arch} causal LM (random weights): ids[{seq_len}] -> logits",
                    lambda batch, s: (torch.randint(2, vocab, (batch, seq_len), generator=_generator(seed + s)),),
                    hf_model=model)


_BUILDERS: dict[str, Callable[..., ZooModel]] = {
    "add_sub": _add_sub, "mlp": _mlp, "cnn": _cnn, "bert": _bert, "causal_lm": _causal_lm,
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
        raise TypeError(f"zoo model {name!r} has no option {', '.join(unknown)}; it takes {', '.join(sorted(accepted))}")
    return _BUILDERS[name](**options)
