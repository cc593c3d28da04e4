"""The settings panel's vLLM field group, headless: chosen with "Triton backend", linked to
`VllmSettings`, its errors beside its fields in their labels' words, the preview showing and
writing config.pbtxt + 1/model.json, a tiny LLM that cannot be built said beside the model folder
until the user acts, and the ask area's sentences when nothing can be asked.
(The browser test tests/browser/test_vllm_app.py takes the same path to a served answer.)"""

from __future__ import annotations

import html
import json
import re

import pytest

from workbench import generate, zoo
from workbench.generate.vllm_backend import VllmSettings
from workbench.tutorial.llm import CPU_ENGINE  # notebook 09's engine settings, which the tiny LLM brings
from workbench.ui import Workbench
from workbench.ui.vllm_fields import FOLDER, TINY_LLM


def _text(value: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", " ", value))


def _plain(value: str) -> str:
    """Highlighted code as it reads (the colour spans dropped, not spaced)."""
    return html.unescape(re.sub(r"<[^>]+>", "", value))


@pytest.fixture(scope="module")
def llm():
    return zoo.tiny_llm()


@pytest.fixture
def app(tmp_path):
    app = Workbench(tmp_path / "model_repository")
    yield app
    app.close()


def _choose_vllm(app, llm) -> dict:
    settings = app["settings"].controls
    settings["name"].value = "add_sub"  # the last model's name: choosing the tiny LLM names it tiny_llm
    settings["backend"].value = "vllm"
    fields = settings["vllm"].controls
    fields["model_choice"].value = TINY_LLM
    return fields


def test_the_group_shows_for_vllm_only_and_picks_the_tiny_llm(app, llm):
    panel = app["settings"]
    group = panel.controls["vllm"]
    assert group.widget.layout.display == "none"  # the Python backend is chosen at first
    fields = _choose_vllm(app, llm)
    assert group.widget.layout.display is None and panel.pytorch_box.layout.display == "none"
    assert fields["model"].value == str(llm.path)
    # what vLLM does not read is greyed out: the compiled model, batching, the generic core range
    for key in ("compiled_model", "max_batch_size", "dynamic_batching", "instance_count", "core_range"):
        assert panel.controls[key].disabled, key
    # issue 43: the tiny LLM comes with its own name and notebook 09's engine settings for the CPU
    assert app.state.name == "tiny_llm" and panel.controls["name"].value == "tiny_llm"
    assert app.state.settings_problems == [], app.state.settings_problems
    args = json.loads(app.state.generated.files["1/model.json"])
    assert args == {"model": str(llm.path), "dtype": "float32", "max_model_len": 256, "max_num_seqs": 4,
                    "tensor_parallel_size": 1, "enforce_eager": True, "kv_cache_memory_bytes": 64 << 20}
    # no KV-cache size: the warning sits beside that field, in this screen's words, not at the bottom
    fields["kv_cache_memory_bytes"].value = ""
    beside = _text(group.errors["kv_cache_memory_bytes"].value)
    assert "warning: no KV-cache size" in beside and "KV cache bytes sizes it" in beside, beside
    assert "kv-cache" not in _text(panel.controls["warnings"].value)
    fields["gpu_memory_utilization"].value = "0.2"
    assert app.state.settings_problems == []
    assert group.errors["kv_cache_memory_bytes"].value == ""
    args = json.loads(app.state.generated.files["1/model.json"])
    assert args == {"model": str(llm.path), "dtype": "float32", "max_model_len": 256, "max_num_seqs": 4,
                    "tensor_parallel_size": 1, "enforce_eager": True, "gpu_memory_utilization": 0.2}
    assert app.state.generated.config.backend == "vllm"


def test_errors_sit_beside_their_fields_in_this_screens_words(app, llm, tmp_path):
    fields = _choose_vllm(app, llm)
    group = app["settings"].controls["vllm"]
    fields["max_model_len"].value = "abc"
    beside = _text(group.errors["max_model_len"].value)
    assert "max_model_len: 'abc' is not a whole number" in beside
    assert app.state.generated is None and app["preview"].write() is None
    assert not (tmp_path / "model_repository" / "tiny_llm").exists()  # nothing written
    fields["max_model_len"].value = "9999"  # parses; the checks refuse it against config.json
    beside = _text(group.errors["max_model_len"].value)
    assert "max_model_len 9999 is past the model's 512 positions" in beside
    assert "--max-model-len" not in " ".join(app.state.settings_problems)  # the CLI's flag is not this screen's
    assert group.errors["tensor_parallel_size"].value == ""
    fields["max_model_len"].value = "256"
    fields["tensor_parallel_size"].value = "3"
    assert "tensor_parallel_size 3 does not divide the model's 4 attention heads" in \
        _text(group.errors["tensor_parallel_size"].value)
    assert group.errors["max_model_len"].value == ""  # gone once the field is right
    fields["tensor_parallel_size"].value = "1"
    fields["gpu_memory_utilization"].value = "0.01"
    assert "KV cache share 0.01: vLLM's CPU engine refuses shares this small" in \
        _text(group.errors["gpu_memory_utilization"].value)
    fields["gpu_memory_utilization"].value = ""
    fields["model"].value = str(tmp_path / "nowhere")
    assert f"model folder {tmp_path / 'nowhere'}: no such model folder" in _text(group.errors["model"].value)


def test_neuron_fields_follow_the_target_into_model_json(app, llm):
    fields = _choose_vllm(app, llm)
    settings, group = app["settings"].controls, app["settings"].controls["vllm"]
    fields["max_model_len"].value = "256"
    assert group.neuron_box.layout.display == "none"  # cpu: no NeuronCores
    settings["target"].value = "trn2"
    assert (group.neuron_box.layout.display, group.vllm_neuron_box.layout.display,
            group.nxdi_box.layout.display) == (None, None, "none")
    fields["max_num_seqs"].value = "4"
    fields["num_seqs_buckets"].value = "1,2"
    assert "largest bucket (2) must equal max_num_seqs (4)" in _text(group.errors["vllm_neuron"].value)
    fields["num_seqs_buckets"].value = "1,4"
    fields["core_range"].value = "0:3"
    fields["tensor_parallel_size"].value = "2"
    assert app.state.settings_problems == []
    args = json.loads(app.state.generated.files["1/model.json"])
    assert args["additional_config"] == {"neuron_config": {"num_seqs_buckets": [1, 4]}}
    assert app.state.generated.core_map.instances == 2  # 4 cores in instances of 2
    fields["lnc"].value = 1
    assert app.state.generated.config.parameters["NEURON_LOGICAL_NC_CONFIG"].string_value == "1"
    fields["lnc"].value = None
    settings["target"].value = "inf2"
    assert (group.vllm_neuron_box.layout.display, group.nxdi_box.layout.display) == ("none", None)
    # the Trn2 buckets are refused on inf2 beside their group, until emptied
    assert "are vLLM Neuron's (trn2, trn3), not --target inf2's" in _text(group.errors["vllm_neuron"].value)
    fields["num_seqs_buckets"].value = ""
    fields["enable_bucketing"].value = True
    fields["context_encoding_buckets"].value = "128,256"
    assert app.state.settings_problems == []
    args = json.loads(app.state.generated.files["1/model.json"])
    assert args["additional_config"] == {"override_neuron_config": {"enable_bucketing": True,
                                                                    "context_encoding_buckets": [128, 256]}}


def test_switching_backends_keeps_what_each_one_had(app, llm):
    settings = app["settings"]
    assert settings.settings.copy_compiled_model  # the panel's start value, which vLLM does not read
    fields = _choose_vllm(app, llm)
    fields["max_num_seqs"].value = "3"
    assert not settings.settings.copy_compiled_model and app.state.settings_problems == []
    settings.controls["backend"].value = "python"
    assert settings.settings.copy_compiled_model and settings.settings.backend_settings is None
    settings.controls["backend"].value = "vllm"
    assert settings.settings.backend_settings == VllmSettings(model=str(llm.path), **{**CPU_ENGINE, "max_num_seqs": 3})
    assert app.state.settings_problems == []


def test_a_field_that_does_not_parse_still_blocks_after_a_backend_round_trip(app, llm):
    """The switch back to vLLM hands the settings the fields' last good values; the field still
    shows its bad text, so nothing may be generated from values it does not show."""
    fields = _choose_vllm(app, llm)
    fields["max_model_len"].value = "abc"
    problem = "max_model_len: 'abc' is not a whole number"
    assert problem in app.state.settings_problems and app.state.generated is None
    app["settings"].controls["backend"].value = "python"
    app["settings"].controls["backend"].value = "vllm"
    assert problem in app.state.settings_problems and app.state.generated is None
    summary = _plain(app["settings"].controls["problems"].value)
    assert problem not in summary  # said beside its field, counted in the summary, not said twice
    fields["max_model_len"].value = "256"
    assert app.state.settings_problems == [] and app.state.generated is not None


def test_preview_shows_diffs_and_writes_model_json_that_reads_back(app, llm, tmp_path):
    fields = _choose_vllm(app, llm)
    fields["max_model_len"].value = "256"
    preview = app["preview"]
    tabs = preview.controls["tabs"]
    assert tabs.get_title(1) == "1/model.json"
    shown = _plain(preview.controls["model_py"].value)
    assert f'"model": "{llm.path}"' in shown and '"max_model_len": 256' in shown
    assert "servable here" in shown or "served here by Triton's vLLM backend" in shown
    assert 'backend: "vllm"' in preview.controls["config_text"].value
    assert preview.config_problems() == []  # no tensors: the backend's auto-complete declares them
    result = preview.write()
    model_dir = tmp_path / "model_repository" / "tiny_llm"
    assert result is not None and result.path == model_dir
    assert json.loads((model_dir / "1" / "model.json").read_text())["max_model_len"] == 256
    assert generate.load_settings(model_dir).backend_settings == app.state.settings.backend_settings
    fields["max_num_seqs"].value = "2"
    tabs.selected_index = 4  # the diff
    assert '+  "max_num_seqs": 2,' in _plain(preview.controls["diff"].value)
    assert preview.write() is None  # an existing directory: asked first, nothing replaced
    assert '"max_num_seqs": 4' in (model_dir / "1" / "model.json").read_text()  # nothing replaced
    result = preview.write(overwrite=True)
    assert result.backup is not None and json.loads((model_dir / "1" / "model.json").read_text())["max_num_seqs"] == 2


def test_ask_says_why_nothing_can_be_asked(app):
    ask = app["server"].ask
    ask.send()
    said = _text(ask.controls["error"].value)
    assert "start the server first" in said and "prompt is empty" in said
    assert ask.ops.task is None  # nothing was sent


def test_a_tiny_llm_that_cannot_be_built_stays_said_beside_the_model_folder_until_the_user_acts(
        app, tmp_path, monkeypatch):
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    monkeypatch.setenv("WORKBENCH_ZOO_CACHE", str(blocked / "zoo"))  # the zoo cannot make its cache here
    settings = app["settings"].controls
    settings["name"].value = "add_sub"  # the last model's name: choosing the tiny LLM names it tiny_llm
    settings["backend"].value = "vllm"
    group = settings["vllm"]
    fields = group.controls
    fields["model_choice"].value = TINY_LLM
    failure = "model: the zoo's tiny LLM cannot be built here"
    assert failure in _text(group.errors["model"].value) and fields["model"].value == ""
    fields["max_model_len"].value = "abc"  # another field's edit redraws every field's problems
    fields["max_model_len"].value = "256"
    settings["name"].value = "tiny_llm_2"  # and so does any change of the panel's settings
    assert failure in _text(group.errors["model"].value)
    fields["model"].value = str(tmp_path)  # the user types a folder: the failure is past
    assert failure not in _text(group.errors["model"].value)
    fields["model_choice"].value = FOLDER
    fields["model_choice"].value = TINY_LLM  # picked again, failing again: said again
    assert failure in _text(group.errors["model"].value)
    fields["model_choice"].value = FOLDER  # another choice: the failure is past
    assert failure not in _text(group.errors["model"].value)
