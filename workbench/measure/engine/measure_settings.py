"""How to measure: one settings value for the engine, the windows, the seed and the output tolerances.

Made once (from a CLI's flags, a panel's controls, a notebook's arguments), checked once when it
is made, and handed whole to the built-in load generator, to perf_analyzer and to the sweep,
which records it and compares it when a run is resumed.
"""

from __future__ import annotations

import math
import numbers
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from workbench.targets import TargetChoice

from workbench.refusals import WorkbenchError

__all__ = ["MeasureError", "MeasureSettings", "ENGINES", "PROTOCOLS"]

ENGINES = ("auto", "workbench", "perf_analyzer")
PROTOCOLS = ("grpc", "http")
# What a number means depends on these: a resumed run must use the same ones. (The perf_analyzer
# command may differ: another path to the same tool measures the same way.)
_MEANING = (
    "engine",
    "protocol",
    "window_s",
    "stability",
    "stable_windows",
    "max_windows",
    "time_limit_s",
    "min_latencies",
    "warmup_requests",
    "seed",
    "rtol",
    "atol",
)


class MeasureError(WorkbenchError, ValueError):
    """A measurement that cannot start: bad settings or arguments, unreachable server, inputs
    that do not fit the model. Raised before any load is sent; the message names the bad item."""


def _whole(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


@dataclass(frozen=True)
class MeasureSettings:
    """How every point is measured.

    ``engine``: ``"auto"`` (perf_analyzer where one runs here, else the built-in load generator;
    resolved once per run, see ``engine.choose_engine``), ``"workbench"`` (the built-in one) or
    ``"perf_analyzer"`` (Triton's, run as ``perf_analyzer``: a path, a command prefix or an argv
    list; default ``$PERF_ANALYZER``, then PATH). ``protocol``: ``grpc`` or ``http``.

    Windows of ``window_s`` seconds run until the last ``stable_windows`` agree within
    ``stability`` (0.10 = 10%) and hold at least ``min_latencies`` latencies (a p99 from fewer is
    a guess). Past ``max_windows`` windows the windows get twice as long, again after every
    ``max_windows`` more, until ``time_limit_s`` seconds of measuring; with ``time_limit_s=None``
    a point stops after ``max_windows`` windows as perf_analyzer does. A point that stops unstable
    or short of latencies says so. The stopping rule decides only when to stop: the built-in
    engines report every request completed after the warm-up (perf_analyzer its last
    ``stable_windows`` windows). ``warmup_requests`` responses come first (None: max(20, 2 x
    concurrency)). ``processes`` sending processes for the built-in engine (None: as many as the
    load needs and the machine's cores allow). ``seed`` draws the request inputs; served outputs
    must match the reference within ``rtol``/``atol``.
    """

    engine: str = "auto"
    perf_analyzer: str | os.PathLike[str] | tuple[str, ...] | None = None
    protocol: str = "grpc"
    window_s: float = 1.0
    stability: float = 0.10
    stable_windows: int = 3
    max_windows: int = 10
    time_limit_s: float | None = 30.0
    min_latencies: int = 2000
    warmup_requests: int | None = None
    processes: int | None = None
    seed: int = 0
    rtol: float = 1e-4
    atol: float = 1e-5

    @classmethod
    def for_target(cls, choice: TargetChoice, **settings: Any) -> MeasureSettings:
        """Settings for a sweep where ``choice`` serves: its output tolerances, then ``settings``."""
        return cls(**{**choice.tolerances, **settings})

    def __post_init__(self) -> None:
        if isinstance(self.perf_analyzer, str):  # a blank field (a form, a flag) means the default
            object.__setattr__(self, "perf_analyzer", self.perf_analyzer.strip() or None)
        elif isinstance(self.perf_analyzer, Sequence):
            object.__setattr__(self, "perf_analyzer", tuple(os.fspath(part) for part in self.perf_analyzer))
        problems = []
        if self.engine not in ENGINES:
            problems.append(f"engine must be one of {', '.join(ENGINES)}, got {self.engine!r}")
        if self.protocol not in PROTOCOLS:
            problems.append(f"protocol {self.protocol!r} is not grpc or http")
        for name in ("window_s", "stability"):
            value = getattr(self, name)
            if not _number(value) or not value > 0:
                problems.append(f"{name} must be a positive number, got {value!r}")
        for name in ("rtol", "atol"):
            value = getattr(self, name)
            if not _number(value) or value < 0:
                problems.append(f"{name} must be >= 0, got {value!r}")
        if not _whole(self.stable_windows) or self.stable_windows < 1:
            problems.append(f"stable_windows must be a whole number >= 1, got {self.stable_windows!r}")
        elif not _whole(self.max_windows) or self.max_windows < self.stable_windows:
            problems.append(
                f"max_windows must be a whole number >= stable_windows ({self.stable_windows}), "
                f"got {self.max_windows!r}"
            )
        if self.time_limit_s is not None and (not _number(self.time_limit_s) or not self.time_limit_s > 0):
            problems.append(f"time_limit_s must be a positive number of seconds or None, got {self.time_limit_s!r}")
        if not _whole(self.min_latencies) or self.min_latencies < 0:
            problems.append(f"min_latencies must be a whole number >= 0, got {self.min_latencies!r}")
        if self.processes is not None and (not _whole(self.processes) or self.processes < 1):
            problems.append(f"processes must be a whole number >= 1 or None, got {self.processes!r}")
        if self.warmup_requests is not None and (not _whole(self.warmup_requests) or self.warmup_requests < 0):
            problems.append(f"warmup_requests must be a whole number >= 0, got {self.warmup_requests!r}")
        if not _whole(self.seed) or self.seed < 0:
            problems.append(f"seed must be a whole number >= 0, got {self.seed!r}")
        if problems:
            raise MeasureError("; ".join(problems))
        # plain Python numbers from here on (numpy scalars would not survive a JSON record)
        for name in ("window_s", "stability", "rtol", "atol", "time_limit_s"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, float(getattr(self, name)))
        for name in ("stable_windows", "max_windows", "min_latencies", "seed", "warmup_requests", "processes"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, int(getattr(self, name)))

    def engine_command(self) -> list[str] | None:
        """perf_analyzer's command prefix when it is the engine (PerfAnalyzerNotFound, naming
        where it looked, when there is none), None for the built-in engine and for ``auto``
        (which never fails: it falls back). Call it before anything starts, so a missing tool is
        said first."""
        if self.engine != "perf_analyzer":
            return None
        # circle: perf_analyzer imports this module
        from workbench.measure.engine.perf_analyzer import find_perf_analyzer

        return find_perf_analyzer(self.perf_analyzer)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON values, for a run record."""
        data = asdict(self)
        command = data["perf_analyzer"]
        data["perf_analyzer"] = (
            list(command) if isinstance(command, tuple) else (None if command is None else os.fspath(command))
        )
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MeasureSettings:
        """The settings a record holds; keys that are not settings (a record's ``model``) are
        left out, missing ones take their defaults."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})

    def differences(self, recorded: Mapping[str, Any]) -> list[str]:
        """``"window_s 0.2 -> 0.5"`` for every setting that changes what a number means and
        differs from ``recorded`` (a run record's settings; keys it lacks are not compared)."""
        mine = self.to_dict()
        return [
            f"{key} {recorded[key]!r} -> {mine[key]!r}"
            for key in _MEANING
            if key in recorded and recorded[key] != mine[key]
        ]
