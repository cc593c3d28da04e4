"""The host recipe: its fact table, the files it writes and what it refuses.

No Neuron host, docker engine or Neuron package index is reachable here, so these tests cannot
build the image; they hold the recipe to its own table (every value cited and dated, the stub's
Python inside every framework's range, the Inf1 driver pin), check the host script with bash's
parser, and check that nothing a user made is overwritten.
"""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from workbench.releases import SOURCES, STACKS, TRITON_IMAGE, Fact, stub_python_of
from workbench.deploy.recipe import RECIPE_FILES, RecipeError, host_folder, recipe_for, write_recipe
from workbench.generate.repository import RepositoryError


def test_every_fact_cites_a_dated_source():
    for stack in STACKS:
        recipe = recipe_for(stack.targets[0], stack.framework)
        rows = recipe.table()
        assert len(rows) >= 6
        for row in rows:
            assert row["source"] in SOURCES
            assert re.fullmatch(r"20\d\d-\d\d-\d\d", row["date"]), row
    with pytest.raises(ValueError, match="unknown source 'nowhere'"):
        Fact("1.0", "nowhere")


def test_each_stack_fits_its_stub_python_and_its_targets():
    """The point of the table: the container's stub Python runs the framework's Neuron wheels."""
    pairs = {(t, s.framework) for s in STACKS for t in s.targets}
    assert pairs == {("inf1", "pytorch"), ("inf1", "tensorflow"), ("inf2", "pytorch"), ("trn1", "pytorch"),
                     ("trn2", "pytorch"), ("trn3", "pytorch"), ("inf2", "tensorflow"), ("trn1", "tensorflow"),
                     ("inf2", "transformers_neuronx"), ("trn1", "transformers_neuronx")}
    for stack in STACKS:
        assert stack.stub_python.value in stack.pythons, stack.key
        image = TRITON_IMAGE.format(tag=stack.container.value)
        assert stub_python_of(image).value == stack.stub_python.value, stack.key
    assert recipe_for("inf1").stack.container.value == "24.10"
    assert recipe_for("trn2").stack.container.value == recipe_for("inf2").stack.container.value
    assert recipe_for("trn2").stack.key == recipe_for("trn3").stack.key == "torchneuron-pytorch"
    assert recipe_for("inf2").stack.key == recipe_for("trn1").stack.key == "xla-pytorch"


def test_the_pins_are_2_34_and_each_names_its_source():
    """releases.py is checked against Neuron 2.34.0; trn2/trn3 install TorchNeuron, inf2/trn1 the XLA
    line's explicit pin in its tested pairing (2.31.1's container and the archive update page), the
    out-of-support stacks say so, and the tnx stack pins transformers."""
    from workbench.releases import LATEST_RELEASE, pins_for

    assert LATEST_RELEASE.value == "2.34.0" and "2.34.0" in SOURCES[LATEST_RELEASE.source].title
    torchneuron, xla = recipe_for("trn3").stack, recipe_for("inf2").stack
    assert torchneuron.release.value == "2.34.0" and torchneuron.python_range.value == "3.12-3.14"
    assert [f.value for f in torchneuron.pip][0] == "torch-neuronx==2.14.3.1"
    assert [f.value for f in xla.pip] == ["neuronx-cc==2.26.6360.0", "torch-neuronx==2.9.0.2.15.32035"]
    assert {f.source for f in xla.pip} == {"SDK-xla-update"}
    assert "transformers==4.48.*" in [f.value for f in recipe_for("inf2", "transformers_neuronx").stack.pip]
    for target, framework in (("inf1", "pytorch"), ("inf1", "tensorflow"), ("inf2", "tensorflow"),
                              ("trn1", "transformers_neuronx")):
        assert recipe_for(target, framework).stack.release.note.startswith("OUT OF SUPPORT"), (target, framework)
    assert pins_for("trn2") == ("torch-neuronx==2.14.3.1", "neuronx-cc==2.28.7631.0", "nki==0.7.0")
    # the SDK's own TorchNeuron command: nki, and PyTorch's CPU index beside the Neuron one (SDK-tn-pip)
    assert [f.value for f in torchneuron.extra_indexes] == ["https://download.pytorch.org/whl/cpu"]
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in SOURCES["SDK-tn-pip"].title
    tn_docker = recipe_for("trn2").dockerfile()
    assert ("--extra-index-url https://pip.repos.neuron.amazonaws.com --extra-index-url "
            "https://download.pytorch.org/whl/cpu torch-neuronx==2.14.3.1 neuronx-cc==2.28.7631.0 nki==0.7.0"
            in tn_docker)
    assert "download.pytorch.org" not in recipe_for("inf2").dockerfile()  # the XLA line's command has no such index
    # Triton 26.10 (2.74.0) is the newest release; its OS and Python were not read, so the row says UNVERIFIED
    assert torchneuron.container.value == xla.container.value == "26.10" and not torchneuron.container.verified
    for stack in STACKS:
        for fact in (stack.release, *stack.pip, *stack.container_apt, *stack.host_apt):
            assert fact.source in SOURCES, (stack.key, fact)


