"""The life of a sweep run, for every kind of sweep: the run folder locked, an earlier run set aside
or resumed (refused when what it measured changed), the run record written, the served model's
state snapshotted and restored, every point's row appended the moment it exists, and the run's
outcome (status) decided by one rule.

A sweep kind (`SweepKind`: the tensor sweep in ``sweep/run.py``, the LLM sweep in ``llm/run.py``)
says what a point is and how one is measured; `run_sweep_kind` drives it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import pandas as pd

from workbench.measure.grid.plan import SweepError
from workbench.measure.grid.rows import now
from workbench.measure.store.folder import (
    POINTS_FILE,
    ResultsError,
    RunRecord,
    append_point,
    read_record,
    write_exports,
    write_record,
)
from workbench.measure.store.results import SavedRun
from workbench.measure.sweep.lock import LOCK_FILE, RunFolderLock
from workbench.measure.sweep.resume import set_aside
from workbench.measure.sweep.swept import check_out_dir, machine
from workbench.server.protocol import Server
from workbench.server.snapshot import ModelState, describe_server, snapshot
from workbench.server.snapshot import restore as restore_state
from workbench.system import installed_versions
from workbench.tasks import Cancelled

__all__ = ["SweepKind", "SweepRunner", "run_sweep_kind", "outcome"]

Progress = Callable[[int, int, str], None]


class SweepKind(Protocol):
    """One kind of sweep, as the runner drives it. Made (and checked: the model, its variants, the
    endpoint) before anything is loaded or written; `SweepRunner` then calls, in order,
    `fingerprint`, `resume` (a resumed run only), `record_fields`, `measure_all`, and `result`
    after every point."""

    kind: str  # the record's kind, registered in workbench/measure/__init__.py
    name: str  # the model's name on the server
    server: Server
    url: str  # the endpoint its points are measured through
    packages: tuple[str, ...]  # the packages whose versions the record keeps

    def fingerprint(self) -> dict[str, Any]:
        """What the run measures (model files, config, server and workbench versions: `resume.fingerprint`)."""
        ...

    def resume(self, previous: RunRecord, measured: dict[str, Any]) -> int:
        """Take the earlier run's rows (those it keeps; failed points are measured again);
        SweepError when it measured something else (its own words: settings, lengths, SLO, engine).
        Returns how many rows it kept."""
        ...

    def record_fields(self, record: RunRecord, command: str | None) -> dict[str, Any]:
        """This kind's fields of the record (``record``: the common ones, label included)."""
        ...

    def planned_points(self) -> int: ...

    def measure_all(self, run: SweepRunner) -> None:
        """Measure the grid or the points its search picks, each row through `SweepRunner.add`."""
        ...

    def result(self, run: SweepRunner) -> SavedRun:
        """The result so far (its table and ``run.record``), updating the record's kind fields
        (a search's log) first."""
        ...

    def export_frame(self, frame: pd.DataFrame) -> pd.DataFrame:
        """The table as ``results.csv`` / ``results.json`` export it (``frame``: the result's)."""
        ...

    def restorable(self) -> bool:
        """Whether the model may be restored (something was loaded and no load got stuck)."""
        ...

    def screened_points(self) -> int:
        """Points a search screened (short measurements that chose what to measure in full, kept
        apart from the results): a search whose screens ruled every point out measured something."""
        ...


