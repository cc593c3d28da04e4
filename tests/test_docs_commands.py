"""Every `workbench ...` command line shown in a code block of README.md, docs/*.md and
benchmarks/README.md goes through the real argument parser (workbench.cli's), so a renamed or removed
flag fails the suite instead of a reader. Nothing runs: parsing acts on nothing, so no server starts.

Rules for a shown line: it starts with `workbench ` or `python -m workbench ` (a `$ ` prompt allowed),
a trailing backslash continues it, a `# ...` comment ends it, and a placeholder `<word>` is replaced
by the value PLACEHOLDERS gives (an unknown one is a failure: add it there). Every `--flag` must be
the parser's own spelling in full: argparse would accept an abbreviation, which hides a rename.
And the README stays a two-minute read (at most 150 lines and 1,000 words), docs/ARCHITECTURE.md
prose with one diagram in at most 200 lines."""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import shlex
from functools import cache
from pathlib import Path

import pytest

from workbench.cli import SUBCOMMANDS, build_parser

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "benchmarks" / "README.md"]

README_MAX_LINES = 150
README_MAX_WORDS = 1000
ARCHITECTURE_MAX_LINES = 200

# what a placeholder in a shown command stands for
PLACEHOLDERS = {
    "<model>": "mlp",
    "<model_dir>": "model_repository/mlp",
    "<repository>": "model_repository",
    "<run>": "runs/mlp",
    "<url>": "127.0.0.1:8001",
    "<name>": "mlp",
    "<cores>": "0:1",
}

_FENCE = re.compile(r"^\s*(```|~~~)")
_PROMPT = re.compile(r"^\s*(?:\$\s+)?((?:python3?\s+-m\s+)?workbench)\s+(.*)$")
_PLACEHOLDER = re.compile(r"<[A-Za-z_][A-Za-z0-9_-]*>")
_HEADING = re.compile(r"^#+\s+(.*)$", re.MULTILINE)


def shown_commands(text: str) -> list[tuple[int, str]]:
    """(line number, command after `workbench`) of every workbench command line in a fenced block."""
    commands: list[tuple[int, str]] = []
    inside = False
    pending: tuple[int, str] | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        if _FENCE.match(line):
            inside = not inside
            pending = None
            continue
        if not inside:
            continue
        if pending is not None:
            start, so_far = pending
            part = _without_comment(line)
            if part.rstrip().endswith("\\"):
                pending = (start, so_far + " " + part.rstrip()[:-1])
            else:
                commands.append((start, so_far + " " + part))
                pending = None
            continue
        match = _PROMPT.match(line)
        if match is None:
            continue
        rest = _without_comment(match.group(2))
        if rest.rstrip().endswith("\\"):
            pending = (number, rest.rstrip()[:-1])
        else:
            commands.append((number, rest))
    return commands


def _without_comment(line: str) -> str:
    """The line up to a shell comment (a `#` after whitespace, outside quotes)."""
    quote = ""
    for i, char in enumerate(line):
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i]
    return line


def _substituted(command: str) -> str:
    def value(match: re.Match[str]) -> str:
        if match.group(0) not in PLACEHOLDERS:
            raise KeyError(f"placeholder {match.group(0)} has no value in PLACEHOLDERS")
        return PLACEHOLDERS[match.group(0)]

    return _PLACEHOLDER.sub(value, command)


@cache
def _parser(command: str | None) -> argparse.ArgumentParser:
    return build_parser(command)


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    found: dict[str, argparse.ArgumentParser] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            found.update(action.choices)
    return found


def _option_strings(parser: argparse.ArgumentParser) -> set[str]:
    """Every flag of ``parser`` and of its own subcommands (`workbench remote URL load ...`)."""
    flags = {flag for action in parser._actions for flag in action.option_strings}
    for child in _subparsers(parser).values():
        flags |= _option_strings(child)
    return flags


def problem_with(command: str) -> str | None:
    """Why the shown command would not parse as written, or None."""
    try:
        argv = shlex.split(_substituted(command))
    except (KeyError, ValueError) as err:
        return str(err)
    if not argv:
        return "no subcommand"
    first = next((a for a in argv if not a.startswith("-")), None)
    parser = _parser(first if first in SUBCOMMANDS else None)
    if first in SUBCOMMANDS:
        flags = _option_strings(_subparsers(parser)[first])
        for token in argv:
            if token == "--":
                break
            name = token.split("=", 1)[0]
            if token.startswith("--") and name not in flags:
                return f"workbench {first} has no flag {name}"
    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors), contextlib.redirect_stdout(io.StringIO()):
            parser.parse_args(argv)
    except SystemExit as exit_:  # argparse's error (status 2), or --help (status 0)
        if exit_.code:
            said = errors.getvalue().strip().splitlines()
            return said[-1] if said else f"exit status {exit_.code}"
    return None


