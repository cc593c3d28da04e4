"""pyproject.toml's dependency sets resolve, with pip against PyPI, for the Pythons the workbench supports.

A pin that strands a supported Python (``numpy<2`` on 3.14, where numpy 1 has no wheel) fails here rather
than on a user's Neuron container. What is resolved, for manylinux x86_64 wheels only:
  * the core's dependencies on Python 3.12 and 3.14 (3.12: the Triton 26.x / Ubuntu 24.04 Python; 3.14: the
    Neuron 2.33+ containers' Python, docs/install-matrix.md);
  * the core with the local-server extra on 3.11 and 3.12 (the Pythons dev.sh, Binder and CI use and that
    nvidia-pytriton's numpy<2 still has wheels for).

torch is checked apart, honestly narrower: the workbench installs PyTorch's CPU build (download.pytorch.org/whl/cpu),
which is published under the same release numbers and Python tags as PyPI's torch but is not on PyPI; PyPI's
Linux torch is the CUDA build, whose nvidia-* dependencies (about 3 GB, which pip's dry run downloads) the CPU
build does not have. So for torch the test asks pip which releases have a wheel for that Python and platform
(``pip index versions``, no download) and requires one inside pyproject's range, and on 3.11/3.12 the exact
release dev.sh, Binder and environment.yml pin. The CPU index itself is not reachable from every lab; CI has PyPI.

Needs the network to PyPI (``$WORKBENCH_RESOLVE_INDEX`` overrides the index); skips with the reason without it.
pip's configuration files are ignored so a local wheel mirror or constraint cannot stand in for the registry.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
INDEX = os.environ.get("WORKBENCH_RESOLVE_INDEX", "https://pypi.org/simple")
# pip takes --platform tags literally (no expansion to older glibc), so list the manylinux range: glibc 2.17 up to
# Ubuntu 24.04's 2.39 (the Triton 26.x image; nvidia-pytriton's wheel is manylinux_2_35)
PLATFORMS = [f"manylinux_2_{minor}_x86_64" for minor in range(39, 16, -1)] + ["manylinux2014_x86_64", "linux_x86_64"]
# (label, Python, extras): what the module docstring promises
CASES = [("core", "3.12", ()), ("core", "3.14", ()), ("local-server", "3.11", ("local-server",)),
         ("local-server", "3.12", ("local-server",))]


def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _requirements(extras: tuple[str, ...]) -> list[Requirement]:
    project = _project()
    texts = project["dependencies"] + [r for e in extras for r in project["optional-dependencies"][e]]
    return [Requirement(t) for t in texts]


def _pip_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PIP_FIND_LINKS", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_CONSTRAINT", "PIP_NO_INDEX")}
    env["PIP_CONFIG_FILE"] = os.devnull  # the lab's mirror and constraints are not the registry
    return env


def _target_args(python: str) -> list[str]:
    return ["--python-version", python, "--only-binary=:all:", "--implementation", "cp",
            *[arg for p in PLATFORMS for arg in ("--platform", p)], "--index-url", INDEX]


@cache
def _index_unreachable() -> str | None:
    try:
        with urllib.request.urlopen(f"{INDEX.rstrip('/')}/pip/", timeout=15) as reply:
            reply.read(1)
    except OSError as err:
        return f"the package index {INDEX} is not reachable ({err}); CI has PyPI"
    return None


def _resolve(python: str, requirements: list[Requirement], workdir: Path) -> dict[str, str]:
    """name -> version pip would install for ``python`` (dry run, nothing installed); the failure is pip's own."""
    report = workdir / f"report-{python}.json"
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
         "--target", str(workdir / f"target-{python}"), "--report", str(report),
         *_target_args(python), *map(str, requirements)],
        env=_pip_env(), capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, f"Python {python}: pip cannot resolve {' '.join(map(str, requirements))}:\n" \
        + "\n".join(done.stderr.strip().splitlines()[-12:])
    return {canonicalize_name(item["metadata"]["name"]): item["metadata"]["version"]
            for item in json.loads(report.read_text())["install"]}


