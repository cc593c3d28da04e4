"""What perf_analyzer writes, read: its ``-f`` CSV into the rows the workbench's own load generator
gives (``LoadResult.to_row``), its ``-v`` console output into windows per load level, and its
``--profile-export-file`` into each experiment's request span. Pure text in, values out: the run
itself is `perf_analyzer.run_perf_analyzer`'s."""

from __future__ import annotations

import csv
import io
import json
import os
import re
from pathlib import Path
from typing import Any

__all__ = ["parse_csv", "parse_passes", "request_spans", "unstable"]

# perf_analyzer's CSV header -> the workbench's row keys (LoadResult.to_row where they overlap).
_COLUMNS = {
    "Concurrency": "concurrency",
    "Request Rate": "request_rate",
    "Inferences/Second": "throughput",
    "Response Throughput": "response_throughput",
    "Client Send": "client_send_us",
    "Network+Server Send/Recv": "network_server_us",
    "Server Queue": "server_queue_us",
    "Server Compute Input": "server_compute_input_us",
    "Server Compute Infer": "server_compute_infer_us",
    "Server Compute Output": "server_compute_output_us",
    "Server Cache Hit": "server_cache_hit_us",
    "Server Cache Miss": "server_cache_miss_us",
    "Client Recv": "client_recv_us",
    "Avg latency": "latency_avg_us",
    "request/response": "request_response_us",
    "response wait": "response_wait_us",
}
_PERCENTILE_COLUMN = re.compile(r"^p(\d+(?:\.\d+)?) latency$")


def parse_csv(
    source: str | os.PathLike[str],
    *,
    model: str | None = None,
    protocol: str | None = None,
    batch_size: int | None = None,
) -> list[dict[str, Any]]:
    """Rows from perf_analyzer's ``-f`` CSV (a path or the text), in load order (perf_analyzer
    sorts by throughput). All times in microseconds, throughput in inferences/s; keys as in
    ``LoadResult.to_row``; columns this module does not know keep a snake_case name."""
    text = Path(source).read_text() if _is_path(source) else str(source)
    reader = csv.DictReader(io.StringIO(text))
    if reader.fieldnames is None or not ({"Concurrency", "Request Rate"} & set(reader.fieldnames)):
        raise ValueError("not a perf_analyzer CSV: the header has neither Concurrency nor Request Rate")
    rows = []
    for raw in reader:
        row: dict[str, Any] = {
            "source": "perf_analyzer",
            "model": model,
            "protocol": protocol,
            "batch_size": batch_size,
            "concurrency": None,
            "request_rate": None,
        }
        for column, value in raw.items():
            if column is None or value in (None, ""):
                continue
            match = _PERCENTILE_COLUMN.match(column)
            key = f"p{match[1]}_us" if match else _COLUMNS.get(column, _snake(column))
            row[key] = _number(value)
        if row["concurrency"] is not None:
            row["concurrency"] = int(row["concurrency"])
        rows.append(row)
    rows.sort(key=lambda r: r["concurrency"] if r["concurrency"] is not None else r["request_rate"])
    return rows


def _is_path(source: Any) -> bool:
    return isinstance(source, os.PathLike) or "\n" not in str(source)  # a CSV has a header line


def _snake(column: str) -> str:
    return re.sub(r"[^0-9a-z]+", "_", column.lower()).strip("_")


def _number(value: str) -> Any:
    try:
        number = float(value)
    except ValueError:
        return value  # GPU columns are "uuid:value;" strings
    return int(number) if number.is_integer() and "." not in value else number


_UNSTABLE = ("Failed to obtain stable measurement", "Please use a larger time window")
_PASS = re.compile(r"^\s*Pass \[(\d+)\] throughput: ([0-9.e+]+) infer/sec")
_REQUEST_COUNT = re.compile(r"^\s*Request count: (\d+)")
_LEVEL = re.compile(r"^(?:Request concurrency|Request Rate): ([0-9.]+)")


def unstable(output: str) -> bool:
    """Whether perf_analyzer stopped because its windows did not agree (or held no request)."""
    return any(message in output for message in _UNSTABLE)


def parse_passes(output: str) -> dict[float, dict[str, Any]]:
    """From ``-v`` console output, per load level: every window's throughput (``passes``) and the
    request count of the windows it pooled (``requests``, present when the level finished)."""
    levels: dict[float, dict[str, Any]] = {}
    current: dict[str, Any] | None = None
    for line in output.splitlines():
        if (match := _LEVEL.match(line)) is not None:
            current = levels.setdefault(float(match[1]), {"passes": []})
        elif current is not None and (match := _PASS.match(line)) is not None:
            current["passes"].append(float(match[2]))
        elif current is not None and "requests" not in current and (match := _REQUEST_COUNT.match(line)) is not None:
            current["requests"] = int(match[1])
    return levels


def request_spans(path: str | os.PathLike[str]) -> list[tuple[int, float]]:
    """Per experiment of a ``--profile-export-file`` (perf_analyzer's ``ProfileDataExporter`` layout:
    ``experiments[].requests[]`` with ``timestamp`` and ``response_timestamps``, ns): how many requests
    and the seconds from the first send to the last response. Why: with ``--request-count``
    perf_analyzer divides by the whole seconds it polled (``InferenceProfiler::Summarize`` computes
    the requests' own span, then drops it), so its throughput reads count / 1 s, count / 2 s..."""
    out = []
    for experiment in json.loads(Path(path).read_text()).get("experiments", []):
        requests = [r for r in experiment.get("requests", []) if r.get("response_timestamps")]
        first = min((int(r["timestamp"]) for r in requests), default=0)
        last = max((int(r["response_timestamps"][-1]) for r in requests), default=0)
        out.append((len(requests), (last - first) / 1e9))
    return out
