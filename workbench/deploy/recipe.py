"""The Neuron host recipe for a target and framework: a Dockerfile, a host set-up script, their sources.

The stock Triton container has no Neuron packages and upstream's setup.sh installs unpinned ones,
which today resolve to a driver that drops Inf1 and wheels that need another Python than the
container's stub. A recipe picks one `facts.Stack` (container, stub Python, SDK release and pins
that fit together) and writes it as text: the Dockerfile builds the serving image FROM the Triton
image, the script sets up the host (driver, tools), RECIPE.md lists every fact with its source.
Written beside the model repository, never over a user's files (`write_model_dir` refuses, or
keeps a backup).
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from workbench.deploy.devices import family_of
from workbench.deploy.facts_vllm import VLLM_STACKS
from workbench.deploy.names import image_reference
from workbench.generate.repository import WriteResult, write_model_dir
from workbench.refusals import WorkbenchError
from workbench.releases import (
    NEURON_APT_KEY,
    NEURON_APT_REPO,
    NEURON_PIP_INDEX,
    SOURCES,
    STACKS,
    TRITON_IMAGE,
    Fact,
    Stack,
    stub_python_of,
)

__all__ = ["RecipeError", "Recipe", "recipe_for", "host_folder", "write_recipe", "RECIPE_FILES", "IMAGE_NAME"]

RECIPE_FILES = ("Dockerfile", "setup-host.sh", "RECIPE.md")
IMAGE_NAME = "workbench/tritonserver-neuron"  # the local name `docker build -t` gives the serving image
_KEYRING = "/usr/share/keyrings/aws-neuron.gpg"


class RecipeError(WorkbenchError, ValueError):
    """No recipe fits the request (an unsupported target/framework pair, or an image whose Python
    cannot run the framework); the message says why and what would fit."""


@dataclass(frozen=True)
class Recipe:
    """One target and framework's stack, with the base image it builds on."""

    target: str
    framework: str
    stack: Stack
    base_image: str

    @property
    def image(self) -> str:
        """The tag of the image the Dockerfile builds (what `docker run` and the manifests use)."""
        base = image_reference(self.base_image, "image")
        tag = (base.tag or "latest").removesuffix("-py3")
        return f"{IMAGE_NAME}:{tag}-{self.stack.key}-{self.stack.release.value}"

    def facts(self) -> list[tuple[str, Fact]]:
        """Every (what, fact) the recipe rests on, in reading order."""
        s = self.stack
        rows = [
            ("Triton container", Fact(self.base_image, s.container.source, s.container.verified, s.container.note)),
            ("python backend stub's Python", s.stub_python),
            (f"{s.framework} Neuron wheels' Pythons", s.python_range),
            ("Neuron SDK release", s.release),
        ]
        rows += [("pip (Neuron extra index)", f) for f in s.pip]
        rows += [("pip extra index", f) for f in s.extra_indexes]
        rows += [("apt in the image", f) for f in s.container_apt]
        rows += [("apt on the host", f) for f in s.host_apt]
        if s.serving_backend is not None:
            rows.append((f"Triton {s.serving_backend.name} backend commit", s.serving_backend.commit))
        rows += [("note", f) for f in s.notes]
        return rows

    def table(self) -> list[dict]:
        """Rows for a preview: what, value, source, date, verified, note."""
        return [
            {
                "what": what,
                "value": f.value,
                "source": f.source,
                "date": SOURCES[f.source].date,
                "verified": f.verified,
                "note": f.note,
            }
            for what, f in self.facts()
        ]

    def text(self) -> str:
        """The facts as aligned plain text, UNVERIFIED ones marked."""
        rows = self.facts()
        width = max(len(what) for what, _ in rows)
        lines = [f"# host recipe: {self.target} / {self.framework} (stack {self.stack.key}); builds image {self.image}"]
        for what, fact in rows:
            note = f" -- {fact.note}" if fact.note else ""
            lines.append(f"{what:<{width}}  {fact.value}{note}  [{fact.cite()}]")
        return "\n".join(lines)

    def cited(self) -> list[str]:
        """Every source tag the recipe rests on: each fact's, and those its notes name as ``[TAG]``."""
        facts = [f for _, f in self.facts()]
        named = {tag for f in facts for tag in re.findall(r"\[([A-Za-z0-9.-]+)\]", f.note) if tag in SOURCES}
        return sorted({f.source for f in facts} | named)

    def dockerfile(self) -> str:
        s = self.stack
        lines = [
            f"# Triton + Neuron serving image for {self.target} / {self.framework}: written by `workbench deploy`.",
            f"# Build on the Neuron host: docker build -t {self.image} .",
            "# Every pin and its source: RECIPE.md beside this file.",
            f"FROM {self.base_image}",
            "ARG DEBIAN_FRONTEND=noninteractive",
        ]
        if s.container_apt:
            packages = " ".join(shlex.quote(f.value) for f in s.container_apt)
            tools = "wget gnupg ca-certificates" + (" git" if any("git+" in f.value for f in s.pip) else "")
            lines += [
                "# The Neuron apt repository (SDK setup guide; the key goes to a keyring instead of apt-key).",
                f"RUN apt-get update && apt-get install -y --no-install-recommends {tools} \\",
                f" && wget -qO - {NEURON_APT_KEY} | gpg --dearmor -o {_KEYRING} \\",
                " && . /etc/os-release \\",
                f' && echo "deb [signed-by={_KEYRING}] {NEURON_APT_REPO} ${{VERSION_CODENAME}} main" \\',
                "    > /etc/apt/sources.list.d/neuron.list \\",
                f" && apt-get update && apt-get install -y --no-install-recommends {packages} \\",
                " && rm -rf /var/lib/apt/lists/*",
                "ENV PATH=/opt/aws/neuron/bin:$PATH",
            ]
        wheels = " ".join(shlex.quote(f.value) for f in s.pip)
        indexes = "".join(f" --extra-index-url {f.value}" for f in s.extra_indexes)
        major, minor = self.stack.stub_python.value.split(".")
        lines += [
            f"# The wheels go into the stub's own Python {s.stub_python.value}: no EXECUTION_ENV_PATH needed.",
            f"RUN python3 -c 'import sys; assert sys.version_info[:2] == ({major}, {minor}), sys.version' \\",
            f" && python3 -m pip install --no-cache-dir --extra-index-url {NEURON_PIP_INDEX}{indexes} {wheels}",
        ]
        backend = s.serving_backend
        if backend is not None:
            folder = f"/opt/tritonserver/backends/{backend.name}"
            lines += [
                f"# Triton's {backend.name} backend, its README's Option 3: the framework above, then the "
                f"repository's {backend.folder}/ as {folder}.",
                f"RUN mkdir -p {folder} && wget -qO /tmp/{backend.name}_backend.tar.gz {backend.archive} \\",
                f" && tar -xzf /tmp/{backend.name}_backend.tar.gz -C {folder} --strip-components=2 "
                f"--wildcards '*/{backend.folder}/*' \\",
                f" && rm /tmp/{backend.name}_backend.tar.gz && test -f {folder}/model.py",
            ]
        lines.append("")
        return "\n".join(lines)

    def host_script(self) -> str:
        packages = " ".join(f'"{f.value}"' if "$" in f.value else shlex.quote(f.value) for f in self.stack.host_apt)
        return "\n".join(
            [
                "#!/usr/bin/env bash",
                f"# Neuron host set-up for {self.target} ({self.stack.key}, Neuron {self.stack.release.value}), Ubuntu.",
                "# Written by `workbench deploy`; every pin and its source: RECIPE.md beside this file.",
                "set -euo pipefail",
                'cd "$(dirname "$0")"',
                ". /etc/os-release",
                f"wget -qO - {NEURON_APT_KEY} | sudo gpg --batch --yes --dearmor -o {_KEYRING}",
                f'echo "deb [signed-by={_KEYRING}] {NEURON_APT_REPO} ${{VERSION_CODENAME}} main" \\',
                "  | sudo tee /etc/apt/sources.list.d/neuron.list >/dev/null",
                "sudo apt-get update",
                f"sudo apt-get install -y {packages}",
                "export PATH=/opt/aws/neuron/bin:$PATH",
                "neuron-ls  # the devices and cores the driver sees",
                "if ! command -v docker >/dev/null; then",
                "  echo 'docker is not installed: see the Neuron guide \"Docker environment setup\"' >&2; exit 1",
                "fi",
                f"docker build -t {shlex.quote(self.image)} .",
                "",
            ]
        )

    def markdown(self, docker_run: str | None = None) -> str:
        """RECIPE.md: the facts with sources, how to use the two files, and the docker run line."""
        lines = [
            f"# Neuron host recipe: {self.target} / {self.framework}",
            "",
            f"Stack `{self.stack.key}`; the Dockerfile builds `{self.image}` FROM `{self.base_image}`. "
            "Nothing here was run on Neuron hardware: these are documented package combinations.",
            "",
            "1. On a fresh Neuron host: `bash setup-host.sh` (driver, tools, then builds the image).",
            "2. Serve the model repository with the docker run below (or the Kubernetes manifests).",
            "",
            "| what | value | source | as of | verified | note |",
            "|---|---|---|---|---|---|",
        ]
        for row in self.table():
            lines.append(
                f"| {row['what']} | `{row['value']}` | {row['source']} | {row['date']} | "
                f"{'yes' if row['verified'] else '**no**'} | {row['note']} |"
            )
        lines += ["", "## Sources", ""]
        for tag in self.cited():
            source = SOURCES[tag]
            lines.append(f"- **{tag}**: {source.title}. {source.where} (as of {source.date})")
        if docker_run:
            lines += ["", "## docker run", "", "```bash", docker_run, "```"]
        return "\n".join(lines) + "\n"

    def files(self, docker_run: str | None = None, extra: dict[str, str] | None = None) -> dict[str, str]:
        """The recipe's files, plus ``extra`` ones the run needs beside them (a vLLM model's
        one-instance config, `workbench.deploy.vllm_instances`)."""
        return {
            "Dockerfile": self.dockerfile(),
            "setup-host.sh": self.host_script(),
            "RECIPE.md": self.markdown(docker_run),
            **(extra or {}),
        }


