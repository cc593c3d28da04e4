"""Headless tests of the notebook panels that need no server: plain pytest, no kernel, no browser.

Panels are built, controls set and buttons clicked exactly as a user would; the assertions are on
the logic objects (GenerateSettings, Artifact, WriteResult) and on the files written. Compiles are
real CPU traces; only the Neuron-target cancel test injects a FAKE ``torch_neuronx`` (the SDK
cannot be installed here), and says so.
"""

from __future__ import annotations

import html
import re
import subprocess
import sys
import threading
import time
import types
from pathlib import Path

import pytest
import torch

from workbench import zoo
from workbench.compiler import Artifact, compile_model
from workbench.generate.config import from_text
from workbench.limits import thread_count_limit
from workbench.ui import ModelPanel, PreviewPanel, SettingsPanel, Workbench, WorkbenchState
from workbench.ui.background import TaskControls


def _text(html_value: str) -> str:
    """What a user reads in an HTML widget: tags dropped."""
    return html.unescape(re.sub(r"<[^>]+>", "", html_value))


@pytest.fixture(scope="module")
def add_sub_artifact(tmp_path_factory) -> Artifact:
    """One real CPU compile of the upstream QA model, shared by the settings/preview tests."""
    model = zoo.get("add_sub")
    return compile_model(model.module, model.example_inputs(2), "cpu",
                         out_dir=tmp_path_factory.mktemp("compiled"), name="add_sub")


@pytest.fixture
def panels(tmp_path, add_sub_artifact):
    state = WorkbenchState(tmp_path / "repo")
    settings, preview = SettingsPanel(state), PreviewPanel(state)
    state.name = "add_sub"
    state.artifact = add_sub_artifact
    return state, settings, preview


def test_settings_are_filled_from_the_compiled_model(panels, add_sub_artifact):
    state, settings, _ = panels
    c = settings.controls
    assert c["compiled_model"].value == add_sub_artifact.path
    assert [r.name.value for r in c["inputs"].rows] == ["INPUT__0", "INPUT__1"]
    assert [r.dims.value for r in c["outputs"].rows] == ["4", "4"]  # batch dim left to Triton
    assert settings.problems == []
    generated = state.generated
    assert generated is not None and generated.config.name == "add_sub"
    assert generated.config.max_batch_size == c["max_batch_size"].value > 0
    # turning batching off moves the batch dim into the config as -1, in the table too
    c["max_batch_size"].value = 0
    assert [r.dims.value for r in c["inputs"].rows] == ["-1x4", "-1x4"]
    assert list(state.generated.config.input[0].dims) == [-1, 4]


def test_core_map_follows_the_values_and_flags_idle_cores(panels, monkeypatch):
    from workbench.generate import settings_checks

    monkeypatch.setattr(settings_checks, "cpu_cores", lambda: 8)  # an 8-CPU machine: 0:7 splits with idle cores
    state, settings, preview = panels
    c = settings.controls
    c["core_range"].value = "0:7"
    c["instance_count"].value = 3
    shown = _text(c["core_map"].value)
    assert "instance 0: cores 0-1" in shown and "instance 2: cores 4-5" in shown
    assert "idle: cores 6-7 (2)" in shown
    assert "6idle" in shown and "7idle" in shown  # the per-core cells
    assert "cores 6-7 of 0:7 stay idle" in _text(c["warnings"].value)
    assert state.generated.core_map.instances == 3
    assert "idle: cores 6-7" in _text(preview.controls["core_map"].value)
    c["instance_count"].value = 4
    assert "idle" not in _text(c["core_map"].value).split("thread(s) per core", 1)[1]
    c["core_range"].value = "3:1"
    assert "reversed" in _text(settings.link.problem_view("neuron_core_range").value)
    assert "reversed" not in _text(c["core_map"].value)  # said once, beside the field
    assert state.generated is None and any("reversed" in p for p in settings.problems)
    assert not any("--neuron_core_range" in p for p in settings.problems)  # the CLI's words, not this form's


def test_bad_values_are_named_inline_and_nothing_is_published(panels):
    state, settings, preview = panels
    c = settings.controls
    c["max_batch_size"].value = 4
    c["dynamic_batching"].value = True
    c["preferred_batch_sizes"].value = "2,8"
    beside = settings.link.problem_view("preferred_batch_size")
    assert "preferred batch sizes 8 is larger than max batch size 4" in _text(beside.value)
    assert "1 problem(s) shown in red beside their fields" in _text(c["problems"].value)
    assert state.settings is None and state.generated is None
    assert preview.controls["write"].disabled
    c["preferred_batch_sizes"].value = "2,4"
    c["max_queue_delay_us"].value = "100"
    assert settings.problems == []
    batching = state.generated.config.dynamic_batching
    assert list(batching.preferred_batch_size) == [2, 4] and batching.max_queue_delay_microseconds == 100
    c["inputs"].rows[1].dims.value = "4xx"
    beside = _text(settings.link.problem_view("triton_input").value)
    assert "input row 2" in beside and "malformed shape" in beside
    c["inputs"].rows[1].dims.value = "4"
    c["max_queue_delay_us"].value = "soon"
    assert "max queue delay: 'soon' is not a whole number" in \
        _text(settings.link.problem_view("max_queue_delay_microseconds").value)


