"""config.py: ModelConfig built from a spec, text and JSON round trips, read-back and validation
messages. The real-server test (a generated config accepted by Triton) lives in test_generate.py."""

import json

import pytest
from google.protobuf import json_format
from tritonclient.grpc import model_config_pb2

from workbench.generate.config import (
    ConfigError,
    ModelConfig,
    build_config,
    check_config,
    from_text,
    parameter_string,
    parameters_of,
    read_config,
    spec_from_config,
    to_json,
    to_text,
    validate_config,
)
from workbench.spec import TRITON_DTYPES, ModelSpec

ADD_SUB = ModelSpec.parse(["INPUT__0,INT64,4", "INPUT__1,INT64,4"], ["OUTPUT__0,INT64,4", "OUTPUT__1,INT64,4"])

UPSTREAM_PARAMS = {"COMPILED_MODEL": "model.pt", "NEURON_CORE_START_INDEX": 0, "NEURON_CORE_END_INDEX": 7,
                   "NUM_THREADS_PER_CORE": 1}


def batched(**overrides):
    kwargs = dict(max_batch_size=1000, dynamic_batching=True, preferred_batch_sizes=[8], max_queue_delay_us=100,
                  instance_count=3, parameters=UPSTREAM_PARAMS)
    kwargs.update(overrides)
    return build_config("add-sub-1x4", ADD_SUB, **kwargs)


def test_build_config_fills_every_field_from_the_spec():
    cfg = batched()
    assert cfg.name == "add-sub-1x4" and cfg.backend == "python" and cfg.max_batch_size == 1000
    assert [(t.name, model_config_pb2.DataType.Name(t.data_type), list(t.dims)) for t in cfg.input] == [
        ("INPUT__0", "TYPE_INT64", [4]), ("INPUT__1", "TYPE_INT64", [4])]
    assert [t.name for t in cfg.output] == ["OUTPUT__0", "OUTPUT__1"]
    assert list(cfg.dynamic_batching.preferred_batch_size) == [8]
    assert cfg.dynamic_batching.max_queue_delay_microseconds == 100
    assert len(cfg.instance_group) == 1
    assert cfg.instance_group[0].count == 3 and cfg.instance_group[0].kind == model_config_pb2.ModelInstanceGroup.KIND_MODEL
    assert parameters_of(cfg) == {"COMPILED_MODEL": "model.pt", "NEURON_CORE_END_INDEX": "7",
                                  "NEURON_CORE_START_INDEX": "0", "NUM_THREADS_PER_CORE": "1"}


def test_dynamic_batching_block_only_when_enabled_and_empty_block_is_kept():
    assert not build_config("m", ADD_SUB, max_batch_size=8, preferred_batch_sizes=[4]).HasField("dynamic_batching")
    cfg = build_config("m", ADD_SUB, max_batch_size=8, dynamic_batching=True)
    assert cfg.HasField("dynamic_batching")
    assert "dynamic_batching {\n}" in to_text(cfg)
    assert from_text(to_text(cfg)).HasField("dynamic_batching")


def test_booleans_become_lowercase_strings_and_versions_pin_a_policy():
    cfg = build_config("m", ADD_SUB, parameters={"BATCH_REQUESTS": False, "CPU_AFFINITY": True}, versions=[3])
    assert parameters_of(cfg) == {"BATCH_REQUESTS": "false", "CPU_AFFINITY": "true"}
    assert list(cfg.version_policy.specific.versions) == [3]


@pytest.mark.parametrize("dtype", TRITON_DTYPES)
def test_every_triton_dtype_round_trips_through_text_and_spec(dtype):
    spec = ModelSpec.parse([f"INPUT__0,{dtype},2x3"], [f"OUTPUT__0,{dtype},-1"])
    cfg = build_config("m", spec)
    expected = "TYPE_STRING" if dtype == "BYTES" else f"TYPE_{dtype}"
    assert f"data_type: {expected}\n" in to_text(cfg)
    assert from_text(to_text(cfg)) == cfg
    assert spec_from_config(from_text(to_text(cfg))) == spec


