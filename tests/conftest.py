"""Shared pytest fixtures.

``triton_server`` / ``triton_server_module`` are factories: call them with a model repository
(and any TritonServer keyword) to get a started server that is stopped at teardown, even when
the test fails. Use the module-scoped one to share one server across a test module.

``neuron_fakes`` makes the FAKE Neuron SDK packages of tests/fake_neuron/ importable in this
process (fresh for each test) and gives the fake_neuron_record module, whose ``CALLS`` lists the
SDK calls made.

``libtorch_backend_dir`` is Triton's real PyTorch backend (found, or built once by the shared
folder's script; shared_folder.py says where that is), or a skip that says why.

Where ``SHARED`` (tests/shared_folder.py) exists, `pytest_configure` points the tests at its
perf_analyzer wrapper and its backend build, so the README's test command alone runs the tests
that need them.

``generate_cpu_model`` makes the small CPU model directory the sweep, search and resume tests serve.

``vllm_python`` is the interpreter of the vLLM environment (``$WORKBENCH_VLLM_PYTHON``, which
``dev.sh test`` sets from scripts/vllm_env.sh, else ``.venv-vllm``); ``vllm_backend_dir`` the
backend directory the shared folder's ``vllm_backend_here.sh`` assembles for it. Both skip, saying
why, where absent.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from workbench.server import TritonServer

from shared_folder import SET_FOR_THE_TESTS, SET_MARK, SHARED
from vllm_model_dirs import TINY_LLM, tiny_llm_repository

ServerFactory = Callable[..., TritonServer]

# what the workbench itself sets in its process (compiler/neuron.import_sdk picks the compile target this way)
_PROCESS_WIDE = ("NEURON_PLATFORM_TARGET_OVERRIDE", "NEURON_RT_VISIBLE_CORES")


@pytest.fixture(autouse=True)
def _neuron_environment_restored() -> Iterator[None]:
    """Put back the Neuron variables a test's in-process compile set, so a later test's CLI run (which
    inherits the environment) is not refused for another chip's override."""
    before = {name: os.environ.get(name) for name in _PROCESS_WIDE}
    yield
    for name, value in before.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def pytest_configure(config: pytest.Config) -> None:
    """Use ../shared's references without set-up by hand: its perf_analyzer wrapper (when it
    answers ``--version`` on this glibc) as ``$PERF_ANALYZER``, and for its LibTorch backend build
    the ``.pth`` that gives the backend stub a UTF-8 locale (``WB_STUB_LOCALE_FIX``), so the
    PyTorch 2 runtime's inductor is served for real. Values already in the environment win.
    An xdist worker inherits the controller's: it reads which those were from ``SET_MARK``, so its
    browser tier leaves them out of Lab as the controller's would."""
    inherited = os.environ.get(SET_MARK)
    if inherited is not None:
        SET_FOR_THE_TESTS.extend(name for name in inherited.split(",") if name)
        return
    wrapper = SHARED / "tools" / "perf_analyzer_here.sh"
    if "PERF_ANALYZER" not in os.environ and wrapper.is_file():
        try:
            answers = subprocess.run([str(wrapper), "--version"], capture_output=True, timeout=120).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            answers = False
        if answers:
            os.environ["PERF_ANALYZER"] = str(wrapper)
            SET_FOR_THE_TESTS.append("PERF_ANALYZER")
    if (SHARED / "tools" / "build_libtorch_backend.sh").is_file() and "WB_STUB_LOCALE_FIX" not in os.environ:
        os.environ["WB_STUB_LOCALE_FIX"] = "1"
        SET_FOR_THE_TESTS.append("WB_STUB_LOCALE_FIX")
    os.environ[SET_MARK] = ",".join(SET_FOR_THE_TESTS)  # a workbench variable: no user's, none given to Lab


def _factory() -> Iterator[ServerFactory]:
    servers: list[TritonServer] = []

    def make(model_repository: Any, **kwargs: Any) -> TritonServer:
        server = TritonServer(model_repository, **kwargs)
        servers.append(server)
        return server.start()

    try:
        yield make
    finally:
        for server in servers:
            server.stop(timeout=10)


