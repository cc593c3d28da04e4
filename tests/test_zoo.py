"""The example zoo: seeded, download-free models with valid inputs; the tiny causal LM packaged
as a save_pretrained folder that transformers loads back and generates from identically."""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest
import torch

from workbench import zoo
from workbench.compiler import ArtifactError
from workbench.spec import ModelSpec


def test_names_cover_the_issue():
    names = zoo.names()
    assert names[:4] == ["add_sub", "mlp", "cnn", "bert"]
    has_transformers = importlib.util.find_spec("transformers") is not None
    assert names[4:] == (["causal_lm"] if has_transformers else [])


def test_add_sub_is_the_upstream_qa_model():
    model = zoo.get("add_sub")
    assert model.spec == ModelSpec.parse(["INPUT__0,FP32,4", "INPUT__1,FP32,4"],
                                         ["OUTPUT__0,FP32,4", "OUTPUT__1,FP32,4"])
    a, b = model.example_inputs(3)
    assert a.shape == b.shape == (3, 4)
    total, diff = model.eager([a.numpy(), b.numpy()])
    np.testing.assert_array_equal(total, (a + b).numpy())
    np.testing.assert_array_equal(diff, (a - b).numpy())


@pytest.mark.parametrize("name", zoo.names())
def test_inputs_and_outputs_follow_the_spec(name):
    model = zoo.get(name)
    inputs = model.example_inputs(3)
    assert len(inputs) == len(model.spec.inputs)
    for tensor, spec in zip(inputs, model.spec.inputs):
        assert tuple(tensor.shape) == (3, *spec.dims)
        assert str(tensor.dtype).removeprefix("torch.") == {"FP32": "float32", "INT64": "int64"}[spec.dtype]
    outputs = model.eager([t.numpy() for t in inputs])
    for array, spec in zip(outputs, model.spec.outputs):
        assert array.shape == (3, *spec.dims) and array.dtype == spec.numpy_dtype()
        assert np.isfinite(array).all()


def test_models_are_seeded_and_leave_the_callers_random_state_alone():
    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    first, second = zoo.get("cnn"), zoo.get("cnn")
    assert torch.rand(1) == before  # building did not consume the caller's random numbers
    for p, q in zip(first.module.state_dict().values(), second.module.state_dict().values()):
        assert torch.equal(p, q)
    other = zoo.get("cnn", seed=1)
    assert not torch.equal(next(iter(other.module.state_dict().values())),
                           next(iter(first.module.state_dict().values())))
    assert all(torch.equal(a, b) for a, b in zip(first.example_inputs(2, seed=5), second.example_inputs(2, seed=5)))


def test_bert_has_the_upstream_interface_and_valid_tokens():
    model = zoo.get("bert")
    assert [t.upstream() for t in model.spec.inputs] == ["INPUT__0,INT64,384", "INPUT__1,INT64,384",
                                                         "INPUT__2,INT64,384"]
    ids, mask, types = model.example_inputs(4)  # 4x384, the seed's request shape
    assert ids.shape == (4, 384)
    assert ids.min() >= 0 and ids.max() < 100
    assert set(mask.unique().tolist()) <= {0, 1} and set(types.unique().tolist()) <= {0, 1}
    assert (mask[:, 0] == 1).all()  # every row has at least one real token
    assert sum(p.numel() for p in model.module.parameters()) < 100_000
    short = zoo.get("bert", seq_len=16)
    assert short.spec.inputs[0].dims == (16,)


def test_bad_requests_are_named():
    with pytest.raises(KeyError, match="no zoo model 'resnet'; choose one of add_sub, mlp"):
        zoo.get("resnet")
    with pytest.raises(TypeError, match="zoo model 'mlp' has no option depth; it takes"):
        zoo.get("mlp", depth=3)
    with pytest.raises(ValueError, match="batch must be at least 1"):
        zoo.get("mlp").example_inputs(0)


