"""Triton's vLLM backend's settings as one control: a field per `VllmSettings` field, each linked
to it through its own parser, with its problem shown beside it.

The control's ``value`` is a `VllmFieldsShown`: the `VllmSettings` the fields describe plus the
problems of fields that do not parse. The settings panel links it to
``GenerateSettings.backend_settings`` with `parse_shown`, which raises those problems, so they are
the settings link's problems too (nothing is rendered while any field does not parse). Problems the
backend's checks find (`vllm_backend.checks.plan`, in the CLI's flags) are handed back with
`routed`, which puts each one beside its field in the field's own label.

The Neuron settings are shown for the targets whose docs define them: the core range and LNC on
every Neuron target, vLLM Neuron's buckets on Trn2/Trn3, the NxD Inference plugin's
override_neuron_config on Inf2/Trn1 (sources: `vllm_backend.settings`).
"""

from __future__ import annotations

import dataclasses
import html
from dataclasses import dataclass
from pathlib import Path

import ipywidgets as widgets
import traitlets

from workbench.coremap import CoreRange
from workbench.generate.settings import GenerateSettings, optional_number, optional_text, optional_whole, whole_numbers
from workbench.generate.vllm_backend import VLLM, VllmSettings
from workbench.generate.vllm_backend.engine_checks import FLAGS
from workbench.generate.vllm_backend.engine_settings import (
    DTYPES,
    NXDI_NEURON_CONFIG_DOC,
    NXDI_TARGETS,
    NXDI_VLLM_DOC,
    VLLM_NEURON_CONFIG_DOC,
    VLLM_NEURON_TARGETS,
    NxdiBuckets,
    VllmNeuronBuckets,
)
from workbench.ui.layout import description_style, heading, row
from workbench.ui.links import Linked, WidgetGroup, blank_if_none, comma_joined
from workbench.ui.widget_values import error_list

__all__ = ["VllmFields", "VllmFieldsShown", "TINY_LLM", "FOLDER"]

FOLDER, TINY_LLM = "folder", "tiny_llm"  # the model choice: a folder typed in, or the zoo's tiny LLM
_MODEL_CHOICES = (("a Hugging Face model folder", FOLDER), ("the zoo's tiny LLM (seeded, built here)", TINY_LLM))
_BUCKETING = (("(NxDI default)", None), ("on", True), ("off", False))
_LNC = (("(target default)", None), ("1", 1), ("2", 2))  # workbench.system.LNC_VALUES; the checks hold it


@dataclass(frozen=True)
class VllmFieldsShown:
    """What the fields show: the settings they describe in full, and the problem of each field
    that does not parse (the settings keep its last good value)."""

    settings: VllmSettings
    problems: tuple[str, ...] = ()


def _whole(text: str) -> int:
    number = optional_whole(text)
    if number is None:
        raise ValueError("give a whole number")
    return number


def _source(*pages: tuple[str, str]) -> widgets.HTML:
    """Where a group's keys are defined (the Neuron SDK docs: title, address), as links under its heading."""
    links = ", ".join(f"<a href='{html.escape(url)}' target='_blank'>{html.escape(title)}</a>" for title, url in pages)
    return widgets.HTML(f"<small style='color:#555'>defined in the Neuron SDK docs: {links}</small>")


def _buckets(text: str) -> tuple[int, ...]:
    return tuple(whole_numbers(text))


