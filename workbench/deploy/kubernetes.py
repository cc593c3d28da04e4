"""Kubernetes manifests that serve a model repository with Triton on Neuron nodes (EKS).

A plain Deployment and Service rather than values for Triton's Helm charts: those charts (in
triton-inference-server/server deploy/) are examples per cloud, not a published chart, and ask for
GPU resources; a manifest names the Neuron resources directly and validates against the
Kubernetes API schema as it is. What each part rests on:

* Resources: the Neuron device plugin registers ``aws.amazon.com/neuroncore`` (cores) and
  ``aws.amazon.com/neuron`` (whole devices, all their cores) [SDK-k8s]; ``neurondevice`` is no
  longer supported since Neuron 2.20 [SDK-k8s-name]. Only a count can be asked for; the plugin
  (with the scheduler extension for contiguous cores) picks which, and passes the container
  ``--device`` and ``NEURON_RT_VISIBLE_CORES`` of the cores it chose [SDK-ctr, SDK-k8s-flow].
* model.py pins the core range written in its config (global ids). So the pod must get exactly
  that range: a guard in the container's command compares the plugin's ``NEURON_RT_VISIBLE_CORES``
  with the range and stops with a message naming both instead of failing inside the runtime. A
  pod that takes a whole node's cores from core 0 always passes.
* The repository comes from S3 (Triton reads ``s3://`` natively) or a PersistentVolumeClaim.
* Probes on Triton's ``/v2/health/live`` and ``/v2/health/ready``; the metrics port is annotated
  for Prometheus (``prometheus.io/*``); ``/dev/shm`` is a memory volume (the python backend
  passes tensors through shared memory; docker gets ``--shm-size``).
* The device plugin is installed from the Neuron Helm chart (``HELM_CHART``) [SDK-eks]. With it
  the logical NeuronCore config (LNC, Trn2/Trn3) is a NODE setting: the launch template's UserData
  writes ``NEURON_LOGICAL_NC_CONFIG`` into ``/opt/aws/neuron/logical_nc_config`` [SDK-eks]; a pod env
  would make the runtime number cores unlike the plugin's allocation. So a non-default LNC becomes a
  node affinity on ``LNC_NODE_LABEL`` (the user labels the nodes they set up so) and an annotation
  saying what the nodes need.
* ``dra=True``: the Neuron DRA driver (Kubernetes >= 1.34, recommended by EKS for new clusters;
  per-workload LNC) [EKS-dra]: a ``ResourceClaimTemplate`` asking for the devices of the range
  (``neuron.aws.com`` device class, ``NeuronConfig`` of ``neuron.aws.com/v1`` with ``logicalNeuronCore``:
  SDK deploy/files/specs/lnc-setting-trn2.yaml, deploy/eks/dra.rst) and a pod that claims it.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from workbench.coremap import CoreRange
from workbench.deploy.devices import cores_per_device_at, family_of, instance_cores_at, is_cpu, lnc_of, neuron_devices
from workbench.deploy.names import image_reference, kubernetes_literal, replicas_problem, subpath_problem
from workbench.deploy.recipe import recipe_for
from workbench.refusals import WorkbenchError
from workbench.system import DEVICES_BY_INSTANCE

__all__ = [
    "ManifestError",
    "CORE_RESOURCE",
    "DEVICE_RESOURCE",
    "DRA_DEVICE_CLASS",
    "DRA_CONFIG_API",
    "HELM_CHART",
    "LNC_NODE_LABEL",
    "kubernetes_manifests",
    "manifests_for_model",
    "to_yaml",
    "instance_types_for",
]

CORE_RESOURCE = "aws.amazon.com/neuroncore"  # SDK-k8s
DEVICE_RESOURCE = "aws.amazon.com/neuron"  # SDK-k8s; "neurondevice" is gone since 2.20 (SDK-k8s-name)
_RESOURCES = {"neuroncore": CORE_RESOURCE, "neuron": DEVICE_RESOURCE}
_PORTS = (("http", 8000), ("grpc", 8001), ("metrics", 8002))
HELM_CHART = "oci://public.ecr.aws/neuron/neuron-helm-chart"  # SDK-eks: the device plugin's install
# A workbench label, not the SDK's: the nodes whose UserData set a non-default LNC carry it, so a
# pod compiled for that LNC lands only there (SDK-eks prerequisites.rst:44-62 sets LNC per node).
LNC_NODE_LABEL = "workbench.neuron/logical-nc-config"
DRA_DEVICE_CLASS = "neuron.aws.com"  # SDK deploy/files/specs/*.yaml deviceClassName and driver
# the opaque NeuronConfig's apiVersion, as the SDK writes it (deploy/files/specs/lnc-setting-trn2.yaml,
# deploy/eks/dra.rst @ 81ce03ae); the claim template itself is resource.k8s.io/v1
DRA_CONFIG_API = "neuron.aws.com/v1"
_DRA_TARGETS = ("trn2", "trn3")  # the Neuron DRA page is "relevant for: Trn2, Trn3" (SDK deploy/eks/dra.rst)
_MOUNT = "/models"


class ManifestError(WorkbenchError, ValueError):
    """Settings that cannot make a working Deployment; the message says which and why."""


def _dns_label(text: str, what: str) -> str:
    if not re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", text):
        raise ManifestError(
            f"{what} {text!r} must be a DNS label: lower-case letters, digits and '-', "
            "at most 63, starting and ending with a letter or digit"
        )
    return text


def instance_types_for(family: str, core_range: CoreRange, lnc: int | None = None) -> list[str]:
    """Instance types of ``family`` that have every core of the range (the node affinity)."""
    names = [n for n in DEVICES_BY_INSTANCE if family_of(n) == family_of(family)]
    return sorted(n for n in names if (instance_cores_at(n, lnc) or 0) > core_range.end)


def _repository(repository: str) -> tuple[str, list[dict], list[dict]]:
    """Triton's --model-repository value, the volumes and the mounts for ``s3://`` or ``pvc:CLAIM[/sub]``."""
    if repository.startswith("s3://"):
        if not re.fullmatch(r"s3://[^/\s]+(/\S*)?", repository):
            raise ManifestError(f"repository {repository!r} must be s3://bucket/path")
        return repository, [], []
    match = re.fullmatch(r"pvc:([^/\s]+)(?:/(\S+))?", repository)
    if match is None:
        raise ManifestError(
            f"repository {repository!r}: give s3://bucket/path (Triton reads S3 itself) or "
            "pvc:CLAIM[/subpath] (a PersistentVolumeClaim holding the model repository)"
        )
    claim = _dns_label(match[1], "claim name")
    mount: dict[str, Any] = {"name": "model-repository", "mountPath": _MOUNT, "readOnly": True}
    if match[2]:
        if subpath_problem(match[2], f"repository {repository!r}"):
            raise ManifestError(subpath_problem(match[2], f"repository {repository!r}"))
        mount["subPath"] = match[2].strip("/")
    volume = {"name": "model-repository", "persistentVolumeClaim": {"claimName": claim, "readOnly": True}}
    return _MOUNT, [volume], [mount]


