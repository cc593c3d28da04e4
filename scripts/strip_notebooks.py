"""The tutorials' output rule, applied where git reads them (a clean filter), never to the file a
reader saves: outputs, execution counts and widget state are stripped by nbstripout, except in
cells marked ``# NBVAL_CHECK_OUTPUT`` (the key facts nbval compares, e.g. "served outputs match"),
which keep theirs with a fixed execution count (nbval needs one).

    python scripts/strip_notebooks.py --clean PATH < file > stripped   # git's clean filter (%f: the path)
    python scripts/strip_notebooks.py notebooks/*.ipynb                 # rewrite in place
    python scripts/strip_notebooks.py --check notebooks/*.ipynb         # exit 1 if a file breaks the rule
    python scripts/strip_notebooks.py --install                         # set the filter up in this checkout

`bash dev.sh lab` and `bash dev.sh test` run ``--install``: ``.gitattributes`` gives the tutorials
the ``tutorials`` filter and git config names this script as its clean command, so Run All + save
keeps the reader's outputs on disk while ``git diff`` sees the notebook as committed; Lab's
post-save hook (scripts/jupyter_server_config.py, `post_save_hook`) lets ``git status`` see it too.

As a filter it also compares with the version git already has (the index): a checked cell whose
source is unchanged and whose fresh output is the stored one as nbval compares them (sanitized:
ports, timings) keeps the stored output, and the kernel's facts Lab writes into the metadata
(its Python patch version) stay as stored: a run on another day, port or machine is not an edit.
"""

from __future__ import annotations

import argparse
import configparser
import json
import re
import subprocess
import sys
from pathlib import Path

if __name__ == "__main__":
    # Run by git for each tutorial it reads: nbformat validates through jsonschema, whose optional IRI
    # format checker (rfc3987_syntax, used by no notebook schema) builds ~35 Earley parsers on import,
    # 1.4 of the filter's 1.8 s of CPU (python-jsonschema/jsonschema#1428). Without it, jsonschema
    # leaves that format unchecked.
    sys.modules.setdefault("rfc3987_syntax", None)  # type: ignore[assignment]

import nbformat  # noqa: E402
from nbstripout import strip_output  # noqa: E402

MARK = "# NBVAL_CHECK_OUTPUT"
FILTER = "tutorials"  # the name .gitattributes gives the filter
ROOT = Path(__file__).resolve().parents[1]
# What nbval lets differ between a checked cell's stored and fresh output (ports, timings, diffs...)
SANITIZE = ROOT / "tests" / "nbval_sanitize.cfg"
# Notebook metadata a kernel rewrites on every run (its Python's patch version, its display name): a
# machine fact, not an edit, so a tutorial keeps what the repository stores.
_KERNEL_METADATA = ("kernelspec", "language_info")
# Metadata a run or an editor adds (nbstripout's default extra keys, which its CLI adds itself).
_RUN_METADATA = ["metadata.signature", "metadata.widgets", "cell.metadata.collapsed", "cell.metadata.ExecuteTime",
                 "cell.metadata.execution", "cell.metadata.heading_collapsed", "cell.metadata.hidden",
                 "cell.metadata.scrolled"]


def keeps_output(cell) -> bool:
    return cell.cell_type == "code" and cell.source.lstrip().startswith(MARK)


def strip(nb) -> bool:
    """Strip ``nb`` in place by nbstripout, the checked cells kept (its ``keep_output`` cell flag,
    set for the call only) with execution count 1; True if anything changed."""
    before = nbformat.writes(nb)
    checked = [cell for cell in nb.cells if keeps_output(cell)]
    for cell in checked:
        cell.metadata["keep_output"] = True
    strip_output(nb, keep_output=False, keep_count=False, keep_id=True, extra_keys=_RUN_METADATA)
    for cell in checked:
        del cell.metadata["keep_output"]
        cell.execution_count = 1 if cell.outputs else None
    return nbformat.writes(nb) != before


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


