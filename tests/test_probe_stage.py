"""What a hostile but realistic probe of this stage's additions found (issue 32's last paragraph;
docs/probes/stage-llm.md lists every case tried): each finding fixed at its root, with the test that
would have caught it. vLLM settings and model.json, the run report, the run folder's lock."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from workbench.cli import main
from workbench.generate import read_back, render
from workbench.generate.config import ConfigError
from workbench.generate.settings import GenerateError
from workbench.measure.sweep.lock import LOCK_FILE, RunFolderLock
from workbench.measure.sweep.run import SweepError

from test_generate_vllm import model, settings  # noqa: F401 - the fixture and the settings maker
from test_results import KNOWN, save_run


@pytest.mark.parametrize("flag, value", [("--max-num-seqs", "99999999999999999999"),
                                         ("--max-num-batched-tokens", "4294967296"),
                                         ("--kv-cache-memory-bytes", str(2 ** 64))])
def test_vllm_counts_past_what_vllm_holds_are_refused(model, tmp_path, capsys, flag, value):  # noqa: F811
    out = tmp_path / "repo" / "llm"
    code = main(["generate", "--backend", "vllm", "--target", "cpu", "--compiled_model", str(model),
                 "--triton_model_dir", str(out), flag, value])
    err = capsys.readouterr().err
    assert code == 2 and f"{flag} {value}: give a whole number from 1 to" in err
    assert len(err.strip().splitlines()) == 1 and not out.exists()


@pytest.mark.parametrize("arg", ["seed=NaN", 'additional_config={"x": Infinity}'])
def test_an_engine_argument_json_cannot_write_is_refused(model, tmp_path, capsys, arg):  # noqa: F811
    out = tmp_path / "repo" / "llm"
    code = main(["generate", "--backend", "vllm", "--target", "cpu", "--compiled_model", str(model),
                 "--triton_model_dir", str(out), "--engine-arg", arg])
    err = capsys.readouterr().err
    assert code == 2 and "is not a JSON number" in err and not out.exists()


def test_nan_given_through_the_api_is_refused_before_model_json(model, tmp_path):  # noqa: F811
    with pytest.raises(GenerateError, match="--engine-arg seed: NaN and infinities are not JSON"):
        render(settings(model, tmp_path, extra_engine_args={"seed": float("nan")}))


def test_a_hand_edited_model_json_with_nan_is_named_on_read_back(model, tmp_path):  # noqa: F811
    from workbench.generate import write

    generated = render(settings(model, tmp_path))
    write(generated)
    model_json = Path(generated.settings.triton_model_dir) / "1" / "model.json"
    args = json.loads(model_json.read_text())
    model_json.write_text(json.dumps({**args, "seed": float("nan")}))  # Python writes NaN; JSON has none
    with pytest.raises(ConfigError, match=r"model\.json: not JSON: NaN is not a JSON number"):
        read_back(generated.settings.triton_model_dir)


def test_a_report_escapes_what_a_run_folder_says(tmp_path):
    run = save_run(tmp_path / "evil", KNOWN[:2], label="<script>alert(1)</script>",
                   model='m"><img src=x onerror=alert(2)>')
    assert main(["report", str(run)]) == 0
    text = (run / "report.html").read_text()
    assert "<script>alert(1)" not in text and "<img src=x" not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text


def test_a_report_to_a_folder_is_one_line_naming_it(tmp_path, capsys):
    run = save_run(tmp_path / "run", KNOWN[:2], label="run")
    (tmp_path / "taken").mkdir()
    assert main(["report", str(run), "--out", str(tmp_path / "taken")]) == 2
    err = capsys.readouterr().err
    assert err.strip() == f"workbench report: error: cannot write the report to {tmp_path / 'taken'}: Is a directory"
    assert sorted(p.name for p in (tmp_path / "taken").iterdir()) == []


def test_a_folder_where_the_lock_file_belongs_is_a_sentence(tmp_path):
    (tmp_path / "run" / LOCK_FILE).mkdir(parents=True)
    with pytest.raises(SweepError, match=r"cannot take the lock .*\.sweep\.lock of the run folder: it is a folder, not a regular file"):
        with RunFolderLock(tmp_path / "run"):
            pass
