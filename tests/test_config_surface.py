"""The Triton config surface users tune, and round trips that keep what the user wrote.

Typed options (workbench.generate.options) checked against Triton's own rules, reachable from the
API and the CLI; a hand-edited directory with every field read back and regenerated with nothing
lost (fields, custom parameters, extra files, comments, a configs/ variant); changes shown and
confirmed before anything is replaced; and a real tritonserver loading the result: warm-up before
READY, the response cache answering a repeated request, a request without its optional input, and
each configs/<name>.pbtxt served by --model-config-name.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path
from typing import Optional

import numpy as np
import pytest

from workbench import generate as gen
from workbench.generate import options
from workbench.generate.config import parameters_of, read_config
from workbench.generate.repository import RepositoryError
from workbench.generate import GenerateSettings, QueuePolicy, RateLimiter, RateLimiterResource, VersionPolicy, Warmup

COMPILED = "/opt/models/add_sub.pt"


def settings(tmp_path, **overrides) -> GenerateSettings:
    base = dict(triton_model_dir=str(tmp_path / "m"), compiled_model=COMPILED, for_other_machine=True, target="cpu",
                triton_input=["INPUT__0,FP32,4", "INPUT__1,FP32,4"], triton_output=["OUTPUT__0,FP32,4"],
                max_batch_size=8, enable_dynamic_batching=True)
    base.update(overrides)
    return GenerateSettings(**base)


def run_generate(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="workbench", allow_abbrev=False)
    gen.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["generate", *argv])
    return args.func(args)


# --- the spellings --------------------------------------------------------------------------------

def test_option_spellings_parse_to_the_typed_values():
    assert options.parse_queue_policy("max_queue_size=16,timeout_action=delay,default_timeout_microseconds=5,"
                                      "allow_timeout_override=true") == QueuePolicy("DELAY", 5, True, 16)
    assert options.parse_priority_queue_policy("2:max_queue_size=4") == (2, QueuePolicy(max_queue_size=4))
    assert options.parse_version_policy("latest") == VersionPolicy("latest", 1)
    assert options.parse_version_policy("latest:3") == VersionPolicy("latest", 3)
    assert options.parse_version_policy("all") == VersionPolicy("all")
    assert options.parse_version_policy("specific:1,3") == VersionPolicy("specific", versions=(1, 3))
    assert str(VersionPolicy("specific", versions=(1, 3))) == "specific:1,3"
    assert options.parse_resource("R1:2") == RateLimiterResource("R1", 2)
    assert options.parse_resource("GPU_MEM:4:global") == RateLimiterResource("GPU_MEM", 4, True)


@pytest.mark.parametrize("parse, text, message", [
    (options.parse_queue_policy, "size=4", "unknown key(s) size"),
    (options.parse_queue_policy, "max_queue_size", "expected KEY=VALUE"),
    (options.parse_queue_policy, "max_queue_size=lots", "max_queue_size 'lots' is not a whole number"),
    (options.parse_queue_policy, "allow_timeout_override=maybe", "must be true or false"),
    (options.parse_priority_queue_policy, "max_queue_size=4", "expected LEVEL:KEY=VALUE"),
    (options.parse_version_policy, "newest", "expected latest[:N], all or specific:V[,V]"),
    (options.parse_version_policy, "specific", "expected latest[:N], all or specific:V[,V]"),
    (options.parse_resource, "R1", "expected NAME:COUNT or NAME:COUNT:global"),
])
def test_option_spellings_that_do_not_parse_say_the_form(parse, text, message):
    with pytest.raises(options.OptionError, match=message.replace("[", r"\[").replace("]", r"\]")
                       .replace("(", r"\(").replace(")", r"\)")):
        parse(text)


# --- Triton's rules, before anything is written ------------------------------------------------------

@pytest.mark.parametrize("overrides, message", [
    # model_config_utils.cc ValidateModelConfig
    (dict(preserve_ordering=True, priority_levels=2, default_priority_level=1),
     "--preserve-ordering allows one priority level only, not --priority-levels 2"),
    (dict(preserve_ordering=True, default_queue_policy=QueuePolicy("DELAY", 100)),
     "--default-queue-policy: timeout_action DELAY with a timeout cannot be used with --preserve-ordering"),
    (dict(priority_levels=2), "--default-priority-level 0 must be in 1..2 with --priority-levels 2"),
    (dict(priority_levels=2, default_priority_level=3), "--default-priority-level 3 must be in 1..2"),
    (dict(default_priority_level=1), "--default-priority-level 1 needs --priority-levels"),
    (dict(priority_levels=2, default_priority_level=1, priority_queue_policy={3: QueuePolicy()}),
     "--priority-queue-policy level 3 must be in 1..2"),
    (dict(priority_queue_policy={1: QueuePolicy()}), "--priority-queue-policy level 1 needs --priority-levels"),
    (dict(default_queue_policy=QueuePolicy("DROP")), "timeout_action 'DROP' is not one of REJECT, DELAY"),
    (dict(default_queue_policy=QueuePolicy(max_queue_size=-1)), "max_queue_size -1 is negative"),
    (dict(enable_dynamic_batching=False, preserve_ordering=True),
     "--preserve-ordering configure the dynamic batcher: add --enable_dynamic_batching"),
    (dict(response_cache=True, decoupled=True, model_py=__file__),
     "--response-cache cannot be used with a decoupled model"),
    (dict(decoupled=True), "--decoupled: the generated model.py answers from execute()"),
    (dict(extra_config="sequence_batching { }"), "extra_config has sequence_batching, and Triton takes one scheduler"),
    # backend_model_instance.cc GenerateWarmupData
    (dict(model_warmup=[Warmup(inputs={"INPUT__0": options.WarmupInput("FP32", (-1,))})]),
     "dims [-1] must all be given (no -1)"),
    (dict(model_warmup=[Warmup(inputs={"INPUT__0": options.WarmupInput("FP32", (5,)),
                                       "INPUT__1": options.WarmupInput("FP32", (4,))})]),
     "warm-up sample 'warmup' input 'INPUT__0': dims [5] do not fit the input's [4]"),
    (dict(model_warmup=[Warmup(inputs={"INPUT__0": options.WarmupInput("INT64", (4,))})]),
     "input(s) INPUT__1 missing"),
    (dict(model_warmup=[Warmup(inputs={"INPUT__0": options.WarmupInput("INT64", (4,)),
                                       "INPUT__1": options.WarmupInput("FP32", (4,))})]),
     "data_type INT64 differs from the input's FP32"),
    (dict(model_warmup=[Warmup(inputs={"INPUT__0": options.WarmupInput("FP32", (4,), "file", "in0.bin"),
                                       "INPUT__1": options.WarmupInput("FP32", (4,))})]),
     "warmup/in0.bin is not in the model directory"),
    (dict(model_warmup=[Warmup(batch_size=0)]), "batch_size 0 must be at least 1 (Triton skips 0)"),
    (dict(model_warmup=[Warmup(), Warmup()]), "warm-up sample 'warmup': duplicate name"),
    (dict(optional_inputs=["INPUT__7"]), "--optional-input INPUT__7: not a model input"),
    (dict(optional_inputs=["INPUT__0", "INPUT__1"]), "every input is optional"),
    (dict(instance_group_kind="KIND_GPU"), "KIND_GPU: the generated model.py runs on the CPU or NeuronCores"),
    (dict(instance_group_kind="KIND_TPU"), "--instance-group-kind 'KIND_TPU' is not one of"),
    (dict(rate_limiter=RateLimiter((RateLimiterResource("R"), RateLimiterResource("R")))),
     "rate limiter resource(s) R given twice"),
    (dict(version_policy=VersionPolicy("specific", versions=(2,))),
     "--version-policy specific:2 does not serve --model_version 1"),
    (dict(version_policy=VersionPolicy("specific", versions=(1, 2))), "no version folder 2 in the model directory"),
    (dict(version_policy=VersionPolicy("latest", 0)), "--version-policy latest:0 must keep at least 1 version"),
    # what is kept must stay the user's
    (dict(parameters={"COMPILED_MODEL": "x"}), "parameter COMPILED_MODEL is written by the generator"),
    (dict(extra_config="max_batch_size: 4"), "extra_config sets max_batch_size, which the settings own"),
    (dict(extra_config='output { name: "nope" label_filename: "l.txt" }'),
     "extra_config output 'nope' is not one of the model's outputs"),
    (dict(extra_config="max_batch_size: four"), "extra_config line 1"),
    (dict(extra_files={"../x": __file__}), "extra file '../x' must be a relative path inside the model directory"),
    (dict(extra_files={"config.pbtxt": __file__}), "extra file config.pbtxt is also a file the generator writes"),
    (dict(extra_files={"a.txt": "/nonexistent/a.txt"}), "extra file a.txt: its source /nonexistent/a.txt does not exist"),
    (dict(model_py="/nonexistent/model.py"), "model_py /nonexistent/model.py is not a file"),
    (dict(compiled_model="bert.pt", compiled_model_base="server_cwd"),
     "is relative to tritonserver's working directory"),
    (dict(variants={"bad name": {}}), "config variant name 'bad name' is not usable"),
    (dict(variants={"v": {"model_version": 2}}), "configs/v.pbtxt: model_version cannot differ between configs"),
    (dict(variants={"v": {"neuron_core_range": "3:1"}}), "configs/v.pbtxt: --neuron_core_range: core range 3:1 is reversed"),
])
def test_each_config_rule_is_named_before_writing(tmp_path, overrides, message):
    problems = gen.validate(settings(tmp_path, **overrides))
    assert any(message in p for p in problems), problems
    with pytest.raises(gen.GenerateError):
        gen.render(settings(tmp_path, **overrides))
    assert not (tmp_path / "m").exists()


def test_rules_that_hold_are_accepted(tmp_path):
    ok = settings(tmp_path, preserve_ordering=True, priority_levels=1, default_priority_level=1,
                  default_queue_policy=QueuePolicy("DELAY"), priority_queue_policy={1: QueuePolicy(max_queue_size=4)},
                  rate_limiter=RateLimiter((RateLimiterResource("R1", 2),), 1), version_policy=VersionPolicy("all"))
    generated = gen.render(ok)
    assert any("--rate-limit=execution_count" in w for w in generated.warnings)


# --- every field, rendered and read back ----------------------------------------------------------

EVERY_FIELD = dict(
    instance_group_kind="KIND_CPU", instance_group_name="add_sub_cpu",
    rate_limiter=RateLimiter((RateLimiterResource("R1", 1), RateLimiterResource("MEM", 2, True)), 2),
    preferred_batch_size=[4, 8], max_queue_delay_microseconds=100,
    priority_levels=2, default_priority_level=1,
    default_queue_policy=QueuePolicy("REJECT", 5_000_000, True, 16),
    priority_queue_policy={2: QueuePolicy("DELAY", 1_000_000, False, 4)},
    optional_inputs=["INPUT__1"],
    model_warmup=[Warmup("warm_b1", batch_size=1, count=2, inputs={
        "INPUT__0": options.WarmupInput("FP32", (4,), "random"), "INPUT__1": options.WarmupInput("FP32", (4,))}),
        Warmup("from_spec", count=1)],
    response_cache=True, version_policy=VersionPolicy("latest", 1), decoupled=False,
    parameters={"TOKENIZER": "1/tokenizer.json"},
)


def test_every_field_is_written_as_triton_reads_it_and_reads_back(tmp_path):
    generated = gen.render(settings(tmp_path, **EVERY_FIELD))
    cfg = generated.config
    group = cfg.instance_group[0]
    assert (group.name, group.count) == ("add_sub_cpu", 1) and group.kind == group.KIND_CPU
    assert [(r.name, r.count, getattr(r, "global")) for r in group.rate_limiter.resources] == [
        ("R1", 1, False), ("MEM", 2, True)] and group.rate_limiter.priority == 2
    batching = cfg.dynamic_batching
    assert (batching.priority_levels, batching.default_priority_level, batching.preserve_ordering) == (2, 1, False)
    assert batching.default_queue_policy.max_queue_size == 16 and batching.default_queue_policy.allow_timeout_override
    assert batching.priority_queue_policy[2].timeout_action == batching.priority_queue_policy[2].DELAY
    assert [t.optional for t in cfg.input] == [False, True]
    warm, spec_warm = cfg.model_warmup
    assert (warm.name, warm.batch_size, warm.count) == ("warm_b1", 1, 2)
    assert warm.inputs["INPUT__0"].random_data and warm.inputs["INPUT__1"].zero_data
    # generated from the spec: every input, its dtype and dims, zeros
    assert sorted(spec_warm.inputs) == ["INPUT__0", "INPUT__1"]
    assert list(spec_warm.inputs["INPUT__1"].dims) == [4] and spec_warm.inputs["INPUT__1"].zero_data
    assert cfg.response_cache.enable and cfg.HasField("model_transaction_policy")
    assert cfg.version_policy.latest.num_versions == 1
    assert parameters_of(cfg)["TOKENIZER"] == "1/tokenizer.json"
    dest = gen.write(generated).path
    loaded = gen.load_settings(dest)
    for key, value in EVERY_FIELD.items():
        assert getattr(loaded, key) == value, key
    assert loaded.model_warmup[1].inputs is None  # still "from the spec": it follows an edited spec
    assert gen.render(loaded).changes().empty


def test_warmup_from_the_spec_fills_variable_dims_with_one(tmp_path):
    generated = gen.render(settings(tmp_path, max_batch_size=0, enable_dynamic_batching=False,
                                    triton_input=["INPUT__0,INT64,-1x384", "INPUT__1,INT64,-1x384"],
                                    model_warmup=[Warmup(data="random")]))
    warm = generated.config.model_warmup[0]
    assert list(warm.inputs["INPUT__0"].dims) == [1, 384] and warm.inputs["INPUT__0"].random_data


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
  preserve_ordering: true
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
# a configs/ variant: two priority levels (so no preserve_ordering), one instance, no warm-up
VARIANT_EDIT = {"preserve_ordering: true": "", "priority_levels: 1": "priority_levels: 2",
                "count: 2\n    rate_limiter": "count: 1\n    rate_limiter",
                "key: 1 value { timeout_action: REJECT": "key: 2 value { timeout_action: DELAY",
                'string_value: "1/tokenizer.json" } }': 'string_value: "1/tokenizer.json" } }\n'
                                                       'parameters { key: "VARIANT" value { string_value: "prio" } }'}


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
    folders, warm-up data, and configs/prio.pbtxt."""
    model = repo / "add_sub"
    (model / "1").mkdir(parents=True)
    (model / "configs").mkdir()
    optional_add_sub(model / "1" / "add_sub.pt")
    (model / "1" / "model.py").write_text(gen.python_backend.model_py_text())
    (model / "config.pbtxt").write_text(HAND_CONFIG)
    variant = HAND_CONFIG.replace("model_warmup [", "model_warmup_gone [")
    variant = variant[:variant.index("model_warmup_gone [")] + variant[variant.index("optimization"):]
    for old, new in VARIANT_EDIT.items():
        assert old in variant, old
        variant = variant.replace(old, new)
    (model / "configs" / "prio.pbtxt").write_text(variant)
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
    assert loaded.preserve_ordering and loaded.response_cache and loaded.optional_inputs == ["INPUT__1"]
    assert set(loaded.variants) == {"prio"}
    assert loaded.variants["prio"]["priority_levels"] == 2 and loaded.variants["prio"]["model_warmup"] == []
    generated = gen.render(loaded)
    assert generated.config == read_config(model)  # every field, as protobufs
    assert generated.variants["prio"] == read_config(model / "configs" / "prio.pbtxt")
    changes = generated.changes()
    assert changes.empty, changes.summary()
    assert gen.write(generated).unchanged  # nothing rewritten: the comments stay too
    assert {p.relative_to(model).as_posix(): p.read_bytes() for p in model.rglob("*") if p.is_file()} == before

    # one setting changed: only its field changes, the rest (and every kept file) stays
    edited = gen.render(replace(loaded, triton_model_instance_count=1, neuron_core_range="0:0"))
    changes = edited.changes()
    assert changes.modified == ("config.pbtxt", "configs/prio.pbtxt") and not changes.removed and not changes.added
    assert set(changes.config_changes) == {  # the variant follows the core range it does not set itself
        "changes instance_group[add_sub_cpu].count: 2 -> 1",
        'changes parameters.NEURON_CORE_END_INDEX.string_value: "1" -> "0"',
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
    assert set(changes.removed) == {"1/tokenizer.json", "README.md", "labels.txt", "configs/prio.pbtxt"}
    dropped = {c.split(" ", 2)[1] for c in changes.config_changes if c.startswith("drops ")}
    for key in ("model_warmup", "response_cache.enable", "version_policy.latest.num_versions",
                "input[INPUT__1].optional", "output[OUTPUT__0].label_filename", "instance_group[add_sub_cpu].name",
                "dynamic_batching.preserve_ordering", "dynamic_batching.default_queue_policy.max_queue_size",
                "parameters.TOKENIZER.string_value", "optimization.input_pinned_memory"):
        assert any(d == key or d.startswith(key + ".") or d.startswith(key + "[") for d in dropped), key
    assert "4 file(s) removed" in changes.headline() and "model_warmup, " in changes.headline()
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


def test_cli_flags_reach_every_field_and_variants(tmp_path, capsys):
    dest = tmp_path / "repo" / "add_sub"
    argv = ["--model_type", "pytorch", "--target", "cpu", "--compiled_model", COMPILED, "--for-other-machine",
            "--triton_input", "INPUT__0,FP32,4", "INPUT__1,FP32,4", "--triton_output", "OUTPUT__0,FP32,4",
            "--max_batch_size", "8", "--enable_dynamic_batching", "--neuron_core_range", "0:1",
            "--triton_model_instance_count", "2", "--instance-group-kind", "KIND_CPU", "--instance-group-name", "g",
            "--rate-limiter-resource", "R1:1", "--rate-limiter-resource", "MEM:2:global", "--rate-limiter-priority", "3",
            "--priority-levels", "2", "--default-priority-level", "2",
            "--default-queue-policy", "max_queue_size=16,allow_timeout_override=true",
            "--priority-queue-policy", "1:timeout_action=DELAY,default_timeout_microseconds=100",
            "--optional-input", "INPUT__1", "--warmup", "3", "--warmup-batch-size", "2", "--warmup-data", "random",
            "--response-cache", "--version-policy", "latest:2", "--parameter", "TOKENIZER=tok.json",
            "--variant", "one=--triton_model_instance_count 1 --neuron_core_range 0:0 --parameter VARIANT=one",
            "--variant", "inf2=--inf2 --compiled_model /opt/models/add_sub.neuron.pt",
            "--triton_model_dir", str(dest)]
    assert run_generate(argv) == 0, capsys.readouterr().err
    cfg = read_config(dest)
    group = cfg.instance_group[0]
    assert (group.name, group.kind, group.rate_limiter.priority) == ("g", group.KIND_CPU, 3)
    assert [r.name for r in group.rate_limiter.resources] == ["R1", "MEM"]
    batching = cfg.dynamic_batching
    assert (batching.priority_levels, batching.default_priority_level) == (2, 2)
    assert batching.default_queue_policy.max_queue_size == 16
    assert batching.priority_queue_policy[1].default_timeout_microseconds == 100
    assert cfg.input[1].optional and cfg.response_cache.enable and cfg.version_policy.latest.num_versions == 2
    warm = cfg.model_warmup[0]
    assert (warm.count, warm.batch_size) == (3, 2) and warm.inputs["INPUT__0"].random_data
    assert parameters_of(cfg)["TOKENIZER"] == "tok.json"
    one = read_config(dest / "configs" / "one.pbtxt")
    assert one.instance_group[0].count == 1 and parameters_of(one)["VARIANT"] == "one"
    assert "TOKENIZER" not in parameters_of(one)  # --parameter in a variant replaces the parameters
    assert one.response_cache.enable and one.model_warmup[0].count == 3  # the rest is inherited
    inf2 = read_config(dest / "configs" / "inf2.pbtxt")
    assert parameters_of(inf2)["WORKBENCH_TARGET"] == "inf2"
    assert parameters_of(inf2)["COMPILED_MODEL"] == "/opt/models/add_sub.neuron.pt"
    assert sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file()) == [
        "1/model.py", "config.pbtxt", "configs/inf2.pbtxt", "configs/one.pbtxt"]
    loaded = gen.load_settings(dest)
    assert set(loaded.variants) == {"inf2", "one"} and gen.render(loaded).changes().empty