def keep_stored(nb, stored) -> None:
    """What of ``stored`` (the version git has) a fresh run leaves as it was: checked outputs that
    nbval would call equal, and the kernel's metadata."""
    sanitizers = _sanitizers()
    before = {c.get("id"): c for c in stored.cells if keeps_output(c)}
    for cell in nb.cells:
        old = before.get(cell.get("id"))
        if (keeps_output(cell) and old is not None and old.source == cell.source
                and _as_nbval_sees(cell.outputs, sanitizers) == _as_nbval_sees(old.outputs, sanitizers)):
            cell.outputs = old.outputs
    for key in _KERNEL_METADATA:
        if key in stored.metadata:
            nb.metadata[key] = stored.metadata[key]


def _indexed(path: str):
    """The notebook at ``path`` as the index holds it (None for a file git does not have yet)."""
    done = subprocess.run(["git", "cat-file", "blob", f":{path}"], cwd=ROOT, capture_output=True, text=True, check=False)
    return nbformat.reads(done.stdout, as_version=4) if done.returncode == 0 and done.stdout.strip() else None


def clean(text: str, path: str) -> str:
    """git's clean filter: ``text`` (the working file at ``path``) as the repository stores it."""
    nb = nbformat.reads(text, as_version=4)
    strip(nb)
    stored = _indexed(path)
    if stored is not None:
        keep_stored(nb, stored)
    return nbformat.writes(nb) + "\n"


def refresh_index(path: str | Path) -> bool:
    """Tell git's index the new size and time of the tutorial saved at ``path`` when its stripped
    content is what the index already holds (True), so ``git status`` agrees with ``git diff``:
    status trusts a changed size without running the clean filter (a known git limitation, the
    phantom "modified" nbstripout users meet), while diff runs it and finds nothing. The index's
    content is never changed: a real edit stays unstaged."""
    rel = Path(path).resolve().relative_to(ROOT).as_posix()
    staged = subprocess.run(["git", "ls-files", "--stage", "--", rel], cwd=ROOT, capture_output=True, text=True, check=False)
    filtered = subprocess.run(["git", "hash-object", f"--path={rel}", "--", rel], cwd=ROOT, capture_output=True,
                              text=True)
    fields = staged.stdout.split()
    if staged.returncode or filtered.returncode or len(fields) < 2 or fields[1] != filtered.stdout.strip():
        return False
    return subprocess.run(["git", "update-index", "--", rel], cwd=ROOT, capture_output=True, check=False).returncode == 0


def post_save_hook(model, os_path, contents_manager, **kwargs) -> None:
    """Jupyter's ``FileContentsManager.post_save_hook``: after a tutorial (notebooks/ of this
    repository) is saved, as it is, `refresh_index`."""
    if model.get("type") == "notebook" and Path(os_path).resolve().parent == ROOT / "notebooks":
        refresh_index(os_path)


def install(python: str) -> None:
    """Name this script as the ``tutorials`` filter's clean command in this checkout's git config
    (``.gitattributes`` assigns the filter; nbstripout --install does the same for its own CLI)."""
    script = Path(__file__).resolve().relative_to(ROOT).as_posix()
    settings = {"clean": f"'{python}' {script} --clean %f", "smudge": "cat"}
    for key, value in settings.items():
        subprocess.run(["git", "config", f"filter.{FILTER}.{key}", value], cwd=ROOT, check=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    task = parser.add_mutually_exclusive_group()
    task.add_argument("--check", action="store_true", help="report, do not rewrite")
    task.add_argument("--clean", metavar="PATH", help="git's clean filter: stdin to stdout")
    task.add_argument("--install", action="store_true", help="set the git filter up in this checkout")
    parser.add_argument("notebooks", nargs="*")
    args = parser.parse_args(argv)
    if args.install:
        install(sys.executable)
        return 0
    if args.clean:
        sys.stdout.write(clean(sys.stdin.read(), args.clean))
        return 0
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
