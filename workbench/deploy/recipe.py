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

import dataclasses
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
    NEURON_BASES,
    NEURON_PIP_INDEX,
    RAY_VERSION,
    SOURCES,
    STACKS,
    TRITON_IMAGE,
    WORKBENCH_PYTHON,
    Fact,
    NeuronBase,
    Stack,
    ray_worker_pip,
    stub_python_of,
)

__all__ = [
    "RecipeError",
    "Recipe",
    "recipe_for",
    "host_folder",
    "write_recipe",
    "RECIPE_FILES",
    "IMAGE_NAME",
    "BASES",
]

RECIPE_FILES = ("Dockerfile", "setup-host.sh", "RECIPE.md")
IMAGE_NAME = "workbench/tritonserver-neuron"  # the local name `docker build -t` gives the serving image
_KEYRING = "/usr/share/keyrings/aws-neuron.gpg"
BASES = ("triton", "neuron")  # what a recipe builds FROM: Triton's image, or a Neuron DLC with tritonserver built in
_TRITON_BUILD = "/opt/tritonbuild"  # where the Neuron-base Dockerfile's first stage builds Triton


class RecipeError(WorkbenchError, ValueError):
    """No recipe fits the request (an unsupported target/framework pair, or an image whose Python
    cannot run the framework); the message says why and what would fit."""