@pytest.mark.parametrize("extra, message", [
    (["--default-queue-policy", "size=3"], "unknown key(s) size"),
    (["--version-policy", "newest"], "expected latest[:N], all or specific:V[,V]"),
    (["--variant", "nope"], "expected NAME='FLAGS'"),
    (["--warmup-data", "zero"], "--warmup-batch-size and --warmup-data need --warmup COUNT"),
    (["--variant", "v=--triton_model_dir elsewhere"],
     "--variant v: '--triton_model_dir elsewhere': unrecognized arguments: --triton_model_dir elsewhere"),
    (["--variant", "v=--max_batch_size many"], "--variant v: '--max_batch_size many': argument --max_batch_size: "
                                               "invalid int value: 'many'"),
])
def test_cli_option_errors_are_one_line(tmp_path, capsys, extra, message):
    argv = ["--target", "cpu", "--compiled_model", COMPILED, "--for-other-machine", "--triton_input",
            "INPUT__0,FP32,4", "--triton_output", "OUTPUT__0,FP32,4", "--triton_model_dir", str(tmp_path / "m"), *extra]
    try:
        code = run_generate(argv)
    except SystemExit as done:
        code = done.code
    assert code == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "m").exists()


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
def served_repo(tmp_path_factory) -> Path:
    """The hand-edited directory after a read-back + regenerate + write (what the user would serve)."""
    repo = tmp_path_factory.mktemp("surface") / "repo"
    model = hand_edited_directory(repo)
    loaded = gen.load_settings(model)
    result = gen.write(gen.render(replace(loaded, triton_model_instance_count=2)))  # unchanged
    assert result.unchanged
    return repo


