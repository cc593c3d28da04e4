"""A point a search left unmeasured because a bound decided it, with the measured point and the
reading that did: the run record's ``bounded`` list (`run_record.RunRecord`), which the report
shows beside the points that were measured.

Two bounds decide points (search/bounds.py): ``throughput`` (throughput grows with the load, so a
heavier point's interval caps a lighter one's: below the incumbent, or below a heavier point that
meets the budget, it cannot win) and ``p99`` (p99 grows with the load, so a lighter point that
missed the budget condemns every heavier one).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["BOUND_KINDS", "BoundedPoint"]

BOUND_KINDS = ("throughput", "p99")


@dataclass(frozen=True)
class BoundedPoint:
    """The point (``variant``, ``batch_size``, ``concurrency``) the ``bound`` decided; ``by``: the
    measured point whose reading did, as (variant, batch size, concurrency); ``value``: that
    reading (a throughput's high end, infer/s, or a p99, ms); ``limit``: what it was held against
    (the incumbent's low end, or the p99 budget; NaN: the measured point itself, which the lighter
    one cannot beat); ``reading``: the comparison in words; ``after_step``: how many points the
    search had measured when it decided."""

    variant: str
    batch_size: int
    concurrency: int
    bound: str
    by: tuple[str, int, int]
    value: float
    limit: float
    reading: str
    after_step: int

    def __post_init__(self) -> None:
        if self.bound not in BOUND_KINDS:
            raise ValueError(f"bound {self.bound!r} is not one of {', '.join(BOUND_KINDS)}")

    @property
    def label(self) -> str:
        return f"{self.variant} batch {self.batch_size} concurrency {self.concurrency}"

    @property
    def by_label(self) -> str:
        variant, batch, concurrency = self.by
        return f"{variant} batch {batch} concurrency {concurrency}"

    def describe(self) -> str:
        """One line for a person: the point, the bound that decided it and the reading."""
        what = "throughput bound" if self.bound == "throughput" else "p99 bound"
        return f"{self.label}: left out by the {what} ({self.reading})"

    def to_dict(self) -> dict[str, Any]:
        return {
            "variant": self.variant,
            "batch_size": self.batch_size,
            "concurrency": self.concurrency,
            "bound": self.bound,
            "by": {"variant": self.by[0], "batch_size": self.by[1], "concurrency": self.by[2]},
            "value": None if math.isnan(self.value) else self.value,
            "limit": None if math.isnan(self.limit) else self.limit,
            "reading": self.reading,
            "after_step": self.after_step,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BoundedPoint:
        by = data["by"]

        def number(key: str) -> float:
            value = data.get(key)
            return math.nan if value is None else float(value)

        return cls(
            str(data["variant"]),
            int(data["batch_size"]),
            int(data["concurrency"]),
            str(data["bound"]),
            (str(by["variant"]), int(by["batch_size"]), int(by["concurrency"])),
            number("value"),
            number("limit"),
            str(data.get("reading", "")),
            int(data.get("after_step", 0)),
        )