def test_inf1_pins_the_last_driver_that_supports_it():
    for framework in ("pytorch", "tensorflow"):
        recipe = recipe_for("inf1", framework)
        host = [f.value for f in recipe.stack.host_apt]
        assert "aws-neuronx-dkms=2.24.*" in host
        assert not recipe.stack.container_apt  # libnrt ships inside torch-neuron / tensorflow-neuron
        assert "'aws-neuronx-dkms=2.24.*'" in recipe.host_script()
    assert "aws-neuronx-dkms=2.31.7.0*" in [f.value for f in recipe_for("inf2").stack.host_apt]


def test_the_dockerfile_builds_from_the_fitting_image_with_the_pins():
    recipe = recipe_for("inf2", "pytorch")
    text = recipe.dockerfile()
    assert text.splitlines()[3] == "FROM nvcr.io/nvidia/tritonserver:26.10-py3"
    assert "sys.version_info[:2] == (3, 12)" in text  # the build fails if the stub's Python is not the table's
    for fact in recipe.stack.pip + recipe.stack.container_apt:
        assert fact.value in text
    assert "--extra-index-url https://pip.repos.neuron.amazonaws.com" in text
    assert "signed-by=/usr/share/keyrings/aws-neuron.gpg" in text
    tf = recipe_for("trn1", "tensorflow").dockerfile()
    assert "FROM nvcr.io/nvidia/tritonserver:24.10-py3" in tf and "(3, 10)" in tf and "'protobuf<3.20'" in tf
    assert recipe.image != recipe_for("inf1").image  # one image per stack, not one for all


def test_unverified_facts_are_marked_in_every_rendering():
    recipe = recipe_for("inf2", "transformers_neuronx")
    unverified = [row for row in recipe.table() if not row["verified"]]
    assert unverified
    assert recipe.text().count("UNVERIFIED") == len(unverified)
    assert recipe.markdown().count("| **no** |") == len(unverified)


def test_the_host_script_parses_as_bash(tmp_path):
    for stack in STACKS:
        script = tmp_path / f"{stack.key}.sh"
        script.write_text(recipe_for(stack.targets[0], stack.framework).host_script())
        done = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr


def test_what_has_no_recipe_is_refused_with_the_reason():
    with pytest.raises(RecipeError, match="tensorflow has no Neuron SDK for trn2.*use pytorch"):
        recipe_for("trn2", "tensorflow")
    with pytest.raises(RecipeError, match="transformers_neuronx has no Neuron SDK for inf1"):
        recipe_for("inf1", "transformers_neuronx")
    with pytest.raises(RecipeError, match="target cpu needs no"):
        recipe_for("cpu")
    with pytest.raises(RecipeError, match="no host recipe for target 'p4d'"):
        recipe_for("p4d")
    # a Python 3.12 container cannot run torch-neuron: the message says both ways out
    with pytest.raises(RecipeError, match=r"(?s)Python 3.12.*3.9-3.10.*24.10-py3.*EXECUTION_ENV_PATH.*stub built"):
        recipe_for("inf1", "pytorch", image="nvcr.io/nvidia/tritonserver:26.06-py3")
    assert recipe_for("inf1", image="nvcr.io/nvidia/tritonserver:23.08-py3").base_image.endswith("23.08-py3")
    assert recipe_for("inf2", image="my.registry/triton:custom").base_image == "my.registry/triton:custom"
    with pytest.raises(RecipeError, match="docker image reference"):
        recipe_for("inf2", image="bad image")


