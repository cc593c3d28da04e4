"""perf_analyzer as a second engine: the CSV parser on real perf_analyzer output (fixtures in
tests/data/perf_analyzer, see its README for the commands), the argument mapping from measure()'s
settings, discovery errors, and one real run against a real server when perf_analyzer is
available (``perf_analyzer`` on PATH or ``$PERF_ANALYZER``, e.g. a wrapper such as
perf_analyzer_here.sh); otherwise that test is skipped with the reason."""

from __future__ import annotations

import math
import stat
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from workbench.measure.engine.measure_settings import MeasureSettings
from workbench.measure.engine.perf_analyzer import (
    PerfAnalyzerError,
    PerfAnalyzerNotFound,
    find_perf_analyzer,
    parse_csv,
    perf_analyzer_args,
    request_spans,
    run_perf_analyzer,
    write_input_data,
)
from workbench.tasks import Cancelled

DATA = Path(__file__).parent / "data" / "perf_analyzer"


def test_concurrency_csv_rows_in_load_order():
    rows = parse_csv(DATA / "concurrency_grpc_b4.csv", model="add", protocol="grpc", batch_size=4)
    # perf_analyzer wrote concurrency 2 first (sorted by throughput); rows come back by load level
    assert [r["concurrency"] for r in rows] == [1, 2]
    one = rows[0]
    assert one["source"] == "perf_analyzer" and one["model"] == "add" and one["batch_size"] == 4
    assert one["request_rate"] is None
    assert one["throughput"] == 17177
    assert (one["p50_us"], one["p90_us"], one["p95_us"], one["p99_us"]) == (205, 246, 265, 322)
    assert one["latency_avg_us"] == 229
    assert (one["server_queue_us"], one["server_compute_input_us"], one["server_compute_infer_us"],
            one["server_compute_output_us"]) == (8, 8, 48, 33)
    assert (one["client_send_us"], one["network_server_us"], one["client_recv_us"]) == (1, 128, 0)
    assert (one["request_response_us"], one["response_wait_us"]) == (1, 223)
    assert rows[1]["throughput"] == pytest.approx(7715.26)


def test_request_rate_csv():
    rows = parse_csv(DATA / "request_rate_http_b2.csv", protocol="http", batch_size=2)
    assert [r["request_rate"] for r in rows] == [200, 400]
    assert all(r["concurrency"] is None for r in rows)
    assert rows[1]["throughput"] == pytest.approx(799.397)
    assert rows[0]["p99_us"] == 4380


def test_extra_percentile_column_replaces_the_average():
    (row,) = parse_csv((DATA / "percentile97_grpc.csv").read_text())  # text works as well as a path
    assert row["p97_us"] == 3371
    assert "latency_avg_us" not in row
    assert row["p99_us"] == 5699


# Columns both engines fill (test_loadgen checks LoadResult.to_row has them too), so one table
# can hold both.
SHARED_KEYS = {
    "source", "model", "protocol", "batch_size", "concurrency", "request_rate", "throughput",
    "latency_avg_us", "p50_us", "p90_us", "p95_us", "p99_us", "server_queue_us",
    "server_compute_input_us", "server_compute_infer_us", "server_compute_output_us"}


def test_rows_share_the_load_generators_keys():
    (row, _) = parse_csv(DATA / "concurrency_grpc_b4.csv")
    assert SHARED_KEYS <= set(row)


def test_not_a_perf_analyzer_csv():
    with pytest.raises(ValueError, match="not a perf_analyzer CSV"):
        parse_csv("a,b\n1,2\n")


