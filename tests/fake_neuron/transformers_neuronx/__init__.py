"""FAKE transformers-neuronx for tests: NOT the AWS SDK. Names, signatures and behaviour follow
aws-neuron/transformers-neuronx @ 1ade6d74 (Dec 2024), the last source release:

* top level (``__init__.py``): exactly the real exports, so ``GPT2ForSampling`` is NOT here (GPT-2 is
  ``GPT2ForSamplingWithContextBroadcasting``, what ``NeuronAutoModelForCausalLM`` maps gpt2 to,
  ``modeling_auto.py``). Config classes (NeuronConfig...) are inert stand-ins.
* ``from_pretrained(pretrained_model_path, *model_args, **kwargs)`` (``module.PretrainedModel``):
  ``cls(AutoConfig.from_pretrained(path), *model_args, **kwargs)`` plus the checkpoint's weights
  (loaded here into the transformers CPU model that computes the logits); AssertionError when
  ``context_length_estimate > n_positions``. Each class has its real ``__init__`` signature.
* ``NeuronModelBase`` classes (all but GPT-J and GPT-NeoX, ``base.py``): ``save(directory,
  sharded_weights=False)`` (FileExistsError when it is a file), ``load(directory)`` only records it,
  ``to_neuron()`` then raises FileNotFoundError('Did not find directory: <d>.') if it is missing,
  ``cpu_compile()``. GPT-J and GPT-NeoX are plain ``PretrainedModel``s: no save/load/cpu_compile.
* ``sample``: Llama/Mistral/Mixtral run ``sampling.sample_loop_llama`` (stop once every row has
  produced EOS, fill a finished row with the first EOS id, width <= sequence_length; ValueError when
  the batch is not a compiled batch size); GPT-2 (context broadcasting), OPT, BLOOM, GPT-J and
  GPT-NeoX run ``sampling.sample_loop`` (EOS score set to -inf each step, width = sequence_length).
  GPT-2 checks ``batch_size % runtime_batch_size`` and returns ``batch_size`` rows, each runtime
  row repeated; with ``prompt_batch_size != batch_size`` the context of prompt ``r %
  prompt_batch_size`` is broadcast to row r (``share_caches``; INFERRED from gpt2/model.py, not run).
  Logits come from the transformers model on the CPU, recomputed over the whole prefix each step.

Inside a Triton stub the calls are recorded per instance (see ../README.md). ``IMPORT_ENV`` holds
NEURON_PLATFORM_TARGET_OVERRIDE as it was when this module was imported.
"""

import os

from fake_neuron_record import call, record, visible_core_count

__version__ = "0.13.1315+fake"
IMPORT_ENV = {key: os.environ.get(key) for key in ("NEURON_PLATFORM_TARGET_OVERRIDE", "NEURON_RT_VISIBLE_CORES")}
record(imported="transformers_neuronx", override_at_import=IMPORT_ENV["NEURON_PLATFORM_TARGET_OVERRIDE"])


class _Inert:
    """Stand-in for a transformers-neuronx config object the workbench does not use."""

    def __init__(self, **kwargs):
        self.__dict__.update(kwargs)

    def __repr__(self):
        return f"{type(self).__name__}()"


class NeuronConfig(_Inert):
    pass


class QuantizationConfig(_Inert):
    pass


class ContinuousBatchingConfig(_Inert):
    pass


class GenerationConfig(_Inert):
    pass


class SparseAttnConfig(_Inert):
    pass


class HuggingFaceGenerationModelAdapter(_Inert):
    pass


class GQA:
    SHARD_OVER_HEADS = "shard-over-heads"


class Layout:
    HSB = "HSB"
    BSH = "BSH"


def _eos_ids(config):
    eos = getattr(config, "eos_token_id", None)
    return [] if eos is None else ([eos] if isinstance(eos, int) else list(eos))