def test_text_is_readable_and_stable():
    cfg = build_config("tiny", ModelSpec.parse(["INPUT__0,FP32,1x384"], ["OUTPUT__0,FP32,2"]),
                       parameters={"Z": "last", "A": "first"})
    assert to_text(cfg) == (
        'name: "tiny"\n'
        'backend: "python"\n'
        'input {\n  name: "INPUT__0"\n  data_type: TYPE_FP32\n  dims: [1, 384]\n}\n'
        'output {\n  name: "OUTPUT__0"\n  data_type: TYPE_FP32\n  dims: [2]\n}\n'
        'instance_group {\n  count: 1\n  kind: KIND_MODEL\n}\n'
        'parameters {\n  key: "A"\n  value {\n    string_value: "first"\n  }\n}\n'
        'parameters {\n  key: "Z"\n  value {\n    string_value: "last"\n  }\n}\n'
    )


def test_text_round_trip_gives_an_equal_protobuf():
    cfg = batched()
    assert from_text(to_text(cfg)) == cfg
    assert to_text(from_text(to_text(cfg))) == to_text(cfg)


def test_upstream_string_built_config_parses():
    """Upstream wrote one `input [...]` block per tensor, list-repr dims and trailing spaces."""
    text = (
        'name: "add-sub-1x4"\nbackend: "python"\nmax_batch_size: 0\n'
        'input [\n  {\n    name: "INPUT__0"\n    data_type: TYPE_INT64\n    dims: [-1, 4]\n  }\n]\n'
        'input [\n  {\n    name: "INPUT__1"\n    data_type: TYPE_INT64\n    dims: [-1, 4]\n  }\n]\n'
        'output [\n  {\n    name: "OUTPUT__0"\n    data_type: TYPE_INT64\n    dims: [-1, 4]\n  }\n]\n'
        'instance_group [\n    {\n        kind: KIND_MODEL\n        count: 1\n    }\n]\n'
        'parameters: {key: "COMPILED_MODEL", value: {string_value: "/m.pt"}} \n'
    )
    cfg = from_text(text)
    assert [t.name for t in cfg.input] == ["INPUT__0", "INPUT__1"]
    assert list(cfg.input[1].dims) == [-1, 4]
    assert parameters_of(cfg) == {"COMPILED_MODEL": "/m.pt"}


def test_parse_error_names_line_and_column():
    with pytest.raises(ConfigError, match=r"config.pbtxt line 3, column 17: .*foo"):
        from_text('name: "m"\nbackend: "python"\nmax_batch_size: foo\n')
    with pytest.raises(ConfigError, match=r"my.pbtxt line 1, column \d+: .*no_such_field"):
        from_text("no_such_field: 1", source="my.pbtxt")


def test_json_uses_proto_field_names_and_parses_back():
    cfg = batched()
    data = json.loads(to_json(cfg))
    assert data["max_batch_size"] == 1000 and "maxBatchSize" not in data
    assert data["dynamic_batching"]["preferred_batch_size"] == [8]
    assert data["parameters"]["COMPILED_MODEL"] == {"string_value": "model.pt"}
    assert json_format.Parse(to_json(cfg), ModelConfig()) == cfg


def test_read_config_takes_a_file_or_a_directory(tmp_path):
    cfg = batched()
    (tmp_path / "config.pbtxt").write_text(to_text(cfg))
    assert read_config(tmp_path) == cfg
    assert read_config(tmp_path / "config.pbtxt") == cfg
    with pytest.raises(ConfigError, match="no such config file"):
        read_config(tmp_path / "missing")


def test_spec_from_config_reports_a_bad_tensor_by_name():
    cfg = from_text('name: "m" input { name: "x" data_type: TYPE_FP32 dims: [0] } output { name: "y" '
                    'data_type: TYPE_FP32 dims: [1] }')
    with pytest.raises(ConfigError, match="input 'x'"):
        spec_from_config(cfg)


def test_bad_instance_kind_is_refused():
    with pytest.raises(ConfigError, match="KIND_BANANA"):
        build_config("m", ADD_SUB, kind="KIND_BANANA")


def test_valid_config_has_no_problems():
    assert validate_config(batched()) == []
    assert check_config(batched()) == batched()


