"""Kubernetes manifests for generated model directories, validated against the Kubernetes API schema.

The schema check is kubernetes-validate's bundled OpenAPI schemas in strict mode (unknown fields are
errors). No cluster runs here; the guard in the container's command is run with /bin/sh for real.
"""

from __future__ import annotations

import subprocess

import pytest
import yaml

from workbench.cli import main
from workbench.deploy.kubernetes import (CORE_RESOURCE, DEVICE_RESOURCE, DRA_DEVICE_CLASS, HELM_CHART, LNC_NODE_LABEL,
                                         ManifestError, kubernetes_manifests, manifests_for_model, to_yaml)
from workbench.generate import GenerateSettings, render, write
from workbench.system import cores_for_instance

kubernetes_validate = pytest.importorskip("kubernetes_validate", reason="the test extra brings kubernetes-validate")
K8S_VERSION = "1.31"


def _model(repo, name, target, core_range, count=1):
    generated = render(GenerateSettings(
        triton_model_dir=str(repo / name), compiled_model=f"{name}.{target}.pt", for_other_machine=True,
        target=target, neuron_core_range=core_range, triton_model_instance_count=count, max_batch_size=8,
        triton_input=["INPUT__0,FP32,4"], triton_output=["OUTPUT__0,FP32,4"]))
    return write(generated).path


def _validate(documents):
    for document in documents:
        assert kubernetes_validate.validate(document, K8S_VERSION, strict=True) == K8S_VERSION
    return documents


def _container(documents):
    return documents[0]["spec"]["template"]["spec"]["containers"][0]


