"""The parallel layout of the suite (the root conftest.py): a notebook's cells and a module's tests
stay one unit of work, the modules sharing the vLLM engine one unit, the named long units exist,
and the ``alone`` tests run after the rest, in one process."""

from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("suite_layout", ROOT / "conftest.py")
layout = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(layout)


def test_cells_and_tests_of_one_file_are_one_unit_and_shared_modules_join():
    assert layout.group_of("notebooks/01-quickstart.ipynb::Cell 3") == "notebooks/01-quickstart.ipynb"
    assert layout.group_of("tests/test_sweep.py::test_x[grpc-1]") == "tests/test_sweep.py"
    assert {layout.group_of(f"{module}::test_x") for module in layout.SHARED_GROUPS} == {"tiny_llm_server"}


def test_every_unit_named_first_exists():
    for unit in layout.LONGEST_FIRST:
        assert unit in layout.SHARED_GROUPS.values() or (ROOT / unit).is_file(), unit
    for module in layout.SHARED_GROUPS:
        assert (ROOT / module).is_file(), module


def test_the_alone_tests_run_in_a_pass_of_their_own_after_the_rest():
    """dev.sh test (the README's command) runs every test but the ``alone`` ones on workers, then
    those in one process: nothing runs beside a test that compares times."""
    passes = [line.strip() for line in (ROOT / "dev.sh").read_text().splitlines() if '-m pytest' in line]
    assert len(passes) == 2, passes
    assert '-n "${WORKBENCH_TEST_WORKERS:-3}" -m "${marks}not alone"' in passes[0]
    assert '-n 0 -m "${marks}alone"' in passes[1]


def test_a_mark_given_to_dev_sh_test_narrows_both_passes(tmp_path):
    """``bash dev.sh test -m "not browser"`` (the README's offline run) keeps each pass's own mark:
    dev.sh's argument loop, run with pytest replaced by an echo."""
    script = (ROOT / "dev.sh").read_text()
    loop = script[script.index('    marks="" args=()'):script.index('    [[ $status == 5 ]]')]
    fake = tmp_path / "passes.sh"
    fake.write_text("set -euo pipefail\nunset WORKBENCH_TEST_WORKERS\n" + loop.replace('"$py" -m pytest', "echo pytest"))
    shown = subprocess.run(["bash", str(fake), "-m", "not browser", "tests/x.py", "-k", "y"],
                           capture_output=True, text=True, check=True).stdout.splitlines()
    assert shown == ['pytest -n 3 -m (not browser) and not alone --durations=25 tests/x.py -k y',
                     'pytest -n 0 -m (not browser) and alone --durations=25 tests/x.py -k y']
    bare = subprocess.run(["bash", str(fake)], capture_output=True, text=True, check=True).stdout.splitlines()
    assert bare == ["pytest -n 3 -m not alone --durations=25", "pytest -n 0 -m alone --durations=25"]
