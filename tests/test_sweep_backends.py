"""One model through the Python backend and Triton's PyTorch backend in one measurement, from the
API (`measure.backends.compare_backends`) and from ``workbench sweep --compare``: real generated
directories, a real tritonserver (the real LibTorch backend where the shared build exists, the
Python-backend twin otherwise; each test asserts which served), rows that say so, plots grouped
by it. Never asserts timings."""

from __future__ import annotations

import argparse
import dataclasses
import sys

import pandas as pd
import pytest

from workbench.cli import generate as generate_cli
from workbench.generate.pytorch_backend import SERVED_AS_LIBTORCH, SERVED_AS_PYTHON
from workbench.generate.pytorch_backend.sweep import parse_sweep_setting
from workbench.measure.sweep.compare_backends import compare_backends
from workbench.measure.grid.plan import SweepError, SweepPlan
from workbench.measure.store.plots import comparison_plot, latency_vs_batch
from workbench.measure.store.results import compare_runs, list_runs, load_run
from workbench.measure.engine.measure_settings import MeasureSettings
from workbench.server import TritonServer
from workbench.server.pytorch import ENV_VAR, PYTHON_BACKEND
from workbench.tutorial.backend_comparison import measured_and_matched

pytestmark = [pytest.mark.server, pytest.mark.timeout(1200)]

QUICK = MeasureSettings(engine="workbench", window_s=0.2, stable_windows=2, max_windows=2, warmup_requests=1,
                        time_limit_s=None, min_latencies=10)


@pytest.fixture(scope="module")
def backend_dir(pytorch_backend_or_twin):
    return pytorch_backend_or_twin


@pytest.fixture(scope="module")
def models(tmp_path_factory, generate_cpu_model):
    """add_sub generated for the Python backend, and the same TorchScript archive for the PyTorch backend."""
    root = tmp_path_factory.mktemp("backends")
    python_dir = generate_cpu_model(root, "add_sub")
    archive = next(root.glob("compiled-*/add_sub*.pt"))
    parser = argparse.ArgumentParser(prog="workbench")
    generate_cli.register(parser.add_subparsers())
    args = parser.parse_args(["generate", "--backend", "pytorch", "--triton_model_dir", str(root / "repo" / "add_sub_pt"),
                              "--compiled_model", str(archive), "--max_batch_size", "8", "--instance-group-kind",
                              "KIND_CPU"])
    assert args.func(args) == 0
    return python_dir, root / "repo" / "add_sub_pt"


def _expected(backend_dir) -> str:
    return f"{SERVED_AS_LIBTORCH if backend_dir else SERVED_AS_PYTHON}, torchscript layout"


def test_sweep_settings_parse_in_the_logic_layer():
    assert parse_sweep_setting("threads=1, 2") == ("threads", [1, 2])
    assert parse_sweep_setting("torch_compile=on,off") == ("torch_compile", [True, False])
    assert parse_sweep_setting("INTRA_OP_THREAD_COUNT=1,2") == ("INTRA_OP_THREAD_COUNT", ["1", "2"])
    for bad, message in (("threads=one", "not a whole number"), ("inference_mode=maybe", "on or off"),
                         ("threads", "write SETTING=V1,V2"), ("instance_count=1,2", "allocations")):
        with pytest.raises(ValueError, match=message):
            parse_sweep_setting(bad)


