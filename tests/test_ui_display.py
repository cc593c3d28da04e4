"""What the app shows goes stale or misleads (issue 31): displays cleared when their input changes or a
new run starts, the smallest instance as the docker-run default, the log's newest line kept in view.
Plain pytest on the widgets' values; tests/browser/test_tabs.py checks the same in JupyterLab."""

from __future__ import annotations

from workbench.measure.store.results import SweepResult, frame_from_rows
from workbench.ui import Workbench
from workbench.ui.background import LogView
from workbench.ui.results_panel import ResultsPanel

from test_results import KNOWN, save_run


def test_docker_run_defaults_to_the_smallest_instance_with_the_cores(tmp_path):
    preview = Workbench(tmp_path / "repo")["preview"]
    assert preview._default_instance() == "inf2.xlarge"  # not inf2.8xlarge: same NeuronCores, 8x the vCPUs


def test_a_new_sweep_clears_the_last_runs_plots_and_an_error_goes_when_the_input_changes(tmp_path):
    sweep = Workbench(tmp_path / "repo")["sweep"]
    c = sweep.controls
    sweep._draw(SweepResult(frame_from_rows(KNOWN), {"label": "old"}))
    assert all(image.value for image in c["plots"].children) and c["plots"].layout.display != "none"
    assert sweep.start() is None  # no server, no model: refused, and the old plots are not this run's
    assert "start the server first" in c["error"].value
    c["batch_sizes"].value = "1,2"
    assert c["error"].value == ""
    sweep._draw(SweepResult(frame_from_rows(KNOWN), {"label": "old"}))
    sweep._out_dir = tmp_path / "never"
    sweep._clear_plots()
    assert not any(image.value for image in c["plots"].children) and c["plots"].layout.display == "none"


def test_the_results_tab_drops_a_run_it_can_no_longer_open(tmp_path):
    save_run(tmp_path / "a", KNOWN[:4], label="a")
    panel = ResultsPanel(runs_dir=tmp_path)
    panel.scan()
    panel.open(str(tmp_path / "a"))
    assert panel.controls["table"].value and panel.controls["plot"].value
    (tmp_path / "b").mkdir()
    assert panel.open(str(tmp_path / "b")) is None
    assert panel.controls["table"].value == "" and not panel.controls["plot"].value and panel.run is None
    panel.controls["runs_dir"].value = str(tmp_path / "elsewhere")
    assert panel.controls["error"].value == ""


def test_the_log_keeps_its_lines_from_scrolling_themselves():
    log = LogView(height="100px")
    for n in range(200):
        log.append(f"line {n}")
    log.flush()
    pre = log.view.value[log.view.value.index("<pre"):]
    assert "flex:none" in pre and "overflow:visible" in pre  # JupyterLab's pre{overflow:auto} must not win
    assert pre.endswith("line 199</pre></div>")


def test_the_server_tab_says_who_serves_pytorch_backend_models_and_why(tmp_path, monkeypatch):
    from workbench.server.pytorch import ENV_VAR, PyTorchBackend
    from workbench.ui.server_panel import pytorch_notice

    twin = pytorch_notice(None)
    assert "Python-backend twin" in twin and "notebook 08 builds one" in twin and ENV_VAR in twin
    real = pytorch_notice(PyTorchBackend(tmp_path / "backends", ("torchscript",), "given"))
    assert "real PyTorch backend at" in real and str(tmp_path / "backends") in real
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "no-cache"))
    monkeypatch.delenv(ENV_VAR, raising=False)
    from workbench.tutorial.backend_comparison import built_libtorch_backend

    assert built_libtorch_backend() is None  # what the tab and notebook 08 both ask


def test_progress_moves_within_a_point_and_window_counts_say_why_they_pass_the_maximum():
    from types import SimpleNamespace

    from workbench.measure.engine.loadgen.engine import Engine
    from workbench.ui.background import TaskControls

    controls = TaskControls("run")
    controls._on_progress(2.5, 8, "1x1 b4 c1: window 5 of up to 10")  # half-way through point 3 of 8
    assert controls.progress.value / controls.progress.max == 2.5 / 8
    engine = Engine.__new__(Engine)
    engine.plan, engine.until = SimpleNamespace(max_windows=10, time_limit_s=30.0), None
    assert engine._window_count(4) == "window 4 of up to 10"
    assert engine._window_count(22) == "window 22: not stable after 10, longer windows until the 30 s limit"
    engine.until = lambda windows: None  # a search's effort rule ends the point: no maximum to pass
    assert engine._window_count(12) == "window 12, measured until decided"


def test_a_failure_is_said_once(tmp_path):
    sweep = Workbench(tmp_path / "repo")["sweep"]

    def broken(progress, cancel):
        raise RuntimeError("the server went away")

    task = sweep.run.start(broken, on_done=sweep._finished)
    assert task.join(timeout=30)
    shown = sweep.run.status.value + sweep.controls["error"].value
    assert shown.count("the server went away") == 1 and "failed" in sweep.run.status.value


def test_a_wide_core_map_wraps_instead_of_scrolling_the_panel_sideways():
    from workbench.coremap import split_cores
    from workbench.ui.widget_values import core_map_html

    shown = core_map_html(split_cores(0, 99, instances=2))
    assert "flex-wrap:wrap" in shown and "<tr>" not in shown  # one 100-cell table row was 100 cells wide
    assert shown.count("title='core ") == 100
    assert max(len(line) for line in split_cores(0, 99, instances=2).describe().splitlines()) < 100
