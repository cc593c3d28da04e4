"""The run record (``run.json``): what a sweep measured, how, on what, and each session's outcome,
as one typed, versioned value. `RunRecord.from_dict` is its one reader and `RunRecord.to_dict`
its one writer (`folder.read_record` / `folder.write_record` put them on disk).

Every kind of sweep writes the same common fields; the fields only some kinds write (a tensor
sweep's search and base config, an LLM sweep's lengths and SLO) are typed here too and left out of
the file while unset. Keys this version does not know (a record written by a newer workbench, a
fan-out's or a backend comparison's own) are kept in ``extra`` and written back unchanged.

A record is also a read-only mapping of its file's keys (``record["status"]``, ``dict(record)``),
so notebooks that read it as the dict it used to be keep working; the workbench reads attributes.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from workbench.measure.store.bounded import BoundedPoint

__all__ = ["RECORD_VERSION", "TENSOR_KIND", "RunRecord", "Session"]

# 1: records written before the version was (no "version" key); 2: the typed record (adds
# "version" and "kind" to every run, "tensor" for the fixed-tensor sweep that had none); 3: adds
# "bounded", the points a search left out by a bound (absent from older records: read as None).
RECORD_VERSION = 3
TENSOR_KIND = "tensor"  # the kind of a record that names none (written before kinds existed)

Session = dict[str, Any]  # one session: started, ended, status, measured, reused (+ loads, restored)

# Written even when unset (null): every run's own facts. Other fields are written once set.
_ALWAYS = (
    "version",
    "kind",
    "label",
    "model",
    "model_dir",
    "started",
    "ended",
    "status",
    "plan",
    "planned_points",
    "sessions",
)


@dataclass(eq=True)
class RunRecord(Mapping[str, Any]):
    """One run's record. ``kind``: the sweep kind that wrote it (``tensor``, ``llm``; a Ray sweep's
    ``ray``; a backend comparison's ``backends`` merges others; ``fanout``: an older run over several
    --url servers); ``status``: ``running``, ``complete``, ``cancelled`` or ``failed`` (the last
    session's outcome)."""

    version: int = RECORD_VERSION
    kind: str = TENSOR_KIND
    label: str | None = None
    model: str | None = None
    model_dir: str | None = None
    started: str | None = None
    ended: str | None = None
    status: str = "unknown"
    plan: dict[str, Any] | None = None
    planned_points: int | None = None
    sessions: list[Session] = field(default_factory=list)
    # how and on what it was measured
    settings: dict[str, Any] | None = None
    engine: dict[str, Any] | str | None = None  # a tensor run's choice {engine, reason}; an LLM run's engine name
    seed: int | None = None
    variants: dict[str, Any] | None = None
    server_version: str | None = None
    fingerprint: dict[str, Any] | None = None
    url: str | None = None
    server: dict[str, Any] | None = None
    machine: dict[str, Any] | None = None
    packages: dict[str, Any] | None = None
    command: str | None = None
    reproduce: dict[str, Any] | None = None
    served_by: dict[str, Any] | None = None
    variant_times: dict[str, Any] | None = None
    # a tensor sweep's
    base_config: dict[str, Any] | None = None
    core_check: list[Any] | None = None
    search: dict[str, Any] | None = None
    bounded: list[BoundedPoint] | None = None  # the points the search's bounds decided, unmeasured
    # an LLM sweep's
    input_tokens: int | None = None
    output_tokens: int | None = None
    slo: dict[str, Any] | None = None
    prompts: int | None = None
    effort: dict[str, Any] | None = None
    skipped: dict[str, str] | None = None
    target: str | None = None
    # keys this version does not know, kept as read
    extra: dict[str, Any] = field(default_factory=dict)

    # ---- the one reader and the one writer ------------------------------------------------------

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunRecord:
        """The record a ``run.json`` object holds, of any version (a version-1 record has no
        ``version`` and, for a tensor sweep, no ``kind``)."""
        if isinstance(data, RunRecord):
            return replace(data, sessions=list(data.sessions), extra=dict(data.extra))
        known = {f.name for f in fields(cls)} - {"extra"}
        values = {key: value for key, value in data.items() if key in known}
        values.setdefault("version", 1)
        if values.get("kind") is None:
            values["kind"] = TENSOR_KIND
        if values.get("status") is None:
            values["status"] = "unknown"
        values["sessions"] = list(values.get("sessions") or [])
        if values.get("bounded") is not None:
            values["bounded"] = [
                point if isinstance(point, BoundedPoint) else BoundedPoint.from_dict(point)
                for point in values["bounded"]
            ]
        return cls(**values, extra={key: value for key, value in data.items() if key not in known})

    def to_dict(self) -> dict[str, Any]:
        """The record as ``run.json`` holds it, in this version's format: the common fields always,
        the others once set."""
        out: dict[str, Any] = {}
        for f in fields(self):
            if f.name == "extra":
                continue
            value: Any = RECORD_VERSION if f.name == "version" else getattr(self, f.name)  # written in this format
            if f.name == "bounded" and self.bounded is not None:
                value = [point.to_dict() for point in self.bounded]
            if value is not None or f.name in _ALWAYS:
                out[f.name] = value
        return {**self.extra, **out}

    def with_changes(self, **changes: Any) -> RunRecord:
        """A copy with ``changes`` (unknown keys go to ``extra``)."""
        return RunRecord.from_dict({**self.to_dict(), **changes})

    # ---- read as the mapping it was -------------------------------------------------------------

    def __getitem__(self, key: str) -> Any:
        return self.to_dict()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.to_dict())

    def __len__(self) -> int:
        return len(self.to_dict())

    def __repr__(self) -> str:
        return f"RunRecord({self.to_dict()!r})"
