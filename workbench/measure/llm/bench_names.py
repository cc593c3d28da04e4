"""An LLM sweep's figures under the names vLLM's ``bench serve`` saves (``median_ttft_ms``,
``p99_tpot_ms``, ``p99_e2el_ms``, ``request_goodput``, ``output_throughput``...), so a user can put
our points next to theirs (GuideLLM's ``time_to_first_token_ms`` / ``inter_token_latency_ms`` /
``request_latency`` are the same three quantities).

What maps to what: vLLM's TPOT (and GuideLLM's inter-token latency) is a request's time from
its first token to its last over its tokens less one: our ``itl_*_ms`` (a request's mean gap).
vLLM's ITL is every gap between two responses, pooled (our engine's ``token_gap_ms``, not in a
sweep row), so no ``*_itl_ms`` column is made from a row. ``request_goodput`` is requests per
second meeting the run's SLO (vLLM's ``--goodput ttft:... tpot:...``); ``goodput_slo`` says which
SLO, in vLLM's words. Percentiles are ours (nearest rank); vLLM interpolates (numpy's default):
with few requests the two differ by up to one request's value.
"""

from __future__ import annotations

import math

import pandas as pd

__all__ = ["BENCH_NAMES", "with_bench_names", "goodput_slo"]

# vLLM bench serve's name -> the LLM row's column
BENCH_NAMES = {
    "median_ttft_ms": "ttft_p50_ms",
    "p90_ttft_ms": "ttft_p90_ms",
    "p99_ttft_ms": "ttft_p99_ms",
    "median_tpot_ms": "itl_p50_ms",
    "p90_tpot_ms": "itl_p90_ms",
    "p99_tpot_ms": "itl_p99_ms",
    "median_e2el_ms": "e2e_p50_ms",
    "p99_e2el_ms": "e2e_p99_ms",
    "request_throughput": "requests_per_s",
    "output_throughput": "output_tokens_per_s",
    "request_goodput": "goodput_per_s",
}


def goodput_slo(ttft_ms: float | None, itl_ms: float | None) -> str:
    """The SLO in vLLM's ``--goodput`` words (``ttft:500 tpot:50``); "" without one."""
    parts = [
        f"{name}:{value:g}"
        for name, value in (("ttft", ttft_ms), ("tpot", itl_ms))
        if value is not None and math.isfinite(value)
    ]
    return " ".join(parts)


def with_bench_names(frame: pd.DataFrame, slo: str) -> pd.DataFrame:
    """``frame`` with vLLM bench's columns added beside ours (same values), and ``goodput_slo``."""
    out = frame.copy()
    for theirs, ours in BENCH_NAMES.items():
        if ours in out.columns:
            out[theirs] = out[ours]
    out["goodput_slo"] = slo
    return out
