"""workbench.tutorial: the target choice the notebooks print, per-run folders that never reuse an
earlier run, finding and comparing saved sweeps, and the example pieces the notebooks call.

The target choice is given `SystemInfo` snapshots of machines with and without the Neuron SDK
and a device, and one test compiles through a FAKE ``torch_neuronx`` (the SDK cannot be installed
here); everything else uses real files, a real tritonserver and, where installed, real TensorFlow
and transformers.
"""

from __future__ import annotations

import sys
import types
from datetime import datetime, timezone

import numpy as np
import pytest
import torch

from workbench import tutorial, zoo
from workbench.coremap import CoreRange, parse_allocations
from workbench.compiler import compile_model
from workbench.system import SystemInfo
from workbench.generate import GenerateSettings, render
from workbench.measure.store.results import append_point, compare_runs, load_run, write_record
from workbench.measure.engine.measure_settings import MeasureSettings


def machine(packages: dict[str, str | None], device: bool, cores: int | None = None) -> SystemInfo:
    return SystemInfo(neuron_devices=["/dev/neuron0"] if device else [], driver_loaded=device, neuron_cores=cores,
                      cores_source="none", device_records=None, instance_type=None, packages=packages,
                      cpu_model="test", cpu_count=2, usable_cpus=2, default_target="cpu")


NO_SDK = machine({"torch": "2.13.0"}, device=False)
NEURONX = {"torch": "2.13.0", "torch-neuronx": "2.5.0", "neuronx-cc": "2.16.0"}


def test_without_the_sdk_the_cpu_stands_in_and_says_so():
    choice = tutorial.choose_target("inf2", system=NO_SDK)
    assert (choice.compile_target, choice.serve_target, choice.on_neuron) == ("cpu", "cpu", False)
    assert choice.missing == ("torch-neuronx", "neuronx-cc")
    assert "No Neuron SDK here for inf2 (missing torch-neuronx, neuronx-cc)" in choice.message
    assert "Every number below is a CPU number, not a Neuron number." in choice.message
    assert "pip install neuronx-cc==2.26.6360.0 torch-neuronx==2.9.0.2.15.32035" in choice.message  # pinned: releases.py
    assert choice.tolerances == {"rtol": 1e-4, "atol": 1e-5}
    settings = MeasureSettings.for_target(choice, window_s=0.3)
    assert (settings.rtol, settings.atol, settings.window_s) == (1e-4, 1e-5, 0.3)
    assert choice.all_cores(cpus=4) == CoreRange(0, 3)


def test_sdk_without_a_device_compiles_for_neuron_and_serves_the_cpu_twin():
    choice = tutorial.choose_target("inf2", system=machine(NEURONX, device=False))
    assert (choice.compile_target, choice.serve_target) == ("inf2", "cpu")
    assert "no Neuron device" in choice.message and "CPU number" in choice.message


def test_sdk_and_device_serve_on_neuroncores():
    choice = tutorial.choose_target("trn1", system=machine(NEURONX, device=True))
    assert (choice.compile_target, choice.serve_target, choice.on_neuron) == ("trn1", "trn1", True)
    assert choice.message == "Neuron SDK and device found: compiling pytorch for trn1 and serving on NeuronCores."
    assert choice.core_range(CoreRange(0, 3), 2) == CoreRange(0, 3)
    assert choice.tolerances == {"rtol": 1e-2, "atol": 1e-2}
    assert (MeasureSettings.for_target(choice).rtol, MeasureSettings.for_target(choice, atol=0.5).atol) == (1e-2, 0.5)
    with pytest.raises(ValueError, match="NeuronCore count is unknown"):
        choice.all_cores()
    assert tutorial.choose_target("inf2", system=machine(NEURONX, device=True, cores=12)).all_cores() == CoreRange(0, 11)


def test_trn2_is_chosen_when_torchneuron_is_installed():
    """From Neuron 2.34 trn2/trn3 need TorchNeuron (torch-neuronx 2.13/2.14); the PyTorch/XLA
    torch-neuronx on a Trn2 host counts as the wrong SDK, and the CPU stands in."""
    torchneuron = {"torch": "2.14.0", "torch-neuronx": "2.14.3.1", "neuronx-cc": "2.28.7631.0"}
    choice = tutorial.choose_target("trn2", system=machine(torchneuron, device=True, cores=64))
    assert (choice.compile_target, choice.serve_target, choice.on_neuron) == ("trn2", "trn2", True)
    assert choice.all_cores() == CoreRange(0, 63)
    xla = tutorial.choose_target("trn2", system=machine(NEURONX, device=True, cores=64))
    assert xla.compile_target == "cpu" and xla.missing == ("torch-neuronx",)
    assert "torch-neuronx==2.14.3.1" in xla.hint
    assert tutorial.choose_target("trn2", system=NO_SDK).missing == ("torch-neuronx", "neuronx-cc")


