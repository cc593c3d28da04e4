"""The link between widgets and one logic value (workbench/ui/links.py), and the rules the panels
keep: no text parsing in workbench/ui/, no panel importing another.

Widgets are real ipywidgets (no kernel needed); the logic values are the real ones the panels
link (SweepPlan, MeasureSettings), so what is asserted is what a panel hands on.
"""

from __future__ import annotations

import ast
import re
from functools import partial
from pathlib import Path

import ipywidgets as widgets
import pytest

from workbench.coremap import Allocation, CoreRange, parse_allocations
from workbench.measure.grid.plan import SweepPlan, parse_counts
from workbench.measure.engine.measure_settings import MeasureSettings
from workbench.ui.links import Linked, blank_if_none, comma_joined

UI = Path(__file__).resolve().parents[1] / "workbench" / "ui"


def _plan_link():
    changes = []
    link = Linked(SweepPlan(batch_sizes=(1, 4), allocations="1x1"), on_change=changes.append)
    batch = link.link("batch_sizes", widgets.Text(), parse=partial(parse_counts, what="batch sizes"), show=comma_joined)
    allocations = link.link("allocations", widgets.Text(), parse=parse_allocations, show=comma_joined)
    core_range = link.link("core_range", widgets.Text(), parse=CoreRange.parse_optional, show=blank_if_none)
    return link, changes, batch, allocations, core_range


def test_widgets_show_the_value_when_linked_and_edits_parse_into_it():
    link, changes, batch, allocations, core_range = _plan_link()
    assert (batch.value, allocations.value, core_range.value) == ("1,4", "1x1", "")
    batch.value = "2, 8"
    allocations.value = "1x1,2x1"
    core_range.value = "0:1"
    plan = link.value
    assert isinstance(plan, SweepPlan) and plan.batch_sizes == (2, 8)
    assert plan.allocations == (Allocation(1, 1), Allocation(2, 1)) and plan.core_range == CoreRange(0, 1)
    assert plan.size == 4 and link.problems == []
    assert changes == [{"batch_sizes"}, {"allocations"}, {"core_range"}]
    core_range.value = "  "
    assert link.value.core_range is None  # blank: the config's own range


def test_a_bad_edit_is_kept_as_a_problem_never_raised_and_the_field_keeps_its_value():
    link, changes, batch, allocations, _ = _plan_link()
    batch.value = "1,x"  # would raise SweepError inside a widget callback if the link let it
    assert link.problems == ["batch sizes: 'x' is not a whole number"]
    assert link.problem("batch_sizes") and link.value.batch_sizes == (1, 4)
    allocations.value = "2y1"
    assert len(link.problems) == 2 and "allocation '2y1' is malformed" in link.problems[1]
    batch.value = "1"
    allocations.value = "1x1"
    assert link.problems == [] and link.value.batch_sizes == (1,)


def test_what_the_value_refuses_as_a_whole_is_a_problem_too():
    link = Linked(MeasureSettings())
    stable = link.link("stable_windows", widgets.BoundedIntText(min=1, max=20))
    most = link.link("max_windows", widgets.BoundedIntText(min=1, max=100))
    assert (stable.value, most.value) == (3, 10)
    most.value = 2  # fewer than the stable windows: MeasureSettings refuses the pair
    assert link.problems == ["max_windows must be a whole number >= stable_windows (3), got 2"]
    assert link.value.max_windows == 10  # the last value the widgets described in full
    stable.value = 2
    assert link.problems == [] and (link.value.stable_windows, link.value.max_windows) == (2, 2)


def test_each_field_shows_its_own_problem_under_it_in_its_labels_words():
    link = Linked(MeasureSettings())
    stable = link.link("stable_windows", widgets.IntText(description="stable windows"))
    most = link.link("max_windows", widgets.IntText(description="max windows"),
                     parse=lambda n: n if n >= 1 else _raise(ValueError(f"{n} is less than 1")))
    assert link.labels == {"stable_windows": "stable windows", "max_windows": "max windows"}
    box = link.field("max_windows")
    assert box.children == (most, link.problem_view("max_windows"))
    assert link.problem_view("max_windows").layout.display == "none"  # no room taken while fine
    most.value = -2
    assert link.problems == ["max windows: -2 is less than 1"] and most.value == -2  # kept as typed
    assert "max windows: -2 is less than 1" in link.problem_view("max_windows").value
    assert link.problem_view("max_windows").layout.display is None
    assert link.problem_view("stable_windows").value == ""  # the other field says nothing
    most.value = 2  # parses, but fewer than the stable windows: shown beside the field that made it so
    assert "got 2" in link.problem_view("max_windows").value and link.unplaced_problems == []
    stable.value = 2
    assert link.problems == [] and link.problem_view("max_windows").value == ""
    # what a check of the whole value found, beside its field, until the next check
    link.show_checks({"stable_windows": ["stable windows 2 is too few here"]})
    assert "too few" in link.problem_view("stable_windows").value
    stable.value = 1  # an edit of the field clears what was said about its old text
    assert link.problem_view("stable_windows").value == ""


