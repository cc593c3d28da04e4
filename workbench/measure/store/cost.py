"""What a configuration costs: on-demand prices per hour for the instance types the workbench
knows, cost per million inferences, and the cheapest configuration under a p99 budget.

A variant is charged for the share of the instance's cores it holds (instances x cores per
instance over the instance's cores): the rest of the instance can serve other replicas, which is
what makes a small allocation cheaper than a large one at the same throughput. ``whole_instance``
charges the full price instead. Prices are US East (N. Virginia), Linux, on demand; each says
where it was found and whether it could be checked. Override any (or add a type) with ``prices=``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

import pandas as pd

from workbench.errors import WorkbenchError
from workbench.measure.store.results import qualifying, usable_points
from workbench.system import cores_for_instance

__all__ = ["Price", "PRICES", "PRICE_PAGE", "CostError", "price_of", "price_table", "cost_per_million",
           "with_cost", "best_by_cost"]

PRICE_PAGE = "https://aws.amazon.com/ec2/pricing/on-demand/"  # AWS's own page: check prices there
_SECONDARY = ("public GitHub README of a Neuron CI project, 'on-demand pricing (us-east-1 as of 2026)' "
              "(found 2026-12-01 with the search tool)")
_USAGE_AI = "https://www.usage.ai/blogs/aws/ai-ml-cost/trainium-vs-gpu-instances/ (updated 2026-06-25)"
_NONE_FOUND = "no price found on any page searched 2026-12-01: give one with prices="
_UNVERIFIED = f"not found on any page searched 2026-12-01; from memory of {PRICE_PAGE}: check it there"


class CostError(WorkbenchError, ValueError):
    """A price or cost that cannot be worked out; the message names the instance type or column."""


@dataclass(frozen=True)
class Price:
    """One instance type's on-demand price. ``verified``: "secondary" (a third-party page quoting
    AWS's price, with its date), "unverified" (no page found), or "user" (given by the user)."""

    instance_type: str
    usd_per_hour: float | None
    verified: str
    source: str


PRICES: dict[str, Price] = {p.instance_type: p for p in (
    Price("inf1.xlarge", 0.228, "unverified", _UNVERIFIED),
    Price("inf1.2xlarge", 0.362, "unverified", _UNVERIFIED),
    Price("inf1.6xlarge", 1.18, "unverified", _UNVERIFIED),
    Price("inf1.24xlarge", 4.721, "unverified", _UNVERIFIED),
    Price("inf2.xlarge", 0.76, "secondary", _SECONDARY),
    Price("inf2.8xlarge", 1.97, "unverified", _UNVERIFIED),
    Price("inf2.24xlarge", 6.49, "unverified", _UNVERIFIED),
    Price("inf2.48xlarge", 12.98, "unverified", _UNVERIFIED),
    Price("trn1.2xlarge", 1.34, "secondary", _SECONDARY),
    Price("trn1.32xlarge", 21.50, "secondary", _USAGE_AI),
    Price("trn1n.32xlarge", 24.78, "unverified", _UNVERIFIED),
    Price("trn2.3xlarge", None, "unverified", _NONE_FOUND),
    Price("trn2.48xlarge", None, "unverified", _NONE_FOUND),
    Price("trn2n.48xlarge", None, "unverified", _NONE_FOUND),
    Price("trn2u.48xlarge", None, "unverified", _NONE_FOUND),
)}


def _check_price(instance_type: str, value: object) -> float:
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise CostError(f"price of {instance_type}: {value!r} is not a number of USD per hour") from None
    if not math.isfinite(number) or number <= 0:
        raise CostError(f"price of {instance_type}: {number} must be a positive number of USD per hour")
    return number


def price_of(instance_type: str, prices: Mapping[str, float] | None = None) -> Price:
    """The price of ``instance_type``: the user's (``prices``) first, then the table's."""
    key = instance_type.strip().lower()
    given = {k.strip().lower(): v for k, v in (prices or {}).items()}
    if key in given:
        return Price(key, _check_price(key, given[key]), "user", "given by the user")
    price = PRICES.get(key)
    if price is None:
        raise CostError(f"no price for instance type {instance_type!r}; known: {', '.join(PRICES)}; "
                        "give one with prices={'TYPE': USD_PER_HOUR}")
    if price.usd_per_hour is None:
        raise CostError(f"{key}: {price.source}")
    return price


def price_table(prices: Mapping[str, float] | None = None) -> pd.DataFrame:
    """Every known (and every given) type with its price, how it was checked and where it came from."""
    names = list(PRICES) + [k.strip().lower() for k in (prices or {}) if k.strip().lower() not in PRICES]
    rows = []
    for name in names:
        try:
            price = price_of(name, prices)
        except CostError:
            price = PRICES[name]
        rows.append({"instance_type": name, "usd_per_hour": price.usd_per_hour, "verified": price.verified,
                     "cores": cores_for_instance(name), "source": price.source})
    table = pd.DataFrame(rows)
    table["cores"] = table["cores"].astype("Int64")
    return table


def cost_per_million(throughput: float, usd_per_hour: float) -> float:
    """USD per million inferences at ``throughput`` inferences/s for ``usd_per_hour``."""
    return usd_per_hour / (throughput * 3600.0) * 1e6 if throughput > 0 else math.inf


def with_cost(frame: pd.DataFrame, instance_type: str, *, prices: Mapping[str, float] | None = None,
              instance_cores: int | None = None, whole_instance: bool = False) -> pd.DataFrame:
    """``frame`` with ``usd_per_hour`` (the variant's share) and ``cost_per_million_usd`` columns.
    ``instance_cores`` (NeuronCores, or CPUs on a CPU instance) defaults to the type's NeuronCores."""
    price = price_of(instance_type, prices)
    cores = instance_cores if instance_cores is not None else cores_for_instance(instance_type)
    if not whole_instance and not cores:
        raise CostError(f"how many cores has {instance_type}? give instance_cores= (or whole_instance=True)")
    out = frame.copy()
    used = out["instances"].astype(float) * out["cores_per_instance"].astype(float)
    if not whole_instance and (used > cores).any():
        raise CostError(f"a variant holds {int(used.max())} cores but {instance_type} has {cores}")
    share = 1.0 if whole_instance else used / cores
    out["usd_per_hour"] = price.usd_per_hour * share
    out["cost_per_million_usd"] = [cost_per_million(t, h) if not pd.isna(t) else math.nan
                                   for t, h in zip(out["throughput"].astype(float),
                                                   pd.Series(out["usd_per_hour"], index=out.index))]
    return out


def best_by_cost(frame: pd.DataFrame, instance_type: str, *, latency_budget_ms: float | None = None,
                 prices: Mapping[str, float] | None = None, instance_cores: int | None = None,
                 whole_instance: bool = False) -> pd.Series | None:
    """The usable point with the lowest cost per million inferences within the p99 budget (ties:
    higher throughput); None when none qualifies."""
    costed = with_cost(frame, instance_type, prices=prices, instance_cores=instance_cores, whole_instance=whole_instance)
    candidates = qualifying(usable_points(costed), latency_budget_ms, None)
    if candidates.empty:
        return None
    order = candidates.sort_values(["cost_per_million_usd", "throughput"], ascending=[True, False], kind="stable")
    return order.iloc[0]