@pytest.mark.parametrize("target,core_range,resource,expected", [
    ("inf2", "0:1", "neuroncore", {CORE_RESOURCE: 2}),
    ("inf2", "2:5", "neuroncore", {CORE_RESOURCE: 4}),
    ("trn1", "4:7", "neuron", {DEVICE_RESOURCE: 2}),
    ("trn1", "0:31", "neuroncore", {CORE_RESOURCE: 32}),
])
def test_manifests_validate_and_ask_for_the_core_range(tmp_path, target, core_range, resource, expected):
    model_dir = _model(tmp_path / "model_repository", "bert", target, core_range, count=2)
    documents = _validate(manifests_for_model(model_dir, repository="s3://models-bucket/model_repository",
                                              resource=resource, s3_region="us-west-2"))
    deployment, service = documents
    assert (deployment["kind"], service["kind"]) == ("Deployment", "Service")
    container = _container(documents)
    assert container["resources"] == {"limits": expected}
    start, end = (int(x) for x in core_range.split(":"))
    nodes = deployment["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]["matchExpressions"][0]["values"]
    assert nodes and all(n.startswith(target) and cores_for_instance(n) > end for n in nodes)
    assert [n for n in ("inf2.xlarge", "trn1.2xlarge") if n.startswith(target) and end < 2] == \
        [n for n in nodes if n in ("inf2.xlarge", "trn1.2xlarge")]
    command = container["command"][-1]
    assert "--model-repository=s3://models-bucket/model_repository" in command and "--load-model=bert" in command
    assert container["livenessProbe"]["httpGet"]["path"] == "/v2/health/live"
    assert container["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/port"] == "8002" and annotations["prometheus.io/scrape"] == "true"
    assert {p["name"]: p["port"] for p in service["spec"]["ports"]} == {"http": 8000, "grpc": 8001, "metrics": 8002}
    assert {"name": "AWS_DEFAULT_REGION", "value": "us-west-2"} in container["env"]
    assert container["image"].startswith("workbench/tritonserver-neuron:26.07-xla-pytorch")
    assert HELM_CHART in deployment["metadata"]["annotations"]["workbench.neuron/device-plugin"]


def test_a_volume_repository_and_trn2_lnc(tmp_path):
    documents = _validate(kubernetes_manifests("triton-llm", "0:7", target="trn2", instance_type="trn2.48xlarge",
                                               lnc=1, repository="pvc:models/llm", namespace="serving",
                                               service_account="s3-reader", replicas=2))
    container, pod = _container(documents), documents[0]["spec"]["template"]["spec"]
    assert container["resources"]["limits"] == {CORE_RESOURCE: 8}
    # with the device plugin LNC is the node's (launch-template UserData, SDK deploy/eks/prerequisites.rst):
    # no pod env, a node label to land on such nodes, and an annotation saying what they need
    assert "env" not in container
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert {"key": LNC_NODE_LABEL, "operator": "In", "values": ["1"]} in terms[0]["matchExpressions"]
    setup = documents[0]["metadata"]["annotations"]["workbench.neuron/node-setup"]
    assert "NEURON_LOGICAL_NC_CONFIG=1 to /opt/aws/neuron/logical_nc_config" in setup and LNC_NODE_LABEL in setup
    assert {"name": "model-repository", "mountPath": "/models", "readOnly": True, "subPath": "llm"} in \
        container["volumeMounts"]
    assert pod["volumes"][0]["persistentVolumeClaim"]["claimName"] == "models"
    assert pod["serviceAccountName"] == "s3-reader" and documents[0]["metadata"]["namespace"] == "serving"
    assert "for d in /dev/neuron0; do" in container["command"][-1]  # 8 cores per device at LNC=1: one device
    default_lnc = kubernetes_manifests("t", "0:7", target="trn2", repository="s3://b/r")
    assert "env" not in _container(default_lnc)
    assert LNC_NODE_LABEL not in str(default_lnc)  # the default LNC needs no node set-up
    assert "for d in /dev/neuron0 /dev/neuron1; do" in _container(default_lnc)["command"][-1]  # 4 per device


def test_the_dra_variant_claims_devices_with_the_lnc_per_workload():
    """EKS >= 1.34 with the Neuron DRA driver: a ResourceClaimTemplate shaped like the SDK's
    lnc-setting-trn2.yaml / 1x4-connected-devices.yaml (resource.k8s.io/v1 nests the request under
    ``exactly``), and a pod that claims it instead of device-plugin limits."""
    documents = kubernetes_manifests("triton-llm", "0:15", target="trn2", instance_type="trn2.48xlarge", lnc=1,
                                     repository="s3://b/r", namespace="serving", dra=True)
    for document in documents:
        assert kubernetes_validate.validate(document, "1.34", strict=True) == "1.34"
    claim, deployment, _ = documents
    assert claim["kind"] == "ResourceClaimTemplate" and claim["metadata"]["name"] == "triton-llm-neurons"
    request = claim["spec"]["spec"]["devices"]["requests"][0]
    assert request["exactly"] == {"deviceClassName": "neuron.aws.com", "allocationMode": "ExactCount", "count": 2,
                                  "selectors": [{"cel": {"expression": "device.attributes['neuron.aws.com']"
                                                                      ".instanceType == 'trn2.48xlarge'"}}]}
    (config,) = claim["spec"]["spec"]["devices"]["config"]
    assert config["opaque"]["parameters"]["logicalNeuronCore"] == 1 and config["opaque"]["driver"] == DRA_DEVICE_CLASS
    pod = deployment["spec"]["template"]["spec"]
    assert pod["resourceClaims"] == [{"name": "neurons", "resourceClaimTemplateName": "triton-llm-neurons"}]
    assert _container(documents[1:])["resources"] == {"claims": [{"name": "neurons"}]}
    assert LNC_NODE_LABEL not in str(pod)  # LNC comes with the claim, not from the node
    with pytest.raises(ManifestError, match="the Neuron DRA driver is for Trn2/Trn3"):
        kubernetes_manifests("t", "0:1", target="inf2", repository="s3://b/r", dra=True)
    with pytest.raises(ManifestError, match="dra gives whole devices .* use the device plugin"):
        kubernetes_manifests("t", "0:1", target="trn2", repository="s3://b/r", dra=True)


def _guard(documents, dev: str) -> str:
    command = _container(documents)["command"][-1]
    guard, _, serve = command.partition("; exec ")
    assert serve.startswith("tritonserver ")
    return guard.replace("/dev/neuron", f"{dev}/neuron")


def test_the_guard_stops_a_pod_given_other_cores_than_the_config_pins(tmp_path):
    documents = kubernetes_manifests("t", "2:3", target="inf2", instance_type="inf2.24xlarge", repository="s3://b/r")
    (tmp_path / "neuron1").touch()
    guard = _guard(documents, str(tmp_path))

    def start(visible: str | None) -> subprocess.CompletedProcess:
        env = {"PATH": "/usr/bin:/bin"} | ({} if visible is None else {"NEURON_RT_VISIBLE_CORES": visible})
        return subprocess.run(["/bin/sh", "-c", guard], env=env, capture_output=True, text=True)

    assert start("2-3").returncode == 0 and start("2,3").returncode == 0 and start(None).returncode == 0
    wrong = start("0,1")
    assert wrong.returncode == 1 and "gave this pod cores 0,1 but the model config pins cores 2-3" in wrong.stderr
    (tmp_path / "neuron1").unlink()
    missing = start("2-3")
    assert missing.returncode == 1 and "pins cores 2-3, which sit on" in missing.stderr
    assert "neuron1, but this pod has no" in missing.stderr


def test_bad_input_errors_before_anything_is_made(tmp_path):
    ok = dict(target="inf2", repository="s3://b/r")
    with pytest.raises(ManifestError, match="not whole devices; use resource neuroncore"):
        kubernetes_manifests("t", "1:2", resource="neuron", **ok)
    with pytest.raises(ManifestError, match="give s3://bucket/path .* or pvc:CLAIM"):
        kubernetes_manifests("t", "0:1", target="inf2", repository="/srv/models")
    with pytest.raises(ManifestError, match="must be a DNS label"):
        kubernetes_manifests("Triton_BERT", "0:1", **ok)
    with pytest.raises(ManifestError, match="replicas must be"):
        kubernetes_manifests("t", "0:1", replicas=0, **ok)
    with pytest.raises(ManifestError, match="resource 'neurondevice' must be 'neuroncore'"):
        kubernetes_manifests("t", "0:1", resource="neurondevice", **ok)
    with pytest.raises(ManifestError, match="trn1.2xlarge is not a inf2 instance"):
        kubernetes_manifests("t", "0:1", instance_type="trn1.2xlarge", **ok)
    with pytest.raises(ManifestError, match="docker image reference"):
        kubernetes_manifests("t", "0:1", image="my image", **ok)
    with pytest.raises(ManifestError, match="target cpu"):
        kubernetes_manifests("t", "0:1", target="cpu", repository="s3://b/r")
    with pytest.raises(ValueError, match="inf2.xlarge has cores 0..1"):
        kubernetes_manifests("t", "0:3", instance_type="inf2.xlarge", **ok)
    with pytest.raises(ManifestError, match="no inf2 instance type has core 30"):
        kubernetes_manifests("t", "0:30", **ok)


def test_workbench_deploy_writes_recipe_and_manifests_and_keeps_what_was_there(tmp_path, capsys):
    model_dir = _model(tmp_path / "model_repository", "resnet", "inf2", "0:1")
    args = ["deploy", str(model_dir), "--kubernetes", "--repository", "s3://b/model_repository"]
    assert main(args + ["--dry-run"]) == 0
    shown = capsys.readouterr().out
    assert "kubernetes-resnet/triton.yaml (dry run: not written)" in shown and "FROM nvcr.io" in shown
    assert not (tmp_path / "neuron-host").exists()
    assert main(args) == 0
    written = tmp_path / "neuron-host" / "kubernetes-resnet" / "triton.yaml"
    _validate(list(yaml.safe_load_all(written.read_text())))
    assert (tmp_path / "neuron-host" / "xla-pytorch" / "Dockerfile").is_file()
    assert "--device /dev/neuron0" in (tmp_path / "neuron-host" / "xla-pytorch" / "RECIPE.md").read_text()
    written.write_text("# edited\n")
    capsys.readouterr()
    assert main(args) == 2
    assert "already exist(s); nothing was written" in capsys.readouterr().err
    assert written.read_text() == "# edited\n"
    assert main(args + ["--force"]) == 0
    backups = list((tmp_path / "neuron-host.backups").glob("kubernetes-resnet.bak-*"))
    assert len(backups) == 1 and (backups[0] / "triton.yaml").read_text() == "# edited\n"
    assert main(["deploy", str(model_dir), "--kubernetes"]) == 2
    assert main(["deploy", str(model_dir), "--lnc", "1"]) == 2
    assert "lnc=1 applies only to Trn2" in capsys.readouterr().err
    assert main(args + ["--dra", "--dry-run"]) == 2  # an inf2 model: the DRA driver is for Trn2/Trn3
    assert "the Neuron DRA driver is for Trn2/Trn3" in capsys.readouterr().err
    assert to_yaml([{"a": 1}]) == "a: 1\n"


# ---- vLLM-backend model directories -----------------------------------------------------------------

def _kinds(documents):
    return [d["kind"] for d in documents]


def test_a_trn2_vllm_model_deploys_one_pod_per_instance_written_by_workbench_deploy(tmp_path, capsys):
    """Through the CLI: the recipe folder of the vLLM Neuron stack (with the one-instance config),
    the manifests parsed by a YAML parser and the Kubernetes schema: a ConfigMap holding config.pbtxt
    with one instance, mounted over the model's; replicas = instances x --replicas; two cores each."""
    import shlex

    from tritonclient.grpc import model_config_pb2

    from vllm_model_dirs import vllm_model_dir
    from workbench.deploy.recipe import recipe_for
    from workbench.generate.config import from_text

    model_dir = vllm_model_dir(tmp_path, "llm", "trn2", tp=2, core_range="0:7")
    assert main(["deploy", str(model_dir), "--kubernetes", "--repository", "pvc:models/repo", "--replicas", "2",
                 "--instance-type", "trn2.48xlarge"]) == 0
    host = tmp_path / "neuron-host"
    documents = _validate(list(yaml.safe_load_all((host / "kubernetes-llm" / "triton.yaml").read_text())))
    assert _kinds(documents) == ["ConfigMap", "Deployment", "Service"]
    config = from_text(documents[0]["data"]["config.pbtxt"])
    kind = model_config_pb2.ModelInstanceGroup.Kind.Name
    assert [(g.count, kind(g.kind)) for g in config.instance_group] == [(1, "KIND_MODEL")]
    assert config.backend == "vllm" and config.name == "llm"
    deployment = documents[1]
    assert deployment["spec"]["replicas"] == 8  # 4 instances x --replicas 2
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"] == {"limits": {CORE_RESOURCE: 2}}
    assert container["image"] == recipe_for("trn2", "vllm").image
    assert {"name": "one-instance-config", "mountPath": "/models/llm/config.pbtxt", "subPath": "config.pbtxt",
            "readOnly": True} in container["volumeMounts"]
    assert shlex.split(container["command"][2]) == ["exec", "tritonserver", "--model-repository=/models",
                                                    "--model-control-mode=explicit", "--load-model=llm"]
    assert str(tmp_path / "llm-weights") in deployment["metadata"]["annotations"]["workbench.neuron/model-folder"]
    recipe = host / "vllm-neuron"
    assert sorted(p.name for p in recipe.iterdir()) == ["Dockerfile", "RECIPE.md", "config-one-instance.pbtxt",
                                                        "setup-host.sh"]
    assert from_text((recipe / "config-one-instance.pbtxt").read_text()) == config
    markdown = (recipe / "RECIPE.md").read_text()
    runs = markdown.split("```bash\n", 1)[1].split("```", 1)[0]
    head, *blocks = [shlex.split(block.replace("\\\n", " "), comments=True) for block in runs.split("\n\n")]
    assert head == [] and f"model.json reads {tmp_path / 'llm-weights'}: copy it to the same path" in runs
    assert [b[b.index("--env") + 1] for b in blocks] == [f"NEURON_RT_VISIBLE_CORES={c}" for c in
                                                         ("0-1", "2-3", "4-5", "6-7")]
    assert all(f"{recipe / 'config-one-instance.pbtxt'}:/models/llm/config.pbtxt:ro" in b for b in blocks)
    assert "vllm-neuron==0.29.0.1.2.0" in markdown and "vllm-neuron/docs/getting-started/setup-guide.html" in markdown


def test_an_inf2_vllm_model_on_s3_asks_for_whole_devices(tmp_path):
    from vllm_model_dirs import vllm_model_dir
    from workbench.deploy.kubernetes_vllm import vllm_manifests
    from workbench.deploy.vllm_instances import vllm_deployment
    from workbench.generate import load_settings

    model_dir = vllm_model_dir(tmp_path, "llm", "inf2", tp=2)
    dep = vllm_deployment(model_dir, load_settings(model_dir))
    assert manifests_for_model(model_dir, repository="s3://b/r", resource="neuron", replicas=3) == \
        vllm_manifests(dep, name="triton-llm", repository="s3://b/r", resource="neuron", replicas=3)
    documents = _validate(vllm_manifests(dep, name="triton-llm", repository="s3://b/r", resource="neuron",
                                         replicas=3))
    assert _kinds(documents) == ["Deployment", "Service"]  # one instance: the config is served as written
    assert documents[0]["spec"]["replicas"] == 3
    container = _container(documents)
    assert container["resources"] == {"limits": {DEVICE_RESOURCE: 1}}  # 2 cores = one inf2 device
    assert container["image"].endswith("vllm-nxdi-2.31.1")
    nodes = documents[0]["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]["matchExpressions"][0]["values"]
    assert nodes and all(n.startswith("inf2.") for n in nodes)


def test_a_vllm_model_the_cluster_cannot_serve_is_refused_before_anything_is_written(tmp_path, capsys):
    from vllm_model_dirs import vllm_model_dir

    trn2 = vllm_model_dir(tmp_path, "llm", "trn2", tp=2, core_range="0:7")
    cpu = vllm_model_dir(tmp_path, "llm-cpu", "cpu")
    for argv, message in (
            ([str(trn2), "--kubernetes", "--repository", "s3://b/r"],
             "--repository s3://b/r: llm asks for 4 instances and each pod serves one"),
            ([str(trn2), "--kubernetes", "--repository", "pvc:m", "--resource", "neuron"],
             "--tensor-parallel-size 2 is not whole devices; use --resource neuroncore"),
            ([str(trn2), "--kubernetes", "--repository", "pvc:m", "--dra"], "--dra: the DRA claim is not written"),
            ([str(cpu)], "this vLLM model's target is cpu"),
            ([str(trn2), "--instance-type", "trn2.3xlarge"], "needs core 7, but trn2.3xlarge has cores 0..3")):
        assert main(["deploy", *argv]) == 2
        assert message in capsys.readouterr().err
    assert not (tmp_path / "neuron-host").exists()


def test_the_weights_claim_is_mounted_where_model_json_reads_the_model(tmp_path, capsys):
    from vllm_model_dirs import vllm_model_dir

    model_dir = vllm_model_dir(tmp_path, "llm", "inf2", tp=2)
    weights = str(tmp_path / "llm-weights")
    assert main(["deploy", str(model_dir), "--no-recipe", "--kubernetes", "--repository", "s3://b/r",
                 "--weights", "pvc:llm-weights/tiny"]) == 0
    documents = _validate(list(yaml.safe_load_all(
        (tmp_path / "neuron-host" / "kubernetes-llm" / "triton.yaml").read_text())))
    pod = documents[0]["spec"]["template"]["spec"]
    assert {"name": "model-weights", "mountPath": weights, "readOnly": True, "subPath": "tiny"} \
        in pod["containers"][0]["volumeMounts"]
    assert {"name": "model-weights", "persistentVolumeClaim": {"claimName": "llm-weights", "readOnly": True}} \
        in pod["volumes"]
    assert documents[0]["metadata"]["annotations"]["workbench.neuron/model-folder"] == \
        f"model.json reads {weights}: mounted from pvc:llm-weights/tiny"
    capsys.readouterr()
    for argv, message in (([str(model_dir), "--kubernetes", "--repository", "s3://b/r", "--weights", "/srv/llm"],
                           "--weights '/srv/llm': give pvc:CLAIM[/subpath]"),
                          ([str(model_dir), "--kubernetes", "--repository", "s3://b/r", "--weights", "pvc:w/../x"],
                           "must stay inside the claim"),
                          ([str(_model(tmp_path / "model_repository", "resnet", "inf2", "0:1")), "--weights", "pvc:w"],
                           "--weights is for vLLM-backend models")):
        assert main(["deploy", *argv, "--force"]) == 2
        assert message in capsys.readouterr().err