def test_written_beside_the_repository_never_over_a_users_files(tmp_path):
    repository = tmp_path / "model_repository"
    repository.mkdir()
    folder = host_folder(repository) / "xla-pytorch"
    assert folder.parent == tmp_path / "neuron-host"
    recipe = recipe_for("trn1")
    written = write_recipe(recipe, folder, docker_run="docker run ...")
    assert sorted(p.name for p in folder.iterdir()) == sorted(RECIPE_FILES)
    assert os.access(folder / "setup-host.sh", os.X_OK)
    assert "docker run ..." in (folder / "RECIPE.md").read_text()
    (folder / "Dockerfile").write_text("# my edits\n")
    with pytest.raises(RepositoryError, match="already exists; nothing was written"):
        write_recipe(recipe, folder)
    assert (folder / "Dockerfile").read_text() == "# my edits\n"
    replaced = write_recipe(recipe, folder, overwrite=True)
    assert replaced.backup is not None and (replaced.backup / "Dockerfile").read_text() == "# my edits\n"
    assert (folder / "Dockerfile").read_text() == recipe.dockerfile() and written.path == folder


def _release_manifest():
    """The Neuron SDK's own release manifest (aws-neuron-sdk src/helperscripts/n2-manifest.json):
    $NEURON_RELEASE_MANIFEST, or ../shared/reference/n2-manifest.json beside the repository."""
    import json
    from pathlib import Path

    candidates = [os.environ.get("NEURON_RELEASE_MANIFEST"),
                  Path(__file__).resolve().parents[2] / "shared" / "reference" / "n2-manifest.json"]
    for candidate in candidates:
        if candidate and Path(candidate).is_file():
            return json.loads(Path(candidate).read_text())
    pytest.skip("the Neuron release manifest is not here (set NEURON_RELEASE_MANIFEST to n2-manifest.json)")


def test_every_pin_is_in_the_sdks_release_manifest_for_its_targets_and_python():
    """The reference, not our table: each pin that cites the manifest exists in a release, for the
    stack's instances and (for wheels) the container stub's Python. (Pins of 2.33/2.34 cite the
    release pages: the stored manifest ends at 2.32.0.)"""
    manifest = _release_manifest()
    listed: dict[str, list[dict]] = {}
    for release in manifest["neuron_releases"]:
        for package in release["packages"]:
            listed.setdefault(package["name"], []).append(dict(package, release=release["neuron_version"]))
    checked = 0
    for stack in STACKS:
        for fact in stack.pip + stack.container_apt + stack.host_apt:
            match = re.fullmatch(r"([a-z0-9_-]+)(?:\[[a-z]+\])?(==|=)([0-9.]+)(\.\*|\*)?", fact.value)
            if match is None or match[1] in ("protobuf", "numpy") or fact.source != "SDK-man":
                continue  # linux-headers, the non-Neuron bounds, and pins cited from other pages
            name, version, wildcard = match[1], match[3], match[4]
            hits = [p for p in listed.get(name, [])
                    if (p["version"].startswith(version) if wildcard else p["version"] == version)]
            assert hits, f"{stack.key}: {fact.value} is in no release of the manifest"
            fits = [p for p in hits if set(stack.targets) <= set(p["supported_instances"])
                    and (not p["supported_python_versions"]
                         or stack.stub_python.value in p["supported_python_versions"])]
            where = [(p["release"], p["supported_instances"], p["supported_python_versions"]) for p in hits]
            assert fits, f"{stack.key}: {fact.value} is listed only for {where}"
            checked += 1
    assert checked >= 15