class _PretrainedModel:
    """``module.PretrainedModel``: from_pretrained, and the CPU stand-in for the compiled graphs."""

    @classmethod
    def from_pretrained(cls, pretrained_model_path, *model_args, **kwargs):
        import transformers

        call(f"{cls.__name__}.from_pretrained", pretrained_model_path, *model_args, **kwargs)
        n_positions = kwargs.get("n_positions", 2048)
        estimate = kwargs.get("context_length_estimate")
        if isinstance(n_positions, int) and isinstance(estimate, int):
            assert n_positions >= estimate, (
                f"Max context_length_estimate {estimate} cannot be more than max n_positions {n_positions}.")
        config = transformers.AutoConfig.from_pretrained(pretrained_model_path)
        model = cls(config, *model_args, **kwargs)
        model._cpu_model = transformers.AutoModelForCausalLM.from_pretrained(pretrained_model_path).eval()
        model._options = dict(kwargs)
        record(sdk="transformers_neuronx", model_class=cls.__name__, load_path=str(pretrained_model_path),
               visible_cores_at_load=os.environ.get("NEURON_RT_VISIBLE_CORES"), from_pretrained=kwargs)
        return model

    def _setup(self, config, batch_size, tp_degree):
        self.config = config
        self.batch_sizes = list(batch_size) if isinstance(batch_size, (list, tuple)) else [batch_size]
        self.tp_degree = tp_degree
        self.on_neuron = False

    def to_neuron(self):
        call(f"{type(self).__name__}.to_neuron")
        visible = visible_core_count()
        if os.environ.get("FAKE_NEURON_RECORD_DIR") and (visible is None or self.tp_degree > visible):
            # stand-in for the runtime failing to place tp_degree ranks (not documented)
            raise RuntimeError(f"FAKE transformers_neuronx: tp_degree {self.tp_degree} needs {self.tp_degree} "
                               f"visible cores, NEURON_RT_VISIBLE_CORES={os.environ.get('NEURON_RT_VISIBLE_CORES')!r}")
        self.on_neuron = True
        record(to_neuron=True)

    # --- the CPU stand-in for the compiled decoder ---------------------------------------------

    def _next_scores(self, tokens):
        import torch

        if not self.on_neuron:  # cpu_compile only compiles; running needs to_neuron on a device
            raise RuntimeError("FAKE transformers_neuronx: sample() before to_neuron()")
        with torch.no_grad():  # (the real sampling functions run under torch.no_grad too)
            return self._cpu_model(tokens, attention_mask=torch.ones_like(tokens)).logits[:, -1, :].float()

    def _sample_loop(self, input_ids, sequence_length, top_k, context_rows=None):
        """sampling.sample_loop: no EOS id ever sampled, always sequence_length columns."""
        import torch

        eos = _eos_ids(self.config)
        tokens = [input_ids]
        context = input_ids if context_rows is None else input_ids[context_rows]
        for _ in range(input_ids.shape[1], sequence_length):
            scores = self._next_scores(torch.cat([context, *tokens[1:]], dim=-1))
            # sampling.sample_loop: next_token_scores[:, eos_token_id] = -inf bans EVERY id of a list, and
            # with eos_token_id None indexes [:, None], i.e. every score (then multinomial fails, as here)
            scores[:, eos if eos else slice(None)] = -float("inf")
            values, indices = torch.topk(scores, top_k)
            probs = torch.nn.functional.softmax(values, dim=-1, dtype=torch.float32)
            tokens.append(torch.gather(indices, 1, torch.multinomial(probs, num_samples=1, replacement=True)))
        return torch.cat(tokens, dim=-1)

    def _sample_loop_llama(self, input_ids, sequence_length, top_k, top_p, temperature, eos_token_id):
        """sampling.sample_loop_llama: stop once every row has produced EOS, fill finished rows."""
        import torch

        if not isinstance(top_k, int) or top_k <= 0:
            raise ValueError("top_k has to be a strictly positive int.")
        if not isinstance(top_p, float) or not 0.0 < top_p <= 1.0:
            raise ValueError("top_p has to be a strictly positive float that less than or equal to 1.0.")
        if not isinstance(temperature, float) or not temperature > 0:
            raise ValueError("temperature has to be a strictly positive float.")
        eos = torch.tensor([eos_token_id] if isinstance(eos_token_id, int) else list(eos_token_id), dtype=torch.int64)
        done = torch.full((input_ids.shape[0], 1), False)
        tokens = [input_ids]
        for current_length in range(input_ids.shape[1], sequence_length):
            scores = self._next_scores(torch.cat(tokens, dim=-1))
            if temperature != 1.0:
                scores = scores / temperature
            values, indices = torch.topk(scores, min(top_k, scores.shape[-1]))
            if top_p < 1.0:
                cumulative = torch.cumsum(torch.nn.functional.softmax(values, dim=-1), dim=-1)
                keep = torch.cat([torch.ones_like(cumulative[:, :1], dtype=torch.bool), (cumulative < top_p)[:, :-1]], -1)
                values = values.masked_fill(~keep, -float("inf"))
            probs = torch.nn.functional.softmax(values, dim=-1, dtype=torch.float32)
            chosen = torch.gather(indices, 1, torch.multinomial(probs, num_samples=1, replacement=True))
            is_eos = torch.isin(chosen, eos)
            done = done | is_eos
            tokens.append(torch.where(done & ~is_eos, eos[0], chosen))
            if current_length + 1 > sequence_length or bool(done.all()):
                break
        return torch.cat(tokens, dim=-1)

    def _check_compiled_batch(self, input_ids):
        if input_ids.shape[0] not in self.batch_sizes:
            raise ValueError(f"Model not compiled for batch_size : {input_ids.shape[0]}. "
                             f"Acceptable batch_size is one of the following {self.batch_sizes}")