def test_out_of_range_numbers_are_errors_beside_their_field_never_clamped(panels):
    """Issue 31 #6: -3 instances became 1 and a max batch size of -4 became 0 (batching off, the
    tensors' dims changed) without a word; the messages that were shown sat at the bottom and spoke
    in CLI flags."""
    state, settings, preview = panels
    c = settings.controls
    good = settings.link.value
    for key, field, typed, label in (("instance_count", "triton_model_instance_count", -3, "instances"),
                                     ("max_batch_size", "max_batch_size", -4, "max batch size")):
        before = c[key].value
        c[key].value = typed
        assert c[key].value == typed  # what was typed stays in the field: nothing clamped
        beside = _text(settings.link.problem_view(field).value)
        assert beside.startswith(f"{label}: {typed} is less than") and "--" not in beside
        assert settings.link.problem_view(field).layout.display is None  # shown, under its field
        assert settings.link.field(field).children == (c[key], settings.link.problem_view(field))
        assert settings.link.value == good and [r.dims.value for r in c["inputs"].rows] == ["4", "4"]
        assert state.settings is None and state.generated is None  # no preview, no write
        assert preview.controls["tabs"].layout.display == "none" and preview.controls["write"].disabled
        preview.controls["write"].click()
        assert not state.model_dir.exists()
        c[key].value = before  # fixed: the message goes, the preview comes back
        assert settings.link.problem_view(field).value == "" and settings.problems == []
        assert state.generated is not None and not preview.controls["write"].disabled


def test_a_cpu_core_range_past_this_machines_cores_is_an_error_beside_it(panels):
    """Issue 31 #7: 0:99 on the CPU target was a warning at the bottom and a 100-cell core map."""
    from workbench.system import cpu_cores

    state, settings, _preview = panels
    c = settings.controls
    cores = cpu_cores()
    c["core_range"].value = f"0:{cores + 97}"
    beside = _text(settings.link.problem_view("neuron_core_range").value)
    assert f"core range 0:{cores + 97}: core {cores + 97} exists on no CPU of this machine" in beside
    assert f"it has {cores} CPU cores (0:{cores - 1})" in beside
    assert state.generated is None and "i0" not in _text(c["core_map"].value)  # no map of absent cores
    c["core_range"].value = f"0:{cores - 1}"
    assert settings.link.problem_view("neuron_core_range").value == "" and state.generated is not None


def test_write_creates_the_directory_and_never_overwrites_without_confirmation(panels):
    state, settings, preview = panels
    c = preview.controls
    dest = state.model_dir
    assert c["diff"].value == ""  # computed only while its tab is open
    c["tabs"].selected_index = 4
    assert c["tabs"].get_title(4) == "diff" and "does not exist yet" in _text(c["diff"].value)
    c["write"].click()
    assert preview.written is not None and preview.written.path == dest and preview.written.backup is None
    assert from_text((dest / "config.pbtxt").read_text()) == state.generated.config
    assert (dest / "1" / "model.py").read_text() == state.generated.model_py
    assert (dest / "1" / "add_sub.cpu.pt").is_file()  # the compiled model is copied in
    assert "the same as this preview" in _text(c["diff"].value)

    (dest / "notes.txt").write_text("mine")  # the user's own file in the model directory
    settings.controls["instance_count"].value = 2
    settings.controls["core_range"].value = "0:1"
    assert "count: 2" in _text(c["diff"].value) and "notes.txt" in _text(c["diff"].value)
    before = (dest / "config.pbtxt").read_text()
    c["write"].click()
    assert c["confirm_overwrite"].layout.display is None and "already exists" in _text(c["status"].value)
    assert (dest / "config.pbtxt").read_text() == before and (dest / "notes.txt").exists()
    c["cancel_overwrite"].click()
    assert c["confirm_overwrite"].layout.display == "none" and (dest / "config.pbtxt").read_text() == before
    c["write"].click()
    c["confirm_overwrite"].click()
    result = preview.written
    assert result.backup is not None and (result.backup / "notes.txt").read_text() == "mine"
    assert (result.backup / "config.pbtxt").read_text() == before
    assert from_text((dest / "config.pbtxt").read_text()).instance_group[0].count == 2
    assert str(result.backup) in _text(c["status"].value)


def test_config_edits_are_validated_inline_and_kept_across_setting_changes(panels):
    state, settings, preview = panels
    c = preview.controls
    generated_text = c["config_text"].value
    assert "name: &quot;add_sub&quot;" in c["config_view"].value or "add_sub" in _text(c["config_view"].value)
    c["config_text"].value = generated_text.replace("max_batch_size: 8", "max_batch_size: eight")
    assert re.search(r"config\.pbtxt line \d+, column \d+", _text(c["config_problems"].value))
    assert c["write"].disabled
    c["config_text"].value = generated_text.replace('name: "add_sub"', 'name: "other"')
    assert "name 'other' must be the model directory's name 'add_sub'" in _text(c["config_problems"].value)
    edited = generated_text.replace("max_batch_size: 8", "max_batch_size: 6")
    c["config_text"].value = edited
    assert c["config_problems"].value == "" and not c["write"].disabled
    settings.controls["threads_per_core"].value = 2  # a settings change must not drop the hand edit
    assert c["config_text"].value == edited and "hand edits" in _text(c["edit_notice"].value)
    c["write"].click()
    assert from_text((state.model_dir / "config.pbtxt").read_text()).max_batch_size == 6
    c["use_generated"].click()
    assert not preview.edited and 'string_value: "2"' in c["config_text"].value


