"""The core split the preview shows and the generated model.py applies."""

import pytest

from workbench.coremap import CoreRangeError, parse_core_range, split_cores


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
        parse_core_range(text)
    assert parse_core_range("0:3") == (0, 3)
