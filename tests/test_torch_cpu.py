"""The set-up installs PyTorch's CPU build: pip's own resolution report says so.

dev.sh asks scripts/pip_torch.sh for its torch arguments; here a throwaway venv (never the project's) asks the
same script and then `pip install --dry-run --report` with them, so nothing is installed and the report is pip's
own word on which torch a fresh clone would get on this machine. Binder's and conda's environment.yml offer the
CPU index beside `torch>=2.1`; pip's report on that pair is checked too (an unreachable index only warns).
"""

import json
import os
import platform
import subprocess
import sys
import venv
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "pip_torch.sh"

pytestmark = pytest.mark.skipif(
    sys.platform != "linux" or platform.machine() != "x86_64",
    reason="PyPI's torch is a CUDA build only on x86_64 Linux; elsewhere plain torch is the CPU build",
)


@pytest.fixture(scope="module")
def fresh_python(tmp_path_factory):
    """A venv with pip and nothing else, as dev.sh makes on a fresh clone."""
    where = tmp_path_factory.mktemp("fresh-venv")
    venv.create(where, with_pip=True)
    return str(where / "bin" / "python")


def _torch_in_report(python, args, tmp_path):
    report = tmp_path / "report.json"
    done = subprocess.run(
        [python, "-m", "pip", "install", "--dry-run", "--no-deps", "--ignore-installed", "--retries", "0",
         "--timeout", "10", "--quiet", "--report", str(report), *args],
        capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    (torch,) = [item for item in json.loads(report.read_text())["install"] if item["metadata"]["name"] == "torch"]
    return torch["metadata"]["version"], torch["download_info"]["url"]


def test_dev_sh_resolves_torch_to_the_cpu_build(fresh_python, tmp_path):
    done = subprocess.run(["bash", str(SCRIPT), fresh_python], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    args = done.stdout.split("\n")[:-1]
    assert args[0].startswith("torch==") and args[0].endswith("+cpu"), args
    version, url = _torch_in_report(fresh_python, args, tmp_path)
    print(f"pip --dry-run --report: torch {version} from {url}")  # the CI log's proof
    assert version.endswith("+cpu"), (version, url)


@pytest.mark.parametrize("path", ["environment.yml", "binder/environment.yml"])
def test_environment_yml_resolves_torch_to_the_cpu_build(fresh_python, tmp_path, path):
    pip = next(d["pip"] for d in yaml.safe_load((ROOT / path).read_text())["dependencies"] if isinstance(d, dict))
    index = next(line for line in pip if line.startswith("--extra-index-url")).split()
    torch = [line for line in pip if line.startswith("torch")]
    version, url = _torch_in_report(fresh_python, [*index, *torch], tmp_path)
    assert version.endswith("+cpu"), (version, url)


def test_without_the_cpu_wheel_anywhere_it_stops_with_what_to_do(fresh_python, tmp_path):
    empty = tmp_path / "empty-index"
    empty.mkdir()
    env = {**os.environ, "PIP_CONFIG_FILE": os.devnull, "PIP_INDEX_URL": empty.as_uri(), "PIP_FIND_LINKS": "",
           "WORKBENCH_TORCH_INDEX": empty.as_uri()}
    done = subprocess.run(["bash", str(SCRIPT), fresh_python], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 1 and done.stdout == ""
    assert "cannot reach PyTorch's CPU wheels" in done.stderr and "WORKBENCH_TORCH_INDEX" in done.stderr
