"""Sweeps on a real Ray cluster (tests/ray_cluster.py: a head and two worker nodes of one CPU and,
declared by hand, four ``neuron_cores`` each): every variant a Ray task that starts its own
tritonserver on its node, measures there and returns its rows to the one run folder."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest

from ray_cluster import local_cluster  # first: it sets Ray's address rule before ray is imported

import ray

from workbench.coremap import CoreRange
from workbench.generate.config import parameters_of, read_config
from workbench.measure.cluster import run_sweep_on_ray
from workbench.measure.cluster.ray_task import VISIBLE_CORES, WORK_PREFIX, place, placed_plan, variant_ask
from workbench.measure.engine.measure_settings import MeasureSettings
from workbench.measure.grid.plan import Batching, SweepError, SweepPlan
from workbench.measure.store.results import POINTS_FILE, load_run, node_name, read_points
from workbench.measure.sweep import run_sweep
from workbench.server import TritonServer

from test_python_model import write_model

pytestmark = [pytest.mark.server, pytest.mark.slow, pytest.mark.alone]  # a 3-node cluster on 2 cores: nothing beside it

FAST = MeasureSettings(engine="workbench", window_s=0.2, max_windows=3, warmup_requests=5, time_limit_s=None,
                       min_latencies=50)
NEURON_CORES_PER_NODE = 4
# three variants: one core, the batcher's queue delay 0, 100 and 200 us
PLAN = SweepPlan(batch_sizes=[1], allocations="1x1", concurrency=[1],
                 batching=tuple(Batching(True, (), delay) for delay in (0, 100, 200)))


@pytest.fixture(scope="module")
def cluster():
    with local_cluster([{"num_cpus": 1, "resources": {"neuron_cores": NEURON_CORES_PER_NODE}}] * 2) as running:
        yield running


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, generate_cpu_model):
    return generate_cpu_model(tmp_path_factory.mktemp("ray"))


def worker_ids(cluster) -> set[str]:
    return {node.node_id for node in cluster.cluster.worker_nodes}


def task_processes(name: str | None = None) -> list[psutil.Process]:
    """Processes of Ray tasks' servers (named ``name``, or any: the tritonservers, their python
    backend stubs): their command lines name a task's node-local folder, ``.../wb-ray-<pid>-...``."""
    found = []
    for proc in psutil.process_iter(["name", "cmdline"]):
        try:
            if name not in (None, proc.info["name"]):
                continue
            if any(f"/{WORK_PREFIX}" in part for part in proc.info["cmdline"] or []):
                found.append(proc)
        except psutil.Error:
            continue
    return found


def task_servers() -> list[psutil.Process]:
    return task_processes("tritonserver")


def nothing_of_the_tasks_left(timeout: float = 15.0) -> list[str]:
    """What is left of the tasks' servers once ``timeout`` seconds have passed (empty as soon as
    nothing is): ending is asynchronous, a guard gives a server's group a few seconds' grace."""
    deadline = time.monotonic() + timeout
    while (left := task_processes()) and time.monotonic() < deadline:
        time.sleep(0.25)
    described = []
    for proc in left:
        try:
            described.append(f"{proc.pid} (parent {proc.ppid()}): {' '.join(proc.cmdline())[:160]}")
        except psutil.Error:
            continue
    return described


def test_a_cpu_sweep_over_two_nodes_measures_the_plan_as_one_machine_does(cluster, model_dir, tmp_path):
    result = run_sweep_on_ray(PLAN, model_dir, out_dir=tmp_path / "ray", settings=FAST)
    assert result.status == "complete", result.record.get("failed_variants")
    with TritonServer(model_dir.parent) as server:
        local = run_sweep(PLAN, server, model_dir, out_dir=tmp_path / "local", settings=FAST)
    keys = ["variant", "batch_size", "concurrency", "allocation", "batching", "core_start", "core_end"]
    assert sorted(map(tuple, result.frame[keys].values.tolist())) == sorted(map(tuple, local.frame[keys].values.tolist()))
    assert result.frame["outputs_ok"].all() and not result.frame["error"].notna().any()
    # every row names a worker node, and both nodes measured
    assert set(result.frame["node"]) == worker_ids(cluster)
    assert set(result.record["nodes"]) == worker_ids(cluster)
    assert sorted(v for n in result.record["nodes"].values() for v in n["variants"]) == sorted(result.frame["variant"])
    # the folder reads back as any run, and no task's server is left
    again = load_run(tmp_path / "ray")
    assert again.frame[keys + ["node"]].equals(result.frame[keys + ["node"]])
    shown = again.table()  # the table a person reads names each row's node as progress does
    assert sorted(set(shown["node"])) == sorted(node_name(n) for n in worker_ids(cluster))
    assert nothing_of_the_tasks_left() == []