def test_the_pypi_placeholder_is_not_the_sdk():
    placeholder = {"torch": "2.13.0", "torch-neuronx": "1.0", "neuronx-cc": "1.0.post1"}
    choice = tutorial.choose_target("inf2", system=machine(placeholder, device=True))
    assert choice.serve_target == "cpu" and choice.missing == ("torch-neuronx", "neuronx-cc")


def test_a_missing_framework_extra_is_named(monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorflow", None)  # import tensorflow now fails, as without the extra
    choice = tutorial.choose_target("inf2", "tensorflow", system=NO_SDK)
    assert not choice.framework_ready
    assert choice.message.startswith("tensorflow is not installed here (pip install tensorflow-cpu")
    monkeypatch.setitem(sys.modules, "transformers", None)
    lm = tutorial.choose_target("inf2", "transformers_neuronx", system=NO_SDK)
    assert lm.message.startswith("transformers is not installed here (pip install transformers")
    assert "dry run" in choice.message


@pytest.mark.parametrize("args, message", [
    (("inf3",), "target 'inf3': choose one of inf1, inf2, trn1, trn2"),
    (("inf2", "onnx"), "framework 'onnx': choose one of pytorch, tensorflow, transformers_neuronx"),
    (("inf1", "transformers_neuronx"), "transformers_neuronx runs on inf2/trn1 \\(or cpu\\), not inf1"),
    (("trn2", "transformers_neuronx"), "transformers_neuronx runs on inf2/trn1 \\(or cpu\\), not trn2"),
    (("trn2", "tensorflow"), "tensorflow runs on inf1/inf2/trn1 \\(or cpu\\), not trn2"),
])
def test_bad_choices_are_named(args, message):
    with pytest.raises(ValueError, match=message):
        tutorial.choose_target(*args, system=NO_SDK)


@pytest.mark.parametrize("neuron_range, instances, cpus, expected", [
    ("0:3", 2, 2, "0:1"), ("0:3", 2, 8, "0:3"), ("0:3", 2, 3, "0:1"), ("0:3", 2, 1, "0:1"), ("0:1", 1, 16, "0:1"),
])
def test_cpu_core_range_fits_the_machine_and_splits_evenly(neuron_range, instances, cpus, expected):
    choice = tutorial.choose_target("inf1", system=NO_SDK)
    assert choice.core_range(CoreRange.parse(neuron_range), instances, cpus=cpus) == CoreRange.parse(expected)


def test_each_run_gets_a_new_folder(tmp_path):
    now = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    first = tutorial.workspace("01-quickstart", root=tmp_path, now=now)
    (first.repository / "mine").mkdir()
    second = tutorial.workspace("01-quickstart", root=tmp_path, now=now)
    assert first.root == tmp_path / "01-quickstart" / "20260102-030405"
    assert second.root == tmp_path / "01-quickstart" / "20260102-030405-2"
    assert (first.repository / "mine").is_dir() and not any(second.repository.iterdir())
    assert second.sweep_dir() == second.root / "sweep"


def test_the_runs_folder_comes_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv(tutorial.RUNS_ENV, str(tmp_path / "elsewhere"))
    assert tutorial.workspace("x").root.parent == (tmp_path / "elsewhere" / "x").resolve()


@pytest.mark.parametrize("name", ["", "../up", "a b", "x/y"])
def test_bad_notebook_names_are_refused_before_anything_is_made(tmp_path, name):
    with pytest.raises(ValueError, match="notebook name"):
        tutorial.workspace(name, root=tmp_path)
    assert not any(tmp_path.iterdir())


def test_a_runs_path_that_is_a_file_is_refused(tmp_path):
    (tmp_path / "runs").write_text("not a folder")
    with pytest.raises(NotADirectoryError, match="is a file"):
        tutorial.workspace("01-quickstart", root=tmp_path / "runs")


def test_bad_sweep_labels_are_refused(tmp_path):
    with pytest.raises(ValueError, match="sweep label '../x'"):
        tutorial.workspace("n", root=tmp_path).sweep_dir("../x")


@pytest.mark.parametrize("cores, expected", [
    (1, "1x1"), (2, "1x1,2x1,1x2"), (4, "1x1,2x1,4x1,1x2,2x2,1x4"),
])
def test_allocations_use_the_cores_evenly(cores, expected):
    assert tutorial.allocations(cores) == parse_allocations(expected)


def saved_run(folder, model, started, points, status="complete", outputs_ok=True):
    """A run folder written through the results API, as a sweep leaves it."""
    folder.mkdir(parents=True)
    write_record(folder, {"label": folder.name, "model": model, "started": started, "status": status,
                          "planned_points": len(points)})
    for variant, batch in points:
        append_point(folder / "points.jsonl", {
            "variant": variant, "allocation": variant, "instances": 1, "cores_per_instance": 1, "core_start": 0,
            "core_end": 0, "batching": "as configured", "parameters": "", "batch_size": batch, "concurrency": 1,
            "throughput": 100.0 * batch, "p50_ms": 1.0, "p99_ms": 2.0, "mean_ms": 1.2, "stable": True,
            "outputs_ok": outputs_ok, "failures": 0, "avg_batch": 1.0, "error": None})
    return folder


def test_saved_runs_pair_the_newest_comparable_runs(tmp_path):
    old = saved_run(tmp_path / "01" / "a", "mlp", "2026-01-01T00:00:00+00:00", [("1x1", 1), ("1x1", 4)])
    other_model = saved_run(tmp_path / "06" / "b", "cnn", "2026-01-02T00:00:00+00:00", [("1x1", 1)])
    new = saved_run(tmp_path / "01" / "c", "mlp", "2026-01-03T00:00:00+00:00", [("1x1", 4), ("2x1", 4)])
    saved_run(tmp_path / "01" / "d", "mlp", "2026-01-04T00:00:00+00:00", [("1x1", 1)], status="cancelled")
    found = tutorial.saved_runs(tmp_path)
    assert found[:3] == [old, other_model, new]
    older, newer = tutorial.comparable_pair(found)
    assert (older.path, newer.path) == (old, new)
    assert len(compare_runs(older, newer).table) == 1
    table = tutorial.runs_table(tmp_path)
    assert list(table["label"]) == ["d", "c", "b", "a"]


def test_no_pair_without_common_points(tmp_path):
    saved_run(tmp_path / "a", "mlp", "2026-01-01T00:00:00+00:00", [("1x1", 1)])
    saved_run(tmp_path / "b", "mlp", "2026-01-02T00:00:00+00:00", [("2x1", 1)])
    assert tutorial.comparable_pair(tutorial.saved_runs(tmp_path)) is None
    assert tutorial.saved_runs(tmp_path / "missing") == []
    assert tutorial.runs_table(tmp_path / "missing").empty


def test_describe_run_states_facts_not_timings(tmp_path):
    good = load_run(saved_run(tmp_path / "g", "mlp", "2026-01-01T00:00:00+00:00", [("1x1", 1), ("2x1", 1)]))
    assert tutorial.describe_run(good) == (
        "sweep complete: 2 of 2 point(s) measured over variants 1x1, 2x1; served outputs match the reference "
        "at every point; 0 failed request(s), 0 point error(s)")
    bad = load_run(saved_run(tmp_path / "b", "mlp", "2026-01-01T00:00:00+00:00", [("1x1", 1)], outputs_ok=False))
    assert "DO NOT match" in tutorial.describe_run(bad)


def test_neuron_host_settings_refer_to_the_neuron_artifact_by_name(tmp_path):
    model = zoo.get("add_sub")
    artifact = compile_model(model.module, model.example_inputs(2), "cpu", out_dir=tmp_path / "a", name="add_sub")
    here = GenerateSettings(triton_model_dir=str(tmp_path / "repo" / "add_sub"), compiled_model=str(artifact.path),
                            copy_compiled_model=True, target="cpu", neuron_core_range="0:1", max_batch_size=4,
                            cpu_affinity=True)
    choice = tutorial.choose_target("inf1", system=NO_SDK)
    host = render(tutorial.for_neuron_host(here, choice, artifact, core_range=CoreRange(0, 3), repository=tmp_path / "host"))
    assert host.dest == tmp_path / "host" / "add_sub"
    assert (host.settings.target, host.settings.compiled_model) == ("inf1", "add_sub.inf1.pt")
    assert host.settings.for_other_machine and not host.settings.copy_compiled_model
    assert host.spec == artifact.spec and host.files.keys() == {"config.pbtxt", "1/model.py"}
    assert (host.core_map.start, host.core_map.end) == (0, 3)
    assert not (tmp_path / "host").exists()


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # the fake traces with torch.jit.trace
def test_a_neuron_compile_here_serves_its_cpu_twin_and_ships_the_neuron_file(tmp_path, monkeypatch):
    """FAKE torch_neuronx (the SDK cannot be installed here): its trace is torch.jit.trace, so the
    workbench's own handling of a Neuron artifact and its CPU twin is what is tested."""
    fake = types.ModuleType("torch_neuronx")
    fake.__doc__ = "FAKE torch_neuronx for tests"
    fake.trace = lambda func, example_inputs, **kwargs: torch.jit.trace(func, example_inputs)
    fake.dynamic_batch = lambda traced: traced
    fake.lazy_load = lambda trace, enable_lazy_load=True: None  # async-lazy-load page: marks the trace
    monkeypatch.setitem(sys.modules, "torch_neuronx", fake)
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "")  # the compile sets it; restored afterwards
    model = zoo.get("add_sub")
    choice = tutorial.choose_target("inf2", system=machine(NEURONX, device=False))
    artifact = compile_model(model.module, model.example_inputs(2), choice.compile_target, out_dir=tmp_path / "a",
                             name="add_sub", isolate=False)
    assert artifact.target == "inf2" and choice.servable(artifact) is artifact.cpu_artifact
    here = GenerateSettings(triton_model_dir=str(tmp_path / "repo" / "add_sub"), copy_compiled_model=True,
                            compiled_model=str(choice.servable(artifact).path), target=choice.serve_target,
                            neuron_core_range="0:0", max_batch_size=4)
    assert render(here).settings.target == "cpu"
    host = render(tutorial.for_neuron_host(here, choice, artifact, core_range=CoreRange(0, 1), repository=tmp_path / "host"))
    assert host.settings.compiled_model == artifact.path and host.settings.copy_compiled_model
    assert "1/add_sub.inf2.pt" in host.files and "1/add_sub.cpu.pt" not in host.files


