"""The Triton config surface users tune: typed, checked by Triton's own rules, reachable from the
API and the CLI, written as Triton reads it and read back.

Typed options (workbench.generate.options), their CLI spellings, each of Triton's rules named before
anything is written, every field rendered and read back into the same settings. The hand-edited
round trip and the real server are in test_config_roundtrip.py, the configs/ variants served by
--model-config-name in test_config_variants.py.
"""

from __future__ import annotations

import argparse
import pytest

from workbench import generate as gen
from workbench.cli import generate as generate_cli
from workbench.generate import options
from workbench.generate.config import parameters_of, read_config
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
    generate_cli.register(parser.add_subparsers(dest="command"))
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
    # measured on Triton 2.51: the first cache hit stalls every later request (workbench.generate.config)
    (dict(preserve_ordering=True, response_cache=True), "--preserve-ordering cannot be used with --response-cache"),
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


def test_a_non_ascii_model_path_is_warned_of_before_writing(tmp_path):
    plain = gen.render(settings(tmp_path))
    assert not any("not an ASCII path" in w for w in plain.warnings), plain.warnings
    accented = gen.render(settings(tmp_path, triton_model_dir=str(tmp_path / "répo" / "m")))
    assert any("répo" in w and "not an ASCII path" in w and "UnicodeEncodeError" in w for w in accented.warnings)
    assert not (tmp_path / "répo").exists()  # a warning, before anything is written


def test_the_premise_the_python_backend_cannot_load_from_a_non_ascii_path(tmp_path, generate_cpu_model, triton_server):
    """What the warning above says, on the real tritonserver 2.51 (if a release fixes it, this
    fails and the warning goes)."""
    from workbench.server.errors import ModelLoadError

    model_dir = generate_cpu_model(tmp_path / "répo")
    server = triton_server(model_dir.parent)
    with pytest.raises(ModelLoadError, match="UnicodeEncodeError"):
        server.load(model_dir.name)
    assert server.running