def test_preview_shows_model_py_highlighted(panels):
    _, _, preview = panels
    shown = preview.controls["model_py"].value
    assert "style=" in shown  # pygments inline colours
    assert "def initialize" in _text(shown) and "def execute" in _text(shown)


def test_preview_docker_tab_passes_the_devices_holding_the_core_range(panels, monkeypatch):
    from workbench.generate import settings_checks

    monkeypatch.setattr(settings_checks, "cpu_cores", lambda: 4)  # a 4-CPU machine: cores 2-3 exist on the cpu target
    state, settings, preview = panels
    c = preview.controls
    settings.controls["core_range"].value = "2:3"
    settings.controls["instance_count"].value = 2
    assert c["instance_type"].value == "inf2.24xlarge"  # the smallest inf2 with cores 2-3
    shown = _text(c["docker"].value)
    assert "--device /dev/neuron1" in shown and "/dev/neuron0" not in shown
    assert f"{state.repository.resolve()}:/models" in shown and "--load-model=add_sub" in shown
    assert "target cpu: serve it here" in shown
    # the image is the host recipe's, shown beside the run with its pins and their sources
    assert "workbench/tritonserver-neuron:26.10-xla-pytorch" in shown
    assert "torch-neuronx==2.9.0.2.15.32035" in shown and "[SDK-xla-update, as of 2026-12-04]" in shown
    c["instance_type"].value = "inf1.6xlarge"
    assert "tritonserver:24.10-py3" in _text(c["docker"].value) and "aws-neuronx-dkms=2.24.*" in _text(c["docker"].value)
    c["instance_type"].value = "inf2.xlarge"  # 2 cores: 2:3 does not exist there
    assert "inf2.xlarge has cores 0..1" in _text(c["docker"].value)


def test_model_panel_compiles_a_users_module_with_a_live_log(tmp_path):
    class Scale(torch.nn.Module):
        def forward(self, x):
            return x * 3.0

    state = WorkbenchState(tmp_path / "repo")
    panel = ModelPanel(state, module=Scale(), example_inputs=(torch.ones(2, 5),), artifacts_dir=tmp_path / "art")
    settings = SettingsPanel(state)
    c = panel.controls
    assert c["source"].value == "module" and "Scale" in _text(panel._module_box.value)
    c["name"].value = "scale"
    task = panel.start_compile()
    assert task.join(timeout=120) and task.state == "done", task.error_text
    assert c["status"].value == "done" and c["compile"].disabled is False
    assert "torch.jit.trace" in panel.log.text
    artifact = state.artifact
    assert Path(artifact.path) == tmp_path / "art" / "scale.cpu.pt" and Path(artifact.path).is_file()
    assert state.module is not None and state.name == "scale"
    assert [r.dims.value for r in settings.controls["inputs"].rows] == ["5"]
    assert settings.problems == []

    stamp = Path(artifact.path).stat().st_mtime_ns
    task = panel.start_compile()  # same name again, without "replace"
    assert task.join(timeout=60) and task.state == "failed"
    assert "already exist" in _text(c["result"].value) and "scale.cpu.pt" in _text(c["result"].value)
    assert Path(artifact.path).stat().st_mtime_ns == stamp


def test_model_panel_refuses_missing_inputs_before_starting(tmp_path):
    state = WorkbenchState(tmp_path / "repo")
    panel = ModelPanel(state, module=torch.nn.Identity())
    assert panel.start_compile() is None
    assert "no example inputs" in _text(panel.controls["result"].value)
    panel.controls["source"].value = "zoo"
    panel.controls["name"].value = " "
    assert panel.start_compile() is None and "give the model a name" in _text(panel.controls["result"].value)
    panel.controls["name"].value = "m"
    panel.controls["example_batch"].value = 0  # was clamped to 1 without a word
    assert panel.controls["example_batch"].value == 0
    beside = panel.controls["example_batch_problem"]  # directly under the field
    assert "example batch: 0 is less than 1" in _text(beside.value) and beside.layout.display is None
    assert panel.start_compile() is None and "example batch: 0 is less than 1" in _text(panel.controls["result"].value)
    panel.controls["example_batch"].value = 2
    assert beside.value == "" and beside.layout.display == "none"


