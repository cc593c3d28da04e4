"""What Triton's real PyTorch backend does beyond what a config says: settings it applies to the
whole tritonserver process, a config it misserves, and the locale its PyTorch 2 runtime needs.

Sources: pytorch_backend r24.10 (src/libtorch.cc ``ParseParameters``, ``Execute``,
``ReadOutputTensors``; src/model.py), each behaviour also observed by serving it through the
backend built by the shared script and through the twin (tests/test_libtorch_backend.py):

* ``INTRA_OP_THREAD_COUNT`` is applied with ``at::set_num_threads`` on the model-load thread, which
  never runs inference; the instance thread's OpenMP team is ``OMP_NUM_THREADS`` of the server
  process (all cores when unset). The launcher therefore serves the count through the environment.
* ``INTER_OP_THREAD_COUNT`` calls ``at::set_num_interop_threads``, which torch allows once per
  process: a second model, or a reload with a changed config, aborts tritonserver (SIGABRT).
  Fixed upstream after r24.10 (triton-inference-server/pytorch_backend PR #158 and #159).
* ``ENABLE_JIT_EXECUTOR``, ``ENABLE_JIT_PROFILING`` and ``ENABLE_TENSOR_FUSER`` are set
  process-wide when present and never reset, so they outlive the model that set them.
* Batched ``TYPE_STRING`` outputs under dynamic batching: every response of a gathered execution
  gets the first request's strings (``ReadOutputTensors`` serialises from element 0 per response).
* The PyTorch 2 runtime imports ``torch._inductor`` when torch.compile is on; the backend stub's
  embedded Python starts with the C locale and ignores the environment, so the import fails with
  UnicodeDecodeError unless a ``.pth`` in the stub's site-packages sets a UTF-8 locale first.
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys
import sysconfig
from dataclasses import dataclass

from tritonclient.grpc import model_config_pb2

from workbench.generate.config import ModelConfig, parameters_of
from workbench.generate.pytorch_backend.layouts import PYTORCH2, TORCHSCRIPT, TRUE_SPELLINGS, layout_of

__all__ = [
    "JIT_KEYS",
    "ProcessSettings",
    "process_settings",
    "misserved",
    "needs_inductor",
    "stub_locale_is_utf8",
    "locale_fix_hint",
    "real_backend_notes",
]

JIT_KEYS = ("ENABLE_JIT_EXECUTOR", "ENABLE_JIT_PROFILING", "ENABLE_TENSOR_FUSER")


@dataclass(frozen=True)
class ProcessSettings:
    """What one TorchScript config asks of the whole server process: OpenMP threads (its
    ``INTRA_OP_THREAD_COUNT``), inter-op threads, and the JIT switches (absent keys: torch's
    default, on). None: the config does not ask."""

    omp_threads: int | None = None
    interop_threads: int | None = None
    jit: tuple[tuple[str, bool], ...] = tuple((key, True) for key in JIT_KEYS)

    @property
    def jit_flags(self) -> dict[str, bool]:
        return dict(self.jit)


def process_settings(cfg: ModelConfig) -> ProcessSettings:
    """The process-wide settings a (checked) config asks for; PyTorch 2 models set their threads
    in their own stub process, so they ask nothing of the server."""
    if layout_of(cfg) != TORCHSCRIPT:
        return ProcessSettings(jit=())
    params = parameters_of(cfg)

    def count(key: str) -> int | None:
        return int(params[key].strip()) if key in params else None

    jit = tuple((key, params.get(key, "true").lower() in TRUE_SPELLINGS) for key in JIT_KEYS)
    return ProcessSettings(count("INTRA_OP_THREAD_COUNT"), count("INTER_OP_THREAD_COUNT"), jit)


def misserved(cfg: ModelConfig) -> list[str]:
    """Why the real backend would answer this config wrongly (empty when it serves it right)."""
    problems = []
    strings = [entry.name for entry in cfg.output if entry.data_type == model_config_pb2.TYPE_STRING]
    if strings and cfg.max_batch_size > 0 and cfg.HasField("dynamic_batching") and layout_of(cfg) == TORCHSCRIPT:
        problems.append(
            f"TYPE_STRING output(s) {', '.join(strings)} with dynamic batching: Triton's PyTorch backend (r24.10) "
            "answers every request of a gathered batch with the first request's strings; turn dynamic batching "
            "off for this model (each request is then executed alone)"
        )
    return problems


def needs_inductor(cfg: ModelConfig) -> bool:
    """True when the PyTorch 2 runtime's torch.compile imports inductor: compile not disabled and
    the backend inductor (torch's default). ``torch.compile`` itself imports it, in initialize, for
    any max_batch_size (measured: "eager" and "aot_eager" load without a UTF-8 locale)."""
    if layout_of(cfg) != PYTORCH2:
        return False
    params = json.loads(parameters_of(cfg).get("TORCH_COMPILE_OPTIONAL_PARAMETERS", "{}"))
    return not params.get("disable", False) and params.get("backend", "inductor") == "inductor"


# The stub's start, emulated: the C locale, then site-packages and its .pth files.
_LOCALE_PROBE = (
    "import locale; locale.setlocale(locale.LC_CTYPE, 'C'); import site; site.main(); "
    "print(locale.getpreferredencoding(False))"
)


@functools.lru_cache(maxsize=8)
def stub_locale_is_utf8(python: str | None = None) -> bool:
    """Whether a backend stub whose site-packages are ``python``'s (default: this interpreter)
    ends up with a UTF-8 locale, as a ``.pth`` like the shared script's ``_stub_locale.pth`` makes
    it. The stub itself cannot be run on its own, so its start is emulated: ``python -S``, the C
    locale, then ``site.main()`` processes the .pth files."""
    try:
        done = subprocess.run(
            [python or sys.executable, "-S", "-c", _LOCALE_PROBE], capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.stdout.strip().lower().replace("-", "") == "utf8"


def locale_fix_hint() -> str:
    """The fix for the stub's locale, for messages (never applied silently: it changes the venv)."""
    return (
        f"add a .pth file to {sysconfig.get_paths()['purelib']} that sets a UTF-8 LC_CTYPE at start-up "
        "(build_libtorch_backend.sh writes _stub_locale.pth with WB_STUB_LOCALE_FIX=1), or use another "
        'torch.compile backend ("eager", "aot_eager") or {"disable": true}'
    )


def real_backend_notes(cfg: ModelConfig, *, locale_utf8: bool | None = None) -> list[str]:
    """What to know before serving ``cfg`` on the real backend: each process-wide setting it sets,
    what would be misserved, and the stub's locale for torch.compile."""
    notes: list[str] = []
    params = parameters_of(cfg)
    if layout_of(cfg) == TORCHSCRIPT:
        if "INTRA_OP_THREAD_COUNT" in params:
            notes.append(
                f"INTRA_OP_THREAD_COUNT={params['INTRA_OP_THREAD_COUNT']}: r24.10 applies it on the load "
                "thread only; the launcher runs the server with OMP_NUM_THREADS set to it (one value per "
                "server: a model asking for another count restarts the server, or is refused while other "
                "models are loaded)"
            )
        else:
            notes.append("no INTRA_OP_THREAD_COUNT: inference uses the server's OMP_NUM_THREADS (all cores when unset)")
        if "INTER_OP_THREAD_COUNT" in params:
            notes.append(
                "INTER_OP_THREAD_COUNT is set once per server process: a second model with it, or a changed "
                "reload, would abort tritonserver on r24.10, so the launcher restarts the server for it "
                "(or refuses while other models are loaded)"
            )
        present = [key for key in JIT_KEYS if key in params]
        if present:
            notes.append(
                f"{', '.join(present)} stay set for the whole server after this model loads (r24.10 never "
                "resets them); the launcher restarts the server when a later model needs other values"
            )
        if cfg.instance_group and any(
            g.kind == model_config_pb2.ModelInstanceGroup.KIND_GPU for g in cfg.instance_group
        ):
            notes.append("KIND_GPU: Triton refuses it on a machine without a GPU")
    notes += misserved(cfg)
    if needs_inductor(cfg):
        if locale_utf8 is None:
            locale_utf8 = stub_locale_is_utf8()
        if locale_utf8:
            notes.append(
                "torch.compile with inductor: the backend stub gets a UTF-8 locale here (a .pth sets it), "
                "so inductor can load"
            )
        else:
            notes.append(
                "torch.compile with inductor, but the backend stub's Python starts with the C locale here "
                "and inductor fails to import (UnicodeDecodeError at load); the launcher refuses it: "
                + locale_fix_hint()
            )
    return notes
