"""The generator's problems in the words of the screen that shows them.

`make_plan` names what is wrong by the CLI flag (``--max_batch_size -4 is negative ...``), the
words of the command line. A form shows the same settings under its own labels ("max batch size"),
so a person there should read those, next to the control they are about. `in_labels` finds which
field a problem is about (the flag it starts with) and puts every flag it knows a label for into
that label's words; problems about no field, or about a field with no label, stay as they are.
A problem about one of the config's ``parameters`` (``parameter INTRA_OP_THREAD_COUNT = 0 ...``)
also says which key, so a form with a field per key shows it there.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Iterable, Mapping

from workbench.generate.settings import GenerateSettings
from workbench.generate.settings_checks import setting_flag

__all__ = ["FieldProblem", "flag_fields", "in_labels"]

# flags that are not a field's name in either spelling: the CLI flag -> the GenerateSettings field it sets
_OTHER_FLAGS = {
    "--model_type": "framework",
    "--inf2": "target",
    "--parameter": "parameters",
    "--rate-limiter-resource": "rate_limiter",
    "--rate-limiter-priority": "rate_limiter",
    "--optional-input": "optional_inputs",
    "--warmup": "model_warmup",
    "--warmup-batch-size": "model_warmup",
    "--warmup-data": "model_warmup",
}
_FLAG = re.compile(r"--[A-Za-z][A-Za-z0-9_-]*")
# a configs/<name>.pbtxt variant's problem: about that config, not the form's fields
_VARIANT_PREFIX = re.compile(r"configs/[^:]*: ")
# a config parameter's problem (the PyTorch backend's checks): which key
_PARAMETER = re.compile(r"parameter ([A-Za-z_][A-Za-z0-9_]*)\b")


@dataclasses.dataclass(frozen=True)
class FieldProblem:
    """One problem: the field it is about ("" for the settings as a whole), its message, and for
    the ``parameters`` field the key it is about ("" otherwise)."""

    field: str
    message: str
    key: str = ""


@functools.cache
def flag_fields() -> dict[str, str]:
    """Every spelling of a generate flag -> the GenerateSettings field it sets (upstream's
    underscores, the workbench's dashes, and `setting_flag`'s)."""
    flags = {}
    for field in dataclasses.fields(GenerateSettings):
        for flag in ("--" + field.name, "--" + field.name.replace("_", "-"), setting_flag(field.name)):
            flags[flag] = field.name
    return {**flags, **_OTHER_FLAGS}


def in_labels(problems: Iterable[str], labels: Mapping[str, str]) -> list[FieldProblem]:
    """Each problem with the field it starts naming, its flags replaced by ``labels`` (field ->
    the label a form shows it under). A problem is about a field only when that field has a label
    (a form without the control has nowhere to show it)."""
    known = flag_fields()

    def label_of(match: re.Match) -> str:
        return labels.get(known.get(match.group(0), ""), match.group(0))

    found = []
    for problem in problems:
        first, parameter = _FLAG.match(problem), _PARAMETER.match(problem)
        field = (
            known.get(first.group(0), "")
            if first and not _VARIANT_PREFIX.match(problem)
            else "parameters"
            if parameter
            else ""
        )
        about = field if field in labels else ""
        key = parameter.group(1) if parameter and about == "parameters" else ""
        found.append(FieldProblem(about, _FLAG.sub(label_of, problem), key))
    return found