def test_model_panel_takes_a_torchscript_file_and_asks_for_its_tensors(tmp_path):
    scripted = torch.jit.trace(torch.nn.Linear(3, 2), torch.ones(1, 3))
    path = tmp_path / "linear.pt"
    scripted.save(str(path))
    state = WorkbenchState(tmp_path / "repo")
    panel, settings = ModelPanel(state), SettingsPanel(state)
    panel.controls["source"].value = "file"
    panel.controls["file_path"].value = str(tmp_path / "missing.pt")
    panel.controls["use_file"].click()
    assert "missing.pt' does not exist" in _text(panel.controls["result"].value)
    panel.controls["file_path"].value = str(path)
    panel.controls["use_file"].click()
    assert state.model_file == str(path) and state.artifact is None
    assert settings.controls["compiled_model"].value == str(path)
    assert "inputs and outputs are required" in _text(settings.link.problem_view("triton_input").value)
    settings.controls["name"].value = "linear"
    settings.controls["inputs"].add("INPUT__0", "FP32", "3")
    settings.controls["outputs"].add("OUTPUT__0", "FP32", "2")
    settings.controls["max_batch_size"].value = 4
    assert settings.problems == []
    assert state.generated.files["1/linear.pt"] == path


def test_cancel_stops_background_work_and_reenables_run():
    started = threading.Event()

    def wait_for_cancel(*, progress, cancel):
        progress(0, 10, "working")
        started.set()
        while not cancel.wait(0.05):
            pass

    controls = TaskControls("go")
    task = controls.start(wait_for_cancel)
    assert started.wait(10)
    assert controls.run_button.disabled and not controls.cancel_button.disabled
    assert controls.status.value == "working"
    controls.cancel_button.click()
    assert task.join(timeout=10)
    assert task.state == "cancelled" and controls.status.value == "cancelled"
    assert not controls.run_button.disabled and controls.cancel_button.disabled


def _fake_torch_neuronx(monkeypatch, trace) -> None:
    monkeypatch.delenv("NEURON_PLATFORM_TARGET_OVERRIDE", raising=False)
    fake = types.ModuleType("torch_neuronx")
    fake.__doc__ = "FAKE torch_neuronx for tests"
    fake.trace, fake.dynamic_batch = trace, lambda traced: traced
    fake.lazy_load = lambda trace, enable_lazy_load=True: None  # async-lazy-load page: marks the trace
    monkeypatch.setitem(sys.modules, "torch_neuronx", fake)


def test_an_inf2_compile_flows_to_settings_and_offers_the_cpu_twin(tmp_path, neuron_fakes):
    """The contract's FAKE torch_neuronx (tests/fake_neuron; the SDK cannot be installed here): its
    trace is a CPU ScriptModule standing in for a NEFF-backed one. What is checked is the panels'
    side: the inf2 artifact sets the target, the docker tab names the devices, and the CPU twin
    can be served here."""
    state = WorkbenchState(tmp_path / "repo")
    panel = ModelPanel(state, artifacts_dir=tmp_path / "art")
    settings, preview = SettingsPanel(state), PreviewPanel(state)
    panel.controls["zoo_model"].value = "mlp"
    panel.controls["target"].value = "inf2"
    task = panel.start_compile()
    assert task.join(timeout=180) and task.state == "done", task.error_text
    assert "FAKE neuronx-cc compile" in panel.log.text  # the fake SDK's trace ran (in the compile's child)
    assert state.artifact.target == "inf2" and not state.artifact.runs_on_cpu
    assert settings.controls["target"].value == "inf2" and settings.problems == []
    assert 'string_value: "inf2"' in preview.controls["config_text"].value
    assert "--device /dev/neuron0" in _text(preview.controls["docker"].value)
    assert "runs only on a Neuron device" in _text(panel.controls["result"].value)
    assert panel.controls["use_cpu_twin"].layout.display is None
    panel.controls["use_cpu_twin"].click()
    assert state.artifact.target == "cpu" and settings.controls["target"].value == "cpu"
    assert state.generated.settings.compiled_model == str(tmp_path / "art" / "mlp.cpu.pt")


def test_cancel_in_the_model_panel_kills_a_neuron_compile(tmp_path, monkeypatch):
    """FAKE torch_neuronx (the SDK cannot be installed here): its trace starts a child process
    that would run for minutes, standing in for neuronx-cc. Cancel in the panel must end it."""
    pid_file = tmp_path / "compiler.pid"

    def trace(*args, **kwargs):
        compiler = subprocess.Popen([sys.executable, "-c", "import time; print('fake neuronx-cc running', flush=True);"
                                     " time.sleep(300)"])
        pid_file.write_text(str(compiler.pid))
        compiler.wait()

    _fake_torch_neuronx(monkeypatch, trace)
    state = WorkbenchState(tmp_path / "repo")
    panel = ModelPanel(state, artifacts_dir=tmp_path / "art")
    panel.controls["zoo_model"].value = "mlp"
    panel.controls["target"].value = "inf2"
    task = panel.start_compile()
    deadline = time.monotonic() + 120
    while not pid_file.exists() and task.running and time.monotonic() < deadline:
        time.sleep(0.1)
    assert pid_file.exists(), task.error_text
    panel.controls["cancel"].click()
    assert task.join(timeout=60) and task.state == "cancelled", task.error_text
    assert panel.controls["status"].value == "cancelled" and state.artifact is None
    pid = int(pid_file.read_text())
    deadline = time.monotonic() + 30
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        try:
            if Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z":
                break
        except FileNotFoundError:
            break
        time.sleep(0.1)
    alive = Path(f"/proc/{pid}/stat").exists() and Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    assert not alive
    art = tmp_path / "art"
    assert not art.exists() or list(art.iterdir()) == []


