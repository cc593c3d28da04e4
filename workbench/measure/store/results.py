"""A sweep's results: its table and run record read back from its folder (`folder.py` reads and
writes the files), and the questions asked of them, each rule written once: which configuration is
best under a budget, what changed between two runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import pandas as pd

from workbench.files import strict_json
from workbench.measure.engine.measure_settings import MeasureSettings
from workbench.measure.grid.rows import COLUMNS, KEY_COLUMNS, flag, usable
from workbench.measure.store.confidence import confidence
from workbench.measure.store.folder import (
    CSV_FILE,
    JSON_FILE,
    POINTS_FILE,
    RECORD_FILE,
    SCREENING_FILE,
    ResultsError,
    RunRecord,
    append_point,
    frame_from_rows,
    read_points,
    read_record,
    run_file_text,
    write_exports,
    write_record,
)
from workbench.measure.store.kinds import run_kind
from workbench.measure.store.notes import point_notes

__all__ = [
    "POINTS_FILE",
    "RECORD_FILE",
    "SCREENING_FILE",
    "CSV_FILE",
    "JSON_FILE",
    "KEY_COLUMNS",
    "COLUMNS",
    "ResultsError",
    "RunRecord",
    "SavedRun",
    "ReportSections",
    "SweepResult",
    "Comparison",
    "frame_from_rows",
    "read_points",
    "append_point",
    "write_exports",
    "write_record",
    "load_run",
    "load_saved",
    "list_runs",
    "best_point",
    "runner_up_of",
    "describe_best",
    "compare_runs",
    "backend_variant",
    "node_name",
]


def node_name(node_id: str) -> str:
    """A Ray node as tables and progress show it: its id's first 8 hex digits (56 in full)."""
    return node_id[:8]


class ReadableFrame(pd.DataFrame):
    """A results table that a notebook shows as people read it (`workbench.measure.store.table`: short titles
    with units, rounded numbers, one-line rows); as data it is the plain frame, and anything made
    from it is a plain DataFrame again."""

    @property
    def _constructor(self):
        return pd.DataFrame

    def _repr_html_(self) -> str:
        # run-time circle: sweep/'s package imports this module; table: only when shown
        from workbench.measure.store.table import table_html

        return table_html(pd.DataFrame(self))


@dataclass
class ReportSections:
    """What a kind shows in a run's report (`workbench report`), as plain values: titled fact
    lines, titled figures (matplotlib), the points whose numbers did not settle, each in words, and
    every way to measure it again as (kind, text)."""

    facts: list[tuple[str, list[tuple[str, str]]]]
    figures: list[tuple[str, Any]]
    unstable: list[str]
    again: list[tuple[str, str]]


@dataclass
class SavedRun:
    """A run's table and record, as every kind of sweep saves them; ``path`` is its folder (None
    for an unsaved table)."""

    frame: pd.DataFrame
    record: RunRecord = field(default_factory=RunRecord)
    path: Path | None = None

    # what its figures count, in words (a refused comparison names both)
    what: ClassVar[str] = "a tensor sweep measured in inferences"
    # the function that reads such a run back (named when another reader is given one)
    reader: ClassVar[str] = "workbench.load_run"

    def __post_init__(self) -> None:
        if not isinstance(self.record, RunRecord):  # a mapping as read from a file or written by hand
            self.record = RunRecord.from_dict(self.record)

    def describe_best(self) -> str:
        """The best configuration in one sentence with its confidence, as each kind judges it."""
        raise NotImplementedError(f"runs of {self.what} name no best configuration")

    def table(self) -> pd.DataFrame:
        """The columns people read first, one row per point (each kind chooses them)."""
        return self.frame

    @property
    def status(self) -> str:
        """``complete``, ``cancelled``, ``failed`` or ``running`` (the last session's outcome)."""
        return self.record.status

    @property
    def complete(self) -> bool:
        return self.status == "complete"

    @property
    def label(self) -> str:
        return self.record.label or (self.path.name if self.path else "run")

    def best_throughput(self) -> float:
        """The best usable inferences per second, for run lists (NaN: none, or not counted in inferences)."""
        return float("nan")

    def compare(self, other: Any) -> Any:
        """``other`` (B) against this run (A), in this kind's terms: a value with ``table``,
        ``summary()`` and ``differences()``."""
        raise ResultsError(f"runs of {self.what} cannot be compared")

    def report_sections(self) -> ReportSections:
        """This kind's sections of the run's report."""
        raise ResultsError(f"no report is written for runs of {self.what}")