def test_compare_backends_measures_both_and_rows_say_which_served(models, backend_dir, tmp_path):
    python_dir, pytorch_dir = models
    with pytest.raises(SweepError, match="does not exist for the torchscript layout"):
        compare_backends(SweepPlan(batch_sizes=(2,), allocations=("1x1",)), None, [python_dir, pytorch_dir], tmp_path / "bad",
                         backend_grid={"torch_compile": [True, False]})
    assert not (tmp_path / "bad").exists()  # every grid is checked before anything runs
    server = TritonServer(python_dir.parent, pytorch_backend=backend_dir)
    try:
        server.start()
        comparison = compare_backends(SweepPlan(batch_sizes=(1, 4), allocations=("1x1",)), server,
                                      [python_dir, pytorch_dir], tmp_path / "run",
                                      backend_grid={"inference_mode": [True, False]}, settings=QUICK)
    finally:
        server.stop()
    frame = comparison.frame
    print(f"\nserved by: {comparison.backends}", file=sys.stderr)
    assert comparison.backends == [PYTHON_BACKEND, _expected(backend_dir)]
    assert frame["error"].isna().all() and frame["outputs_ok"].all(), frame[["variant", "error", "outputs_ok"]]
    # notebook 08's check: True, or False and each point that failed, with why
    assert measured_and_matched(comparison) == "True"
    failed = frame.copy()
    failed.loc[0, "error"] = "variant load failed: no answer"
    failed.loc[1, ["outputs_ok", "warnings"]] = [False, "outputs failed the check in 1 of 3 checked response(s)"]
    lines = measured_and_matched(dataclasses.replace(comparison, frame=failed)).splitlines()
    assert lines[0] == "False" and len(lines) == 3
    assert lines[1] == f"  {frame['variant'][0]} batch 1 concurrency 1: variant load failed: no answer"
    assert lines[2].startswith(f"  {frame['variant'][1]} batch {frame['batch_size'][1]} concurrency 1: outputs did not "
                               "match (max abs diff ") and lines[2].endswith("in 1 of 3 checked response(s)")
    pt = frame[frame["model"] == "add_sub_pt"]
    assert sorted(set(pt["parameters"])) == ["INFERENCE_MODE=false", "INFERENCE_MODE=true"]
    assert set(pt["served_by"]) == {_expected(backend_dir)}
    assert all(v.startswith(_expected(backend_dir) + ": ") for v in pt["variant"])
    # each model's own run is on disk with the column too
    saved = pd.read_csv(tmp_path / "run" / "add_sub_pt" / "results.csv")
    assert set(saved["served_by"]) == {_expected(backend_dir)}
    assert set(comparison.runs["add_sub"].frame["served_by"]) == {PYTHON_BACKEND}
    # the comparison is a saved run of its own: listed with the others, its sub-runs labelled apart (issue 31)
    listed = list_runs(tmp_path)
    assert list(listed["path"]) == [str(tmp_path / "run")] and listed["points"].iloc[0] == len(frame)
    assert load_run(tmp_path / "run").record["kind"] == "backends" and len(load_run(tmp_path / "run").frame) == len(frame)
    assert [run.label for run in comparison.runs.values()] == ["add_sub", "add_sub_pt"]
    assert "compare_backends(" in comparison.record["reproduce"]["python"]
    summary = comparison.summary()
    assert f"batch 4, concurrency 1: {PYTHON_BACKEND}" in summary and f"  {_expected(backend_dir)} [" in summary
    assert "server: queue" in summary
    figure = latency_vs_batch(comparison.result())
    labels = [line.get_label() for ax in figure.axes for line in ax.get_lines()]
    assert any(label.startswith(PYTHON_BACKEND) for label in labels)
    assert any(label.startswith(_expected(backend_dir)) for label in labels)
    # issue 43 #5: the comparison carries the full record of what it measured, where and with what
    saved, plain = load_run(tmp_path / "run"), comparison.runs["add_sub"]
    for key in ("machine", "packages", "server_version", "server"):
        assert saved.record[key] == plain.record[key] and saved.record[key], key
    assert saved.record["model_dirs"] == {"add_sub": str(python_dir.resolve()), "add_sub_pt": str(pytorch_dir.resolve())}
    assert saved.record["backends"] == [PYTHON_BACKEND, _expected(backend_dir)]
    assert set(saved.record["served_by"]) == set(frame["variant"])
    # compared with a plain run: their shared points, the backend difference named, no "another machine"
    against = compare_runs(plain, saved)
    assert len(against.table) == len(plain.frame) > 0
    differences = against.differences()
    assert not any(line.startswith(("another machine", "other packages", "Triton ")) for line in differences)
    assert f"served by another backend: {PYTHON_BACKEND} -> {PYTHON_BACKEND}, {_expected(backend_dir)}" in \
        "\n".join(differences)
    assert comparison_plot(against).axes[0].has_data()  # not "the two runs share no points"
    # two plain runs through two backends are not "measured alike"
    summary = compare_runs(plain, comparison.runs["add_sub_pt"]).summary()
    assert f"served by another backend: {PYTHON_BACKEND} -> {_expected(backend_dir)}" in summary
    assert "measured alike" not in summary


def test_workbench_sweep_compare_cli(models, backend_dir, tmp_path, monkeypatch, capsys):
    from workbench.cli import main

    python_dir, pytorch_dir = models
    if backend_dir:
        monkeypatch.setenv(ENV_VAR, str(backend_dir))  # the server the CLI starts finds it there
    else:
        monkeypatch.delenv(ENV_VAR, raising=False)
    quick = ["--engine", "workbench", "--window-ms", "200", "--stable-windows", "2", "--max-windows", "2",
             "--time-limit-s", "0", "--min-latencies", "10", "--warmup", "1"]
    out = tmp_path / "cli"
    assert main(["sweep", str(python_dir), "--compare", str(pytorch_dir), "--backend-param", "threads=x",
                 "--out", str(out)]) == 2
    assert "--backend-param threads='x' is not a whole number" in capsys.readouterr().err and not out.exists()
    code = main(["sweep", str(python_dir), "--compare", str(pytorch_dir), "--backend-param", "threads=1,2",
                 "--batch-sizes", "2", "--out", str(out), *quick])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    joined = pd.read_csv(out / "results.csv")
    assert list(dict.fromkeys(joined["served_by"])) == [PYTHON_BACKEND, _expected(backend_dir)]
    assert sorted(set(joined[joined["model"] == "add_sub_pt"]["parameters"])) == [
        "INTRA_OP_THREAD_COUNT=1", "INTRA_OP_THREAD_COUNT=2"]
    assert (out / "plots" / "throughput_vs_latency.png").is_file()
    assert "grouped by backend" in captured.out and f"  {_expected(backend_dir)} [" in captured.out


def test_a_sweep_restores_a_loaded_twin_with_the_config_asked_for(models, tmp_path):
    """The server reports a twin's Python-backend config; restoring that after a sweep would look
    for a model.py the directory does not have (the load hung). Restore loads the PyTorch config."""
    from workbench.measure.sweep import run_sweep

    _, pytorch_dir = models
    server = TritonServer(pytorch_dir.parent, pytorch_backend=False)  # always the twin
    try:
        server.start()
        server.load("add_sub_pt")
        result = run_sweep(SweepPlan(batch_sizes=(2,), allocations=("1x1",)), server, pytorch_dir,
                           out_dir=tmp_path / "run", settings=QUICK, load_timeout_s=120)
        assert result.complete and result.record["sessions"][-1]["restored"] == ["loaded add_sub_pt"]
        assert server.is_model_ready("add_sub_pt") and server.model_config("add_sub_pt")["backend"] == "python"
        assert server.pytorch.requested_config("add_sub_pt") is not None
        assert "WORKBENCH_SWEEP_VARIANT" not in server.pytorch.requested_config("add_sub_pt")
    finally:
        server.stop()