def test_workbench_app_shares_one_state_between_its_tabs(tmp_path):
    app = Workbench(tmp_path / "repo")
    assert app.tabs.titles == ("model", "settings", "preview", "server", "sweep", "results")
    assert all(panel.state is app.state for panel in app.panels.values())
    model = app["model"]
    model.controls["zoo_model"].value = "mlp"
    model.controls["artifacts_dir"].value = str(tmp_path / "art")
    task = model.start_compile()
    assert task.join(timeout=120) and task.state == "done", task.error_text
    assert app["settings"].controls["name"].value == "mlp"
    assert 'name: "mlp"' in app["preview"].controls["config_text"].value
    app["preview"].controls["write"].click()
    assert (tmp_path / "repo" / "mlp" / "config.pbtxt").is_file()
    assert app["server"].controls["model"].value == "mlp"
    assert "text/plain" in app._repr_mimebundle_()


def test_transformers_neuronx_settings_have_their_own_controls(tmp_path):
    """The TNX_* sampling settings: shown only for that framework, blank = the compile's value,
    a bad value named inline, given values written as config parameters."""
    pytest.importorskip("transformers")
    from workbench.compiler.tnx import package_causal_lm, tiny_causal_lm

    artifact = package_causal_lm(tiny_causal_lm("llama"), out_dir=tmp_path / "compiled", name="lm")
    state = WorkbenchState(tmp_path / "repo")
    settings = SettingsPanel(state)
    c = settings.controls
    assert settings.tnx_box.layout.display == "none"
    state.name = "lm"
    state.artifact = artifact
    assert c["framework"].value == "transformers_neuronx" and settings.tnx_box.layout.display is None
    assert settings.problems == [], settings.problems
    c["tnx_batch_size"].value = "two"
    assert "transformers-neuronx batch size: 'two' is not a whole number" in \
        _text(settings.link.problem_view("tnx_batch_size").value)
    c["tnx_batch_size"].value = "2"
    c["tnx_amp"].value = "bf16"
    c["tnx_sequence_length"].value = "16"
    assert settings.problems == [], settings.problems
    params = {k: v.string_value for k, v in state.generated.config.parameters.items()}
    assert params["TNX_BATCH_SIZE"] == "2" and params["TNX_AMP"] == "bf16" and params["TNX_SEQUENCE_LENGTH"] == "16"
    c["framework"].value = "pytorch"
    assert settings.tnx_box.layout.display == "none"


def test_settings_controls_are_linked_to_one_generate_settings(panels, add_sub_artifact):
    """Widget -> field through the logic layer's parsers; field -> widget when the logic value changes."""
    from workbench.coremap import CoreRange
    from workbench.spec import TensorSpec

    state, settings, _ = panels
    c = settings.controls
    value = settings.link.value
    assert state.settings == settings.build_settings() and value.model_dir == state.repository / "add_sub"
    assert value.triton_input == (TensorSpec("INPUT__0", "FP32", (4,)), TensorSpec("INPUT__1", "FP32", (4,)))
    c["core_range"].value = " 0 : 1 "
    c["dynamic_batching"].value = True
    c["preferred_batch_sizes"].value = "2 4"
    c["max_queue_delay_us"].value = ""
    c["batching_mode"].value = True  # "one model call per request"
    value = settings.link.value
    assert value.neuron_core_range == CoreRange(0, 1) and value.preferred_batch_size == [2, 4]
    assert value.max_queue_delay_microseconds is None and value.disable_batch_requests_to_neuron is True
    assert value.tnx_batch_size is None and value.tnx_amp is None  # blank: the compile's or model.py's value
    assert state.settings == settings.build_settings() and state.settings.neuron_core_range == CoreRange(0, 1)
    assert state.settings_problems == []
    c["name"].value = "renamed"
    assert settings.link.value.model_dir == state.repository / "renamed" and state.name == "renamed"
    # the logic value changes (as a published artifact changes it): the controls follow
    settings.link.update(max_queue_delay_microseconds=250, neuron_core_range=CoreRange(0, 0))
    assert c["max_queue_delay_us"].value == "250" and c["core_range"].value == "0:0"
    assert state.generated.config.dynamic_batching.max_queue_delay_microseconds == 250
    state.target = "inf2"
    assert c["target"].value == "inf2" and settings.link.value.target == "inf2"
    c["threads_per_core"].value = 2
    c["outputs"].rows[0].dims.value = "x"
    assert state.settings is None and state.settings_problems == settings.problems
    assert settings.link.value.threads_per_core == 2  # the good edit is kept beside the bad one


def test_invalid_settings_hide_the_stale_preview_and_say_why_at_the_top(panels):
    state, settings, preview = panels
    assert preview.controls["tabs"].layout.display is None and preview.controls["invalid"].value == ""
    settings.controls["core_range"].value = "3:1"
    assert state.generated is None and preview.controls["tabs"].layout.display == "none"
    assert "not valid" in _text(preview.controls["invalid"].value)
    assert state.settings_problems and state.settings_problems[0] in _text(preview.controls["invalid"].value)
    assert preview.controls["write"].disabled
    settings.controls["core_range"].value = "0:0"
    assert preview.controls["tabs"].layout.display is None and preview.controls["invalid"].value == ""


