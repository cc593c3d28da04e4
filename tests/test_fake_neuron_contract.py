"""The FAKE Neuron SDK packages (tests/fake_neuron/) against the SDK's own signatures.

CONTRACT is the table: every SDK function, class and method the workbench (compiler/, model.py)
calls, with its signature as the SDK documents or defines it, and where that comes from. A fake
whose ``inspect.signature`` differs fails here, and so does a public fake callable with no row, so
a fake cannot drift from the SDK (or grow beliefs of its own) silently. BEHAVIOUR holds what the
fakes DO where the SDK fails or differs from its docs (no device, fixed shapes, compiler checks,
DataParallel as its source splits, #827, TorchNeuron's surface), each row citing the line it follows.

Source tags:
  SDK   aws-neuron/aws-neuron-sdk @ 81ce03ae (Neuron 2.32.0 docs), path given
  DOCS  awsdocs-neuron.readthedocs-hosted.com/en/latest (Neuron 2.33.0-2.34.0 pages), path given
  ISS   aws-neuron/aws-neuron-sdk issues
  TNXSRC gschaves/torch-neuronx @ ba50005 (torch-neuronx 1.13.1.1.12.0, the only public source),
        torch_neuronx/xla_impl/<path>
  TNXA  TNXSRC analyze.py (the analyze source; the doc page names its first two parameters
        func/example_inputs, the source model/ex_input)
  TFN   aws-neuron/aws-neuron-tensorflow @ 3fd68693, python/_trace.py
  TNX   aws-neuron/transformers-neuronx @ 1ade6d74, src/transformers_neuronx/<path>
"""

from __future__ import annotations

import importlib
import inspect
import logging
import sys
from pathlib import Path

import pytest
import torch

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
    # torch-neuronx, the PyTorch/XLA library (Inf2/Trn1; TorchNeuron's surface is a BEHAVIOUR row)
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
    ("torch_neuronx", "lazy_load", "(trace, enable_lazy_load=True)", PYTORCH_INF + "api-torch-neuronx-async-lazy-load.rst"),
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


# --- behaviour: what the fakes do, each as its source says --------------------------------------

def _linear(batch=2):
    return torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU()).eval(), (torch.randn(batch, 4),)


def _raises(pattern, call):
    with pytest.raises((RuntimeError, torch.jit.Error), match=pattern):
        call()


def no_device_trace_fails(fakes, monkeypatch):
    import torch_neuronx

    module, inputs = _linear()
    _raises(r"num_devices > 0", lambda: torch_neuronx.trace(module, inputs, compiler_args=["--target", "inf2"]))
    torch_neuronx.trace(module, inputs, compiler_args=["--target", "inf2"], cpu_backend=True)


def cpu_backend_needs_a_target(fakes, monkeypatch):
    import torch_neuronx

    module, inputs = _linear()
    _raises("please supply compiler argument target", lambda: torch_neuronx.trace(module, inputs, cpu_backend=True))


def one_shape_unless_dynamic_batch(fakes, monkeypatch):
    import torch_neuronx

    module, inputs = _linear(1)
    traced = torch_neuronx.trace(module, inputs, compiler_args=["--target", "inf2"], cpu_backend=True)
    _raises(r"has shape \[8, 4\]", lambda: traced(torch.randn(8, 4)))
    assert torch_neuronx.dynamic_batch(traced) is traced  # in place
    assert traced(torch.randn(8, 4)).shape == (8, 3)


def target_and_lnc_as_neuronx_cc(fakes, monkeypatch):
    import torch_neuronx

    module, inputs = _linear()

    def trace(*args):
        return torch_neuronx.trace(module, inputs, compiler_args=list(args), cpu_backend=True)

    _raises("invalid choice: 'inf3'", lambda: trace("--target", "inf3"))
    _raises("NCC_EARG001", lambda: trace("--target", "trn1", "-lnc", "2"))
    _raises("invalid choice: '3'", lambda: trace("--target", "trn1", "--logical-nc-config", "3"))
    trace("--target", "trn1", "-lnc", "1")


