"""Kubernetes manifests for a Triton vLLM-backend model on Neuron nodes: one pod per instance.

As with ``docker run`` (`workbench.deploy.vllm_instances`), each of the model's instances is its own
tritonserver, so the Deployment's replicas are the instances (times ``replicas``) and each pod asks
the Neuron device plugin for ``tensor_parallel_size`` cores (``aws.amazon.com/neuroncore``) or the
whole devices holding them (``aws.amazon.com/neuron``) [SDK-k8s]. Unlike a python-backend model,
a vLLM model pins no core ids: the plugin picks the cores and hands the pod their
``NEURON_RT_VISIBLE_CORES`` [SDK-k8s-flow], which vLLM's Neuron plugin uses as they are. A
non-default LNC is a node setting [SDK-eks], so it becomes a node affinity on the workbench's
label, as for the other models (`workbench.deploy.kubernetes`). A directory of several instances
serves each pod the one-instance config from a ConfigMap mounted over its config.pbtxt, which
needs the repository on a volume (``pvc:``): from ``s3://`` Triton reads the config as generated.
"""

from __future__ import annotations

import re
import shlex
from pathlib import PurePosixPath
from typing import Any

from workbench.coremap import CoreRange
from workbench.deploy.devices import cores_per_device_at
from workbench.deploy.kubernetes import (
    CORE_RESOURCE,
    DEVICE_RESOURCE,
    HELM_CHART,
    LNC_NODE_LABEL,
    ManifestError,
    _container,
    _deployment_and_service,
    _dns_label,
    _repository,
    instance_types_for,
)
from workbench.deploy.names import image_reference, replicas_problem, subpath_problem
from workbench.deploy.recipe import recipe_for
from workbench.deploy.vllm_instances import VllmDeployment, one_instance_config
from workbench.system import DEFAULT_LNC

__all__ = ["vllm_manifests", "WEIGHTS_NOTE"]

WEIGHTS_NOTE = "workbench.neuron/model-folder"  # the annotation saying where model.json reads the weights


def _mount_weights(d: VllmDeployment, weights: str, volumes: list[dict], mounts: list[dict]) -> str:
    """Add the weights claim's volume and its mount at the model folder; the annotation's text."""
    match = re.fullmatch(r"pvc:([^/\s]+)(?:/(\S+))?", weights)
    if match is None:
        raise ManifestError(
            f"--weights {weights!r}: give pvc:CLAIM[/subpath], the PersistentVolumeClaim holding "
            "the Hugging Face model folder"
        )
    model = d.folders[0]
    outside = [f for f in d.folders[1:] if not PurePosixPath(f).is_relative_to(model)]
    if outside:
        raise ManifestError(
            f"--weights mounts the model folder {model}, but the tokenizer folder {outside[0]} is "
            "outside it: put the tokenizer in the model folder and regenerate without --tokenizer"
        )
    mount: dict[str, Any] = {"name": "model-weights", "mountPath": model, "readOnly": True}
    if match[2]:
        problem = subpath_problem(match[2], f"--weights {weights!r}")
        if problem:
            raise ManifestError(problem)
        mount["subPath"] = match[2].strip("/")
    volumes.append(
        {
            "name": "model-weights",
            "persistentVolumeClaim": {"claimName": _dns_label(match[1], "claim name"), "readOnly": True},
        }
    )
    mounts.append(mount)
    return f"model.json reads {model}: mounted from {weights}"