def test_empty_plot_slots_take_no_room_until_they_have_a_picture():
    from workbench.ui.layout import plot_image

    image = plot_image()
    assert image.layout.display == "none"  # an empty Image is a broken-image icon in the browser
    image.value = b"\x89PNG\r\n"
    assert image.layout.display is None


def test_triton_config_fields_have_controls_and_the_preview_shows_each_config(panels):
    """The settings panel's Triton config fields reach the generated config (a bad value named
    inline); the preview lists config.pbtxt and every configs/<name>.pbtxt variant."""
    state, settings, preview = panels
    c = settings.controls
    c["dynamic_batching"].value = True
    c["instance_group_kind"].value = "KIND_CPU"
    c["rate_limiter_resources"].value = "R1:1, MEM:2:global"
    c["rate_limiter_priority"].value = 2
    c["priority_levels"].value = 2
    c["default_priority_level"].value = 1
    c["default_queue_policy"].value = "max_queue_size=16"
    c["priority_queue_policy"].value = "2:timeout_action=DELAY,default_timeout_microseconds=100"
    c["optional_inputs"].value = "INPUT__1"
    c["warmup"].value = 2
    c["response_cache"].value = True
    c["version_policy"].value = "latest:1"
    assert settings.problems == [], settings.problems
    cfg = state.generated.config
    group = cfg.instance_group[0]
    assert group.kind == group.KIND_CPU and [r.name for r in group.rate_limiter.resources] == ["R1", "MEM"]
    assert cfg.dynamic_batching.priority_levels == 2 and cfg.dynamic_batching.default_queue_policy.max_queue_size == 16
    assert cfg.dynamic_batching.priority_queue_policy[2].default_timeout_microseconds == 100
    assert cfg.input[1].optional and cfg.model_warmup[0].count == 2 and cfg.response_cache.enable
    assert cfg.version_policy.latest.num_versions == 1
    c["preserve_ordering"].value = True  # Triton refuses it with two priority levels
    assert "preserve ordering allows one priority level only" in \
        _text(settings.link.problem_view("preserve_ordering").value)
    assert state.generated is None
    c["preserve_ordering"].value = False
    c["version_policy"].value = "newest"
    assert "version policy 'newest': expected latest[:N], all or specific:V[,V]" in \
        _text(settings.link.problem_view("version_policy").value)
    c["version_policy"].value = ""
    c["dynamic_batching"].value = False  # the batcher's fields grey out and are not applied
    assert c["priority_levels"].disabled and settings.problems == []
    assert not state.generated.config.HasField("dynamic_batching")

    choice = preview.controls["config_choice"]
    assert choice.options == (("config.pbtxt", ""),)
    from dataclasses import replace
    from workbench import generate

    state.generated = generate.render(replace(state.settings, variants={"one": {"triton_model_instance_count": 1},
                                                                       "cpu": {"cpu_affinity": True}}))
    assert [label for label, _ in choice.options] == ["config.pbtxt", "configs/one.pbtxt", "configs/cpu.pbtxt"]
    choice.value = "cpu"
    assert "CPU_AFFINITY" in _text(preview.controls["config_view"].value)
    assert 'string_value: "true"' in state.generated.files["configs/cpu.pbtxt"]
    assert preview.controls["config_text"].layout.display == "none"
    choice.value = ""
    assert preview.controls["config_text"].layout.display is None


