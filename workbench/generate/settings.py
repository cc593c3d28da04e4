"""Generation settings: every gen_triton_model.py option with its upstream name, plus the workbench's own.

`GenerateSettings` is the one value that travels from the CLI, the settings panel, the notebooks
and `load_settings` to the checks and the renderer; `GenerateError` carries every problem found.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from workbench.coremap import CoreRange, CoreRangeError
from workbench.generate.options import QueuePolicy, RateLimiter, VersionPolicy, Warmup
from workbench.refusals import WorkbenchError
from workbench.spec import TensorSpec
from workbench.system import detect

__all__ = [
    "GenerateError",
    "GenerateSettings",
    "default_target",
    "TNX_AMPS",
    "TNX_PARAMETERS",
    "whole_numbers",
    "optional_whole",
    "optional_number",
    "optional_text",
    "at_least",
]

TNX_AMPS = ("f32", "f16", "bf16")
# GenerateSettings field -> model.py parameter; the compile step records the same keys (without
# the tnx_ prefix) in its sidecar's "extra"
TNX_PARAMETERS = {
    "tnx_model_class": "TNX_MODEL_CLASS",
    "tnx_batch_size": "TNX_BATCH_SIZE",
    "tnx_tp_degree": "TNX_TP_DEGREE",
    "tnx_n_positions": "TNX_N_POSITIONS",
    "tnx_amp": "TNX_AMP",
    "tnx_unroll": "TNX_UNROLL",
    "tnx_sequence_length": "TNX_SEQUENCE_LENGTH",
}


class GenerateError(WorkbenchError, ValueError):
    """Settings that cannot produce a servable model; ``problems`` holds one message per bad item."""

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        super().__init__("; ".join(self.problems))


def default_target() -> str:
    """What this machine serves: ``cpu`` without a Neuron device, else its instance family
    (`workbench.system.detect`, the one place that decides)."""
    return detect().default_target


@dataclass
class GenerateSettings:
    """Every gen_triton_model.py option (same names and meaning) plus the workbench's own.

    ``triton_input``/``triton_output`` take upstream ``NAME,DTYPE,SHAPE`` items (or TensorSpecs);
    with ``max_batch_size > 0`` the dims leave out the batch dim, as upstream required. When both
    are empty they come from the compiled model: its ``.workbench.json`` sidecar, or for TensorFlow
    the SavedModel signature. A relative ``compiled_model`` is resolved against the model directory
    (what model.py does), unless ``copy_compiled_model`` copies it there from the current directory.
    ``name`` defaults to the directory's name; when it differs, ``triton_model_dir`` is taken as the
    model repository and the model goes to ``<triton_model_dir>/<name>``.

    Parameters written for model.py: ``WORKBENCH_TARGET``/``WORKBENCH_FRAMEWORK`` from target and
    framework, ``BATCH_REQUESTS`` = not ``disable_batch_requests_to_neuron``, ``CPU_AFFINITY``,
    ``TF_SIGNATURE_DEF_KEY`` (tensorflow), and for transformers_neuronx each ``tnx_x`` field as
    ``TNX_X`` (``tnx_model_class`` -> ``TNX_MODEL_CLASS`` ...); a None field is left out so model.py
    uses its default. ``parameters`` adds the user's own (any key the generator does not write).

    The Triton fields users tune (`workbench.generate.options`, same names as model_config.proto):
    the instance group's kind, name and rate limiter; the dynamic batcher's ordering, priorities
    and queue policies; optional inputs; warm-up samples; the response cache; the version policy;
    the transaction policy (None: the field is not written).

    What the generator does not model is carried, so read-back + regenerate loses nothing:
    ``extra_config`` (config.pbtxt text of every other field, merged in), ``extra_files`` (relative
    path -> file to copy: a tokenizer, warm-up data, a README), ``model_py`` (a hand-written model.py
    used instead of the generated one). ``variants`` adds ``configs/<name>.pbtxt`` files, each these
    settings with some fields replaced (e.g. ``{"cpu": {"target": "cpu"}}``), which tritonserver
    serves with ``--model-config-name=<name>``. ``compiled_model_base`` says what a relative
    ``compiled_model`` is relative to: the model directory (the generated model.py's rule), or
    ``server_cwd`` for directories upstream wrote for inf1 (its model.py opened the path as written).
    """

    triton_model_dir: str = ""
    compiled_model: str = ""
    framework: str = "pytorch"  # upstream --model_type (plus transformers_neuronx)
    target: str = field(default_factory=default_target)
    triton_input: list = field(default_factory=list)
    triton_output: list = field(default_factory=list)
    # a CoreRange after construction (text such as "0:3" is parsed here, where a notebook's enters);
    # text that does not parse is kept as given, so `validate` names it with every other problem
    neuron_core_range: CoreRange | str = CoreRange(0, 0)
    triton_model_instance_count: int = 1
    threads_per_core: int | None = None  # None: NUM_THREADS_PER_CORE left out (SDK default workers)
    model_version: int = 1
    max_batch_size: int = 0
    enable_dynamic_batching: bool = False
    preferred_batch_size: list = field(default_factory=list)
    max_queue_delay_microseconds: int | None = None
    disable_batch_requests_to_neuron: bool = False
    tag_set: str = "serve"
    signature_def_key: str = "serving_default"
    name: str | None = None
    copy_compiled_model: bool = False
    for_other_machine: bool = False
    cpu_affinity: bool = False
    # transformers-neuronx; None: what the compile recorded, else model.py's default (LlamaForSampling,
    # batch 1, tp degree = the instance's cores, 2048 positions, f32, sequence length = positions)
    tnx_model_class: str | None = None
    tnx_batch_size: int | None = None
    tnx_tp_degree: int | None = None
    tnx_n_positions: int | None = None
    tnx_amp: str | None = None
    tnx_unroll: int | None = None
    tnx_sequence_length: int | None = None
    tnx_compiled_dir: str | None = None  # graphs saved by .save(); loaded instead of recompiling
    # Triton config fields users tune (see workbench.generate.options)
    instance_group_kind: str = "KIND_MODEL"
    instance_group_name: str = ""
    rate_limiter: RateLimiter | None = None
    preserve_ordering: bool = False
    priority_levels: int = 0
    default_priority_level: int = 0
    default_queue_policy: QueuePolicy | None = None
    priority_queue_policy: dict = field(default_factory=dict)  # priority level -> QueuePolicy
    optional_inputs: list = field(default_factory=list)
    model_warmup: list = field(default_factory=list)  # Warmup samples
    response_cache: bool | None = None
    version_policy: VersionPolicy | None = None
    decoupled: bool | None = None  # model_transaction_policy
    parameters: dict = field(default_factory=dict)  # the user's own config parameters
    # kept through read-back: what the generator does not model
    extra_config: str = ""
    extra_files: dict = field(default_factory=dict)  # relative path -> source file
    model_py: str | None = None
    compiled_model_base: str = "model_dir"  # or "server_cwd" (upstream inf1 directories)
    variants: dict = field(default_factory=dict)  # name -> {field: value} for configs/<name>.pbtxt
    # Triton's backend: "python" (the generated model.py, every target) or "pytorch" (LibTorch, see
    # generate.pytorch_backend.generate), whose layout is Triton's own ``runtime`` field ("": a
    # TorchScript model.pt, "model.py": a PyTorch 2 module) and whose switches (INFERENCE_MODE,
    # NUM_THREADS ...) are config ``parameters``; ``state_dict``: a PyTorch 2 module's weights.
    backend: str = "python"
    runtime: str = ""
    state_dict: str = ""
    # A further backend's own settings: its typed dataclass (the backend's validate checks the type),
    # so adding a backend adds no field here. The two backends above keep their flat fields.
    backend_settings: object | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.neuron_core_range, CoreRange):
            try:
                self.neuron_core_range = CoreRange.parse(self.neuron_core_range)
            except CoreRangeError:
                pass  # kept as given: the checks name it
        # single values are accepted where upstream took one (notebook callers pass 8, not [8])
        if isinstance(self.preferred_batch_size, int):
            self.preferred_batch_size = [self.preferred_batch_size]
        for name in ("triton_input", "triton_output"):
            if isinstance(getattr(self, name), (str, TensorSpec)):
                setattr(self, name, [getattr(self, name)])
        if isinstance(self.optional_inputs, str):
            self.optional_inputs = [self.optional_inputs]
        if isinstance(self.model_warmup, Warmup):
            self.model_warmup = [self.model_warmup]

    @property
    def model_dir(self) -> Path:
        base = Path(self.triton_model_dir)
        if self.name and self.name != base.name:
            return base / self.name
        return base

    @property
    def model_name(self) -> str:
        return self.name or Path(self.triton_model_dir).name


# Text as a form or a notebook gives it -> field values (the settings panel's fields; the CLI gets
# them typed from argparse). ValueError says what is wrong; the caller names the field.


def whole_numbers(text: str) -> list[int]:
    """``"4,8"`` (or ``"4 8"``) -> ``[4, 8]``; blank -> ``[]`` (preferred batch sizes)."""
    numbers = []
    for part in str(text).replace(",", " ").split():
        try:
            numbers.append(int(part))
        except ValueError:
            raise ValueError(f"{part!r} is not a whole number (write e.g. 4,8)") from None
    return numbers


def optional_whole(text: str) -> int | None:
    """``"100"`` -> 100; blank -> None (the field is left out: the recorded or default value)."""
    text = str(text).strip()
    if not text:
        return None
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a whole number") from None


def optional_number(text: str) -> float | None:
    """``"0.5"`` -> 0.5; blank -> None (a share such as the KV cache's; the checks bound it)."""
    text = str(text).strip()
    if not text:
        return None
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a number (write e.g. 0.5)") from None


def optional_text(text: str) -> str | None:
    """Blank -> None (the default is used); otherwise the text without surrounding spaces."""
    return str(text).strip() or None


def at_least(low: int, hint: str = "") -> Callable[[int], int]:
    """A form's whole number checked against its lowest value: below it is an error saying so
    (``hint`` added: what the lowest values mean), never clamped -- a max batch size of -4 clamped to 0
    would silently turn batching off."""

    def checked(value: int) -> int:
        if value < low:
            raise ValueError(f"{value} is less than {low}" + (f"; {hint}" if hint else ""))
        return value

    return checked