def test_arguments_mirror_measure_settings(tmp_path):
    settings = MeasureSettings(window_s=0.5, stability=0.1, max_windows=10, warmup_requests=20)
    args = perf_analyzer_args("127.0.0.1:8001", "mlp", settings, batch_size=8, concurrency=[1, 2, 3], percentile=99,
                              csv_path=tmp_path / "x.csv")
    text = " ".join(args)
    assert "-m mlp -u 127.0.0.1:8001 -i grpc -b 8" in text
    assert "--measurement-interval 500" in text and "--stability-percentage 10" in text
    assert "--max-trials 10" in text and "--warmup-request-count 20" in text
    assert "--percentile=99" in args and "--concurrency-range 1:3:1" in text
    assert f"-f {tmp_path / 'x.csv'} --verbose-csv" in text
    rate = perf_analyzer_args("h:8000", "m", MeasureSettings(protocol="http"), request_rate=[100, 300],
                              distribution="poisson", csv_path="y.csv")
    assert "-i http" in " ".join(rate) and "--warmup-request-count" not in rate  # default warm-up: perf_analyzer's
    assert "--request-rate-range 100:300:200" in " ".join(rate) and "--request-distribution poisson" in " ".join(rate)
    with pytest.raises(ValueError, match="not evenly spaced"):
        perf_analyzer_args("h:1", "m", concurrency=[1, 2, 4], csv_path="z")
    with pytest.raises(ValueError, match="not both"):
        perf_analyzer_args("h:1", "m", concurrency=1, request_rate=5, csv_path="z")
    with pytest.raises(ValueError, match="whole percentiles"):
        perf_analyzer_args("h:1", "m", percentile=99.9, csv_path="z")


def test_input_data_json(tmp_path):
    import json

    path = write_input_data({"X": np.arange(4, dtype=np.float32), "T": np.array([b"a", b"bc"], dtype=object)},
                            tmp_path / "in.json")
    data = json.loads(path.read_text())
    assert data == {"data": [{"X": {"content": [0.0, 1.0, 2.0, 3.0], "shape": [4]},
                              "T": {"content": ["a", "bc"], "shape": [2]}}]}