@pytest.fixture
def triton_server() -> Iterator[ServerFactory]:
    yield from _factory()


@pytest.fixture(scope="module")
def triton_server_module() -> Iterator[ServerFactory]:
    yield from _factory()


def _generate_cpu_model(root: Path, name: str = "add_sub", *, seed: int | None = None, **settings: Any) -> Path:
    from workbench import generate, zoo
    from workbench.compiler import compile_model

    model = zoo.get(name) if seed is None else zoo.get(name, seed=seed)
    compiled = root / f"compiled-{len(list(root.glob('compiled-*')))}"
    artifact = compile_model(model.module, model.example_inputs(2), "cpu", out_dir=compiled, name=name)
    generate.write(generate.render(generate.GenerateSettings(
        triton_model_dir=str(root / "repo" / name), compiled_model=artifact.path, copy_compiled_model=True,
        target="cpu", neuron_core_range="0:1", max_batch_size=8, enable_dynamic_batching=True, **settings)),
        overwrite=True)
    return root / "repo" / name


@pytest.fixture(scope="session")
def generate_cpu_model() -> Callable[..., Path]:
    """``generate_cpu_model(root, name="add_sub", seed=None, **settings)``: the zoo model ``name``
    traced for the CPU and generated as ``root/repo/<name>`` (batching up to 8 over cores 0:1;
    ``settings``: more GenerateSettings), replacing what is there."""
    return _generate_cpu_model


FAKE_NEURON = Path(__file__).parent / "fake_neuron"
_FAKE_MODULES = ("torch_neuron", "torch.neuron", "torch_neuronx", "neuronxcc", "tensorflow_neuronx",
                 "tensorflow_neuron", "tensorflow.neuron", "transformers_neuronx", "fake_tf_neuron",
                 "fake_neuron_record")


def _forget_fakes() -> None:
    for name in _FAKE_MODULES:
        sys.modules.pop(name, None)
    import torch

    if getattr(getattr(torch, "neuron", None), "__doc__", "") and "FAKE" in torch.neuron.__doc__:
        del torch.neuron


@pytest.fixture
def neuron_fakes(monkeypatch) -> Iterator[Any]:
    """tests/fake_neuron on sys.path and PYTHONPATH (for compile children), imported afresh."""
    monkeypatch.delenv("NEURON_PLATFORM_TARGET_OVERRIDE", raising=False)
    monkeypatch.delenv("FAKE_NEURON_RECORD_DIR", raising=False)
    monkeypatch.syspath_prepend(str(FAKE_NEURON))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(FAKE_NEURON), os.environ.get("PYTHONPATH")])))
    _forget_fakes()
    import fake_neuron_record

    try:
        yield fake_neuron_record
    finally:
        _forget_fakes()


# --- Triton's real PyTorch (LibTorch) backend ------------------------------------------------

_BUILD_SCRIPT = SHARED / "tools" / "build_libtorch_backend.sh"


@pytest.fixture(scope="session")
def libtorch_backend_dir() -> Path:
    """A backend directory with Triton's real PyTorch backend for the wheel's tritonserver:
    ``$WORKBENCH_LIBTORCH_BACKEND``, else what the shared ``tools/build_libtorch_backend.sh`` builds
    for this interpreter (once: it caches by tag under ~/.cache, so a rerun takes seconds). Skips,
    saying why, where neither exists (tests then cover the Python-backend twin alone)."""
    from workbench.server.pytorch import ENV_VAR

    named = os.environ.get(ENV_VAR)
    if named:
        return Path(named)
    if not _BUILD_SCRIPT.is_file():
        pytest.skip(f"no real PyTorch backend: ${ENV_VAR} is unset and {_BUILD_SCRIPT} is absent "
                    "(the PyTorch-backend tests cover the Python-backend twin only)")
    from workbench.tutorial.backend_comparison import build_libtorch_backend

    started = time.monotonic()
    try:
        backend_dir = build_libtorch_backend(_BUILD_SCRIPT, timeout_s=1500)
    except RuntimeError as err:
        pytest.fail(str(err))
    print(f"\nLibTorch backend: {backend_dir} ({time.monotonic() - started:.0f} s)", file=sys.stderr)
    return backend_dir


