"""environment.yml (conda users) and binder/ (mybinder.org) install what pyproject.toml declares.

Three lists of the same dependencies drift apart silently; this test is what keeps them equal.
"""

import os
import tomllib
from pathlib import Path

import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

ROOT = Path(__file__).resolve().parents[1]
CPU_INDEX = "--extra-index-url https://download.pytorch.org/whl/cpu"


def _normalised(requirements):
    """Name -> (extras, specifier); torch apart: the environments pin its CPU build (_check_torch). A name listed
    twice (numpy: the core's floor, the local-server extra's cap) counts as the two specifiers together."""
    out = {}
    for text in requirements:
        req = Requirement(text)
        if req.name == "torch":
            continue
        name = req.name.lower().replace("_", "-")
        extras, specifier = out.get(name, (frozenset(), SpecifierSet()))
        out[name] = (extras | frozenset(req.extras), specifier & req.specifier)
    return out


def _declared(*extras):
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return _normalised(project["dependencies"] + [r for e in extras for r in project["optional-dependencies"][e]])


def _pip_section(path):
    env = yaml.safe_load(path.read_text())
    deps = env["dependencies"]
    assert "pip" in deps, f"{path}: list pip before its pip: section"
    python = [d for d in deps if isinstance(d, str) and d.startswith("python=")]
    assert python == ["python=3.11"], f"{path}: pin python=3.11 (the version the Triton stub is built for)"
    (pip,) = [d["pip"] for d in deps if isinstance(d, dict)]
    return [p for p in pip if not p.startswith("-")], pip


def _check_torch(path, reqs):
    """Every torch line pins a version pyproject.toml allows; on x86_64 Linux the +cpu build."""
    declared = Requirement(next(d for d in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
                                ["dependencies"] if d.startswith("torch")))
    torch = [Requirement(r) for r in reqs if Requirement(r).name == "torch"]
    linux = {"sys_platform": "linux", "platform_machine": "x86_64"}
    on_linux = [r for r in torch if r.marker is None or r.marker.evaluate(linux)]
    assert len(on_linux) == 1, f"{path}: one torch requirement for x86_64 Linux"
    (pin,) = on_linux[0].specifier
    assert pin.operator == "==" and pin.version.endswith("+cpu"), f"{path}: pin torch's CPU build on x86_64 Linux"
    assert declared.specifier.contains(pin.version), f"{path}: {pin} outside pyproject's {declared}"


def test_environment_yml_matches_pyproject():
    reqs, pip = _pip_section(ROOT / "environment.yml")
    # the CPU path: the core and the bundled local tritonserver
    assert _normalised(reqs) == _declared("local-server")
    _check_torch("environment.yml", reqs)
    assert "-e ." in pip, "environment.yml must install the workbench itself"
    assert CPU_INDEX in pip, "environment.yml must offer PyTorch's CPU build (PyPI's torch is CUDA on x86_64 Linux)"


def test_binder_environment_matches_pyproject_and_installs_the_package():
    reqs, pip = _pip_section(ROOT / "binder" / "environment.yml")
    # what `bash dev.sh lab` installs: the local server and the tutorials' transformers extra (notebooks 05 and 09
    # build tiny LLMs)
    assert _normalised(reqs) == _declared("local-server", "transformers")
    _check_torch("binder/environment.yml", reqs)
    assert CPU_INDEX in pip, "Binder must get PyTorch's CPU build (PyPI's torch is CUDA on x86_64 Linux)"
    post_build = (ROOT / "binder" / "postBuild").read_text()
    assert "pip install" in post_build and "set -e" in post_build
    assert os.access(ROOT / "binder" / "postBuild", os.X_OK)
    start = (ROOT / "binder" / "start").read_text()
    assert 'exec "$@"' in start and os.access(ROOT / "binder" / "start", os.X_OK)
    assert not (ROOT / ".binder").exists(), "repo2docker refuses a repository with both binder/ and .binder/"


def test_readme_gives_the_two_commands_and_ci_runs_the_test_one():
    readme = (ROOT / "README.md").read_text()
    assert "bash dev.sh lab" in readme and "bash dev.sh test" in readme
    assert "bash dev.sh test" in (ROOT / ".ci" / "run").read_text()


def test_the_core_leaves_numpy_open_and_the_local_server_is_an_extra_dev_sh_installs():
    """The core installs beside numpy 2 (Python 3.13-3.14 have no numpy 1 wheels); the bundled server, whose
    wheel caps numpy below 2, is the local-server extra, and both dev.sh commands install it."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core = {Requirement(r).name: Requirement(r) for r in project["dependencies"]}
    assert "nvidia-pytriton" not in core
    assert core["numpy"].specifier.contains("2.0.0") and core["numpy"].specifier.contains("2.3.0")
    server = {Requirement(r).name: Requirement(r) for r in project["optional-dependencies"]["local-server"]}
    assert set(server) == {"nvidia-pytriton", "numpy"} and not server["numpy"].specifier.contains("2.0.0")
    dev_sh = (ROOT / "dev.sh").read_text()
    assert 'extras="test,local-server"' in dev_sh and 'extras="transformers,local-server"' in dev_sh
