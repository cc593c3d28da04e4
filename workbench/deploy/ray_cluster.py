"""A Ray cluster to sweep and compile on (`workbench sweep --ray`, `compile_on_ray`), as a KubeRay
``RayCluster`` for EKS and as a Ray cluster-launcher YAML for EC2.

Both run the serving image the host recipe builds (`deploy.recipe`: Triton + the Neuron stack of
the model's target) with its Ray layer (`recipe_for(..., ray=True)`: Ray Core and the workbench,
`releases.ray_worker_pip`), which `workbench deploy --ray-cluster` writes.

* KubeRay: a head group (no CPUs for tasks: it holds the driver's tracker), a Neuron worker group
  whose containers request ``aws.amazon.com/neuroncore`` (the Neuron device plugin) and declare
  the same count to Ray as ``neuron_cores`` (``rayStartParams.resources``; KubeRay maps the
  container limit to the same name itself, ray-operator/controllers/ray/common/pod.go), and a CPU
  worker group for compiles (neuronx-cc needs no device).
* The cluster launcher: a head node type and one worker node type per Neuron instance type asked
  for (inf2, trn2, ...), each declaring its instance's NeuronCores as ``neuron_cores``.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass

from workbench.deploy.devices import cores_per_device_at, instance_cores_at
from workbench.deploy.kubernetes import CORE_RESOURCE, ManifestError
from workbench.deploy.names import image_reference
from workbench.measure.cluster.ray_task import NEURON_CORES
from workbench.releases import RAY_VERSION, ray_worker_pip

__all__ = ["KUBERAY_VERSION", "RAY_VERSION", "SOURCES", "RayClusterSpec", "cluster_launcher", "kuberay_cluster"]

KUBERAY_VERSION = "v1.7.0"  # the RayCluster CRD (ray.io/v1) these manifests are checked against
SOURCES = {
    "ray": "https://pypi.org/project/ray/2.60.0/ (the version pyproject's ray extra pins)",
    "kuberay": "https://github.com/ray-project/kuberay/releases/tag/v1.7.0 "
    "(ray-operator/config/crd/bases/ray.io_rayclusters.yaml)",
    "neuron_cores": "docs.ray.io, Ray Core > Accelerator Support: AWS NeuronCores are the neuron_cores resource; "
    "Ray sets NEURON_RT_VISIBLE_CORES for a task that asks for them",
    "cluster_launcher": "docs.ray.io, Ray Clusters > Cluster YAML configuration options (ray/autoscaler/ray-schema.json)",
}
HEAD_INSTANCE = "m5.xlarge"  # the launcher's head: it schedules, the workers measure and compile
COMPILE_INSTANCE = "c5.4xlarge"


@dataclass(frozen=True)
class RayClusterSpec:
    """What the cluster is: its name, image, the Neuron instance types to measure on (one worker
    group or node type each), how many workers of each, and CPU workers for compiles."""

    name: str
    image: str
    neuron_instance_types: tuple[str, ...]
    workers: int = 1
    compile_workers: int = 1
    compile_cpus: int = 8
    namespace: str | None = None
    lnc: int | None = None

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,38}[a-z0-9])?", self.name):
            raise ManifestError(f"cluster name {self.name!r}: lower-case letters, digits and '-', at most 40")
        image_reference(self.image, "image")
        for count, what in ((self.workers, "workers"), (self.compile_workers, "compile workers")):
            if isinstance(count, bool) or not isinstance(count, int) or count < 0:
                raise ManifestError(f"{what} must be a whole number >= 0, got {count!r}")
        if not self.neuron_instance_types:
            raise ManifestError("name at least one Neuron instance type to measure on (e.g. inf2.xlarge)")
        for instance in self.neuron_instance_types:
            self.cores(instance)

    def cores(self, instance_type: str) -> int:
        cores = instance_cores_at(instance_type, self.lnc if instance_type.startswith("trn2") else None)
        if not cores:
            raise ManifestError(f"{instance_type}: not a Neuron instance type the workbench knows the cores of")
        return cores


def _group_name(instance_type: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", instance_type.lower()).strip("-")


def _quoted_resources(resources: dict[str, int]) -> str:
    """``rayStartParams.resources`` as KubeRay passes it to ``ray start --resources``: the JSON
    object inside one more pair of double quotes (its samples: ``'"{\\"Custom1\\": 1}"'``)."""
    return json.dumps(json.dumps(resources))


def _ray_container(name: str, image: str, limits: dict, ports: list[dict] | None = None) -> dict:
    container = {
        "name": name,
        "image": image,
        "resources": {"limits": limits, "requests": dict(limits)},
        "env": [{"name": "RAY_DEDUP_LOGS", "value": "0"}],
    }
    if ports:
        container["ports"] = ports
    return container


def _pod(container: dict, node_selector: dict | None = None, neuron: bool = False) -> dict:
    spec: dict = {"containers": [container]}
    if node_selector:
        spec["nodeSelector"] = node_selector
    if neuron:  # EKS Neuron node groups are tainted so that only Neuron pods land there
        spec["tolerations"] = [{"key": "aws.amazon.com/neuron", "operator": "Exists", "effect": "NoSchedule"}]
    return {"spec": spec}


def kuberay_cluster(spec: RayClusterSpec) -> dict:
    """The RayCluster (ray.io/v1): a head, one Neuron worker group per instance type, a CPU group."""
    head = _ray_container(
        "ray-head",
        spec.image,
        {"cpu": "2", "memory": "8Gi"},
        [
            {"containerPort": 6379, "name": "gcs"},
            {"containerPort": 8265, "name": "dashboard"},
            {"containerPort": 10001, "name": "client"},
        ],
    )
    groups = []
    for instance in spec.neuron_instance_types:
        cores = spec.cores(instance)
        container = _ray_container("ray-worker", spec.image, {"cpu": "4", "memory": "16Gi", CORE_RESOURCE: str(cores)})
        groups.append(
            {
                "groupName": f"neuron-{_group_name(instance)}",
                "replicas": spec.workers,
                "minReplicas": 0,
                "maxReplicas": max(spec.workers, 1),
                # Ray's name for the cores the device plugin gives the pod, the same count
                "rayStartParams": {"resources": _quoted_resources({NEURON_CORES: cores})},
                "template": _pod(container, {"node.kubernetes.io/instance-type": instance}, neuron=True),
            }
        )
    if spec.compile_workers:
        cpus = str(spec.compile_cpus)
        groups.append(
            {
                "groupName": "compile-cpu",
                "replicas": spec.compile_workers,
                "minReplicas": 0,
                "maxReplicas": max(spec.compile_workers, 1),
                "rayStartParams": {"num-cpus": cpus},
                "template": _pod(_ray_container("ray-worker", spec.image, {"cpu": cpus, "memory": "32Gi"})),
            }
        )
    metadata: dict = {"name": spec.name, "labels": {"app.kubernetes.io/managed-by": "workbench"}}
    if spec.namespace:
        metadata["namespace"] = spec.namespace
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": metadata,
        "spec": {
            "rayVersion": RAY_VERSION,
            # no CPUs for tasks on the head: variants and compiles go to the workers
            "headGroupSpec": {"rayStartParams": {"num-cpus": "0", "dashboard-host": "0.0.0.0"}, "template": _pod(head)},
            "workerGroupSpecs": groups,
        },
    }


def cluster_launcher(spec: RayClusterSpec, *, region: str = "us-east-1") -> dict:
    """The Ray cluster-launcher config for EC2: a head, a worker node type per Neuron instance type
    (its NeuronCores declared as ``neuron_cores``, its /dev/neuron* devices given to the container)
    and a CPU type for compiles, every node running the image."""
    node_types: dict = {"head": {"node_config": {"InstanceType": HEAD_INSTANCE}, "resources": {"CPU": 0}}}
    for instance in spec.neuron_instance_types:
        cores = spec.cores(instance)
        lnc = spec.lnc if instance.startswith("trn2") else None
        devices = cores // cores_per_device_at(instance, lnc)
        node_types[f"neuron-{_group_name(instance)}"] = {
            "min_workers": 0,
            "max_workers": max(spec.workers, 1),
            "node_config": {"InstanceType": instance},
            "resources": {"neuron_cores": cores},
            "docker": {"worker_run_options": [f"--device=/dev/neuron{n}" for n in range(devices)]},
        }
    if spec.compile_workers:
        node_types["compile-cpu"] = {
            "min_workers": 0,
            "max_workers": max(spec.compile_workers, 1),
            "node_config": {"InstanceType": COMPILE_INSTANCE},
            "resources": {"CPU": spec.compile_cpus},
        }
    return {
        "cluster_name": spec.name,
        "max_workers": max(spec.workers, 1) * len(spec.neuron_instance_types) + spec.compile_workers,
        "provider": {"type": "aws", "region": region},
        "auth": {"ssh_user": "ubuntu"},
        "docker": {
            "image": spec.image,
            "container_name": "workbench-ray",
            "pull_before_run": True,
            "run_options": ["--ulimit nofile=65536:65536", "--shm-size=8g"],
        },
        "available_node_types": node_types,
        "head_node_type": "head",
        # the recipe's Ray layer installs the same (`recipe_for(..., ray=True)`); here for an --image without it
        "setup_commands": ["python3 -m pip install " + " ".join(shlex.quote(f.value) for f in ray_worker_pip())],
        "head_start_ray_commands": [
            "ray stop",
            ("ray start --head --port=6379 --num-cpus=0 --autoscaling-config=~/ray_bootstrap_config.yaml"),
        ],
        "worker_start_ray_commands": ["ray stop", "ray start --address=$RAY_HEAD_IP:6379"],
    }
