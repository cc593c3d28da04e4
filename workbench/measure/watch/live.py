"""What the server side is doing while a point runs: per request, the time in the queue against
the time computing, the requests pending in the server (the metrics endpoint's
``nv_inference_pending_request_count`` gauge) and the batch size the model actually executed.

`ServerWatch` reads one model's statistics (the ``model_stats`` Triton keeps per model) and its
metrics; each ``view()`` is the change since the previous one, as one immutable `ServerView` that a
renderer draws (``ui/render.server_view_html``). A reload starts the model's statistics from zero:
a counter that went down is read as such a restart.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from workbench.measure.engine.stats import StatsError, model_counters
from workbench.server.metrics import metric_value
from workbench.server.protocol import Server

__all__ = ["ServerView", "ServerWatch", "PENDING_METRIC"]

PENDING_METRIC = "nv_inference_pending_request_count"
_DURATIONS = ("queue", "compute_input", "compute_infer", "compute_output")


@dataclass(frozen=True)
class ServerView:
    """One interval of one model on the server. Times are milliseconds per successful request
    (None when no request finished in the interval); ``pending`` None when the server exports no
    metrics; ``avg_batch`` inferences per model execution."""

    model: str
    interval_s: float
    requests: int
    executions: int
    queue_ms: float | None
    compute_ms: float | None
    pending: float | None
    avg_batch: float | None

    @property
    def queue_share(self) -> float | None:
        """Queue time as a share of queue + compute (None without requests)."""
        if self.queue_ms is None or self.compute_ms is None or self.queue_ms + self.compute_ms <= 0:
            return None
        return self.queue_ms / (self.queue_ms + self.compute_ms)


def _counters(stats: dict, model: str) -> dict[str, int]:
    """Success count, executions, inferences and the summed ns of each duration, over versions
    (read by `stats.model_counters`; all zero while the server has no statistics for the model)."""
    try:
        counts = model_counters(stats, model)
    except StatsError:
        return dict.fromkeys(("success", "executions", "inferences", *_DURATIONS), 0)
    return {
        "success": counts["success"][0],
        "executions": counts["execution_count"],
        "inferences": counts["inference_count"],
        **{key: counts[key][1] for key in _DURATIONS},
    }


class ServerWatch:
    """The server side of one model, read on demand (``server``: a TritonServer or RunningServer)."""

    def __init__(self, server: Server, model: str) -> None:
        self.server, self.model = server, model
        self._last = _counters(server.stats(model), model)
        self._at = time.monotonic()

    def _pending(self) -> float | None:
        try:
            return metric_value(self.server.metrics(), PENDING_METRIC, model=self.model)
        except Exception:  # noqa: BLE001 - no metrics endpoint (--allow-metrics=false, a remote without one)
            return None

    def view(self) -> ServerView:
        """The change since the previous view (or since the watch was made)."""
        now, counters = time.monotonic(), _counters(self.server.stats(self.model), self.model)
        restarted = any(counters[key] < self._last[key] for key in counters)
        delta = counters if restarted else {key: counters[key] - self._last[key] for key in counters}
        interval, self._last, self._at = now - self._at, counters, now
        requests = delta["success"]
        per_request = (lambda ns: ns / requests / 1e6) if requests else (lambda ns: None)
        compute = sum(delta[key] for key in _DURATIONS[1:])
        return ServerView(
            model=self.model,
            interval_s=interval,
            requests=requests,
            executions=delta["executions"],
            queue_ms=per_request(delta["queue"]),
            compute_ms=per_request(compute),
            pending=self._pending(),
            avg_batch=delta["inferences"] / delta["executions"] if delta["executions"] else None,
        )
