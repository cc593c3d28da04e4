"""Results on disk and the questions asked of them: resume log, reload, best configuration, run
comparison. Tables here are written by hand so the expected answers are known exactly."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from workbench.measure.engine.engines import EngineChoice
from workbench.measure.store.results import (
    COLUMNS,
    CSV_FILE,
    JSON_FILE,
    POINTS_FILE,
    ResultsError,
    SweepResult,
    append_point,
    best_point,
    compare_runs,
    describe_best,
    frame_from_rows,
    list_runs,
    load_run,
    read_points,
    write_exports,
    write_record,
)


def point(allocation="1x1", batch=1, concurrency=1, throughput=100.0, p99=10.0, **extra):
    instances, cores = (int(v) for v in allocation.split("x"))
    row = {
        "variant": allocation, "allocation": allocation, "instances": instances, "cores_per_instance": cores,
        "core_start": 0, "core_end": instances * cores - 1, "batching": "as configured", "parameters": "",
        "batch_size": batch, "concurrency": concurrency, "throughput": throughput,
        "p50_ms": p99 / 2, "p90_ms": p99 * 0.8, "p95_ms": p99 * 0.9, "p99_ms": p99, "mean_ms": p99 / 2,
        "stable": True, "windows": 3, "requests": 300, "failures": 0, "outputs_ok": True, "max_abs_diff": 0.0,
        "queue_ms": 0.1, "compute_input_ms": 0.1, "compute_infer_ms": 1.0, "compute_output_ms": 0.1,
        "overhead_ms": 0.2, "avg_batch": float(batch), "error": None, "measured_at": "2026-11-29T19:00:00+00:00",
    }
    row.update(extra)
    return row


KNOWN = [
    point("1x1", 1, 1, throughput=100, p99=5),
    point("1x1", 4, 1, throughput=300, p99=12),
    point("2x1", 1, 1, throughput=180, p99=6),
    point("2x1", 4, 1, throughput=520, p99=14),
    point("2x1", 8, 2, throughput=900, p99=40, failures=3),       # fastest, but requests failed
    point("1x2", 8, 1, throughput=800, p99=9, outputs_ok=False),  # fast and quick, but wrong outputs
]


def save_run(folder, rows, **record):
    folder.mkdir(parents=True, exist_ok=True)
    record = {"model": "add_sub", "status": "complete", "started": "2026-11-29T19:00:00+00:00", **record}
    for row in rows:
        append_point(folder / POINTS_FILE, row)
    write_record(folder, record)
    write_exports(folder, frame_from_rows(rows), record)
    return folder


def test_best_under_latency_budget_is_highest_throughput_within_it():
    best = best_point(frame_from_rows(KNOWN), latency_budget_ms=13)
    assert (best["allocation"], best["batch_size"]) == ("1x1", 4)
    best = best_point(frame_from_rows(KNOWN), latency_budget_ms=15)
    assert (best["allocation"], best["batch_size"]) == ("2x1", 4)


def test_best_for_throughput_floor_is_lowest_p99_reaching_it():
    best = best_point(frame_from_rows(KNOWN), min_throughput=150)
    assert (best["allocation"], best["batch_size"], best["p99_ms"]) == ("2x1", 1, 6)


def test_best_with_both_constraints_meets_both():
    best = best_point(frame_from_rows(KNOWN), latency_budget_ms=13, min_throughput=200)
    assert (best["allocation"], best["batch_size"]) == ("1x1", 4)
    assert best_point(frame_from_rows(KNOWN), latency_budget_ms=5, min_throughput=200) is None


def test_best_never_picks_failed_or_wrong_output_points():
    best = best_point(frame_from_rows(KNOWN))
    assert (best["allocation"], best["batch_size"], best["throughput"]) == ("2x1", 4, 520)


def test_describe_best_names_the_configuration_and_the_constraint():
    text = describe_best(frame_from_rows(KNOWN), latency_budget_ms=13)
    assert "p99 <= 13 ms" in text and "1x1" in text and "batch 4" in text and "300.0 infer/s" in text
    assert "2 point(s) excluded" in text
    text = describe_best(frame_from_rows(KNOWN), latency_budget_ms=1)
    assert text.startswith("No configuration meets p99 <= 1 ms")
    assert "Lowest p99: 1x1" in text and "Highest throughput: 2x1" in text


def test_describe_best_says_how_sure_the_order_is():
    """The sentence every screen shows (sweep panel, results tab, report, CLI) carries the
    answer's confidence against the best of another configuration."""
    apart = [point("2x1", 4, 1, throughput=520, p99=14, throughput_low=510, throughput_high=530),
             point("1x1", 4, 1, throughput=300, p99=12, throughput_low=290, throughput_high=310)]
    text = describe_best(frame_from_rows(apart), latency_budget_ms=20)
    assert text.endswith("Confidence: separable: best's throughput interval [510.0, 530.0] lies above the runner-up's "
                         "[290.0, 310.0] (in this run: a machine can drift more than that between runs).")
    close = [apart[0], point("1x1", 8, 1, throughput=515, p99=14, throughput_low=500, throughput_high=525)]
    assert "Confidence: not separable on this machine: intervals [510.0, 530.0] and [500.0, 525.0] overlap" \
        in describe_best(frame_from_rows(close), latency_budget_ms=20)
    # the lowest p99 above a throughput floor is another question: no throughput order to be sure of
    assert "Confidence" not in describe_best(frame_from_rows(close), min_throughput=100)


