"""What one streaming load point measured: every request's token times, and the point's figures in
tokens (TTFT, inter-token latency, output tokens/s, goodput under SLOs) beside the server's counts.

Times are kept raw (perf_counter nanoseconds) per request and summarised with ``measure.stats``'
nearest-rank percentiles, the same as the fixed-shape engine.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, NamedTuple

import numpy as np

from workbench.measure.engine.stats import Spread, summarize_latencies

__all__ = ["RequestRecord", "Slo", "ServerCounts", "StreamResult", "WindowFigures", "summarize", "slo_name"]


@dataclass
class RequestRecord:
    """One request: when it was sent, when each output token arrived, how it ended."""

    sent_ns: int
    input_tokens: int
    max_tokens: int
    token_ns: list[int] = field(default_factory=list)
    done_ns: int = 0
    error: str = ""
    send_delay_ns: int = -1
    responses: int = 0  # responses carrying tokens: fewer than the tokens where an engine bunches them

    @property
    def output_tokens(self) -> int:
        return len(self.token_ns)

    @property
    def ok(self) -> bool:
        return not self.error and self.done_ns > 0

    @property
    def ttft_ms(self) -> float:
        return (self.token_ns[0] - self.sent_ns) / 1e6 if self.token_ns else math.nan

    @property
    def gaps_ms(self) -> np.ndarray:
        return np.diff(np.asarray(self.token_ns, dtype=np.int64)) / 1e6

    @property
    def itl_ms(self) -> float:
        """The request's inter-token latency: its mean gap, first token to last (AIPerf's and
        LLMPerf's definition); NaN with fewer than two tokens."""
        n = len(self.token_ns)
        return (self.token_ns[-1] - self.token_ns[0]) / (n - 1) / 1e6 if n > 1 else math.nan

    @property
    def e2e_ms(self) -> float:
        return (self.done_ns - self.sent_ns) / 1e6


@dataclass(frozen=True)
class Slo:
    """A service level a request meets or not: its TTFT and its inter-token latency (the mean gap
    of its tokens) at most the limits (None: no limit on that)."""

    ttft_ms: float | None = 500.0
    itl_ms: float | None = 50.0

    def met_by(self, record: RequestRecord) -> bool:
        if not record.ok or not record.token_ns:
            return False
        if self.ttft_ms is not None and record.ttft_ms > self.ttft_ms:
            return False
        return self.itl_ms is None or record.output_tokens < 2 or record.itl_ms <= self.itl_ms


class WindowFigures(NamedTuple):
    """One measured window as the stopping rule read it: its length, the output tokens/s that
    arrived in it, the requests that completed in it and their mean TTFT (NaN: none)."""

    seconds: float
    output_tokens_per_s: float
    requests: int
    ttft_ms_avg: float


@dataclass(frozen=True)
class ServerCounts:
    """What the server itself counted for the model over a span (diffs of cumulative counts):
    requests it completed and executions (statistics extension), responses sent (decoupled
    response statistics, empty final responses apart; 0 where the backend does not report them)
    and ``output_tokens`` (the model's own token counter, else the responses; -1: not known);
    ``from_token_counter``: whether ``output_tokens`` is the token counter's (not the responses')."""

    requests: int
    executions: int
    responses: int
    empty_responses: int
    output_tokens: int
    from_token_counter: bool = False


