"""Where the launcher finds Triton's vLLM backend and the Python it runs in, and what it refuses
before Triton sees a vLLM load (no server: tests/test_vllm_served.py serves for real)."""

from __future__ import annotations

import sys
import sysconfig
from pathlib import Path
from types import SimpleNamespace

import pytest

from workbench.server.discovery import TritonNotFoundError, find_tritonserver
from workbench.server.pytorch import PyTorchBackend
from workbench.server.vllm_backend import (
    ENV_BACKEND,
    ENV_PYTHON,
    VllmBackend,
    VllmServing,
    backend_install,
    find_vllm_backend,
)


@pytest.fixture
def install(monkeypatch):
    monkeypatch.delenv(ENV_BACKEND, raising=False)
    monkeypatch.delenv(ENV_PYTHON, raising=False)
    return find_tritonserver()


def _backend_dir(root: Path, *, stub: bool = True) -> Path:
    (root / "vllm").mkdir(parents=True)
    (root / "vllm" / "model.py").write_text("# Triton's vLLM backend\n")
    if stub:
        (root / "python").mkdir()
        (root / "python" / "triton_python_backend_stub").write_text("")
    return root


def test_nothing_named_and_no_vllm_in_the_servers_backends_means_none(install):
    assert find_vllm_backend(install) is None
    assert find_vllm_backend(install, False) is None


def test_a_named_directory_or_its_vllm_folder_is_taken_and_the_python_kept_unresolved(install, tmp_path):
    root = _backend_dir(tmp_path / "backends")
    python = Path(sys.executable)
    for named in (root, root / "vllm"):
        found = find_vllm_backend(install, named, python)
        assert found == VllmBackend(root.resolve(), python.absolute(), "given")
    assert "run by" in found.describe() and str(root.resolve()) in found.describe()


def test_the_environment_names_backend_and_python(install, tmp_path, monkeypatch):
    root = _backend_dir(tmp_path / "backends")
    monkeypatch.setenv(ENV_BACKEND, str(root))
    monkeypatch.setenv(ENV_PYTHON, sys.executable)
    found = find_vllm_backend(install)
    assert found.source == f"${ENV_BACKEND}" and found.python == Path(sys.executable).absolute()


@pytest.mark.parametrize("stub, match", [(True, None), (False, "no python/triton_python_backend_stub")])
def test_a_named_directory_without_the_backend_or_stub_is_an_error(install, tmp_path, stub, match):
    if match is None:  # no vllm/model.py at all
        (tmp_path / "empty").mkdir()
        with pytest.raises(TritonNotFoundError, match="holds no vLLM backend: expected vllm/model.py"):
            find_vllm_backend(install, tmp_path / "empty")
    else:
        with pytest.raises(TritonNotFoundError, match=match):
            find_vllm_backend(install, _backend_dir(tmp_path / "b", stub=False))


def test_a_python_that_is_not_executable_is_an_error(install, tmp_path):
    root = _backend_dir(tmp_path / "backends")
    with pytest.raises(TritonNotFoundError, match="is not an executable file"):
        find_vllm_backend(install, root, tmp_path / "missing" / "python")


def test_one_backend_directory_per_server(install, tmp_path):
    vllm = find_vllm_backend(install, _backend_dir(tmp_path / "v"))
    assert backend_install(install, None, vllm).backend_dir == vllm.backend_dir
    named = PyTorchBackend(tmp_path / "libtorch", ("torchscript",), "given")
    with pytest.raises(ValueError, match="one server has one backend directory"):
        backend_install(install, named, vllm)
    assert backend_install(install, named, None) is install


def test_the_server_environment_leads_with_the_vllm_pythons_libdir_and_bin(install, tmp_path):
    backend = VllmBackend(tmp_path, Path(sys.executable), "given")
    serving = VllmServing(SimpleNamespace(), backend)
    env = serving.environment({"PATH": "/usr/bin", "LD_LIBRARY_PATH": "/opt/lib"})
    assert env["PATH"].split(":")[:2] == [str(Path(sys.executable).parent), "/usr/bin"]
    assert env["LD_LIBRARY_PATH"].split(":")[:2] == [sysconfig.get_config_var("LIBDIR"), "/opt/lib"]
    assert env["LC_ALL"] == "C.UTF-8" and env["VLLM_LOGGING_COLOR"] == "0"  # a log read as text
    assert VllmServing(SimpleNamespace(), VllmBackend(tmp_path, None, "x")).environment({}) == {
        "VLLM_LOGGING_COLOR": "0"}


def test_refusals_say_what_is_missing(tmp_path):
    assert "no vLLM backend" in VllmServing(SimpleNamespace(), None).refusals()[0]
    # this interpreter has no vLLM (the workbench's own environment need not)
    problems = VllmServing(SimpleNamespace(), VllmBackend(tmp_path, Path(sys.executable), "given")).refusals()
    assert any("vLLM does not import in" in p and "scripts/vllm_env.sh" in p for p in problems)