@dataclass
class SweepResult(SavedRun):
    """A tensor sweep's table and run record (inferences per second against latency)."""

    # whether its variants are named "backend: variant" (a backend comparison's joined table), so a
    # plain run is renamed the same way before the two are joined
    led_by_backend: ClassVar[bool] = False

    @property
    def settings(self) -> MeasureSettings | None:
        """How the run was measured (to measure again the same way); None without a record of it."""
        recorded = self.record.settings
        return MeasureSettings.from_dict(recorded) if recorded else None

    def best(self, latency_budget_ms: float | None = None, min_throughput: float | None = None) -> pd.Series | None:
        return best_point(self.frame, latency_budget_ms=latency_budget_ms, min_throughput=min_throughput)

    def best_throughput(self) -> float:
        best = self.best()
        return float(best["throughput"]) if best is not None else float("nan")

    def compare(self, other: SweepResult) -> Comparison:
        return _compare_tensor(self, other)

    def describe_best(self, latency_budget_ms: float | None = None, min_throughput: float | None = None) -> str:
        return describe_best(self.frame, latency_budget_ms=latency_budget_ms, min_throughput=min_throughput)

    def table(self) -> pd.DataFrame:
        """The columns people read first, one row per point: the numbers with their spread, whether
        they are stable, and what the load generator itself cost."""
        columns = [
            "allocation",
            "batching",
            "parameters",
            "batch_size",
            "concurrency",
            "throughput",
            "throughput_low",
            "throughput_high",
            "p50_ms",
            "p99_ms",
            "p99_low_ms",
            "p99_high_ms",
            "stable",
            "requests",
            "send_delay_us",
            "client_cpu_us",
            "outputs_ok",
            "failures",
            "avg_batch",
            "engine",
            "error",
        ]
        always = {
            "allocation",
            "batch_size",
            "concurrency",
            "throughput",
            "throughput_low",
            "throughput_high",
            "p50_ms",
            "p99_ms",
            "p99_low_ms",
            "p99_high_ms",
            "stable",
            "requests",
            "send_delay_us",
            "client_cpu_us",
            "outputs_ok",
        }
        columns = ["served_by"] + columns  # shown when the backends differ (a backend comparison)
        frame = self.frame
        if "node" in frame.columns:  # a Ray sweep: the node that measured the row
            frame = frame.assign(node=frame["node"].astype(str).map(node_name))
        for where in ("server", "node"):  # server: a run fanned out over --url servers before Ray
            if where in frame.columns:
                columns = [where] + columns
                always.add(where)
        table = frame[columns]
        # Columns that say the same thing on every row only add width.
        keep = [c for c in columns if c in always or table[c].astype(str).nunique() > 1]
        table = table[keep]
        notes = point_notes(self.frame)  # unstable points, p50 falling with batch: what the server shows
        return ReadableFrame(table.assign(note=notes) if notes.astype(bool).any() else table)

    @property
    def engine_note(self) -> str:
        """``"measured by perf_analyzer: <why>"``, from the run record (empty for runs that predate it)."""
        choice = self.record.engine if isinstance(self.record.engine, dict) else {}
        return f"measured by {choice['engine']}: {choice.get('reason', '')}" if choice.get("engine") else ""