# VllmSettings field -> its label (vLLM's engine-argument name where it has one): the words of this screen
_LABELS = {
    "model": "model folder",
    "tokenizer": "tokenizer",
    "dtype": "dtype",
    "max_model_len": "max_model_len",
    "max_num_seqs": "max_num_seqs",
    "max_num_batched_tokens": "max_num_batched_tokens",
    "tensor_parallel_size": "tensor_parallel_size",
    "block_size": "block_size",
    "enforce_eager": "enforce_eager",
    "kv_cache_memory_bytes": "KV cache bytes",
    "gpu_memory_utilization": "KV cache share",
    "core_range": "NeuronCore range",
    "lnc": "LNC",
    "vllm_neuron": "vLLM Neuron buckets",
    "nxdi": "NxDI buckets",
}
# flags of the checks' messages -> the field they are about (the buckets' flags name their group)
_FIELD_OF_FLAG = {
    **{flag: name for name, flag in FLAGS.items() if name in _LABELS},
    FLAGS["num_batched_tokens_buckets"]: "vllm_neuron",
    FLAGS["num_seqs_buckets"]: "vllm_neuron",
    FLAGS["enable_bucketing"]: "nxdi",
    FLAGS["context_encoding_buckets"]: "nxdi",
    FLAGS["token_generation_buckets"]: "nxdi",
}
# a flag's words on this screen (each bucket flag by its own field's label)
_WORDS_OF_FLAG = {
    **{flag: _LABELS[name] for flag, name in _FIELD_OF_FLAG.items()},
    FLAGS["num_batched_tokens_buckets"]: "num_batched_tokens_buckets",
    FLAGS["num_seqs_buckets"]: "num_seqs_buckets",
    FLAGS["enable_bucketing"]: "enable_bucketing",
    FLAGS["context_encoding_buckets"]: "context_encoding_buckets",
    FLAGS["token_generation_buckets"]: "token_generation_buckets",
}


def in_app_words(problem: str) -> str:
    """A check's message with each flag it names replaced by that field's label here."""
    for flag in sorted(_WORDS_OF_FLAG, key=len, reverse=True):  # --max-num-seqs before --max-num
        problem = problem.replace(flag, _WORDS_OF_FLAG[flag])
    return problem


def field_of(problem: str) -> str | None:
    """The VllmSettings field a check's message is about (the first flag it names), or None."""
    at = {problem.find(flag): name for flag, name in _FIELD_OF_FLAG.items() if flag in problem}
    return at[min(at)] if at else None


