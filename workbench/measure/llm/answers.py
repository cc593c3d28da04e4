"""The questions asked of an LLM sweep's table, each rule written once: which points are usable,
which meet an SLO, the Pareto front of output tokens/s per user against total output tokens/s, the
best configuration under an SLO with the runner-up and how sure their order is (`LlmAnswer`), and
the cost per million output tokens (`store/cost.py`'s price table and share rule: a variant pays
for instances x tensor-parallel cores of the instance's cores).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import pandas as pd

from workbench.measure.engine.streaming import Slo
from workbench.measure.llm.rows import usable_llm
from workbench.measure.store.confidence import Confidence, confidence, number
from workbench.measure.store.cost import with_cost
from workbench.system import cores_for_instance

__all__ = [
    "usable_rows",
    "meeting",
    "pareto_front",
    "best_under",
    "with_token_cost",
    "cheapest_under",
    "point_text",
    "latencies_text",
    "slo_text",
    "load_text",
    "LlmAnswer",
    "answer_under",
]


def usable_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """The points whose figures can be trusted (`rows.usable_llm`)."""
    return frame[[usable_llm(r) for r in frame.to_dict("records")]] if len(frame) else frame


def meeting(frame: pd.DataFrame, slo: Slo | None = None, min_goodput: float | None = None) -> pd.DataFrame:
    """Usable points whose TTFT p99 and ITL p99 are within ``slo`` (None limits: not checked) and
    whose recorded goodput (the share of requests meeting the run's SLO) is at least ``min_goodput``."""
    out = usable_rows(frame)
    if slo is not None and slo.ttft_ms is not None:
        out = out[out["ttft_p99_ms"].astype(float) <= float(slo.ttft_ms)]
    if slo is not None and slo.itl_ms is not None:
        out = out[out["itl_p99_ms"].astype(float) <= float(slo.itl_ms)]
    if min_goodput is not None:
        out = out[out["goodput"].astype(float) >= float(min_goodput)]
    return out


def pareto_front(frame: pd.DataFrame) -> pd.DataFrame:
    """The usable points no other usable point beats on both output tokens/s per user and total
    output tokens/s (at least as good on both, better on one), sorted by total tokens/s."""
    usable = usable_rows(frame)
    if usable.empty:
        return usable
    per_user = usable["tokens_per_user_per_s"].astype(float).to_numpy()
    total = usable["output_tokens_per_s"].astype(float).to_numpy()
    keep = []
    for i in range(len(usable)):
        dominated = (
            (per_user >= per_user[i]) & (total >= total[i]) & ((per_user > per_user[i]) | (total > total[i]))
        ).any()
        keep.append(not dominated and not math.isnan(per_user[i]))
    return usable[keep].sort_values("output_tokens_per_s", kind="stable")


def best_under(frame: pd.DataFrame, slo: Slo | None = None, min_goodput: float | None = None) -> pd.Series | None:
    """The highest total output tokens/s among the points meeting ``slo`` (ties: the faster TTFT
    p99); None when none does."""
    candidates = meeting(frame, slo, min_goodput)
    if candidates.empty:
        return None
    return candidates.sort_values(["output_tokens_per_s", "ttft_p99_ms"], ascending=[False, True], kind="stable").iloc[
        0
    ]


@dataclass(frozen=True)
class LlmAnswer:
    """The best point under an SLO, the runner-up (the best point of another variant: another load
    level of the same variant is not another configuration) and how sure their order is: the
    tensor answer's `Confidence` on the rows' output tokens/s 95% intervals
    (``output_tokens_per_s_low/high``)."""

    best: pd.Series | None
    runner_up: pd.Series | None

    @property
    def confidence(self) -> Confidence:
        return confidence(self.best, self.runner_up, column="output_tokens_per_s", what="output tokens/s")

    def to_dict(self) -> dict:
        def brief(row: pd.Series | None) -> dict | None:
            if row is None:
                return None
            low, high = (number(row, f"output_tokens_per_s_{end}") for end in ("low", "high"))
            return {
                "variant": row["variant"],
                "load": load_text(row.get("concurrency"), row.get("request_rate")),
                "output_tokens_per_s": float(row["output_tokens_per_s"]),
                "output_tokens_per_s_interval": None if math.isnan(low) or math.isnan(high) else [low, high],
                "ttft_p99_ms": float(row["ttft_p99_ms"]),
                "itl_p99_ms": float(row["itl_p99_ms"]),
            }

        return {"best": brief(self.best), "runner_up": brief(self.runner_up), "confidence": self.confidence.to_dict()}


def answer_under(frame: pd.DataFrame, slo: Slo | None = None, min_goodput: float | None = None) -> LlmAnswer:
    """`best_under` and the best point of any other variant under the same SLO."""
    best = best_under(frame, slo, min_goodput)
    if best is None:
        return LlmAnswer(None, None)
    other = frame[frame["variant"] != best["variant"]]
    return LlmAnswer(best, best_under(other, slo, min_goodput) if len(other) else None)


def with_token_cost(
    frame: pd.DataFrame,
    instance_type: str,
    *,
    prices: Mapping[str, float] | None = None,
    instance_cores: int | None = None,
    whole_instance: bool = False,
) -> pd.DataFrame:
    """``frame`` with ``usd_per_hour`` (the variant's share of the instance) and
    ``usd_per_million_output_tokens``: the share's price over an hour of its output tokens. A
    variant holding more cores than the instance has is not priced (NaN): it cannot run there."""
    cores = instance_cores if instance_cores is not None else cores_for_instance(instance_type)
    used = frame["instances"].astype(float) * frame["cores_per_instance"].astype(float)
    fits = frame if whole_instance or not cores else frame[used <= cores]
    costed = with_cost(
        fits.assign(throughput=fits["output_tokens_per_s"]),
        instance_type,
        prices=prices,
        instance_cores=instance_cores,
        whole_instance=whole_instance,
    )
    priced = costed[["usd_per_hour", "cost_per_million_usd"]].rename(
        columns={"cost_per_million_usd": "usd_per_million_output_tokens"}
    )
    return frame.join(priced)


def cheapest_under(
    frame: pd.DataFrame,
    instance_type: str,
    slo: Slo | None = None,
    *,
    min_goodput: float | None = None,
    prices: Mapping[str, float] | None = None,
    instance_cores: int | None = None,
    whole_instance: bool = False,
) -> pd.Series | None:
    """The point meeting ``slo`` with the lowest cost per million output tokens (ties: more
    tokens/s); None when none meets it."""
    costed = with_token_cost(
        frame, instance_type, prices=prices, instance_cores=instance_cores, whole_instance=whole_instance
    )
    candidates = meeting(costed, slo, min_goodput)
    candidates = candidates[candidates["usd_per_million_output_tokens"].notna()]  # priced: fits the instance
    if candidates.empty:
        return None
    return candidates.sort_values(
        ["usd_per_million_output_tokens", "output_tokens_per_s"], ascending=[True, False], kind="stable"
    ).iloc[0]


def slo_text(slo: Slo | None, min_goodput: float | None = None) -> str:
    parts = []
    if slo is not None and slo.ttft_ms is not None:
        parts.append(f"TTFT p99 <= {slo.ttft_ms:g} ms")
    if slo is not None and slo.itl_ms is not None:
        parts.append(f"ITL p99 <= {slo.itl_ms:g} ms")
    if min_goodput is not None:
        parts.append(f"goodput >= {min_goodput * 100:g}%")
    return " and ".join(parts) or "no SLO"


def load_text(concurrency: float | None, request_rate: float | None) -> str:
    """A point's load level in words: its request rate when it has one, else its concurrency."""
    if request_rate is not None and not pd.isna(request_rate):
        return f"{float(request_rate):g} req/s"
    if concurrency is None:
        raise ValueError("a load level has a request rate or a concurrency; this one has neither")
    return f"concurrency {int(concurrency)}"


def point_text(point: pd.Series) -> str:
    """The configuration and its figures in words."""
    load = load_text(point.get("concurrency"), point.get("request_rate"))
    return (
        f"max_num_seqs {int(point['max_num_seqs'])}, tensor-parallel {int(point['tensor_parallel'])}, "
        f"{int(point['instances'])} instance(s), {load}: {float(point['output_tokens_per_s']):.1f} output tok/s, "
        f"{float(point['tokens_per_user_per_s']):.1f} tok/s per user, "
        + latencies_text(float(point["ttft_p99_ms"]), float(point["itl_p99_ms"]))
    )


def latencies_text(ttft_p99_ms: float, itl_p99_ms: float) -> str:
    """A point's latency figures over all its requests, as the answer and a decision line say them."""
    return f"over all its requests TTFT p99 {ttft_p99_ms:.1f} ms, ITL p99 {itl_p99_ms:.2f} ms"