def load_run(path: str | Path) -> SweepResult:
    """A saved run: its folder (``run.json`` + ``points.jsonl``) or a ``results.json`` file."""
    path = Path(path)
    if path.is_file():
        try:
            data = strict_json(run_file_text(path))  # a regular file of UTF-8 text, or ResultsError
            record = RunRecord.from_dict(data["record"])
            _tensor_rows(record, path)
            return SweepResult(frame_from_rows(data["points"]), record, path.parent)
        except ResultsError:
            raise
        except (ValueError, KeyError, TypeError, AttributeError) as err:
            raise ResultsError(f"{path} is not a results.json written by a sweep ({err})") from None
    run = load_saved(path)
    _tensor_rows(run.record, path)
    return run  # type: ignore[return-value]


def _tensor_rows(record: RunRecord, path: Path) -> None:
    """Refuse a run whose rows are not a tensor table, naming its kind's reader."""
    kind = run_kind(record.kind)
    result = kind.result_type if kind is not None else SweepResult
    if not issubclass(result, SweepResult):
        raise ResultsError(f"{path} is {result.what}: open it with {result.reader}")


def load_saved(path: str | Path) -> SavedRun:
    """A saved run of any kind from its folder, read by its kind (`kinds.run_kind`); a record whose
    kind is not registered is a tensor table (a tensor sweep, or an older fan-out of them)."""
    path = Path(path)
    record = read_record(path)
    kind = run_kind(record.kind)
    if kind is not None:
        return kind.load(path, record)
    # run-time circle: sweep/'s package imports this module
    from workbench.measure.sweep.resume import unique_rows

    return SweepResult(frame_from_rows(unique_rows(read_points(path / POINTS_FILE))), record, path)


def record_kind(path: str | Path) -> str | None:
    """The ``kind`` a run folder's record says (``"tensor"``, ``"llm"``, ``"backends"``; None: no record)."""
    try:
        return read_record(path).kind
    except (OSError, ResultsError):
        return None  # load_run says what is wrong with it