class _NeuronModelBase(_PretrainedModel):
    """``base.NeuronModelBase``: serialization and CPU compilation."""

    def save(self, directory, sharded_weights=False):
        call(f"{type(self).__name__}.save", directory, sharded_weights=sharded_weights)
        if os.path.isfile(directory):
            raise FileExistsError(f"Artifacts should be saved to a directory. Found existing file: {directory}")
        os.makedirs(directory, exist_ok=True)
        with open(os.path.join(directory, "FAKE-neff-graphs.txt"), "w") as handle:
            handle.write(f"FAKE transformers_neuronx {type(self).__name__} graphs (no NEFF)\n")

    def load(self, directory):
        call(f"{type(self).__name__}.load", directory)
        self._compiled_artifacts_directory = directory
        record(loaded_compiled_dir=str(directory))

    def to_neuron(self):
        if hasattr(self, "_compiled_artifacts_directory") and not os.path.isdir(self._compiled_artifacts_directory):
            raise FileNotFoundError(f"Did not find directory: {self._compiled_artifacts_directory}.")
        super().to_neuron()

    def cpu_compile(self):
        call(f"{type(self).__name__}.cpu_compile")
        self._cpu_compiled = True


class _LlamaStyle(_NeuronModelBase):
    def sample(self, input_ids, sequence_length, cache_ids=None, start_ids=None, top_k=50, top_p=1.0,
               eos_token_override=None, temperature=1.0, streamer=None, stopping_criteria_list=None,
               no_repeat_ngram_size=None, **kwargs):
        call(f"{type(self).__name__}.sample", input_ids, sequence_length, top_k=top_k)
        self._check_compiled_batch(input_ids)
        eos = self.config.eos_token_id if eos_token_override is None else eos_token_override
        return self._sample_loop_llama(input_ids, sequence_length, top_k, top_p, temperature, eos)


class LlamaForSampling(_LlamaStyle):
    def __init__(self, config, *, n_positions=2048, batch_size=1, amp='f32', tp_degree=2,
                 context_length_estimate=None, context_unroll=None, unroll=None, neuron_config=None,
                 prefixed_length=0, **kwargs):
        self._setup(config, batch_size, tp_degree)


class MistralForSampling(_LlamaStyle):
    def __init__(self, config, *, n_positions=2048, batch_size=1, amp='f32', tp_degree=2,
                 context_length_estimate=None, context_unroll=None, unroll=None, neuron_config=NeuronConfig(),
                 **kwargs):
        self._setup(config, batch_size, tp_degree)

    def sample(self, input_ids, sequence_length, start_ids=None, top_k=50, top_p=1.0, eos_token_override=None,
               temperature=1.0, streamer=None, stopping_criteria_list=None):
        return _LlamaStyle.sample(self, input_ids, sequence_length, top_k=top_k, top_p=top_p,
                                  eos_token_override=eos_token_override, temperature=temperature)


class MixtralForSampling(MistralForSampling):
    def __init__(self, config, *, n_positions=2048, batch_size=1, amp='f32', tp_degree=2,
                 context_length_estimate=None, context_unroll=None, unroll=None, neuron_config=NeuronConfig(),
                 **kwargs):
        self._setup(config, batch_size, tp_degree)


