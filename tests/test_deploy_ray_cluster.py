"""`workbench deploy --ray-cluster`: a KubeRay RayCluster checked against KubeRay v1.7.0's own CRD
schema (tests/data/kuberay: its openAPIV3Schema, data only) with unknown fields refused, its pod
templates against the Kubernetes API schema as the other manifests are, and a cluster-launcher YAML
against the schema Ray itself validates cluster configs with (ray/autoscaler/ray-schema.json)."""

from __future__ import annotations

import gzip
import json
import os
import shlex
import tomllib
from pathlib import Path

import jsonschema
import pytest
import yaml
from packaging.requirements import Requirement

import workbench
from workbench.cli import main
from workbench.deploy.devices import instance_cores_at
from workbench.deploy.kubernetes import CORE_RESOURCE
from workbench.deploy.ray_cluster import KUBERAY_VERSION, RAY_VERSION
from workbench.deploy.recipe import RecipeError, recipe_for
from workbench.releases import WORKBENCH_PYTHON

from test_deploy_kubernetes import K8S_VERSION, _model

kubernetes_validate = pytest.importorskip("kubernetes_validate", reason="the test extra brings kubernetes-validate")
ray = pytest.importorskip("ray", reason="the test extra brings ray")
CRD_SCHEMA = Path(__file__).parent / "data" / "kuberay" / f"raycluster-{KUBERAY_VERSION}.schema.json.gz"


def _unknown_fields(value, schema, where="") -> list[str]:
    """Fields the schema does not name (Kubernetes would prune them silently: a typo goes unseen)."""
    found = []
    if isinstance(value, dict) and "properties" in schema and not schema.get("x-kubernetes-preserve-unknown-fields"):
        for key, item in value.items():
            if key in schema["properties"]:
                found += _unknown_fields(item, schema["properties"][key], f"{where}.{key}")
            elif not schema.get("additionalProperties"):
                found.append(f"{where}.{key}")
    elif isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            found += _unknown_fields(item, schema["items"], f"{where}[{i}]")
    return found


def _check_against_crd(document: dict) -> None:
    schema = json.loads(gzip.decompress(CRD_SCHEMA.read_bytes()))["openAPIV3Schema"]
    jsonschema.Draft7Validator(schema).validate(document)
    assert _unknown_fields(document, schema) == []


def _check_pod(template: dict) -> None:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "check"}, "spec": template["spec"]}
    assert kubernetes_validate.validate(pod, K8S_VERSION, strict=True) == K8S_VERSION


def test_deploy_writes_a_raycluster_and_a_launcher_config_that_their_schemas_accept(tmp_path):
    model = _model(tmp_path / "repo", "bert", "inf2", "0:1")
    assert main(["deploy", str(model), "--ray-cluster", "--no-recipe", "--out", str(tmp_path / "out"),
                 "--ray-worker-types", "inf2.xlarge,trn2.48xlarge", "--replicas", "2"]) == 0
    folder = tmp_path / "out" / "ray-cluster-bert"
    (cluster,) = yaml.safe_load_all((folder / "raycluster.yaml").read_text())
    _check_against_crd(cluster)
    assert cluster["spec"]["rayVersion"] == RAY_VERSION
    image = recipe_for("inf2", "pytorch", ray=True).image  # the recipe's image with its Ray layer
    head = cluster["spec"]["headGroupSpec"]
    assert head["rayStartParams"]["num-cpus"] == "0"
    _check_pod(head["template"])
    groups = {g["groupName"]: g for g in cluster["spec"]["workerGroupSpecs"]}
    assert set(groups) == {"neuron-inf2-xlarge", "neuron-trn2-48xlarge", "compile-cpu"}
    for instance in ("inf2.xlarge", "trn2.48xlarge"):
        group = groups[f"neuron-{instance.replace('.', '-')}"]
        _check_pod(group["template"])
        container = group["template"]["spec"]["containers"][0]
        cores = instance_cores_at(instance)
        # the device plugin's cores and Ray's neuron_cores: one count
        assert container["resources"]["limits"][CORE_RESOURCE] == str(cores)
        assert json.loads(json.loads(group["rayStartParams"]["resources"])) == {"neuron_cores": cores}
        assert container["image"] == image and group["replicas"] == 2
        assert group["template"]["spec"]["nodeSelector"] == {"node.kubernetes.io/instance-type": instance}
    _check_pod(groups["compile-cpu"]["template"])
    assert CORE_RESOURCE not in groups["compile-cpu"]["template"]["spec"]["containers"][0]["resources"]["limits"]

    (launcher,) = yaml.safe_load_all((folder / "cluster-launcher.yaml").read_text())
    ray_schema = json.loads((Path(ray.__file__).parent / "autoscaler" / "ray-schema.json").read_text())
    jsonschema.validate(launcher, ray_schema)
    types = launcher["available_node_types"]
    assert types["neuron-inf2-xlarge"]["resources"] == {"neuron_cores": instance_cores_at("inf2.xlarge")}
    assert types["neuron-trn2-48xlarge"]["node_config"]["InstanceType"] == "trn2.48xlarge"
    assert types["neuron-inf2-xlarge"]["docker"]["worker_run_options"] == ["--device=/dev/neuron0"]
    assert launcher["docker"]["image"] == image and types["head"]["resources"] == {"CPU": 0}
    assert launcher["setup_commands"] == [
        f"python3 -m pip install ray=={RAY_VERSION} 'triton-neuron-workbench[ray]=={workbench.__version__}'"]