class VllmFields(traitlets.HasTraits):
    """The vLLM backend's fields; ``value`` is a `VllmFieldsShown`, ``target`` picks which Neuron
    fields are shown. ``model_choice`` = `TINY_LLM` fills the model folder with the zoo's tiny LLM."""

    value = traitlets.Instance(VllmFieldsShown, help="the settings the fields describe, and their parse problems")
    chosen_name = traitlets.Unicode("", help="the model name that goes with the model chosen (the tiny LLM's)")
    target = traitlets.Unicode("cpu")

    def __init__(self) -> None:
        super().__init__()
        style = description_style("190px")  # max_num_batched_tokens whole
        text = {"style": style, "continuous_update": False}
        long = {"style": description_style("auto"), "continuous_update": False}  # the bucket fields' long names
        wide = widgets.Layout(width="640px", max_width="100%")
        self.controls: dict[str, widgets.Widget] = {}
        c = self.controls
        c["model_choice"] = widgets.Dropdown(
            options=_MODEL_CHOICES,
            value=FOLDER,
            description="model",
            style=style,
            layout=widgets.Layout(width="520px", max_width="100%"),
        )
        c["model"] = widgets.Text(
            description=_LABELS["model"], placeholder="config.json, weights and tokenizer", layout=wide, **text
        )
        c["tokenizer"] = widgets.Text(description="tokenizer", placeholder="the model folder's", layout=wide, **text)
        c["dtype"] = widgets.Dropdown(options=DTYPES, description="dtype", style=style)
        for name, hint in (
            ("max_model_len", "the model's positions"),
            ("max_num_seqs", "vLLM default"),
            ("max_num_batched_tokens", "vLLM default"),
            ("block_size", "vLLM default"),
            ("kv_cache_memory_bytes", "e.g. 67108864"),
            ("gpu_memory_utilization", "e.g. 0.5"),
            ("core_range", "first tensor_parallel_size cores"),
        ):
            # wide enough for the label and the whole hint ("the model's po" was cut, issue 43)
            c[name] = widgets.Text(
                description=_LABELS[name], placeholder=hint, layout=widgets.Layout(width="400px"), **text
            )
        c["tensor_parallel_size"] = widgets.Text(
            description=_LABELS["tensor_parallel_size"], layout=widgets.Layout(width="400px"), **text
        )
        c["enforce_eager"] = widgets.Checkbox(
            description="enforce_eager (no graph capture)", indent=False, layout=widgets.Layout(width="auto")
        )
        c["lnc"] = widgets.Dropdown(options=_LNC, description="LNC", style=style)
        c["num_batched_tokens_buckets"] = widgets.Text(
            description="num_batched_tokens_buckets", placeholder="e.g. 128,512", **long
        )
        c["num_seqs_buckets"] = widgets.Text(description="num_seqs_buckets", placeholder="e.g. 1,4", **long)
        c["enable_bucketing"] = widgets.Dropdown(
            options=_BUCKETING, description="enable_bucketing", style=long["style"]
        )
        c["context_encoding_buckets"] = widgets.Text(
            description="context_encoding_buckets", placeholder="e.g. 128,256", **long
        )
        c["token_generation_buckets"] = widgets.Text(
            description="token_generation_buckets", placeholder="e.g. 128,256", **long
        )
        self.errors = {name: widgets.HTML() for name in _LABELS}  # beside each field: its problem
        self._checked: list[tuple[str, str]] = []  # the checks' last problems: (field, in this screen's words)
        self._warned: list[tuple[str, str]] = []  # the render's warnings about a field: (field, in these words)
        self._kept: dict[str, object] = {}  # fields vLLM does not read, as they were before it was chosen
        # why the tiny LLM could not be built: shown beside the model folder until the user edits
        # it or picks the model again (a redraw of the fields' problems must not wipe it)
        self._build_failed: str | None = None

        self.link: Linked[VllmSettings] = Linked(VllmSettings())
        link = self.link.link
        link("model", c["model"], parse=lambda t: str(t).strip(), label=_LABELS["model"])
        link("tokenizer", c["tokenizer"], parse=optional_text, show=blank_if_none, label=_LABELS["tokenizer"])
        link("dtype", c["dtype"])
        for name in ("max_model_len", "max_num_seqs", "max_num_batched_tokens", "block_size", "kv_cache_memory_bytes"):
            link(name, c[name], parse=optional_whole, show=blank_if_none, label=_LABELS[name])
        link(
            "tensor_parallel_size",
            c["tensor_parallel_size"],
            parse=_whole,
            show=str,
            label=_LABELS["tensor_parallel_size"],
        )
        link("enforce_eager", c["enforce_eager"])
        link(
            "gpu_memory_utilization",
            c["gpu_memory_utilization"],
            parse=optional_number,
            show=blank_if_none,
            label=_LABELS["gpu_memory_utilization"],
        )
        link(
            "core_range",
            c["core_range"],
            parse=CoreRange.parse_optional,
            show=blank_if_none,
            label=_LABELS["core_range"],
        )
        link("lnc", c["lnc"])
        link(
            "vllm_neuron",
            WidgetGroup(c["num_batched_tokens_buckets"], c["num_seqs_buckets"]),
            parse=lambda shown: VllmNeuronBuckets(*map(_buckets, shown)),
            show=lambda b: (comma_joined(b.num_batched_tokens_buckets), comma_joined(b.num_seqs_buckets)),
            label=_LABELS["vllm_neuron"],
        )
        link(
            "nxdi",
            WidgetGroup(c["enable_bucketing"], c["context_encoding_buckets"], c["token_generation_buckets"]),
            parse=lambda shown: NxdiBuckets(shown[0], *map(_buckets, shown[1:])),
            show=lambda b: (
                b.enable_bucketing,
                comma_joined(b.context_encoding_buckets),
                comma_joined(b.token_generation_buckets),
            ),
            label=_LABELS["nxdi"],
        )
        self.link.on_change = lambda _names: self._publish()
        c["model_choice"].observe(self._model_chosen, names="value")
        c["model"].observe(self._model_edited, names="value")

        def field(name: str) -> widgets.VBox:
            return widgets.VBox([c[name], self.errors[name]])

        self.neuron_box = widgets.VBox([row(field("core_range"), field("lnc"))])
        self.vllm_neuron_box = widgets.VBox(
            [
                heading("vLLM Neuron (Trn2/Trn3): additional_config.neuron_config"),
                _source(("vLLM Neuron configuration reference", VLLM_NEURON_CONFIG_DOC)),
                row(c["num_batched_tokens_buckets"], c["num_seqs_buckets"]),
                self.errors["vllm_neuron"],
            ]
        )
        self.nxdi_box = widgets.VBox(
            [
                heading("NxD Inference plugin (Inf2/Trn1): additional_config.override_neuron_config"),
                _source(("NxDI vLLM user guide", NXDI_VLLM_DOC), ("NxDI NeuronConfig API", NXDI_NEURON_CONFIG_DOC)),
                row(c["enable_bucketing"], c["context_encoding_buckets"], c["token_generation_buckets"]),
                self.errors["nxdi"],
            ]
        )
        self.widget = widgets.VBox(
            [
                heading("vLLM engine arguments (1/model.json keys, as vLLM spells them)"),
                c["model_choice"],
                field("model"),
                field("tokenizer"),
                row(field("dtype"), field("tensor_parallel_size"), field("enforce_eager")),
                row(field("max_model_len"), field("max_num_seqs"), field("max_num_batched_tokens")),
                row(field("block_size"), field("kv_cache_memory_bytes"), field("gpu_memory_utilization")),
                self.neuron_box,
                self.vllm_neuron_box,
                self.nxdi_box,
            ]
        )
        self._show_target()

    @traitlets.default("value")
    def _defaults(self) -> VllmFieldsShown:
        return VllmFieldsShown(VllmSettings())

    # --- the settings link's side ------------------------------------------------------------------

    @staticmethod
    def parse_shown(shown: VllmFieldsShown) -> VllmSettings:
        """``GenerateSettings.backend_settings`` from what the fields show; ValueError while a field
        does not parse (each field's problem, in its label's words)."""
        if shown.problems:
            raise ValueError("; ".join(shown.problems))
        return shown.settings

    def show_settings(self, settings: object) -> VllmFieldsShown:
        """What the fields show for ``backend_settings``; another backend's None leaves them as they
        are (hidden), so choosing vLLM again brings back what was typed."""
        if not isinstance(settings, VllmSettings):
            return self.value
        # the fields' own last good settings coming back (a backend switch): what does not parse still does not
        return VllmFieldsShown(settings, tuple(self.link.problems) if settings == self.link.value else ())

    @property
    def placed(self) -> set[str]:
        """The checks' problems shown beside these fields now (in this screen's words)."""
        return {words for _field, words in self._checked}

    def keys(self) -> set[str]:
        """No config parameters: everything here goes to 1/model.json (the panel's backend-box protocol)."""
        return set()

    def switching(self, settings: GenerateSettings) -> dict[str, object]:
        """The GenerateSettings fields to change now that ``settings.backend`` was chosen. To vLLM:
        its settings from these fields, and the fields it does not read back to their defaults
        (their values are kept aside); away from vLLM: no backend settings, and what was kept back."""
        if settings.backend == VLLM.name:
            defaults = GenerateSettings(target=settings.target)
            self._kept = {
                name: getattr(settings, name)
                for name in VLLM.ignored_fields
                if str(getattr(settings, name)) != str(getattr(defaults, name))
            }
            return {**{name: getattr(defaults, name) for name in self._kept}, "backend_settings": self.value.settings}
        restored, self._kept = self._kept, {}
        return {**restored, "backend_settings": None} if settings.backend_settings is not None or restored else {}

    def routed(self, problems: list[str], settings: GenerateSettings) -> list[str]:
        """Show the checks' ``problems`` beside the fields they are about, in this screen's words;
        returns them all in those words (unchanged for another backend)."""
        self.target = settings.target
        if settings.backend != VLLM.name:
            self._checked = []
            self._show_errors()
            return problems
        own = set(self.value.problems)
        checked = [p for p in problems if p not in own and VLLM.reads not in p]  # not the switch's refusals
        self._checked = [(field, in_app_words(p)) for p in checked if (field := field_of(p)) is not None]
        self._show_errors()
        return [in_app_words(p) if p in checked else p for p in problems]

    def warned(self, warnings: list[str], settings: GenerateSettings) -> list[str]:
        """Show the render's ``warnings`` about a vLLM field beside it, in this screen's words (the
        KV-cache one sat at the bottom as ``--kv-cache-memory-bytes``); returns the others."""
        ours = settings.backend == VLLM.name
        self._warned = [(field, in_app_words(w)) for w in warnings if ours and (field := field_of(w)) is not None]
        self._show_errors()
        return [w for w in warnings if not ours or field_of(w) is None]

    # --- internals ---------------------------------------------------------------------------------

    @traitlets.observe("value")
    def _value_changed(self, change) -> None:
        """Field -> widgets: a new value from the settings link (read back, a backend switch)."""
        settings = change["new"].settings
        if settings != self.link.value:
            self.link.update(**{f.name: getattr(settings, f.name) for f in dataclasses.fields(settings)})
        self._show_errors()

    @traitlets.observe("target")
    def _target_changed(self, _change) -> None:
        self._show_target()

    def _show_target(self) -> None:
        self.neuron_box.layout.display = "none" if self.target == "cpu" else None
        self.vllm_neuron_box.layout.display = None if self.target in VLLM_NEURON_TARGETS else "none"
        self.nxdi_box.layout.display = None if self.target in NXDI_TARGETS else "none"

    def _publish(self) -> None:
        self.value = VllmFieldsShown(self.link.value, tuple(self.link.problems))
        self._show_errors()

    def _show_errors(self) -> None:
        for name, view in self.errors.items():
            parse = self.link.problem(name)
            checked = [words for field, words in self._checked if field == name]
            failed = [self._build_failed] if name == "model" and self._build_failed else []
            warned = "".join(
                f"<div style='color:#a05a00'>warning: {html.escape(words)}</div>"
                for field, words in self._warned
                if field == name
            )
            view.value = error_list(([parse] if parse else []) + checked + failed) + warned

    def _model_edited(self, _change) -> None:
        """The user acted on the model folder: a build failure no longer describes it."""
        if self._build_failed is not None:
            self._build_failed = None
            self._show_errors()

    def _model_chosen(self, change) -> None:
        if self._build_failed is not None:  # a new choice: the last one's failure is past
            self._build_failed = None
            self._show_errors()
        if change["new"] != TINY_LLM:
            return
        # start-up: the zoo (torch, transformers) loads only when its tiny LLM is picked
        from workbench import zoo
        from workbench.system import MissingSDKError

        try:
            llm = zoo.tiny_llm()
        except (MissingSDKError, OSError) as err:
            self._build_failed = f"model: the zoo's tiny LLM cannot be built here: {err}"
            self._show_errors()
            return
        # notebook 09's engine settings for this target and its model name, not the last model's
        from workbench.tutorial.llm import tiny_llm_settings

        chosen = tiny_llm_settings(llm.path, ".", self.target if self.target in ("cpu", "trn2", "inf2") else "cpu")
        shown = chosen.backend_settings
        if not isinstance(shown, VllmSettings):  # tiny_llm_settings makes vLLM-backend settings
            raise TypeError(f"tiny_llm_settings gave {type(shown).__name__} settings, not VllmSettings")
        self.link.update(**{f.name: getattr(shown, f.name) for f in dataclasses.fields(shown)})
        self._publish()
        self.chosen_name = ""  # a second choice of the same model names it again
        self.chosen_name = Path(chosen.triton_model_dir).name
