"""The FAKE Neuron SDK packages (tests/fake_neuron/) against the SDK's own signatures.

CONTRACT is the table: every SDK function, class and method the workbench (compiler/, model.py)
calls, with its signature as the SDK documents or defines it, and where that comes from. A fake
whose ``inspect.signature`` differs fails here, and so does a public fake callable with no row, so
a fake cannot drift from the SDK (or grow beliefs of its own) silently.

Source tags:
  SDK   aws-neuron/aws-neuron-sdk @ 81ce03ae (Neuron 2.32.0 docs), path given
  TNXA  torch_neuronx/xla_impl/analyze.py (the analyze source; the doc page names its first two
        parameters func/example_inputs, the source model/ex_input)
  TFN   aws-neuron/aws-neuron-tensorflow @ 3fd68693, python/_trace.py
  TNX   aws-neuron/transformers-neuronx @ 1ade6d74, src/transformers_neuronx/<path>
"""

from __future__ import annotations

import importlib
import inspect

import pytest

PYTORCH_INF = "SDK frameworks/torch/torch-neuronx/api-reference-guide/inference/"
TORCH_NEURON = "SDK archive/torch-neuron/"
TF_TRACE = "SDK archive/tensorflow/tensorflow-neuronx/tfneuronx-python-tracing-api.rst; TFN trace"
LLAMA_INIT = ("(config, *, n_positions=2048, batch_size=1, amp='f32', tp_degree=2, context_length_estimate=None, "
              "context_unroll=None, unroll=None, neuron_config=None, prefixed_length=0, **kwargs)")
MISTRAL_INIT = ("(config, *, n_positions=2048, batch_size=1, amp='f32', tp_degree=2, context_length_estimate=None, "
                "context_unroll=None, unroll=None, neuron_config=NeuronConfig(), **kwargs)")
MISTRAL_SAMPLE = ("(self, input_ids, sequence_length, start_ids=None, top_k=50, top_p=1.0, eos_token_override=None, "
                  "temperature=1.0, streamer=None, stopping_criteria_list=None)")
SIMPLE_SAMPLE = "(self, input_ids, sequence_length, start_ids=None, top_k=50, streamer=None)"
FROM_PRETRAINED = "(pretrained_model_path, *model_args, **kwargs)"
SERIALIZATION = [
    ("save", "(self, directory, sharded_weights=False)"), ("load", "(self, directory)"),
    ("to_neuron", "(self)"), ("cpu_compile", "(self)"),
]