def no_xla_inference_on_trn2(fakes, monkeypatch):
    import torch_neuronx

    module, inputs = _linear()
    _raises("not supported on Trn2/Trn3 from Neuron 2.34.0",
            lambda: torch_neuronx.trace(module, inputs, compiler_args=["--target", "trn2"], cpu_backend=True))


def data_parallel_splits_as_its_source(fakes, monkeypatch):
    import torch_neuronx

    monkeypatch.setenv("NEURON_RT_VISIBLE_CORES", "0-2")
    module, _ = _linear()
    parallel = torch_neuronx.DataParallel(module, device_ids=[0, 1, 2])
    assert parallel.num_workers == 2  # one module loaded on consecutive cores: 2 x 1
    assert [length for _, length in parallel._chunks(7)] == [3, 2, 2]  # divmod, remainder first
    assert [length for _, length in parallel._chunks(2)] == [1, 1]  # empty chunks skipped
    assert torch.allclose(parallel(torch.ones(7, 4)), module(torch.ones(7, 4)))
    assert torch_neuronx.DataParallel(module, device_ids=[0, 2]).num_workers == 4  # not consecutive: 2 x 2


def torch_neuron_data_parallel_as_its_docs(fakes, monkeypatch):
    import torch_neuron  # noqa: F401

    monkeypatch.setenv("NEURON_RT_VISIBLE_CORES", "0-3")
    module, _ = _linear()
    parallel = torch.neuron.DataParallel(module, device_ids=[0, 1, 2, 3])
    assert parallel.num_workers == 8 and [n for _, n in parallel._chunks(6)] == [1, 1, 1, 1, 1, 1]


def visible_cores_as_a_comma_list(fakes, monkeypatch):
    monkeypatch.setenv("NEURON_RT_VISIBLE_CORES", "2,3")
    assert fakes.visible_core_count() == 2
    monkeypatch.setenv("NEURON_RT_VISIBLE_CORES", "0-1,4")
    assert fakes.visible_cores("0-1,4") == [0, 1, 4] and fakes.visible_core_count() == 3


def cpu_trace_warning_of_issue_827(fakes, monkeypatch):
    import torch_neuron  # noqa: F401

    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logging.getLogger("Neuron").addHandler(handler)
    try:
        torch.neuron.trace(torch.nn.Linear(4, 3).eval(), torch.randn(2, 4))  # 100% supported, one operator
    finally:
        logging.getLogger("Neuron").removeHandler(handler)
    assert any("returning a CPU trace" in r.getMessage() for r in records)


def tnx_bans_every_eos_id(fakes, monkeypatch):
    pytest.importorskip("transformers")
    import transformers_neuronx

    class Config:
        eos_token_id = [0, 1]

    sampler = object.__new__(transformers_neuronx.GPT2ForSamplingWithContextBroadcasting)
    sampler.config = Config()
    scores = torch.zeros(1, 8)
    scores[0, :2] = 100.0  # both EOS ids would win if not banned
    sampler._next_scores = lambda tokens: scores.clone().expand(tokens.shape[0], -1).clone()
    out = sampler._sample_loop(torch.tensor([[5]]), 4, top_k=1)
    assert not set(out[0, 1:].tolist()) & {0, 1}


def torchneuron_surface(fakes, monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).parent / "fake_neuron" / "torchneuron"))
    sys.modules.pop("torch_neuronx", None)
    import torch_neuronx

    try:
        assert torch_neuronx.__version__.startswith("2.14.3.1")
        assert not any(hasattr(torch_neuronx, name) for name in ("trace", "dynamic_batch", "DataParallel", "analyze"))
        module, inputs = _linear()
        compiled = torch.compile(module, backend="neuron", fullgraph=True, dynamic=False)
        compiled(*inputs)
        compiled(torch.randn(5, 4))  # a new shape compiles again, statically
        assert [graph[-1][0] for graph in torch_neuronx.COMPILED] == [2, 5]
        with pytest.raises(Exception, match="dynamic shapes are not supported"):
            torch.compile(module, backend="neuron", dynamic=True)(torch.randn(3, 4))
    finally:
        torch_neuronx.restore()
        torch._dynamo.reset()
        sys.modules.pop("torch_neuronx", None)