# ---- the two Neuron vLLM stacks ----------------------------------------------------------------------

def test_a_vllm_model_takes_the_stack_of_its_target_with_every_pin_sourced():
    """Trn2/Trn3: vLLM Neuron (the 2.33.0 component index's pins; 2.34.0's vllm-neuron is in no
    source, and the recipe says so); Inf2/Trn1: vLLM 0.16 with the NxD Inference plugin (2.31.1).
    Every row names a source whose text says where it was read (a URL or a repository at a commit)."""
    from workbench.deploy.facts_vllm import VLLM_STACKS

    neuron, nxdi = recipe_for("trn2", "vllm"), recipe_for("inf2", "vllm")
    assert recipe_for("trn3", "vllm").stack.key == neuron.stack.key == "vllm-neuron"
    assert recipe_for("trn1", "vllm").stack.key == nxdi.stack.key == "vllm-nxdi"
    assert [f.value for f in neuron.stack.pip] == ["vllm-neuron==0.29.0.1.2.0", "torch-neuronx==2.14.3.0",
                                                   "neuronx-cc==2.28.7631.0", "nki==0.7.0"]
    assert "vllm==0.16.0" in [f.value for f in nxdi.stack.pip]
    assert "neuronx-distributed-inference==0.10.18399" in [f.value for f in nxdi.stack.pip]
    assert any("0.16.0-neuronx-py312-sdk2.31.1-ubuntu24.04" in f.value for f in nxdi.stack.notes)
    assert any("2.34.0" in f.value and not f.verified for f in neuron.stack.notes)  # said, not guessed
    # vllm-neuron: no wheel of that version was found; the setup guide installs from source (UNVERIFIED, named)
    plugin = neuron.stack.pip[0]
    assert not plugin.verified and "from source" in plugin.note and plugin.source == "SDK-2.33-components"
    assert "libtorch-neuronx-lite" in neuron.stack.pip[1].note  # what vLLM Neuron really compiles through
    assert any("VLLM_NEURON_CPU_COMPILE=1" in f.value for f in neuron.stack.notes)
    for stack in VLLM_STACKS:
        assert stack.stub_python.value in stack.pythons, stack.key
        recipe = recipe_for(stack.targets[0], "vllm")
        markdown = recipe.markdown()
        for row in recipe.table():
            where = SOURCES[row["source"]].where
            # a web address, a repository at a commit / tag / branch, or the shared reference folder
            assert re.search(r"https://|[a-z]\.(com|io)\b| @ [0-9a-f]{7}| tags v\d|branch r\d|shared/", where), row
            assert f"`{row['value']}`" in markdown and f"**{row['source']}**" in markdown
        assert recipe.text().count("UNVERIFIED") == sum(not r["verified"] for r in recipe.table())


def test_the_vllm_dockerfile_installs_the_pins_and_triton_s_vllm_backend():
    for target, wheels in (("trn2", "vllm-neuron==0.29.0.1.2.0"), ("inf2", "vllm==0.16.0")):
        recipe = recipe_for(target, "vllm")
        text = recipe.dockerfile()
        assert "FROM nvcr.io/nvidia/tritonserver:26.10-py3" in text and "(3, 12)" in text
        for fact in recipe.stack.pip + recipe.stack.container_apt:
            assert fact.value in text
        assert wheels in text
        backend = recipe.stack.serving_backend
        assert backend.archive == ("https://github.com/triton-inference-server/vllm_backend/archive/"
                                   "8de0c148bda1da25de1e05ffaaf67116dacc7264.tar.gz") and backend.archive in text
        assert "test -f /opt/tritonserver/backends/vllm/model.py" in text
    assert " git \\" in recipe_for("inf2", "vllm").dockerfile()  # the plugin is a git requirement
    with pytest.raises(RecipeError, match="vllm has no Neuron SDK for inf1"):
        recipe_for("inf1", "vllm")


