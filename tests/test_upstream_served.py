"""A real tritonserver serves what upstream's gen_triton_model.py wrote, and what the workbench
regenerates from it, side by side: same answers, same cores, same load path.

Upstream's script (run as it ships; skipped with a reason where ../shared is absent, see
test_upstream_oracle.py) writes its --inf2 PyTorch model twice per batching mode: once to serve as
upstream left it, once to read back and regenerate in place (the changes confirmed, as a user
would). There is no Neuron device here: each model folder carries the FAKE torch_neuronx of
tests/fake_neuron as symlinks (the stub imports it from the model folder), which runs the CPU
TorchScript and records what the SDK was asked. Nothing here measures Neuron.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import torch

from workbench import generate as gen
from workbench.generate.config import parameters_of, read_config
from workbench.generate.python_backend.upstream import UpstreamModelPy, is_workbench_model_py, recognise

from test_python_model import burst
from test_upstream_oracle import SCRIPT, run_upstream

pytestmark = pytest.mark.skipif(not SCRIPT.is_file(), reason=f"upstream gen_triton_model.py not found at {SCRIPT} "
                                "(set WORKBENCH_SHARED to the folder holding reference/upstream)")

FAKE_SDK = Path(__file__).parent / "fake_neuron"
# README "Using Triton's Dynamic Batching" with --inf2, a path relative to the model folder, one instance
ARGS = ["--inf2", "--model_type", "pytorch", "--triton_input", "INPUT__0,INT64,4", "INPUT__1,INT64,4",
        "--triton_output", "OUTPUT__0,INT64,4", "OUTPUT__1,INT64,4", "--compiled_model", "add_sub.pt",
        "--neuron_core_range", "0:1", "--enable_dynamic_batching", "--max_batch_size", "8",
        "--preferred_batch_size", "4", "--max_queue_delay_microseconds", "1000"]
MODES = {"per_request": ["--disable_batch_requests_to_neuron"], "batched": []}


class AddSub(torch.nn.Module):
    def forward(self, a, b):
        return a + b, a - b


def upstream_model(repo: Path, name: str, extra: list[str], compiled: Path) -> Path:
    model = repo / name
    done = run_upstream(ARGS + extra, model, repo.parent)
    assert done.returncode == 0, done.stderr
    (model / "add_sub.pt").write_bytes(compiled.read_bytes())
    for item in ("fake_neuron_record.py", "torch_neuronx"):
        (model / item).symlink_to(FAKE_SDK / item)
    return model


@pytest.fixture(scope="module")
def served(tmp_path_factory, triton_server_module):
    root = tmp_path_factory.mktemp("upstream-served")
    compiled = root / "add_sub.pt"
    torch.jit.script(AddSub()).save(str(compiled))
    repo, records = root / "repo", root / "records"
    repo.mkdir()
    records.mkdir()
    for mode, extra in MODES.items():
        upstream_model(repo, f"up_{mode}", extra, compiled)
        ours = upstream_model(repo, f"wb_{mode}", extra, compiled)
        generated = gen.render(gen.load_settings(ours))
        gen.write(generated, confirm=generated.changes())
    server = triton_server_module(repo, env={"FAKE_NEURON_RECORD_DIR": str(records)})
    with ThreadPoolExecutor(2) as pool:  # each model is a stub importing torch
        list(pool.map(server.load, [f"{side}_{mode}" for mode in MODES for side in ("up", "wb")]))
    return server, repo, records


@pytest.mark.server
@pytest.mark.parametrize("mode", list(MODES))
def test_upstream_and_regenerated_directories_answer_alike(served, mode):
    server, repo, records = served
    up, ours = repo / f"up_{mode}", repo / f"wb_{mode}"
    assert recognise((up / "1" / "model.py").read_text()) == UpstreamModelPy("pytorch", "inf2", mode == "batched")
    assert is_workbench_model_py((ours / "1" / "model.py").read_text())
    assert parameters_of(read_config(ours))["BATCH_REQUESTS"] == ("true" if mode == "batched" else "false")
    assert (ours / "torch_neuronx" / "__init__.py").is_file()  # the linked FAKE package was kept
    rng = np.random.default_rng(5)
    requests = [{"INPUT__0": rng.integers(-9, 9, (n, 4)), "INPUT__1": rng.integers(-9, 9, (n, 4))}
                for n in (1, 3, 2, 1)]
    answers = {}
    for model in (up.name, ours.name):
        answers[model] = burst(server, model, requests)
        for arrays, result in zip(requests, answers[model]):
            assert not isinstance(result, Exception), result
            np.testing.assert_array_equal(result.as_numpy("OUTPUT__0"), arrays["INPUT__0"] + arrays["INPUT__1"])
            np.testing.assert_array_equal(result.as_numpy("OUTPUT__1"), arrays["INPUT__0"] - arrays["INPUT__1"])
    for side in (up, ours):
        record = json.loads((records / f"{side.name}_0_0.json").read_text())
        assert record["imported"] == "torch_neuronx"
        assert record["visible_cores_at_load"] == "0-1"  # cores 0:1, one instance, in both model.py files
        assert record["load_path"] == str(side / "add_sub.pt")  # inf2: relative to the model folder in both
