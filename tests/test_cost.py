"""Cost: the price table (every entry says how it was checked), cost per million inferences, a
variant charged for its share of the instance's cores, and the cheapest point under a budget.
Tables are written by hand (test_results' helper) so the expected answers are known exactly."""

from __future__ import annotations

import math
import re

import pandas as pd
import pytest

from test_results import point
from workbench.measure.store.cost import (CPU, NEURON, PRICE_PAGE, PRICES, CostError, best_by_cost, cost_per_million,
                                          measured_on, price_for_run, price_of, price_table, with_cost)
from workbench.measure.store.results import frame_from_rows
from workbench.system import DEVICES_BY_INSTANCE


def test_every_instance_type_the_workbench_knows_has_a_price_entry_saying_how_it_was_checked():
    assert {name for name, p in PRICES.items() if p.hardware == NEURON} == set(DEVICES_BY_INSTANCE)
    cpu = {name: p for name, p in PRICES.items() if p.hardware == CPU}
    assert cpu and all(p.cores and p.usd_per_hour for p in cpu.values())  # vCPUs: a variant's share
    for price in PRICES.values():
        assert price.verified in ("secondary", "unverified") and price.source
        assert price.usd_per_hour is None or price.usd_per_hour > 0
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", price.as_of), price  # when it was looked up
        assert "search tool" not in price.source
        if price.usd_per_hour is not None:
            assert "https://" in price.source  # a public page, named
        if price.usd_per_hour is not None and price.verified == "unverified":
            assert PRICE_PAGE in price.source  # the provider's price list, to check it on
    table = price_table()
    assert table.loc[table["instance_type"] == "inf2.xlarge", "cores"].item() == 2
    assert table.loc[table["instance_type"] == "m7i.large", "cores"].item() == 2
    assert {"hardware", "as_of", "source"} <= set(table.columns)


def test_a_run_is_priced_only_as_the_hardware_it_was_measured_on():
    assert measured_on({"target": "cpu", "machine": {"neuron_devices": 4}}) == CPU  # a CPU model runs on CPUs
    assert measured_on({"target": "inf2", "machine": {"neuron_devices": 0}, "url": "127.0.0.1:8001"}) == CPU
    assert measured_on({"machine": {"neuron_devices": 1}}) == NEURON
    assert measured_on({"machine": {}, "url": "grpc://10.0.0.5:8001"}) == NEURON  # elsewhere: the user names it
    on_cpu = {"target": "cpu"}
    with pytest.raises(CostError, match="not priced as inf2.xlarge: measured on the CPU, and inf2.xlarge is a "
                                        "Neuron instance; price it as m7i.large"):
        price_for_run("inf2.xlarge", on_cpu)
    with pytest.raises(CostError, match="measured on the CPU"):
        price_for_run("trn1.2xlarge", on_cpu, {"trn1.2xlarge": 0.1})  # the user's price for Neuron: still not
    assert price_for_run("m7i.large", on_cpu).usd_per_hour == 0.1008
    assert price_for_run("c6a.large", on_cpu, {"c6a.large": 0.0765}).verified == "user"  # a type only they know
    with pytest.raises(CostError, match="measured on Neuron hardware, and m7i.large is a CPU instance"):
        price_for_run("m7i.large", {"machine": {"neuron_devices": 1}})


def test_user_prices_override_and_add_types_and_bad_ones_are_named():
    assert price_of("inf2.xlarge", {"inf2.xlarge": 0.5}).usd_per_hour == 0.5
    assert price_of("INF2.XLARGE").usd_per_hour == PRICES["inf2.xlarge"].usd_per_hour
    assert price_table({"c6a.large": 0.09}).iloc[-1].to_dict()["verified"] == "user"
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
    with pytest.raises(CostError, match="how many cores has c6a.large"):
        with_cost(frame, "c6a.large", prices={"c6a.large": 0.1})
    assert isinstance(with_cost(frame, "c6a.large", prices={"c6a.large": 0.1}, instance_cores=2), pd.DataFrame)
    assert with_cost(frame, "m7i.large")["usd_per_hour"].tolist() == [0.0504, 0.1008, 0.0504]  # its 2 vCPUs
