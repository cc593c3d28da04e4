"""What differs between sweep kinds on Ray, as the driver sees it: the plan's variants and points,
what each variant asks of Ray, the task's job, the rows' keys, the record's fields, the resume check
and the result read back. One `RayKind` per kind (`TensorOnRay`, `LlmOnRay`), chosen once by the
model's backend (`ray_kind`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

import pandas as pd

from workbench.generate.backends import backend_of_config, read_back
from workbench.generate.config import read_config
from workbench.measure.cluster.ray_task import (
    Ask,
    Job,
    LlmVariantJob,
    VariantJob,
    llm_variant_ask,
    neuron_target,
    variant_ask,
)
from workbench.measure.engine.measure_settings import MeasureSettings
from workbench.measure.grid.plan import SweepError, SweepPlan
from workbench.measure.grid.rows import INT_COLUMNS, KEY_COLUMNS
from workbench.measure.llm.plan import LlmPlan
from workbench.measure.llm.result import LlmSweepResult, llm_frame
from workbench.measure.llm.rows import LLM_INT_COLUMNS, LLM_KEY_COLUMNS
from workbench.measure.store.folder import RunRecord
from workbench.measure.store.results import (
    SavedRun,
    SweepResult,
    frame_from_rows,
    read_points,
)
from workbench.measure.sweep.resume import unique_rows

__all__ = [
    "LlmOnRay",
    "RUN_KIND",
    "RayKind",
    "TensorOnRay",
    "measured_on_ray",
    "ray_kind",
]


RUN_KIND = "ray"  # a tensor sweep's record on Ray (an LLM sweep's is the LLM kind's, read back as any)
CLUSTER_FIELD, CLUSTER = "cluster", "ray"  # every Ray sweep's record says so, whatever its kind


def measured_on_ray(record: Mapping[str, Any]) -> bool:
    """Whether a run record is a sweep's on Ray, of either kind (a tensor sweep's or an LLM sweep's)."""
    return record.get("kind") == RUN_KIND or record.get(CLUSTER_FIELD) == CLUSTER


# ---- the sweep kinds, as the driver sees them ---------------------------------------------------


class RayKind(Protocol):
    """What the driver needs of a sweep kind on Ray: the variants to send (by label, with their asks
    and points), the task of each, which are measured already (a resume skips them), the record's
    fields of the kind, and the result its rows read back as."""

    record_kind: str  # the record's kind: how `load_run` / `workbench report` read the run back
    model_dir: Path
    neuron: bool

    def labels(self) -> list[str]:
        """The variants the plan sends to Ray, in its order (an LLM variant that cannot run is not)."""
        ...

    def ask(self, label: str) -> Ask: ...

    def points(self, label: str) -> int:
        """How many points of the plan the variant has."""
        ...

    def job(self, label: str, run_label: str) -> Job: ...

    def measured(self, rows: list[dict]) -> set[str]:
        """Labels of the variants whose every point has an error-free row (a resume skips them)."""
        ...

    def read_rows(self, path: Path) -> list[dict]:
        """The rows of the run's points file, one per point."""
        ...

    def record_fields(self) -> dict[str, Any]:
        """The kind's fields of the record (what the run measured and how)."""
        ...

    def changed(self, previous: Mapping[str, Any]) -> str | None:
        """What a resume of ``previous`` (this kind's record) would measure differently, or None."""
        ...

    def result(self, rows: list[dict], record: Mapping[str, Any], out_dir: Path) -> SavedRun:
        """The run as its kind reads it back."""
        ...

    def export_frame(self, result: SavedRun) -> pd.DataFrame:
        """The table results.csv / results.json export."""
        ...


def _plan_changed(previous: Mapping[str, Any], plan: dict) -> str | None:
    if previous.get("plan") != plan:
        return f"it measured another plan ({previous.get('plan')})"
    return None


class _PlanOnRay:
    """What both kinds do alike with their plan's variants (``variants``: those sent, by label) and
    rows (``key_columns`` name a point, ``int_columns`` are read as whole numbers)."""

    plan: Any  # a SweepPlan or an LlmPlan: each has ``points(variant)`` whose ``key`` is the row's
    variants: Mapping[str, Any]
    key_columns: tuple[str, ...]
    int_columns: tuple[str, ...]

    def labels(self) -> list[str]:
        return list(self.variants)

    def points(self, label: str) -> int:
        return len(self.plan.points(self.variants[label]))

    def measured(self, rows: list[dict]) -> set[str]:
        good = {tuple(r.get(c) for c in self.key_columns) for r in rows if not r.get("error")}
        return {label for label, v in self.variants.items() if all(p.key in good for p in self.plan.points(v))}

    def read_rows(self, path: Path) -> list[dict]:
        return unique_rows(read_points(path, self.key_columns, self.int_columns), self.key_columns)