def list_runs(folder: str | Path) -> pd.DataFrame:
    """One row per run folder found in ``folder`` (and ``folder`` itself), newest first."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ResultsError(f"{folder} is not a folder")
    candidates = [folder] + sorted(p for p in folder.iterdir() if p.is_dir())
    rows = []
    for candidate in candidates:
        if not (candidate / RECORD_FILE).is_file():
            continue
        run = load_saved(candidate)
        rows.append(
            {
                "path": str(candidate),
                "label": run.label,
                "model": run.record.model or "",
                "status": run.status,
                "points": len(run.frame),
                "planned": run.record.planned_points,
                "started": run.record.started or "",
                "ended": run.record.ended or "",
                "best_throughput": run.best_throughput(),  # NaN for a kind not counted in inferences
            }
        )
    columns = ["path", "label", "model", "status", "points", "planned", "started", "ended", "best_throughput"]
    return pd.DataFrame(rows, columns=columns).sort_values("started", ascending=False, ignore_index=True)


def usable_points(frame: pd.DataFrame) -> pd.DataFrame:
    """The points whose numbers can be trusted (`rows.usable`)."""
    return frame[[usable(point) for point in frame.to_dict("records")]] if len(frame) else frame


def qualifying(usable: pd.DataFrame, latency_budget_ms: float | None, min_throughput: float | None) -> pd.DataFrame:
    out = usable
    if latency_budget_ms is not None:
        out = out[out["p99_ms"].astype(float) <= float(latency_budget_ms)]
    if min_throughput is not None:
        out = out[out["throughput"].astype(float) >= float(min_throughput)]
    return out


def best_point(
    frame: pd.DataFrame, *, latency_budget_ms: float | None = None, min_throughput: float | None = None
) -> pd.Series | None:
    """The best usable point: the highest throughput with p99 within ``latency_budget_ms``; with only
    a throughput floor, the lowest p99 reaching it; with both, the highest throughput meeting both.
    None when no usable point qualifies. Points with failures or wrong outputs never qualify."""
    missing = [c for c in ("throughput", "p99_ms", "failures", "outputs_ok") if c not in frame.columns]
    if missing:
        raise ResultsError(f"results table lacks column(s) {missing}")
    candidates = qualifying(usable_points(frame), latency_budget_ms, min_throughput)
    if candidates.empty:
        return None
    if min_throughput is not None and latency_budget_ms is None:
        order = candidates.sort_values(["p99_ms", "throughput"], ascending=[True, False], kind="stable")
    else:
        order = candidates.sort_values(["throughput", "p99_ms"], ascending=[False, True], kind="stable")
    return order.iloc[0]


def runner_up_of(
    frame: pd.DataFrame,
    best: pd.Series | None,
    *,
    latency_budget_ms: float | None = None,
    min_throughput: float | None = None,
) -> pd.Series | None:
    """The best point of another configuration than ``best``'s (another variant or batch size:
    another concurrency of the same configuration is only a load level); None without one."""
    if best is None:
        return None
    other = frame[(frame["variant"] != best["variant"]) | (frame["batch_size"] != best["batch_size"])]
    return best_point(other, latency_budget_ms=latency_budget_ms, min_throughput=min_throughput) if len(other) else None


def _point_text(point: pd.Series, backends: bool = False) -> str:
    """The point in words; ``backends``: the run compares backends, so say which served it."""
    extra = "".join(
        f", {point[c]}"
        for c in ("batching", "parameters")
        if isinstance(point.get(c), str) and point[c] and point[c] != "as configured"
    )
    served = f"served by {point['served_by']}: " if isinstance(point.get("served_by"), str) and backends else ""
    text = (
        f"{served}{point['allocation']} ({int(point['instances'])} instance(s) x {int(point['cores_per_instance'])} core(s)"
        f"{extra}), batch {int(point['batch_size'])}, concurrency {int(point['concurrency'])}: "
        f"{float(point['throughput']):.1f} infer/s, p50 {float(point['p50_ms']):.2f} ms, p99 {float(point['p99_ms']):.2f} ms"
    )
    if flag(point.get("stable")) is False:
        text += " (measurement did not stabilise; re-run with a longer window to confirm)"
    return text


def describe_best(
    frame: pd.DataFrame, *, latency_budget_ms: float | None = None, min_throughput: float | None = None
) -> str:
    """One sentence naming the best configuration and the constraint it meets (or why none does)."""
    usable = usable_points(frame)
    constraint = []
    if latency_budget_ms is not None:
        constraint.append(f"p99 <= {latency_budget_ms:g} ms")
    if min_throughput is not None:
        constraint.append(f"throughput >= {min_throughput:g} infer/s")
    goal = "lowest p99" if (min_throughput is not None and latency_budget_ms is None) else "highest throughput"
    where = f" with {' and '.join(constraint)}" if constraint else ""
    excluded = len(frame) - len(usable)
    note = f" ({excluded} point(s) excluded for failed requests, wrong outputs or errors)" if excluded else ""
    best = best_point(frame, latency_budget_ms=latency_budget_ms, min_throughput=min_throughput)
    backends = "served_by" in frame.columns and frame["served_by"].dropna().nunique() > 1
    if best is None:
        if usable.empty:
            return f"No configuration can be named: none of {len(frame)} point(s) is usable{note}."
        fastest = usable.sort_values("p99_ms").iloc[0]
        strongest = usable.sort_values("throughput", ascending=False).iloc[0]
        return (
            f"No configuration meets {' and '.join(constraint)} across {len(usable)} usable point(s){note}. "
            f"Lowest p99: {_point_text(fastest, backends)}. Highest throughput: {_point_text(strongest, backends)}."
        )
    count = len(qualifying(usable, latency_budget_ms, min_throughput))
    text = (
        f"Best ({goal}{where}, {count} of {len(usable)} usable point(s) qualify): {_point_text(best, backends)}{note}."
    )
    if goal == "highest throughput":  # how sure the order is, against the best of another configuration
        runner_up = runner_up_of(frame, best, latency_budget_ms=latency_budget_ms, min_throughput=min_throughput)
        text += f" Confidence: {confidence(best, runner_up).statement}."
    return text


def backend_variant(served_by: object, variant: str, model: str) -> str:
    """A variant's name in a backend comparison: led by the backend that served it (the model's name
    where none is recorded), so one table holds every backend's "1x1"."""
    return f"{served_by if isinstance(served_by, str) and served_by else model}: {variant}"


