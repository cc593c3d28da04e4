"""An LLM run's sections of `workbench report`: what was measured and how (lengths, SLO, prompts,
the streaming engine's windows, the vLLM variants and those skipped), its figures (the Pareto front,
latency against load), the points that did not settle, and how to measure it again."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from workbench.measure.llm.answers import load_text
from workbench.measure.store.results import ReportSections, node_name

if TYPE_CHECKING:
    from workbench.measure.llm.result import LlmSweepResult

__all__ = ["llm_report_sections", "llm_call"]


def _text(value: Any) -> str:
    if value is None or value == [] or value == {}:
        return "not recorded"
    if isinstance(value, (list, tuple)):
        return ", ".join(str(v) for v in value)
    if isinstance(value, Mapping):
        return "; ".join(f"{k} {v}" for k, v in value.items() if v is not None) or "none"
    return str(value)


def _lengths(value: Any) -> str:
    if isinstance(value, Mapping):
        spread = f" (+/- {value['spread']})" if value.get("spread") else ""
        return f"{value.get('mean')} tokens, {value.get('distribution', 'fixed')}{spread}"
    return _text(value)


def llm_call(run: LlmSweepResult) -> str:
    """The Python call that measures the run's grid again, from its record alone."""
    record = run.record
    folder = str(run.path) if run.path is not None else (record.label or "run")
    settings = {k: v for k, v in (record.settings or {}).items()}
    search = record.search or {}
    rule = record.effort or {}
    searched = (
        f", search=LlmSearch({search['name']!r}, min_windows={rule.get('min_windows')}, "
        f"max_windows={rule.get('max_windows')})"
        if search
        else ""
    )
    return "\n".join(
        [
            "import workbench",
            "from workbench.measure.llm import LlmPlan, run_llm_sweep" + (", LlmSearch" if search else ""),
            "from workbench.measure import MeasureSettings",
            f"plan = LlmPlan.from_dict({json.dumps(record.plan or {}, sort_keys=True)})",
            f"settings = MeasureSettings.from_dict({json.dumps(settings, sort_keys=True)})",
            "server = ...  # a running TritonServer whose repository holds the model",
            f"result = run_llm_sweep(plan, server, {record.model_dir!r}, out_dir={folder!r}, settings=settings, "
            f"resume=True{searched})",
        ]
    )


def llm_report_sections(run: LlmSweepResult) -> ReportSections:
    record, plan = run.record, run.record.plan or {}
    settings = record.settings or {}
    measured = [
        ("label", run.label),
        ("status", run.status),
        ("started", _text(record.started)),
        ("ended", _text(record.ended)),
        (f"model {record.model}", f"{record.model_dir} (vLLM backend, target {_text(record.target)})"),
        ("max_num_seqs", _text(plan.get("max_num_seqs"))),
        ("tensor-parallel", _text(plan.get("tensor_parallel"))),
        ("instances", _text(plan.get("instances"))),
        (
            "load",
            f"concurrency {_text(plan.get('concurrency'))}"
            if plan.get("concurrency")
            else f"request rate {_text(plan.get('request_rate'))} req/s",
        ),
        ("points", f"{len(run.frame)} measured of {_text(record.planned_points)} planned"),
    ]
    measured += [(f"skipped {label}", why) for label, why in run.skipped.items()]
    how = [
        ("engine", _text(record.engine)),
        ("prompt length", _lengths(record.input_tokens)),
        ("output length", _lengths(record.output_tokens)),
        ("prompts", _text(record.prompts)),
        ("SLO", _text(record.slo)),
        ("protocol", _text(settings.get("protocol"))),
        (
            "windows",
            f"{_text(settings.get('window_s'))} s each, {_text(settings.get('stable_windows'))} agreeing, "
            f"at most {_text(settings.get('max_windows'))}, time limit {_text(settings.get('time_limit_s'))} s",
        ),
        ("effort", _text(record.effort) if record.effort else "every point until stable (no effort rule)"),
        ("server", f"Triton {_text(record.server_version)} {_where(record)}"),
    ]
    search = record.search or {}
    searched = (
        [
            ("strategy", f"{search['name']} ({_text(search.get('params'))})"),
            ("points", f"{search['measured_points']} measured of {search['space_points']}"),
            ("left out", "; ".join(search.get("left_out") or []) or "none"),
        ]
        + [(f"decided {i}", note) for i, note in enumerate(search.get("notes") or [], 1)]
        + [("stopped", _text(search.get("stopped")))]
        if search
        else []
    )
    machine = [(k.replace("_", " "), _text(v)) for k, v in (record.machine or {}).items()]
    versions = [(k, _text(v)) for k, v in (record.packages or {}).items()]
    facts = [
        ("What was measured", measured),
        ("How", how),
        *([("Search: the points it measured and those it left out", searched)] if searched else []),
        ("Machine", machine or [("machine", "not recorded")]),
        ("Versions", versions or [("packages", "not recorded")]),
    ]
    figures: list[tuple[str, Any]] = []
    if run.usable().shape[0]:
        figures = [
            ("Output tokens/s per user against total (Pareto front)", run.plot_pareto()),
            ("TTFT and ITL against load", run.plot_latency()),
        ]
    frame = run.frame
    unstable = [
        f"{row['variant']} at {load_text(row.get('concurrency'), row.get('request_rate'))}: its windows did "
        "not agree (measure it longer to confirm)"
        for _, row in frame.iterrows()
        if "stable" in frame.columns and row.get("stable") is False
    ]
    again = ([("command", record.command)] if record.command else []) + [("python", llm_call(run))]
    return ReportSections(facts=facts, figures=figures, unstable=unstable, again=again)


def _where(record: Any) -> str:
    """Where the server ran: its address, or on a Ray sweep each node's own (the nodes named)."""
    nodes = record.get("nodes") or {}
    if record.get("cluster") == "ray":
        return f"on each Ray node's own server ({', '.join(node_name(n) for n in nodes) or 'no node measured'})"
    return f"at {_text(record.url)}"
