"""Round trips that keep what the user wrote, and a real tritonserver serving the result.

A workbench directory edited by hand with every field issue 16 lists (model_warmup, response_cache,
version_policy, priority levels, both queue policies, the rate limiter, the instance group's name
and kind, model_transaction_policy, an optional input; preserve_ordering in configs/ordered.pbtxt,
as Triton 2.51 cannot serve it with the response cache), fields the generator does not model,
custom parameters, extra files in the model and version folders and configs/ variants: read back and regenerated, nothing is lost (fields as protobufs, files byte for byte);
a regeneration that would change or drop something shows it and asks (API and CLI). Then one real
tritonserver loads the regenerated directory: warm-up runs before READY, a request without the
optional input is served, a repeated request is answered from the response cache (statistics),
and the served config carries every field written. test_config_variants.py serves the variants.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path
from typing import Optional

import numpy as np
import pytest
from google.protobuf import json_format

from workbench import generate as gen
from workbench.cli import generate as generate_cli
from workbench.generate import GenerateSettings
from workbench.generate.config import ModelConfig, read_config
from workbench.generate.repository import RepositoryError


def run_generate(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="workbench", allow_abbrev=False)
    generate_cli.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["generate", *argv])
    return args.func(args)


def leaves(config: ModelConfig) -> dict[str, object]:
    """Every set field of ``config`` as dotted path -> value (lists by position, maps by key)."""
    found: dict[str, object] = {}

    def walk(prefix: str, value: object) -> None:
        if isinstance(value, dict):
            for key, inner in value.items():
                walk(f"{prefix}.{key}", inner)
        elif isinstance(value, list) and value and isinstance(value[0], dict):
            for position, inner in enumerate(value):
                walk(f"{prefix}[{position}]", inner)
        else:
            found[prefix] = value

    walk("", json_format.MessageToDict(config, preserving_proto_field_name=True))
    return found


# --- a hand-edited directory: read back, regenerate, nothing lost ------------------------------------

HAND_CONFIG = """# edited by hand: every field the issue lists, plus ones the generator does not model
name: "add_sub"
backend: "python"
max_batch_size: 8
version_policy { latest { num_versions: 1 } }
input [
  { name: "INPUT__0" data_type: TYPE_FP32 dims: [4] },
  { name: "INPUT__1" data_type: TYPE_FP32 dims: [4] optional: true }
]
output [
  { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [4] label_filename: "labels.txt" },
  { name: "OUTPUT__1" data_type: TYPE_FP32 dims: [4] }
]
instance_group [
  {
    name: "add_sub_cpu"
    kind: KIND_CPU
    count: 2
    rate_limiter { resources [ { name: "R1" count: 1 } ] priority: 2 }
  }
]
dynamic_batching {
  preferred_batch_size: [4, 8]
  max_queue_delay_microseconds: 100
  priority_levels: 1
  default_priority_level: 1
  default_queue_policy { timeout_action: REJECT default_timeout_microseconds: 5000000 allow_timeout_override: true max_queue_size: 16 }
  priority_queue_policy { key: 1 value { timeout_action: REJECT default_timeout_microseconds: 1000000 max_queue_size: 4 } }
}
model_transaction_policy { decoupled: false }
response_cache { enable: true }
model_warmup [
  {
    name: "warm_b1"
    batch_size: 1
    count: 2
    inputs { key: "INPUT__0" value { data_type: TYPE_FP32 dims: [4] random_data: true } }
    inputs { key: "INPUT__1" value { data_type: TYPE_FP32 dims: [4] zero_data: true } }
  }
]
optimization { input_pinned_memory { enable: false } }
parameters { key: "BATCH_REQUESTS" value { string_value: "true" } }
parameters { key: "COMPILED_MODEL" value { string_value: "1/add_sub.pt" } }
parameters { key: "CPU_AFFINITY" value { string_value: "false" } }
parameters { key: "NEURON_CORE_END_INDEX" value { string_value: "1" } }
parameters { key: "NEURON_CORE_START_INDEX" value { string_value: "0" } }
parameters { key: "NUM_THREADS_PER_CORE" value { string_value: "1" } }
parameters { key: "WORKBENCH_FRAMEWORK" value { string_value: "pytorch" } }
parameters { key: "WORKBENCH_TARGET" value { string_value: "cpu" } }
parameters { key: "TOKENIZER" value { string_value: "1/tokenizer.json" } }
"""
# configs/ variants, one instance and no warm-up each: two priority levels; and preserve_ordering,
# which Triton 2.51 cannot serve with the response cache (see workbench.generate.config)
VARIANT_EDITS = {
    "prio": {"priority_levels: 1": "priority_levels: 2",
             "key: 1 value { timeout_action: REJECT": "key: 2 value { timeout_action: DELAY"},
    "ordered": {"priority_levels: 1": "preserve_ordering: true\n  priority_levels: 1",
                "response_cache { enable: true }\n": ""},
}


def variant_text(name: str) -> str:
    text = HAND_CONFIG[:HAND_CONFIG.index("model_warmup [")] + HAND_CONFIG[HAND_CONFIG.index("optimization"):]
    edits = {**VARIANT_EDITS[name], "count: 2\n    rate_limiter": "count: 1\n    rate_limiter",
             'string_value: "1/tokenizer.json" } }': 'string_value: "1/tokenizer.json" } }\n'
                                                     f'parameters {{ key: "VARIANT" value {{ string_value: "{name}" }} }}'}
    for old, new in edits.items():
        assert old in text, old
        text = text.replace(old, new)
    return text


def optional_add_sub(path: Path) -> None:
    """A scripted TorchScript add_sub whose second input is Optional (absent: zeros)."""
    import torch

    class AddSub(torch.nn.Module):
        def forward(self, a, b: Optional[torch.Tensor] = None):
            if b is None:
                b = torch.zeros_like(a)
            return a + b, a - b

    torch.jit.script(AddSub()).save(str(path))


def hand_edited_directory(repo: Path) -> Path:
    """A workbench directory edited by hand: HAND_CONFIG, extra files in the model and version
    folders, and configs/prio.pbtxt and configs/ordered.pbtxt."""
    model = repo / "add_sub"
    (model / "1").mkdir(parents=True)
    (model / "configs").mkdir()
    optional_add_sub(model / "1" / "add_sub.pt")
    (model / "1" / "model.py").write_text(gen.python_backend.model_py_text())
    (model / "config.pbtxt").write_text(HAND_CONFIG)
    for name in VARIANT_EDITS:
        (model / "configs" / f"{name}.pbtxt").write_text(variant_text(name))
    (model / "1" / "tokenizer.json").write_text('{"vocab": 3}')
    (model / "labels.txt").write_text("sum\n")
    (model / "README.md").write_text("served by hand\n")
    return model


def test_a_hand_edited_directory_reads_back_and_regenerates_with_nothing_lost(tmp_path):
    model = hand_edited_directory(tmp_path / "repo")
    before = {p.relative_to(model).as_posix(): p.read_bytes() for p in model.rglob("*") if p.is_file()}
    back = gen.read_back(model)
    loaded = back.settings
    assert any("kept 3 file(s) the generator does not write: 1/tokenizer.json, README.md, labels.txt" in n
               for n in back.notes)
    assert loaded.extra_config == ('output {\n  name: "OUTPUT__0"\n  label_filename: "labels.txt"\n}\n'
                                   'optimization {\n  input_pinned_memory {\n  }\n}\n')
    assert loaded.parameters == {"TOKENIZER": "1/tokenizer.json"}
    assert (loaded.instance_group_kind, loaded.instance_group_name) == ("KIND_CPU", "add_sub_cpu")
    assert loaded.response_cache and not loaded.preserve_ordering and loaded.optional_inputs == ["INPUT__1"]
    assert set(loaded.variants) == {"prio", "ordered"}
    assert loaded.variants["prio"]["priority_levels"] == 2 and loaded.variants["prio"]["model_warmup"] == []
    assert loaded.variants["ordered"]["preserve_ordering"] and not loaded.variants["ordered"]["response_cache"]
    generated = gen.render(loaded)
    assert generated.config == read_config(model)  # every field, as protobufs
    for name in VARIANT_EDITS:
        assert generated.variants[name] == read_config(model / "configs" / f"{name}.pbtxt")
    changes = generated.changes()
    assert changes.empty, changes.summary()
    assert gen.write(generated).unchanged  # nothing rewritten: the comments stay too
    assert {p.relative_to(model).as_posix(): p.read_bytes() for p in model.rglob("*") if p.is_file()} == before

    # one setting changed: only its field changes, the rest (and every kept file) stays
    edited = gen.render(replace(loaded, triton_model_instance_count=1, neuron_core_range="0:0"))
    changes = edited.changes()
    assert changes.modified == ("config.pbtxt", "configs/ordered.pbtxt", "configs/prio.pbtxt")
    assert not changes.removed and not changes.added
    assert set(changes.config_changes) == {  # the variants follow the core range they do not set themselves
        "changes instance_group[add_sub_cpu].count: 2 -> 1",
        'changes parameters.NEURON_CORE_END_INDEX.string_value: "1" -> "0"',
        'changes parameters.NEURON_CORE_END_INDEX.string_value (configs/ordered.pbtxt): "1" -> "0"',
        'changes parameters.NEURON_CORE_END_INDEX.string_value (configs/prio.pbtxt): "1" -> "0"'}
    with pytest.raises(RepositoryError, match="already exists; nothing was written"):
        gen.write(edited)
    result = gen.write(edited, confirm=changes)
    assert result.backup is not None and (result.backup / "config.pbtxt").read_text() == HAND_CONFIG
    for rel in ("1/tokenizer.json", "labels.txt", "README.md", "1/add_sub.pt"):
        assert (model / rel).read_bytes() == before[rel], rel
    assert read_config(model).model_warmup[0].name == "warm_b1"


def test_fresh_settings_over_a_hand_edited_directory_show_what_they_drop(tmp_path):
    model = hand_edited_directory(tmp_path / "repo")
    fresh = gen.render(GenerateSettings(
        triton_model_dir=str(model), compiled_model="1/add_sub.pt", target="cpu", neuron_core_range="0:1",
        triton_model_instance_count=2, triton_input=["INPUT__0,FP32,4", "INPUT__1,FP32,4"],
        triton_output=["OUTPUT__0,FP32,4", "OUTPUT__1,FP32,4"], max_batch_size=8, enable_dynamic_batching=True,
        preferred_batch_size=[4, 8], max_queue_delay_microseconds=100))
    changes = fresh.changes()
    assert set(changes.removed) == {"1/tokenizer.json", "README.md", "labels.txt", "configs/prio.pbtxt",
                                    "configs/ordered.pbtxt"}
    dropped = {c.split(" ", 2)[1] for c in changes.config_changes if c.startswith("drops ")}
    for key in ("model_warmup", "response_cache.enable", "version_policy.latest.num_versions",
                "input[INPUT__1].optional", "output[OUTPUT__0].label_filename", "instance_group[add_sub_cpu].name",
                "dynamic_batching.priority_levels", "dynamic_batching.default_queue_policy.max_queue_size",
                "parameters.TOKENIZER.string_value", "optimization.input_pinned_memory"):
        assert any(d == key or d.startswith(key + ".") or d.startswith(key + "[") for d in dropped), key
    assert "5 file(s) removed" in changes.headline() and "model_warmup, " in changes.headline()
    with pytest.raises(RepositoryError, match="already exists; nothing was written"):
        gen.write(fresh)
    (model / "README.md").write_text("edited after the review\n")
    with pytest.raises(RepositoryError, match="changed since those changes were reviewed"):
        gen.write(fresh, confirm=changes)
    assert (model / "config.pbtxt").read_text() == HAND_CONFIG


def test_cli_refuses_a_regeneration_that_drops_fields_and_shows_the_diff(tmp_path, capsys):
    model = hand_edited_directory(tmp_path / "repo")
    argv = ["--model_type", "pytorch", "--target", "cpu", "--compiled_model", "1/add_sub.pt", "--triton_input",
            "INPUT__0,FP32,4", "INPUT__1,FP32,4", "--triton_output", "OUTPUT__0,FP32,4", "OUTPUT__1,FP32,4",
            "--max_batch_size", "8", "--neuron_core_range", "0:1", "--triton_model_instance_count", "2",
            "--triton_model_dir", str(model)]
    assert run_generate(argv) == 2
    out, err = capsys.readouterr()
    assert "already exists; nothing was written" in err and "--force" in err
    assert "removes 1/tokenizer.json" in out and "drops model_warmup" in out and "--- a/config.pbtxt" in out
    assert (model / "config.pbtxt").read_text() == HAND_CONFIG


# --- a real tritonserver --------------------------------------------------------------------------

def infer(server, a, b=None, priority=0):
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(server.http_url)
    try:
        inputs = [httpclient.InferInput("INPUT__0", list(a.shape), "FP32")]
        inputs[0].set_data_from_numpy(a)
        if b is not None:
            inputs.append(httpclient.InferInput("INPUT__1", list(b.shape), "FP32"))
            inputs[1].set_data_from_numpy(b)
        result = client.infer("add_sub", inputs, priority=priority)
        return result.as_numpy("OUTPUT__0"), result.as_numpy("OUTPUT__1")
    finally:
        client.close()


@pytest.fixture(scope="module")
def served(tmp_path_factory, triton_server_module):
    """The hand-edited directory read back, regenerated and written (unchanged: byte for byte what the
    generator rendered), loaded by one real server for the module."""
    repo = tmp_path_factory.mktemp("roundtrip") / "repo"
    model = hand_edited_directory(repo)
    result = gen.write(gen.render(gen.load_settings(model)))
    assert result.unchanged
    server = triton_server_module(repo, log_verbose=1)
    server.load("add_sub")
    return server, model


def cache_counts(server) -> tuple[int, int]:
    stats = server.stats("add_sub")["model_stats"][0]["inference_stats"]
    return int(stats["cache_hit"]["count"]), int(stats["cache_miss"]["count"])


@pytest.mark.server
def test_warmup_runs_before_the_model_is_ready(served):
    server, _ = served
    log = server.log_tail(3000)
    warm = [i for i, line in enumerate(log) if "running warmup sample 'warm_b1'" in line]
    ready = [i for i, line in enumerate(log) if "successfully loaded 'add_sub'" in line]
    assert len(warm) == 4 and ready and max(warm) < ready[0], "warm-up (2 runs x 2 instances) before READY"


@pytest.mark.server
def test_a_request_may_leave_out_the_optional_input(served):
    server, _ = served
    a = np.arange(8, dtype=np.float32).reshape(2, 4)
    b = np.full((2, 4), 0.5, dtype=np.float32)
    total, difference = infer(server, a, b)
    np.testing.assert_array_equal(total, a + b)
    np.testing.assert_array_equal(difference, a - b)
    total, difference = infer(server, a + 100)  # INPUT__1 is optional: left out, the model gets None
    np.testing.assert_array_equal(total, a + 100)
    np.testing.assert_array_equal(difference, a + 100)


@pytest.mark.server
def test_the_response_cache_answers_a_repeated_request(served):
    server, _ = served
    assert any(a.startswith("--cache-config=local") for a in server.command())  # the model asked for it
    hits, misses = cache_counts(server)
    a = np.full((1, 4), 7.0, dtype=np.float32)
    first = infer(server, a, a)
    again = infer(server, a, a)  # the same request: answered by the cache, not the model
    np.testing.assert_array_equal(first[0], again[0])
    assert cache_counts(server) == (hits + 1, misses + 1)
    infer(server, a, a + 1)  # another request: a miss
    assert cache_counts(server) == (hits + 1, misses + 2)


@pytest.mark.server
def test_the_served_config_carries_every_field_written(served):
    """Triton adds its defaults to the config it serves; every field the directory sets is there too."""
    server, model = served
    written, echoed = leaves(read_config(model)), leaves(server.model_config("add_sub", as_proto=True))
    assert {key: echoed.get(key) for key in written} == written
    assert any(key.startswith(".dynamic_batching.priority_queue_policy") for key in written)
    assert ".instance_group[0].rate_limiter.resources[0].name" in written and ".input[1].optional" in written
