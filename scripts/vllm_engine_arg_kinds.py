"""Write workbench/generate/vllm_backend/engine_arg_kinds.json from the vLLM installed here: each of
vLLM's engine arguments (``vllm.engine.arg_utils.EngineArgs``'s fields) with the JSON kinds its type
takes (null, bool, int, number, str, list, object; absent: anything). Run with the vLLM venv's
Python: ``$WORKBENCH_VLLM_PYTHON scripts/vllm_engine_arg_kinds.py``; tests/test_vllm_engine_args.py
checks the file against the installed vLLM."""

from __future__ import annotations

import dataclasses
import json
import sys
import types
import typing
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "workbench/generate/vllm_backend/engine_arg_kinds.json"


def kinds(hint) -> set[str] | None:
    """JSON kinds of a type, None where any value may do (a forward reference, Any, a callable)."""
    if hint is None or hint is type(None):
        return {"null"}
    if hint is typing.Any or isinstance(hint, (str, typing.ForwardRef)):
        return None
    origin = typing.get_origin(hint)
    if origin is typing.Union or isinstance(hint, types.UnionType):
        found: set[str] = set()
        for arg in typing.get_args(hint):
            part = kinds(arg)
            if part is None:
                return None
            found |= part
        return found
    if origin is typing.Literal:
        return {"bool" if isinstance(v, bool) else "int" if isinstance(v, int) else "number"
                if isinstance(v, float) else "null" if v is None else "str" for v in typing.get_args(hint)}
    if origin is typing.Annotated:
        return kinds(typing.get_args(hint)[0])
    base = origin or hint
    if base is bool:
        return {"bool"}
    if base is int:
        return {"int"}
    if base is float:
        return {"int", "number"}
    if base is str:
        return {"str"}
    if base in (list, tuple, set, frozenset) or (isinstance(base, type) and issubclass(base, (list, tuple, set))):
        return {"list"}
    if base is dict or (isinstance(base, type) and issubclass(base, dict)):
        return {"object"}
    if dataclasses.is_dataclass(base) or (isinstance(base, type) and hasattr(base, "model_fields")):
        return {"object"}  # a config dataclass / pydantic model: vLLM takes its fields as a mapping
    if isinstance(base, type) and issubclass(base, str):  # a str enum
        return {"str"}
    return None


def main() -> None:
    import vllm
    from vllm.engine.arg_utils import EngineArgs

    table = {}
    for f in dataclasses.fields(EngineArgs):
        if f.name.startswith("_"):
            continue
        found = kinds(f.type)
        if found is not None:
            table[f.name] = sorted(found)
    OUT.write_text(json.dumps({"vllm": vllm.__version__, "kinds": table}, indent=1, sort_keys=True) + "\n")
    print(f"{OUT}: {len(table)} engine arguments of vLLM {vllm.__version__}", file=sys.stderr)


if __name__ == "__main__":
    main()
