"""Files a user hands over that are not what they seem (issue 32): a config.pbtxt that is not UTF-8
is one line naming it on every screen that reads it; a push never copies what a symlink or a
relative COMPILED_MODEL reaches outside the model folder."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from workbench.cli import main
from workbench.generate import read_back
from workbench.generate.config import ConfigError, parameters_of, read_config
from workbench.generate.push import PushError, push_repository


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, generate_cpu_model) -> Path:
    return generate_cpu_model(tmp_path_factory.mktemp("untrusted"))


@pytest.fixture
def latin1(model_dir, tmp_path) -> Path:
    bad = tmp_path / "repo" / "add_sub"
    shutil.copytree(model_dir, bad)
    with open(bad / "config.pbtxt", "ab") as handle:
        handle.write(b"# caf\xe9 au lait\n")
    return bad


def test_a_config_that_is_not_utf8_is_one_line_naming_it_everywhere(latin1, tmp_path, capsys):
    where = str(latin1 / "config.pbtxt")
    for call in (read_config, read_back):
        with pytest.raises(ConfigError, match="not UTF-8 text .*save it as UTF-8") as err:
            call(latin1)
        assert where in str(err.value) and len(str(err.value).splitlines()) == 1
    for argv in (["remote", "127.0.0.1:1", "push", str(latin1), str(tmp_path / "dest")],
                 ["remote", "127.0.0.1:1", "--timeout", "1", "check", str(latin1)],
                 ["sweep", str(latin1), "--out", str(tmp_path / "run"), "--engine", "workbench"],
                 ["deploy", str(latin1), "--out", str(tmp_path / "host")]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "config.pbtxt: not UTF-8 text" in err and "Traceback" not in err, err
    assert not any((tmp_path / name).exists() for name in ("dest", "run", "host"))


def test_a_push_refuses_symlinks_leaving_the_model_folder(model_dir, tmp_path):
    source = tmp_path / "src" / "add_sub"
    shutil.copytree(model_dir, source)
    secret = tmp_path / "secret.txt"
    secret.write_text("not part of the model")
    os.symlink(secret, source / "1" / "notes.txt")
    with pytest.raises(PushError, match=r"add_sub/1/notes.txt is a symlink to .*secret.txt, outside the model"):
        push_repository(source, tmp_path / "dest")
    assert not (tmp_path / "dest").exists()
    (source / "1" / "notes.txt").unlink()
    os.symlink("../config.pbtxt", source / "1" / "inside.pbtxt")  # a link that stays inside is copied
    (pushed,) = push_repository(source, tmp_path / "dest")
    assert (pushed.path / "1" / "inside.pbtxt").read_bytes() == (source / "config.pbtxt").read_bytes()


def test_a_push_refuses_a_relative_compiled_model_climbing_out(model_dir, tmp_path):
    source = tmp_path / "src" / "add_sub"
    shutil.copytree(model_dir, source)
    text = (source / "config.pbtxt").read_text()
    compiled = parameters_of(read_config(source))["COMPILED_MODEL"]
    (source / "config.pbtxt").write_text(text.replace(f'"{compiled}"', '"../../elsewhere/model.pt"'))
    with pytest.raises(PushError, match="COMPILED_MODEL ../../elsewhere/model.pt lies outside the model directory"):
        push_repository(source, tmp_path / "dest")
    assert not (tmp_path / "dest").exists()


def test_a_config_that_is_a_link_or_a_fifo_is_refused_not_followed(model_dir, tmp_path):
    """config.pbtxt is read only as a regular file of its own: a symlink (to any file) is not followed
    and a FIFO does not hang the reader; each is one line naming the file."""
    import os

    linked = tmp_path / "linked" / "add_sub"
    shutil.copytree(model_dir, linked)
    target = tmp_path / "elsewhere.pbtxt"
    (linked / "config.pbtxt").rename(target)
    (linked / "config.pbtxt").symlink_to(target)
    with pytest.raises(ConfigError, match="config.pbtxt: is a symbolic link") as err:
        read_config(linked)
    assert len(str(err.value).splitlines()) == 1
    piped = tmp_path / "piped" / "add_sub"
    shutil.copytree(model_dir, piped)
    (piped / "config.pbtxt").unlink()
    os.mkfifo(piped / "config.pbtxt")
    with pytest.raises(ConfigError, match="no such config file|is a FIFO"):
        read_config(piped)
