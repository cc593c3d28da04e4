"""`workbench deploy`: write the host recipe and/or Kubernetes manifests for a generated model directory.

Everything is derived from the model directory's config (target, framework, core range), so what
is deployed is what was generated. Files go to ``neuron-host/`` beside the model repository (or
``--out``): ``<stack>/`` holds the Dockerfile, setup-host.sh and RECIPE.md, ``kubernetes-<model>/``
the manifests. An existing folder is refused unless ``--force`` (then kept as a backup in
``neuron-host.backups/``); ``--dry-run`` prints instead of writing.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from workbench.coremap import CoreRange
from workbench.deploy.docker import docker_run_command
from workbench.deploy.kubernetes import ManifestError, manifests_for_model, to_yaml
from workbench.deploy.recipe import BASES, Recipe, host_folder, recipe_for, write_recipe
from workbench.generate.repository import WriteResult, write_model_dir
from workbench.system import LNC_VALUES

if TYPE_CHECKING:
    from workbench.generate import GenerateSettings

__all__ = ["register", "plan_files", "Planned"]


def register(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "deploy",
        help="write the Neuron host recipe (Dockerfile, set-up script) and/or Kubernetes manifests",
        description="For a generated model directory: the Dockerfile and host set-up script that fit its target "
        "and framework (every pin with its source), the docker run line, and with --kubernetes a "
        "Deployment + Service for the Neuron device plugin. Nothing is overwritten without --force.",
        allow_abbrev=False,
    )
    # start-up: a command's modules load when it runs, not when `workbench` builds its parser
    from workbench.cli.generate import _one_line_errors

    _one_line_errors(parser)  # a bad --replicas or --lnc is one line, as generate's flags are
    parser.add_argument(
        "model_dir",
        type=Path,
        metavar="MODEL_DIR",
        help="a generated model directory (config.pbtxt + 1/model.py, or 1/model.json for "
        "the vLLM backend: its target picks vLLM Neuron on trn2/trn3, vLLM 0.16 + NxD "
        "Inference on inf2/trn1)",
    )
    parser.add_argument("--out", type=Path, help="folder for the files (default: neuron-host/ beside the repository)")
    parser.add_argument("--no-recipe", action="store_true", help="write only the manifests")
    parser.add_argument(
        "--kubernetes", action="store_true", help="also write Kubernetes manifests (needs --repository)"
    )
    parser.add_argument(
        "--ray-cluster",
        action="store_true",
        dest="ray_cluster",
        help="also write a Ray cluster to sweep and compile on (`workbench sweep --ray`): a KubeRay "
        "RayCluster for EKS and a Ray cluster-launcher YAML for EC2, in the recipe's image",
    )
    parser.add_argument(
        "--ray-worker-types",
        metavar="TYPES",
        help="with --ray-cluster: the Neuron instance types to measure on, e.g. inf2.xlarge,trn2.48xlarge "
        "(default: --instance-type, else the target's smallest)",
    )
    parser.add_argument(
        "--repository", help="where the cluster reads the model repository: s3://bucket/path or pvc:CLAIM[/subpath]"
    )
    parser.add_argument(
        "--weights",
        help="vLLM-backend models: the PersistentVolumeClaim holding the model folder "
        "(pvc:CLAIM[/subpath]), mounted where model.json reads it",
    )
    parser.add_argument("--instance-type", help="e.g. inf2.24xlarge (default: the target's family)")
    parser.add_argument("--lnc", type=int, choices=LNC_VALUES, help="Trn2/Trn3 logical NeuronCore config (default 2)")
    parser.add_argument(
        "--dra",
        action="store_true",
        help="Kubernetes >= 1.34 with the Neuron DRA driver: a ResourceClaimTemplate (LNC per "
        "workload) instead of the device plugin (LNC per node)",
    )
    parser.add_argument(
        "--base",
        choices=BASES,
        default="triton",
        help="what the Dockerfile builds FROM: Triton's image (default), or for TorchNeuron targets "
        "(trn2/trn3) the Neuron DLC with tritonserver built in by Triton's build.py",
    )
    parser.add_argument("--image", help="image to run (default: the one the recipe builds; push it to your registry)")
    parser.add_argument(
        "--resource",
        choices=("neuroncore", "neuron"),
        default="neuroncore",
        help="device plugin resource: cores (default) or whole devices",
    )
    parser.add_argument("--replicas", type=int, default=1)
    parser.add_argument("--namespace")
    parser.add_argument("--s3-region", help="AWS_DEFAULT_REGION for an s3:// repository")
    parser.add_argument("--service-account", help="service account with the S3 permissions (IRSA)")
    parser.add_argument("--dry-run", action="store_true", help="print the files; write nothing")
    parser.add_argument("--force", action="store_true", help="replace existing folders (kept as backups)")
    parser.set_defaults(func=run)
    return parser


@dataclass(frozen=True)
class Planned:
    """One folder to write: its files as text, and the call that writes them."""

    folder: Path
    files: dict[str, str]
    write: Callable[[bool], WriteResult]
    summary: str = ""  # what a dry run says first (a recipe: which base it builds on, and why)


def _recipe_writer(
    recipe: Recipe, folder: Path, docker_run: str, extra: dict[str, str] | None = None
) -> Callable[[bool], WriteResult]:
    """`Planned.write` of a recipe folder, bound to these values (the planner's names move on)."""
    return lambda force: write_recipe(recipe, folder, docker_run=docker_run, overwrite=force, extra=extra)


def _files_writer(folder: Path, files: dict[str, str]) -> Callable[[bool], WriteResult]:
    """`Planned.write` of a folder of text files, bound to these values."""
    return lambda force: write_model_dir(folder, files, overwrite=force)


def plan_files(args: argparse.Namespace) -> list[Planned]:
    """What ``args`` ask for, checked whole before anything is written."""
    # start-up: a command's modules load when it runs, not when `workbench` builds its parser
    from workbench.generate import load_settings
    from workbench.generate.backends import backend_named

    model_dir = args.model_dir.resolve()
    if not (model_dir / "config.pbtxt").is_file():
        raise FileNotFoundError(f"{model_dir} has no config.pbtxt: give a generated model directory")
    if args.no_recipe and not (args.kubernetes or args.ray_cluster):
        raise ManifestError("--no-recipe without --kubernetes or --ray-cluster leaves nothing to write")
    if args.kubernetes and not args.repository:
        raise ManifestError("--kubernetes needs --repository s3://bucket/path or pvc:CLAIM[/subpath]")
    settings = load_settings(model_dir)
    root = args.out.resolve() if args.out else host_folder(model_dir.parent)
    if backend_named(settings.backend).server_per_instance:
        return _plan_vllm(args, model_dir, settings, root)
    if args.weights:
        raise ManifestError(
            f"--weights is for vLLM-backend models; {model_dir.name} is served by the "
            f"{settings.backend} backend from its model directory"
        )
    instance = args.instance_type or settings.target
    # the Neuron base's image names the manifests' image even with --no-recipe
    wanted = not args.no_recipe or args.base == "neuron"
    # with --ray-cluster the image is also the Ray workers': Ray Core and the workbench in it
    recipe = recipe_for(settings.target, settings.framework, base=args.base, ray=args.ray_cluster) if wanted else None
    built = recipe.image if recipe is not None and recipe.neuron_base else None
    cores = CoreRange.parse(settings.neuron_core_range)  # read from the config: a range it could not make fails here
    run = docker_run_command(
        model_dir.parent,
        cores,
        instance_type=instance,
        lnc=args.lnc,
        framework=settings.framework,
        image=args.image or built,
        load_models=[model_dir.name],
    )
    planned: list[Planned] = []
    if recipe is not None and not args.no_recipe:
        folder = root / recipe.folder_name
        planned.append(
            Planned(
                folder,
                recipe.files(run.pretty),
                _recipe_writer(recipe, folder, run.pretty),
                recipe.base_choice(),
            )
        )
    if args.ray_cluster:
        planned.append(_plan_ray_cluster(args, model_dir, settings, root))
    if args.kubernetes:
        documents = manifests_for_model(
            model_dir,
            repository=args.repository,
            instance_type=args.instance_type,
            lnc=args.lnc,
            resource=args.resource,
            image=args.image or built,
            replicas=args.replicas,
            namespace=args.namespace,
            s3_region=args.s3_region,
            service_account=args.service_account,
            dra=args.dra,
        )
        folder = root / f"kubernetes-{model_dir.name}"
        files = {"triton.yaml": to_yaml(documents)}
        planned.append(Planned(folder, files, _files_writer(folder, files)))
    return planned


# the smallest instance of each target family: where a Ray worker measures by default
_SMALLEST = {
    "inf1": "inf1.xlarge",
    "inf2": "inf2.xlarge",
    "trn1": "trn1.2xlarge",
    "trn2": "trn2.48xlarge",
    "trn3": "trn3.48xlarge",
}


def _plan_ray_cluster(args: argparse.Namespace, model_dir: Path, settings: GenerateSettings, root: Path) -> Planned:
    """``--ray-cluster``: the KubeRay RayCluster and the cluster-launcher YAML (`deploy.ray_cluster`)."""
    # start-up: the Ray cluster module loads only when asked for
    from workbench.deploy.ray_cluster import RayClusterSpec, cluster_launcher, kuberay_cluster

    if args.ray_worker_types:
        types = tuple(t.strip() for t in args.ray_worker_types.split(",") if t.strip())
    elif args.instance_type:
        types = (args.instance_type,)
    elif settings.target in _SMALLEST:
        types = (_SMALLEST[settings.target],)
    else:
        raise ManifestError(
            f"--ray-cluster: {model_dir.name} runs on the {settings.target} target; name the Neuron "
            "instance types to measure on with --ray-worker-types"
        )
    image = args.image or recipe_for(settings.target, settings.framework, base=args.base, ray=True).image
    name = re.sub(r"[^a-z0-9-]+", "-", f"workbench-{model_dir.name}".lower()).strip("-")[:40].rstrip("-")
    spec = RayClusterSpec(
        name=name,
        image=image,
        neuron_instance_types=types,
        workers=args.replicas,
        namespace=args.namespace,
        lnc=args.lnc,
    )
    files = {
        "raycluster.yaml": to_yaml([kuberay_cluster(spec)]),
        "cluster-launcher.yaml": to_yaml([cluster_launcher(spec)]),
    }
    folder = root / f"ray-cluster-{model_dir.name}"
    return Planned(folder, files, lambda force: write_model_dir(folder, files, overwrite=force))


def _plan_vllm(args: argparse.Namespace, model_dir: Path, settings: GenerateSettings, root: Path) -> list[Planned]:
    """A vLLM-backend model: the stack its target takes (`facts_vllm`), one docker run per instance
    and the one-instance config they mount (`deploy.vllm`), the manifests (`kubernetes_vllm`)."""
    # start-up: the vLLM deploy modules load only for a vLLM model directory
    from workbench.deploy.kubernetes_vllm import vllm_manifests
    from workbench.deploy.vllm_instances import (
        ONE_INSTANCE_CONFIG,
        docker_runs,
        one_instance_config,
        runs_text,
        vllm_deployment,
    )

    deployment = vllm_deployment(model_dir, settings, instance_type=args.instance_type, lnc=args.lnc)
    recipe = recipe_for(settings.target, deployment.stack.framework, base=args.base)  # refuses --base neuron
    planned: list[Planned] = []
    if not args.no_recipe:
        folder = root / recipe.folder_name
        config = one_instance_config(deployment)
        extra = {ONE_INSTANCE_CONFIG: config} if config is not None else {}
        runs = docker_runs(deployment, config_file=folder / ONE_INSTANCE_CONFIG if config else None, image=args.image)
        text = runs_text(deployment, runs)
        planned.append(
            Planned(
                folder,
                recipe.files(text, extra),
                _recipe_writer(recipe, folder, text, extra),
                recipe.base_choice(),
            )
        )
    if args.kubernetes:
        default = "triton-" + re.sub(r"[^a-z0-9-]+", "-", model_dir.name.lower()).strip("-")
        documents = vllm_manifests(
            deployment,
            name=default[:63].rstrip("-"),
            repository=args.repository,
            resource=args.resource,
            image=args.image,
            replicas=args.replicas,
            namespace=args.namespace,
            s3_region=args.s3_region,
            service_account=args.service_account,
            dra=args.dra,
            weights=args.weights,
        )
        folder = root / f"kubernetes-{model_dir.name}"
        files = {"triton.yaml": to_yaml(documents)}
        planned.append(Planned(folder, files, _files_writer(folder, files)))
    return planned


def run(args: argparse.Namespace) -> int:
    try:
        planned = plan_files(args)
    except ManifestError:
        raise
    except ValueError as err:  # a setting the host cannot take (an LNC, a core range, an image): one line
        raise ManifestError(str(err)) from None
    if args.dry_run:
        for item in planned:
            if item.summary:
                print(f"# base: {item.summary}")
            for name, text in item.files.items():
                print(f"# ---- {item.folder / name} (dry run: not written)")
                print(text.rstrip("\n"))
        return 0
    taken = [str(item.folder) for item in planned if item.folder.exists()]
    if taken and not args.force:
        raise FileExistsError(
            f"{', '.join(taken)} already exist(s); nothing was written. Pass --force to replace "
            "them (the old folders are kept as timestamped backups)"
        )
    for item in planned:
        result = item.write(args.force)
        backup = f" (previous kept as {result.backup})" if result.backup else ""
        print(f"wrote {result.path}{backup}")
    return 0