def _served_by(run: SweepResult) -> list[str]:
    """The backends that served a run's rows, in order (empty where none is recorded)."""
    if "served_by" not in run.frame.columns:
        return []
    return list(dict.fromkeys(str(b) for b in run.frame["served_by"].dropna()))


def _as_in_a_comparison(run: SweepResult) -> SweepResult:
    """A plain run with its variants named as a backend comparison names them (`backend_variant`),
    so that the two join on the points they share."""
    frame = run.frame.copy()
    served = frame["served_by"] if "served_by" in frame.columns else [None] * len(frame)
    frame["variant"] = [backend_variant(by, v, str(run.record.get("model"))) for by, v in zip(served, frame["variant"])]
    return SweepResult(frame, run.record, run.path)


@dataclass
class Comparison:
    """Two runs joined on their point keys; ratios are B / A."""

    a: SweepResult
    b: SweepResult
    table: pd.DataFrame
    only_a: pd.DataFrame
    only_b: pd.DataFrame

    def differences(self) -> list[str]:
        """How the two runs were not measured alike (measurement settings, engine, points, server
        version, machine, packages): what to weigh before reading any ratio."""
        a, b = self.a.record, self.b.record
        out = []
        sa, sb = a.settings or {}, b.settings or {}
        changed = [
            f"{key} {sa.get(key)!r} -> {sb.get(key)!r}"
            for key in sorted(set(sa) | set(sb))
            if key != "model" and sa.get(key) != sb.get(key)
        ]
        if changed:
            out.append("measured differently: " + "; ".join(changed))
        ea, eb = (
            (run.engine if isinstance(run.engine, dict) else {}).get("engine") or "not recorded" for run in (a, b)
        )
        if ea != eb:
            out.append(
                f"measured by another engine: {ea} -> {eb} (at low latency the clients' own costs differ: "
                "the built-in one, the cheaper client, can read more throughput than perf_analyzer from the "
                "same server; the figures are in benchmarks/README)"
            )
        if len(self.only_a) or len(self.only_b):
            out.append(
                f"different points: {len(self.table)} in common, {len(self.only_a)} only in "
                f"{self.a.label!r}, {len(self.only_b)} only in {self.b.label!r} (ratios cover the common ones)"
            )
        ba, bb = _served_by(self.a), _served_by(self.b)
        if ba != bb:
            out.append(
                f"served by another backend: {', '.join(ba) or 'not recorded'} -> "
                f"{', '.join(bb) or 'not recorded'} (a backend difference, not a measurement one)"
            )
        if a.server_version != b.server_version:
            out.append(f"Triton {a.server_version} -> {b.server_version}")
        ma, mb = a.machine or {}, b.machine or {}
        machine = [
            f"{key} {ma.get(key)!r} -> {mb.get(key)!r}"
            for key in sorted(set(ma) | set(mb))
            if ma.get(key) != mb.get(key)
        ]
        if machine:
            out.append("another machine: " + "; ".join(machine))
        pa, pb = a.packages or {}, b.packages or {}
        packages = [
            f"{key} {pa.get(key)} -> {pb.get(key)}" for key in sorted(set(pa) | set(pb)) if pa.get(key) != pb.get(key)
        ]
        if packages:
            out.append("other packages: " + "; ".join(packages))
        return out

    def summary(self) -> str:
        a, b = self.a.label, self.b.label
        differ = self.differences()
        head = (
            ["How the runs differ:"] + [f"  - {line}" for line in differ]
            if differ
            else ["Both runs were measured alike (settings, engine, points, backend, server, machine, packages)."]
        )
        if self.table.empty:
            return "\n".join(
                head
                + [
                    f"{b!r} and {a!r} share no points (keys {', '.join(KEY_COLUMNS)}); "
                    f"{len(self.only_a)} point(s) only in {a!r}, {len(self.only_b)} only in {b!r}."
                ]
            )
        thr = self.table["throughput_ratio"].astype(float)
        p99 = self.table["p99_ratio"].astype(float)
        lines = head + [
            f"{b!r} vs {a!r}: {len(self.table)} common point(s).",
            f"Throughput x{thr.median():.2f} median (x{thr.min():.2f} to x{thr.max():.2f}); "
            f"p99 latency x{p99.median():.2f} median (x{p99.min():.2f} to x{p99.max():.2f}).",
        ]
        best_a, best_b = self.a.best(), self.b.best()
        if best_a is not None and best_b is not None:
            lines.append(f"Best throughput: {a!r} {_point_text(best_a)}; {b!r} {_point_text(best_b)}.")
        if len(self.only_a) or len(self.only_b):
            lines.append(f"{len(self.only_a)} point(s) only in {a!r}, {len(self.only_b)} only in {b!r}.")
        bad = self.table[~(self.table["outputs_ok_a"].map(_true) & self.table["outputs_ok_b"].map(_true))]
        if len(bad):
            lines.append(
                f"{len(bad)} common point(s) had output mismatches in one run; their ratios are not comparable."
            )
        return "\n".join(lines)


