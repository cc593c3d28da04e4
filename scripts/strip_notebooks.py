"""Apply the notebooks' output rule before committing: outputs and execution counts are stripped, except in cells marked
``# NBVAL_CHECK_OUTPUT`` (the key facts nbval compares, e.g. "served outputs match"), which keep
theirs (with a fixed execution count, which nbval needs). Widget state is always removed.

    python scripts/strip_notebooks.py notebooks/*.ipynb          # rewrite in place
    python scripts/strip_notebooks.py --check notebooks/*.ipynb  # exit 1 if a file breaks the rule
"""

from __future__ import annotations

import argparse
import sys

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
