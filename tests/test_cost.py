"""Cost: the price table (every entry says how it was checked), cost per million inferences, a
variant charged for its share of the instance's cores, and the cheapest point under a budget.
Tables are written by hand (test_results' helper) so the expected answers are known exactly."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from test_results import point
from workbench.measure.store.cost import PRICES, CostError, best_by_cost, cost_per_million, price_of, price_table, with_cost
from workbench.measure.store.results import frame_from_rows
from workbench.system import DEVICES_BY_INSTANCE


def test_every_instance_type_the_workbench_knows_has_a_price_entry_saying_how_it_was_checked():
    assert set(PRICES) == set(DEVICES_BY_INSTANCE)
    for price in PRICES.values():
        assert price.verified in ("secondary", "unverified") and price.source
        assert price.usd_per_hour is None or price.usd_per_hour > 0
    table = price_table()
    assert table.loc[table["instance_type"] == "inf2.xlarge", "cores"].item() == 2


def test_user_prices_override_and_add_types_and_bad_ones_are_named():
    assert price_of("inf2.xlarge", {"inf2.xlarge": 0.5}).usd_per_hour == 0.5
    assert price_of("INF2.XLARGE").usd_per_hour == PRICES["inf2.xlarge"].usd_per_hour
    assert price_table({"c7i.large": 0.09}).iloc[-1].to_dict()["verified"] == "user"
    with pytest.raises(CostError, match="no price for instance type 'x1.huge'"):
        price_of("x1.huge")
    with pytest.raises(CostError, match="trn2.48xlarge: no price found"):
        price_of("trn2.48xlarge")
    with pytest.raises(CostError, match="must be a positive number"):
        price_of("inf2.xlarge", {"inf2.xlarge": -1})


def test_cost_per_million_inferences():
    assert cost_per_million(1000.0, 3.6) == pytest.approx(1.0)  # 3.6 M inferences per hour for $3.60
    assert cost_per_million(0.0, 1.0) == math.inf


def test_the_cheapest_point_is_not_always_the_fastest():
    rows = [point("1x1", 8, 2, throughput=600, p99=8), point("2x1", 8, 2, throughput=1000, p99=7),
            point("1x1", 8, 4, throughput=700, p99=30)]
    frame = frame_from_rows(rows)
    costed = with_cost(frame, "inf2.xlarge", prices={"inf2.xlarge": 1.0})
    assert costed["usd_per_hour"].tolist() == [0.5, 1.0, 0.5]  # the share of inf2.xlarge's 2 NeuronCores
    best = best_by_cost(frame, "inf2.xlarge", latency_budget_ms=10, prices={"inf2.xlarge": 1.0})
    assert (best["variant"], best["throughput"]) == ("1x1", 600)
    assert best["cost_per_million_usd"] == pytest.approx(0.5 / (600 * 3600) * 1e6)
    whole = best_by_cost(frame, "inf2.xlarge", latency_budget_ms=10, prices={"inf2.xlarge": 1.0}, whole_instance=True)
    assert whole["variant"] == "2x1"  # charged the whole instance, the faster one is cheaper
    assert best_by_cost(frame, "inf2.xlarge", latency_budget_ms=1) is None
    with pytest.raises(CostError, match="holds 2 cores but inf2.xlarge has 1"):
        with_cost(frame, "inf2.xlarge", instance_cores=1)
    with pytest.raises(CostError, match="how many cores has c7i.large"):
        with_cost(frame, "c7i.large", prices={"c7i.large": 0.1})
    assert isinstance(with_cost(frame, "c7i.large", prices={"c7i.large": 0.1}, instance_cores=2), pd.DataFrame)