def test_causal_lm_packages_as_a_loadable_checkpoint(tmp_path):
    transformers = pytest.importorskip("transformers")
    from workbench.compiler.tnx import LM_SPEC, package_causal_lm

    model = zoo.get("causal_lm")
    artifact = package_causal_lm(model.hf_model, "cpu", out_dir=tmp_path, name="tiny")
    folder = tmp_path / "tiny"
    assert artifact.path == str(folder) and artifact.framework == "transformers_neuronx"
    assert artifact.spec == LM_SPEC and artifact.target == "cpu"
    assert (folder / "config.json").is_file() and any(folder.glob("*.safetensors"))
    assert artifact.extra == {"model_class": "LlamaForSampling", "batch_size": 1, "n_positions": 64,
                              "amp": "f32", "model_type": "llama"}  # no tp_degree: a Neuron-only setting
    assert json.loads((tmp_path / "tiny.workbench.json").read_text())["framework"] == "transformers_neuronx"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny", "tiny.workbench.json"]  # no staging left

    loaded = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    ids = model.example_inputs(2)[0]
    with torch.no_grad():
        kwargs = dict(attention_mask=torch.ones_like(ids), max_length=12, do_sample=False, pad_token_id=1)
        assert torch.equal(loaded.generate(ids, **kwargs), model.hf_model.generate(ids, **kwargs))

    with pytest.raises(ArtifactError, match="already exist"):
        package_causal_lm(model.hf_model, "cpu", out_dir=tmp_path, name="tiny")
    again = package_causal_lm(str(folder), "cpu", out_dir=tmp_path / "copy", name="tiny")  # from a folder
    assert again.extra["model_class"] == "LlamaForSampling"
    with pytest.raises(ArtifactError, match="not a save_pretrained folder"):
        package_causal_lm(str(tmp_path), "cpu", out_dir=tmp_path / "x")


def test_gpt2_tiny_lm_gets_its_sampling_class(tmp_path):
    pytest.importorskip("transformers")
    from workbench.compiler.tnx import package_causal_lm, tiny_causal_lm

    artifact = package_causal_lm(tiny_causal_lm("gpt2"), out_dir=tmp_path)
    assert artifact.extra["model_class"] == "GPT2ForSamplingWithContextBroadcasting"  # the SDK's class for gpt2
    assert artifact.extra["n_positions"] == 64
    with pytest.raises(ValueError, match="unknown tiny LM architecture 'bert'"):
        tiny_causal_lm("bert")


def test_tiny_llm_is_a_seeded_llama_folder_built_the_same_every_time(tmp_path):
    """Two builds in two caches give byte-identical files; the shape vLLM's CPU engine takes
    (head_dim 64) and a 512-token BPE tokenizer trained in code, with BOS prepended."""
    from transformers import AutoTokenizer

    first = zoo.tiny_llm(cache_dir=tmp_path / "a")
    second = zoo.tiny_llm(cache_dir=tmp_path / "b")
    files = sorted(p.name for p in first.path.iterdir())
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} <= set(files)
    for name in files:
        assert (first.path / name).read_bytes() == (second.path / name).read_bytes(), name
    assert zoo.tiny_llm(cache_dir=tmp_path / "a").path == first.path  # cached: found again, not rebuilt
    config = json.loads((first.path / "config.json").read_text())
    assert (config["model_type"], config["hidden_size"], config["num_hidden_layers"]) == ("llama", 256, 2)
    assert (config["num_attention_heads"], config["num_key_value_heads"], config["head_dim"]) == (4, 2, 64)
    assert config["vocab_size"] == 512
    tokenizer = AutoTokenizer.from_pretrained(first.path)
    assert len(tokenizer) == 512
    ids = tokenizer(first.prompts[0])["input_ids"]
    assert ids[0] == tokenizer.bos_token_id == 0 and len(ids) < len(first.prompts[0])  # merges learnt
    assert tokenizer.decode(ids, skip_special_tokens=True) == first.prompts[0]
    assert zoo.tiny_llm(seed=1, cache_dir=tmp_path / "a").path != first.path
