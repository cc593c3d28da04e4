"""Prompts of an exact input length in the model's own tokens, and the output lengths asked for.

The count must be exact because TTFT grows with the prompt: a prompt "of 128 tokens" that the
model's tokenizer reads as 131 measures a different point. So prompts are built from token ids,
decoded, and re-encoded until the tokenizer reads back exactly the length asked for.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from workbench.measure.engine.measure_settings import MeasureError

__all__ = ["Tokenizer", "Lengths", "Prompt", "build_prompts", "WordTokenizer", "ModelTokenizer"]

_DISTRIBUTIONS = ("fixed", "uniform", "normal")


class Tokenizer(Protocol):
    """What the generator needs of a tokenizer (a Hugging Face tokenizer satisfies it)."""

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: list[int]) -> str: ...


@dataclass(frozen=True)
class Lengths:
    """Token lengths drawn per request: ``fixed`` at ``mean``, or ``uniform`` in mean +- spread,
    or ``normal`` with standard deviation ``spread`` (clipped to >= 1); seeded by the plan."""

    mean: int
    distribution: str = "fixed"
    spread: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.mean, bool) or not isinstance(self.mean, int) or self.mean < 1:
            raise MeasureError(f"token length must be an integer >= 1, got {self.mean!r}")
        if self.distribution not in _DISTRIBUTIONS:
            raise MeasureError(f"length distribution {self.distribution!r} is not one of {', '.join(_DISTRIBUTIONS)}")
        if isinstance(self.spread, bool) or not isinstance(self.spread, int) or self.spread < 0:
            raise MeasureError(f"length spread must be an integer >= 0, got {self.spread!r}")

    def draw(self, count: int, rng: np.random.Generator) -> list[int]:
        if self.distribution == "fixed" or self.spread == 0:
            return [self.mean] * count
        if self.distribution == "uniform":
            values = rng.integers(self.mean - self.spread, self.mean + self.spread + 1, size=count)
        else:
            values = np.rint(rng.normal(self.mean, self.spread, size=count))
        return [int(v) for v in np.maximum(values, 1)]

    def to_dict(self) -> dict:
        return {"mean": self.mean, "distribution": self.distribution, "spread": self.spread}


@dataclass(frozen=True)
class Prompt:
    """One request's prompt, its exact input token count, and the output tokens asked for."""

    text: str
    input_tokens: int
    max_tokens: int


def _exact(tokenizer: Tokenizer, length: int, rng: np.random.Generator, vocabulary: Sequence[int]) -> str:
    """Text the tokenizer reads as exactly ``length`` tokens: random ids from ``vocabulary``,
    decoded, re-encoded and trimmed or padded until the round trip holds."""
    ids = [int(i) for i in rng.choice(vocabulary, size=length)]
    for _ in range(8):
        text = tokenizer.decode(ids)
        again = tokenizer.encode(text)
        if len(again) == length:
            return text
        ids = list(again[:length]) + [int(i) for i in rng.choice(vocabulary, size=max(0, length - len(again)))]
    raise MeasureError(
        f"could not build a prompt the tokenizer reads as exactly {length} tokens "
        "(its decode/encode round trip keeps changing the count)"
    )


def build_prompts(
    tokenizer: Tokenizer,
    count: int,
    input_lengths: Lengths,
    output_lengths: Lengths,
    *,
    seed: int = 0,
    vocabulary: Sequence[int] | None = None,
) -> list[Prompt]:
    """``count`` prompts (seeded) of ``input_lengths`` tokens asking for ``output_lengths`` tokens.
    ``vocabulary``: the token ids to draw from (default: the ids of a plain English sentence, so the
    prompts are ordinary text and decode cleanly under any tokenizer)."""
    if count < 1:
        raise MeasureError(f"prompt count must be >= 1, got {count!r}")
    rng = np.random.default_rng(seed)
    if vocabulary is None:
        vocabulary = sorted(
            set(
                tokenizer.encode(
                    "the quick brown fox jumps over a lazy dog while seven old men watch from the river bank"
                )
            )
        )
    if not vocabulary:
        raise MeasureError("the tokenizer gave no token ids to build prompts from")
    inputs, outputs = input_lengths.draw(count, rng), output_lengths.draw(count, rng)
    return [Prompt(_exact(tokenizer, n, rng, vocabulary), n, m) for n, m in zip(inputs, outputs)]


class WordTokenizer:
    """A tokenizer of whitespace-separated words (one id per distinct word, learnt as met): for
    models whose tokens are words, like the paced test model."""

    def __init__(self) -> None:
        self._ids: dict[str, int] = {}
        self._words: list[str] = []

    def encode(self, text: str) -> list[int]:
        out = []
        for word in text.split():
            if word not in self._ids:
                self._ids[word] = len(self._words)
                self._words.append(word)
            out.append(self._ids[word])
        return out

    def decode(self, ids: list[int]) -> str:
        return " ".join(self._words[i] for i in ids)


class ModelTokenizer:
    """A model folder's own Hugging Face tokenizer, counting the prompt's tokens only: the special
    tokens the engine adds itself (a BOS) are left out, as the engine's prompt is built from the
    text."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        from transformers import AutoTokenizer

        self._tokenizer = AutoTokenizer.from_pretrained(str(path))

    def encode(self, text: str) -> list[int]:
        return list(self._tokenizer.encode(text, add_special_tokens=False))

    def decode(self, ids: list[int]) -> str:
        return str(self._tokenizer.decode(ids))