def _torch_wheels(python: str) -> list[Version]:
    done = subprocess.run([sys.executable, "-m", "pip", "index", "versions", "torch", *_target_args(python)],
                          env=_pip_env(), capture_output=True, text=True, timeout=120, check=False)
    found = re.search(r"^Available versions: (.+)$", done.stdout, re.MULTILINE)
    assert done.returncode == 0 and found, f"Python {python}: pip lists no torch wheel:\n{done.stderr.strip()}"
    return [Version(v) for v in found.group(1).split(", ")]


def _environment_torch_pins() -> set[Version]:
    """The torch release the CPU-path environments pin (their +cpu build), one fact across the three files."""
    pins = set()
    for path in (ROOT / "environment.yml", ROOT / "binder" / "environment.yml"):
        (pip,) = [d["pip"] for d in yaml.safe_load(path.read_text())["dependencies"] if isinstance(d, dict)]
        for line in pip:
            if not line.startswith("-") and Requirement(line).name == "torch":
                pins |= {Version(s.version).public for s in Requirement(line).specifier if s.operator == "=="}
    dev_default = re.search(r"version=\$\{WORKBENCH_TORCH:-([0-9.]+)\}", (ROOT / "scripts" / "pip_torch.sh").read_text())
    assert dev_default, "scripts/pip_torch.sh names its default torch release"
    return {Version(str(v)) for v in pins} | {Version(dev_default.group(1))}


@pytest.fixture(scope="module")
def resolved(tmp_path_factory):
    """Every case resolved at once (pip waits on the network, not the CPU): (label, python) -> result or error."""
    if reason := _index_unreachable():
        pytest.skip(reason)
    workdir = tmp_path_factory.mktemp("resolve")

    def one(case):
        label, python, extras = case
        reqs = [r for r in _requirements(extras) if r.name != "torch"]
        try:
            return (label, python), (_resolve(python, reqs, workdir / label), _torch_wheels(python))
        except AssertionError as err:
            return (label, python), err

    (workdir / "core").mkdir()
    (workdir / "local-server").mkdir()
    with ThreadPoolExecutor(len(CASES)) as pool:
        return dict(pool.map(one, CASES))


def _case(resolved, label, python):
    result = resolved[(label, python)]
    if isinstance(result, AssertionError):
        raise result
    return result


@pytest.mark.parametrize("python", ["3.12", "3.14"])
def test_the_core_resolves_with_numpy_2(resolved, python):
    packages, torch_wheels = _case(resolved, "core", python)
    assert "nvidia-pytriton" not in packages, "the core must not pull the local server (it caps numpy below 2)"
    assert Version(packages["numpy"]).major >= 2, f"Python {python}: pip chose numpy {packages['numpy']}"
    for req in _requirements(()):
        if req.name != "torch":
            chosen = packages[canonicalize_name(req.name)]
            assert req.specifier.contains(chosen, prereleases=True), f"Python {python}: pip chose {req.name} {chosen}"
    (torch_req,) = [r for r in _requirements(()) if r.name == "torch"]
    assert any(torch_req.specifier.contains(v) for v in torch_wheels), \
        f"Python {python}: no torch wheel in {torch_req.specifier} (PyPI has {sorted(map(str, torch_wheels))})"


@pytest.mark.parametrize("python", ["3.11", "3.12"])
def test_the_local_server_extra_resolves_with_the_pinned_cpu_torch_release(resolved, python):
    packages, torch_wheels = _case(resolved, "local-server", python)
    assert "nvidia-pytriton" in packages
    # the wheel's stub serves wrong numbers under numpy 2 (tests/test_local_server.py): its cap must hold
    assert Version(packages["numpy"]).major == 1, f"Python {python}: the local server got numpy {packages['numpy']}"
    missing = _environment_torch_pins() - set(torch_wheels)
    assert not missing, f"Python {python}: no torch {sorted(map(str, missing))} wheel (the CPU path pins it)"