def problems_in(path: Path) -> list[str]:
    return [f"{path.name}:{number}: workbench {command.strip()}\n    -> {problem}"
            for number, command in shown_commands(path.read_text())
            if (problem := problem_with(command)) is not None]


@pytest.mark.parametrize("doc", DOCS, ids=[str(d.relative_to(ROOT)) for d in DOCS])
def test_every_shown_command_parses(doc):
    problems = problems_in(doc)
    assert not problems, "commands shown in the docs that the parser refuses:\n" + "\n".join(problems)


def test_the_docs_show_every_subcommand_and_the_readme_a_tour():
    shown = {path: [shlex.split(_substituted(c))[0] for _, c in shown_commands(path.read_text())]
             for path in DOCS}
    readme = set(shown[ROOT / "README.md"])
    assert len(readme) >= 5, f"README's tour shows only {sorted(readme)}"
    everywhere = {name for names in shown.values() for name in names}
    assert set(SUBCOMMANDS) <= everywhere, f"never shown in the docs: {sorted(set(SUBCOMMANDS) - everywhere)}"


def test_a_wrong_flag_in_a_doc_fails(tmp_path):
    """The checker is not vacuous: a doc with a renamed flag, an abbreviated one, a bad value, an
    unknown placeholder and a bad subcommand names each; prose and other commands are not read."""
    doc = tmp_path / "bad.md"
    doc.write_text("Prose: workbench sweep --no-such-flag is not in a block.\n\n"
                   "```bash\n"
                   "workbench sweep model_repository/mlp --out runs/x --batch-size 1,4   # renamed\n"
                   "workbench sweep model_repository/mlp --out runs/x --latency-budget 20\n"
                   "$ workbench sweep <model_dir> --out runs/x \\\n"
                   "    --search sideways\n"
                   "workbench report <nowhere>\n"
                   "workbench teleport runs/x\n"
                   "ls -la    # not ours\n"
                   "workbench report runs/mlp   # --not-a-flag: a comment\n"
                   "```\n")
    problems = problems_in(doc)
    assert len(problems) == 5, "\n".join(problems)
    assert "bad.md:4:" in problems[0] and "no flag --batch-size" in problems[0]
    assert "no flag --latency-budget" in problems[1]  # argparse alone would take it as --latency-budget-ms
    assert "bad.md:6:" in problems[2] and "sideways" in problems[2]
    assert "<nowhere>" in problems[3]
    assert "teleport" in problems[4]


def test_readme_is_a_two_minute_read():
    text = (ROOT / "README.md").read_text()
    lines, words = len(text.splitlines()), len(text.split())
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines (at most {README_MAX_LINES})"
    assert words <= README_MAX_WORDS, f"README.md has {words} words (at most {README_MAX_WORDS})"


def test_architecture_is_prose_with_one_picture():
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    lines, fences = len(text.splitlines()), sum(1 for line in text.splitlines() if _FENCE.match(line))
    assert lines <= ARCHITECTURE_MAX_LINES, f"docs/ARCHITECTURE.md has {lines} lines (at most {ARCHITECTURE_MAX_LINES})"
    assert fences == 2, f"docs/ARCHITECTURE.md has {fences // 2} code blocks; one diagram, the rest prose"


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


@pytest.mark.parametrize("doc", DOCS, ids=[str(d.relative_to(ROOT)) for d in DOCS])
def test_every_relative_link_lands(doc):
    """A page moved or a section renamed breaks no link of the README and docs/."""
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", doc.read_text()):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        landed = (doc.parent / path).resolve() if path else doc
        if not landed.exists():
            broken.append(f"{target}: no such file")
        elif anchor and landed.suffix == ".md":
            headings = [_anchor(h) for h in _HEADING.findall(landed.read_text())]
            if anchor not in headings:
                broken.append(f"{target}: no heading #{anchor}")
    assert not broken, f"{doc.relative_to(ROOT)}: " + "; ".join(broken)
