"""FAKE transformers-neuronx for tests: NOT the AWS SDK. ``<Any>ForSampling.from_pretrained`` loads
the Hugging Face folder with transformers on the CPU and ``sample`` decodes greedily (top_k=1),
recording the arguments the real SDK would get (see ../README.md)."""

import os

from fake_neuron_record import record, visible_core_count


class _FakeForSampling:
    def __init__(self, model, batch_size):
        self.model, self.batch_size, self.on_neuron = model, batch_size, False

    @classmethod
    def from_pretrained(cls, path, batch_size=1, tp_degree=2, n_positions=2048, amp="f32", **kwargs):
        import transformers

        visible = visible_core_count()
        if visible is None or tp_degree > visible:
            raise RuntimeError(f"FAKE transformers_neuronx: tp_degree {tp_degree} needs {tp_degree} visible cores, "
                               f"NEURON_RT_VISIBLE_CORES={os.environ.get('NEURON_RT_VISIBLE_CORES')!r}")
        record(sdk="transformers_neuronx", model_class=cls.__name__, load_path=str(path),
               visible_cores_at_load=os.environ.get("NEURON_RT_VISIBLE_CORES"),
               from_pretrained={"batch_size": batch_size, "tp_degree": tp_degree, "n_positions": n_positions,
                                "amp": amp, **kwargs})
        return cls(transformers.AutoModelForCausalLM.from_pretrained(path).eval(), batch_size)

    def load(self, directory):
        """The real SDK reads graphs saved by ``.save()``; the fake checks the folder and records it."""
        if not os.path.isdir(directory):
            raise FileNotFoundError(f"FAKE transformers_neuronx: no saved graphs at {directory}")
        record(loaded_compiled_dir=str(directory))

    def to_neuron(self):
        self.on_neuron = True
        record(to_neuron=True)

    def sample(self, input_ids, sequence_length, start_ids=None, top_k=50, **kwargs):
        import torch

        if not self.on_neuron:
            raise RuntimeError("FAKE transformers_neuronx: sample() before to_neuron()")
        if input_ids.shape[0] != self.batch_size:
            raise RuntimeError(f"FAKE transformers_neuronx: batch {input_ids.shape[0]} != compiled batch_size {self.batch_size}")
        if top_k != 1:
            raise RuntimeError("FAKE transformers_neuronx: only greedy decoding (top_k=1) is reproducible on the CPU")
        pad = self.model.config.pad_token_id if self.model.config.pad_token_id is not None else self.model.config.eos_token_id
        with torch.inference_mode():
            return self.model.generate(input_ids, attention_mask=torch.ones_like(input_ids), max_length=sequence_length,
                                       min_length=sequence_length, do_sample=False, pad_token_id=pad)


class LlamaForSampling(_FakeForSampling):
    pass


class GPT2ForSampling(_FakeForSampling):
    pass
