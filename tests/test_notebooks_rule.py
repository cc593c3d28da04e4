"""The tutorial notebooks keep the output rule and stay thin (nbval itself executes them:
``pytest notebooks/``).

Rule: outputs are stripped except in ``# NBVAL_CHECK_OUTPUT`` cells, which keep the output nbval
compares (scripts/strip_notebooks.py --check). Thin: the logic lives in ``workbench/``; a code cell
is a few lines and defines no function or class beyond a one-liner. Every server a notebook starts
is stopped in its last cell.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
EXPECTED = ["01-quickstart", "02-pytorch-inf1", "03-pytorch-inf2-trn1", "04-tensorflow-savedmodel",
            "05-transformers-neuronx", "06-core-allocations", "07-compare-runs", "08-pytorch-backend",
            "09-llm-vllm"]
MAX_CELL_LINES = 12
MAX_DEF_LINES = 3
MARK = "# NBVAL_CHECK_OUTPUT"


def code_cells(path: Path) -> list[str]:
    return [c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]


def python_of(source: str) -> str:
    """Cell source without IPython magics, so it parses as Python."""
    return "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines())


def test_the_tutorials_are_all_there_in_order():
    assert [p.stem for p in NOTEBOOKS] == EXPECTED


def test_outputs_are_stripped_except_checked_cells():
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "strip_notebooks.py"), "--check",
                           *map(str, NOTEBOOKS)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_each_notebook_checks_key_facts_with_stored_outputs(path):
    book = nbformat.read(path, as_version=4)
    checked = [c for c in book.cells if c.cell_type == "code" and c.source.lstrip().startswith(MARK)]
    assert checked, f"{path.name} has no {MARK} cell"
    for cell in checked:
        # nbval fails a cell that has outputs but no execution count ("Unrun reference cell has outputs")
        assert cell.execution_count is not None, f"{path.name}: a checked cell lost its execution count"
        text = "".join(o.get("text", "") for o in cell.outputs)
        assert text.strip(), f"{path.name}: checked cell {cell.source.splitlines()[1]!r} has no stored output"
        assert "Error" not in text and "Traceback" not in text, text


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_each_notebook_is_thin(path):
    for source in code_cells(path):
        lines = [line for line in source.splitlines() if line.strip()]
        assert len(lines) <= MAX_CELL_LINES, f"{path.name}: a {len(lines)}-line cell; move logic into workbench/:\n{source}"
        tree = ast.parse(python_of(source))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                size = node.end_lineno - node.lineno + 1
                assert size <= MAX_DEF_LINES, f"{path.name}: {node.name} is {size} lines; it belongs in workbench/"
    joined = "\n".join(code_cells(path))
    assert re.search(r"^from workbench\b", joined, re.M), f"{path.name} does not use the workbench package"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_servers_are_stopped_in_the_last_cell(path):
    cells = code_cells(path)
    if any("TritonServer(" in c and "with TritonServer" not in c for c in cells):
        assert "server.stop()" in cells[-1], f"{path.name} starts a server but its last cell does not stop it"


@pytest.mark.parametrize("name", ["02-pytorch-inf1", "03-pytorch-inf2-trn1", "04-tensorflow-savedmodel",
                                  "05-transformers-neuronx", "06-core-allocations"])
def test_neuron_notebooks_say_where_they_run(name):
    """They ask for a Neuron target and print the choice, which says when the CPU stands in."""
    joined = "\n".join(code_cells(ROOT / "notebooks" / f"{name}.ipynb"))
    assert "tutorial.choose_target(" in joined and "print(choice.message)" in joined


@pytest.mark.parametrize("name", ["02-pytorch-inf1", "03-pytorch-inf2-trn1"])
def test_pytorch_neuron_notebooks_show_the_docker_run(name):
    assert "docker_run_for_model(" in "\n".join(code_cells(ROOT / "notebooks" / f"{name}.ipynb"))


def test_the_allocation_notebook_has_one_switch_at_the_top():
    cells = code_cells(ROOT / "notebooks" / "06-core-allocations.ipynb")
    assert cells[0].strip() == "FULL_RUN = False"
    assert sum("FULL_RUN =" in c for c in cells) == 1


def test_the_quickstart_ends_with_the_app():
    cells = code_cells(ROOT / "notebooks" / "01-quickstart.ipynb")
    assert any(c.rstrip().endswith("\napp") and "app = Workbench(" in c for c in cells)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_each_notebook_stores_the_kernel_facts_lab_writes_on_open(path):
    """Lab writes the running kernel's kernelspec and language_info into a notebook as it opens it;
    a stored value that differs is an unsaved edit before the reader touched anything (issue 31
    #13: every tutorial opened marked unsaved). Stored: ipykernel's own, as its kernel reports them
    (the Python patch version is this machine's; the browser test opens them for real)."""
    from ipykernel.ipkernel import IPythonKernel
    from jupyter_client.kernelspec import KernelSpecManager

    spec = KernelSpecManager().get_kernel_spec("python3")
    metadata = nbformat.read(path, as_version=4).metadata
    assert metadata["kernelspec"] == {"name": "python3", "display_name": spec.display_name, "language": spec.language}
    reported = dict(IPythonKernel.language_info)
    stored = dict(metadata["language_info"])
    assert stored.pop("version").split(".")[:2] == reported.pop("version").split(".")[:2]
    assert stored == reported


def _figure_notebook(path: Path, first_line: str) -> None:
    source = (f"{first_line}\nfrom matplotlib.figure import Figure\n"
              "figure = Figure(figsize=(3, 2))\nfigure.add_subplot().plot([1, 2])\nfigure")
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source)], metadata={"kernelspec": {
        "name": "python3", "display_name": "Python 3", "language": "python"}}), path)


def test_a_figure_shown_as_text_fails_the_notebook_run_and_the_workbench_shows_it_as_an_image(tmp_path):
    """nbval's run of the tutorials (notebooks/conftest.py) fails a cell whose figure reached the
    reader as ``<Figure size ...>`` text; a bare Figure does without the workbench (IPython knows
    no image for it until pyplot's inline backend loads), and is an image once workbench is imported
    (issue 43: notebook 09's Pareto plot printed ``<Figure size 850x460 with 1 Axes>``)."""
    (tmp_path / "conftest.py").write_text((ROOT / "notebooks" / "conftest.py").read_text())
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    _figure_notebook(tmp_path / "bare.ipynb", "import IPython")
    _figure_notebook(tmp_path / "with_workbench.ipynb", "import workbench")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    env.pop("MPLBACKEND", None)  # as in a user's kernel: ipykernel picks the inline backend
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--nbval-lax",
                           "--nbval-current-env", "-rA", str(tmp_path)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert "FAILED bare.ipynb::Cell 0" in done.stdout, done.stdout[-3000:]
    assert ("a figure reached the reader as text, not an image: <Figure size 300x200 with 1 Axes>"
            in done.stdout), done.stdout[-3000:]
    assert "PASSED with_workbench.ipynb::Cell 0" in done.stdout, done.stdout[-3000:]