# (module, attribute path, signature, source)
CONTRACT = [
    # torch-neuron (Inf1): ``import torch_neuron`` registers torch.neuron
    ("torch.neuron", "trace", "(model, example_inputs, **kwargs)", TORCH_NEURON + "api-compilation-python-api.rst"),
    ("torch.neuron", "analyze_model", "(model, example_inputs)",
     "SDK tag 1.11.0 getting_started.rst (returns an OrderedDict); src/examples/pytorch/resnet50.ipynb (call form)"),
    ("torch.neuron", "DataParallel", "(model, device_ids=None, dim=0)",
     TORCH_NEURON + "api-torch-neuron-dataparallel-api.rst"),
    ("torch.neuron", "DataParallel.disable_dynamic_batching", "(self)",
     TORCH_NEURON + "api-torch-neuron-dataparallel-api.rst"),
    # torch-neuronx (Inf2/Trn1/Trn2)
    ("torch_neuronx", "trace", "(func, example_inputs, *_, input_output_aliases={}, compiler_workdir=None, "
     "compiler_args=None, partitioner_config=None, inline_weights_to_neff=True, cpu_backend=False)",
     PYTORCH_INF + "api-torch-neuronx-trace.rst"),
    ("torch_neuronx", "dynamic_batch", "(neuron_script)", PYTORCH_INF + "api-torch-neuronx-trace.rst"),
    ("torch_neuronx", "move_trace_to_device", "(trace, device_id)", PYTORCH_INF + "api-torch-neuronx-trace.rst"),
    ("torch_neuronx", "analyze", "(model, ex_input, compiler_workdir=None, additional_ignored_ops=set(), "
     "max_workers=4, is_hf_transformers=False, cleanup=False)", PYTORCH_INF + "api-torch-neuronx-analyze.rst; TNXA"),
    ("torch_neuronx", "DataParallel", "(model, device_ids=None, dim=0, set_dynamic_batching=True)",
     PYTORCH_INF + "api-torch-neuronx-data-parallel.rst"),
    ("torch_neuronx", "DataParallel.disable_dynamic_batching", "(self)",
     PYTORCH_INF + "api-torch-neuronx-data-parallel.rst"),
    # tensorflow-neuron(x)
    ("tensorflow_neuronx", "trace", "(func, example_inputs, subgraph_builder_function=None)", TF_TRACE),
    ("tensorflow_neuron", "trace", "(func, example_inputs, subgraph_builder_function=None)",
     "SDK archive/tensorflow/tensorflow-neuron/api-tracing-python-api.rst; TFN trace"),
    # transformers-neuronx: the classes model.py and compiler/tnx.py use, per TNX <family>/model.py
    ("transformers_neuronx", "LlamaForSampling", LLAMA_INIT, "TNX llama/model.py"),
    ("transformers_neuronx", "LlamaForSampling.sample",
     "(self, input_ids, sequence_length, cache_ids=None, start_ids=None, top_k=50, top_p=1.0, eos_token_override=None, "
     "temperature=1.0, streamer=None, stopping_criteria_list=None, no_repeat_ngram_size=None, **kwargs)",
     "TNX llama/model.py"),
    ("transformers_neuronx", "MistralForSampling", MISTRAL_INIT, "TNX mistral/model.py"),
    ("transformers_neuronx", "MistralForSampling.sample", MISTRAL_SAMPLE, "TNX mistral/model.py"),
    ("transformers_neuronx", "MixtralForSampling", MISTRAL_INIT, "TNX mixtral/model.py"),
    ("transformers_neuronx", "MixtralForSampling.sample", MISTRAL_SAMPLE, "TNX mixtral/model.py"),
    ("transformers_neuronx", "GPT2ForSamplingWithContextBroadcasting",
     "(config, batch_size=1, prompt_batch_size=1, amp='f32', tp_degree=2, unroll=None, context_length_estimate=None, "
     "context_unroll=1, neuron_config=NeuronConfig(), reorder_cache=False, **kwargs)", "TNX gpt2/model.py"),
    ("transformers_neuronx", "GPT2ForSamplingWithContextBroadcasting.sample",
     "(self, input_ids, sequence_length, cache_ids=None, start_ids=None, top_k=50, streamer=None, "
     "output_scores=False, **kwargs)", "TNX gpt2/model.py"),
    ("transformers_neuronx", "OPTForSampling",
     "(config, batch_size=1, amp=None, tp_degree=2, n_positions=2048, unroll=None, context_length_estimate=None, "
     "context_unroll=1, neuron_config=None, **kwargs)", "TNX opt/model.py"),
    ("transformers_neuronx", "OPTForSampling.sample", SIMPLE_SAMPLE, "TNX opt/model.py"),
    ("transformers_neuronx", "BloomForSampling",
     "(config, *, n_positions=2048, batch_size=1, amp='f32', tp_degree=2, context_length_estimate=None, "
     "context_unroll=None, unroll=None, neuron_config=None, **kwargs)", "TNX bloom/model.py"),
    ("transformers_neuronx", "BloomForSampling.sample", SIMPLE_SAMPLE, "TNX bloom/model.py"),
    ("transformers_neuronx", "GPTJForSampling",
     "(config, batch_size=1, amp='f32', tp_degree=2, unroll=None, init_n_active_tokens=None, neuron_config=None, "
     "**kwargs)", "TNX gptj/model.py"),
    ("transformers_neuronx", "GPTJForSampling.sample", SIMPLE_SAMPLE, "TNX gptj/model.py"),
    ("transformers_neuronx", "GPTJForSampling.to_neuron", "(self)", "TNX gptj/model.py"),
    ("transformers_neuronx", "GPTNeoXForSampling",
     "(config, batch_size=1, amp='f32', tp_degree=2, unroll=None, init_n_active_tokens=None, neuron_config=None, "
     "**kwargs)", "TNX gptneox/model.py"),
    ("transformers_neuronx", "GPTNeoXForSampling.sample", SIMPLE_SAMPLE, "TNX gptneox/model.py"),
    ("transformers_neuronx", "GPTNeoXForSampling.to_neuron", "(self)", "TNX gptneox/model.py"),
    ("transformers_neuronx", "NeuronAutoModelForCausalLM", "()", "TNX modeling_auto.py"),
    ("transformers_neuronx", "NeuronAutoModelForCausalLM.from_pretrained",
     "(pretrained_model_name_or_path, *model_args, **kwargs)", "TNX modeling_auto.py"),
    *[("transformers_neuronx", f"{cls}.from_pretrained", FROM_PRETRAINED, "TNX module.py PretrainedModel")
      for cls in ("LlamaForSampling", "MistralForSampling", "MixtralForSampling", "GPT2ForSamplingWithContextBroadcasting",
                  "OPTForSampling", "BloomForSampling", "GPTJForSampling", "GPTNeoXForSampling")],
    *[("transformers_neuronx", f"{cls}.{method}", signature, "TNX base.py NeuronModelBase")
      for cls in ("LlamaForSampling", "MistralForSampling", "MixtralForSampling", "GPT2ForSamplingWithContextBroadcasting",
                  "OPTForSampling", "BloomForSampling") for method, signature in SERIALIZATION],
]