def test_a_variant_no_node_can_hold_is_refused_before_anything_is_written(cluster, model_dir, tmp_path):
    """Two CPUs asked on nodes of one: Ray would leave the task pending for ever; the sweep says so."""
    plan = SweepPlan(batch_sizes=[1], allocations="1x1,1x2", concurrency=[1], core_range="0:2")
    with pytest.raises(SweepError, match=r"no node of this Ray cluster can hold variant 1x2.*: it asks 2 CPU\(s\), "
                                         r"the largest node has 1 CPU\(s\)"):
        run_sweep_on_ray(plan, model_dir, out_dir=tmp_path / "ray", settings=FAST)
    assert not (tmp_path / "ray" / "run.json").exists()


def test_a_neuron_task_runs_on_the_cores_ray_assigned_it(cluster, tmp_path):
    """A Neuron variant asks Ray for its cores; in the task NEURON_RT_VISIBLE_CORES is those cores
    (set by Ray on a node whose neuron_cores were declared by hand; set by the workbench where Ray
    set none) and the variant's instance ranges lie inside them."""
    model = write_model(tmp_path / "repo", "neuron_add", ["INPUT__0,FP32,4"], ["OUTPUT__0,FP32,4"],
                        max_batch_size=8, WORKBENCH_TARGET="inf2", NEURON_CORE_START_INDEX=0,
                        NEURON_CORE_END_INDEX=1)
    plan = SweepPlan(batch_sizes=[1], allocations="2x1,1x2")
    variants = plan.variants(read_config(model))
    model_path = str(model)  # the task reads the config itself (a protobuf message does not pickle)

    @ray.remote
    class Barrier:  # holds every probe until all run at once, so the nodes' cores are all handed out
        def __init__(self) -> None:
            self.count = 0

        def arrive(self) -> int:
            self.count += 1
            return self.count

        def arrived(self) -> int:
            return self.count

    barrier = Barrier.options(num_cpus=0).remote()
    probes = len(variants) * 2  # 4 probes of 2 cores: the two nodes' 8 declared cores

    def probe(variant_label: str, unset_first: bool) -> dict:
        ray.get(barrier.arrive.remote())
        while ray.get(barrier.arrived.remote()) < probes:
            time.sleep(0.1)
        if unset_first:
            os.environ.pop(VISIBLE_CORES, None)
        placement = place(True)
        node_plan = placed_plan(plan, placement)
        variant = next(v for v in node_plan.variants(read_config(model_path)) if v.label == variant_label)
        core_map = CoreRange.from_parameters(parameters_of(variant.config)).split(variant.allocation.instances)
        instances = [core_map.cores(k) for k in range(core_map.instances)]
        return {"placement": placement, "visible": os.environ[VISIBLE_CORES],
                "instances": [(r.start, r[-1]) for r in instances]}

    remote = ray.remote(probe)
    refs = []
    for i in range(probes):
        variant = variants[i % len(variants)]
        ask = variant_ask(variant, True).options()
        assert ask["resources"] == {"neuron_cores": 2}
        # num_cpus=0 here only so two probes share a one-CPU node (the sweep's task also asks a CPU)
        refs.append(remote.options(**{**ask, "num_cpus": 0}).remote(variant.label, unset_first=i == 0))
    answers = ray.get(refs, timeout=240)
    held = {}
    for answer in answers:
        placement = answer["placement"]
        cores = placement.neuron_cores
        assert len(cores) == 2
        assert answer["visible"] == ",".join(map(str, cores)) or answer["visible"] == f"{cores[0]}-{cores[1]}"
        for start, end in answer["instances"]:
            assert cores[0] <= start <= end <= cores[-1]
        held.setdefault(placement.node, []).append(cores)
    assert {p["placement"].visible_set_by for p in answers} == {"ray", "workbench"}
    # each node handed out all its declared cores, none twice
    assert {node: sorted(c for cores in got for c in cores) for node, got in held.items()} == {
        node: list(range(NEURON_CORES_PER_NODE)) for node in worker_ids(cluster)}
    assert any(cores[0] > 0 for got in held.values() for cores in got)  # ranges not only at core 0


def _rows(out: Path) -> list[dict]:
    path = out / POINTS_FILE
    return read_points(path) if path.exists() else []


