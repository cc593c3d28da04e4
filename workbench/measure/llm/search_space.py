"""An LLM sweep's points as a search walks them (`sweep/search/base.WalkedSpace`): each variant a
row of load levels (concurrency levels, or request rates, ascending), so the tensor sweep's
strategies (``adaptive``: sweep/search/adaptive.py; ``capacity``) walk it through the same code.

The likeliest answer is loaded first: the most sequences per engine step (``max_num_seqs``), then
the most cores; the rest fewest instances first (each load waits for the previous engines to exit).
A walk whose variants decide nothing for one another (capacity) starts instead with the variant the
server serves now: Triton answers a load of the config and files it serves at once, so it saves
an engine start (25 s or more here).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from workbench.measure.llm.answers import load_text
from workbench.measure.llm.plan import LlmPlan, LlmPoint, LlmVariant

__all__ = ["LlmSearchSpace"]


@dataclass(frozen=True)
class LlmSearchSpace:
    """The plan's variants that can run here, each at the plan's loads in ascending order."""

    plan: LlmPlan
    variants: tuple[LlmVariant, ...]
    loads: tuple[tuple[int | None, float | None], ...]
    serving: int | None = None  # the variant the server serves now, when it is one of these

    @classmethod
    def of(cls, plan: LlmPlan, variants: Sequence[LlmVariant], serving: LlmVariant | None = None) -> LlmSearchSpace:
        runnable = tuple(v for v in variants if not v.skipped)
        loads = tuple(sorted(plan.loads, key=lambda load: load[0] or load[1] or 0))
        return cls(plan, runnable, loads, runnable.index(serving) if serving in runnable else None)

    @property
    def size(self) -> int:
        return len(self.variants) * len(self.loads)

    def shape(self) -> tuple[int, int]:
        return 1, len(self.loads)

    def point(self, variant: int, size: int, level: int) -> LlmPoint:
        concurrency, rate = self.loads[level]
        plan = self.plan
        return LlmPoint(self.variants[variant], concurrency, rate, plan.input_tokens.mean, plan.output_tokens.mean)

    def label(self, variant: int, size: int, level: int | None = None) -> str:
        text = self.variants[variant].label
        return text if level is None else f"{text} at {self.level_text(level)}"

    def level_text(self, level: int) -> str:
        return load_text(*self.loads[level])

    def order(self) -> list[int]:
        def likely(v: int) -> tuple[int, int, int]:
            variant = self.variants[v]
            return (-variant.max_num_seqs, -variant.tensor_parallel * variant.instances, v)

        if not self.variants:
            return []
        first, *rest = sorted(range(len(self.variants)), key=likely)
        return [first, *sorted(rest, key=lambda v: (self.variants[v].instances, likely(v)))]

    def serving_first(self) -> list[int]:
        order = self.order()
        if self.serving is None:
            return order
        return [self.serving, *(v for v in order if v != self.serving)]
