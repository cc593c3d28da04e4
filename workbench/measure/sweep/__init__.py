"""Running a sweep: ``runner`` owns the life of a run of every sweep kind (`runner.SweepKind`: lock,
set aside, fingerprint, run record, snapshot and restore, rows appended, the outcome); the tensor
kind is `run.SweepRun` (and `run_sweep`, its public call), one model on one server; ``point`` measures one point, ``swept`` checks what a sweep is about, ``preflight`` checks a
sweep before anything starts, ``lock`` keeps one writer per run folder, ``resume`` keeps resumes
honest, ``fanout`` and ``compare_backends`` split a grid over servers and models, ``search`` picks points."""

from workbench.measure.sweep.run import *  # noqa: F401,F403 - the public calls, as before the wings
from workbench.measure.sweep.run import __all__  # noqa: F401
