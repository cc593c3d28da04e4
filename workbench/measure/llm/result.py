"""An LLM sweep's table and run record, and the answers people ask of them: the Pareto front, the
best configuration under SLOs, the cheapest per million output tokens, the plots; a saved run read
back from its folder; two runs compared only where they measured the same thing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pandas as pd
from matplotlib.figure import Figure

from workbench.measure.engine.streaming import Slo
from workbench.measure.llm.answers import (
    LlmAnswer,
    answer_under,
    best_under,
    cheapest_under,
    load_text,
    meeting,
    pareto_front,
    point_text,
    slo_text,
    usable_rows,
    with_token_cost,
)
from workbench.measure.llm.rows import LLM_COLUMNS, LLM_INT_COLUMNS, LLM_KEY_COLUMNS
from workbench.measure.store.cost import CostError, price_for_run
from workbench.measure.store.folder import (
    POINTS_FILE,
    ResultsError,
    RunRecord,
    frame_from_rows,
    read_points,
    read_record,
)
from workbench.measure.store.results import ReadableFrame, ReportSections, SavedRun, node_name

__all__ = ["LlmSweepResult", "llm_frame", "load_llm_run", "compare_llm_runs", "LlmComparison", "MEANING_KEYS"]

# What two LLM runs must share for their figures to compare: the work asked and how it was measured.
MEANING_KEYS = {
    "input_tokens": "prompt lengths",
    "output_tokens": "output lengths",
    "engine": "engine",
    "settings": "measurement settings",
}


def llm_frame(rows: Iterable[dict]) -> pd.DataFrame:
    """The LLM results table in its column order (`rows.LLM_COLUMNS`)."""
    return frame_from_rows(rows, LLM_COLUMNS, LLM_INT_COLUMNS)


@dataclass
class LlmSweepResult(SavedRun):
    """An LLM sweep's table (one row per point) and run record; ``path`` its folder.

    ``pareto()`` the front; ``best(slo)`` / ``cheapest(instance_type, slo)`` the configuration
    (a row) or None; ``answer(slo)`` the best with the runner-up (another variant) and how sure
    their order is (``.confidence``, ``.to_dict()``); ``describe_best`` / ``describe_cheapest`` say
    it in a sentence, the best with its runner-up and confidence; ``verdicts()`` an effort-mode
    run's verdict per point; ``plot_pareto()`` / ``plot_latency()`` the figures; ``save_plots()`` writes them beside the run.
    An SLO left out is the run's own (``record["slo"]``)."""

    what: ClassVar[str] = "an LLM sweep measured in tokens"
    reader: ClassVar[str] = "workbench.measure.llm.load_llm_run"

    @property
    def slo(self) -> Slo:
        given = self.record.slo or {}
        return Slo(ttft_ms=given.get("ttft_ms"), itl_ms=given.get("itl_ms")) if given else Slo()

    @property
    def skipped(self) -> dict[str, str]:
        """Variants generated and checked but not loaded here, with why."""
        return dict(self.record.skipped or {})

    def usable(self) -> pd.DataFrame:
        return usable_rows(self.frame)

    def pareto(self) -> pd.DataFrame:
        return pareto_front(self.frame)

    def meeting(self, slo: Slo | None = None, min_goodput: float | None = None) -> pd.DataFrame:
        return meeting(self.frame, self.slo if slo is None else slo, min_goodput)

    def best(self, slo: Slo | None = None, min_goodput: float | None = None) -> pd.Series | None:
        return best_under(self.frame, self.slo if slo is None else slo, min_goodput)

    def answer(self, slo: Slo | None = None, min_goodput: float | None = None) -> LlmAnswer:
        return answer_under(self.frame, self.slo if slo is None else slo, min_goodput)

    def costed(
        self,
        instance_type: str,
        *,
        prices: Mapping[str, float] | None = None,
        instance_cores: int | None = None,
        whole_instance: bool = False,
    ) -> pd.DataFrame:
        price_for_run(instance_type, self.record, prices)  # only as the hardware it was measured on
        return with_token_cost(
            self.frame, instance_type, prices=prices, instance_cores=instance_cores, whole_instance=whole_instance
        )

    def cheapest(
        self,
        instance_type: str,
        slo: Slo | None = None,
        *,
        min_goodput: float | None = None,
        prices: Mapping[str, float] | None = None,
        instance_cores: int | None = None,
        whole_instance: bool = False,
    ) -> pd.Series | None:
        price_for_run(instance_type, self.record, prices)  # only as the hardware it was measured on
        return cheapest_under(
            self.frame,
            instance_type,
            self.slo if slo is None else slo,
            min_goodput=min_goodput,
            prices=prices,
            instance_cores=instance_cores,
            whole_instance=whole_instance,
        )

    def verdicts(self) -> list[str]:
        """An effort-mode run's verdicts, one sentence per point: "<variant> at <load>: <why its
        windows ended>" (the table's ``stopped`` column, too long for a column); [] for a grid run."""
        if not self.record.effort:
            return []
        return [
            f"{row['variant']} at {load_text(row.get('concurrency'), row.get('request_rate'))}: {row['stopped']}"
            for _, row in self.frame.iterrows()
            if isinstance(row.get("stopped"), str) and row["stopped"]
        ]

    def search_lines(self) -> list[str]:
        """What a search decided, in words: how many points it measured of the grid, each planned
        point it left out, and every decision that measured nothing (on what reading); [] for a
        grid run."""
        search = self.record.search
        if not search:
            return []
        lines = [
            f"search {search['name']}: {search['measured_points']} of {search['space_points']} point(s) measured"
            + (f"; {search['stopped']}" if search.get("stopped") else " (not finished)")
        ]
        left_out = search.get("left_out") or []
        if left_out:
            lines.append(f"left out by the search ({len(left_out)}): " + "; ".join(left_out))
        return lines + [f"search decided, {note}" for note in search.get("notes") or []]

    def describe_best(self, slo: Slo | None = None, min_goodput: float | None = None) -> str:
        slo = self.slo if slo is None else slo
        usable = self.usable()
        found = self.answer(slo, min_goodput)
        best, runner_up = found.best, found.runner_up
        where = slo_text(slo, min_goodput)
        if best is None:
            return (
                f"No configuration meets {where} across {len(usable)} usable point(s) of {len(self.frame)}."
                + self._skipped_note()
            )
        count = len(self.meeting(slo, min_goodput))
        second = (
            f" Runner-up: {runner_up['variant']} ({point_text(runner_up)})."
            if runner_up is not None
            else " No other variant meets it."
        )
        return (
            f"Best (highest output tokens/s with {where}, {count} of {len(usable)} usable point(s) qualify): "
            f"{best['variant']} ({point_text(best)}).{second} Confidence: {found.confidence.statement}."
            + self._skipped_note()
        )

    def describe_cheapest(
        self,
        instance_type: str,
        slo: Slo | None = None,
        *,
        min_goodput: float | None = None,
        prices: Mapping[str, float] | None = None,
        instance_cores: int | None = None,
        whole_instance: bool = False,
    ) -> str:
        slo = self.slo if slo is None else slo
        try:
            price = price_for_run(instance_type, self.record, prices)
        except CostError as err:
            return f"Cost: {err}."
        best = self.cheapest(
            instance_type,
            slo,
            min_goodput=min_goodput,
            prices=prices,
            instance_cores=instance_cores,
            whole_instance=whole_instance,
        )
        on = f"{instance_type} at {price.describe()}"
        if best is None:
            return f"Cheapest on {on}: no configuration meets {slo_text(slo, min_goodput)}."
        return (
            f"Cheapest per million output tokens on {on} with {slo_text(slo, min_goodput)}: {best['variant']} "
            f"({point_text(best)}): ${float(best['usd_per_million_output_tokens']):.4f} per million output "
            f"tokens, ${float(best['usd_per_hour']):.4f}/h for its share of the cores."
        )

    def _skipped_note(self) -> str:
        skipped = self.skipped
        return f" Not measured: {'; '.join(f'{label} ({why})' for label, why in skipped.items())}." if skipped else ""

    def plot_pareto(self) -> Figure:
        from workbench.measure.llm.plots import pareto_plot  # matplotlib's figures: only when drawn

        return pareto_plot(self.frame, f"{self.record.model or 'LLM'}: output tokens/s per user vs total")

    def plot_latency(self) -> Figure:
        from workbench.measure.llm.plots import latency_vs_concurrency  # only when drawn

        return latency_vs_concurrency(self.frame, f"{self.record.model or 'LLM'}: TTFT and ITL")

    def save_plots(self, out_dir: str | Path | None = None) -> dict[str, list[Path]]:
        """Write ``pareto`` and ``latency`` (PNG and SVG) to ``out_dir`` (default ``<run>/plots``)."""
        from workbench.measure.store.plots import save_figure  # only when drawn

        if out_dir is not None:
            out = Path(out_dir)
        elif self.path is not None:
            out = self.path / "plots"
        else:
            raise ResultsError("this result has no folder: give out_dir")
        return {
            name: save_figure(fig, out / name)
            for name, fig in (("pareto", self.plot_pareto()), ("latency", self.plot_latency()))
        }

    def compare(self, other: LlmSweepResult) -> LlmComparison:
        return compare_llm_runs(self, other)

    def report_sections(self) -> ReportSections:
        from workbench.measure.llm.report_sections import llm_report_sections  # figures: only when reported

        return llm_report_sections(self)

    def table(self) -> pd.DataFrame:
        """The columns people read first; a notebook shows them as the app does (titles with units,
        rounded numbers: `workbench.measure.store.table`)."""
        columns = [
            "variant",
            "concurrency",
            "request_rate",
            "output_tokens_per_s",
            "output_tokens_per_s_low",
            "output_tokens_per_s_high",
            "tokens_per_user_per_s",
            "requests_per_s",
            "ttft_p50_ms",
            "ttft_p99_ms",
            "itl_p50_ms",
            "itl_p99_ms",
            "goodput",
            "client_cpu_us_per_token",
            "client_output_tokens",
            "server_output_tokens",
            "stable",
            "stopped",
            "error",
        ]
        frame = self.frame
        if "node" in frame.columns:  # a Ray sweep: the node that measured the row, as the tensor table names it
            frame = frame.assign(node=frame["node"].astype(str).map(node_name))
            columns = ["node"] + columns
        table = frame[columns]
        shown = [c for c in columns if c not in ("request_rate", "concurrency", "error") or table[c].notna().any()]
        return ReadableFrame(table[shown])