def test_describe_best_warns_about_an_unstable_winner():
    rows = [point("1x1", 1, 1, throughput=100, p99=5, stable=False)]
    assert "did not stabilise" in describe_best(frame_from_rows(rows))


def test_points_log_round_trip_and_torn_last_line(tmp_path):
    log = tmp_path / POINTS_FILE
    append_point(log, point("1x1", 1, 1, max_abs_diff=float("nan")))
    append_point(log, point("2x1", 1, 1))
    with open(log, "a") as handle:  # a crash in the middle of the third append
        handle.write('{"variant": "1x2", "batch')
    rows = read_points(log)
    assert [r["variant"] for r in rows] == ["1x1", "2x1"]
    assert rows[0]["max_abs_diff"] is None  # NaN is not JSON; written as null
    append_point(log, point("1x2", 1, 1))  # the next append starts on a fresh line
    assert [r["variant"] for r in read_points(log)] == ["1x1", "2x1", "1x2"]


def test_points_log_bad_middle_line_is_named(tmp_path):
    log = tmp_path / POINTS_FILE
    log.write_text(json.dumps(point()) + "\nnot json\n" + json.dumps(point("2x1")) + "\n")
    with pytest.raises(ResultsError, match="line 2"):
        read_points(log)


def test_saved_run_reloads_from_folder_and_from_json(tmp_path):
    folder = save_run(tmp_path / "run1", KNOWN)
    run = load_run(folder)
    assert run.complete and run.record["model"] == "add_sub"
    assert list(run.frame.columns) == list(COLUMNS)
    pd.testing.assert_frame_equal(run.frame, frame_from_rows(KNOWN))
    again = load_run(folder / JSON_FILE)
    pd.testing.assert_frame_equal(again.frame, run.frame)
    csv = pd.read_csv(folder / CSV_FILE)
    assert csv["throughput"].tolist() == [r["throughput"] for r in KNOWN]


def test_load_run_refuses_a_folder_without_a_run(tmp_path):
    with pytest.raises(ResultsError, match="no run.json"):
        load_run(tmp_path)


def test_list_runs_finds_every_run(tmp_path):
    save_run(tmp_path / "a", KNOWN[:2], started="2026-11-29T18:00:00+00:00", planned_points=4)
    save_run(tmp_path / "b", KNOWN, started="2026-11-29T19:00:00+00:00")
    (tmp_path / "not-a-run").mkdir()
    runs = list_runs(tmp_path)
    assert runs["label"].tolist() == ["b", "a"]
    assert runs["points"].tolist() == [6, 2]
    assert runs.loc[1, "planned"] == 4
    assert runs.loc[0, "best_throughput"] == 520


def test_compare_runs_joins_on_point_keys_with_ratios(tmp_path):
    a = save_run(tmp_path / "before", KNOWN[:4])
    faster = [dict(r, throughput=r["throughput"] * 2, p99_ms=r["p99_ms"] / 2) for r in KNOWN[1:4]]
    b = save_run(tmp_path / "after", faster + [point("1x2", 2, 1)])
    comparison = compare_runs(a, b)
    assert len(comparison.table) == 3
    assert comparison.table["throughput_ratio"].tolist() == [2.0, 2.0, 2.0]
    assert comparison.table["p99_ratio"].tolist() == [0.5, 0.5, 0.5]
    assert comparison.only_a["variant"].tolist() == ["1x1"] and comparison.only_a["batch_size"].tolist() == [1]
    assert comparison.only_b["variant"].tolist() == ["1x2"]
    text = comparison.summary()
    assert "'after' vs 'before': 3 common point(s)" in text and "Throughput x2.00 median" in text
    assert "1 point(s) only in 'before', 1 only in 'after'" in text


def test_compare_runs_without_common_points_says_so():
    a = SweepResult(frame_from_rows([point("1x1")]), {"label": "a"})
    b = SweepResult(frame_from_rows([point("2x1")]), {"label": "b"})
    assert "share no points" in compare_runs(a, b).summary()