def test_progress_bar_takes_the_workbench_progress_signature():
    with tutorial.progress_bar("steps") as progress:
        for done in range(4):
            progress(done, 3, f"step {done}")


def test_tiny_saved_model_and_its_reference(tmp_path):
    pytest.importorskip("tensorflow", reason="TensorFlow is an optional extra")
    from workbench.compiler.tensorflow import spec_from_saved_model

    path = tutorial.tiny_saved_model(tmp_path / "add_sub_tf")
    spec = spec_from_saved_model(path)
    assert [t.name for t in spec.inputs] == ["a", "b"] and [t.name for t in spec.outputs] == ["diff", "sum"]
    a, b = np.arange(8, dtype=np.float32).reshape(2, 4), np.ones((2, 4), np.float32)
    diff, total = tutorial.saved_model_reference(path, spec)([a, b])
    np.testing.assert_array_equal(diff, a - b)
    np.testing.assert_array_equal(total, a + b)
    with pytest.raises(FileExistsError, match="already exists"):
        tutorial.tiny_saved_model(path)


def test_greedy_generate_extends_the_prompt_to_the_length():
    pytest.importorskip("transformers", reason="transformers is an optional extra")
    from workbench.compiler.tnx import tiny_causal_lm

    prompt = np.array([[5, 9, 17], [7, 7, 40]], dtype=np.int64)
    out = tutorial.greedy_generate(tiny_causal_lm("gpt2", vocab_size=64, hidden_size=16, layers=1), prompt, 8)
    assert out.shape == (2, 8) and (out[:, :3] == prompt).all()


@pytest.mark.server
def test_example_runs_are_two_comparable_complete_sweeps(tmp_path):
    older, newer = tutorial.make_example_runs(tutorial.workspace("07-compare-runs", root=tmp_path),
                                              settings=MeasureSettings(engine="workbench", window_s=0.1, stable_windows=1,
                                                                        max_windows=1, time_limit_s=None))
    assert (older.label, newer.label) == ("mlp_batching_off", "mlp_batching_on")
    for run in (older, newer):
        assert run.complete and "served outputs match the reference at every point" in tutorial.describe_run(run)
    assert len(compare_runs(older, newer).table) == 2
    assert newer.record["base_config"]["dynamic_batching"] and "dynamic_batching" not in older.record["base_config"]
    assert len(tutorial.saved_runs(tmp_path)) == 2
