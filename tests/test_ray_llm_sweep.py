"""LLM sweeps on a real Ray cluster with Triton's real vLLM backend (tests/ray_cluster.py: a head
and two worker nodes of one CPU): each variant of an `LlmPlan` a Ray task that starts its own
tritonserver with the vLLM backend on its node, the tiny LLM's weights shipped with the model
folder, and returns its rows to the one run folder, which reads back as any LLM run.

The shipping of the engine's folders is checked without Ray or vLLM; the sweep skips, saying what
is missing, without Ray or the vLLM environment. It compares no timing but runs ``alone``: in the parallel
pass its cluster and engines starved other servers' stubs (a load that never answered, a backend abort).
"""

from __future__ import annotations

import html
import json
import tempfile
from pathlib import Path

import psutil
import pytest
from vllm_model_dirs import TINY_LLM, tiny_llm_repository

from workbench.generate.backends import read_back
from workbench.measure.cluster.ray_kinds import LlmOnRay, ray_kind
from workbench.measure.cluster.ray_task import WORK_PREFIX, ShippedModel, engine_folders, pack_model
from workbench.measure.engine.measure_settings import MeasureSettings
from workbench.measure.engine.streaming import Slo
from workbench.measure.grid.plan import SweepError, SweepPlan
from workbench.measure.llm import LlmPlan

# the loosest SLO: the best and the front are asked of a run measured on a loaded 2-core machine
SLO = Slo(ttft_ms=60000.0, itl_ms=10000.0)
PLAN = LlmPlan(max_num_seqs=(4, 1), concurrency=(1,), input_tokens=16, output_tokens=8, slo=SLO, prompts=4)
# the shortest windows that still measure (a streamed request takes a second here)
SETTINGS = MeasureSettings(engine="workbench", window_s=1.0, stable_windows=2, max_windows=2, time_limit_s=4.0,
                           min_latencies=0, warmup_requests=2)
# the grid and windows the real-cluster sweep measures, as `workbench sweep` flags (the window: the
# LLM sweep's own 2 s, as the panel's; --window-ms 1000, the tensor sweep's default, reads as left alone)
FLAGS = ["--max-num-seqs", "4,1", "--concurrency", "1", "--input-tokens", "16", "--output-tokens", "8",
         "--prompts", "4", "--slo-ttft-ms", "60000", "--slo-itl-ms", "10000",
         "--stable-windows", "2", "--max-windows", "2", "--time-limit-s", "4", "--warmup", "2", "--no-plots",
         "--timeout", "600"]  # each node's engine start: 2 min beside the other here, longer in the parallel pass
# the same as the LLM sweep panel's controls (the window left at its default)
PANEL = {"max_num_seqs": "4,1", "tensor_parallel": "1", "instances": "1", "concurrency": "1", "input_tokens": 16,
         "output_tokens": 8, "slo_ttft_ms": 60000.0, "slo_itl_ms": 10000.0,
         "max_windows": 2, "time_limit_s": 4.0, "search": "grid",
         "load_timeout_s": 600.0}  # two engines starting at once on two CPUs: 2 min here, longer in the parallel pass


def test_the_weights_outside_the_model_folder_are_shipped_and_model_json_points_at_them(tmp_path):
    """The tiny LLM's model.json names its weights by the driver's path: the task gets the folder
    and a model.json naming where it unpacked it, and nothing of the driver's path."""
    repo = tiny_llm_repository(tmp_path / "driver" / "repo")
    weights = Path(json.loads((repo / TINY_LLM / "1" / "model.json").read_text())["model"])
    folders = engine_folders(repo / TINY_LLM)
    assert [(f.keys, f.inside) for f in folders] == [(("model",), None)]
    work = tmp_path / "node"
    model_dir = ShippedModel(pack_model(repo / TINY_LLM), folders).unpack(work, TINY_LLM)
    args = json.loads((model_dir / "1" / "model.json").read_text())
    shipped = Path(args["model"])
    assert shipped.is_relative_to(work / "engine") and shipped != weights
    assert sorted(p.name for p in shipped.iterdir()) == sorted(p.name for p in weights.iterdir())
    assert (shipped / "model.safetensors").read_bytes() == (weights / "model.safetensors").read_bytes()
    assert read_back(model_dir).settings.backend_settings.model == str(shipped)
    # every other engine argument as the driver's model.json has it
    driver_args = json.loads((repo / TINY_LLM / "1" / "model.json").read_text())
    assert {k: v for k, v in args.items() if k != "model"} == {k: v for k, v in driver_args.items() if k != "model"}


