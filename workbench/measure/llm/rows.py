"""One LLM sweep point's row: a variant of the vLLM backend (max_num_seqs x tensor-parallel degree x
instances) at one load (concurrency, or request rate), measured in tokens by the streaming engine.

Written to the run folder's ``points.jsonl`` by the same folder I/O as the fixed-tensor rows
(``store/folder.py``, with ``LLM_COLUMNS`` / ``LLM_KEY_COLUMNS``). Times in milliseconds, rates per
second; a number not measured is NaN (null on disk), a flag not known None.

``output_tokens_per_s`` (total) is every output token the client received in the measured windows
over their wall-clock time. ``tokens_per_user_per_s`` (per user) is one user's share of it: at a
concurrency of c users, each sending its next request when its answer ends, total / c, so at
concurrency 1 it is the total (PER_USER_MEANING says it where the column is shown). The median
request's own pace (output tokens over its end-to-end time, LLMPerf's per-request throughput) read
289 tokens/s against a total of 190 at concurrency 1 (issue 43): it leaves out the time between a
user's requests. With a request rate (no fixed users) it is that pace: the output tokens received
over the end-to-end latency (the streaming engine's median). A point the engine found unusable
(``StreamResult.unusable``: counts that disagree, streams that ended short) keeps its figures with
that reason as its ``error``. Never
1 / ITL: the vLLM backend may send several tokens in one response (``tokens_per_response`` > 1),
and then the gaps inside a bunch are 0 and 1 / ITL soars (5300 tokens/s per user was read here).
``output_tokens_per_s_low/high`` is its 95% interval: the block bootstrap of the pooled windows'
token arrival times (the streaming engine's, as a tensor row's ``throughput_low/high`` is the
load generator's); ``stopped`` says why the point's windows ended (in an effort-mode sweep, the
effort rule's verdict: ``sweep/search/effort.py``).
``goodput`` is the share of the pooled requests meeting the run's SLO, ``goodput_per_s`` those
requests per second. ``server_output_tokens`` is the server's own count over the whole point
(warm-up included), to compare with ``client_output_tokens``, every token the client received.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from workbench.measure.grid.rows import now

if TYPE_CHECKING:
    from workbench.measure.engine.streaming.stream_results import StreamResult
    from workbench.measure.llm.plan import LlmPoint

__all__ = [
    "LlmRow",
    "LLM_COLUMNS",
    "LLM_KEY_COLUMNS",
    "LLM_INT_COLUMNS",
    "usable_llm",
    "NOT_MEASURED",
    "TOTAL_MEANING",
    "PER_USER_MEANING",
    "per_user_rate",
]

NAN = math.nan
# the names of the latencies an SLO limits, as a search's limits and the effort rule's windows read them
TTFT_P99 = "TTFT p99"
ITL_P99 = "ITL p99"
# The error of a row whose figures the streaming engine read but refused (`StreamResult.unusable`).
NOT_MEASURED = "not a measured point"
# the definitions shown beside the two rates (table tooltips, the Pareto plot, the notebook)
TOTAL_MEANING = "every output token received, per second of the measured windows"
PER_USER_MEANING = (
    "one user's share of the output tokens/s: the total / the concurrency (a request rate: "
    "the output tokens received over the median end-to-end time)"
)


def per_user_rate(total_tokens_per_s: float, concurrency: int | None, request_pace: float) -> float:
    """``tokens_per_user_per_s`` (`PER_USER_MEANING`): at most the total at concurrency 1.
    ``request_pace``: one request's tokens received over its end-to-end time (the engine's median)."""
    if concurrency:
        return total_tokens_per_s / concurrency
    return request_pace


@dataclass(frozen=True)
class LlmRow:
    """A point's row. Make it with ``measured`` or ``failed``; ``to_dict`` / ``from_dict`` for disk."""

    variant: str
    max_num_seqs: int
    tensor_parallel: int
    instances: int
    cores_per_instance: int  # = tensor_parallel: each instance holds that many cores
    core_start: int | None
    core_end: int | None
    concurrency: int | None
    request_rate: float | None
    input_tokens: int  # asked per request (the mean of the prompt lengths)
    output_tokens: int  # asked per request (max_tokens, with ignore_eos)
    output_tokens_per_s: float = NAN
    output_tokens_per_s_low: float = NAN  # its 95% interval: the streaming engine's block bootstrap
    output_tokens_per_s_high: float = NAN
    requests_per_s: float = NAN
    tokens_per_user_per_s: float = NAN
    ttft_p50_ms: float = NAN
    ttft_p90_ms: float = NAN
    ttft_p99_ms: float = NAN
    itl_p50_ms: float = NAN
    itl_p90_ms: float = NAN
    itl_p99_ms: float = NAN
    e2e_p50_ms: float = NAN
    e2e_p99_ms: float = NAN
    goodput: float = NAN
    goodput_per_s: float = NAN
    client_cpu_us_per_token: float = NAN
    tokens_per_response: float = NAN
    client_output_tokens: float = NAN
    server_output_tokens: float = NAN  # -1 on disk where the server kept no count
    server_requests: float = NAN
    requests: float = NAN
    failures: float = NAN
    windows: float = NAN
    stable: bool | None = None
    stopped: str | None = None  # why its windows ended: stable, a limit, or the effort rule's verdict
    engine: str | None = None
    served_by: str | None = None
    cpu_busy: str | None = None
    warnings: str | None = None
    error: str | None = None
    measured_at: str | None = None
    model: str | None = None
    config_digest: str | None = None

    @classmethod
    def measured(cls, point: LlmPoint, result: StreamResult, slo_name: str) -> LlmRow:
        """The row of a point ``measure_stream`` measured; no request succeeded: a failed row."""
        if result.requests == 0 or not result.output_tokens_per_s > 0:
            return cls.failed(point, "no request succeeded: " + ("; ".join(result.warnings) or "no tokens came back"))
        itl50 = result.itl_ms["p50"]
        server = result.server
        return cls(
            **point.columns(),
            output_tokens_per_s=result.output_tokens_per_s,
            output_tokens_per_s_low=result.output_tokens_per_s_low,
            output_tokens_per_s_high=result.output_tokens_per_s_high,
            requests_per_s=result.requests_per_s,
            tokens_per_user_per_s=per_user_rate(
                result.output_tokens_per_s, point.concurrency, result.tokens_per_user_per_s
            ),  # from the tokens received
            ttft_p50_ms=result.ttft_ms["p50"],
            ttft_p90_ms=result.ttft_ms["p90"],
            ttft_p99_ms=result.ttft_ms["p99"],
            itl_p50_ms=itl50,
            itl_p90_ms=result.itl_ms["p90"],
            itl_p99_ms=result.itl_ms["p99"],
            e2e_p50_ms=result.e2e_ms["p50"],
            e2e_p99_ms=result.e2e_ms["p99"],
            goodput=result.goodput.get(slo_name, NAN),
            goodput_per_s=result.goodput_per_s.get(slo_name, NAN),
            client_cpu_us_per_token=result.client_cpu_us_per_token,
            tokens_per_response=result.tokens_per_response,
            client_output_tokens=result.client_total_tokens,
            # the token counter's count only: a response count is not a token count (several tokens per response)
            server_output_tokens=(server.output_tokens if server.from_token_counter else -1)
            if server is not None
            else NAN,
            server_requests=server.requests if server is not None else NAN,
            requests=result.requests,
            failures=result.failures,
            windows=result.windows,
            stable=bool(result.stable),
            stopped=result.stopped,
            engine="workbench-stream",
            warnings=" | ".join(result.warnings),
            measured_at=now(),
            error=f"{NOT_MEASURED}: {result.unusable}" if result.unusable else None,  # figures kept, refused
        )

    @classmethod
    def failed(cls, point: LlmPoint, error: str) -> LlmRow:
        return cls(**point.columns(), error=error, measured_at=now())

    @property
    def key(self) -> tuple:
        return (self.variant, self.concurrency, self.request_rate)

    # ---- what a search reads of it (sweep/search/base.py's SearchRow) -------------------------

    @property
    def objective(self) -> float:
        return self.output_tokens_per_s

    @property
    def objective_low(self) -> float:
        return self.output_tokens_per_s_low

    @property
    def objective_high(self) -> float:
        return self.output_tokens_per_s_high

    @property
    def latencies_ms(self) -> dict[str, float]:
        """Under the names the SLO's limits use (``slo_effort.slo_limits``)."""
        return {TTFT_P99: self.ttft_p99_ms, ITL_P99: self.itl_p99_ms}

    @property
    def is_usable(self) -> bool:
        return usable_llm(self.to_dict())

    @property
    def search_label(self) -> str:
        load = f"{self.request_rate:g} req/s" if self.request_rate is not None else f"concurrency {self.concurrency}"
        return f"{self.variant} at {load}"

    @property
    def search_point(self) -> dict[str, Any]:
        return {"concurrency": self.concurrency, "request_rate": self.request_rate}

    @property
    def search_figures(self) -> dict[str, float | None]:
        def rounded(value: float, digits: int) -> float | None:
            return None if math.isnan(value) else round(value, digits)

        return {
            "output_tokens_per_s": rounded(self.output_tokens_per_s, 3),
            "ttft_p99_ms": rounded(self.ttft_p99_ms, 4),
            "itl_p99_ms": rounded(self.itl_p99_ms, 4),
        }

    def summary(self) -> str:
        if self.error:
            return self.error
        return (
            f"{self.output_tokens_per_s:.1f} output tok/s, {self.tokens_per_user_per_s:.1f} tok/s per user, "
            f"TTFT p99 {self.ttft_p99_ms:.1f} ms, ITL p99 {self.itl_p99_ms:.2f} ms"
        )

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LlmRow:
        values: dict[str, Any] = {}  # JSON values, as ``data`` holds them
        for f in fields(cls):
            if f.name in data:
                value = data[f.name]
                values[f.name] = NAN if value is None and f.name in _NUMBER_COLUMNS else value
        return cls(**values)


LLM_COLUMNS = tuple(f.name for f in fields(LlmRow))
LLM_KEY_COLUMNS = ("variant", "concurrency", "request_rate")
LLM_INT_COLUMNS = (
    "max_num_seqs",
    "tensor_parallel",
    "instances",
    "cores_per_instance",
    "input_tokens",
    "output_tokens",
)
_NUMBER_COLUMNS = frozenset(f.name for f in fields(LlmRow) if isinstance(f.default, float) and math.isnan(f.default))


def _number(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return NAN


def usable_llm(values: Mapping[str, Any]) -> bool:
    """A point whose figures can be trusted: no error, no failed request, tokens measured, and
    the server's own count (where it kept one) equal to the client's."""
    error = values.get("error")
    if error is not None and not (isinstance(error, float) and math.isnan(error)) and str(error).strip():
        return False
    failures, server, client = (
        _number(values.get(k)) for k in ("failures", "server_output_tokens", "client_output_tokens")
    )
    counted = math.isnan(server) or server < 0 or server == client
    return (
        _number(values.get("output_tokens_per_s")) > 0
        and not math.isnan(_number(values.get("ttft_p99_ms")))
        and (math.isnan(failures) or failures == 0)
        and counted
    )