def vllm_manifests(
    deployment: VllmDeployment,
    *,
    name: str,
    repository: str,
    resource: str = "neuroncore",
    image: str | None = None,
    replicas: int = 1,
    namespace: str | None = None,
    s3_region: str | None = None,
    service_account: str | None = None,
    dra: bool = False,
    weights: str | None = None,
) -> list[dict]:
    """[ConfigMap,] Deployment, Service serving ``deployment``'s model, one pod per instance.
    ``weights`` (``pvc:CLAIM[/subpath]``) is mounted read-only at the model folder's path, where
    model.json reads it; None: the image or the user's own volume must hold it (an annotation says)."""
    d = deployment
    if dra:
        raise ManifestError(
            "--dra: the DRA claim is not written for vLLM models; use the device plugin (leave --dra out)"
        )
    if resource not in ("neuroncore", "neuron"):
        raise ManifestError(f"--resource {resource!r} must be 'neuroncore' (cores) or 'neuron' (whole devices)")
    if replicas_problem(replicas):
        raise ManifestError(replicas_problem(replicas))
    tp = d.tensor_parallel_size
    count, limit = tp, CORE_RESOURCE
    if resource == "neuron":
        per_device = cores_per_device_at(d.instance_type, d.lnc)
        if tp % per_device:
            raise ManifestError(
                f"--resource neuron gives whole devices ({per_device} cores each on {d.target}), but "
                f"--tensor-parallel-size {tp} is not whole devices; use --resource neuroncore"
            )
        count, limit = tp // per_device, DEVICE_RESOURCE
    config = one_instance_config(d)
    if config is not None and not repository.startswith("pvc:"):
        raise ManifestError(
            f"--repository {repository}: {d.model_name} asks for {d.core_map.instances} instances "
            "and each pod serves one, from a ConfigMap mounted over config.pbtxt, which needs the "
            "repository on a volume (pvc:CLAIM[/subpath]); or regenerate it with --neuron_core_range "
            f"of one instance ({tp} cores) and scale with --replicas"
        )
    app = _dns_label(name, "name")
    model_repository, volumes, mounts = _repository(repository)
    documents: list[dict] = []
    if config is not None:
        config_name = _dns_label(f"{app}-config"[:63].rstrip("-"), "config map name")
        config_map = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": config_name, **({"namespace": namespace} if namespace else {})},
            "data": {"config.pbtxt": config},
        }
        documents.append(config_map)
        volumes.append({"name": "one-instance-config", "configMap": {"name": config_name}})
        mounts.append(
            {
                "name": "one-instance-config",
                "mountPath": f"{model_repository}/{d.model_name}/config.pbtxt",
                "subPath": "config.pbtxt",
                "readOnly": True,
            }
        )
    weights_mounted = _mount_weights(d, weights, volumes, mounts) if weights is not None else None
    image = image or recipe_for(d.target, d.stack.framework).image
    try:
        image_reference(image, "--image")
    except ValueError as err:
        raise ManifestError(str(err)) from None
    serve = [
        "tritonserver",
        f"--model-repository={model_repository}",
        "--model-control-mode=explicit",
        f"--load-model={d.model_name}",
    ]
    env = [{"name": "AWS_DEFAULT_REGION", "value": s3_region}] if s3_region else []
    container = _container(image, f"exec {shlex.join(serve)}", {"limits": {limit: count}}, env, mounts)
    nodes = (
        [d.instance_type.lower()]
        if "." in d.instance_type
        else instance_types_for(d.target, CoreRange(0, tp - 1), d.lnc)
    )
    match = [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": nodes}]
    notes = {
        "workbench.neuron/device-plugin": f"the Neuron device plugin, installed with helm from {HELM_CHART}",
        "workbench.neuron/instances": (
            f"{d.core_map.instances} instance(s) of {tp} core(s) per replica set: one "
            f"pod each; the plugin sets each pod's NEURON_RT_VISIBLE_CORES"
        ),
        WEIGHTS_NOTE: weights_mounted
        or (
            f"model.json reads {', '.join(d.folders)}: the image or a volume "
            "mounted there must hold it (give --weights pvc:CLAIM to mount one)"
        ),
    }
    if d.lnc is not None and d.lnc != DEFAULT_LNC.get(d.target):
        match.append({"key": LNC_NODE_LABEL, "operator": "In", "values": [str(d.lnc)]})
        notes["workbench.neuron/node-setup"] = (
            f"nodes must run at LNC={d.lnc}: launch-template UserData writing NEURON_LOGICAL_NC_CONFIG={d.lnc} to "
            f"/opt/aws/neuron/logical_nc_config, and the node label {LNC_NODE_LABEL}={d.lnc}"
        )
    pod_spec: dict[str, Any] = {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": match}]}
            }
        },
        "containers": [container],
        "volumes": [*volumes, {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}}],
    }
    if service_account:
        pod_spec["serviceAccountName"] = _dns_label(service_account, "service account")
    return documents + _deployment_and_service(app, namespace, replicas * d.core_map.instances, pod_spec, notes)