def _true(value: Any) -> bool:
    return flag(value) is True


def compare_runs(a: SavedRun | str | Path, b: SavedRun | str | Path) -> Any:
    """Two runs of one kind compared, B against A, by their kind (`SavedRun.compare`): two tensor
    sweeps joined on (variant, batch size, concurrency) with B/A ratios (a `Comparison`), two LLM
    sweeps as `measure.llm.compare_llm_runs` does. Runs of two kinds are refused: one counts
    tokens, the other inferences."""
    names = [str(run) if isinstance(run, (str, Path)) else repr(run.label) for run in (a, b)]
    a = a if isinstance(a, SavedRun) else load_saved(a)
    b = b if isinstance(b, SavedRun) else load_saved(b)
    if a.what != b.what:
        raise ResultsError(f"cannot compare {names[0]} with {names[1]}: one is {a.what}, the other {b.what}")
    return a.compare(b)


def _compare_tensor(a: SweepResult, b: SweepResult) -> Comparison:
    """Join two tensor runs on (variant, batch size, concurrency): side-by-side numbers and B/A ratios
    (a plain run against a backend comparison: on the points of the backend that served it, the
    comparison's variants being led by their backend)."""
    if a.led_by_backend != b.led_by_backend:  # a backend comparison against a plain run
        a, b = (run if run.led_by_backend else _as_in_a_comparison(run) for run in (a, b))
    keys = list(KEY_COLUMNS)
    metrics = ["throughput", "p50_ms", "p99_ms", "mean_ms", "stable", "outputs_ok", "failures", "avg_batch"]
    left = a.frame[keys + ["allocation", "instances", "cores_per_instance"] + metrics]
    right = b.frame[keys + metrics]
    table = left.merge(right, on=keys, how="inner", suffixes=("_a", "_b"))
    for metric in ("throughput", "p50_ms", "p99_ms"):
        table[f"{metric.removesuffix('_ms')}_ratio"] = table[f"{metric}_b"].astype(float) / table[f"{metric}_a"].astype(
            float
        )
    only_a = a.frame.merge(b.frame[keys], on=keys, how="left", indicator=True).query("_merge == 'left_only'")
    only_b = b.frame.merge(a.frame[keys], on=keys, how="left", indicator=True).query("_merge == 'left_only'")
    return Comparison(a, b, table.reset_index(drop=True), only_a.drop(columns="_merge"), only_b.drop(columns="_merge"))