class GPT2ForSamplingWithContextBroadcasting(_NeuronModelBase):
    def __init__(self, config, batch_size=1, prompt_batch_size=1, amp='f32', tp_degree=2, unroll=None,
                 context_length_estimate=None, context_unroll=1, neuron_config=NeuronConfig(), reorder_cache=False,
                 **kwargs):
        self._setup(config, batch_size, tp_degree)
        self.prompt_batch_size = prompt_batch_size

    def sample(self, input_ids, sequence_length, cache_ids=None, start_ids=None, top_k=50, streamer=None,
               output_scores=False, **kwargs):
        import torch

        call(f"{type(self).__name__}.sample", input_ids, sequence_length, top_k=top_k)
        runtime_batch_size = input_ids.shape[0]
        batch_size = self.batch_sizes[0]
        if batch_size % runtime_batch_size:
            raise ValueError(f"model batch_size must be multiples of runtime_batch_size; got "
                             f"batch_size={batch_size} and runtime_batch_size={runtime_batch_size}")
        input_ids = input_ids.repeat([batch_size // runtime_batch_size, 1])
        shared = self.prompt_batch_size == batch_size
        rows = None if shared else torch.arange(batch_size) % self.prompt_batch_size
        interleaved = self._sample_loop(input_ids, sequence_length, top_k, context_rows=rows)
        interleaved = interleaved.reshape([-1, runtime_batch_size, sequence_length])
        return interleaved.permute([1, 0, 2]).reshape([-1, sequence_length])


class _SimpleSample:
    def sample(self, input_ids, sequence_length, start_ids=None, top_k=50, streamer=None):
        call(f"{type(self).__name__}.sample", input_ids, sequence_length, top_k=top_k)
        return self._sample_loop(input_ids, sequence_length, top_k)


class OPTForSampling(_SimpleSample, _NeuronModelBase):
    def __init__(self, config, batch_size=1, amp=None, tp_degree=2, n_positions=2048, unroll=None,
                 context_length_estimate=None, context_unroll=1, neuron_config=None, **kwargs):
        self._setup(config, batch_size, tp_degree)


class BloomForSampling(_SimpleSample, _NeuronModelBase):
    def __init__(self, config, *, n_positions=2048, batch_size=1, amp='f32', tp_degree=2,
                 context_length_estimate=None, context_unroll=None, unroll=None, neuron_config=None, **kwargs):
        self._setup(config, batch_size, tp_degree)

    def sample(self, input_ids, sequence_length, start_ids=None, top_k=50, streamer=None):
        self._check_compiled_batch(input_ids)
        return _SimpleSample.sample(self, input_ids, sequence_length, start_ids, top_k, streamer)


class GPTJForSampling(_SimpleSample, _PretrainedModel):
    def __init__(self, config, batch_size=1, amp='f32', tp_degree=2, unroll=None, init_n_active_tokens=None,
                 neuron_config=None, **kwargs):
        self._setup(config, batch_size, tp_degree)

    def to_neuron(self):
        _PretrainedModel.to_neuron(self)


class GPTNeoXForSampling(_SimpleSample, _PretrainedModel):
    def __init__(self, config, batch_size=1, amp='f32', tp_degree=2, unroll=None, init_n_active_tokens=None,
                 neuron_config=None, **kwargs):
        self._setup(config, batch_size, tp_degree)

    def to_neuron(self):
        _PretrainedModel.to_neuron(self)


_CAUSAL_LM_MAPPING = {
    "bloom": BloomForSampling, "code_llama": LlamaForSampling, "gpt2": GPT2ForSamplingWithContextBroadcasting,
    "gpt_neox": GPTNeoXForSampling, "gptj": GPTJForSampling, "llama": LlamaForSampling,
    "mistral": MistralForSampling, "mixtral": MixtralForSampling, "opt": OPTForSampling,
}


class NeuronAutoModelForCausalLM:
    """modeling_auto.NeuronAutoModelForCausalLM: the class for the checkpoint's model_type."""

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *model_args, **kwargs):
        import transformers

        config = transformers.AutoConfig.from_pretrained(pretrained_model_name_or_path)
        if config.model_type not in _CAUSAL_LM_MAPPING:
            raise AssertionError(f"The configuration model type '{config.model_type}' is not supported by Neuron")
        return _CAUSAL_LM_MAPPING[config.model_type].from_pretrained(pretrained_model_name_or_path, *model_args,
                                                                     **kwargs)


__all__ = [
    "GQA", "Layout", "SparseAttnConfig", "NeuronConfig", "QuantizationConfig", "ContinuousBatchingConfig",
    "GenerationConfig", "HuggingFaceGenerationModelAdapter", "BloomForSampling", "LlamaForSampling",
    "GPT2ForSamplingWithContextBroadcasting", "GPTNeoXForSampling", "GPTJForSampling", "MistralForSampling",
    "MixtralForSampling", "OPTForSampling", "NeuronAutoModelForCausalLM",
]
