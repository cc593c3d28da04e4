"""Apply the notebooks' output rule before committing: outputs and execution counts are stripped, except in cells marked
``# NBVAL_CHECK_OUTPUT`` (the key facts nbval compares, e.g. "served outputs match"), which keep
theirs (with a fixed execution count, which nbval needs). Widget state is always removed.

    python scripts/strip_notebooks.py notebooks/*.ipynb          # rewrite in place
    python scripts/strip_notebooks.py --check notebooks/*.ipynb  # exit 1 if a file breaks the rule

`bash dev.sh lab` applies the same rule on every save (``pre_save_hook``, installed by
scripts/jupyter_server_config.py), so Run All + save leaves the tutorials as git has them.
"""

from __future__ import annotations

import argparse
import configparser
import json
import re
import sys
from pathlib import Path

import nbformat

MARK = "# NBVAL_CHECK_OUTPUT"


def keeps_output(cell) -> bool:
    return cell.cell_type == "code" and cell.source.lstrip().startswith(MARK)


def strip(nb) -> bool:
    """Strip ``nb`` in place; True if anything changed."""
    changed = False
    if "widgets" in nb.metadata:
        del nb.metadata["widgets"]
        changed = True
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        kept = []
        for output in cell.outputs if keeps_output(cell) else []:
            output.pop("execution_count", None)
            if output.get("output_type") == "execute_result":
                output["execution_count"] = None
            kept.append(output)
        if kept != cell.outputs:
            cell.outputs = kept
            changed = True
        # nbval fails a cell with outputs but no execution count ("Unrun reference cell has outputs"):
        # checked cells keep a fixed count, so re-running the notebook changes nothing in git
        count = 1 if kept else None
        if cell.get("execution_count") != count:
            cell.execution_count = count
            changed = True
        for key in ("execution", "ExecuteTime"):
            if key in cell.metadata:
                del cell.metadata[key]
                changed = True
    return changed


ROOT = Path(__file__).resolve().parents[1]
TUTORIALS = ROOT / "notebooks"
# What nbval lets differ between a checked cell's stored and fresh output (ports, timings, diffs...)
SANITIZE = ROOT / "tests" / "nbval_sanitize.cfg"
# Notebook metadata a kernel rewrites on every run (its Python's patch version, its display name): a
# machine fact, not an edit, so a tutorial keeps what the repository stores.
_KERNEL_METADATA = ("kernelspec", "language_info")


def _sanitizers() -> list[tuple[re.Pattern, str]]:
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(SANITIZE)
    return [(re.compile(parser[name]["regex"]), parser[name]["replace"]) for name in parser.sections()]


def _as_nbval_sees(outputs, sanitizers) -> str:
    text = json.dumps([{k: v for k, v in o.items() if k in ("output_type", "name", "text", "data")}
                       for o in outputs], sort_keys=True)
    for regex, replace in sanitizers:
        text = regex.sub(replace, text)
    return text


def keep_references(nb, stored) -> None:
    """A checked cell whose source is unchanged and whose fresh output is the stored one as nbval
    compares them (sanitized) keeps the stored output: a run on another day, port or machine is
    not an edit. A checked fact that really changed is saved, and shows in git."""
    sanitizers = _sanitizers()
    before = {c.get("id"): c for c in stored.cells if keeps_output(c)}
    for cell in nb.cells:
        old = before.get(cell.get("id"))
        if (keeps_output(cell) and old is not None and old.source == cell.source
                and _as_nbval_sees(cell.outputs, sanitizers) == _as_nbval_sees(old.outputs, sanitizers)):
            cell.outputs = old.outputs


def pre_save_hook(model, path, contents_manager, **kwargs) -> None:
    """Jupyter's ``FileContentsManager.pre_save_hook``: a tutorial notebook (under notebooks/ of
    this repository) is saved stripped by the rule above. Other notebooks are saved as they are."""
    if model.get("type") != "notebook" or not model.get("content"):
        return
    target = (Path(contents_manager.root_dir) / path).resolve()
    if target.parent != TUTORIALS:
        return
    nb = nbformat.reads(json.dumps(model["content"]), as_version=4)  # multi-line strings joined, as read() gives
    strip(nb)
    if target.is_file():
        stored = nbformat.read(target, as_version=4)
        keep_references(nb, stored)
        for key in _KERNEL_METADATA:
            if key in stored.metadata:
                nb.metadata[key] = stored.metadata[key]
    model["content"] = nb


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="report, do not rewrite")
    parser.add_argument("notebooks", nargs="+")
    args = parser.parse_args(argv)
    bad = []
    for path in args.notebooks:
        nb = nbformat.read(path, as_version=4)
        if strip(nb):
            bad.append(path)
            if not args.check:
                nbformat.write(nb, path)
    if args.check and bad:
        print("outputs to strip in: " + ", ".join(bad), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
