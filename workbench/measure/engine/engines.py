"""Which engine measures a run: perf_analyzer where it runs here, else the built-in load generator.

perf_analyzer is the reference the field trusts, so ``engine="auto"`` (the default) uses it when
one answers ``--version``: ``$PERF_ANALYZER`` or ``perf_analyzer`` on PATH (Triton's SDK container
has it; its pip wheel needs glibc 2.38 or newer). Anywhere else the built-in engine measures,
and the run record says why. The choice is made once per run, so every point of a sweep is
measured the same way.
"""

from __future__ import annotations

import platform
import subprocess
from dataclasses import asdict, dataclass, replace

from workbench.measure.engine.measure_settings import MeasureSettings
from workbench.measure.engine.perf_analyzer import PerfAnalyzerNotFound, find_perf_analyzer

__all__ = ["EngineChoice", "choose_engine", "resolved", "PERF_ANALYZER_GLIBC"]

# perf-analyzer's wheels are built for manylinux_2_38 (perf-analyzer 2.60.0 on PyPI).
PERF_ANALYZER_GLIBC = (2, 38)
# The first run of a wrapper may fetch what it needs (shared/tools/perf_analyzer_here.sh does).
_VERSION_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class EngineChoice:
    """``engine`` (``workbench`` or ``perf_analyzer``), the perf_analyzer ``command`` it runs (None
    for the built-in one) and, in a sentence, why."""

    engine: str
    command: tuple[str, ...] | None
    reason: str

    def to_dict(self) -> dict:
        data = asdict(self)
        data["command"] = list(self.command) if self.command else None
        return data


def _glibc() -> tuple[int, int] | None:
    name, version = platform.libc_ver()
    try:
        return (int(version.split(".")[0]), int(version.split(".")[1])) if name == "glibc" else None
    except (IndexError, ValueError):
        return None


def choose_engine(settings: MeasureSettings) -> EngineChoice:
    """The engine ``settings`` ask for, resolved. ``perf_analyzer`` asked for by name and absent
    raises PerfAnalyzerNotFound (said before anything starts); ``auto`` never fails."""
    if settings.engine == "workbench":
        return EngineChoice("workbench", None, "the built-in load generator, as asked")
    if settings.engine == "perf_analyzer":
        return EngineChoice(
            "perf_analyzer", tuple(find_perf_analyzer(settings.perf_analyzer)), "perf_analyzer, as asked"
        )
    fallback = "measured by the built-in load generator instead"
    try:
        command = find_perf_analyzer(settings.perf_analyzer)
    except PerfAnalyzerNotFound as err:
        return EngineChoice("workbench", None, f"no perf_analyzer here ({err}); {fallback}")
    try:
        done = subprocess.run(
            command + ["--version"],
            capture_output=True,
            text=True,
            timeout=_VERSION_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
        )
        answer = (done.stdout + done.stderr).strip()
        works = done.returncode == 0 and "perf analyzer" in answer.lower()
    except (OSError, subprocess.TimeoutExpired) as err:
        answer, works = f"{type(err).__name__}: {err}", False
    where = " ".join(command)
    if works:
        return EngineChoice(
            "perf_analyzer", tuple(command), f"perf_analyzer answers --version at {where} ({answer.splitlines()[0]})"
        )
    glibc = _glibc()
    why = (
        f"; this machine has glibc {glibc[0]}.{glibc[1]} and perf_analyzer's wheel needs "
        f"{PERF_ANALYZER_GLIBC[0]}.{PERF_ANALYZER_GLIBC[1]} (Triton's SDK container has one that runs)"
        if glibc is not None and glibc < PERF_ANALYZER_GLIBC
        else ""
    )
    last = answer.splitlines()[-1] if answer else "no output"
    return EngineChoice("workbench", None, f"perf_analyzer at {where} does not run ({last}){why}; {fallback}")


def resolved(settings: MeasureSettings, choice: EngineChoice) -> MeasureSettings:
    """``settings`` with the chosen engine (and its command) in place of ``auto``."""
    command = choice.command if choice.command else settings.perf_analyzer
    return replace(settings, engine=choice.engine, perf_analyzer=command)