@pytest.mark.server
def test_triton_loads_the_regenerated_hand_edited_directory(served_repo, triton_server):
    server = triton_server(served_repo, log_verbose=1)
    assert any(a.startswith("--cache-config=local") for a in server.command())  # a model asked for the cache
    server.load("add_sub")
    log = server.log_tail(3000)
    warm = [i for i, line in enumerate(log) if "running warmup sample 'warm_b1'" in line]
    ready = [i for i, line in enumerate(log) if "successfully loaded 'add_sub'" in line]
    assert len(warm) == 4 and ready and max(warm) < ready[0], "warm-up (2 runs x 2 instances) before READY"
    a = np.arange(8, dtype=np.float32).reshape(2, 4)
    b = np.full((2, 4), 0.5, dtype=np.float32)
    total, difference = infer(server, a, b)
    np.testing.assert_array_equal(total, a + b)
    np.testing.assert_array_equal(difference, a - b)
    total, difference = infer(server, a)  # INPUT__1 is optional: left out, the model gets None
    np.testing.assert_array_equal(total, a)
    np.testing.assert_array_equal(difference, a)
    infer(server, a)  # the same request again: answered by the response cache
    stats = server.stats("add_sub")["model_stats"][0]["inference_stats"]
    assert int(stats["cache_hit"]["count"]) == 1 and int(stats["cache_miss"]["count"]) == 2
    served = server.model_config("add_sub", as_proto=True)
    assert served.dynamic_batching.preserve_ordering and served.dynamic_batching.default_queue_policy.max_queue_size == 16
    assert served.instance_group[0].name == "add_sub_cpu" and served.input[1].optional
    assert served.output[0].label_filename == "labels.txt" and served.response_cache.enable
    assert parameters_of(served)["TOKENIZER"] == "1/tokenizer.json"


@pytest.mark.server
def test_each_named_config_is_served_with_model_config_name(served_repo, triton_server):
    server = triton_server(served_repo, model_config_name="prio")
    assert "--model-config-name=prio" in server.command()
    server.load("add_sub")
    served = server.model_config("add_sub", as_proto=True)
    assert parameters_of(served)["VARIANT"] == "prio" and served.dynamic_batching.priority_levels == 2
    assert served.instance_group[0].count == 1 and not served.model_warmup
    a = np.ones((1, 4), dtype=np.float32)
    for priority in (1, 2):
        total, _ = infer(server, a, a, priority=priority)
        np.testing.assert_array_equal(total, a + a)
