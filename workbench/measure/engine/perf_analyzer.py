"""Triton's perf_analyzer as a second engine: run it where it is installed and read its CSV into
the same rows the workbench's own load generator gives (``LoadResult.to_row``).

Why: perf_analyzer is the reference the field trusts. Running the same load levels through both
(same windows, stability, percentile, warm-up) shows whether the Python generator's numbers can
be believed on a given machine, and lets a user keep their perf_analyzer habits. Both engines
take the same `MeasureSettings`.

perf_analyzer has no Python API (its pip package only wraps the binary), so this is a
subprocess with ``-f FILE --verbose-csv``. The command may be a path or a command prefix (e.g. a
wrapper script that runs it through another loader); ``$PERF_ANALYZER`` names one too.
"""

from __future__ import annotations

import json
import math
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from workbench.measure.engine.measure_settings import MeasureSettings
from workbench.measure.engine.perf_analyzer_output import parse_csv, parse_passes, request_spans, unstable
from workbench.refusals import WorkbenchError
from workbench.tasks import Cancelled

__all__ = [
    "PerfAnalyzerError",
    "PerfAnalyzerNotFound",
    "find_perf_analyzer",
    "perf_analyzer_args",
    "run_perf_analyzer",
    "parse_csv",
    "parse_passes",
    "request_spans",
    "unstable",
    "write_input_data",
]

_LOAD_LINE = re.compile(r"^(?:Request concurrency|Request Rate): ")


class PerfAnalyzerNotFound(WorkbenchError, FileNotFoundError):
    """No perf_analyzer: the message says where it was looked for and how to get one."""


class PerfAnalyzerError(WorkbenchError, RuntimeError):
    """perf_analyzer ran and failed; the message quotes the end of its output."""

    def __init__(self, message: str, output: str, timed_out: bool = False) -> None:
        super().__init__(message)
        self.output = output
        self.timed_out = timed_out


def find_perf_analyzer(command: str | os.PathLike[str] | Sequence[str] | None = None) -> list[str]:
    """The command prefix to run perf_analyzer: ``command`` if given (a path, a shell-style
    string such as ``"/opt/wrap.sh"``, or an argv list), else ``$PERF_ANALYZER``, else
    ``perf_analyzer`` on PATH."""
    if command is None:
        command = os.environ.get("PERF_ANALYZER") or None
        source = "$PERF_ANALYZER"
    else:
        source = "the given command"
    if command is None:
        found = shutil.which("perf_analyzer")
        if found is None:
            raise PerfAnalyzerNotFound(
                "perf_analyzer is not on PATH and $PERF_ANALYZER is not set; install it (pip install "
                "perf-analyzer, or use the Triton SDK container) or pass its path / a wrapper command"
            )
        return [found]
    if isinstance(command, (str, os.PathLike)):
        text = os.fspath(command)
        argv = [text] if Path(text).exists() else shlex.split(text)
    else:
        argv = [os.fspath(part) for part in command]
    if not argv:
        raise PerfAnalyzerNotFound(f"{source} is empty")
    program = argv[0]
    if not (Path(program).is_file() and os.access(program, os.X_OK)) and shutil.which(program) is None:
        raise PerfAnalyzerNotFound(f"{source}: {program!r} is not an executable file or a command on PATH")
    return argv