def load_llm_run(path: str | Path) -> LlmSweepResult:
    """A saved LLM run from its folder (``run.json`` + ``points.jsonl``)."""
    path = Path(path)
    record = read_record(path)
    if record.kind != "llm":
        raise ResultsError(f"{path} is not an LLM sweep run (its record has no kind 'llm')")
    return read_llm_run(path, record)


def read_llm_run(path: Path, record: RunRecord) -> LlmSweepResult:
    """The LLM run in ``path`` whose record is ``record``: its rows, one per point."""
    from workbench.measure.sweep.resume import unique_rows  # sweep/ imports store/: at call time

    rows = unique_rows(read_points(path / POINTS_FILE, LLM_KEY_COLUMNS, LLM_INT_COLUMNS), LLM_KEY_COLUMNS)
    return LlmSweepResult(llm_frame(rows), record, path)


@dataclass
class LlmComparison:
    """Two LLM runs joined on their points (variant, load); ratios are B / A. ``notes`` names how
    they differ without making the ratios meaningless (the SLO: goodput is left out)."""

    a: LlmSweepResult
    b: LlmSweepResult
    table: pd.DataFrame
    notes: list[str]

    def differences(self) -> list[str]:
        """How the two runs were not measured alike, without making the ratios meaningless."""
        return list(self.notes)

    def summary(self) -> str:
        lines = [f"- {note}" for note in self.notes]
        if self.table.empty:
            return "\n".join(lines + [f"{self.b.label!r} and {self.a.label!r} share no points."])
        ratio = self.table["output_tokens_per_s_ratio"].astype(float)
        return "\n".join(
            lines
            + [
                f"{self.b.label!r} vs {self.a.label!r}: {len(self.table)} common point(s); "
                f"output tokens/s x{ratio.median():.2f} median"
            ]
        )


