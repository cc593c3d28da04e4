"""Which search to run and its settings, as one value: what `workbench sweep --search` flags and
the sweep panel's strategy controls both describe. A field left None takes the search's default;
a field the chosen search does not use is ignored (a panel keeps every field while the user
switches strategies), except from the command line, where a search's flag that does nothing is
an error.
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass
from typing import Any

from workbench.measure.grid.plan import SweepError
from workbench.measure.sweep.search.base import SearchStrategy

__all__ = [
    "SearchChoice",
    "search_names",
    "parse_percent",
    "parse_optional_count",
    "parse_optional_ms",
    "parse_budget_ms",
]

# optional settings -> the keyword each search takes
_KEYWORDS = ("min_gain", "tries", "screen_window_s", "within")


def search_names() -> tuple[str, ...]:
    """``grid`` first, then every search by name."""
    # run-time circle: the search package imports this module
    from workbench.measure.sweep.search import SEARCHES

    return ("grid", *SEARCHES)


def _blank(text: Any) -> bool:
    return text is None or (isinstance(text, str) and not text.strip())


def _number(text: Any, what: str) -> float:
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise SweepError(f"{what} {text!r} is not a number") from None
    if not math.isfinite(value):
        raise SweepError(f"{what} {text!r} is not a finite number")
    return value


def parse_percent(text: Any) -> float | None:
    """``"5"`` (percent, as the CLI's --min-gain) -> 0.05; blank -> None (the search's default)."""
    return None if _blank(text) else _number(text, "percentage") / 100.0


def parse_optional_count(text: Any) -> int | None:
    """A whole number, or blank for the default."""
    if _blank(text):
        return None
    value = _number(text, "count")
    if value != int(value):
        raise SweepError(f"count {text!r} is not a whole number")
    return int(value)


def parse_optional_ms(text: Any) -> float | None:
    """Milliseconds as text -> seconds; blank -> None (the default)."""
    return None if _blank(text) else _number(text, "milliseconds") / 1000.0


def parse_budget_ms(value: Any) -> float | None:
    """A p99 budget field: 0 or blank is no budget."""
    if _blank(value):
        return None
    number = _number(value, "p99 budget")
    return number if number > 0 else None


@dataclass(frozen=True)
class SearchChoice:
    """``name`` (``grid`` or a search's name), the p99 budget, and the optional settings."""

    name: str = "grid"
    latency_budget_ms: float | None = None
    min_gain: float | None = None
    tries: int | None = None
    screen_window_s: float | None = None
    within: float | None = None

    def __post_init__(self) -> None:
        if self.name not in search_names():
            raise SweepError(f"unknown search {self.name!r}; choose {', '.join(search_names())}")
        self.strategy()  # refuses what the search would refuse, when the value is made

    def _keywords(self) -> dict[str, Any]:
        return {key: getattr(self, key) for key in _KEYWORDS if getattr(self, key) is not None}

    def strategy(self, *, strict: bool = False) -> SearchStrategy | None:
        """The search (None: the full grid). ``strict``: a setting the search does not take is an
        error (a command-line flag that would do nothing) instead of being ignored."""
        # run-time circle: the search package imports this module
        from workbench.measure.sweep.search import SEARCHES

        if self.name == "grid":
            return None
        cls = SEARCHES[self.name]
        takes = set(inspect.signature(cls.__init__).parameters)
        keywords = self._keywords()
        unused = sorted(set(keywords) - takes)
        if strict and unused:
            raise SweepError(f"search {self.name}: {', '.join(unused)} do(es) not apply to it")
        params = {key: value for key, value in keywords.items() if key in takes}
        try:
            return cls(latency_budget_ms=self.latency_budget_ms, **params)
        except TypeError as err:
            raise SweepError(f"search {self.name}: {err}") from None
