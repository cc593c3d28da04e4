"""vLLM's engine arguments read strictly, wherever they come from (``--engine-arg KEY=JSON``, the
settings panel, a model.json read back): JSON of bounded size and depth with no repeated key, each
argument once, of the JSON kind its type in vLLM's ``EngineArgs`` takes (``engine_arg_kinds.json``,
written from the installed vLLM by scripts/vllm_engine_arg_kinds.py) and, when numeric, in the
range vLLM can use. Unchecked, a 30000-deep value was a traceback, a repeated argument kept the
last silently, and 2^63-1 bytes of KV cache were written for the engine to fail on (issue 47).
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from workbench.files import strict_json
from workbench.limits import INT32_MAX, is_whole

__all__ = [
    "MAX_ARG_CHARS",
    "MAX_MEMORY_BYTES",
    "MAX_SEED",
    "engine_arg_kinds",
    "engine_arg_problems",
    "parse_engine_arg_items",
    "MAPPING_ARGS",
]

MAX_ARG_CHARS = 65536  # one --engine-arg value: far beyond any real one (a JSON config of a few KiB)
# Bytes of memory an engine argument may size (the KV cache, ...): the largest EC2 instance's
# memory (u7in-32tb: 32 TiB); 2^63-1 passed the int64 check and only failed inside the engine.
MAX_MEMORY_BYTES = 32 * 2**40
MAX_SEED = 2**32 - 1  # vLLM seeds numpy with it, which takes 0..2^32-1
# Arguments whose value is a mapping one level down too (the Neuron plugins read these keys).
MAPPING_ARGS = {"additional_config": ("neuron_config", "override_neuron_config")}
_JSON_KIND = {bool: "bool", int: "int", float: "number", str: "str", list: "list", dict: "object", type(None): "null"}
_KIND_WORDS = {
    "bool": "true or false",
    "int": "a whole number",
    "number": "a number",
    "str": "a string",
    "list": "a JSON list",
    "object": "a JSON object",
    "null": "null",
}


@functools.cache
def engine_arg_kinds() -> dict[str, tuple[str, ...]]:
    """vLLM engine argument -> the JSON kinds its type takes (an argument not listed: any)."""
    data = json.loads((Path(__file__).with_name("engine_arg_kinds.json")).read_text(encoding="utf-8"))
    return {name: tuple(kinds) for name, kinds in data["kinds"].items()}


def _kind(value: Any) -> str:
    return _JSON_KIND.get(type(value), type(value).__name__)


def _range_problem(name: str, value: Any, flag: str) -> str | None:
    if isinstance(value, float) and not math.isfinite(value):
        return f"{flag} {name}: {value} is not a JSON number"
    if not is_whole(value):
        return None
    if name.endswith("_bytes"):
        low, high, what = 0, MAX_MEMORY_BYTES, "bytes (the largest machine's memory, 32 TiB)"
    elif name == "seed":
        low, high, what = 0, MAX_SEED, "(numpy's seed range)"
    else:
        low, high, what = -INT32_MAX - 1, INT32_MAX, "(vLLM's kernels and the Neuron runtime hold counts in 32 bits)"
    if not low <= value <= high:
        return f"{flag} {name} {value}: give {low} to {high} {what}"
    return None


def engine_arg_problems(args: Mapping[str, Any], flag: str = "--engine-arg") -> list[str]:
    """Each argument of the JSON kind vLLM's type takes, its numbers in range, its mappings
    mappings (``additional_config`` and the plugins' namespaces in it), one line each."""
    kinds = engine_arg_kinds()
    problems = []
    for name, value in args.items():
        allowed = kinds.get(name)
        kind = _kind(value)
        if allowed is not None and kind not in allowed and not (kind == "int" and "number" in allowed):
            want = " or ".join(_KIND_WORDS.get(k, k) for k in allowed)
            problems.append(f"{flag} {name}: must be {want} (vLLM's type), got {json.dumps(value)[:60]} ({kind})")
            continue
        problem = _range_problem(name, value, flag)
        if problem:
            problems.append(problem)
        for space in MAPPING_ARGS.get(name, ()):
            if isinstance(value, Mapping) and space in value and not isinstance(value[space], Mapping):
                problems.append(f"{flag} {name}.{space}: must be a JSON object, got {_kind(value[space])}")
    return problems


def parse_engine_arg_items(items: Iterable[str], flag: str = "--engine-arg") -> tuple[dict[str, Any], list[str]]:
    """``KEY=JSON`` items -> (the arguments, the problems): each value strict JSON (`strict_json`:
    no NaN, no repeated key, bounded depth) of at most MAX_ARG_CHARS, each key given once."""
    args: dict[str, Any] = {}
    problems = []
    for item in items:
        key, sep, text = item.partition("=")
        key = key.strip()
        shown = item if len(item) <= 80 else item[:77] + "..."
        if not sep or not key:
            problems.append(f"{flag} {shown!r}: write KEY=JSON (e.g. disable_log_stats=true)")
            continue
        if key in args:
            problems.append(f"{flag} {key} is given twice; give each engine argument once")
            continue
        if len(text) > MAX_ARG_CHARS:
            problems.append(f"{flag} {key}: {len(text)} characters; at most {MAX_ARG_CHARS}")
            continue
        try:
            args[key] = strict_json(text)
        except (ValueError, RecursionError) as err:
            problems.append(f"{flag} {shown!r}: {err} (e.g. disable_log_stats=true)")
    return args, problems