VN_CPU = "SDK vllm-neuron/docs/design/compilation/cpu_compilation.md"
VN_CACHE = "SDK vllm-neuron/docs/design/compilation/compilation_cache.md"
_CPU_COMPILE = {"VLLM_NEURON_CPU_COMPILE": "1", "NEURON_PLATFORM_TARGET_OVERRIDE": "trn2"}


def _start(env, args=None):
    import fake_vllm_neuron

    return fake_vllm_neuron.start_engine(env, {"model": "/m", "max_num_seqs": 2, **(args or {})})


def vllm_cpu_compile_needs_the_target_override(fakes, monkeypatch):
    with pytest.raises(RuntimeError, match="NEURON_PLATFORM_TARGET_OVERRIDE is required to specify the target "
                                           "platform for compilation, since no hardware is present"):
        _start({"VLLM_NEURON_CPU_COMPILE": "1"})
    with pytest.raises(RuntimeError, match="needed"):  # without the mode: no device, no compile
        _start({"NEURON_PLATFORM_TARGET_OVERRIDE": "trn2"})


def vllm_cpu_compile_takes_neuronx_cc_targets_only(fakes, monkeypatch):
    import tempfile

    with tempfile.TemporaryDirectory() as root:
        for target in ("inf2", "trn1", "trn1n", "trn2", "trn3"):
            assert _start({**_CPU_COMPILE, "NEURON_PLATFORM_TARGET_OVERRIDE": target, "VLLM_CACHE_ROOT": root}).target \
                == target
    for target in ("trn2.48xlarge", "gen3", "inf1"):
        with pytest.raises(RuntimeError, match="is not a neuronx-cc --target choice"):
            _start({**_CPU_COMPILE, "NEURON_PLATFORM_TARGET_OVERRIDE": target})


def vllm_cpu_compile_refuses_cpu_mode_and_speculation(fakes, monkeypatch):
    with pytest.raises(RuntimeError, match="cannot be enabled together"):
        _start({**_CPU_COMPILE, "VLLM_NEURON_CPU_MODE": "1"})
    with pytest.raises(RuntimeError, match="speculative decoding is not supported"):
        _start(_CPU_COMPILE, {"speculative_config": {"method": "eagle3"}})


def vllm_cpu_compile_fills_the_cache_tiers_and_serves_nothing(fakes, monkeypatch):
    import tempfile

    with tempfile.TemporaryDirectory() as home:
        monkeypatch.setenv("HOME", home)
        engine = _start(_CPU_COMPILE)  # no VLLM_CACHE_ROOT: ~/.cache/vllm
        assert [p.relative_to(home).parts[:4] for p in engine.neffs] == [(".cache", "vllm", "neuron", "compile_cache")]
        engine = _start({**_CPU_COMPILE, "VLLM_CACHE_ROOT": f"{home}/root",
                         "NEURON_LIBTORCH_REMOTE_CACHE": f"{home}/fsx"})
        local, remote = engine.neffs
        assert local.parent.parent == Path(home, "root", "neuron", "compile_cache")
        assert remote.parent.parent == Path(home, "fsx") and local.parent.name == remote.parent.name  # <hash>/
        with pytest.raises(RuntimeError, match="inference cannot run in this mode"):
            engine.generate("a prompt")


