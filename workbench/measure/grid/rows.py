"""One result-row type: a sweep point's row, made in one place from whatever measured it (the
built-in load generator, perf_analyzer) or from why it could not be measured, and read back from
a run's ``points.jsonl`` on resume.

Its fields are the table's columns, in the documented order (``COLUMNS``): first what identifies
the point (variant, batch size, concurrency), then what was measured, with its spread (the
``*_low``/``*_high`` columns: a 95% interval) and what the load generator cost (``send_delay_us``,
``client_cpu_us``). Times are milliseconds unless the name says ``_us``, throughput inferences
per second; a number not measured is NaN, a flag not known None.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from workbench.measure.engine.loadgen.load_results import LoadResult
    from workbench.measure.grid.plan import Point

__all__ = ["PointRow", "COLUMNS", "KEY_COLUMNS", "INT_COLUMNS", "now", "flag", "usable", "interval_text"]

NAN = math.nan


def now() -> str:
    """The time a row or a run record is stamped with: UTC, to the second."""
    return datetime.now(UTC).isoformat(timespec="seconds")


def interval_text(low: float, high: float, digits: int) -> str:
    """``", 95% [low, high]"`` to follow a figure, "" where its interval is not known (NaN)."""
    if math.isnan(low) or math.isnan(high):
        return ""
    return f", 95% [{low:.{digits}f}, {high:.{digits}f}]"


def _nothing_succeeded(sent: Any, failed: Any, errors: Mapping[str, int], where: str = "") -> str:
    """Why a point with no successful request (``where``: in its last window) has no numbers: how
    many were sent and failed, and the most frequent error."""
    if failed is not None and sent is not None:
        counts = f" ({failed} of {sent} failed)"
    elif failed is not None:
        counts = f" ({failed} failed)"
    else:
        counts = ""
    common = max(errors.items(), key=lambda item: item[1])[0] if errors else None
    return f"no request succeeded{where}{counts}" + (f": {common}" if common else "")


def _ms(value_us: Any) -> float:
    return float(value_us) / 1000.0 if value_us is not None else NAN


@dataclass(frozen=True)
class PointRow:
    """A point's row. Make it with ``measured``, ``from_perf_analyzer`` or ``failed``; write it
    with ``to_dict``, read it back with ``from_dict``."""

    variant: str
    allocation: str
    instances: int
    cores_per_instance: int
    core_start: int
    core_end: int
    batching: str
    parameters: str
    batch_size: int
    concurrency: int
    throughput: float = NAN
    p50_ms: float = NAN
    p90_ms: float = NAN
    p95_ms: float = NAN
    p99_ms: float = NAN
    mean_ms: float = NAN
    throughput_low: float = NAN  # the spread: a 95% interval around throughput and p99
    throughput_high: float = NAN
    p99_low_ms: float = NAN
    p99_high_ms: float = NAN
    stable: bool | None = None
    windows: float = NAN  # counts: whole numbers where the engine reports them, NaN where not
    requests: float = NAN  # latencies the numbers pool (p99 is read from these)
    failures: float = NAN
    window_s: float = NAN  # the last window's length: longer than asked when the point needed it
    send_delay_us: float = NAN  # the load generator's own cost: delay before each send, CPU per request
    client_cpu_us: float = NAN
    outputs_ok: bool | None = None
    max_abs_diff: float = NAN
    queue_ms: float = NAN
    compute_input_ms: float = NAN
    compute_infer_ms: float = NAN
    compute_output_ms: float = NAN
    overhead_ms: float = NAN
    avg_batch: float = NAN
    cpu_busy: str | None = None  # "0:93.1 1:87.0": percent busy of each CPU of the range while measuring (CPU target)
    neuron_busy: str | None = None  # the same for each NeuronCore of the range, from neuron-monitor (Neuron target)
    engine: str | None = None
    served_by: str | None = None  # the backend that served the variant (Python, PyTorch/LibTorch, its twin)
    warnings: str | None = None
    error: str | None = None
    measured_at: str | None = None
    stopped: str | None = None  # why its windows ended: stable, a limit, or a search's effort rule (effort.py)
    model: str | None = None  # what the row measured: the model, and a digest of its variant's config
    config_digest: str | None = None  # (a resume refuses rows of another model or config)

    @classmethod
    def measured(cls, point: Point, result: LoadResult, max_abs_diff: float) -> PointRow:
        """The row of a point the built-in load generator measured; a point where no request
        succeeded is a failed point (resume measures it again), whatever else was counted."""
        if result.succeeded == 0 or not result.throughput > 0:
            return cls.failed(point, _nothing_succeeded(result.sent, result.failed, result.errors))
        last = result.windows[-1] if result.windows else None
        if last is not None and last.requests == 0 and last.failures > 0:
            # the server stopped answering (killed, crashed): the windows before do not make a measurement
            return cls.failed(point, _nothing_succeeded(None, last.failures, result.errors, " in the last window"))
        server, latency, spread = result.server, result.latency, result.spread
        row = cls(
            **point.columns(),
            throughput=result.throughput,
            p50_ms=_ms(latency["p50"]),
            p90_ms=_ms(latency["p90"]),
            p95_ms=_ms(latency["p95"]),
            p99_ms=_ms(latency["p99"]),
            mean_ms=_ms(latency["avg"]),
            throughput_low=spread.throughput_low,
            throughput_high=spread.throughput_high,
            p99_low_ms=_ms(spread.latency_low),
            p99_high_ms=_ms(spread.latency_high),
            stable=bool(result.stable),
            windows=len(result.windows),
            requests=result.requests,
            failures=result.failed,
            window_s=result.windows[-1].duration_s if result.windows else NAN,
            send_delay_us=result.send_delay_us,
            client_cpu_us=result.client_cpu_us,
            outputs_ok=result.checked > 0 and result.check_failures == 0,
            max_abs_diff=max_abs_diff,
            engine="workbench",
            measured_at=now(),
            warnings=" | ".join(result.warnings),
            stopped=result.stopped,
        )
        if server is None:
            return row
        return replace(
            row,
            queue_ms=_ms(server.queue_us),
            compute_input_ms=_ms(server.compute_input_us),
            compute_infer_ms=_ms(server.compute_infer_us),
            compute_output_ms=_ms(server.compute_output_us),
            overhead_ms=_ms(server.overhead_us),
            avg_batch=server.avg_batch,
        )

    @classmethod
    def from_perf_analyzer(
        cls, point: Point, row: Mapping[str, Any], outputs_ok: bool, max_abs_diff: float
    ) -> PointRow:
        """The row of a point perf_analyzer measured (``row``: one of ``perf_analyzer.parse_csv``'s
        or ``run_perf_analyzer``'s, in microseconds); its outputs were checked with one request
        before it ran. perf_analyzer gives no raw latencies: the throughput spread is the range of
        the three windows it pooled, the p99 spread is not known."""
        if not float(row.get("throughput") or 0) > 0:
            return cls.failed(point, _nothing_succeeded(row.get("requests"), None, {}))
        us = lambda key: row.get(key, NAN)  # noqa: E731
        pooled = list(row.get("windows", []))[-3:]
        notes = ["measured by perf_analyzer"] + list(row.get("warnings", []))
        return cls(
            **point.columns(),
            throughput=row["throughput"],
            p50_ms=_ms(us("p50_us")),
            p90_ms=_ms(us("p90_us")),
            p95_ms=_ms(us("p95_us")),
            p99_ms=_ms(us("p99_us")),
            mean_ms=_ms(us("latency_avg_us")),
            throughput_low=min(pooled) if pooled else NAN,
            throughput_high=max(pooled) if pooled else NAN,
            stable=bool(row.get("stable", True)),  # run_perf_analyzer marks a point it could not stabilise
            windows=len(row["windows"]) if "windows" in row else NAN,
            requests=row.get("requests", NAN),
            failures=0,
            window_s=row.get("window_s", NAN),
            outputs_ok=outputs_ok,
            max_abs_diff=max_abs_diff,
            queue_ms=_ms(us("server_queue_us")),
            compute_input_ms=_ms(us("server_compute_input_us")),
            compute_infer_ms=_ms(us("server_compute_infer_us")),
            compute_output_ms=_ms(us("server_compute_output_us")),
            engine="perf_analyzer",
            measured_at=now(),
            warnings=" | ".join(notes),
        )

    @classmethod
    def failed(cls, point: Point, error: str) -> PointRow:
        """The row of a point that could not be measured, saying why."""
        return cls(**point.columns(), error=error, measured_at=now())

    @property
    def key(self) -> tuple[str, int, int]:
        return (self.variant, self.batch_size, self.concurrency)

    # ---- what a search reads of it (sweep/search/base.py's SearchRow) -------------------------

    @property
    def objective(self) -> float:
        return self.throughput

    @property
    def objective_low(self) -> float:
        return self.throughput_low

    @property
    def objective_high(self) -> float:
        return self.throughput_high

    @property
    def latencies_ms(self) -> dict[str, float]:
        return {"p99": self.p99_ms}

    @property
    def is_usable(self) -> bool:
        return usable(self)

    @property
    def search_label(self) -> str:
        return f"{self.variant} batch {self.batch_size} concurrency {self.concurrency}"

    @property
    def search_point(self) -> dict[str, Any]:
        return {"batch_size": self.batch_size, "concurrency": self.concurrency}

    @property
    def search_figures(self) -> dict[str, float | None]:
        return {
            "throughput": None if math.isnan(self.throughput) else round(self.throughput, 3),
            "p99_ms": None if math.isnan(self.p99_ms) else round(self.p99_ms, 4),
        }

    def summary(self) -> str:
        """``"123.4 infer/s, p99 5.67 ms"``, or the error."""
        return self.error if self.error else f"{self.throughput:.1f} infer/s, p99 {self.p99_ms:.2f} ms"

    def pooled_text(self) -> str:
        """The figures over every request the point measured, as its row and the answer show them,
        each with its 95% interval where the row has one (a decision line states these first)."""
        return (
            f"over all its requests {self.throughput:.1f} infer/s{interval_text(self.throughput_low, self.throughput_high, 1)}, "
            f"p99 {self.p99_ms:.2f} ms{interval_text(self.p99_low_ms, self.p99_high_ms, 2)}"
        )

    def to_dict(self) -> dict[str, Any]:
        """The row as a table row (``COLUMNS`` order); NaN is written as null in JSON files."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PointRow:
        """A row as ``to_dict`` wrote it and JSON read it back (null numbers are NaN again).
        Columns this type does not know are left out."""
        values: dict[str, Any] = {}  # JSON values, as ``data`` holds them
        for f in fields(cls):
            if f.name not in data:
                continue
            value = data[f.name]
            values[f.name] = NAN if value is None and f.name in _NUMBER_COLUMNS else value
        return cls(**values)


COLUMNS = tuple(f.name for f in fields(PointRow))
# A point is identified by its variant (allocation + batching + parameters) and its load.
KEY_COLUMNS = ("variant", "batch_size", "concurrency")
INT_COLUMNS = ("instances", "cores_per_instance", "core_start", "core_end", "batch_size", "concurrency")
_NUMBER_COLUMNS = frozenset(f.name for f in fields(PointRow) if isinstance(f.default, float) and math.isnan(f.default))


def flag(value: Any) -> bool | None:
    """A yes/no column's value as read back from JSON, CSV or numpy; None when not recorded."""
    if value is None or value is _pandas_na() or (isinstance(value, float) and math.isnan(value)):
        return None
    if isinstance(value, str):
        return {"true": True, "false": False, "1": True, "0": False}.get(value.strip().lower())
    return bool(value)


def _pandas_na() -> Any:
    import pandas as pd  # only where a frame is read: rows are made without pandas

    return pd.NA


def _number(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return NAN


def usable(point: PointRow | Mapping[str, Any]) -> bool:
    """The one rule for a point whose numbers can be trusted: measured without an error, no failed
    requests, outputs matched. Takes a row, or a row's values (a dict, a frame's record)."""
    values = point.to_dict() if isinstance(point, PointRow) else point
    error = values.get("error")
    if error is not None and not (isinstance(error, float) and math.isnan(error)) and str(error).strip():
        return False
    failures = _number(values.get("failures"))
    return (
        not math.isnan(_number(values.get("throughput")))
        and not math.isnan(_number(values.get("p99_ms")))
        and (math.isnan(failures) or failures == 0)
        and flag(values.get("outputs_ok")) is True
    )