def test_the_backend_dropdown_and_pytorch_fields_drive_one_generate_settings(panels, add_sub_artifact):
    """Backend, layout and the PyTorch backend's parameters are controls linked to the same
    GenerateSettings; the preview shows the layout and who would serve it; write puts model.pt in."""
    state, settings, preview = panels
    c = settings.controls
    state.target = "inf2"
    c["backend"].value = "pytorch"
    value = settings.link.value
    assert value.backend == "pytorch" and value.target == "cpu" and value.runtime == ""
    assert c["core_range"].disabled and c["threads_per_core"].disabled and not c["instance_count"].disabled
    assert state.generated is not None and state.generated.config.backend == "pytorch"
    fields = c["pytorch_parameters"].fields
    fields["torchscript"]["INFERENCE_MODE"].value = "false"
    fields["torchscript"]["INTRA_OP_THREAD_COUNT"].value = "0"
    assert state.generated is None
    assert any("INTRA_OP_THREAD_COUNT = 0 must be at least 1 thread" in p for p in state.settings_problems)
    beside = c["pytorch_parameters"].problem_views["INTRA_OP_THREAD_COUNT"]  # directly under that field
    assert "INTRA_OP_THREAD_COUNT = 0 must be at least 1 thread" in _text(beside.value)
    assert beside.layout.display is None and c["pytorch_parameters"].problem_views["INFERENCE_MODE"].value == ""
    fields["torchscript"]["INTRA_OP_THREAD_COUNT"].value = "100000"  # below int32, past the host's threads
    assert state.generated is None
    assert f"INTRA_OP_THREAD_COUNT = 100000 is more threads than this machine can run: at most " \
        f"{thread_count_limit().value}" in _text(beside.value)
    fields["torchscript"]["INTRA_OP_THREAD_COUNT"].value = "1"
    assert beside.value == "" and beside.layout.display == "none"
    assert settings.link.value.parameters == {"INFERENCE_MODE": "false", "INTRA_OP_THREAD_COUNT": "1"}
    assert state.settings == settings.build_settings() and state.settings_problems == []
    shown = _text(preview.controls["model_py"].value)
    assert "torchscript layout for Triton's PyTorch backend" in shown and "served here as:" in shown
    assert f"1/model.pt  <- copy of {add_sub_artifact.path}" in shown
    assert "places nothing on cores" in _text(preview.controls["core_map"].value)
    preview.controls["write"].click()
    dest = state.model_dir
    assert from_text((dest / "config.pbtxt").read_text()).backend == "pytorch"
    assert (dest / "1" / "model.pt").read_bytes() == Path(add_sub_artifact.path).read_bytes()
    assert not (dest / "1" / "model.py").exists()
    # the logic value changes: the fields follow
    settings.link.update(parameters={"INFERENCE_MODE": True})
    assert fields["torchscript"]["INFERENCE_MODE"].value == "true"
    assert fields["torchscript"]["INTRA_OP_THREAD_COUNT"].value == ""
    # the PyTorch 2 layout shows its own fields and takes the TorchScript archive as the real runtime
    # does (no model.py: torch.jit.load(model.pt), uncompiled), saying so
    c["runtime"].value = "model.py"
    assert c["pytorch_parameters"].layout == "pytorch2" and settings.link.value.parameters == {}
    assert state.settings_problems == [] and state.generated.config.runtime == "model.py"
    assert "1/model.pt" in state.generated.files and "1/model.py" not in state.generated.files
    assert any("the PyTorch 2 runtime loads it with torch.jit.load" in w for w in state.generated.warnings)
    c["state_dict"].value = str(add_sub_artifact.path)
    assert any("is a TorchScript archive, which carries its weights" in p for p in state.settings_problems)
    c["state_dict"].value = ""
    # back to the Python backend: the PyTorch fields are dropped, model.py is generated again
    c["backend"].value = "python"
    value = settings.link.value
    assert value.backend == "python" and value.runtime == "" and value.parameters == {}
    assert state.generated is not None and "1/model.py" in state.generated.files and not c["core_range"].disabled


def test_switching_to_the_pytorch_backend_after_changing_the_core_range_stays_valid(panels):
    """Issue 31 item 1: the quickstart's core range 0:1, then the PyTorch backend: the core-range
    field is greyed out, so the value it holds must not be what makes the settings invalid."""
    state, settings, _preview = panels
    c = settings.controls
    state.target = "cpu"
    c["core_range"].value = "0:1"
    assert str(settings.link.value.neuron_core_range) == "0:1" and state.settings_problems == []
    c["backend"].value = "pytorch"
    assert c["core_range"].disabled
    assert state.settings_problems == [] and state.generated is not None, state.settings_problems
    assert state.generated.config.backend == "pytorch"
    assert settings.settings == state.settings == settings.build_settings()
    assert c["core_range"].value == str(settings.link.value.neuron_core_range) == "0:0"
    c["backend"].value = "python"
    assert not c["core_range"].disabled and state.settings_problems == []



def test_backend_switches_give_the_users_values_back_and_say_what_they_changed(panels):
    """Issue 43 item 6: Python (core range 0:1, 2 instances) -> PyTorch -> vLLM -> Python used to
    come back with core range 0:0 and 2 instances: an error the user did not cause. Each switch
    says, under the dropdown, which of the user's values it set aside and gives them back."""
    state, settings, _preview = panels
    c = settings.controls
    state.target = "cpu"
    c["core_range"].value, c["instance_count"].value = "0:1", 2
    assert state.settings_problems == [] and c["switch_notice"].value == ""
    c["backend"].value = "pytorch"
    notice = _text(c["switch_notice"].value)
    assert "does not read core range 0:1 -> 0:0" in notice and "kept" in notice, notice
    assert state.settings_problems == []
    c["backend"].value = "vllm"
    assert "instances 2 -> 1" in _text(c["switch_notice"].value)
    c["backend"].value = "python"
    value = settings.link.value
    assert str(value.neuron_core_range) == "0:1" and value.triton_model_instance_count == 2
    assert c["core_range"].value == "0:1" and c["instance_count"].value == 2
    assert state.settings_problems == [] and state.generated is not None, state.settings_problems
    notice = _text(c["switch_notice"].value)
    assert "given back:" in notice and "core range 0:1" in notice and "instances 2" in notice, notice
    # a target the backend does not serve: moved to one it does, and said
    state.target = "inf2"
    c["backend"].value = "pytorch"
    assert settings.link.value.target == "cpu" and "target inf2 -> cpu" in _text(c["switch_notice"].value)