def _run(run: LlmSweepResult | str | Path) -> LlmSweepResult:
    return run if isinstance(run, LlmSweepResult) else load_llm_run(run)


def compare_llm_runs(a: LlmSweepResult | str | Path, b: LlmSweepResult | str | Path) -> LlmComparison:
    """Join two LLM runs on (variant, concurrency, request rate). Refused (ResultsError naming what
    differs) when their prompt lengths, output lengths, engine or measurement settings differ: the
    same variant then measured other work. Different SLOs are named, and goodput left out."""
    a, b = _run(a), _run(b)
    different = [
        f"{what} {getattr(a.record, key)!r} -> {getattr(b.record, key)!r}"
        for key, what in MEANING_KEYS.items()
        if getattr(a.record, key) != getattr(b.record, key)
    ]
    if different:
        raise ResultsError(
            f"cannot compare {a.label!r} with {b.label!r}: measured with different {'; '.join(different)}"
        )
    notes = []
    metrics = ["output_tokens_per_s", "tokens_per_user_per_s", "ttft_p99_ms", "itl_p99_ms"]
    if a.record.slo != b.record.slo:
        notes.append(f"different SLOs {a.record.slo} -> {b.record.slo}: goodput not compared")
    else:
        metrics.append("goodput")
    keys = list(LLM_KEY_COLUMNS)
    table = a.frame[keys + metrics].merge(b.frame[keys + metrics], on=keys, how="inner", suffixes=("_a", "_b"))
    for metric in metrics:
        table[f"{metric}_ratio"] = table[f"{metric}_b"].astype(float) / table[f"{metric}_a"].astype(float)
    return LlmComparison(a, b, table, notes)
