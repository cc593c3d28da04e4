"""Hill climbing over variants x batch sizes, started from the best of a cheap screen.

Every cell (variant x batch size) is screened first, as halving screens (screen.py: one short
window per point, concurrency bisected under the budget, one load per variant). The climb starts
at the cell with the best screen, measured in full (concurrency bisected, warm-started at the
screen's answer), and moves to the first neighbour whose full measurement beats the best by
``min_gain``. A neighbour is any cell at most one step away on every axis at once, diagonals
included, the allocation counted as two axes, instances and cores per instance (Model
Analyzer's quick search climbs instance count x max_batch_size within a radius the same way):
1x1, 2x1 and 1x2 are all neighbours. A neighbour is measured in full unless its screen rules it
out beside the best cell's screen (screen.py's rule), but the neighbour with the best screen is
measured in full whatever: screens are short and biased (one can read twice its full
throughput), and one fluke-high screen of the best cell would rule out every neighbour.
The climb stops at a local optimum, where every neighbour of the best is measured in full or
ruled out.

Why: a climb from one fixed cell along the four axis neighbours stalls on one cell measured
badly (benchmarks/README: search_vs_grid). Neighbours sharing the best cell's variant (loaded)
come first, the others by their screen, best first.
"""

from __future__ import annotations

import math

from workbench.measure.grid.plan import SweepError, Variant
from workbench.measure.grid.rows import PointRow
from workbench.measure.sweep.search.base import Measure, SearchLog, SearchSpace
from workbench.measure.sweep.search.concurrency_bisection import CellAnswer, bisect_cell
from workbench.measure.sweep.search.screen import ScreeningSearch, interval, screen_variant

__all__ = ["HillClimb", "neighbours"]

Cell = tuple[int, int]  # (variant index, batch index) in the SearchSpace


def _axes(variant: Variant, parameter_names: list[str]) -> tuple:
    batching = variant.batching.label if variant.batching is not None else ""
    return (
        variant.allocation.instances,
        variant.allocation.cores_per_instance,
        batching,
        *(dict(variant.parameters).get(name, "") for name in parameter_names),
    )


def _positions(variants: tuple[Variant, ...]) -> list[tuple[int, ...]]:
    """Each variant's index on each axis among the values present (numbers in order, the rest in
    the space's order)."""
    names = list(dict.fromkeys(name for v in variants for name, _ in v.parameters))
    values = [_axes(v, names) for v in variants]
    orders = []
    for axis in zip(*values):
        present = list(dict.fromkeys(axis))
        orders.append(sorted(present) if all(isinstance(x, int) for x in present) else present)
    return [tuple(order.index(x) for order, x in zip(orders, row)) for row in values]


def neighbours(space: SearchSpace, cell: Cell) -> list[Cell]:
    """Every cell one step or less away on each axis (variant axes and batch size), but ``cell``."""
    positions = _positions(space.variants)
    v, b = cell
    return [
        (i, j)
        for i in range(len(space.variants))
        for j in (b - 1, b, b + 1)
        if 0 <= j < len(space.batch_sizes)
        and (i, j) != cell
        and max(abs(p - q) for p, q in zip(positions[i], positions[v])) <= 1
    ]


class HillClimb(ScreeningSearch):
    name = "hill-climb"

    def __init__(
        self,
        latency_budget_ms: float | None = None,
        *,
        min_gain: float = 0.0,
        screen_window_s: float = 0.2,
        within: float = 0.3,
    ) -> None:
        super().__init__(latency_budget_ms, screen_window_s=screen_window_s, within=within)
        if not isinstance(min_gain, (int, float)) or not 0 <= min_gain < 10:
            raise SweepError(f"min_gain {min_gain!r} must be a fraction >= 0 (0.05 = 5%)")
        self.min_gain = float(min_gain)

    @property
    def params(self) -> dict:
        return {**super().params, "min_gain": self.min_gain}

    def search(self, space: SearchSpace, measure: Measure, log: SearchLog, screen: Measure | None = None) -> None:
        if screen is None:
            raise SweepError("the hill-climb search screens points: run it through run_sweep, which gives screen()")
        budget = self.budget_ms
        screens = {
            (v, b): cell
            for v in range(len(space.variants))
            for b, cell in enumerate(screen_variant(space, v, screen, log, budget))
        }
        full: dict[Cell, CellAnswer] = {}

        def label(cell: Cell) -> str:
            return f"{space.variants[cell[0]].label} batch {space.batch_sizes[cell[1]]}"

        def score(cell: Cell) -> float:
            return full[cell].score(budget)

        def measure_cell(cell: Cell) -> None:
            full[cell] = bisect_cell(
                space,
                *cell,
                measure,
                log,
                budget,
                max(screens[cell].highest_ok, 0),
                start_why="warm start at the screen's answer",
            )

        counts = lambda: f"{len(full)} of {len(screens)} cells measured in full"  # noqa: E731
        bests = {c: s.best for c, s in screens.items() if s.best is not None}  # the cells a screen found a point in
        ranked = sorted(bests, key=lambda c: -bests[c].throughput)
        best = None
        for cell in ranked:  # the start: the best screen whose cell also meets the budget in full
            measure_cell(cell)
            if score(cell) > -math.inf:
                best = cell
                log.note(
                    f"climb starts at {label(cell)}: the best screen"
                    + (" whose cell meets the budget in full" if cell != ranked[0] else "")
                    + f", {interval(bests[cell])}"
                )
                break
            log.note(
                f"{label(cell)}: screened {interval(bests[cell])} but no concurrency meets "
                "the budget in full; the next best screen"
            )
        if best is None:
            log.stop(
                f"no cell meets p99 <= {budget:g} ms "
                + ("in the screen" if not ranked else "in full")
                + f" ({counts()})"
            )
            return
        while True:
            moved = False
            near, best_variant = neighbours(space, best), best[0]
            near.sort(key=lambda c: (c[0] != best_variant, -(bests[c].throughput if c in bests else -1.0)))
            open_ = [c for c in near if c not in full and c in bests]
            top = max(open_, key=lambda c: bests[c].throughput) if open_ else None
            for cell in near:
                if cell in full:
                    continue
                why = self._ruled_out(screens[cell], bests[best])
                if why is not None and cell != top:
                    log.note(f"{label(cell)}: not measured in full beside {label(best)}: {why}")
                    continue
                if why is not None:
                    log.note(
                        f"{label(cell)}: the best screen beside {label(best)}, measured in full although "
                        "its screen is far below: one screen alone does not end the climb"
                    )
                measure_cell(cell)
                here, there = score(best), score(cell)
                if there > here * (1 + self.min_gain):
                    log.note(f"climb from {label(best)} to {label(cell)}: {there:.1f} vs {here:.1f} infer/s")
                    best, moved = cell, True
                    break
            if not moved:
                break
        log.stop(
            f"local optimum: every neighbour of {label(best)} (diagonals included) is measured in full or "
            f"ruled out by its screen, and none beats its {score(best):.1f} infer/s by more than "
            f"{self.min_gain:.0%} ({counts()})"
        )

    def _ruled_out(self, cell: CellAnswer, best: PointRow) -> str | None:
        """Why the screen rules ``cell`` out beside the best cell's screened point ``best`` (None:
        measure it in full); the climb stands only on cells whose screen found a point."""
        if cell.best is None:
            return "no concurrency meets the budget in the screen"
        return self.far_below(cell.best, best)
