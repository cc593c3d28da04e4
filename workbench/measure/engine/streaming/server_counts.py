"""The server's own counts for a streaming model, read beside the client's at every point.

Triton's statistics extension counts requests and executions. For decoupled models it has a
``response_stats`` map (per response index: success / empty_response counts), but tritonserver
2.51's Python backend leaves it empty (checked: ``"response_stats": {}`` after streamed
responses), and the vLLM backend is a Python-backend model. So the output-token count comes from a
counter the model itself keeps on Triton's /metrics (the vLLM backend's
``vllm:generation_tokens_total`` when its config sets REPORT_CUSTOM_METRICS; a Python model's own
``pb_utils.MetricFamily`` counter), and from ``response_stats`` where a backend fills it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Protocol

from workbench.measure.engine.stats import StatsError, model_counters
from workbench.measure.engine.streaming.stream_results import ServerCounts
from workbench.server.metrics import metric_value

__all__ = ["CountingServer", "Snapshot", "take_snapshot", "counts_between", "VLLM_TOKEN_METRIC"]

VLLM_TOKEN_METRIC = "vllm:generation_tokens_total"


class CountingServer(Protocol):
    """What the counts are read from (a TritonServer, a RemoteServer or their ModelControl)."""

    def stats(self, name: str = "") -> dict[str, Any]: ...

    def metrics(self) -> dict[str, list[dict[str, Any]]]: ...


@dataclass(frozen=True)
class Snapshot:
    """The cumulative counts at one moment."""

    requests: int
    executions: int
    responses: int
    empty_responses: int
    token_counter: float


def _response_counts(statistics: dict[str, Any], model: str) -> tuple[int, int]:
    responses = empty = 0
    for entry in statistics.get("model_stats", []):
        if entry.get("name") != model:
            continue
        for per_index in (entry.get("response_stats") or {}).values():
            responses += int((per_index.get("success") or {}).get("count", 0) or 0)
            empty += int((per_index.get("empty_response") or {}).get("count", 0) or 0)
    return responses, empty


def take_snapshot(server: CountingServer, model: str, token_metric: str | None) -> Snapshot | None:
    """The model's counts now; None when the server keeps no statistics for it."""
    try:
        statistics = server.stats(model)
        counters = model_counters(statistics, model)
    except (StatsError, OSError, RuntimeError, ValueError):
        return None
    responses, empty = _response_counts(statistics, model)
    tokens = math.nan
    if token_metric is not None:
        try:
            value = metric_value(server.metrics(), token_metric, model=model)
        except (OSError, RuntimeError, ValueError):
            value = None
        tokens = math.nan if value is None else value
    return Snapshot(counters["success"][0], counters["execution_count"], responses, empty, tokens)


def counts_between(before: Snapshot | None, after: Snapshot | None) -> ServerCounts | None:
    """What the server counted between two snapshots; output tokens from the model's counter
    where it keeps one, else from the response statistics (-1 when neither has them)."""
    if before is None or after is None:
        return None
    tokens = after.token_counter - before.token_counter
    responses = after.responses - before.responses
    output_tokens = int(round(tokens)) if math.isfinite(tokens) else (responses if responses else -1)
    return ServerCounts(
        requests=after.requests - before.requests,
        executions=after.executions - before.executions,
        responses=responses,
        empty_responses=after.empty_responses - before.empty_responses,
        output_tokens=output_tokens,
        from_token_counter=math.isfinite(tokens),
    )
