"""What a configuration costs: on-demand prices per hour for the instance types the workbench
knows, cost per million inferences, and the cheapest configuration under a p99 budget.

A variant is charged for the share of the instance's cores it holds (instances x cores per
instance over the instance's cores): the rest of the instance can serve other replicas, which is
what makes a small allocation cheaper than a large one at the same throughput. ``whole_instance``
charges the full price instead. Prices are US East (N. Virginia), Linux, on demand; each says
when and where it was found (``as_of``, ``source``: the provider's price list page, or the page
quoting it) and whether it could be checked. Override any (or add a type) with ``prices=``.

A run is priced only as the hardware it was measured on (`measured_on`, `price_for_run`): numbers
measured on the CPU as a CPU instance type (vCPUs as its cores), never as Inferentia or Trainium,
and the other way round (the README: no Neuron figure that was not measured on Neuron).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import pandas as pd

from workbench.measure.store.results import qualifying, usable_points
from workbench.refusals import WorkbenchError
from workbench.system import cores_for_instance

__all__ = [
    "Price",
    "PRICES",
    "PRICE_PAGE",
    "CostError",
    "price_of",
    "price_table",
    "cost_per_million",
    "with_cost",
    "best_by_cost",
    "measured_on",
    "price_for_run",
    "priced_types",
    "NEURON",
    "CPU",
]

PRICE_PAGE = "https://aws.amazon.com/ec2/pricing/on-demand/"  # AWS's own page: check prices there
_SECONDARY = (
    f"{PRICE_PAGE} (AWS's price list), as quoted for us-east-1 in 2026 by a Neuron CI project's public "
    "README (looked up 2026-12-01)"
)
_USAGE_AI = "https://www.usage.ai/blogs/aws/ai-ml-cost/trainium-vs-gpu-instances/ (updated 2026-06-25)"
_NONE_FOUND = "no price found on any page searched 2026-12-01: give one with prices="
_UNVERIFIED = f"not found on any page searched 2026-12-01; from memory of {PRICE_PAGE}: check it there"
_CPU_UNVERIFIED = f"{PRICE_PAGE} (AWS's price list; not checked here: no page with it was found 2026-12-06)"
_CPU_SECONDARY = (
    "https://www.factualminds.com/blog/amazon-ec2-on-demand-pricing-instance-families-2026/ "
    f"(quoting AWS's us-east-1 on-demand rate, 2026-06-17; AWS's list: {PRICE_PAGE})"
)
NEURON, CPU = "neuron", "cpu"  # the hardware a price is for, and a run was measured on


class CostError(WorkbenchError, ValueError):
    """A price or cost that cannot be worked out; the message names the instance type or column."""


@dataclass(frozen=True)
class Price:
    """One instance type's on-demand price. ``verified``: "secondary" (a third-party page quoting
    AWS's price, with its date), "unverified" (no page found), or "user" (given by the user);
    ``as_of`` the day it was looked up; ``hardware`` what it runs a model on (`NEURON` or `CPU`;
    None for a type only the user named); ``cores`` a CPU type's vCPUs (Neuron types: their
    NeuronCores, `cores_for_instance`)."""

    instance_type: str
    usd_per_hour: float | None
    verified: str
    source: str
    as_of: str = "2026-12-01"
    hardware: str | None = NEURON
    cores: int | None = None

    def describe(self) -> str:
        """ "$0.76/h (secondary, 2026-12-01: <source>)"."""
        return f"${self.usd_per_hour:g}/h ({self.verified}, {self.as_of}: {self.source})"


PRICES: dict[str, Price] = {
    p.instance_type: p
    for p in (
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
        # CPU instance types, for runs measured on the CPU (x86 Intel: m7i, c7i; Graviton: m7g)
        Price("m7i.large", 0.1008, "unverified", _CPU_UNVERIFIED, "2026-12-06", CPU, 2),
        Price("m7i.xlarge", 0.2016, "unverified", _CPU_UNVERIFIED, "2026-12-06", CPU, 4),
        Price("c7i.large", 0.08925, "unverified", _CPU_UNVERIFIED, "2026-12-06", CPU, 2),
        Price("c7i.xlarge", 0.1785, "unverified", _CPU_UNVERIFIED, "2026-12-06", CPU, 4),
        Price("m7g.large", 0.0816, "secondary", _CPU_SECONDARY, "2026-06-17", CPU, 2),
    )
}


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
        known = PRICES.get(key)
        return Price(
            key,
            _check_price(key, given[key]),
            "user",
            "given by the user",
            "as given",
            known.hardware if known else None,
            known.cores if known else None,
        )
    price = PRICES.get(key)
    if price is None:
        raise CostError(
            f"no price for instance type {instance_type!r}; known: {', '.join(PRICES)}; "
            "give one with prices={'TYPE': USD_PER_HOUR}"
        )
    if price.usd_per_hour is None:
        raise CostError(f"{key}: {price.source}")
    return price


def measured_on(record: Mapping) -> str:
    """The hardware a run's numbers come from: `CPU` for a model generated for the CPU; else
    `NEURON` where the measuring machine had Neuron devices or the server was elsewhere (a remote
    server's hardware is the user's to name); else `CPU` (a local server without Neuron devices
    served the CPU twin)."""
    if record.get("target") == "cpu":
        return CPU
    machine = record.get("machine") or {}
    url = str(record.get("url") or "")
    local = not url or any(host in url for host in ("127.0.0.1", "localhost", "[::1]"))
    return NEURON if (machine.get("neuron_devices") or 0) > 0 or not local else CPU


def priced_types(hardware: str) -> tuple[str, ...]:
    """The known instance types with a price, of ``hardware`` (`NEURON` or `CPU`)."""
    return tuple(name for name, price in PRICES.items() if price.hardware == hardware and price.usd_per_hour)


def price_for_run(instance_type: str, record: Mapping, prices: Mapping[str, float] | None = None) -> Price:
    """`price_of` ``instance_type`` for the run of ``record``, refused (CostError, saying why and
    what to price it as instead) where the type is other hardware than the run was measured on."""
    price = price_of(instance_type, prices)
    hardware = measured_on(record)
    if price.hardware is not None and price.hardware != hardware:
        what = "the CPU" if hardware == CPU else "Neuron hardware"
        kind = "a Neuron instance" if price.hardware == NEURON else "a CPU instance"
        raise CostError(
            f"not priced as {price.instance_type}: measured on {what}, and {price.instance_type} is "
            f"{kind}; price it as {', '.join(priced_types(hardware))} or give your own price for the "
            "instance it ran on"
        )
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
        rows.append(
            {
                "instance_type": name,
                "hardware": price.hardware,
                "usd_per_hour": price.usd_per_hour,
                "verified": price.verified,
                "as_of": price.as_of,
                "cores": cores_for_instance(name) or price.cores,
                "source": price.source,
            }
        )
    table = pd.DataFrame(rows)
    table["cores"] = table["cores"].astype("Int64")
    return table


def cost_per_million(throughput: float, usd_per_hour: float) -> float:
    """USD per million inferences at ``throughput`` inferences/s for ``usd_per_hour``."""
    return usd_per_hour / (throughput * 3600.0) * 1e6 if throughput > 0 else math.inf


def with_cost(
    frame: pd.DataFrame,
    instance_type: str,
    *,
    prices: Mapping[str, float] | None = None,
    instance_cores: int | None = None,
    whole_instance: bool = False,
) -> pd.DataFrame:
    """``frame`` with ``usd_per_hour`` (the variant's share) and ``cost_per_million_usd`` columns.
    ``instance_cores`` (NeuronCores, or CPUs on a CPU instance) defaults to the type's NeuronCores
    (a CPU type's vCPUs)."""
    price = price_of(instance_type, prices)
    cores = instance_cores if instance_cores is not None else cores_for_instance(instance_type) or price.cores
    if not whole_instance and not cores:
        raise CostError(f"how many cores has {instance_type}? give instance_cores= (or whole_instance=True)")
    out = frame.copy()
    used = out["instances"].astype(float) * out["cores_per_instance"].astype(float)
    if not whole_instance and (used > cores).any():
        raise CostError(f"a variant holds {int(used.max())} cores but {instance_type} has {cores}")
    share = 1.0 if whole_instance else used / cores
    assert price.usd_per_hour is not None  # price_of refuses an instance type without one
    out["usd_per_hour"] = price.usd_per_hour * share
    out["cost_per_million_usd"] = [
        cost_per_million(t, h) if not pd.isna(t) else math.nan
        for t, h in zip(out["throughput"].astype(float), pd.Series(out["usd_per_hour"], index=out.index))
    ]
    return out


def best_by_cost(
    frame: pd.DataFrame,
    instance_type: str,
    *,
    latency_budget_ms: float | None = None,
    prices: Mapping[str, float] | None = None,
    instance_cores: int | None = None,
    whole_instance: bool = False,
) -> pd.Series | None:
    """The usable point with the lowest cost per million inferences within the p99 budget (ties:
    higher throughput); None when none qualifies."""
    costed = with_cost(
        frame, instance_type, prices=prices, instance_cores=instance_cores, whole_instance=whole_instance
    )
    candidates = qualifying(usable_points(costed), latency_budget_ms, None)
    if candidates.empty:
        return None
    order = candidates.sort_values(["cost_per_million_usd", "throughput"], ascending=[True, False], kind="stable")
    return order.iloc[0]