@dataclass
class StreamResult:
    """One load point of a streaming model. Figures pool every window measured after the warm-up
    (a request belongs to the window in which it completed; ``stable`` is the stopping rule's
    verdict, ``windows`` their count); times in ms.

    ``itl_ms`` summarises each request's inter-token latency (its mean gap), ``token_gap_ms``
    every gap between two tokens (0 where an engine sent several tokens in one response).
    ``output_tokens_per_s`` and ``requests_per_s`` are over those windows; ``goodput`` is the
    share of their requests meeting each SLO and ``goodput_per_s`` those requests per second;
    ``tokens_per_response`` above 1 says the engine bunched tokens into responses (their gaps
    are then 0 and the ITL is the engine's pace as the client sees it); ``client_cpu_us_per_token`` is this process's CPU time over the output tokens received
    (the sender's own cost). ``window_figures``: each window as the stopping rule read it.
    ``output_tokens_per_s_low/high``: its 95% interval, the block
    bootstrap of the tokens' arrival times (``stats.bootstrap_spread``, as the fixed-shape
    engine's throughput interval; ``spread`` is the requests' and TTFT's). ``stopped``: why the
    windows ended (stable, a limit, or the caller's rule).
    ``server``/``client_total_tokens`` compare the server's count over
    the whole run with the client's: every output token the client received, warm-up included.
    ``tokens_per_user_per_s``: the pace one user sees (tokens received over end-to-end time).
    ``unusable``: why this is not a measured point (a count the two sides disagree on, a stream
    that ended short, a pace that cannot be, a point that gave up), "" when it is; its figures are
    kept for the record, never to be read as good.
    """

    model: str
    url: str
    protocol: str
    concurrency: int | None
    request_rate: float | None
    distribution: str | None
    stable: bool
    windows: int
    pooled_windows: int
    seconds: float
    requests: int
    failures: int
    input_tokens: int
    output_tokens: int
    output_tokens_per_s: float
    requests_per_s: float
    ttft_ms: dict[str, float]
    itl_ms: dict[str, float]
    token_gap_ms: dict[str, float]
    e2e_ms: dict[str, float]
    goodput: dict[str, float]
    goodput_per_s: dict[str, float]
    client_cpu_us_per_token: float
    tokens_per_response: float
    spread: Spread
    client_total_requests: int
    client_total_tokens: int
    server: ServerCounts | None
    records: list[RequestRecord] = field(default_factory=list, repr=False)
    warnings: list[str] = field(default_factory=list)
    output_tokens_per_s_low: float = math.nan
    output_tokens_per_s_high: float = math.nan
    stopped: str | None = None
    window_figures: list[WindowFigures] = field(default_factory=list)
    tokens_per_user_per_s: float = math.nan
    unusable: str = ""

    @property
    def usable(self) -> bool:
        """Whether the figures stand as a measurement: ``unusable`` says what was seen otherwise."""
        return not self.unusable

    def to_dict(self) -> dict[str, Any]:
        """Plain values (records left out: they are the raw data, kept on the object)."""
        out = {k: v for k, v in asdict(self).items() if k != "records"}
        return out

    def bench_names(self) -> dict[str, float]:
        """The figures under vLLM ``bench serve``'s names: its TPOT is our ``itl_ms`` (a request's
        mean gap, GuideLLM's inter-token latency), its ITL our ``token_gap_ms`` (every gap), its
        E2EL our ``e2e_ms``; ``request_goodput[<slo>]`` requests/s meeting each SLO."""
        out: dict[str, float] = {}
        for ours, theirs in (
            (self.ttft_ms, "ttft"),
            (self.itl_ms, "tpot"),
            (self.token_gap_ms, "itl"),
            (self.e2e_ms, "e2el"),
        ):
            out.update(
                {
                    f"mean_{theirs}_ms": ours["avg"],
                    f"median_{theirs}_ms": ours["p50"],
                    f"p90_{theirs}_ms": ours["p90"],
                    f"p99_{theirs}_ms": ours["p99"],
                }
            )
        out.update({"request_throughput": self.requests_per_s, "output_throughput": self.output_tokens_per_s})
        out.update({f"request_goodput[{name}]": value for name, value in self.goodput_per_s.items()})
        return out

    def summary(self) -> str:
        """One line a person reads: the figures with the sender's cost beside them (or, first,
        why they are not a measurement)."""
        goodput = ", ".join(f"goodput[{name}] {share * 100:.0f}%" for name, share in self.goodput.items())
        server = "" if self.server is None else f", server counted {self.server.output_tokens}"
        refused = f"NOT A MEASURED POINT: {self.unusable}. Figures as read: " if self.unusable else ""
        return (
            f"{refused}{self.output_tokens_per_s:.1f} output tok/s, {self.requests_per_s:.2f} req/s, "
            f"TTFT p50 {self.ttft_ms['p50']:.1f} ms p99 {self.ttft_ms['p99']:.1f} ms, "
            f"ITL p50 {self.itl_ms['p50']:.2f} ms p99 {self.itl_ms['p99']:.2f} ms, "
            f"{self.tokens_per_response:.2g} tokens/response, {goodput}; "
            f"client CPU {self.client_cpu_us_per_token:.0f} us/token; "
            f"client received {self.client_total_tokens} tokens{server}"
        )


def _percentiles(values: np.ndarray) -> dict[str, float]:
    summary = summarize_latencies(values)
    return {key: summary[key] for key in ("count", "avg", "p50", "p90", "p99")}


def slo_name(slo: Slo) -> str:
    parts = [
        f"ttft<={slo.ttft_ms:g}ms" if slo.ttft_ms is not None else "",
        f"itl<={slo.itl_ms:g}ms" if slo.itl_ms is not None else "",
    ]
    return ",".join(p for p in parts if p) or "none"


def summarize(records: list[RequestRecord], seconds: float, slos: tuple[Slo, ...]) -> dict[str, Any]:
    """The point's figures from the pooled windows' records over ``seconds`` of wall time."""
    ok = [r for r in records if r.ok]
    tokens = sum(r.output_tokens for r in ok)
    gaps = np.concatenate([r.gaps_ms for r in ok]) if ok else np.empty(0)
    met = {slo_name(slo): sum(slo.met_by(r) for r in ok) for slo in slos}
    return {
        "requests": len(ok),
        "failures": len(records) - len(ok),
        "input_tokens": sum(r.input_tokens for r in ok),
        "output_tokens": tokens,
        "output_tokens_per_s": tokens / seconds if seconds > 0 else 0.0,
        "requests_per_s": len(ok) / seconds if seconds > 0 else 0.0,
        "ttft_ms": _percentiles(np.array([r.ttft_ms for r in ok if r.token_ns])),
        "itl_ms": _percentiles(np.array([r.itl_ms for r in ok if r.output_tokens > 1])),
        "token_gap_ms": _percentiles(gaps),
        "e2e_ms": _percentiles(np.array([r.e2e_ms for r in ok])),
        "goodput": {name: (count / len(records) if records else 0.0) for name, count in met.items()},
        "goodput_per_s": {name: (count / seconds if seconds > 0 else 0.0) for name, count in met.items()},
    }