def _core_guard(cores: CoreRange, devices: list[int]) -> str:
    """Shell that stops the pod when the plugin's devices or cores are not the model's (module doc)."""
    ranged = str(cores.start) if cores.size == 1 else f"{cores.start}-{cores.end}"
    listed = ",".join(str(c) for c in cores.cores)
    fix = "regenerate the model for the cores the pod gets, or give the pod all of a node's cores from core 0"
    nodes = " ".join(f"/dev/neuron{n}" for n in devices)
    return (
        f'for d in {nodes}; do [ -e "$d" ] || {{ echo "the model config pins cores {ranged}, which sit on '
        f'$d, but this pod has no $d: {fix}" >&2; exit 1; }}; done; '
        f'got="${{NEURON_RT_VISIBLE_CORES:-}}"; '
        f'if [ -n "$got" ] && [ "$got" != {shlex.quote(ranged)} ] && [ "$got" != {shlex.quote(listed)} ]; then '
        f'echo "the Neuron device plugin gave this pod cores $got but the model config pins cores {ranged}: '
        f'{fix}" >&2; exit 1; fi'
    )


def kubernetes_manifests(
    name: str,
    core_range: str | CoreRange | tuple[int, int],
    *,
    target: str,
    repository: str,
    framework: str = "pytorch",
    instance_type: str | None = None,
    lnc: int | None = None,
    resource: str = "neuroncore",
    image: str | None = None,
    load_models: Sequence[str] = (),
    replicas: int = 1,
    namespace: str | None = None,
    s3_region: str | None = None,
    service_account: str | None = None,
    dra: bool = False,
) -> list[dict]:
    """A Deployment and a Service serving ``repository`` on ``core_range`` of a ``target`` node
    (with ``dra``, first a ResourceClaimTemplate for the Neuron DRA driver, Kubernetes >= 1.34).

    ``resource`` is ``neuroncore`` (one per core of the range) or ``neuron`` (whole devices; the
    range must be whole devices). ``image`` defaults to the host recipe's (build it with the
    recipe's Dockerfile and push it where the cluster pulls from). ``service_account`` carries the
    S3 permissions (IRSA); ``s3_region`` becomes ``AWS_DEFAULT_REGION``.
    """
    if is_cpu(target):
        raise ManifestError("target cpu: these manifests are for Neuron nodes")
    cores = CoreRange.parse(core_range)
    family = family_of(instance_type or target)
    if family != family_of(target):
        raise ManifestError(f"instance type {instance_type} is not a {target} instance")
    if resource not in _RESOURCES:
        raise ManifestError(f"resource {resource!r} must be 'neuroncore' (cores) or 'neuron' (whole devices)")
    if replicas_problem(replicas, "replicas"):
        raise ManifestError(replicas_problem(replicas, "replicas"))
    recipe = recipe_for(target, framework)
    devices = neuron_devices(cores, instance_type=instance_type or target, lnc=lnc)
    count = cores.size
    if dra and family_of(target) not in _DRA_TARGETS:
        raise ManifestError(f"dra: the Neuron DRA driver is for Trn2/Trn3 [EKS-dra]; {target} uses the device plugin")
    if resource == "neuron" or dra:
        per_device = cores_per_device_at(instance_type or target, lnc)
        if cores.start % per_device or cores.size % per_device:
            raise ManifestError(
                f"{'dra' if dra else 'resource neuron'} gives whole devices ({per_device} cores each "
                f"on {target}), but core range {cores} is not whole devices; "
                f"{'use the device plugin' if dra else 'use resource neuroncore'}"
            )
        count = len(devices)
    nodes = [instance_type.lower()] if instance_type else instance_types_for(family, cores, lnc)
    if not nodes:
        raise ManifestError(f"no {target} instance type has core {cores.end}")
    app = _dns_label(name, "name")
    model_repository, volumes, mounts = _repository(repository)
    for model in load_models:
        if not model or "/" in model or model.startswith("-"):
            raise ManifestError(f"model name {model!r} is not a valid Triton model name")
    serve = [
        "tritonserver",
        f"--model-repository={model_repository}",
        "--model-control-mode=explicit",
        *([f"--load-model={m}" for m in load_models] or ["--load-model=*"]),
    ]
    env = []
    effective_lnc = lnc_of(instance_type or target, lnc)
    node_lnc = effective_lnc is not None and effective_lnc != lnc_of(instance_type or target) and not dra
    if s3_region:
        env.append({"name": "AWS_DEFAULT_REGION", "value": s3_region})
    image = image or recipe.image
    try:
        image_reference(image, "image")
    except ValueError as err:
        raise ManifestError(str(err)) from None
    resources: dict[str, Any] = {"claims": [{"name": "neurons"}]} if dra else {"limits": {_RESOURCES[resource]: count}}
    container = _container(image, f"{_core_guard(cores, devices)}; exec {shlex.join(serve)}", resources, env, mounts)
    match = [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": nodes}]
    notes = {"workbench.neuron/device-plugin": f"the Neuron device plugin, installed with helm from {HELM_CHART}"}
    if node_lnc:
        match.append({"key": LNC_NODE_LABEL, "operator": "In", "values": [str(effective_lnc)]})
        notes = {
            "workbench.neuron/node-setup": (
                f"nodes must run at LNC={effective_lnc}: launch-template UserData writing "
                f"NEURON_LOGICAL_NC_CONFIG={effective_lnc} to /opt/aws/neuron/logical_nc_config, and the node label "
                f"{LNC_NODE_LABEL}={effective_lnc}"
            ),
            **notes,
        }
    pod_spec: dict[str, Any] = {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": match},
                    ]
                }
            }
        },
        "containers": [container],
        "volumes": [*volumes, {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}}],
    }
    if service_account:
        pod_spec["serviceAccountName"] = _dns_label(service_account, "service account")
    if not dra:
        return _deployment_and_service(app, namespace, replicas, pod_spec, notes)
    claim = _claim_template(f"{app}-neurons", namespace, len(devices), instance_type, effective_lnc)
    pod_spec["resourceClaims"] = [{"name": "neurons", "resourceClaimTemplateName": claim["metadata"]["name"]}]
    notes = {
        "workbench.neuron/dra": "the Neuron DRA driver (Kubernetes >= 1.34) allocates the devices and sets the "
        "logical NeuronCore config per workload"
    }
    return [claim, *_deployment_and_service(app, namespace, replicas, pod_spec, notes)]