@pytest.fixture(scope="session")
def pytorch_backend_or_twin(request) -> Path | bool:
    """For ``TritonServer(pytorch_backend=...)``: the real backend (``libtorch_backend_dir``) where it
    exists, else False, so the Python-backend twin serves (said on stderr; tests assert which)."""
    try:
        return request.getfixturevalue("libtorch_backend_dir")
    except pytest.skip.Exception as skipped:
        print(f"\nno real PyTorch backend ({skipped}); the Python-backend twin serves", file=sys.stderr)
        return False


_VLLM_SCRIPT = SHARED / "tools" / "vllm_backend_here.sh"


@pytest.fixture(scope="session")
def vllm_python() -> Path:
    """The vLLM environment's Python, or a skip that says how to make one."""
    from workbench.server.vllm_backend import ENV_PYTHON
    from workbench.tutorial.llm import vllm_python_path

    named = os.environ.get(ENV_PYTHON)
    python = vllm_python_path()
    if not python.is_file():
        source = f"${ENV_PYTHON}" if named else f"${ENV_PYTHON} is unset, so the default"
        pytest.skip(f"no vLLM environment: {source} {python} is absent "
                    "(bash scripts/vllm_env.sh sets one up; dev.sh test does)")
    return python


@pytest.fixture(scope="session")
def vllm_backend_dir(vllm_python: Path) -> Path:
    """Triton's vLLM backend for the wheel's tritonserver, as the shared script assembles it for
    ``vllm_python`` (kept in that environment), with the stub locale fix: its .pth goes into the vLLM
    environment only, whose stub would otherwise fail to import vLLM."""
    from workbench.tutorial.llm import assemble_vllm_backend

    if not _VLLM_SCRIPT.is_file():
        pytest.skip(f"no Triton vLLM backend: {_VLLM_SCRIPT} is absent")
    try:
        return assemble_vllm_backend(_VLLM_SCRIPT, vllm_python)
    except RuntimeError as err:
        pytest.fail(str(err))


@pytest.fixture(scope="session")
def tiny_llm_server(tmp_path_factory, vllm_python: Path, vllm_backend_dir: Path) -> Iterator[tuple[TritonServer, Path]]:
    """One tritonserver serving the zoo's tiny LLM through Triton's real vLLM backend, with the
    backend's token counter on (REPORT_CUSTOM_METRICS, disable_log_stats false), shared by the vLLM
    tests (a vLLM engine takes ~25-45 s to load on 2 cores): ``(server, model directory)``. Tests may
    leave another variant of it loaded (the LLM sweep does); each such variant counts tokens too.

    Loaded as an LLM sweep's variant of it with the repository's own engine arguments (LlmPlan's
    default: max_num_seqs 4, one instance), so that the sweeps here whose first variant that is load
    it without a new engine: Triton answers a load of the config and files already loaded at once
    (measured: 0.0 s, no engine start, against 25-45 s on an idle machine and 206 s on a loaded one)."""
    from workbench.generate.backends import read_back
    from workbench.measure.llm import LlmPlan

    repo = tiny_llm_repository(tmp_path_factory.mktemp("vllm_stream") / "repo")
    (variant,) = LlmPlan().variants(read_back(repo / TINY_LLM).settings)
    server = TritonServer(repo, vllm_backend=vllm_backend_dir, vllm_python=vllm_python, pytorch_backend=False)
    try:
        server.start(timeout=180)
        server.load(TINY_LLM, config=variant.config, files=variant.load_files(), timeout=900)
        yield server, repo / TINY_LLM
    finally:
        server.stop()