def test_a_driver_killed_mid_sweep_resumes_with_only_what_is_missing(cluster, model_dir, tmp_path):
    """`workbench sweep --ray ADDRESS` killed once a variant's rows are in: `--resume` measures only
    the variants that are not, and no point is in the run twice."""
    out = tmp_path / "killed"
    argv = [sys.executable, "-m", "workbench", "sweep", str(model_dir), "--batch-sizes", "1", "--allocations", "1x1",
            "--queue-delay-us", "0,100,200", "--engine", "workbench", "--window-ms", "200", "--max-windows", "3",
            "--time-limit-s", "0", "--min-latencies", "50", "--warmup", "5", "--out", str(out), "--no-plots",
            "--ray", cluster.address]
    driver = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while not _rows(out) and driver.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert driver.poll() is None, driver.stdout.read().decode()[-2000:]
        os.killpg(driver.pid, signal.SIGKILL)
    finally:
        driver.wait(timeout=30)
    before = _rows(out)
    measured_before = {row["variant"] for row in before}
    assert 1 <= len(measured_before) < 3
    resumed = subprocess.run(argv + ["--resume"], capture_output=True, text=True, timeout=600, check=False)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    header = resumed.stdout.splitlines()[1].split()  # what the fan-out's CLI test read: engine, each row's node
    assert resumed.stdout.startswith("measured by workbench") and header[0] == "node"
    after = _rows(out)
    assert after[:len(before)] == before  # the rows measured before are kept as they were
    new = after[len(before):]
    labels = {v.label for v in PLAN.variants(read_config(model_dir))}
    assert {row["variant"] for row in new} == labels - measured_before
    keys = [(r["variant"], r["batch_size"], r["concurrency"]) for r in after]
    assert len(keys) == len(set(keys)) == 3
    run = load_run(out)
    assert run.status == "complete" and run.record["sessions"][-1]["reused_variants"] == len(measured_before)
    assert nothing_of_the_tasks_left() == []


def test_the_compile_farm_compiles_three_batch_sizes_on_two_nodes_as_here(cluster, tmp_path):
    """Three batch sizes compiled as Ray tasks: the artifacts land in the driver's folder with their
    records, compiled on both nodes, the same TorchScript and outputs as compiled here."""
    import torch

    from workbench import zoo
    from workbench.compiler import compile_model
    from workbench.compiler.artifact import load_artifact, read_artifact
    from workbench.measure.cluster.farm import CompileJob, compile_on_ray

    model = zoo.get("add_sub")
    jobs = [CompileJob(f"add_sub_b{b}", "cpu", model.example_inputs(b), {"dynamic_batch_size": False})
            for b in (1, 2, 4)]
    farmed = compile_on_ray(model.module, jobs, out_dir=tmp_path / "farm")
    assert {a.extra["compiled_on"]["node"] for a in farmed} == worker_ids(cluster)
    for job, artifact in zip(jobs, farmed):
        assert Path(artifact.path).parent == tmp_path / "farm" and Path(artifact.path).is_file()
        assert read_artifact(artifact.path).path == artifact.path  # the record names the file where it is now
        here = compile_model(model.module, job.example_inputs, "cpu", out_dir=tmp_path / "here", name=job.name,
                             dynamic_batch_size=False)
        assert (artifact.spec, artifact.batch_dim, artifact.dynamic_batch, artifact.max_abs_diff) == (
            here.spec, here.batch_dim, here.dynamic_batch, here.max_abs_diff)
        farm_module, here_module = load_artifact(artifact), load_artifact(here)
        assert farm_module.code == here_module.code
        for a, b in zip(farm_module(*job.example_inputs), here_module(*job.example_inputs)):
            assert torch.equal(a, b)
    assert not list((tmp_path / "farm").glob("*.tmp"))


