"""The package's layers import only downward, and no two modules share a name without sharing a role.

Layers, lowest first: the base (values, files, tasks, the machine), compiling and generating, the
server, measuring, then what builds on a measured model (report, deploy, tutorial), and on top the
notebook app and the command line. A module may import its own layer and the ones below it; the
siblings of the fourth layer do not import each other. Every import counts: module-level,
function-local and annotation-only alike, since each is a dependency a reader has to hold in mind.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "workbench"

# the first name under workbench -> its layer
LAYERS: dict[int, tuple[str, ...]] = {
    0: ("spec", "coremap", "limits", "files", "tasks", "system", "lazy", "wording", "refusals", "neuron_devices",
        "figures_inline",
        "neuron_libraries", "releases", "targets"),
    1: ("compiler", "generate", "zoo"),
    2: ("server", "served_outputs", "served_generation", "vllm_offline"),
    3: ("measure",),
    4: ("report", "deploy", "tutorial", "quickstart"),
    5: ("ui", "cli", "__init__", "__main__"),
}
LAYER_OF = {name: layer for layer, names in LAYERS.items() for name in names}
# names every package may have
PACKAGE_FILES = {"__init__.py", "__main__.py"}



def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path, module: str) -> list[tuple[int, str]]:
    """Every workbench module ``path`` (the module ``module``) imports, with its line, relative
    imports resolved."""
    here = module.split(".")
    package = here if path.name == "__init__.py" else here[:-1]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            names = [target] + [f"{target}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        found += [(node.lineno, name) for name in names if name.startswith("workbench.")]
    return found


def _top(module: str) -> str:
    return module.split(".")[1] if module.count(".") else "__init__"


def _sources() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "templates" not in p.parts)


def test_every_module_has_a_layer():
    unplaced = sorted({_top(_module_name(p)) for p in _sources()} - set(LAYER_OF))
    assert not unplaced, f"give these a layer in LAYERS: {unplaced}"


def _upward(sources: list[tuple[Path, str]]) -> list[str]:
    """Each import in ``sources`` (file, module name) that goes up a layer or across the fourth."""
    upward = []
    for path, module in sources:
        me = _top(module)
        for line, target in _imports(path, module):
            other = _top(target)
            if other not in LAYER_OF or other == me:
                continue  # a name imported from a module (not a module), or its own package
            if LAYER_OF[other] > LAYER_OF[me] or (LAYER_OF[other] == LAYER_OF[me] == 4):
                upward.append(f"{module}:{line} ({me}, layer {LAYER_OF[me]}) imports {target} "
                              f"(layer {LAYER_OF[other]})")
    return upward


def test_imports_only_go_down():
    upward = _upward([(path, _module_name(path)) for path in _sources()])
    assert not upward, "imports against the layers:\n" + "\n".join(upward)


def test_command_line_modules_live_in_the_cli_package():
    stray = [str(p.relative_to(PACKAGE.parent)) for p in _sources()
             if (p.name == "cli.py" or p.name.endswith("_cli.py")) and p.parent.name != "cli"]
    assert not stray, f"every command-line module belongs in workbench/cli/: {stray}"


def test_no_two_modules_share_a_name_without_sharing_a_role():
    """A file name repeats only across sibling packages, where it names the same role (each backend
    package's render.py and readback.py); the command modules are named for their commands."""
    by_name: dict[str, list[Path]] = defaultdict(list)
    for path in _sources():
        if path.name not in PACKAGE_FILES and path.parent.name != "cli":
            by_name[path.name].append(path)
    shared = {name: [str(p.relative_to(PACKAGE.parent)) for p in paths] for name, paths in by_name.items()
              if len(paths) > 1 and len({p.parent.parent for p in paths}) > 1}
    assert not shared, f"modules that share a name outside sibling packages: {shared}"


def test_the_walk_sees_upward_and_sideways_imports(tmp_path):
    """The check can fail: a function-local import of measuring in a base module, a relative import
    of the server from generate, and deploy importing tutorial are each reported; downward ones are not."""
    limits = tmp_path / "limits.py"
    limits.write_text("from workbench.spec import TensorSpec\n\ndef f():\n    from workbench.measure.engine import measure\n")
    generate = tmp_path / "generate_cli.py"
    generate.write_text("from ..server import pytorch\nfrom . import config\n")
    deploy = tmp_path / "doctor.py"
    deploy.write_text("from workbench.tutorial import examples\nfrom workbench.server import TritonServer\n")
    found = _upward([(limits, "workbench.limits"), (generate, "workbench.generate.cli"),
                     (deploy, "workbench.deploy.doctor")])
    assert found == ["workbench.limits:4 (limits, layer 0) imports workbench.measure.engine (layer 3)",
                     "workbench.limits:4 (limits, layer 0) imports workbench.measure.engine.measure (layer 3)",
                     "workbench.generate.cli:1 (generate, layer 1) imports workbench.server (layer 2)",
                     "workbench.generate.cli:1 (generate, layer 1) imports workbench.server.pytorch (layer 2)",
                     "workbench.deploy.doctor:1 (deploy, layer 4) imports workbench.tutorial (layer 4)",
                     "workbench.deploy.doctor:1 (deploy, layer 4) imports workbench.tutorial.examples (layer 4)"]
