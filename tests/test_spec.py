"""ModelSpec: every accepted dtype spelling, the upstream NAME,DTYPE,SHAPE form, and specific errors."""

import numpy as np
import pytest
import torch

from workbench.spec import ModelSpec, SpecError, TensorSpec, config_dtype, numpy_dtype, parse_dtype, tensor_spec


@pytest.mark.parametrize(
    "given, expected",
    [
        ("FP32", "FP32"), ("TYPE_FP32", "FP32"), ("fp32", "FP32"), ("float32", "FP32"),
        (np.float32, "FP32"), (np.dtype("float32"), "FP32"), (torch.float32, "FP32"),
        ("int64", "INT64"), (torch.int64, "INT64"), ("TYPE_INT64", "INT64"), (np.int64, "INT64"),
        ("uint8", "UINT8"), ("UINT64", "UINT64"), ("bool", "BOOL"), (np.bool_, "BOOL"), (torch.bool, "BOOL"),
        ("fp16", "FP16"), (torch.float16, "FP16"), ("float64", "FP64"),
        ("BF16", "BF16"), ("bfloat16", "BF16"), (torch.bfloat16, "BF16"),
        ("STRING", "BYTES"), ("TYPE_STRING", "BYTES"), ("BYTES", "BYTES"), (np.object_, "BYTES"),
        ("int8", "INT8"), ("int16", "INT16"), ("int32", "INT32"), ("uint16", "UINT16"), ("uint32", "UINT32"),
    ],
)
def test_accepted_dtype_spellings(given, expected):
    assert parse_dtype(given) == expected


@pytest.mark.parametrize("bad", ["TYPE_TYPE_FP32", "float128x", "complex64", "", "tensor"])
def test_unknown_dtype_is_named_in_the_error(bad):
    with pytest.raises(SpecError, match="unknown data type"):
        parse_dtype(bad)


def test_config_and_numpy_names():
    assert config_dtype("BYTES") == "TYPE_STRING"
    assert config_dtype("fp16") == "TYPE_FP16"
    assert numpy_dtype("INT64") == np.int64
    with pytest.raises(SpecError, match="BF16"):
        numpy_dtype("BF16")


def test_upstream_item_round_trip():
    t = TensorSpec.parse("INPUT__0,INT64,4x384")
    assert (t.name, t.dtype, t.dims, t.index) == ("INPUT__0", "INT64", (4, 384), 0)
    assert t.upstream() == "INPUT__0,INT64,4x384"
    assert TensorSpec.parse("x,TYPE_FP32,-1x4").dims == (-1, 4)


@pytest.mark.parametrize(
    "item, message",
    [
        ("INPUT__0,INT64", "expected NAME,DTYPE,SHAPE"),
        ("INPUT__0,INT64,4x384,1", "expected NAME,DTYPE,SHAPE"),
        ("INPUT__0,INT64,", "empty shape"),
        ("INPUT__0,INT64,4xfoo", "malformed shape"),
        ("INPUT__0,FLOAT99,4", "unknown data type"),
        ("INPUT__0,INT64,0x4", "dim 0 is invalid"),
        ("INPUT__0,INT64,-2", "dim -2 is invalid"),
    ],
)
def test_bad_items_name_the_item(item, message):
    with pytest.raises(SpecError, match=message) as err:
        ModelSpec.parse([item], ["OUTPUT__0,FP32,4"])
    assert "INPUT__0" in str(err.value)


def test_duplicate_names_are_refused():
    with pytest.raises(SpecError, match="duplicate tensor name 'A__0'"):
        ModelSpec.parse(["A__0,FP32,4", "A__0,FP32,4"], ["B__0,FP32,4"])
    with pytest.raises(SpecError, match="duplicate"):
        ModelSpec.parse(["A__0,FP32,4"], ["A__0,FP32,4"])


def test_indexed_names_rule():
    ModelSpec.parse(["INPUT__1,FP32,4", "INPUT__0,FP32,4"], ["OUTPUT__0,FP32,4"]).check_indexed_names()
    with pytest.raises(SpecError, match="missing index \\[1\\]"):
        ModelSpec.parse(["INPUT__0,FP32,4", "INPUT__2,FP32,4"], ["OUTPUT__0,FP32,4"]).check_indexed_names()
    with pytest.raises(SpecError, match="'images'.*NAME__i"):
        ModelSpec.parse(["images,FP32,4"], ["OUTPUT__0,FP32,4"]).check_indexed_names()


def test_argument_order_follows_index_not_declaration():
    spec = ModelSpec.parse(["INPUT__1,INT64,3", "INPUT__0,FP32,4"], ["OUTPUT__0,FP32,4"])
    assert [t.name for t in spec.by_index("input")] == ["INPUT__0", "INPUT__1"]
    a, b = spec.example_inputs(batch_size=2, seed=1)
    assert a.shape == (2, 4) and a.dtype == np.float32
    assert b.shape == (2, 3) and b.dtype == np.int64
    again = spec.example_inputs(batch_size=2, seed=1)
    assert np.array_equal(a, again[0]) and np.array_equal(b, again[1])


def test_batch_dim_helpers_and_dict_round_trip():
    spec = ModelSpec.parse(["INPUT__0,FP32,-1x4"], ["OUTPUT__0,FP32,-1x4"])
    assert spec.without_batch_dim().inputs[0].dims == (4,)
    assert spec.without_batch_dim().with_batch_dim().inputs[0].dims == (-1, 4)
    assert ModelSpec.from_dict(spec.to_dict()) == spec
    with pytest.raises(SpecError, match="no batch dim"):
        ModelSpec.parse(["INPUT__0,FP32,4"], ["OUTPUT__0,FP32,4"]).without_batch_dim()


def test_one_reader_for_every_tensor_item_form():
    expected = TensorSpec("INPUT__0", "INT64", (4, 384))
    for item in ("INPUT__0,INT64,4x384", {"name": "INPUT__0", "dtype": "int64", "dims": [4, 384]},
                 ("INPUT__0", "TYPE_INT64", (4, 384)), expected):
        assert tensor_spec(item) == expected
    with pytest.raises(SpecError, match="bad input {'name': 'x', 'shape': \\[4\\]}: .*unexpected keyword argument 'shape'"):
        tensor_spec({"name": "x", "shape": [4]}, "input")
    with pytest.raises(SpecError, match="bad output 7: give NAME,DTYPE,SHAPE, a dict or a TensorSpec"):
        tensor_spec(7, "output")