# (behaviour, what the fake does, the source line it follows)
BEHAVIOUR = [
    (no_device_trace_fails, "trace without a device and without cpu_backend fails (PJRT num_devices > 0)",
     "ISS #902, #910 (a maintainer: a Neuron device is required for torch 2.x compilation); "
     "SDK " + PYTORCH_INF + "api-torch-neuronx-trace.rst:53-55 (cpu_backend)"),
    (cpu_backend_needs_a_target, "cpu_backend=True without --target raises the SDK's message",
     "SDK " + PYTORCH_INF + "api-torch-neuronx-trace.rst:53-55; optimum-neuron PR #961"),
    (one_shape_unless_dynamic_batch, "a traced graph takes only its traced shape until dynamic_batch",
     "SDK " + PYTORCH_INF + "api-torch-neuronx-trace.rst, 'Dynamic Batching'"),
    (target_and_lnc_as_neuronx_cc, "--target choices, LNC in {1, 2}, LNC 2 on trn1 is NCC_EARG001",
     "SDK compiler/neuronx-cc/api-reference-guide/index.rst:85-94, :153; compiler/error-codes/EARG001.rst:18-21"),
    (no_xla_inference_on_trn2, "the PyTorch/XLA trace refuses trn2",
     "DOCS about-neuron/announcements/neuron2.x/announce-no-support-torch-xla-inference-trn.html; "
     "SDK " + PYTORCH_INF + "api-torch-neuronx-trace.rst:30 (NeuronCore-v2 only)"),
    (data_parallel_splits_as_its_source, "torch_neuronx.DataParallel: divmod chunks, num_workers 2 x loaded modules",
     "TNXSRC data_parallel.py scatter_map and _load_modules (torch-neuronx 1.13.1.1.12.0)"),
    (torch_neuron_data_parallel_as_its_docs, "torch.neuron.DataParallel: split max(1, rows // cores), 2 x cores",
     "SDK " + TORCH_NEURON + "api-torch-neuron-dataparallel-api.rst (num_workers, split_size)"),
    (visible_cores_as_a_comma_list, "NEURON_RT_VISIBLE_CORES as '2,3' (the device plugin's form) or ranges",
     "SDK deploy/infrastructure/scheduler-flow.rst (NEURON_RT_VISIBLE_CORES=2,3); runtime configuration guide"),
    (cpu_trace_warning_of_issue_827, "torch.neuron.trace warns 'returning a CPU trace' for a 1-operator model",
     "ISS #827 (a fully supported single conv; minimum_segment_size=2, " + TORCH_NEURON
     + "api-compilation-python-api.rst)"),
    (tnx_bans_every_eos_id, "sample_loop bans every EOS id of a list",
     "TNX src/transformers_neuronx/sampling.py sample_loop: next_token_scores[:, eos_token_id] = -inf"),
    (torchneuron_surface, "TorchNeuron: no trace/DataParallel; backend 'neuron' compiles per shape, rejects dynamic",
     "DOCS torch/reference/api/index.html; torch/compile/reference-torch-compile.html (dynamic: Unsupported); "
     "torch/compile/how-to-optimize-with-torch-compile.html step 2"),
    (vllm_cpu_compile_needs_the_target_override,
     "vLLM Neuron CPU compile refuses a missing NEURON_PLATFORM_TARGET_OVERRIDE in the docs' words",
     VN_CPU + " 'Requirements'"),
    (vllm_cpu_compile_takes_neuronx_cc_targets_only, "the override must be a neuronx-cc --target choice",
     VN_CPU + " 'Requirements'; SDK compiler/neuronx-cc/api-reference-guide/index.rst:85-94; nki/api/nki/__init__.py"),
    (vllm_cpu_compile_refuses_cpu_mode_and_speculation, "not with VLLM_NEURON_CPU_MODE; no speculative decoding",
     VN_CPU + " 'Requirements', 'Limitations'"),
    (vllm_cpu_compile_fills_the_cache_tiers_and_serves_nothing,
     "NEFFs in $VLLM_CACHE_ROOT/neuron/compile_cache/<hash>/ and the remote cache; no inference",
     VN_CACHE + " 'Cache Tiers'; " + VN_CPU + " 'How It Works'"),
]


@pytest.mark.parametrize("check, what, source", BEHAVIOUR, ids=[row[0].__name__ for row in BEHAVIOUR])
def test_fake_behaves_as_the_sdk(neuron_fakes, monkeypatch, check, what, source):
    assert what and source  # every row says what it checks and the line it follows
    check(neuron_fakes, monkeypatch)