def problems_of(text):
    return validate_config(from_text(text))


IO = ('input { name: "INPUT__0" data_type: TYPE_FP32 dims: [4] } '
      'output { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [4] } ')


@pytest.mark.parametrize(
    "text, message",
    [
        ('backend: "python" ' + IO, "name is empty"),
        ('name: "m" ' + IO, "neither backend nor platform"),
        ('name: "m" backend: "python" max_batch_size: -1 ' + IO, "max_batch_size -1 is negative"),
        ('name: "m" backend: "python" output { name: "o" data_type: TYPE_FP32 dims: [1] }', "no input declared"),
        ('name: "m" backend: "python" input { name: "i" data_type: TYPE_FP32 dims: [1] }', "no output declared"),
        ('name: "m" backend: "python" input { data_type: TYPE_FP32 dims: [1] } output { name: "o" '
         'data_type: TYPE_FP32 dims: [1] }', "input #0 has no name"),
        ('name: "m" backend: "python" input { name: "x" data_type: TYPE_FP32 dims: [1] } output { name: "x" '
         'data_type: TYPE_FP32 dims: [1] }', "output 'x': duplicate name (already an input)"),
        ('name: "m" backend: "python" input { name: "x" dims: [1] } output { name: "o" '
         'data_type: TYPE_FP32 dims: [1] }', "input 'x': data_type is missing or TYPE_INVALID"),
        ('name: "m" backend: "python" input { name: "x" data_type: TYPE_FP32 } output { name: "o" '
         'data_type: TYPE_FP32 dims: [1] }', "input 'x': dims are empty"),
        ('name: "m" backend: "python" input { name: "x" data_type: TYPE_FP32 dims: [4, -2] } output { name: "o" '
         'data_type: TYPE_FP32 dims: [1] }', "input 'x': dim -2 in [4, -2] is invalid"),
        ('name: "m" backend: "python" max_batch_size: 4 dynamic_batching { preferred_batch_size: [8] } ' + IO,
         "preferred_batch_size 8 is larger than max_batch_size 4"),
        ('name: "m" backend: "python" max_batch_size: 4 dynamic_batching { preferred_batch_size: [0] } ' + IO,
         "preferred_batch_size 0 must be positive"),
        ('name: "m" backend: "python" dynamic_batching { preferred_batch_size: [2] } ' + IO,
         "preferred_batch_size is set but max_batch_size is 0"),
        ('name: "m" backend: "python" instance_group { count: -1 } ' + IO, "instance_group count -1 is negative"),
        ('name: "m" backend: "python" version_policy { specific { versions: [0] } } ' + IO,
         "version_policy specific version 0 is invalid"),
        ('name: "m" backend: "python" parameters { key: "NEURON_CORE_START_INDEX" value { string_value: "a" } } '
         'parameters { key: "NEURON_CORE_END_INDEX" value { string_value: "3" } } ' + IO,
         "parameter NEURON_CORE_START_INDEX = 'a' is not an integer"),
        ('name: "m" backend: "python" parameters { key: "NEURON_CORE_START_INDEX" value { string_value: "0" } } ' + IO,
         "parameter NEURON_CORE_END_INDEX is missing"),
        ('name: "m" backend: "python" parameters { key: "NEURON_CORE_START_INDEX" value { string_value: "3" } } '
         'parameters { key: "NEURON_CORE_END_INDEX" value { string_value: "1" } } ' + IO, "3:1 is reversed"),
        ('name: "m" backend: "python" instance_group { count: 5 kind: KIND_MODEL } '
         'parameters { key: "NEURON_CORE_START_INDEX" value { string_value: "0" } } '
         'parameters { key: "NEURON_CORE_END_INDEX" value { string_value: "3" } } ' + IO,
         "cannot give 5 instances a core each from 4 core(s) in 0:3"),
        ('name: "m" backend: "python" instance_group { count: 1 } instance_group { count: 1 } '
         'parameters { key: "NEURON_CORE_START_INDEX" value { string_value: "0" } } '
         'parameters { key: "NEURON_CORE_END_INDEX" value { string_value: "3" } } ' + IO, "2 instance_group blocks"),
        ('name: "m" backend: "python" parameters { key: "NUM_THREADS_PER_CORE" value { string_value: "0" } } ' + IO,
         "NUM_THREADS_PER_CORE = 0 must be at least 1"),
        ('name: "m" backend: "python" parameters { key: "COMPILED_MODEL" value { string_value: " " } } ' + IO,
         "COMPILED_MODEL is empty"),
        ('name: "m" backend: "python" parameters { key: "WORKBENCH_TARGET" value { string_value: "gpu" } } ' + IO,
         "WORKBENCH_TARGET = 'gpu' is not one of cpu, inf1, inf2, trn1"),
        ('name: "m" backend: "python" parameters { key: "WORKBENCH_FRAMEWORK" value { string_value: "jax" } } ' + IO,
         "WORKBENCH_FRAMEWORK = 'jax' is not one of"),
        ('name: "m" backend: "python" parameters { key: "BATCH_REQUESTS" value { string_value: "yes" } } ' + IO,
         'BATCH_REQUESTS = \'yes\' must be "true" or "false"'),
        # Triton's own rules (core's model_config_utils.cc ValidateModelConfig), measured on 2.51 for the first
        ('name: "m" backend: "python" max_batch_size: 4 dynamic_batching { preserve_ordering: true priority_levels: 2 '
         'default_priority_level: 1 } ' + IO, "preserve_ordering allows one priority level only, not priority_levels 2"),
        ('name: "m" backend: "python" max_batch_size: 4 dynamic_batching { preserve_ordering: true '
         'default_queue_policy { timeout_action: DELAY default_timeout_microseconds: 5 } } ' + IO,
         "preserve_ordering cannot be used with a DELAY queue policy timeout"),
        ('name: "m" backend: "python" max_batch_size: 4 dynamic_batching { preserve_ordering: true } '
         'response_cache { enable: true } ' + IO,
         "dynamic_batching preserve_ordering cannot be used with response_cache: on Triton 2.51 the first cache hit"),
        ('name: "m" backend: "python" max_batch_size: 4 dynamic_batching { priority_levels: 2 } ' + IO,
         "default_priority_level 0 must be in 1..2"),
        ('name: "m" backend: "python" max_batch_size: 4 dynamic_batching { priority_levels: 2 default_priority_level: 1 '
         'priority_queue_policy { key: 3 value { } } } ' + IO, "priority_queue_policy level 3 must be in 1..2"),
        ('name: "m" backend: "python" response_cache { enable: true } model_transaction_policy { decoupled: true } ' + IO,
         "response_cache cannot be enabled for a decoupled model"),
        ('name: "m" backend: "python" response_cache { enable: true } sequence_batching { } ' + IO,
         "response_cache cannot be enabled with sequence_batching"),
    ],
)
def test_each_problem_has_a_specific_message(text, message):
    problems = problems_of(text)
    assert any(message in p for p in problems), problems
    with pytest.raises(ConfigError, match=None) as err:
        check_config(from_text(text))
    assert message in str(err.value)


def test_name_must_equal_the_directory_name():
    """Triton 2.51 refuses it at load: "unexpected directory name 'named' for model 'other'"."""
    cfg = batched()
    assert validate_config(cfg, directory_name="add-sub-1x4") == []
    problems = validate_config(cfg, directory_name="add-sub")
    assert problems == ["name 'add-sub-1x4' differs from its directory 'add-sub'; Triton requires the model name "
                        "to equal the directory name"]
    with pytest.raises(ConfigError, match="differs from its directory"):
        check_config(cfg, directory_name="add-sub")


@pytest.mark.parametrize("value, text", [
    (True, "true"), (False, "false"), (8, "8"), ("0:3", "0:3"),
    ({"mode": "default", "dynamic": False}, '{"dynamic": false, "mode": "default"}'), ([1, 2], "[1, 2]"),
])
def test_parameter_values_have_one_spelling_for_both_backends(value, text):
    """The Python backend's model.py and the PyTorch backend read the same strings."""
    assert parameter_string(value) == text
    assert parameters_of(build_config("m", ADD_SUB, parameters={"KEY": value})) == {"KEY": text}