def perf_analyzer_args(
    url: str,
    model: str,
    settings: MeasureSettings | None = None,
    *,
    batch_size: int = 1,
    concurrency: int | Sequence[int] | None = None,
    request_rate: float | Sequence[float] | None = None,
    distribution: str = "constant",
    percentile: float | None = None,
    csv_path: str | os.PathLike[str],
    input_data: str | os.PathLike[str] | None = None,
    model_version: str = "",
    interval_ms: int | None = None,
    request_count: int | None = None,
    extra_args: Sequence[str] = (),
) -> list[str]:
    """perf_analyzer arguments for the load levels ``measure()`` would run with the same ``settings``
    (protocol, window, stability, max windows, warm-up; perf_analyzer's stable windows are 3).

    ``concurrency`` / ``request_rate``: one level or a list of levels (each list becomes one
    perf_analyzer run over ``start:end:step``, so the list must be evenly spaced).
    ``interval_ms`` replaces the settings' window; ``request_count`` measures one window of that
    many requests with no stability check.
    """
    settings = MeasureSettings() if settings is None else settings
    if concurrency is not None and request_rate is not None:
        raise ValueError("give concurrency or request_rate, not both")
    if percentile is not None and float(percentile) != int(percentile):
        raise ValueError(f"perf_analyzer takes whole percentiles, got {percentile}")
    args = [
        "-m",
        model,
        "-u",
        url,
        "-i",
        settings.protocol,
        "-b",
        str(int(batch_size)),
        "--measurement-interval",
        str(interval_ms or max(1, round(settings.window_s * 1000))),
        "--stability-percentage",
        f"{settings.stability * 100:g}",
        "--max-trials",
        str(settings.max_windows),
        "-f",
        os.fspath(csv_path),
        "--verbose-csv",
    ]
    if model_version:
        args += ["-x", str(model_version)]
    if settings.warmup_requests:
        args += ["--warmup-request-count", str(settings.warmup_requests)]
    if percentile is not None:
        args += [f"--percentile={int(percentile)}"]
    if request_rate is not None:
        args += ["--request-rate-range", _range(request_rate, "request_rate"), "--request-distribution", distribution]
    else:
        args += ["--concurrency-range", _range(1 if concurrency is None else concurrency, "concurrency")]
    if input_data is not None:
        args += ["--input-data", os.fspath(input_data)]
    if request_count is not None:
        args += ["--request-count", str(int(request_count))]
    return args + [str(a) for a in extra_args]


def _range(levels: Any, name: str) -> str:
    values: list[Any] = [levels] if np.isscalar(levels) else list(levels)  # numbers, checked below
    if not values or any(v <= 0 for v in values):
        raise ValueError(f"{name} levels must be positive, got {levels!r}")
    text = [f"{v:g}" for v in values]
    if len(values) == 1:
        return text[0]
    steps = {round(b - a, 9) for a, b in zip(values, values[1:])}
    if len(steps) != 1 or steps.pop() <= 0:
        raise ValueError(f"{name} levels {values} are not evenly spaced and increasing; run them separately")
    return f"{text[0]}:{text[-1]}:{values[1] - values[0]:g}"


def write_input_data(inputs: Mapping[str, np.ndarray], path: str | os.PathLike[str]) -> Path:
    """perf_analyzer's ``--input-data`` JSON for one request's tensors (per sample: no batch dim
    for batching models), so both engines send the same values."""
    entry = {}
    for name, array in inputs.items():
        array = np.asarray(array)
        content = [v.decode() if isinstance(v, bytes) else v for v in array.ravel().tolist()]
        entry[name] = {"content": content, "shape": list(array.shape)}
    path = Path(path)
    path.write_text(json.dumps({"data": [entry]}))
    return path


# Model Analyzer's rule for a perf_analyzer run that could not stabilise (model_analyzer
# perf_analyzer/perf_analyzer.py, _auto_adjust_parameters_for_perf_config; constants.py): run it
# again with a window 1000 ms longer (MEASUREMENT_WINDOW_STEP), at most 10 times
# (perf_analyzer_max_auto_adjusts), on either of the two messages `unstable` looks for.
WINDOW_STEP_MS = 1000
MAX_ADJUSTS = 10