@dataclass(frozen=True)
class Recipe:
    """One target and framework's stack, with the base image it builds on: Triton's, or with
    ``neuron_base`` a Neuron DLC that tritonserver is built into."""

    target: str
    framework: str
    stack: Stack
    base_image: str
    neuron_base: NeuronBase | None = None
    ray: bool = False  # the image is also a Ray worker's (`workbench deploy --ray-cluster`)

    @property
    def folder_name(self) -> str:
        """The folder `workbench deploy` writes the recipe to: one per stack, base and Ray layer."""
        return self.stack.key + ("-neuron-base" if self.neuron_base else "") + ("-ray" if self.ray else "")

    @property
    def image(self) -> str:
        """The tag of the image the Dockerfile builds (what `docker run` and the manifests use)."""
        ray = f"-ray{RAY_VERSION}" if self.ray else ""
        if self.neuron_base is not None:
            triton = self.neuron_base.triton_branch.value.removeprefix("r")
            return f"{IMAGE_NAME}:{triton}-neuronbase-{self.stack.key}-{self.stack.release.value}{ray}"
        base = image_reference(self.base_image, "image")
        tag = (base.tag or "latest").removesuffix("-py3")
        return f"{IMAGE_NAME}:{tag}-{self.stack.key}-{self.stack.release.value}{ray}"

    def base_choice(self) -> str:
        """One line: which image the recipe builds on, and why (what `deploy --dry-run` shows first)."""
        nb = self.neuron_base
        if nb is not None:
            return f"{self.target} / {self.framework}: builds FROM {self.base_image} with tritonserver built in: {nb.why.value}"
        line = f"{self.target} / {self.framework}: builds FROM Triton's {self.base_image}"
        if self.stack.key in NEURON_BASES:
            line += (
                f"; its {self.framework} Neuron wheels on Ubuntu 24.04 / Python {self.stack.stub_python.value} "
                f"are UNVERIFIED [{NEURON_BASES[self.stack.key].why.source}]: --base neuron builds FROM "
                f"{NEURON_BASES[self.stack.key].image.value} instead"
            )
        return line

    def facts(self) -> list[tuple[str, Fact]]:
        """Every (what, fact) the recipe rests on, in reading order."""
        s = self.stack
        nb = self.neuron_base
        if nb is None:
            rows = [
                ("Triton container", Fact(self.base_image, s.container.source, s.container.verified, s.container.note)),
                ("python backend stub's Python", s.stub_python),
            ]
        else:
            rows = [
                ("Neuron base image", nb.image),
                ("why this base", nb.why),
                ("its Python (the stub is built for it)", nb.python),
                ("tritonserver from", nb.how),
                ("Triton source branch", nb.triton_branch),
            ]
            rows += [("build.py flag", f) for f in nb.build_flags]
            rows += [("apt to build Triton", f) for f in nb.build_apt]
            rows += [("pip to build Triton", f) for f in nb.build_pip]
            rows += [("apt to run tritonserver", f) for f in nb.runtime_apt]
            rows += [("note", f) for f in nb.notes]
        rows += [
            (f"{s.framework} Neuron wheels' Pythons", s.python_range),
            ("Neuron SDK release", s.release),
        ]
        rows += [("pip (Neuron extra index)", f) for f in s.pip]
        rows += [("pip extra index", f) for f in s.extra_indexes]
        rows += [("apt in the image", f) for f in s.container_apt]
        rows += [("apt on the host", f) for f in s.host_apt]
        if s.serving_backend is not None:
            rows.append((f"Triton {s.serving_backend.name} backend commit", s.serving_backend.commit))
        rows += [("note", f) for f in s.notes if nb is None or f.source != "SDK-tn-u26"]
        rows += [("pip for a Ray worker", f) for f in (ray_worker_pip() if self.ray else ())]
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
        lines = [
            f"# host recipe: {self.target} / {self.framework} (stack {self.stack.key}); builds image {self.image}",
            f"# {self.base_choice()}",
        ]
        for what, fact in rows:
            note = f" -- {fact.note}" if fact.note else ""
            lines.append(f"{what:<{width}}  {fact.value}{note}  [{fact.cite()}]")
        return "\n".join(lines)

    def cited(self) -> list[str]:
        """Every source tag the recipe rests on: each fact's, and those its notes name as ``[TAG]``."""
        facts = [f for _, f in self.facts()]
        named = {tag for f in facts for tag in re.findall(r"\[([A-Za-z0-9.-]+)\]", f.note) if tag in SOURCES}
        return sorted({f.source for f in facts} | named)

    def _sdk_pip_lines(self, python: str) -> list[str]:
        """The SDK's pip command for the stack, into ``python`` (the stub's), after checking its version."""
        s = self.stack
        wheels = " ".join(shlex.quote(f.value) for f in s.pip)
        indexes = "".join(f" --extra-index-url {f.value}" for f in s.extra_indexes)
        major, minor = python.split(".")
        return [
            f"# The wheels go into the stub's own Python {python}: no EXECUTION_ENV_PATH needed.",
            f"RUN python3 -c 'import sys; assert sys.version_info[:2] == ({major}, {minor}), sys.version' \\",
            f" && python3 -m pip install --no-cache-dir --extra-index-url {NEURON_PIP_INDEX}{indexes} {wheels}",
        ]

    def _neuron_base_dockerfile(self, nb: NeuronBase) -> str:
        """Two stages on the Neuron DLC: build.py builds tritonserver and a python backend stub for
        the DLC's Python, then the serving stage takes the install tree and the SDK's pip command."""
        build_apt = " ".join(shlex.quote(f.value) for f in nb.build_apt)
        build_pip = " ".join(shlex.quote(f.value) for f in nb.build_pip)
        flags = " ".join(f.value for f in nb.build_flags)
        runtime_apt = " ".join(shlex.quote(f.value) for f in nb.runtime_apt)
        major, minor = nb.python.value.split(".")
        lines = [
            f"# Triton + Neuron serving image for {self.target} / {self.framework} on a Neuron base: written by "
            "`workbench deploy --base neuron`.",
            f"# Build on the Neuron host: docker build -t {self.image} .",
            "# Every pin and its source: RECIPE.md beside this file. UNVERIFIED: never built here.",
            f"# Stage 1: Triton's build.py, without its container, inside the Neuron base ({nb.triton_branch.value}).",
            f"FROM {self.base_image} AS tritonbuild",
            "ARG DEBIAN_FRONTEND=noninteractive",
            "ENV PIP_BREAK_SYSTEM_PACKAGES=1",
            f"RUN apt-get update && apt-get install -y --no-install-recommends {build_apt} \\",
            " && rm -rf /var/lib/apt/lists/*",
            f"RUN python3 -c 'import sys; assert sys.version_info[:2] == ({major}, {minor}), sys.version' \\",
            f" && python3 -m pip install --no-cache-dir {build_pip}",
            f"RUN git clone --depth 1 --branch {nb.triton_branch.value} "
            f"https://github.com/triton-inference-server/server.git {_TRITON_BUILD}/server \\",
            f" && cd {_TRITON_BUILD}/server \\",
            f" && python3 build.py -v {flags} --build-dir={_TRITON_BUILD}/build \\",
            f"    --install-dir={_TRITON_BUILD}/install \\",
            f" && test -x {_TRITON_BUILD}/install/bin/tritonserver \\",
            f" && test -x {_TRITON_BUILD}/install/backends/python/triton_python_backend_stub",
            "# Stage 2: the Neuron base with tritonserver, its runtime libraries and the SDK's pip command.",
            f"FROM {self.base_image}",
            "ARG DEBIAN_FRONTEND=noninteractive",
            "ENV PIP_BREAK_SYSTEM_PACKAGES=1",
            f"RUN apt-get update && apt-get install -y --no-install-recommends {runtime_apt} \\",
            " && rm -rf /var/lib/apt/lists/*",
            f"COPY --from=tritonbuild {_TRITON_BUILD}/install /opt/tritonserver",
            "ENV PATH=/opt/tritonserver/bin:/opt/aws/neuron/bin:$PATH",
            *self._sdk_pip_lines(nb.python.value),
            *self._ray_lines(),
            "RUN tritonserver --help >/dev/null",
            "# `docker run IMAGE tritonserver ...` runs tritonserver, whatever entrypoint the DLC sets.",
            "ENTRYPOINT []",
            "",
        ]
        return "\n".join(lines)

    def dockerfile(self) -> str:
        s = self.stack
        if self.neuron_base is not None:
            return self._neuron_base_dockerfile(self.neuron_base)
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
        lines += self._sdk_pip_lines(s.stub_python.value)
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
        lines += self._ray_lines()
        lines.append("")
        return "\n".join(lines)

    def _ray_lines(self) -> list[str]:
        """The Ray worker layer (`ray=True`): Ray Core and the workbench, checked to import at the pin."""
        if not self.ray:
            return []
        wheels = " ".join(shlex.quote(f.value) for f in ray_worker_pip())
        check = f'import ray, workbench.measure.cluster; assert ray.__version__ == "{RAY_VERSION}", ray.__version__'
        return [
            "# A Ray worker for `workbench sweep --ray` and compile_on_ray: Ray Core at the workbench's pin and",
            "# the workbench, whose code each task runs (the driver: the same Ray and Python minor).",
            f"RUN python3 -m pip install --no-cache-dir {wheels} \\",
            f" && python3 -c {shlex.quote(check)}",
        ]

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
            f"Base: {self.base_choice()}",
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


