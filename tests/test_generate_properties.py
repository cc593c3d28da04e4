"""Property-based (issue 17, point 6): arbitrary settings and CLI arguments either give a clear error
naming the bad item with nothing written, or a model directory a real tritonserver loads. Bounded:
40 examples, about half valid and loaded by one server for the module (the valid side is
asserted to have been reached)."""

from __future__ import annotations

import argparse
import itertools
import re
from pathlib import Path

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

from workbench.cli import generate as generate_cli  # noqa: E402
from workbench.generate import GenerateError, GenerateSettings, render, write  # noqa: E402

pytestmark = pytest.mark.server
_counter = itertools.count()
LOADED: list[str] = []  # models a real server loaded, across both properties
# a problem names its item: a flag, a tensor, the model name or a file
_NAMED = re.compile(r"--[a-z_-]+|tensor name|input '|output '|model name|INPUT__|OUTPUT__|indices")

anything = st.one_of(st.none(), st.booleans(), st.floats(allow_nan=True), st.text(max_size=6),
                     st.integers(-3, 3), st.integers(-(2 ** 70), 2 ** 70), st.lists(st.integers(-2, 9), max_size=2))
# valid values, reaching the limits that apply (int32 / int64 / uint64 ends included)
VALID = {
    "model_version": st.one_of(st.integers(1, 3), st.integers(2 ** 63 - 3, 2 ** 63 - 1)),
    "max_batch_size": st.one_of(st.integers(0, 8), st.just(2 ** 31 - 1)),
    "triton_model_instance_count": st.integers(1, 2),
    "threads_per_core": st.integers(1, 2),
    "enable_dynamic_batching": st.booleans(),
    "max_queue_delay_microseconds": st.one_of(st.none(), st.integers(0, 100), st.just(2 ** 64 - 1)),
    "neuron_core_range": st.sampled_from(["0:0", "0:1", "1:1"]),
}
valid_dims = st.lists(st.one_of(st.integers(1, 4), st.just(-1), st.just(2 ** 63 - 1)), min_size=1, max_size=3)
bad_dims = st.lists(st.one_of(st.integers(-2, 2 ** 64), st.floats(), st.text(max_size=2), st.booleans()),
                    min_size=0, max_size=3)
# half the examples valid, the others with one item replaced by an arbitrary value
corrupt = st.one_of(st.none(), st.sampled_from([*VALID, "preferred_batch_size", "tensor_name", "dims"]))


@pytest.fixture(scope="module")
def world(tmp_path_factory, triton_server_module):
    import torch

    class Twice(torch.nn.Module):
        def forward(self, a):
            return a * 2

    root = tmp_path_factory.mktemp("props")
    artifact = root / "twice.pt"
    torch.jit.trace(Twice(), torch.zeros(2, 4)).save(str(artifact))
    repo = root / "repo"
    repo.mkdir()
    return triton_server_module(repo), repo, artifact


def _assert_named_and_nothing_written(problems: list[str], dest: Path, repo: Path) -> None:
    assert problems, "an error without a message"
    for problem in problems:
        assert _NAMED.search(problem), f"problem names no item: {problem!r}"
    assert not dest.exists() and not any(p.name.startswith(f".{dest.name}.tmp-") for p in repo.iterdir())


def _loads(server, name: str) -> None:
    server.load(name)
    try:
        assert server.is_model_ready(name)
        LOADED.append(name)
    finally:
        server.unload(name)


@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(values=st.fixed_dictionaries(VALID), bad=corrupt, junk=anything, junk_dims=bad_dims, text=st.text(max_size=5))
def test_api_settings_give_a_named_error_or_a_model_triton_loads(world, values, bad, junk, junk_dims, text):
    server, repo, artifact = world
    dest = repo / f"api{next(_counter)}"
    name, tensor_dims = "INPUT__0", [-1, 4]
    if bad == "tensor_name":
        name = text
    elif bad == "dims":
        tensor_dims = junk_dims
    elif bad is not None:
        values[bad] = junk
    try:
        settings_ = GenerateSettings(triton_model_dir=str(dest), compiled_model=str(artifact), copy_compiled_model=True,
                                     target="cpu", triton_input=[(name, "FP32", tensor_dims)],
                                     triton_output=["OUTPUT__0,FP32,-1"], **values)
        generated = render(settings_)
    except GenerateError as err:
        _assert_named_and_nothing_written(err.problems, dest, repo)
        return
    written = write(generated)
    _loads(server, written.path.name)


def _run_cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="workbench", allow_abbrev=False)
    generate_cli.register(parser.add_subparsers(dest="command"))
    try:
        args = parser.parse_args(["generate", *argv])
    except SystemExit as stop:
        return int(stop.code)
    return args.func(args)


arg = st.one_of(st.integers(-2, 4).map(str), st.integers(2 ** 31 - 1, 2 ** 64).map(str), st.text(max_size=4),
                st.sampled_from(["1.5", "0x10", "+2", " 3", "1e3", "", "-0", "abc", "0:1", "1:0"]))
CLI_VALID = {"--model_version": st.sampled_from(["1", "2", str(2 ** 63 - 1)]), "--max_batch_size": st.sampled_from(["0", "4"]),
             "--triton_model_instance_count": st.sampled_from(["1", "2"]), "--threads_per_core": st.sampled_from(["1", "2"]),
             "--neuron_core_range": st.sampled_from(["0:1", "0:0"]), "shape": st.sampled_from(["4", "-1", "2x2"]),
             "name": st.just("INPUT__0")}


@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(values=st.fixed_dictionaries(CLI_VALID), bad=st.one_of(st.none(), st.sampled_from(list(CLI_VALID))), junk=arg)
def test_cli_arguments_give_status_2_naming_the_flag_or_a_model_triton_loads(world, capsys, values, bad, junk):
    server, repo, artifact = world
    dest = repo / f"cli{next(_counter)}"
    argv = ["--target", "cpu", "--compiled_model", str(artifact), "--copy-compiled-model",
            "--triton_output", "OUTPUT__0,FP32,-1", "--triton_model_dir", str(dest)]
    if bad is not None:
        values[bad] = junk
    argv += ["--triton_input", f"{values.pop('name')},FP32,{values.pop('shape')}"]
    if values["--max_batch_size"] == "0" and bad != "shape":
        argv[-1] = argv[-1].rsplit(",", 1)[0] + ",-1x4"  # requests carry their own batch dim
    argv += [f"{flag}={value}" for flag, value in values.items()]
    status = _run_cli(argv)
    err = capsys.readouterr().err
    if status == 0:
        _loads(server, dest.name)
        return
    assert status == 2, err
    lines = [line for line in err.splitlines() if "error" in line]
    assert lines, err
    _assert_named_and_nothing_written([line.split("error: ", 1)[-1] for line in lines], dest, repo)



def test_the_properties_reached_the_server():
    """Runs after both properties (file order): the valid side of each was exercised on Triton."""
    assert sum(n.startswith("api") for n in LOADED) >= 4 and sum(n.startswith("cli") for n in LOADED) >= 4, LOADED
