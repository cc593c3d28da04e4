"""Triton's vLLM backend: config.pbtxt (``backend: "vllm"``) + ``<version>/model.json`` of vLLM engine
arguments, for the CPU (vLLM's CPU engine), Trn2/Trn3 (vLLM Neuron) and Inf2/Trn1 (vLLM 0.16 + the
NxD Inference plugin).

Modules: `settings` (`VllmSettings`, carried as ``GenerateSettings.backend_settings``, and the
Neuron keys' sources), `checks` (every problem before anything is written; the core map: a core
range split into instances of tensor-parallel-degree cores), `render` (the files) and `readback`.
`VLLM` is this backend's entry in the switch (`workbench.generate.backends`).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from tritonclient.grpc import model_config_pb2

from workbench.generate.config import ModelConfig
from workbench.generate.product import GeneratedModel, ReadBack
from workbench.generate.settings import GenerateError, GenerateSettings
from workbench.generate.settings_checks import setting_flag
from workbench.generate.vllm_backend.engine_checks import plan
from workbench.generate.vllm_backend.engine_settings import NXDI_TARGETS, VLLM_NEURON_TARGETS, VllmSettings
from workbench.generate.vllm_backend.readback import read_back_vllm
from workbench.generate.vllm_backend.render import render
from workbench.system import TARGETS

__all__ = ["VllmBackend", "VLLM", "VllmSettings", "VLLM_TARGETS"]

VLLM_TARGETS = tuple(t for t in ("cpu", *NXDI_TARGETS, *VLLM_NEURON_TARGETS) if t in TARGETS)
# GenerateSettings fields Triton's vLLM backend has no use for: set away from their default, refused
_UNREAD = (
    "compiled_model",
    "triton_input",
    "triton_output",
    "triton_model_instance_count",
    "max_batch_size",
    "enable_dynamic_batching",
    "preferred_batch_size",
    "max_queue_delay_microseconds",
    "copy_compiled_model",
    "model_warmup",
    "optional_inputs",
    "extra_config",
    "extra_files",
    "variants",
    "runtime",
    "state_dict",
    # its cores are VllmSettings.core_range; no model.py reads the threads or the batching switch
    "neuron_core_range",
    "threads_per_core",
    "cpu_affinity",
    "disable_batch_requests_to_neuron",
)


def _default(name: str) -> object:
    spec = GenerateSettings.__dataclass_fields__[name]
    return spec.default_factory() if spec.default_factory is not dataclasses.MISSING else spec.default


class VllmBackend:
    """``backend: "vllm"``: vLLM serves a Hugging Face model folder; Triton streams its tokens."""

    name = "vllm"
    label = "vLLM backend (LLMs)"
    pins_cores = False  # instances' cores are NEURON_RT_VISIBLE_CORES per instance, not model.py's parameters
    streams_tokens = True  # decoupled, token by token: swept in tokens (measure/llm)
    server_per_instance = True  # an engine per instance, each seeing only its NEURON_RT_VISIBLE_CORES
    reads = "Triton's vLLM backend"
    targets: tuple[str, ...] = VLLM_TARGETS
    own_fields: tuple[str, ...] = ()  # everything it reads is in VllmSettings (GenerateSettings.backend_settings)
    ignored_fields: tuple[str, ...] = _UNREAD

    def validate(self, settings: GenerateSettings) -> list[str]:
        return self._switch_problems(settings) + plan(settings).problems

    def _switch_problems(self, settings: GenerateSettings) -> list[str]:
        """The GenerateSettings this backend cannot take: another target, fields it does not read."""
        problems = []
        if settings.target not in self.targets:
            problems.append(
                f"--target {settings.target}: {self.reads} serves {', '.join(self.targets)} (Inf1 has no vLLM)"
            )
        return problems + [
            f"{setting_flag(name)} is not read by {self.reads} (leave it out)"
            for name in _UNREAD
            if str(getattr(settings, name)) != str(_default(name))
        ]

    def render(self, settings: GenerateSettings) -> GeneratedModel:
        checked = plan(settings)
        problems = self._switch_problems(settings) + checked.problems
        if problems:
            raise GenerateError(problems)
        return render(settings, checked)

    def read_back(self, model_dir: Path, config: ModelConfig) -> ReadBack:
        return read_back_vllm(model_dir, config)

    def recognises(self, config: ModelConfig) -> bool:
        return config.backend == "vllm"

    def config_problems(self, config: ModelConfig) -> list[str]:
        """What the backend's src/model.py refuses or overrides: KIND_GPU with more than one device
        aside, it takes KIND_MODEL; it sets max_batch_size 0 and the decoupled policy itself."""
        problems = []
        if config.max_batch_size != 0:
            problems.append(f"max_batch_size {config.max_batch_size}: {self.reads} batches in vLLM; use 0")
        if config.HasField("model_transaction_policy") and not config.model_transaction_policy.decoupled:
            problems.append(f"{self.reads} needs the decoupled transaction policy")
        kind = model_config_pb2.ModelInstanceGroup
        problems += [
            f"instance_group kind {kind.Kind.Name(g.kind)}: {self.reads} places the model itself; use KIND_MODEL"
            for g in config.instance_group
            if g.kind not in (kind.KIND_MODEL, kind.KIND_AUTO)
        ]
        return problems

    def eager_module(self, model_dir: Path) -> None:
        return None  # the reference is vLLM's offline generate (workbench.served_generation)


VLLM = VllmBackend()