_TORCHSCRIPT_CONFIG = """name: "{name}"
backend: "{backend}"
max_batch_size: 8
input [ {{ name: "INPUT__0" data_type: TYPE_FP32 dims: [ 4 ] }} ]
output [ {{ name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 4 ] }} ]
instance_group [ {{ kind: KIND_CPU count: 1 }} ]
"""


def test_the_sweep_panel_backend_fields_are_one_backend_sweep_checked_before_anything_runs(tmp_path):
    """The sweep panel's backend fields parse into the BackendSweep `workbench sweep --compare
    --backend-param` makes (one parser of 'threads=1,2'), and a grid a model cannot take is refused
    at Run, naming the setting, before a server or a run folder is touched."""
    from workbench.measure.sweep.compare_backends import BackendSweep
    from workbench.cli.sweep import backend_sweep_from_args
    from workbench.ui import SweepPanel

    repo = tmp_path / "repo"
    for name, backend in (("m_pt", "pytorch"), ("m_py", "python")):
        (repo / name).mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(_TORCHSCRIPT_CONFIG.format(name=name, backend=backend))
    panel = SweepPanel(WorkbenchState(repo, name="m_pt"), runs_dir=tmp_path / "runs")
    c = panel.controls
    assert panel.backend_link.value == BackendSweep() and not panel.backend_link.value.active
    c["backend_grid"].value = "threads=1, 2; inference_mode=on,off"
    c["compare"].value = ["m_py"]
    value = panel.backends()
    assert value.grid == {"threads": (1, 2), "inference_mode": (True, False)} and value.compare == ("m_py",)
    assert value == backend_sweep_from_args(types.SimpleNamespace(
        compare=["m_py"], backend_param=["threads=1,2", "inference_mode=on,off"]))
    assert value.model_dirs(repo / "m_pt") == [repo / "m_pt", repo / "m_py"]
    assert "x 4 backend variant(s)" in c["grid_size"].value and "each of 2 models" in c["grid_size"].value
    c["backend_grid"].value = "threads=two"
    assert panel.backend_link.problems == ["backend settings: threads='two' is not a whole number of threads"]
    assert panel.backend_link.value.grid == {"threads": (1, 2), "inference_mode": (True, False)}
    assert "is not a whole number" in panel.backend_link.problem_view("grid").value
    assert panel.start() is None and "threads=&#x27;two&#x27; is not a whole number" in c["error"].value
    c["backend_grid"].value = "threads=1; threads=2"
    assert "threads is given twice" in panel.backend_link.problems[0]
    c["backend_grid"].value = "torch_compile=on,off"  # parses; the TorchScript layout has no such switch
    assert panel.backend_link.problems == []
    assert panel.start() is None
    assert "does not exist for the torchscript layout" in html.unescape(c["error"].value)
    c["backend_grid"].value = ""
    c["compare"].value = ["nope"]
    assert panel.start() is None and "nope is not a model directory" in c["error"].value
    assert not (tmp_path / "runs").exists()
    c["compare"].value = []
    assert not panel.backends().active  # a plain sweep again


def test_the_triton_config_controls_are_linked_so_every_view_of_the_settings_agrees(panels):
    """The Triton-config controls go through `Linked` like the others: ``panel.settings``,
    ``build_settings()`` and ``state.settings`` are one value, and a change of the value shows."""
    from workbench.generate.options import QueuePolicy, RateLimiter, RateLimiterResource, Warmup

    state, settings, _preview = panels
    c = settings.controls
    c["dynamic_batching"].value = True
    c["rate_limiter_resources"].value = "R1:1, MEM:2:global"
    c["rate_limiter_priority"].value = 2
    c["default_queue_policy"].value = "max_queue_size=16"
    c["optional_inputs"].value = "INPUT__1"
    c["warmup"].value = 3
    c["warmup_data"].value = "random"
    c["response_cache"].value = True
    value = settings.settings
    assert value == settings.build_settings() == state.settings
    assert value.rate_limiter == RateLimiter((RateLimiterResource("R1", 1), RateLimiterResource("MEM", 2, True)), 2)
    assert value.default_queue_policy == QueuePolicy(max_queue_size=16) and value.optional_inputs == ["INPUT__1"]
    assert value.model_warmup == [Warmup(count=3, data="random")] and value.response_cache is True
    c["rate_limiter_resources"].value = "R1"  # no count: named, and the field keeps its last good value
    assert any("rate limiter resource 'R1'" in p for p in state.settings_problems) and state.settings is None
    assert settings.settings.rate_limiter.resources[0] == RateLimiterResource("R1", 1)
    settings.link.update(rate_limiter=None, default_queue_policy=QueuePolicy("DELAY", 100), version_policy=None)
    assert (c["rate_limiter_resources"].value, c["rate_limiter_priority"].value) == ("", 0)
    assert c["default_queue_policy"].value == "timeout_action=DELAY,default_timeout_microseconds=100"
    assert settings.settings == settings.build_settings() == state.settings
    c["dynamic_batching"].value = False  # the batcher's own fields go back to their defaults, shown
    assert settings.settings.default_queue_policy is None and c["default_queue_policy"].value == ""
    assert settings.settings == state.settings