def _claim_template(name: str, namespace: str | None, devices: int, instance_type: str | None, lnc: int | None) -> dict:
    """A resource.k8s.io/v1 ResourceClaimTemplate (GA in Kubernetes 1.34) for ``devices`` Neuron
    devices, shaped like the SDK's own (aws-neuron-sdk @ 81ce03ae deploy/files/specs/lnc-setting-trn2.yaml,
    deploy/eks/dra.rst: resource.k8s.io/v1, the request under ``exactly``): device class and driver
    ``neuron.aws.com``, ``NeuronConfig`` (``DRA_CONFIG_API``) with ``logicalNeuronCore``."""
    request: dict[str, Any] = {"deviceClassName": DRA_DEVICE_CLASS, "allocationMode": "ExactCount", "count": devices}
    if instance_type:
        request["selectors"] = [
            {
                "cel": {
                    "expression": f"device.attributes['{DRA_DEVICE_CLASS}'].instanceType == '{instance_type.lower()}'"
                }
            }
        ]
    spec: dict[str, Any] = {"devices": {"requests": [{"name": "neurons", "exactly": request}]}}
    if lnc is not None:
        spec["devices"]["config"] = [
            {
                "requests": ["neurons"],
                "opaque": {
                    "driver": DRA_DEVICE_CLASS,
                    "parameters": {"apiVersion": DRA_CONFIG_API, "kind": "NeuronConfig", "logicalNeuronCore": lnc},
                },
            }
        ]
    metadata: dict[str, Any] = {"name": _dns_label(name[:63].rstrip("-"), "claim template name")}
    if namespace:
        metadata["namespace"] = namespace
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": metadata,
        "spec": {"spec": spec},
    }