def test_the_recipe_image_with_ray_installs_the_pinned_ray_and_workbench_and_cites_them(tmp_path):
    """`deploy --ray-cluster` writes the recipe whose image the manifests name: its Dockerfile installs
    Ray at pyproject's pin and this workbench into the image's Python, and checks them; RECIPE.md
    names both with their sources; a stack whose Python is older than the workbench's is refused."""
    pyproject = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    assert pyproject["project"]["optional-dependencies"]["ray"] == [f"ray=={RAY_VERSION}"]
    assert pyproject["project"]["requires-python"] == ">=" + ".".join(map(str, WORKBENCH_PYTHON))
    model = _model(tmp_path / "repo", "bert", "inf2", "0:1")
    assert main(["deploy", str(model), "--ray-cluster", "--out", str(tmp_path / "out")]) == 0
    recipe = recipe_for("inf2", "pytorch", ray=True)
    folder = tmp_path / "out" / recipe.folder_name
    dockerfile = (folder / "Dockerfile").read_text()
    install = next(line for line in dockerfile.splitlines() if "pip install" in line and "ray==" in line)
    wanted = {f"ray=={RAY_VERSION}", f"triton-neuron-workbench[ray]=={workbench.__version__}"}
    assert wanted <= set(shlex.split(install.rstrip(" \\")))
    assert install.startswith("RUN python3 -m pip install") and dockerfile.index("neuronx-cc==") < dockerfile.index(install)
    assert f'assert ray.__version__ == "{RAY_VERSION}"' in dockerfile
    # the requirements parse, and the pinned Ray is the one pyproject's ray extra resolves to here
    assert Requirement(f"ray=={RAY_VERSION}").specifier.contains(ray.__version__)
    assert f"{recipe.image}" in (tmp_path / "out" / "ray-cluster-bert" / "raycluster.yaml").read_text()
    assert recipe.image != recipe_for("inf2", "pytorch").image and recipe.image.endswith(f"-ray{RAY_VERSION}")
    text = (folder / "RECIPE.md").read_text()
    assert f"| pip for a Ray worker | `ray=={RAY_VERSION}` | ray-pypi |" in text and "**ray-match**" in text
    assert "| pip for a Ray worker | `triton-neuron-workbench[ray]" in text
    # the Neuron base (Python 3.14) takes the same layer; a Python 3.10 stack cannot run the workbench
    assert f"ray=={RAY_VERSION}" in recipe_for("trn2", "pytorch", base="neuron", ray=True).dockerfile()
    with pytest.raises(RecipeError, match=r"needs Python 3\.11 or newer; .* has Python 3\.10"):
        recipe_for("inf1", "pytorch", ray=True)
    assert "ray==" not in recipe_for("inf2", "pytorch").dockerfile()


def test_ray_cluster_refuses_an_instance_type_it_cannot_count_cores_of(tmp_path, capsys):
    model = _model(tmp_path / "repo", "bert", "inf2", "0:1")
    code = main(["deploy", str(model), "--ray-cluster", "--no-recipe", "--out", str(tmp_path / "out"),
                 "--ray-worker-types", "inf2.huge"])
    assert code != 0 and "inf2.huge" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "out")