def test_comparing_runs_says_how_they_differ_before_the_ratios():
    rows = [point("1x1", 1, 1), point("1x1", 4, 1)]
    record_a = {"label": "a", "settings": {"model": "m", "window_s": 0.5, "stable_windows": 3},
                "server_version": "2.51.0", "machine": {"cpu_model": "EPYC", "usable_cpus": 2},
                "packages": {"torch": "2.13.0"}}
    record_b = {"label": "b", "settings": {"model": "m", "window_s": 2.0, "stable_windows": 3},
                "server_version": "2.52.0", "machine": {"cpu_model": "Xeon", "usable_cpus": 2},
                "packages": {"torch": "2.13.0"}}
    a = SweepResult(frame_from_rows(rows), record_a)
    b = SweepResult(frame_from_rows(rows[:1] + [point("2x1", 1, 1)]), record_b)
    comparison = compare_runs(a, b)
    differ = comparison.differences()
    assert differ == ["measured differently: window_s 0.5 -> 2.0",
                      "different points: 1 in common, 1 only in 'a', 1 only in 'b' (ratios cover the common ones)",
                      "Triton 2.51.0 -> 2.52.0", "another machine: cpu_model 'EPYC' -> 'Xeon'"]
    text = comparison.summary()
    assert text.startswith("How the runs differ:") and text.index("window_s") < text.index("Throughput x")
    same = compare_runs(a, SweepResult(frame_from_rows(rows), dict(record_a, label="a2")))
    assert same.differences() == [] and same.summary().startswith("Both runs were measured alike")


def test_comparing_runs_names_the_engines_when_they_differ():
    """Both settings say engine "auto", but it resolved to perf_analyzer on one machine and to the
    built-in engine on the other: the settings alone would call them measured alike."""
    rows = [point("1x1", 1, 1)]
    # the record's "engine" entry as a sweep writes it (EngineChoice.to_dict)
    perf_analyzer = EngineChoice("perf_analyzer", ("perf_analyzer",), "found on PATH").to_dict()
    built_in = EngineChoice("workbench", None, "glibc 2.36 < 2.38").to_dict()
    record = {"label": "a", "settings": {"model": "m", "engine": "auto"}}
    a = SweepResult(frame_from_rows(rows), dict(record, engine=perf_analyzer))
    b = SweepResult(frame_from_rows(rows), dict(record, label="b", engine=built_in))
    differ = compare_runs(a, b).differences()
    assert len(differ) == 1 and differ[0].startswith("measured by another engine: perf_analyzer -> workbench")
    assert compare_runs(a, SweepResult(frame_from_rows(rows), dict(a.record, label="a2"))).differences() == []


def test_the_table_explains_unstable_points_and_p50_falling_with_batch_size():
    rows = [point("1x1", 1, 1, p99=10.0, queue_ms=0.2, compute_infer_ms=2.0),
            point("1x1", 4, 1, p99=6.0, queue_ms=0.1, compute_infer_ms=1.5, avg_batch=4.0),  # p50 3 < 5
            point("1x1", 8, 1, p99=40.0, stable=False, windows=10, queue_ms=12.0, compute_infer_ms=4.0)]
    table = SweepResult(frame_from_rows(rows), {"label": "r"}).table()
    notes = table["note"].tolist()
    assert notes[0] == ""
    assert notes[1] == ("p50 below batch 1's (5.00 ms): compute 1.70 vs 2.20 ms, queue 0.10 vs 0.20 ms, "
                        "executed batch 4.0 vs 1.0")
    assert notes[2].startswith("unstable after 10 windows: in the server queue 12.00 ms + compute 4.20 ms of p50 "
                               "20.00 ms, executed batch 8.0; requests waited longer than they computed")
    calm = SweepResult(frame_from_rows(KNOWN[:2]), {"label": "k"}).table()
    assert "note" not in calm.columns  # nothing surprising: no column


def test_two_runs_through_different_backends_are_not_measured_alike(tmp_path):
    """Issue 43 #5: a Python-backend run against a LibTorch run was called "measured alike"."""
    python = load_run(save_run(tmp_path / "py", [point(served_by="Python backend")]))
    libtorch = load_run(save_run(tmp_path / "pt", [point(served_by="Triton's PyTorch backend (LibTorch)")]))
    summary = compare_runs(python, libtorch).summary()
    assert "served by another backend: Python backend -> Triton's PyTorch backend (LibTorch)" in summary
    assert "measured alike" not in summary
    same = compare_runs(python, load_run(save_run(tmp_path / "py2", [point(served_by="Python backend")]))).summary()
    assert "measured alike (settings, engine, points, backend, server, machine, packages)" in same