def test_the_sweep_panel_on_ray_shows_each_node_and_its_cancel_ends_the_ray_tasks(cluster, model_dir, tmp_path):
    """The notebook's sweep panel on the cluster: while the variants measure, the panel names each
    node with the variant it measures and its points so far, and the dashboard's address (this
    cluster runs none: it says so); Cancel ends the Ray tasks and their servers, the run cancelled."""
    from workbench.ui.shared_state import WorkbenchState
    from workbench.ui.sweep_panel import SweepPanel

    panel = SweepPanel(WorkbenchState(model_dir.parent, name=model_dir.name), runs_dir=tmp_path)
    c = panel.controls
    c["batch_sizes"].value, c["allocations"].value, c["concurrency"].value = "1,2,4", "1x1", "1"
    panel.plan_link.update(batching=PLAN.batching)  # three variants of three points
    panel.measure_link.update(**{k: getattr(FAST, k) for k in
                                 ("engine", "window_s", "max_windows", "warmup_requests", "time_limit_s",
                                  "min_latencies")})
    c["label"].value = "panel"
    c["ray"].value, c["ray_address"].value = True, cluster.address
    task = panel.start()
    assert task is not None, c["error"].value
    nodes = {node_name(n) for n in worker_ids(cluster)}
    deadline = time.monotonic() + 300
    # both nodes measuring a variant, a point of it already measured on one of them
    while time.monotonic() < deadline and task.state == "running":
        shown = c["nodes"].value
        if all(name in shown for name in nodes) and shown.count("/3 points") == 2 and re.search(r"[123]/3 points", shown):
            break
        time.sleep(0.1)
    shown = c["nodes"].value
    assert all(name in shown for name in nodes) and shown.count("/3 points") == 2, shown
    assert "Ray dashboard: none on this cluster" in shown
    running = load_run(tmp_path / "panel").record["running"]  # what the panel shows is what was saved
    assert len(running) == 2 and {node_name(m["node"]) for m in running.values()} == nodes
    servers = task_servers()
    assert servers
    folders = {Path(server.cwd()).parent for server in servers}  # each task's folder, its server's run folder inside
    c["cancel"].click()
    assert task.join(120)
    result = load_run(tmp_path / "panel")
    assert result.status == "cancelled" and result.record["running"] == {}
    assert nothing_of_the_tasks_left() == []
    assert [str(f) for f in folders if f.exists()] == []  # removed on their nodes once the workers ended
    final = c["nodes"].value  # the panel ends as the record does: nothing measuring any more
    assert "points (" not in final and ("no node measured a variant" in final) == (not result.record["nodes"])


def test_a_node_lost_mid_variant_is_measured_again_elsewhere_once(cluster, model_dir, tmp_path):
    """A worker node removed while its task measures a variant (a point already measured there):
    Ray runs that variant again on the other node, the run has every point once, and the record
    says what was retried. Last in the module: it takes a node away (and puts one back)."""
    import threading

    plan = SweepPlan(batch_sizes=[1, 2, 4], allocations="1x1", concurrency=[1],
                     batching=tuple(Batching(True, (), delay) for delay in (0, 100)))
    raylets = {node.all_processes["raylet"][0].process.pid: node for node in cluster.cluster.worker_nodes}
    outcome: dict = {}
    sweep = threading.Thread(target=lambda: outcome.update(result=run_sweep_on_ray(
        plan, model_dir, out_dir=tmp_path / "lost", settings=FAST)))
    sweep.start()
    victim = None
    deadline = time.monotonic() + 300
    while victim is None and time.monotonic() < deadline and sweep.is_alive():
        for server in task_servers():
            try:
                found = re.search(r"(/[^\s=]*?/wb-ray-[^/\s]+)/", " ".join(server.cmdline()) + "/")
                parents = server.parents()
                server_folder = Path(server.cwd())  # its run folder (log, guard log): the server runs in it
            except psutil.Error:
                continue
            task_points = Path(found.group(1)) / "run" / POINTS_FILE
            if task_points.exists() and task_points.read_text().strip():  # mid-variant: a point measured
                victim = next((raylets[p.pid] for p in parents if p.pid in raylets), None)
                break
        time.sleep(0.2)
    assert victim is not None, "no task measured a point in time"
    assert server_folder.name.startswith("workbench-triton-") and server_folder.parent == Path(found.group(1))
    lost = victim.node_id
    cluster.cluster.remove_node(victim, allow_graceful=False)
    sweep.join(timeout=600)
    assert not sweep.is_alive()
    result = outcome["result"]
    assert result.status == "complete", result.record.get("failed_variants")
    keys = list(zip(result.frame["variant"], result.frame["batch_size"], result.frame["concurrency"]))
    assert len(keys) == len(set(keys)) == 6
    raw = read_points(tmp_path / "lost" / POINTS_FILE)
    assert len(raw) == 6  # nothing from the lost node's half-measured variant was written
    assert lost not in set(result.frame["node"])
    retried = result.record["retried"]
    assert len(retried) == 1
    (label, entry), = retried.items()
    assert entry["started_on"][0] == lost and entry["measured_on"] != lost
    assert set(result.frame[result.frame["variant"] == label]["node"]) == {entry["measured_on"]}
    assert nothing_of_the_tasks_left() == []
    # the lost task's node-local folder is gone too, its server's run folder inside it: the retried
    # task removed the folders of dead workers (a cancelled task's, earlier in this module, too)
    left = [p for p in Path(tempfile.gettempdir()).glob("wb-ray-*-*")
            if not Path(f"/proc/{p.name.split('-')[2]}").exists()]
    assert left == []
    assert not server_folder.exists()  # the lost server's own run folder went with its task's
    cluster.add_worker(num_cpus=1, resources={"neuron_cores": NEURON_CORES_PER_NODE})