class TensorOnRay(_PlanOnRay):
    """A tensor model's `SweepPlan` on Ray: a variant per allocation x batching x parameters."""

    record_kind = RUN_KIND
    key_columns, int_columns = tuple(KEY_COLUMNS), tuple(INT_COLUMNS)

    def __init__(self, plan: SweepPlan, model_dir: Path, settings: MeasureSettings) -> None:
        base = read_config(model_dir)
        self.plan, self.model_dir, self.settings = plan, model_dir, settings
        self.neuron = neuron_target(base)
        self.variants = {v.label: v for v in plan.variants(base)}  # the whole plan checked before anything is shipped

    def ask(self, label: str) -> Ask:
        return variant_ask(self.variants[label], self.neuron)

    def job(self, label: str, run_label: str) -> Job:
        return VariantJob(label, self.plan, self.model_dir.name, self.settings, self.neuron, run_label)

    def record_fields(self) -> dict[str, Any]:
        return {
            "plan": self.plan.to_dict(),
            "settings": {"model": self.model_dir.name, **self.settings.to_dict()},
            "seed": self.settings.seed,
            "target": "neuron" if self.neuron else "cpu",
            "variants": {label: v.config_json() for label, v in self.variants.items()},
        }

    def changed(self, previous: Mapping[str, Any]) -> str | None:
        return _plan_changed(previous, self.plan.to_dict())

    def result(self, rows: list[dict], record: Mapping[str, Any], out_dir: Path) -> SavedRun:
        return SweepResult(frame_from_rows(rows), RunRecord.from_dict(record), out_dir)

    def export_frame(self, result: SavedRun) -> pd.DataFrame:
        return result.frame


class LlmOnRay(_PlanOnRay):
    """A vLLM-backend model's `LlmPlan` on Ray: a variant per max_num_seqs x tensor-parallel degree
    x instances, its loads its points; recorded as any LLM run (kind ``llm``), so it reads back as one.

    The variants are generated and checked here, on the driver; one that cannot run (the backend's
    checks, more tensor-parallel workers than this machine's NUMA nodes on the CPU) is recorded as
    skipped and not sent."""

    key_columns, int_columns = tuple(LLM_KEY_COLUMNS), tuple(LLM_INT_COLUMNS)

    def __init__(self, plan: LlmPlan, model_dir: Path, settings: MeasureSettings, load_timeout_s: float) -> None:
        # run-time: the LLM sweep's record fields come with its runner
        from workbench.measure.llm.run import LlmSweep

        self.record_kind = LlmSweep.kind
        self.plan, self.model_dir, self.settings, self.load_timeout_s = plan, model_dir, settings, load_timeout_s
        base = read_back(model_dir).settings
        self.neuron = base.target != "cpu"
        self.target = base.target
        self.all_variants = plan.variants(base)
        self.variants = {v.label: v for v in self.all_variants if not v.skipped}

    def ask(self, label: str) -> Ask:
        return llm_variant_ask(self.variants[label], self.neuron)

    def job(self, label: str, run_label: str) -> Job:
        return LlmVariantJob(
            label, self.plan, self.model_dir.name, self.settings, self.neuron, run_label, self.load_timeout_s
        )

    def record_fields(self) -> dict[str, Any]:
        from workbench.measure.llm.run import llm_meaning

        return {
            **llm_meaning(self.plan, self.settings, None),
            "plan": self.plan.to_dict(),
            "variants": {v.label: v.to_dict() for v in self.all_variants},
            "skipped": {v.label: v.skipped for v in self.all_variants if v.skipped},
            "target": self.target,
        }

    def changed(self, previous: Mapping[str, Any]) -> str | None:
        if previous.get("settings") != self.settings.to_dict():
            return f"it was measured with other settings ({previous.get('settings')})"
        return _plan_changed(previous, self.plan.to_dict())

    def result(self, rows: list[dict], record: Mapping[str, Any], out_dir: Path) -> SavedRun:
        return LlmSweepResult(llm_frame(rows), RunRecord.from_dict(record), out_dir)

    def export_frame(self, result: SavedRun) -> pd.DataFrame:
        from workbench.measure.llm.run import llm_export_frame

        return llm_export_frame(result.frame, self.plan)


def ray_kind(
    plan: SweepPlan | LlmPlan, model_dir: Path, settings: MeasureSettings, load_timeout_s: float | None = None
) -> RayKind:
    """The one switch: the model's backend says the kind (a token-streaming backend sweeps an
    `LlmPlan`, any other a `SweepPlan`); a plan of the other kind is refused, naming both."""
    if not (model_dir / "config.pbtxt").is_file():
        raise SweepError(f"{model_dir} is not a generated model directory (no config.pbtxt)")
    streams = backend_of_config(read_config(model_dir)).streams_tokens
    if streams and isinstance(plan, LlmPlan):
        from workbench.measure.llm.run import LOAD_TIMEOUT_S

        return LlmOnRay(plan, model_dir, settings, LOAD_TIMEOUT_S if load_timeout_s is None else load_timeout_s)
    if not streams and isinstance(plan, SweepPlan):
        return TensorOnRay(plan, model_dir, settings)
    wanted = "an LlmPlan (workbench.measure.llm)" if streams else "a SweepPlan"
    what = "streams tokens (an LLM sweep)" if streams else "is a tensor model"
    raise SweepError(f"{model_dir.name} {what}: give {wanted}, not a {type(plan).__name__}")