def test_the_dockerfile_s_backend_step_unpacks_model_py_where_triton_looks(tmp_path):
    """The Dockerfile's own tar line, run on the vendored archive of the same commit: model.py and
    utils/ land directly in backends/vllm (Triton loads a Python-based backend's model.py there)."""
    import shlex

    from shared_folder import SHARED

    archive = SHARED / "vendor" / "vllm_backend" / "vllm_backend-8de0c14.tar.gz"
    if not archive.is_file():
        pytest.skip(f"the vendored vLLM backend archive is not here ({archive})")
    line = next(ln for ln in recipe_for("trn2", "vllm").dockerfile().splitlines() if "tar -xzf" in ln)
    argv = shlex.split(line.removeprefix(" && ").removesuffix("\\"))
    folder = tmp_path / "backends" / "vllm"
    folder.mkdir(parents=True)
    argv[argv.index("-xzf") + 1] = str(archive)
    argv[argv.index("-C") + 1] = str(folder)
    done = subprocess.run(argv, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert (folder / "model.py").is_file() and (folder / "utils").is_dir()
    assert not (folder / "README.md").exists()


def test_the_vllm_host_scripts_parse_as_bash(tmp_path):
    from workbench.deploy.facts_vllm import VLLM_STACKS

    for stack in VLLM_STACKS:
        script = tmp_path / f"{stack.key}.sh"
        script.write_text(recipe_for(stack.targets[0], "vllm").host_script())
        done = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr


# ---- the Neuron base: a Neuron DLC with tritonserver built in (TorchNeuron targets) -----------------

def test_the_neuron_base_dockerfile_builds_triton_into_the_dlc_and_runs_the_sdk_s_command():
    from workbench.releases import NEURON_BASES

    base = NEURON_BASES["torchneuron-pytorch"]
    triton, neuron = recipe_for("trn2"), recipe_for("trn3", base="neuron")
    lines = neuron.dockerfile().splitlines()
    froms = [ln for ln in lines if ln.startswith("FROM ")]
    assert froms == [f"FROM {base.image.value} AS tritonbuild", f"FROM {base.image.value}"]
    assert base.image.value.startswith("public.ecr.aws/neuron/") and base.image.value.endswith("-ubuntu26.04")
    build = next(ln for ln in lines if "python3 build.py" in ln)
    for flag in ("--no-container-build", "--backend=python", "--endpoint=http", "--endpoint=grpc"):
        assert flag in build.split(), flag
    assert "gpu" not in build  # CPU-only: the image has no CUDA
    assert "--branch r26.10 https://github.com/triton-inference-server/server.git" in neuron.dockerfile()
    assert "COPY --from=tritonbuild /opt/tritonbuild/install /opt/tritonserver" in lines
    # the SDK's own pip command, indexes and pins unchanged, the same line as on Triton's image
    sdk_pip = [ln for ln in triton.dockerfile().splitlines() if "pip.repos.neuron.amazonaws.com" in ln]
    assert len(sdk_pip) == 1 and sdk_pip[0] in lines
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in sdk_pip[0]
    # the stub is built for, and the wheels go into, the DLC's Python 3.14 (checked before each pip)
    assert lines.count("RUN python3 -c 'import sys; assert sys.version_info[:2] == (3, 14), sys.version' \\") == 2
    assert lines[lines.index("COPY --from=tritonbuild /opt/tritonbuild/install /opt/tritonserver") + 1].startswith(
        "ENV PATH=/opt/tritonserver/bin:")
    assert neuron.image != triton.image and neuron.folder_name == "torchneuron-pytorch-neuron-base"
    assert lines[-1] == "ENTRYPOINT []"  # the DLC's own entrypoint would take `tritonserver ...` as its arguments


def test_the_neuron_base_s_choices_each_cite_a_source_and_the_unread_are_marked():
    recipe = recipe_for("trn2", base="neuron")
    rows = {what: f for what, f in recipe.facts()}
    assert rows["Neuron base image"].source == "DLC-trn-2.33"
    assert rows["tritonserver from"].source == "TS-pip" and "no tritonserver wheel" in rows["tritonserver from"].value
    assert rows["Triton source branch"].verified is False
    text, markdown = recipe.text(), recipe.markdown()
    assert "r26.10 -- " in text and "TS-26.10 (UNVERIFIED)" in text
    for tag in ("DLC-trn-2.33", "DLC-u26", "TS-build", "TS-pip", "SDK-tn-u26"):
        assert f"- **{tag}**:" in markdown, tag
    assert "Base: trn2 / pytorch: builds FROM public.ecr.aws/neuron/" in markdown
    # the Triton-image recipe names the fallback; the Neuron one drops the note that pointed to it
    assert "--base neuron builds FROM public.ecr.aws/neuron/" in recipe_for("trn2").base_choice()
    assert "with tritonserver added" not in text and "with tritonserver added" in recipe_for("trn2").text()
    assert "--base neuron" not in recipe_for("inf2").base_choice()


def test_the_neuron_base_is_refused_where_it_does_not_apply():
    with pytest.raises(RecipeError, match=r"--base neuron is for the TorchNeuron targets \(trn2, trn3\); inf2"):
        recipe_for("inf2", base="neuron")
    with pytest.raises(RecipeError, match="--base neuron is for the TorchNeuron targets"):
        recipe_for("trn2", "vllm", base="neuron")
    with pytest.raises(RecipeError, match="not both"):
        recipe_for("trn2", image="nvcr.io/nvidia/tritonserver:26.10-py3", base="neuron")
    with pytest.raises(RecipeError, match="base must be one of triton, neuron"):
        recipe_for("trn2", base="ubuntu")


def test_workbench_deploy_base_neuron_writes_the_second_dockerfile_and_says_why(tmp_path, capsys):
    from workbench.cli import main
    from workbench.generate import GenerateSettings, render, write

    generated = render(GenerateSettings(
        triton_model_dir=str(tmp_path / "model_repository" / "net"), compiled_model="net.trn2.pt",
        for_other_machine=True, target="trn2", neuron_core_range="0:1", max_batch_size=8,
        triton_input=["INPUT__0,FP32,4"], triton_output=["OUTPUT__0,FP32,4"]))
    model_dir = write(generated).path
    assert main(["deploy", str(model_dir), "--dry-run"]) == 0
    shown = capsys.readouterr().out
    assert shown.splitlines()[0].startswith("# base: trn2 / pytorch: builds FROM Triton's nvcr.io/nvidia/tritonserver:")
    assert "--base neuron builds FROM public.ecr.aws/neuron/" in shown.splitlines()[0]
    assert main(["deploy", str(model_dir), "--dry-run", "--base", "neuron"]) == 0
    shown = capsys.readouterr().out
    assert shown.splitlines()[0].startswith("# base: trn2 / pytorch: builds FROM public.ecr.aws/neuron/")
    assert "Ubuntu 26.04 only" in shown.splitlines()[0]
    assert main(["deploy", str(model_dir), "--base", "neuron"]) == 0
    folder = tmp_path / "neuron-host" / "torchneuron-pytorch-neuron-base"
    recipe = recipe_for("trn2", base="neuron")
    assert (folder / "Dockerfile").read_text() == recipe.dockerfile()
    run_section = (folder / "RECIPE.md").read_text().split("## docker run")[1]
    assert f"  {recipe.image} \\" in run_section  # docker run serves the image this Dockerfile builds
    assert not (tmp_path / "neuron-host" / "torchneuron-pytorch").exists()
    assert main(["deploy", str(model_dir)]) == 0  # the Triton-image recipe sits beside it
    assert (tmp_path / "neuron-host" / "torchneuron-pytorch" / "Dockerfile").is_file()
    capsys.readouterr()
    manifests = ["deploy", str(model_dir), "--no-recipe", "--kubernetes", "--repository", "s3://b/r", "--dry-run"]
    assert main([*manifests, "--base", "neuron"]) == 0  # the pods run the image the Neuron-base Dockerfile builds
    assert f"image: {recipe.image}" in capsys.readouterr().out
    assert main(manifests) == 0
    assert f"image: {recipe_for('trn2').image}" in capsys.readouterr().out
