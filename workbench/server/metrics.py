"""Triton's Prometheus metrics as plain Python data.

The metrics endpoint is the only place the server reports process-level numbers (CPU
utilisation and memory with ``--allow-cpu-metrics``, and on a Neuron host whatever the Neuron
exporter adds); the sweep and the UI want them as a dict, not as exposition text.
"""

from __future__ import annotations

from typing import Any

from prometheus_client.parser import text_string_to_metric_families

__all__ = ["parse_metrics", "metric_value"]


def parse_metrics(text: str) -> dict[str, list[dict[str, Any]]]:
    """``{sample name: [{"labels": {...}, "value": float}, ...]}`` from Prometheus text."""
    out: dict[str, list[dict[str, Any]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append({"labels": dict(sample.labels), "value": float(sample.value)})
    return out


def metric_value(metrics: dict[str, list[dict[str, Any]]], name: str, **labels: str) -> float | None:
    """The sum of ``name``'s samples whose labels include ``labels`` (None when absent), e.g.
    ``metric_value(m, "nv_inference_count", model="add")``."""
    samples = [s for s in metrics.get(name, []) if all(s["labels"].get(k) == v for k, v in labels.items())]
    return sum(s["value"] for s in samples) if samples else None