class SweepRunner:
    """One sweep run of ``kind`` in ``out_dir``: it owns the folder, the record and the session."""

    def __init__(
        self, kind: SweepKind, out_dir: Path, *, progress: Progress | None, cancel: threading.Event | None
    ) -> None:
        self.kind, self.out_dir, self.progress, self.cancel = kind, out_dir, progress, cancel
        self.record = RunRecord(kind=kind.kind)
        self.previous: RunRecord | None = None
        self.session: dict[str, Any] = {}
        self.count = 0  # points of the plan done (measured or reused)

    # ---- the run folder -------------------------------------------------------------------------

    def open(self, *, resume: bool, new_run: bool, label: str | None, command: str | None) -> None:
        """Take the run folder: a new run, or the earlier one's rows when resuming (refused when
        it is another kind's, or measured something else); the record says what this session measures."""
        kind = self.kind
        check_out_dir(self.out_dir, resume or new_run)
        measured = kind.fingerprint()
        if new_run and check_out_dir(self.out_dir, True):
            set_aside(self.out_dir, keep=(LOCK_FILE,))  # the lock this sweep holds stays
        self.out_dir.mkdir(parents=True, exist_ok=True)
        reused = 0
        if check_out_dir(self.out_dir, resume):
            try:
                self.previous = read_record(self.out_dir)
            except ResultsError as err:  # cut, not an object, not UTF-8, a FIFO: named, one line
                raise SweepError(f"cannot resume the run in {self.out_dir}: {err}") from None
            if self.previous.kind != kind.kind:
                raise SweepError(
                    f"cannot resume the run in {self.out_dir}: it is a {self.previous.kind} sweep, "
                    f"not a{'n' if kind.kind[:1] in 'aeiou' else ''} {kind.kind} one; use another folder"
                )
            reused = kind.resume(self.previous, measured)
        previous = self.previous or RunRecord(kind=kind.kind)
        common = RunRecord.from_dict(previous).with_changes(
            kind=kind.kind,
            label=label or previous.label or self.out_dir.name,
            model=kind.name,
            started=previous.started or now(),
            ended=None,
            status="running",
            server_version=kind.server.version,
            fingerprint=measured,
            url=kind.url,
            server=describe_server(kind.server, kind.url),
            machine=machine(),
            packages=installed_versions(kind.packages),
            planned_points=kind.planned_points(),
        )
        self.record = common.with_changes(**kind.record_fields(common, command))
        self.session = {"started": now(), "ended": None, "status": "running", "measured": 0, "reused": reused}
        self.record.sessions = list(self.record.sessions) + [self.session]
        write_record(self.out_dir, self.record)

    # ---- points ---------------------------------------------------------------------------------

    def add(self, row: dict[str, Any], file: str = POINTS_FILE, *, counts: bool = True) -> None:
        """Append a measured row to ``file`` (synced before the sweep goes on) and save the result;
        ``counts``: it is a point of the plan (not a re-measurement or a screen)."""
        append_point(self.out_dir / file, row)
        if file == POINTS_FILE:
            self.session["measured"] += 1
            self.count += 1 if counts else 0
            self.save()

    def report(self, message: str, within: float = 0.0) -> None:
        """Progress in points; ``within``: how far into the point in progress it is (0-1)."""
        if self.progress is not None:
            done = self.count + min(max(within, 0.0), 0.99) if within else self.count
            # a fraction of a point shows the one in progress moving (the bars take a float)
            self.progress(done, self.record.planned_points or 0, message)  # type: ignore[arg-type]

    def save(self) -> SavedRun:
        """The result so far, its record and exports written."""
        result = self.kind.result(self)
        write_record(self.out_dir, self.record)
        write_exports(self.out_dir, self.kind.export_frame(result.frame), self.record)
        return result

    # ---- the run --------------------------------------------------------------------------------

    def run(self, *, restore: bool) -> SavedRun:
        """Measure, then leave the model as it was; the outcome by `outcome`."""
        kind = self.kind
        status: str = "failed"
        why: str | None = "stopped by an error"
        before = snapshot(kind.server, [kind.name]) if restore else None
        try:
            kind.measure_all(self)
            status, why = "complete", None
        except Cancelled:
            status, why = "cancelled", None
        except Exception as err:  # said in the record, then raised to the caller
            why = f"{type(err).__name__}: {err}".splitlines()[0]
            raise
        finally:
            self._restore(before)
            if status == "complete":
                result = kind.result(self)
                status, why = outcome(result, kind.server, kind.screened_points())
            self.record.status = self.session["status"] = status
            if why:
                self.session["failure"] = why
            self.record.ended = self.session["ended"] = now()
            result = self.save()
        return result

    def _restore(self, before: ModelState | None) -> None:
        """The model back as it was (not after a stuck load: restoring would only wait as long again)."""
        server = self.kind.server
        if before is None or not self.kind.restorable() or not server.running:
            return
        try:
            self.session["restored"] = restore_state(server, before)
        except Exception as err:  # the sweep's own outcome (and its error, if any) comes first
            self.session["restored"] = f"failed: {err}"


def outcome(result: SavedRun, server: Server, screened: int = 0) -> tuple[str, str | None]:
    """A run that went through its points is ``complete`` only when it has something to show:
    ``failed`` (with why) when its server is gone, when it measured no point (not even a search's
    screen, whose verdict "none meets the budget" is an answer), or when every point failed. A
    resume measures what is missing (failed points are measured again)."""
    if not server.running:
        return "failed", "the server stopped during the sweep"
    frame = result.frame
    if not len(frame):
        return ("complete", None) if screened else ("failed", "no point was measured")
    errors = frame["error"] if "error" in frame.columns else None
    if errors is not None and errors.astype(object).map(lambda e: isinstance(e, str) and bool(e)).all():
        return "failed", f"every point failed ({len(frame)} point(s)); first: {frame['error'].iloc[0]}"
    return "complete", None


def run_sweep_kind(
    kind: SweepKind,
    out_dir: Path,
    *,
    resume: bool,
    new_run: bool,
    label: str | None,
    command: str | None,
    restore: bool,
    progress: Progress | None,
    cancel: threading.Event | None,
) -> SavedRun:
    """Run ``kind`` in ``out_dir``: one writer per run folder, the lock taken before anything is loaded."""
    check_out_dir(out_dir, resume or new_run)
    runner = SweepRunner(kind, out_dir, progress=progress, cancel=cancel)
    with RunFolderLock(out_dir):
        runner.open(resume=resume, new_run=new_run, label=label, command=command)
        return runner.run(restore=restore)
