"""The answer a search (or the grid) gives: the best point under the p99 budget, how much of the
budget it leaves, the runner-up, the best point of any other configuration (another variant
or batch size: another concurrency of the same configuration is only a load level), and how sure
the order of the two is (`Confidence`, store/confidence.py)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from workbench.measure.store.confidence import Confidence, confidence, number
from workbench.measure.store.results import best_point, runner_up_of

__all__ = ["Answer", "Confidence", "answer", "confidence"]


@dataclass(frozen=True)
class Answer:
    best: pd.Series | None
    runner_up: pd.Series | None
    latency_budget_ms: float | None

    @property
    def confidence(self) -> Confidence:
        return confidence(self.best, self.runner_up)

    @property
    def margin_ms(self) -> float | None:
        """Budget minus the best point's p99 (None without a budget or a best point)."""
        if self.best is None or self.latency_budget_ms is None:
            return None
        return self.latency_budget_ms - float(self.best["p99_ms"])

    def to_dict(self) -> dict:
        def brief(row: pd.Series | None) -> dict | None:
            if row is None:
                return None
            low, high = number(row, "throughput_low"), number(row, "throughput_high")
            return {
                "variant": row["variant"],
                "batch_size": int(row["batch_size"]),
                "concurrency": int(row["concurrency"]),
                "throughput": float(row["throughput"]),
                "p99_ms": float(row["p99_ms"]),
                "throughput_interval": None if math.isnan(low) or math.isnan(high) else [low, high],
            }

        return {
            "latency_budget_ms": self.latency_budget_ms,
            "best": brief(self.best),
            "margin_ms": self.margin_ms,
            "runner_up": brief(self.runner_up),
            "confidence": self.confidence.to_dict(),
        }

    def describe(self) -> str:
        if self.best is None:
            within = f" within p99 <= {self.latency_budget_ms:g} ms" if self.latency_budget_ms is not None else ""
            return f"No measured point qualifies{within}."
        b = self.best
        text = (
            f"Best: {b['variant']}, batch {int(b['batch_size'])}, concurrency {int(b['concurrency'])}: "
            f"{float(b['throughput']):.1f} infer/s at p99 {float(b['p99_ms']):.2f} ms"
        )
        if self.margin_ms is not None and self.latency_budget_ms is not None:
            text += f" ({self.margin_ms:.2f} ms = {self.margin_ms / self.latency_budget_ms:.0%} of the budget to spare)"
        if self.runner_up is not None:
            r = self.runner_up
            gap = 1 - float(r["throughput"]) / float(b["throughput"])
            text += (
                f". Runner-up: {r['variant']}, batch {int(r['batch_size'])}, concurrency {int(r['concurrency'])}: "
                f"{float(r['throughput']):.1f} infer/s ({gap:.0%} less) at p99 {float(r['p99_ms']):.2f} ms"
            )
        else:
            text += ". No other configuration qualifies"
        return text + f". Confidence: {self.confidence.statement}."


def answer(frame: pd.DataFrame, latency_budget_ms: float | None = None) -> Answer:
    """The best point of ``frame`` under the budget and the runner-up of another configuration."""
    best = best_point(frame, latency_budget_ms=latency_budget_ms) if len(frame) else None
    return Answer(best, runner_up_of(frame, best, latency_budget_ms=latency_budget_ms), latency_budget_ms)