def test_discovery_errors(tmp_path, monkeypatch):
    monkeypatch.delenv("PERF_ANALYZER", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(PerfAnalyzerNotFound, match="not on PATH"):
        find_perf_analyzer()
    with pytest.raises(PerfAnalyzerNotFound, match="not an executable"):
        find_perf_analyzer(tmp_path / "missing")
    script = tmp_path / "pa wrapper.sh"
    script.write_text("#!/bin/sh\nexit 0\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    assert find_perf_analyzer(script) == [str(script)]  # a path with a space is one program
    monkeypatch.setenv("PERF_ANALYZER", f"'{script}' --extra")
    assert find_perf_analyzer() == [str(script), "--extra"]


def test_failure_quotes_the_output(tmp_path):
    """A failing command (a stand-in script: the error path does not need the real binary)."""
    script = tmp_path / "fails.sh"
    script.write_text("#!/bin/sh\necho 'Failed to obtain stable measurement.'\nexit 99\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    with pytest.raises(PerfAnalyzerError, match="exit 99") as err:
        run_perf_analyzer("127.0.0.1:1", "m", MeasureSettings(engine="perf_analyzer", perf_analyzer=script))
    assert "Failed to obtain stable measurement" in str(err.value)


def _perf_analyzer_or_skip() -> list[str]:
    try:
        return find_perf_analyzer()
    except PerfAnalyzerNotFound as err:
        pytest.skip(f"{err} (set PERF_ANALYZER to run the real perf_analyzer test)")


@pytest.mark.server
@pytest.mark.alone  # perf_analyzer must reach its stability
def test_real_run_against_a_real_server(tmp_path, triton_server):
    command = _perf_analyzer_or_skip()
    config = model_config_pb2.ModelConfig(name="add", backend="python", max_batch_size=8)
    config.input.add(name="X", data_type=model_config_pb2.TYPE_FP32, dims=[4])
    config.output.add(name="Y", data_type=model_config_pb2.TYPE_FP32, dims=[4])
    (tmp_path / "add" / "1").mkdir(parents=True)
    (tmp_path / "add" / "config.pbtxt").write_text(text_format.MessageToString(config))
    (tmp_path / "add" / "1" / "model.py").write_text(
        "import triton_python_backend_utils as pb\n"
        "class TritonPythonModel:\n"
        "    def execute(self, requests):\n"
        "        return [pb.InferenceResponse([pb.Tensor('Y', pb.get_input_tensor_by_name(r, 'X').as_numpy() + 1)])"
        " for r in requests]\n")
    server = triton_server(tmp_path)
    server.load("add")
    before = server.stats("add")
    seen = []
    settings = MeasureSettings(engine="perf_analyzer", perf_analyzer=command, window_s=0.5, stability=0.5,
                               max_windows=10)
    rows = run_perf_analyzer(server.grpc_url, "add", settings, batch_size=2, concurrency=[1, 2],
                             inputs={"X": np.ones(4, np.float32)}, progress=lambda *a: seen.append(a))
    assert [r["concurrency"] for r in rows] == [1, 2]
    assert all(r["throughput"] > 0 and r["p50_us"] > 0 for r in rows)
    assert seen[-1][:2] == (2, 2)
    from workbench.measure.engine.stats import server_breakdown
    delta = server_breakdown(before, server.stats("add"), "add")
    assert delta.inferences == 2 * delta.requests > 0  # it really sent batch-2 requests to this server
    # a run that cannot stabilise (0.0001%) ends in one --request-count window: the real export file
    # gives that window's throughput over its requests' own span
    never = MeasureSettings(engine="perf_analyzer", perf_analyzer=command, window_s=0.2, stability=1e-6,
                            max_windows=3, min_latencies=60, time_limit_s=None)
    (row,) = run_perf_analyzer(server.grpc_url, "add", never, batch_size=2, concurrency=1,
                               inputs={"X": np.ones(4, np.float32)})
    assert row["stable"] is False and row["requests"] >= 60 and 0 < row["span_s"] < 60
    assert row["throughput"] == pytest.approx(row["requests"] * 2 / row["span_s"])
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(Cancelled):
        run_perf_analyzer(server.grpc_url, "add", settings, cancel=cancel)


# --- runs that cannot stabilise: retried as Model Analyzer does -----------------------------------
# A stand-in perf_analyzer replays real perf_analyzer 2.60 console output (tests/data/perf_analyzer,
# see its README): unstable_grpc_c1.txt (exit 2, no CSV) or verbose_grpc_b2_c1-2.txt with its CSV,
# and logs every command line it was given. What is tested is the workbench's retry rule, not the tool.

def _replaying_perf_analyzer(tmp_path: Path, unstable_runs: int) -> tuple[Path, Path]:
    """A script that is unstable for its first ``unstable_runs`` runs (all of them when -1, except a
    run with --request-count), then stable; and the file its command lines go to."""
    log = tmp_path / "calls.txt"
    script = tmp_path / "perf_analyzer"
    script.write_text(f"""#!{sys.executable}
import shutil, sys
args = sys.argv[1:]
with open({str(log)!r}, "a") as f:
    f.write(" ".join(args) + "\\n")
runs = sum(1 for _ in open({str(log)!r}))
if "--request-count" not in args and ({unstable_runs} < 0 or runs <= {unstable_runs}):
    sys.stdout.write(open({str(DATA / "unstable_grpc_c1.txt")!r}).read())
    sys.exit(2)
shutil.copy({str(DATA / "verbose_grpc_b2_c1-2.csv")!r}, args[args.index("-f") + 1])
sys.stdout.write(open({str(DATA / "verbose_grpc_b2_c1-2.txt")!r}).read())
""")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script, log


def _calls(log: Path) -> list[list[str]]:
    return [line.split() for line in log.read_text().splitlines()]


def _value(args: list[str], flag: str) -> str | None:
    return args[args.index(flag) + 1] if flag in args else None


def test_the_console_output_gives_each_window_and_the_pooled_request_count():
    from workbench.measure.engine.perf_analyzer import parse_passes, unstable

    passes = parse_passes((DATA / "verbose_grpc_b2_c1-2.txt").read_text())
    assert passes == {1.0: {"passes": [540.797, 562.451, 390.317], "requests": 451},
                      2.0: {"passes": [567.42, 360.387, 354.426], "requests": 391}}
    failed = (DATA / "unstable_grpc_c1.txt").read_text()
    assert parse_passes(failed) == {1.0: {"passes": [176.559, 145.921, 155.813, 128.282]}}
    assert unstable(failed) and not unstable((DATA / "verbose_grpc_b2_c1-2.txt").read_text())


def test_an_unstable_run_is_run_again_with_a_window_1000_ms_longer(tmp_path):
    script, log = _replaying_perf_analyzer(tmp_path, unstable_runs=2)
    seen = []
    settings = MeasureSettings(engine="perf_analyzer", perf_analyzer=script, window_s=0.1, min_latencies=300,
                               time_limit_s=120)
    rows = run_perf_analyzer("127.0.0.1:1", "mlp", settings, batch_size=2, concurrency=[1, 2],
                             progress=lambda *a: seen.append(a[2]))
    calls = _calls(log)
    assert [_value(c, "--measurement-interval") for c in calls] == ["100", "1100", "2100"]
    assert all(_value(c, "--request-count") is None for c in calls)
    assert [(r["concurrency"], r["stable"], r["attempts"], r["window_s"], r["requests"]) for r in rows] == [
        (1, True, 3, 2.1, 451), (2, True, 3, 2.1, 391)]
    assert rows[0]["windows"] == [540.797, 562.451, 390.317] and rows[0]["warnings"] == []
    assert sum("did not stabilise; again with 1100 ms windows" in m for m in seen) == 1


def test_a_stable_run_short_of_latencies_runs_again_with_windows_that_hold_them(tmp_path):
    script, log = _replaying_perf_analyzer(tmp_path, unstable_runs=0)
    settings = MeasureSettings(engine="perf_analyzer", perf_analyzer=script, window_s=0.1, min_latencies=1000,
                               time_limit_s=600)
    rows = run_perf_analyzer("127.0.0.1:1", "mlp", settings, batch_size=2, concurrency=[1, 2])
    intervals = [int(_value(c, "--measurement-interval")) for c in _calls(log)]
    # the replayed output never holds 1000 latencies: the windows grow by 1.1 x 1000 / 391 each run,
    # until three windows of the next length (1.2 x each, + 1 s) would not fit in the 600 s limit
    assert intervals[:2] == [100, 282] and all(b > a for a, b in zip(intervals, intervals[1:]))
    after = math.ceil(intervals[-1] * 1.1 * 1000 / 391)
    assert len(intervals) == 8 and 3 * 1.2 * intervals[-1] / 1000 + 1 < 600 < 3 * 1.2 * after / 1000 + 1
    assert all(r["stable"] for r in rows)
    assert [w for w in rows[1]["warnings"]] == ["p99 from 391 latencies, fewer than the 1000 asked for"]


def test_never_stable_within_the_time_limit_keeps_the_point_as_unstable(tmp_path):
    script, log = _replaying_perf_analyzer(tmp_path, unstable_runs=-1)
    settings = MeasureSettings(engine="perf_analyzer", perf_analyzer=script, window_s=1.0, min_latencies=300,
                               time_limit_s=10.0)
    rows = run_perf_analyzer("127.0.0.1:1", "mlp", settings, batch_size=2, concurrency=[1, 2])
    calls = _calls(log)
    # 10 s leave room for one retry with 2 s windows (3 x 1.2 x 2 s + 1 s), not for 3 s ones (11.8 s);
    # then one --request-count run
    assert [_value(c, "--measurement-interval") for c in calls] == ["1000", "2000", "1000"]
    assert _value(calls[-1], "--request-count") is not None and _value(calls[0], "--request-count") is None
    assert [r["stable"] for r in rows] == [False, False]
    assert "could not stabilise in 2 run(s) (last window 2000 ms)" in rows[0]["warnings"][-1]


def test_without_a_time_limit_perf_analyzer_runs_once_then_keeps_the_point_unstable(tmp_path):
    """time_limit_s=None stops after max_windows, as perf_analyzer alone does: no longer windows."""
    script, log = _replaying_perf_analyzer(tmp_path, unstable_runs=1)
    settings = MeasureSettings(engine="perf_analyzer", perf_analyzer=script, window_s=0.1, time_limit_s=None)
    rows = run_perf_analyzer("127.0.0.1:1", "mlp", settings, batch_size=2, concurrency=[1, 2])
    calls = _calls(log)
    assert len(calls) == 2 and _value(calls[1], "--request-count") is not None
    assert [r["stable"] for r in rows] == [False, False]


def test_a_failure_that_is_not_instability_is_not_retried(tmp_path):
    script = tmp_path / "broken.sh"
    calls = tmp_path / "calls.txt"
    script.write_text(f"#!/bin/sh\necho run >> '{calls}'\necho 'error: failed to get model metadata'\nexit 1\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    with pytest.raises(PerfAnalyzerError, match="failed to get model metadata"):
        run_perf_analyzer("127.0.0.1:1", "m", MeasureSettings(engine="perf_analyzer", perf_analyzer=script))
    assert calls.read_text().count("run") == 1


# --- --request-count: perf_analyzer's throughput there is the count over whole seconds waited ------
# perf_analyzer 2.51's InferenceProfiler::Measure polls once a second until the count is in, and
# Summarize computes the requests' own span (ClampWindow) but divides by the whole wait: 1000
# requests done in 1.1 s read as 500 infer/s. The workbench reads the span from perf_analyzer's
# --profile-export-file (layout: ProfileDataExporter, experiments[].requests[] with ``timestamp`` and
# ``response_timestamps`` in ns) and divides by that instead.

def _export(path: Path, sends_ns: list[int], responses_ns: list[int]) -> None:
    import json

    requests = [{"timestamp": t0, "request_inputs": {}, "response_timestamps": [t1], "response_outputs": [{}]}
                for t0, t1 in zip(sends_ns, responses_ns)]
    path.write_text(json.dumps({"experiments": [{"experiment": {"mode": "concurrency", "value": 1},
                                                 "requests": requests, "window_boundaries": [0, 2_000_000_000]}],
                                "version": "2.51"}))


def test_request_spans_read_perf_analyzers_export(tmp_path):
    _export(tmp_path / "p.json", [1_000_000_000, 1_400_000_000, 1_900_000_000], [1_300_000_000, 1_800_000_000, 2_100_000_000])
    assert request_spans(tmp_path / "p.json") == [(3, pytest.approx(1.1))]


def test_the_request_count_fallback_divides_by_its_requests_span(tmp_path):
    """Never stable, so the last run measures a fixed count; its throughput comes from the export."""
    log = tmp_path / "calls.txt"
    script = tmp_path / "perf_analyzer"
    lines = (DATA / "verbose_grpc_b2_c1-2.csv").read_text().splitlines()
    one_row = "\n".join([lines[0], next(line for line in lines[1:] if line.startswith("1,"))]) + "\n"
    script.write_text(f"""#!{sys.executable}
import json, sys
args = sys.argv[1:]
with open({str(log)!r}, "a") as f:
    f.write(" ".join(args) + "\\n")
if "--request-count" not in args:
    sys.stdout.write(open({str(DATA / "unstable_grpc_c1.txt")!r}).read())
    sys.exit(2)
open(args[args.index("-f") + 1], "w").write({one_row!r})
requests = [{{"timestamp": 10**9 + k * 10**6, "response_timestamps": [10**9 + k * 10**6 + 900_000]}} for k in range(400)]
json.dump({{"experiments": [{{"requests": requests}}]}}, open(args[args.index("--profile-export-file") + 1], "w"))
""")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    settings = MeasureSettings(engine="perf_analyzer", perf_analyzer=script, window_s=0.1, time_limit_s=None)
    (row,) = run_perf_analyzer("127.0.0.1:1", "mlp", settings, batch_size=2, concurrency=1)
    assert "--profile-export-file" in log.read_text().splitlines()[-1]
    span_s = (399 * 10**6 + 900_000) / 1e9
    assert row["span_s"] == pytest.approx(span_s) and row["requests"] == 400
    assert row["throughput"] == pytest.approx(400 * 2 / span_s)
    assert row["pa_throughput"] == pytest.approx(497.807) and row["stable"] is False