def _container(image: str, command: str, resources: dict, env: list[dict], mounts: list[dict]) -> dict:
    probe = lambda path, **more: {"httpGet": {"path": path, "port": "http"}, **more}  # noqa: E731
    container = {
        "name": "triton",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["/bin/sh", "-c", kubernetes_literal(command)],  # Kubernetes would expand $(VAR) in it
        "ports": [{"name": port_name, "containerPort": port} for port_name, port in _PORTS],
        "resources": resources,
        # a Neuron model can take minutes to load: liveness only counts once startup has passed
        "startupProbe": probe("/v2/health/live", periodSeconds=10, failureThreshold=60),
        "livenessProbe": probe("/v2/health/live", periodSeconds=10, failureThreshold=3),
        "readinessProbe": probe("/v2/health/ready", periodSeconds=5, failureThreshold=3),
        "volumeMounts": [*mounts, {"name": "dshm", "mountPath": "/dev/shm"}],
    }
    if env:
        container["env"] = env
    return container


def _deployment_and_service(
    app: str, namespace: str | None, replicas: int, pod_spec: dict, notes: dict[str, str]
) -> list[dict]:
    labels = {
        "app.kubernetes.io/name": app,
        "app.kubernetes.io/component": "triton",
        "app.kubernetes.io/managed-by": "workbench",
    }
    prometheus = {"prometheus.io/scrape": "true", "prometheus.io/port": "8002", "prometheus.io/path": "/metrics"}
    metadata: dict[str, Any] = {"name": app, "labels": dict(labels)}
    if namespace:
        metadata["namespace"] = _dns_label(namespace, "namespace")
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {**metadata, "annotations": dict(notes)},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app.kubernetes.io/name": app}},
            "template": {"metadata": {"labels": dict(labels), "annotations": dict(prometheus)}, "spec": pod_spec},
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {**metadata, "labels": dict(labels), "annotations": dict(prometheus)},
        "spec": {
            "selector": {"app.kubernetes.io/name": app},
            "ports": [{"name": port_name, "port": port, "targetPort": port_name} for port_name, port in _PORTS],
        },
    }
    return [deployment, service]


def manifests_for_model(
    model_dir: str | os.PathLike[str], *, repository: str, name: str | None = None, **options: Any
) -> list[dict]:
    """The manifests for a generated model directory: its target, framework and core range as its
    config.pbtxt says (`workbench.generate.load_settings`), loading just that model; a vLLM-backend
    directory gets one pod per instance (`kubernetes_vllm`)."""
    # start-up: the generator (torch) loads only for a manifest made from a model directory
    from workbench.generate import load_settings
    from workbench.generate.backends import backend_named

    settings = load_settings(Path(model_dir))
    model = Path(model_dir).name
    default = "triton-" + re.sub(r"[^a-z0-9-]+", "-", model.lower()).strip("-")
    if backend_named(settings.backend).server_per_instance:
        # cycle: kubernetes_vllm builds on this module's helpers
        from workbench.deploy.kubernetes_vllm import vllm_manifests
        from workbench.deploy.vllm_instances import vllm_deployment

        deployment = vllm_deployment(
            Path(model_dir), settings, instance_type=options.pop("instance_type", None), lnc=options.pop("lnc", None)
        )
        options.pop("load_models", None)
        return vllm_manifests(deployment, name=name or default[:63].rstrip("-"), repository=repository, **options)
    return kubernetes_manifests(
        name or default[:63].rstrip("-"),
        settings.neuron_core_range,
        target=settings.target,
        framework=settings.framework,
        repository=repository,
        load_models=options.pop("load_models", (model,)),
        **options,
    )


def to_yaml(documents: list[dict]) -> str:
    import yaml

    return yaml.safe_dump_all(documents, sort_keys=False)