def test_weights_inside_the_model_folder_go_with_it_and_are_named_where_they_land(tmp_path):
    repo = tiny_llm_repository(tmp_path / "driver" / "repo")
    model_json = repo / TINY_LLM / "1" / "model.json"
    args = json.loads(model_json.read_text())
    inside = repo / TINY_LLM / "weights"
    inside.mkdir()
    for path in Path(args["model"]).iterdir():
        (inside / path.name).write_bytes(path.read_bytes())
    model_json.write_text(json.dumps({**args, "model": str(inside), "tokenizer": str(inside)}))
    folders = engine_folders(repo / TINY_LLM)
    assert [(f.keys, f.inside, f.data) for f in folders] == [(("model", "tokenizer"), "weights", b"")]
    model_dir = ShippedModel(pack_model(repo / TINY_LLM), folders).unpack(tmp_path / "node", TINY_LLM)
    landed = json.loads((model_dir / "1" / "model.json").read_text())
    assert landed["model"] == landed["tokenizer"] == str(model_dir / "weights")


def test_the_plan_must_be_of_the_models_kind(tmp_path, generate_cpu_model):
    repo = tiny_llm_repository(tmp_path / "repo")
    with pytest.raises(SweepError, match=r"tiny_llm streams tokens \(an LLM sweep\): give an LlmPlan"):
        ray_kind(SweepPlan(batch_sizes=[1], allocations="1x1"), repo / TINY_LLM, SETTINGS)
    tensor = generate_cpu_model(tmp_path / "tensor")
    with pytest.raises(SweepError, match=r"is a tensor model: give a SweepPlan, not a LlmPlan"):
        ray_kind(PLAN, tensor, SETTINGS)
    kind = ray_kind(PLAN, repo / TINY_LLM, SETTINGS)
    assert isinstance(kind, LlmOnRay) and kind.record_kind == "llm"
    assert kind.labels() == ["seqs4-tp1-x1", "seqs1-tp1-x1"] and kind.ask("seqs4-tp1-x1").options() == {"num_cpus": 1}


# ---- on a real cluster, with the real vLLM backend ------------------------------------------------


@pytest.fixture(scope="module")
def cluster(vllm_python, vllm_backend_dir):
    """Two worker nodes whose tasks find Triton's vLLM backend as a node's own environment says
    (set before the nodes start: every task of theirs inherits it)."""
    pytest.importorskip("ray", reason="Ray is not installed here (the ray extra)")
    from ray_cluster import local_cluster

    from workbench.server.vllm_backend import ENV_BACKEND, ENV_PYTHON

    with pytest.MonkeyPatch.context() as env:
        env.setenv(ENV_BACKEND, str(vllm_backend_dir))
        env.setenv(ENV_PYTHON, str(vllm_python))
        with local_cluster([{"num_cpus": 1}] * 2) as running:
            yield running


def _work_folders() -> set[Path]:
    return set(Path(tempfile.gettempdir()).glob(f"{WORK_PREFIX}*"))


def _left_in_work_folders() -> list[str]:
    """Processes running in or on a task's folder: a tritonserver, its stubs, vLLM's EngineCore
    (whose working folder is the server's run folder, inside the task's)."""
    left = []
    for proc in psutil.process_iter(["pid", "name", "cmdline", "cwd"]):
        info = proc.info
        if f"/{WORK_PREFIX}" in " ".join(info["cmdline"] or []) + " " + (info["cwd"] or ""):
            left.append(f"{info['pid']} {info['name']}")
    return left


