"""Everything a sweep is checked for before a server starts or a variant loads, once, for the CLI
(``workbench sweep``) and the sweep panel alike: the model directory, the grid against its config,
how to measure, the search, the backends to compare, and the run folder.

Each value comes from a zero-argument callable (the flags' parser or the panel's fields) so that
the words of a problem are the screen's own; every problem is collected, none hides another.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from workbench.coremap import CoreRangeError
from workbench.generate.config import ConfigError, read_config
from workbench.measure.engine.measure_settings import MeasureError, MeasureSettings
from workbench.measure.engine.perf_analyzer import PerfAnalyzerNotFound
from workbench.measure.grid.plan import SweepError, SweepPlan, plan_variants
from workbench.measure.store.results import ResultsError, load_run
from workbench.measure.sweep.compare_backends import BackendSweep
from workbench.measure.sweep.lock import RunFolderLock
from workbench.measure.sweep.search import SearchStrategy
from workbench.measure.sweep.swept import check_out_dir

__all__ = ["INPUT_ERRORS", "Preflight", "preflight", "several_urls"]

# What bad input raises anywhere on the way to a sweep: shown as a sentence, never a traceback.
INPUT_ERRORS: tuple[type[Exception], ...] = (
    SweepError,
    ResultsError,
    ConfigError,
    CoreRangeError,
    MeasureError,
    PerfAnalyzerNotFound,
    ValueError,
)

T = TypeVar("T")


@dataclass
class Preflight:
    """The checked values (None where making one failed) and every problem found."""

    plan: SweepPlan | None = None
    settings: MeasureSettings | None = None
    search: SearchStrategy | None = None
    backends: BackendSweep | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def _made(self, make: Callable[[], T]) -> T | None:
        try:
            return make()
        except INPUT_ERRORS as err:
            self.problems.append(str(err))
            return None


def preflight(
    model_dir: Path,
    *,
    plan: Callable[[], SweepPlan],
    settings: Callable[[], MeasureSettings],
    search: Callable[[], SearchStrategy | None],
    backends: Callable[[], BackendSweep],
    out_dir: Path | None = None,
    resume: bool = False,
    new_run: bool = False,
    urls: int = 0,
) -> Preflight:
    """Check a sweep of ``model_dir`` before anything starts. ``urls``: how many running servers it is
    given by URL (none: one started here; more than one is refused: `several_urls`); ``out_dir`` None when the
    folder is chosen later."""
    checked = Preflight()
    has_config = (model_dir / "config.pbtxt").is_file()
    if not has_config:
        checked.problems.append(
            f"{model_dir} is not a model directory (no config.pbtxt): write the model directory first"
        )
    checked.settings = checked._made(settings)
    if checked.settings is not None:
        checked._made(checked.settings.engine_command)  # perf_analyzer asked for and absent
    made_plan = checked.plan = checked._made(plan)
    checked.search = checked._made(search)
    made_backends = checked.backends = checked._made(backends)
    if made_plan is not None and has_config:
        checked._made(lambda: plan_variants(made_plan, read_config(model_dir)))
    _check_combinations(checked, urls)
    comparing = made_backends is not None and made_backends.active
    if comparing and made_backends is not None and made_plan is not None and has_config:
        checked._made(lambda: made_backends.check(made_plan, model_dir))  # every model and setting
    if out_dir is not None and not comparing:  # a comparison checks each model's run folder itself
        checked._made(lambda: _check_run_folder(out_dir, resume, new_run))
    return checked


def several_urls(count: int) -> str:
    """The refusal of ``--url`` given ``count`` > 1 times: one running server is measured by URL; a
    sweep over several machines runs as Ray tasks, each with its own server (`cluster.ray_sweep`)."""
    return (
        f"--url given {count} times: a sweep measures one running server; to measure on several machines, "
        "start Ray on them and give --ray ADDRESS (each variant a Ray task with its own tritonserver)"
    )


def _check_combinations(checked: Preflight, urls: int) -> None:
    """What the values allow together."""
    comparing = checked.backends is not None and checked.backends.active
    if comparing and checked.search is not None:
        checked.problems.append(
            "comparing backends or sweeping backend settings measures the whole grid "
            f"(strategy grid, not {checked.search.name})"
        )
    if comparing and urls > 0:
        checked.problems.append(
            "comparing backends or sweeping backend settings measures on a server started here (no --url)"
        )
    if urls > 1:
        checked.problems.append(several_urls(urls))


def _check_run_folder(out_dir: Path, resume: bool, new_run: bool) -> None:
    RunFolderLock.check_free(out_dir)  # another sweep writing it: said before a server starts
    if check_out_dir(out_dir, resume or new_run) and not new_run:
        load_run(out_dir)  # a corrupted run folder is named (file, line) before a server starts
