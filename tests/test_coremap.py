"""The core split the preview shows and the generated model.py applies."""

import pytest

from workbench.coremap import Allocation, CoreRange, CoreRangeError, describe_ranges, parse_allocations, split_cores


def test_even_split():
    m = split_cores(0, 7, 2)
    assert [list(m.cores(k)) for k in range(2)] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert m.visible_cores(1) == "4-7" and len(m.idle) == 0


def test_uneven_split_reports_idle_cores():
    m = split_cores(0, 7, 3)
    assert m.cores_per_instance == 2
    assert [m.visible_cores(k) for k in range(3)] == ["0-1", "2-3", "4-5"]
    assert list(m.idle) == [6, 7]
    assert "idle: cores 6-7" in m.describe()


def test_single_core_and_offset_range():
    m = split_cores(4, 4, 1, threads_per_core=2)
    assert m.visible_cores(0) == "4" and m.threads() == 2
    assert split_cores(2, 5, 2).rows()[1] == {"instance": 1, "cores": [4, 5], "visible_cores": "4-5", "threads": 2}


@pytest.mark.parametrize(
    "args, message",
    [
        ((3, 1, 1), "reversed"),
        ((0, 1, 3), "cannot give 3 instances"),
        ((0, 1, 0), "instance count must be >= 1"),
        ((-1, 1, 1), "negative"),
    ],
)
def test_bad_allocations(args, message):
    with pytest.raises(CoreRangeError, match=message):
        split_cores(*args)


def test_threads_per_core_must_be_positive():
    with pytest.raises(CoreRangeError, match="threads per core"):
        split_cores(0, 1, 1, threads_per_core=0)


@pytest.mark.parametrize("text", ["0-3", "a:b", "1:2:3", ""])
def test_malformed_range(text):
    with pytest.raises(CoreRangeError, match="malformed"):
        CoreRange.parse(text)
    assert CoreRange.parse("0:3") == CoreRange(0, 3) == CoreRange.parse((0, 3))
    assert str(CoreRange(0, 3)) == "0:3"


def test_a_range_goes_to_config_parameters_and_back():
    cores = CoreRange(2, 5)
    assert cores.parameters() == {"NEURON_CORE_START_INDEX": "2", "NEURON_CORE_END_INDEX": "5"}
    assert CoreRange.from_parameters(cores.parameters()) == cores
    assert CoreRange.from_parameters({"NEURON_CORE_START_INDEX": "3"}) == CoreRange(3, 3)  # as model.py reads it
    assert CoreRange.from_parameters({}) is None
    with pytest.raises(CoreRangeError, match="NEURON_CORE_START_INDEX is missing"):
        CoreRange.from_parameters({"NEURON_CORE_END_INDEX": "3"})
    with pytest.raises(CoreRangeError, match="NEURON_CORE_START_INDEX = 'x' is not an integer"):
        CoreRange.from_parameters({"NEURON_CORE_START_INDEX": "x", "NEURON_CORE_END_INDEX": "3"})


@pytest.mark.parametrize("value", [1.0, True, "1"])
def test_numbers_that_are_not_whole_are_refused_not_converted(value):
    with pytest.raises(CoreRangeError, match="whole number"):
        CoreRange(0, 3).split(value)


def test_an_allocation_is_packed_from_the_start_of_the_range():
    packed = CoreRange(2, 7).pack(Allocation(2, 2))
    assert packed.core_range == CoreRange(2, 5) and [list(packed.cores(k)) for k in range(2)] == [[2, 3], [4, 5]]
    with pytest.raises(CoreRangeError, match="2x4 needs 8 core"):
        CoreRange(0, 3).pack(Allocation.parse("2x4"))


def test_allocations_parse_once_each():
    assert parse_allocations("1x1, 2X1") == (Allocation(1, 1), Allocation(2, 1))
    assert str(Allocation(2, 1)) == "2x1" and Allocation(2, 3).cores == 6
    for text, message in (("2by1", "malformed"), ("0x1", "instances must be a whole number >= 1"), ("1x1,1x1", "listed twice"), ("", "at least one")):
        with pytest.raises(CoreRangeError, match=message):
            parse_allocations(text)


def test_missing_cores_are_named():
    assert CoreRange(0, 3).missing_from({0, 1}) == (CoreRange(2, 3),)
    assert describe_ranges(CoreRange(0, 8191).missing_from({1, 2, 9})) == "0, 3-8, 10-8191"