# transformers_neuronx's top-level classes (TNX __init__.py): exactly these, and no GPT2ForSampling
TNX_EXPORTS = {
    "NeuronConfig", "QuantizationConfig", "ContinuousBatchingConfig", "GenerationConfig", "GQA", "Layout",
    "SparseAttnConfig", "HuggingFaceGenerationModelAdapter", "BloomForSampling", "LlamaForSampling",
    "GPT2ForSamplingWithContextBroadcasting", "GPTNeoXForSampling", "GPTJForSampling", "MistralForSampling",
    "MixtralForSampling", "OPTForSampling", "NeuronAutoModelForCausalLM",
}
# inert stand-ins (config objects) and base machinery: present, but nothing the workbench calls
_NOT_CALLED = {"NeuronConfig", "QuantizationConfig", "ContinuousBatchingConfig", "GenerationConfig", "GQA", "Layout",
               "SparseAttnConfig", "HuggingFaceGenerationModelAdapter"}


def _module(name: str):
    if name == "torch.neuron":
        importlib.import_module("torch_neuron")
        import torch

        return torch.neuron
    return importlib.import_module(name)


def _resolve(module: str, path: str):
    obj = _module(module)
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


@pytest.mark.parametrize("module, path, signature, source", CONTRACT, ids=[f"{m}.{p}" for m, p, _, _ in CONTRACT])
def test_fake_signature_matches_the_sdk(neuron_fakes, module, path, signature, source):
    assert source  # every row cites where the signature comes from
    fake = _resolve(module, path)
    assert "FAKE" in (inspect.getmodule(fake).__doc__ or "")  # a fake, declared as such
    assert str(inspect.signature(fake)) == signature, f"{module}.{path} differs from {source}"


def _public_callables(module_name: str):
    module = _module(module_name)
    home = "torch_neuron" if module_name == "torch.neuron" else module.__name__  # where its fakes are defined
    found = set()
    for name, obj in vars(module).items():
        if name.startswith("_") or inspect.ismodule(obj) or getattr(obj, "__module__", None) != home:
            continue
        if inspect.isfunction(obj):
            found.add(name)
        elif inspect.isclass(obj):
            found.add(name)
            for member, value in inspect.getmembers(obj):
                if not member.startswith("_") and callable(value):
                    found.add(f"{name}.{member}")
    return found


@pytest.mark.parametrize("module", ["torch.neuron", "torch_neuronx", "tensorflow_neuronx", "tensorflow_neuron",
                                    "transformers_neuronx"])
def test_every_public_fake_callable_has_a_row(neuron_fakes, module):
    rows = {path for m, path, _, _ in CONTRACT if m == module}
    public = {name for name in _public_callables(module) if name.split(".")[0] not in _NOT_CALLED}
    assert public - rows == set(), f"FAKE {module} has callables without a contract row"


def test_transformers_neuronx_exports_exactly_the_sdk_classes(neuron_fakes):
    import transformers_neuronx

    classes = {name for name, obj in vars(transformers_neuronx).items()
               if inspect.isclass(obj) and not name.startswith("_")}
    assert classes == TNX_EXPORTS
    assert not hasattr(transformers_neuronx, "GPT2ForSampling")
    for name in ("GPTJForSampling", "GPTNeoXForSampling"):  # plain PretrainedModels: no serialization
        assert not any(hasattr(getattr(transformers_neuronx, name), m) for m in ("save", "load", "cpu_compile"))
