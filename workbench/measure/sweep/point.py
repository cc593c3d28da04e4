"""Measuring one point of a sweep: seeded inputs, their reference outputs, then the engine the
settings name (the built-in load generator or perf_analyzer; ``auto`` is resolved by the sweep
once per run, or here for a lone point), into one `PointRow`.

Every point's served outputs are compared with the reference: the built-in engine checks the
warm-up responses and the first response of every window; perf_analyzer only validates against
files it is given, so one checked request goes first.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np
from tritonclient.utils import InferenceServerException

from workbench.measure.engine.engines import choose_engine, resolved
from workbench.measure.engine.loadgen import Until, measure
from workbench.measure.engine.measure_settings import MeasureError, MeasureSettings
from workbench.measure.engine.perf_analyzer import PerfAnalyzerError, run_perf_analyzer
from workbench.measure.grid.plan import Point
from workbench.measure.grid.rows import PointRow
from workbench.served_outputs import Eager, InputMaker, connect, infer
from workbench.spec import ModelSpec

__all__ = ["Target", "OutputCheck", "measure_point"]

Progress = Callable[[int, int, str], None]


@dataclass(frozen=True)
class Target:
    """What every point of a sweep measures: the model served at ``url``, its interface
    (``batched``: requests carry a batch dim, max_batch_size > 0), the reference that gives the
    expected outputs, and ``inputs(batch, seed=...)`` where random inputs are not valid ones."""

    url: str
    model: str
    spec: ModelSpec
    batched: bool
    reference: Eager
    inputs: InputMaker | None = None
    _cases: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def case(self, batch_size: int, seed: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """A request's inputs and the reference's outputs for them, made once per batch size and
        seed: every variant and concurrency of a sweep sends the same request."""
        key = (batch_size, seed)
        if key not in self._cases:
            arrays = self.request(batch_size, seed)
            self._cases[key] = (arrays, self.reference(arrays))
        return self._cases[key]

    def request(self, batch_size: int, seed: int) -> list[np.ndarray]:
        """The inputs of one request of ``batch_size``, in input order, drawn with ``seed``."""
        if self.inputs is not None:
            return [np.asarray(a) for a in self.inputs(batch_size, seed=seed)]
        return self.spec.example_inputs(batch_size if self.batched else None, seed=seed)


class OutputCheck:
    """Compares every checked response with the reference outputs; keeps the largest difference."""

    def __init__(self, expected: Mapping[str, np.ndarray], rtol: float, atol: float) -> None:
        self.expected, self.rtol, self.atol = expected, rtol, atol
        self.max_abs_diff = 0.0

    def __call__(self, outputs: Mapping[str, np.ndarray]) -> bool:
        ok = True
        for name, want in self.expected.items():
            got = outputs.get(name)
            if got is None or got.shape != want.shape:
                return False
            if want.dtype.kind in "OSU":  # strings: equal or not
                ok &= bool(np.array_equal(got, want))
                continue
            if got.size:
                diff = float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64))))
                self.max_abs_diff = max(self.max_abs_diff, diff)
            ok &= bool(np.allclose(got, want, rtol=self.rtol, atol=self.atol))
        return ok


def measure_point(
    target: Target,
    point: Point,
    settings: MeasureSettings,
    *,
    progress: Progress | None = None,
    cancel: threading.Event | None = None,
    until: Until | None = None,
) -> PointRow:
    """The point's row: measured, or failed with the reason (a refused measurement is a row,
    not an exception, so the sweep goes on). ``Cancelled`` passes through. ``until``: a rule that
    ends the windows instead of the stability rule (the built-in engine only; a search's effort rule)."""
    if settings.engine == "auto":
        settings = resolved(settings, choose_engine(settings))
    arrays, expected = target.case(point.batch_size, settings.seed)
    outputs = [t.name for t in target.spec.by_index("output")]
    checker = OutputCheck(dict(zip(outputs, expected)), settings.rtol, settings.atol)
    inputs = dict(zip([t.name for t in target.spec.by_index("input")], arrays))
    if settings.engine == "perf_analyzer":
        return _by_perf_analyzer(target, point, settings, inputs, checker, progress, cancel)
    try:
        result = measure(
            target.url,
            target.model,
            inputs,
            settings,
            batch_size=point.batch_size,
            concurrency=point.concurrency,
            check=checker,
            progress=progress,
            cancel=cancel,
            until=until,
        )
    except MeasureError as err:
        return PointRow.failed(point, f"measure failed: {err}")
    return PointRow.measured(point, result, checker.max_abs_diff)


def _by_perf_analyzer(
    target: Target,
    point: Point,
    settings: MeasureSettings,
    inputs: dict[str, np.ndarray],
    checker: OutputCheck,
    progress: Progress | None,
    cancel: threading.Event | None,
) -> PointRow:
    """One checked request, then perf_analyzer's run with the same values."""
    try:
        connection = connect(target.url, settings.protocol)
        try:
            served = infer(connection, target.model, target.spec, list(inputs.values()))
        finally:
            connection[1].close()
        outputs_ok = checker(dict(zip([t.name for t in target.spec.by_index("output")], served)))
        samples = {k: (v[0] if target.batched else v) for k, v in inputs.items()}  # perf_analyzer batches samples
        (row,) = run_perf_analyzer(
            target.url,
            target.model,
            settings,
            inputs=samples,
            batch_size=point.batch_size,
            concurrency=point.concurrency,
            progress=progress,
            cancel=cancel,
        )
    except (PerfAnalyzerError, InferenceServerException) as err:
        return PointRow.failed(point, f"perf_analyzer failed: {err}")
    return PointRow.from_perf_analyzer(point, row, outputs_ok, checker.max_abs_diff)
