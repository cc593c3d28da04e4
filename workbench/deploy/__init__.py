"""Taking a model to a Neuron host: the host recipe (Dockerfile + set-up script, every pin with its
source), the ``docker run`` line, Kubernetes manifests, and `workbench doctor`. A vLLM-backend model
takes the Neuron vLLM stack of its target (`facts_vllm`) and one container or pod per instance
(`vllm`, `kubernetes_vllm`).

Nothing here runs on Neuron hardware where the workbench is developed: recipe, docker and
kubernetes only write text for the user to take to the host; the doctor runs wherever it is
started and says what it could not check.
"""

from __future__ import annotations

from workbench.lazy import lazy_getattr

# public name -> module; loaded on first use so `import workbench.deploy` stays light
_LAZY = {
    "RecipeError": "workbench.deploy.recipe",
    "Recipe": "workbench.deploy.recipe",
    "recipe_for": "workbench.deploy.recipe",
    "write_recipe": "workbench.deploy.recipe",
    "host_folder": "workbench.deploy.recipe",
    "DockerRun": "workbench.deploy.docker",
    "docker_run_command": "workbench.deploy.docker",
    "docker_run_for_model": "workbench.deploy.docker",
    "neuron_devices": "workbench.deploy.devices",
    "ManifestError": "workbench.deploy.kubernetes",
    "kubernetes_manifests": "workbench.deploy.kubernetes",
    "manifests_for_model": "workbench.deploy.kubernetes",
    "VllmDeployError": "workbench.deploy.vllm_instances",
    "vllm_deployment": "workbench.deploy.vllm_instances",
    "deployment_for_model": "workbench.deploy.vllm_instances",
    "docker_runs": "workbench.deploy.vllm_instances",
    "vllm_manifests": "workbench.deploy.kubernetes_vllm",
    "run_doctor": "workbench.deploy.doctor",
    "DoctorReport": "workbench.deploy.doctor",
}

__all__ = list(_LAZY)


__getattr__ = lazy_getattr(__name__, _LAZY, globals())