def recipe_for(
    target: str, framework: str = "pytorch", *, image: str | None = None, base: str = "triton", ray: bool = False
) -> Recipe:
    """The recipe for ``target`` and ``framework``; ``image`` replaces the stack's Triton image when its
    stub's Python fits the framework (a custom image is taken at the user's word). ``base="neuron"``
    builds on the stack's Neuron DLC with tritonserver built in (`releases.NEURON_BASES`). ``ray``
    adds a Ray worker's layer (Ray Core and the workbench), refused where the image's Python is
    older than the workbench's."""
    recipe = _recipe(target, framework, image, base)
    if not ray:
        return recipe
    if recipe.neuron_base is not None:
        python: str | None = recipe.neuron_base.python.value
    elif recipe.base_image == TRITON_IMAGE.format(tag=recipe.stack.container.value):
        python = recipe.stack.stub_python.value
    else:  # a custom image: its Python where its tag names a Triton release, else the user's word
        known = stub_python_of(recipe.base_image)
        python = known.value if known is not None else None
    if python is not None and tuple(int(part) for part in python.split(".")[:2]) < WORKBENCH_PYTHON:
        raise RecipeError(
            f"a Ray worker runs the workbench, which needs Python {'.'.join(map(str, WORKBENCH_PYTHON))} or "
            f"newer; the {target} / {framework} image ({recipe.base_image}) has Python {python}: sweep this "
            "model on one server (no --ray)"
        )
    return dataclasses.replace(recipe, ray=True)


def _recipe(target: str, framework: str, image: str | None, base: str) -> Recipe:
    if base not in BASES:
        raise RecipeError(f"base must be one of {', '.join(BASES)}, got {base!r}")
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
    if base == "neuron":
        neuron_base = NEURON_BASES.get(stack.key)
        if neuron_base is None:
            fits = sorted({t for key in NEURON_BASES for s in STACKS if s.key == key for t in s.targets})
            raise RecipeError(
                f"--base neuron is for the TorchNeuron targets ({', '.join(fits)}); {target} / {framework} "
                "builds on Triton's image (--base triton)"
            )
        if image is not None:
            raise RecipeError(
                "--base neuron builds FROM the Neuron DLC it names; give --image or --base neuron, not both"
            )
        return Recipe(target, framework, stack, neuron_base.image.value, neuron_base)
    base_image = TRITON_IMAGE.format(tag=stack.container.value)
    if image is not None and image != base_image:
        try:
            image_reference(image, "image")
        except ValueError as err:
            raise RecipeError(str(err)) from None
        python = stub_python_of(image)
        if python is not None and python.value not in stack.pythons:
            raise RecipeError(_execution_env_help(stack, image, python.value))
        base_image = image
    return Recipe(target, framework, stack, base_image)


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
