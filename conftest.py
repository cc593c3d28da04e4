"""How the whole suite (tests/ and the notebooks under nbval) runs on several pytest-xdist workers
(``bash dev.sh test`` runs ``pytest -n 3 -m "not alone"``, then the ``alone`` tests in one process):

- Each test module and each notebook is one unit of work, run whole on one worker, so a module's
  shared servers and a notebook's kernel live on one worker; the modules that use an expensive
  session fixture form one unit (``SHARED_GROUPS``: the tiny LLM's vLLM engine, loaded once).
  Our own scheduler does this: xdist's ``--dist loadgroup`` marks no longer reach it under pytest
  9.2 (pytest-dev/pytest-xdist#1386), and ``loadfile`` cannot join modules.
- The units that take longest start first (``LONGEST_FIRST``), so the run does not end waiting
  on one long unit started last.
- A test marked ``alone`` (it compares times or CPU shares with a limit) is not in this pass:
  ``dev.sh test`` runs those after it, in one process, with nothing beside them.

Here, not in tests/conftest.py, because the notebooks' cells must be kept together too.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

# modules that share a costly session fixture: one unit of work each, so it is made once
SHARED_GROUPS = {
    "tests/test_streaming_vllm.py": "tiny_llm_server",
    "tests/test_llm_effort_vllm.py": "tiny_llm_server",
    "tests/test_llm_sweep_vllm.py": "tiny_llm_server",
    "tests/test_llm_runner_vllm.py": "tiny_llm_server",
    "tests/test_sweep_outcome.py": "tiny_llm_server",
}
SHARED_FIXTURES = frozenset(SHARED_GROUPS.values())

# the units that take longest, started first (the vLLM ones apart, so two engines do not load at once);
# the rest follow in collection order, so none of a minute or more is left to start last (unlisted, the
# notebooks came last). Refresh from a run's --durations when a unit grows.
LONGEST_FIRST = (  # measured serially (a loaded machine, 2026-12-06): search 662 s, python_model_neuron 632 s, ...
    "tests/test_search.py",
    "tests/test_python_model_neuron.py",
    "tiny_llm_server",
    "tests/test_python_model.py",
    "tests/test_libtorch_backend.py",
    "tests/browser/test_notebooks_clean.py",
    "tests/test_resume.py",
    "tests/test_generate_properties.py",
    "tests/test_vllm_served.py",
    "tests/test_pytorch_backend.py",
    "tests/browser/test_lab.py",
    "tests/test_sweep.py",
    "tests/browser/test_vllm_app.py",
    "notebooks/06-core-allocations.ipynb",
    "tests/test_generate_vllm.py",
    "tests/test_install_resolves.py",
    "notebooks/08-pytorch-backend.ipynb",
    "tests/test_tutorial.py",
    "notebooks/09-llm-vllm.ipynb",
    "notebooks/07-compare-runs.ipynb",
)


def group_of(nodeid: str) -> str:
    """The unit of work of a test: its module's shared group, else its module (or notebook)."""
    module = nodeid.split("::", 1)[0]
    return SHARED_GROUPS.get(module, module)


@pytest.hookimpl(optionalhook=True)  # an xdist hook: absent without xdist
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    from xdist.scheduler import LoadScopeScheduling

    class ModuleGroupScheduling(LoadScopeScheduling):
        """xdist's scope scheduling with ``group_of`` as the scope, in collection order."""

        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid)

    if config.getoption("dist") == "each":
        return None
    config.option.loadscopereorder = False  # the order is ours: longest first
    return ModuleGroupScheduling(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    modules = {
        item.nodeid.split("::", 1)[0] for item in items if SHARED_FIXTURES & set(getattr(item, "fixturenames", ()))
    }
    unlisted = sorted(module for module in modules if module not in SHARED_GROUPS)
    if unlisted:
        raise pytest.UsageError(
            f"{', '.join(unlisted)} use a shared session fixture: add them to SHARED_GROUPS "
            "in conftest.py, so they run on the worker that holds it"
        )
    if os.environ.get("PYTEST_XDIST_WORKER"):  # every worker sorts alike: the scheduler takes this order
        rank = {name: place for place, name in enumerate(LONGEST_FIRST)}
        items.sort(key=lambda item: rank.get(group_of(item.nodeid), len(rank)))  # stable