def run_perf_analyzer(
    url: str,
    model: str,
    settings: MeasureSettings | None = None,
    *,
    inputs: Mapping[str, np.ndarray] | None = None,
    timeout_s: float = 900.0,
    progress: Callable[[int, int, str], None] | None = None,
    cancel: threading.Event | None = None,
    **load: Any,
) -> list[dict[str, Any]]:
    """Run perf_analyzer (``settings.perf_analyzer``, else ``$PERF_ANALYZER``, else PATH) for the
    load levels in ``load`` (``batch_size``, ``concurrency``... see ``perf_analyzer_args``) and
    return its rows. ``inputs`` (name -> per-sample array) makes it send those values.

    A run that cannot stabilise is run again as Model Analyzer does (a window 1000 ms longer, up
    to 10 runs); a stable run whose pooled windows hold fewer than ``settings.min_latencies``
    requests, with windows long enough to hold them. Both within ``settings.time_limit_s`` (None:
    one run, no retry, as with the built-in engine). When no run was stable by then, one last run measures a fixed request count
    (``--request-count``, no stability check) so the point is not lost: its rows say
    ``stable False``. Each row also has ``requests`` (pooled), ``windows`` (perf_analyzer's
    throughput per window), ``window_s`` and ``attempts``.
    Raises PerfAnalyzerError with its output when it fails otherwise, Cancelled when ``cancel`` is set."""
    settings = MeasureSettings() if settings is None else settings
    argv = find_perf_analyzer(settings.perf_analyzer)
    levels = load.get("concurrency") if load.get("request_rate") is None else load["request_rate"]
    total = 1 if levels is None or np.isscalar(levels) else len(list(levels))
    deadline = None if settings.time_limit_s is None else time.monotonic() + settings.time_limit_s
    interval_ms = max(1, round(settings.window_s * 1000))
    with tempfile.TemporaryDirectory(prefix="workbench-pa-") as scratch:
        csv_path = Path(scratch) / "results.csv"
        input_data = write_input_data(inputs, Path(scratch) / "inputs.json") if inputs else None
        failure: PerfAnalyzerError | None = None  # the last attempt's, set by attempt()

        def attempt(
            number: int, budget_s: float | None = None, **extra: Any
        ) -> tuple[list[dict[str, Any]] | None, str]:
            nonlocal failure
            csv_path.unlink(missing_ok=True)
            args = perf_analyzer_args(url, model, settings, csv_path=csv_path, input_data=input_data, **load, **extra)
            budget = budget_s or (
                timeout_s if deadline is None else max(5.0, min(timeout_s, deadline - time.monotonic() + 5.0))
            )
            try:
                output = _run(argv + args + ["-v"], budget, total, progress, cancel)
            except PerfAnalyzerError as err:
                if unstable(err.output) or err.timed_out:
                    failure = err
                    return None, err.output
                raise
            if not csv_path.exists():
                raise PerfAnalyzerError(f"perf_analyzer wrote no CSV; its output ends:\n{_tail(output)}", output)
            rows = parse_csv(
                csv_path, model=model, protocol=settings.protocol, batch_size=int(load.get("batch_size", 1))
            )
            return _with_passes(rows, output, number, extra.get("interval_ms", interval_ms)), output

        best, output = None, ""
        # no time limit: one run, as perf_analyzer alone would (then the fallback below, bounded)
        for number in range(1, (MAX_ADJUSTS if deadline is not None else 1) + 1):
            rows, output = attempt(number, interval_ms=interval_ms)
            if rows is not None:
                best = rows
                short = min(r["requests"] for r in rows)
                if short >= settings.min_latencies:
                    return _done(progress, total, rows)
                longer = math.ceil(interval_ms * 1.1 * settings.min_latencies / max(short, 1))
            else:
                longer = interval_ms + WINDOW_STEP_MS
            if deadline is None or not _time_for(deadline, longer):
                break
            _say(
                progress,
                total,
                f"perf_analyzer run {number} {'was short of latencies' if rows else 'did not stabilise'}"
                f"; again with {longer} ms windows",
            )
            interval_ms = longer
        if best is not None:
            return _done(
                progress,
                total,
                [
                    dict(
                        r,
                        warnings=r["warnings"]
                        + [f"p99 from {r['requests']} latencies, fewer than the {settings.min_latencies} asked for"],
                    )
                    for r in best
                ],
            )
        # nothing stable in time: one window of a fixed request count, so the point is kept
        rate = _rate(output, int(load.get("batch_size", 1)))
        count = max(50, min(settings.min_latencies, int(rate * max(2.0, 2 * settings.window_s)))) if rate else 200
        _say(progress, total, f"perf_analyzer never stabilised; measuring {count} requests without a stability check")
        # its own budget, past the time limit: the point is kept only if this run may finish
        expected_s = total * count / rate if rate else 60.0
        export = Path(scratch) / "requests.json"
        rows, _ = attempt(
            number + 1,
            budget_s=min(timeout_s, 30.0 + 5 * expected_s),
            request_count=count,
            extra_args=["--profile-export-file", str(export)],
        )
        if rows is None:
            raise PerfAnalyzerError(
                f"{failure} (after {number} run(s) with longer windows and one without a stability check)", output
            )
        spans = request_spans(export) if export.exists() and len(rows) == 1 else []
        return _done(
            progress,
            total,
            [
                dict(
                    _over_its_span(r, spans, int(load.get("batch_size", 1))),
                    stable=False,
                    warnings=r["warnings"]
                    + [
                        f"perf_analyzer could not stabilise in {number} run(s) (last window {interval_ms} ms); these numbers are "
                        f"one window of {count} requests without a stability check"
                    ],
                )
                for r in rows
            ],
        )


