"""Running a sweep: ``runner`` owns the life of a run of every sweep kind (`runner.SweepKind`: lock,
set aside, fingerprint, run record, snapshot and restore, rows appended, the outcome); the tensor
kind is `run.SweepRun` (and `run_sweep`, its public call), one model on one server; ``point`` measures one point, ``swept`` checks what a sweep is about, ``preflight`` checks a
sweep before anything starts, ``lock`` keeps one writer per run folder, ``resume`` keeps resumes
honest, ``compare_backends`` splits a grid over models, ``search`` picks points (several machines:
``measure/cluster``, on Ray)."""

from workbench.measure.sweep.run import *  # noqa: F401,F403 - the public calls, as before the wings
from workbench.measure.sweep.run import __all__  # noqa: F401