def _raise(err: Exception):
    raise err


def test_the_generators_flags_are_put_in_a_forms_labels_and_fields():
    from workbench.generate.problem_words import FieldProblem, in_labels

    labels = {"max_batch_size": "max batch size", "preferred_batch_size": "preferred batch sizes",
              "instance_group_kind": "instance kind"}
    found = in_labels(["--preferred_batch_size 8 is larger than --max_batch_size 4",
                       "--max_batch_size -4 is negative; use 0 (no batching) or more",
                       "--instance-group-kind KIND_GPU: never a GPU",
                       "--neuron_core_range: reversed",  # no control here: as said, about no field
                       "configs/cpu.pbtxt: --max_batch_size -1 is negative",
                       "parameter INTRA_OP_THREAD_COUNT = 0 must be at least 1 thread"], labels)
    assert found == [FieldProblem("preferred_batch_size", "preferred batch sizes 8 is larger than max batch size 4"),
                     FieldProblem("max_batch_size", "max batch size -4 is negative; use 0 (no batching) or more"),
                     FieldProblem("instance_group_kind", "instance kind KIND_GPU: never a GPU"),
                     FieldProblem("", "--neuron_core_range: reversed"),
                     FieldProblem("", "configs/cpu.pbtxt: max batch size -1 is negative"),
                     FieldProblem("", "parameter INTRA_OP_THREAD_COUNT = 0 must be at least 1 thread")]
    # a form with the parameters: the key too, for the field of that key
    assert in_labels(["parameter INTRA_OP_THREAD_COUNT = 0 must be at least 1 thread"], {"parameters": "p"}) == [
        FieldProblem("parameters", "parameter INTRA_OP_THREAD_COUNT = 0 must be at least 1 thread",
                     "INTRA_OP_THREAD_COUNT")]


def test_update_moves_the_widgets_and_runs_on_change_once():
    link, changes, batch, allocations, core_range = _plan_link()
    batch.value = "oops"
    changes.clear()
    link.update(batch_sizes=(8,), core_range=CoreRange(2, 3))
    assert (batch.value, core_range.value) == ("8", "2:3") and link.problems == []
    assert changes == [{"batch_sizes", "core_range"}]
    link.update(batch_sizes=(8,))  # nothing changed: nothing runs
    assert len(changes) == 1
    with pytest.raises(KeyError, match="no field"):
        link.update(batch_size=1)


def _ui_sources():
    return {path.name: path.read_text() for path in sorted(UI.glob("*.py"))}


def test_no_text_is_parsed_in_the_ui_package():
    """Widget text goes to the logic layer's parsers; the UI itself splits, converts and matches nothing.
    Any split or partition counts, whatever its separator (a variable one too), except a CoreRange's
    split of its cores over instances."""
    parsing = re.compile(r"(?<![\w.])(int|float)\(|\.(r?split|r?partition)\(|\bre\.\w+\(")
    not_text = re.compile(r"\bneuron_core_range\.split\(")  # CoreRange.split(instances, threads_per_core)
    found = [f"{name}: {line.strip()}" for name, text in _ui_sources().items()
             for line in text.splitlines() if parsing.search(line) and not not_text.search(line)]
    assert found == []
    # what the rule would have caught: the settings panel splitting its Triton-config text itself
    assert parsing.search("        return [part.strip() for part in text.split(separator) if part.strip()]")


def test_panels_never_import_each_other():
    panels = {name.removesuffix(".py") for name in _ui_sources() if name.endswith("_panel.py")}
    for name, text in _ui_sources().items():
        if name in ("app.py", "__init__.py"):
            continue  # the app composes the panels; the package names them
        imported = {node.module.rsplit(".", 1)[-1] for node in ast.walk(ast.parse(text))
                    if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("workbench.ui.")}
        assert not imported & (panels - {name.removesuffix(".py")}), f"{name} imports {imported & panels}"


def test_an_unrelated_edit_does_not_move_a_value_error_to_its_field():
    """max windows below stable windows is said under stable windows (the edit that made it wrong);
    editing the window length after that leaves it there."""
    from workbench.ui.sweep_panel import SweepPanel

    panel = SweepPanel()
    c, link = panel.controls, panel.measure_link
    c["max_windows"].value = 3
    c["stable_windows"].value = 5
    assert "stable windows (5)" in link.problem_view("stable_windows").value
    c["window_s"].value = 0.7
    assert "stable windows (5)" in link.problem_view("stable_windows").value
    assert link.problem_view("window_s").value == ""
    c["stable_windows"].value = 2
    assert link.problems == [] and link.problem_view("stable_windows").value == ""
