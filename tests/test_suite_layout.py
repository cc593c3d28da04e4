"""The parallel layout of the suite (the root conftest.py): a notebook's cells and a module's tests
stay one unit of work, the modules sharing the vLLM engine one unit, the named long units exist,
and an ``alone`` test's exclusive turn waits for the tests running and holds off new ones."""

from __future__ import annotations

import importlib.util
import threading
import time
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


def test_an_alone_turn_waits_for_running_tests_and_holds_off_new_ones(tmp_path):
    running, waiting, newcomer = (layout._Turns(tmp_path) for _ in range(3))  # one per worker
    events: list[str] = []

    def alone():
        with waiting.held(alone=True):
            events.append("alone starts")
            time.sleep(0.3)
            events.append("alone ends")

    def late():
        with newcomer.held(alone=False):
            events.append("newcomer runs")

    with running.held(alone=False):
        first = threading.Thread(target=alone)
        first.start()
        time.sleep(0.3)  # the alone test is queued behind the running one
        second = threading.Thread(target=late)
        second.start()
        time.sleep(0.3)
        assert events == []  # neither runs beside the test still running
    first.join(10)
    second.join(10)
    assert events == ["alone starts", "alone ends", "newcomer runs"]