@pytest.mark.server
@pytest.mark.slow
@pytest.mark.alone  # a 3-node cluster and two vLLM engines on 2 cores: beside it, other servers' stubs starved
@pytest.mark.timeout(900)
def test_an_llm_sweep_over_two_nodes_reads_back_as_an_llm_run_and_resumes_with_nothing_to_do(
        cluster, tmp_path, capsys):
    """The LLM sweep panel "on a Ray cluster" (no server of its own): two variants, one on each node,
    the panel's table naming each row's node and its answer the run's; every row counting as many
    tokens as its server; the run reads back as an LLM run (best, Pareto front, `workbench report`);
    `workbench sweep --ray --resume` on the panel's folder agrees on the plan and measures nothing;
    nothing of the tasks is left."""
    from test_report_table import _parse

    from workbench.cli import main
    from workbench.measure.llm import LlmSweepResult, load_llm_run
    from workbench.measure.store.results import POINTS_FILE, load_saved
    from workbench.ui.llm_sweep_panel import LlmSweepPanel
    from workbench.ui.shared_state import WorkbenchState

    folders_before = _work_folders()
    model = tiny_llm_repository(tmp_path / "repo") / TINY_LLM
    out = tmp_path / "run"
    panel = LlmSweepPanel(WorkbenchState(model.parent, name=model.name), runs_dir=tmp_path)
    c = panel.controls
    for name, value in PANEL.items():
        c[name].value = value
    panel.plan_link.update(prompts=4)  # --prompts and --warmup: no control of the panel's
    panel.measure_link.update(warmup_requests=2)
    c["label"].value, c["ray"].value, c["ray_address"].value = out.name, True, cluster.address
    task = panel.start()
    assert task is not None, c["error"].value + c["ray_problem"].value
    assert task.join(timeout=800) and task.state == "done", task.error_text
    workers = {node.node_id for node in cluster.cluster.worker_nodes}
    table = _parse(c["table"].value)
    assert table.headers[0] == "node" and {cells[0] for cells in table.rows if cells} == {w[:8] for w in workers}
    assert all(w[:8] in c["nodes"].value for w in workers) and "Ray dashboard" in c["nodes"].value

    run = load_saved(out)
    refused = run.record.get("failed_variants") or {}
    if refused:  # both nodes measure at once on this 2-core machine: a starved client's point is refused
        assert all("one user's pace" in why for why in refused.values()), refused  # (issue 43's rule), and
        assert main(["sweep", str(model), *FLAGS, "--out", str(out), "--ray", cluster.address, "--resume"]) == 0
        capsys.readouterr()  # the resume measured it again: on Ray as on one server
        run = load_saved(out)
    assert isinstance(run, LlmSweepResult) and run.complete and run.record["kind"] == "llm"
    assert run.record["cluster"] == "ray" and set(run.record["nodes"]) == workers
    frame = run.frame
    assert sorted(frame["variant"]) == ["seqs1-tp1-x1", "seqs4-tp1-x1"]
    assert set(frame["node"]) == workers  # a variant on each node, every row naming its node
    for row in frame.to_dict("records"):
        assert not row["error"], row["error"]
        assert row["client_output_tokens"] > 0
        assert row["server_output_tokens"] == row["client_output_tokens"], row["variant"]
    # as any LLM run reads: the record's SLO and lengths, the best under it, the front, the table
    assert run.slo == SLO and run.record["input_tokens"]["mean"] == 16 and run.record["engine"] == "workbench-stream"
    assert run.best() is not None and len(run.pareto()) >= 1
    assert load_llm_run(out).frame.equals(frame) and (bool(refused) or panel.result.frame.equals(frame))
    assert bool(refused) or html.escape(run.describe_best()) in c["best"].value
    assert "seqs" in run.describe_best()
    assert main(["report", str(out)]) == 0
    report = (out / "report.html").read_text()
    assert "seqs1-tp1-x1" in report and "on each Ray node" in report
    assert all(w[:8] in report for w in workers)

    points = (out / POINTS_FILE).read_bytes()
    capsys.readouterr()  # the report's words: not the sweep's
    code = main(["sweep", str(model), *FLAGS, "--out", str(out), "--ray", cluster.address, "--resume"])
    shown = capsys.readouterr()
    assert code == 0, shown.err[-3000:]
    table_lines = shown.out.splitlines()
    assert table_lines[0].split()[0] == "node"  # the printed table names each row's node first
    assert {line.split()[0] for line in table_lines[1:3]} == {w[:8] for w in workers}
    resumed = load_saved(out)
    assert (out / POINTS_FILE).read_bytes() == points  # nothing measured again
    assert resumed.complete and resumed.record["sessions"][-1]["measured_variants"] == 0
    assert resumed.record["sessions"][-1]["reused_variants"] == 2

    assert _left_in_work_folders() == []
    assert _work_folders() - folders_before == set()
