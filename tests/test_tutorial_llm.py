"""workbench.tutorial.llm, notebook 09's steps: finding what serves a vLLM model here (and saying
what is missing), the tiny LLM's settings per target, the model.json table with its sources, the
answers table; and notebook 09 run for real on a machine without the vLLM environment, where its
serving cells must say so and skip (what a Binder user meets).

The served path itself runs under nbval (``pytest notebooks/09-llm-vllm.ipynb``) and in
test_vllm_served.py / test_streaming_vllm.py.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import nbformat
import pytest

from workbench.served_generation import GenerationCheck, GenerationRow
from workbench.generate import read_back, render, write
from workbench.generate.vllm_backend.engine_settings import NEURON_KEY_SOURCES
from workbench.server.vllm_backend import ENV_PYTHON
from workbench.tutorial import llm as tutorial_llm

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "09-llm-vllm.ipynb"


@pytest.fixture
def folder(tmp_path) -> Path:
    """A Hugging Face folder shaped like the tiny LLM: 4 heads, 2 KV heads, 512 positions, a tokenizer file."""
    folder = tmp_path / "llm"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "num_attention_heads": 4,
                                                    "num_key_value_heads": 2, "max_position_embeddings": 512}))
    (folder / "tokenizer.json").write_text("{}")
    return folder


def test_without_a_vllm_environment_it_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV_PYTHON, str(tmp_path / "missing" / "python"))
    here = tutorial_llm.vllm_here(shared=tmp_path)
    assert not here.ready and here.python is None
    assert here.message.startswith(f"not served here: the vLLM environment ${ENV_PYTHON} names, ")
    assert str(tmp_path / "missing" / "python") in here.message and "scripts/vllm_env.sh" in here.message


def test_without_the_shared_script_it_names_the_script(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV_PYTHON, sys.executable)
    here = tutorial_llm.vllm_here(shared=tmp_path)
    assert not here.ready and here.backend_dir is None and here.python is not None
    assert f"{tmp_path / 'tools' / 'vllm_backend_here.sh'} is absent" in here.reason


def test_a_failing_shared_script_is_an_error_with_its_words(tmp_path):
    script = tmp_path / "vllm_backend_here.sh"
    script.write_text("echo 'no nvidia-pytriton here' >&2; exit 2\n")
    with pytest.raises(RuntimeError, match="failed \\(2\\): no nvidia-pytriton here"):
        tutorial_llm.assemble_vllm_backend(script, sys.executable)


def test_the_three_targets_render_and_read_back(folder, tmp_path):
    for target, instances in (("cpu", 1), ("trn2", 2), ("inf2", 2)):
        generated = render(tutorial_llm.tiny_llm_settings(folder, tmp_path / target, target))
        assert set(generated.files) == {"config.pbtxt", "1/model.json"} and not generated.settings.for_other_machine
        assert generated.config.backend == "vllm" and generated.config.instance_group[0].count == instances
        write(generated)
        assert render(read_back(generated.dest).settings).files == generated.files
    cpu = read_back(tmp_path / "cpu" / "tiny_llm").settings
    assert cpu.parameters["REPORT_CUSTOM_METRICS"] in ("true", True)
    with pytest.raises(ValueError, match="cpu, trn2 and inf2"):
        tutorial_llm.tiny_llm_settings(folder, tmp_path, "inf1")


def test_the_engine_args_table_shows_what_differs_with_sources(folder, tmp_path):
    dirs = {}
    for target in ("cpu", "trn2", "inf2"):
        generated = render(tutorial_llm.tiny_llm_settings(folder, tmp_path / target, target))
        dirs[target] = write(generated).path
    table = tutorial_llm.engine_args_table(dirs)
    assert "model" not in table.index and "max_model_len" not in table.index  # the same everywhere
    assert table.loc["dtype", ["cpu", "trn2", "inf2"]].tolist() == ["float32", "bfloat16", "bfloat16"]
    assert table.loc["additional_config.neuron_config.num_seqs_buckets", "trn2"] == "[1, 2, 4]"
    assert table.loc["additional_config.neuron_config.num_seqs_buckets", "inf2"] == ""
    neuron_rows = [key for key in table.index if key.startswith("additional_config.")]
    assert len(neuron_rows) == len(NEURON_KEY_SOURCES)
    for key in neuron_rows:
        assert table.loc[key, "source"] == NEURON_KEY_SOURCES[tuple(key.split(".")[-2:])]
    assert set(table.loc[[k for k in table.index if k not in neuron_rows], "source"]) == {""}
    everything = tutorial_llm.engine_args_table(dirs, only_differences=False, hide=())
    assert everything.loc["model", "cpu"] == str(folder) and "max_model_len" in everything.index


def test_the_answers_table_decodes_with_the_models_tokenizer():
    pytest.importorskip("transformers", reason="the tiny LLM is built with transformers")
    from transformers import AutoTokenizer
    from workbench import zoo

    llm = zoo.tiny_llm()
    ids = tuple(AutoTokenizer.from_pretrained(str(llm.path)).encode("the quiet dog", add_special_tokens=False))
    check = GenerationCheck("tiny_llm", [GenerationRow("p", "http", ids, ids),
                                         GenerationRow("p", "grpc_stream", ids, ids[:-1] + (ids[-1] + 1,))])
    table = tutorial_llm.answers_table(check, llm.path)
    assert table["answer"].tolist() == ["the quiet dog"] * 2
    assert table["equal to offline"].tolist() == [True, False] and table["tokens"].tolist() == [len(ids)] * 2


@pytest.mark.timeout(300)
def test_the_notebook_runs_without_the_vllm_environment_and_says_why(tmp_path, monkeypatch):
    """Every cell of notebook 09 runs in a real kernel where the vLLM environment is absent; the
    serving cells print why they skip and start no server."""
    pytest.importorskip("transformers", reason="the tiny LLM is built with transformers")
    from nbclient import NotebookClient

    missing = tmp_path / "no-vllm" / "bin" / "python"
    monkeypatch.setenv(ENV_PYTHON, str(missing))
    monkeypatch.setenv("WORKBENCH_RUNS_DIR", str(tmp_path / "runs"))
    book = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(book, timeout=240, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    printed = "\n".join(o.get("text", "") for c in book.cells if c.cell_type == "code" for o in c.outputs)
    assert f"not served here: the vLLM environment ${ENV_PYTHON} names, {missing}, does not exist" in printed
    assert "server running: False" in printed and "served greedy tokens" not in printed
    assert "additional_config.override_neuron_config.token_generation_buckets" in printed  # Neuron part still ran
    assert (tmp_path / "runs" / "09-llm-vllm").is_dir()


def test_the_engine_args_text_footnotes_its_sources_so_columns_stay_aligned(folder, tmp_path):
    """Issue 43 item 12: notebook 09's engine-arguments table printed 250-character lines (a page
    address per row) that wrapped and lost their columns; the sources are footnotes now."""
    dirs = {target: tutorial_llm.tiny_llm_settings(folder, tmp_path / target, target) for target in ("cpu", "trn2")}
    written = {}
    for target, settings in dirs.items():
        model = render(settings)
        write(model)
        written[target] = model.dest
    table = tutorial_llm.engine_args_table(written)
    text = tutorial_llm.engine_args_text(table)
    assert max(len(line) for line in text.splitlines() if not line.startswith("[")) <= 130
    for page in set(table["source"]) - {""}:
        assert f"] {page}" in text
