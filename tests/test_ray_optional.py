"""Ray is optional: without it the workbench imports, and `workbench sweep --ray` says in one line
how to install it, before anything is measured or written."""

from __future__ import annotations

import subprocess
import sys

BLOCK_RAY = "import sys; sys.modules['ray'] = None; "  # `import ray` raises ImportError, as where it is absent


def test_without_ray_the_workbench_imports_and_sweep_ray_says_how_to_install_it(tmp_path, generate_cpu_model):
    model = generate_cpu_model(tmp_path / "m")
    out = tmp_path / "run"
    code = (BLOCK_RAY + "from workbench.cli import main; import workbench.measure.cluster; "
            f"sys.exit(main(['sweep', {str(model)!r}, '--batch-sizes', '1', '--allocations', '1x1', "
            f"'--out', {str(out)!r}, '--ray']))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 2, done.stderr[-2000:]
    lines = [line for line in done.stderr.splitlines() if "error" in line]
    assert lines == ["workbench sweep: error: Ray is not installed here: pip install "
                     "'triton-neuron-workbench[ray]' (ray==2.60.0)"]
    assert not out.exists()

    # a vLLM-backend model's sweep on Ray says the same, before anything is measured or written
    llm = _vllm_model(tmp_path)
    code = (BLOCK_RAY + "from workbench.cli import main; "
            f"sys.exit(main(['sweep', {str(llm)!r}, '--out', {str(out)!r}, '--ray']))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 2, done.stderr[-2000:]
    assert [line for line in done.stderr.splitlines() if "error" in line] == lines
    assert not out.exists()


def test_sweep_ray_on_an_llm_model_refuses_what_ray_cannot_take_in_one_line(tmp_path, capsys):
    """A vLLM-backend model is swept on Ray too (tests/test_ray_llm_sweep.py); the flags that cannot
    apply there (a server given, a search, a new run over the old) are refused in the tensor sweep's
    words, in one line, before anything starts or is written."""
    from workbench.cli import main

    model = _vllm_model(tmp_path)
    code = main(["sweep", str(model), "--concurrency", "1", "--out", str(tmp_path / "run"), "--ray",
                 "--url", "127.0.0.1:8001", "--search", "adaptive", "--new-run"])
    assert code == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert len(errors) == 1
    assert errors[0].endswith("--ray measures the whole grid into a new or resumed --out; "
                              "drop --url, --search, --new-run")
    assert not (tmp_path / "run").exists()


def test_the_sweep_panel_on_ray_says_what_it_cannot_do_before_anything_runs(tmp_path, generate_cpu_model):
    """The panel's "on a Ray cluster": a search strategy and a backend comparison are refused in
    the sweep --ray's words, no server asked for (the nodes start their own), nothing written;
    without Ray, the one line that says how to install it."""
    model = generate_cpu_model(tmp_path / "m")
    beside, error = _started_on_ray_without_ray("sweep_panel", "SweepPanel", model, tmp_path / "r")
    assert "Ray is not installed here: pip install" in beside and "start the server" not in error

    from workbench.ui.shared_state import WorkbenchState
    from workbench.ui.sweep_panel import SweepPanel

    panel = SweepPanel(WorkbenchState(model.parent, name=model.name), runs_dir=tmp_path / "runs")
    c = panel.controls
    c["ray"].value = True
    c["budget_ms"].value, c["search"].value = 5.0, "bisection"
    c["compare"].allowed_tags = ["other"]
    c["compare"].value = ["other"]
    assert panel.start() is None
    error = c["error"].value
    assert "on a Ray cluster the whole grid is measured: strategy grid, not bisection" in error
    assert "compared models are measured on the running server, not on Ray" in error
    assert "start the server first" not in error and not (tmp_path / "runs").exists()


def test_a_variant_too_big_for_every_node_is_named_with_the_largest_node():
    """Ray keeps a task pending while no node can hold it; the sweep refuses it first (no Ray needed)."""
    from workbench.measure.cluster.ray_task import Ask, too_big_for_every_node

    nodes = [{"Alive": True, "Resources": {"CPU": 4.0, "neuron_cores": 2.0}},
             {"Alive": False, "Resources": {"CPU": 8.0, "neuron_cores": 8.0}},  # lost: it holds nothing now
             {"Alive": True, "Resources": {"CPU": 1.0, "neuron_cores": 8.0}}]
    fits = {"1x2": Ask(num_cpus=1, neuron_cores=2), "2x4": Ask(num_cpus=1, neuron_cores=8)}
    assert too_big_for_every_node(fits, nodes) is None
    too_big = {**fits, "4x4": Ask(num_cpus=1, neuron_cores=16), "8x2": Ask(num_cpus=1, neuron_cores=16)}
    assert too_big_for_every_node(too_big, nodes) == (
        "no node of this Ray cluster can hold variant 4x4 (and 1 more): it asks 1 CPU(s) and 16 neuron_cores, "
        "the largest node has 4 CPU(s) and 8 neuron_cores; use smaller allocations or add a node that has them")
    assert "asks 6 CPU(s), the largest node has 4 CPU(s)" in too_big_for_every_node({"6x1": Ask(num_cpus=6)}, nodes)


def _started_on_ray_without_ray(module: str, panel: str, model, runs) -> tuple[str, str]:
    """A sweep panel started "on a Ray cluster" where Ray is absent: what it shows beside the
    checkbox, and in its error line (start() must refuse)."""
    code = (BLOCK_RAY + "from workbench.ui.shared_state import WorkbenchState; "
            f"from workbench.ui.{module} import {panel}; "
            f"p = {panel}(WorkbenchState({str(model.parent)!r}, name={model.name!r}), runs_dir={str(runs)!r}); "
            "p.controls['ray'].value = True; assert p.start() is None; "
            "print(p.controls['ray_problem'].value); print('error:', p.controls['error'].value)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    beside, error = done.stdout.split("error:")
    return beside, error


def _vllm_model(folder):
    """A vLLM-backend model folder as the panel reads it (nothing of it is loaded: no engine starts)."""
    model = folder / "repo" / "tiny_llm"
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text('backend: "vllm"\ninstance_group [ { count: 1, kind: KIND_MODEL } ]\n')
    (model / "1" / "model.json").write_text('{"model": "facebook/opt-125m"}')
    return model


def test_the_llm_sweep_panel_on_ray_refuses_a_search_beside_the_strategy_before_anything_runs(tmp_path):
    """The LLM panel's "on a Ray cluster": no server asked for (the nodes start their own); a search
    strategy (and its effort rule) refused beside the strategy in the tensor panel's words, nothing
    written; back to the grid, or off Ray, the refusal goes."""
    from workbench.ui.llm_sweep_panel import LlmSweepPanel
    from workbench.ui.shared_state import WorkbenchState

    model = _vllm_model(tmp_path)
    panel = LlmSweepPanel(WorkbenchState(model.parent, name=model.name), runs_dir=tmp_path / "runs")
    c = panel.controls
    c["ray"].value = True
    c["search"].value = "adaptive"
    assert panel.start() is None
    beside = panel.search_link.problem_view("name").value
    assert "on a Ray cluster the whole grid is measured: strategy grid, not adaptive" in beside
    assert "start the server first" not in c["error"].value
    assert not (tmp_path / "runs").exists() and panel.run.task is None
    c["search"].value = "grid"
    assert "on a Ray cluster" not in panel.search_link.problem_view("name").value
    c["search"].value = "capacity"
    assert panel.start() is None
    assert "strategy grid, not capacity" in panel.search_link.problem_view("name").value
    c["ray"].value = False  # off Ray: the running server is asked for, the strategy is no problem
    assert "on a Ray cluster" not in panel.search_link.problem_view("name").value
    assert panel.start() is None and "start the server first (server panel)" in c["error"].value
    assert not (tmp_path / "runs").exists()


def test_the_llm_sweep_panel_on_ray_without_ray_says_how_to_install_it_beside_the_checkbox(tmp_path):
    model = _vllm_model(tmp_path)
    beside, error = _started_on_ray_without_ray("llm_sweep_panel", "LlmSweepPanel", model, tmp_path / "r")
    assert "Ray is not installed here: pip install &#x27;triton-neuron-workbench[ray]&#x27; (ray==2.60.0)" in beside
    assert error.strip() == "" and not (tmp_path / "r").exists()