def _execution_env_help(stack: Stack, image: str, python: str) -> str:
    return (
        f"{image}'s python backend stub runs Python {python}, but the {stack.framework} Neuron wheels "
        f"for {stack.targets[0]} are built for Python {stack.python_range.value} [{stack.python_range.source}]. "
        f"Use the recipe's container ({TRITON_IMAGE.format(tag=stack.container.value)}), or give the model "
        f"an EXECUTION_ENV_PATH: a conda-pack'ed environment of Python {python} cannot hold these wheels, so "
        f"it needs an environment of Python {stack.pythons[-1]} AND a triton_python_backend_stub built for "
        "that Python placed in the model directory beside config.pbtxt [PB]"
    )


def recipe_for(target: str, framework: str = "pytorch", *, image: str | None = None) -> Recipe:
    """The recipe for ``target`` and ``framework``; ``image`` replaces the stack's Triton image when its
    stub's Python fits the framework (a custom image is taken at the user's word)."""
    target = family_of(target)
    if target == "cpu":
        raise RecipeError("target cpu needs no Neuron host recipe: serve it with the stock Triton image or here")
    stacks = [s for s in (*STACKS, *VLLM_STACKS) if target in s.targets]
    if not stacks:
        known = sorted({t for s in (*STACKS, *VLLM_STACKS) for t in s.targets})
        raise RecipeError(f"no host recipe for target {target!r}; known targets: {', '.join(known)}")
    stack = next((s for s in stacks if s.framework == framework), None)
    if stack is None:
        fits = [s.framework for s in stacks]
        raise RecipeError(
            f"{framework} has no Neuron SDK for {target} [SDK-man supported_instances]; "
            f"for {target} use {', '.join(fits)}"
        )
    base = TRITON_IMAGE.format(tag=stack.container.value)
    if image is not None and image != base:
        try:
            image_reference(image, "image")
        except ValueError as err:
            raise RecipeError(str(err)) from None
        python = stub_python_of(image)
        if python is not None and python.value not in stack.pythons:
            raise RecipeError(_execution_env_help(stack, image, python.value))
        base = image
    return Recipe(target, framework, stack, base)


def host_folder(repository: str | os.PathLike[str]) -> Path:
    """Where a repository's recipe goes by default: ``neuron-host/`` beside it (never inside: a
    tritonserver tries to load every folder of its repository)."""
    return Path(repository).resolve().parent / "neuron-host"


def write_recipe(
    recipe: Recipe,
    folder: str | os.PathLike[str],
    *,
    docker_run: str | None = None,
    overwrite: bool = False,
    extra: dict[str, str] | None = None,
) -> WriteResult:
    """Write the recipe's files (and ``extra``) as ``folder``, all or nothing; an existing folder is
    refused unless ``overwrite``, and then kept as a timestamped backup (`write_model_dir`)."""
    result = write_model_dir(Path(folder), recipe.files(docker_run, extra), overwrite=overwrite)
    os.chmod(result.path / "setup-host.sh", 0o755)
    return result
