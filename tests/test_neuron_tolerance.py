"""Served outputs of a model generated for a Neuron target are checked at the Neuron tolerance on
every path: `workbench sweep` and the sweep panel read it from `workbench.targets`, as notebooks do.

There is no Neuron device or SDK here: the model is compiled for inf2 with the FAKE torch_neuronx
of tests/fake_neuron (a CPU ScriptModule standing in for a NEFF-backed one, see its README) and the
generated model.py imports the same fake in the real python-backend stub, so the served outputs are
real CPU outputs. What is checked is the tolerance the sweep compares them at, not any Neuron number.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from workbench import generate, zoo
from workbench.cli import main
from workbench.compiler import compile_model
from workbench.coremap import CoreRange
from workbench.measure.store.results import load_run
from workbench.targets import CPU_TOLERANCES, NEURON_TOLERANCES, choose_target, output_tolerances

FAKE_SDK = Path(__file__).parent / "fake_neuron"


def test_one_rule_for_output_tolerances():
    assert output_tolerances("cpu") == CPU_TOLERANCES == {"rtol": 1e-4, "atol": 1e-5}
    for target in ("inf1", "inf2", "trn1", "trn2"):
        assert output_tolerances(target) == NEURON_TOLERANCES == {"rtol": 1e-2, "atol": 1e-2}
    assert choose_target("inf2").tolerances == output_tolerances(choose_target("inf2").serve_target)


@pytest.fixture
def inf2_model_dir(tmp_path, neuron_fakes) -> Path:
    """add_sub compiled for inf2 by the FAKE SDK and generated for inf2, the fakes linked into its folder."""
    model = zoo.get("add_sub")
    artifact = compile_model(model.module, model.example_inputs(2), "inf2", out_dir=tmp_path / "art", name="add_sub")
    assert artifact.target == "inf2" and artifact.cpu_artifact is not None
    generated = generate.render(generate.GenerateSettings(
        triton_model_dir=str(tmp_path / "repo" / "add_sub"), compiled_model=str(artifact.path),
        copy_compiled_model=True, target="inf2", neuron_core_range=CoreRange(0, 0), max_batch_size=8))
    generate.write(generated)
    for item in ("fake_neuron_record.py", "torch_neuronx"):  # the stub finds its imports in the model folder
        (generated.dest / item).symlink_to(FAKE_SDK / item)
    return generated.dest


@pytest.mark.server
def test_a_cli_sweep_of_an_inf2_model_checks_outputs_at_the_neuron_tolerance(inf2_model_dir, tmp_path):
    out = tmp_path / "run"
    code = main(["sweep", str(inf2_model_dir), "--batch-sizes", "1", "--allocations", "1x1", "--core-range", "0:0",
                 "--concurrency", "1", "--window-ms", "200", "--max-windows", "3", "--time-limit-s", "0",
                 "--engine", "workbench", "--warmup", "3", "--no-plots", "--out", str(out)])
    assert code == 0
    run = load_run(out)
    settings = run.record["settings"]
    assert (settings["rtol"], settings["atol"]) == (1e-2, 1e-2)
    assert run.frame["outputs_ok"].tolist() == [True]
    # a tolerance given on the command line is kept
    again = tmp_path / "given"
    assert main(["sweep", str(inf2_model_dir), "--batch-sizes", "1", "--allocations", "1x1", "--core-range", "0:0",
                 "--concurrency", "1", "--window-ms", "200", "--max-windows", "3", "--time-limit-s", "0",
                 "--engine", "workbench", "--warmup", "3", "--no-plots", "--rtol", "0.001", "--out", str(again)]) == 0
    settings = load_run(again).record["settings"]
    assert (settings["rtol"], settings["atol"]) == (1e-3, 1e-2)