def _over_its_span(row: dict[str, Any], spans: list[tuple[int, float]], batch_size: int) -> dict[str, Any]:
    """A --request-count row (one load level: perf_analyzer takes no more with it) with its
    throughput over its requests' own span (``request_spans``); perf_analyzer's own figure kept."""
    if len(spans) != 1 or spans[0][0] == 0 or spans[0][1] <= 0:
        return dict(
            row,
            warnings=row["warnings"]
            + [
                "perf_analyzer's throughput in --request-count mode is the count over "
                "the whole seconds it waited: it may read low"
            ],
        )
    requests, span_s = spans[0]
    return dict(
        row,
        throughput=requests * batch_size / span_s,
        pa_throughput=row["throughput"],
        requests=requests,
        span_s=span_s,
    )


def _with_passes(rows: list[dict[str, Any]], output: str, attempts: int, interval_ms: int) -> list[dict[str, Any]]:
    """The CSV rows with what the console said about their windows."""
    passes = parse_passes(output)
    out = []
    for row in rows:
        level = row["concurrency"] if row["concurrency"] is not None else row["request_rate"]
        seen = passes.get(float(level), {}) if level is not None else {}
        windows = seen.get("passes", [])
        out.append(
            dict(
                row,
                stable=True,
                windows=windows,
                requests=seen.get("requests", 0),
                attempts=attempts,
                window_s=interval_ms / 1000.0,
                warnings=[],
            )
        )
    return out


def _rate(output: str, batch_size: int) -> float:
    """Requests per second in the last windows perf_analyzer printed (0 when none)."""
    windows = [thr for level in parse_passes(output).values() for thr in level["passes"]]
    return float(np.median(windows[-3:])) / batch_size if windows else 0.0


def _time_for(deadline: float | None, interval_ms: int) -> bool:
    """Whether the limit leaves room for the three windows a stable run needs at least (each
    lasts about 1.2 windows: perf_analyzer sleeps that long, then times what it got)."""
    return deadline is None or deadline - time.monotonic() > 3 * 1.2 * interval_ms / 1000.0 + 1.0


def _done(
    progress: Callable[[int, int, str], None] | None, total: int, rows: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The rows, once progress says every level is done (a failed retry may have spoken last)."""
    if progress is not None:
        progress(total, total, "perf_analyzer done")
    return rows


def _say(progress: Callable[[int, int, str], None] | None, total: int, message: str) -> None:
    if progress is not None:
        progress(0, total, message)


def _run(argv: list[str], timeout_s: float, total: int, progress, cancel) -> str:
    """Run to completion, reporting each load level as perf_analyzer starts it; stop on cancel
    or timeout (the child only: it is ours, found by its pid)."""
    lines: list[str] = []
    process = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL
    )

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.append(line)
            if progress is not None and _LOAD_LINE.match(line):
                done = sum(1 for seen in lines if _LOAD_LINE.match(seen)) - 1
                progress(done, total, line.strip())

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    deadline = time.monotonic() + timeout_s
    try:
        while process.poll() is None:
            if cancel is not None and cancel.is_set():
                raise Cancelled("perf_analyzer cancelled")
            if time.monotonic() > deadline:
                raise PerfAnalyzerError(
                    f"perf_analyzer took longer than {timeout_s:g} s; stopped it", "".join(lines), timed_out=True
                )
            time.sleep(0.1)
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        reader.join(timeout=5)
    output = "".join(lines)
    if process.returncode != 0:
        raise PerfAnalyzerError(f"perf_analyzer failed (exit {process.returncode}):\n{_tail(output)}", output)
    if progress is not None:
        progress(total, total, "perf_analyzer done")
    return output


def _tail(output: str, lines: int = 15) -> str:
    return "\n".join(output.rstrip().splitlines()[-lines:])
