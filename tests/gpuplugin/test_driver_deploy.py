"""Deployment manifests: schema-checked against the Kubernetes client models and gpudra's API validator."""

from __future__ import annotations

import os
import re
import shlex

import pytest
import yaml
from kubernetes import client as k8s

from gpudra.api.load import load_text
from gpudra.api.validate import has_errors, validate_documents
from gpudra.cli.driver import run_cmd
from gpudra.cli.driver_services import compute_domain_controller_cmd
from gpudra.gpuplugin.slices import device_classes

DEPLOY = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "deploy")
KINDS = {("v1", "Namespace"): k8s.V1Namespace, ("v1", "ServiceAccount"): k8s.V1ServiceAccount,
         ("rbac.authorization.k8s.io/v1", "ClusterRole"): k8s.V1ClusterRole,
         ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): k8s.V1ClusterRoleBinding,
         ("apps/v1", "DaemonSet"): k8s.V1DaemonSet, ("v1", "ConfigMap"): k8s.V1ConfigMap,
         ("apps/v1", "Deployment"): k8s.V1Deployment, ("rbac.authorization.k8s.io/v1", "Role"): k8s.V1Role,
         ("rbac.authorization.k8s.io/v1", "RoleBinding"): k8s.V1RoleBinding}


def _problems(doc: dict) -> list[str]:
    """Validate against the official client's (pydantic) models: unknown fields, types, required fields."""
    import pydantic

    model = KINDS[(doc["apiVersion"], doc["kind"])]
    try:
        model.model_validate(doc, strict=True)
    except pydantic.ValidationError as exc:
        return [f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()]
    return []


def _docs(name: str) -> list[dict]:
    with open(os.path.join(DEPLOY, "kubernetes", name), encoding="utf-8") as fh:
        return [d for d in yaml.safe_load_all(fh) if d]


@pytest.mark.parametrize("name", ["namespace.yaml", "rbac.yaml", "daemonset.yaml", "mig-manager.yaml",
                                  "mig-parted-config.yaml", "compute-domains.yaml"])
def test_manifests_match_the_kubernetes_schemas(name):
    for doc in _docs(name):
        assert _problems(doc) == []


def test_schema_check_catches_mistakes():
    ds = _docs("daemonset.yaml")[0]
    ds["spec"]["template"]["spec"]["containers"][0]["volumeMount"] = []
    del ds["spec"]["selector"]
    ds["spec"]["template"]["spec"]["containers"][0]["securityContext"]["privileged"] = "yes"
    text = "\n".join(_problems(ds))
    assert "volumeMount: Extra inputs are not permitted" in text
    assert "spec.selector: Field required" in text
    assert "privileged" in text


def test_daemonset_mounts_the_kubelet_directories_and_runs_the_driver():
    ds = _docs("daemonset.yaml")[0]
    pod = ds["spec"]["template"]["spec"]
    volumes = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"]}
    container = pod["containers"][0]
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    for path in ("/var/lib/kubelet/plugins_registry", "/var/lib/kubelet/plugins", "/var/run/cdi"):
        assert volumes[mounts[path]["name"]] == path
    assert mounts["/var/lib/kubelet/plugins"]["mountPropagation"] == "Bidirectional"
    assert pod["serviceAccountName"] == _docs("rbac.yaml")[0]["metadata"]["name"]
    # the arguments are ones `gpudra driver run` accepts
    args = container["args"][2:]
    ctx = run_cmd.make_context("run", args + ["--node-name", "n"])
    assert ctx.params["backend"] == "nvml" and ctx.params["in_cluster"]
    assert ctx.params["healthcheck_port"] == container["livenessProbe"]["grpc"]["port"]
    # the host's driver files: its / mounted read-only, spec paths mapped back to host paths
    driver_root = mounts[ctx.params["driver_root"]]
    assert volumes[driver_root["name"]] == "/" and driver_root["readOnly"] is True
    assert ctx.params["host_driver_root"] == "/"


def test_rbac_allows_what_the_driver_does():
    role = next(d for d in _docs("rbac.yaml") if d["kind"] == "ClusterRole")
    allowed = {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]
               for v in rule["verbs"]}
    for verb in ("list", "create", "update", "delete"):
        assert ("resource.k8s.io", "resourceslices", verb) in allowed
    assert ("resource.k8s.io", "resourceclaims", "get") in allowed
    assert ("", "nodes", "get") in allowed


def test_deviceclasses_manifest_is_current_and_valid():
    docs = _docs("deviceclasses.yaml")
    assert docs == device_classes()
    with open(os.path.join(DEPLOY, "kubernetes", "deviceclasses.yaml"), encoding="utf-8") as fh:
        problems = validate_documents(load_text(fh.read(), "deviceclasses.yaml"))
    assert not has_errors(problems), problems


def test_container_recipe():
    with open(os.path.join(DEPLOY, "Containerfile"), encoding="utf-8") as fh:
        text = fh.read()
    assert re.search(r"^FROM .*python:3\.11", text, re.M)
    entry = re.search(r"^ENTRYPOINT (.*)$", text, re.M).group(1)
    assert yaml.safe_load(entry) == ["gpudra"]
    cmd = yaml.safe_load(re.search(r"^CMD (.*)$", text, re.M).group(1))
    assert cmd[:2] == ["driver", "run"]
    assert shlex.join(cmd)


def test_driver_pods_roll_over_with_per_pod_sockets():
    ds = _docs("daemonset.yaml")[0]
    assert ds["spec"]["updateStrategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    container = ds["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e for e in container["env"]}
    assert env["POD_UID"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.uid"
    ctx = run_cmd.make_context("run", container["args"][2:] + ["--node-name", "n"])
    assert ctx.params["rolling_update_uid"] is None  # comes from POD_UID (click's envvar) in the pod
    assert [o for o in run_cmd.params if o.name == "rolling_update_uid"][0].envvar == "POD_UID"


def test_mig_manager_daemonset_runs_the_manager_on_the_driver_directories():
    from gpudra.cli.mig import manager_command

    docs = {d["kind"]: d for d in _docs("mig-manager.yaml")}
    pod = docs["DaemonSet"]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == docs["ServiceAccount"]["metadata"]["name"]
    container = pod["containers"][0]
    ctx = manager_command.make_context("manager", container["args"][2:])
    assert ctx.params["backend"] == "nvml" and ctx.params["in_cluster"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    config_mount = mounts[os.path.dirname(ctx.params["path"])]
    config_map = volumes[config_mount["name"]]["configMap"]["name"]
    assert config_map == _docs("mig-parted-config.yaml")[0]["metadata"]["name"]
    driver_plugins = os.path.join(ctx.params["root"], "var/lib/kubelet/plugins")
    assert volumes[mounts[driver_plugins]["name"]]["hostPath"]["path"] == "/var/lib/kubelet/plugins"
    rules = {(g, r, v) for rule in docs["ClusterRole"]["rules"] for g in rule["apiGroups"] for r in rule["resources"]
             for v in rule["verbs"]}
    assert {("", "nodes", "watch"), ("", "nodes", "patch")} <= rules


def test_mig_parted_configmap_is_what_gpudra_generates():
    from click.testing import CliRunner

    from gpudra import catalog
    from gpudra.cli import cli

    with open(os.path.join(DEPLOY, "kubernetes", "mig-parted-config.yaml"), encoding="utf-8") as fh:
        command = fh.readline().removeprefix("# Generated: ").split()
    gpus = [command[i + 1] for i, word in enumerate(command) if word == "--gpu"]
    assert gpus == [m.key for m in catalog.mig_models()], "every MIG-capable GPU model of the catalog"
    result = CliRunner().invoke(cli, command[1:])
    assert result.exit_code == 0, result.output
    assert [d for d in yaml.safe_load_all(result.output) if d] == _docs("mig-parted-config.yaml")


def test_helm_values_turn_the_mig_manager_off_or_bring_a_configmap():
    from support.helm_template import helm_template

    chart = os.path.join(DEPLOY, "helm", "gpudra")
    kinds = lambda objects: {(o["kind"], o["metadata"]["name"]) for o in objects}  # noqa: E731
    off = kinds(helm_template(chart, namespace="g", values={"migManager": {"enabled": False}}))
    assert not any(name.startswith("gpudra-mig") for _, name in off) and ("DaemonSet", "gpudra-kubelet-plugin") in off
    with open(os.path.join(chart, "values.yaml"), encoding="utf-8") as fh:
        mig_values = yaml.safe_load(fh)["migManager"]  # the test renderer replaces a values key instead of merging
    own = helm_template(chart, namespace="g", values={"migManager": {**mig_values, "createConfigMap": False,
                                                                     "configMapName": "mine"}})
    assert ("ConfigMap", "mine") not in kinds(own) and ("DaemonSet", "gpudra-mig-manager") in kinds(own)
    ds = next(o for o in own if o["metadata"]["name"] == "gpudra-mig-manager" and o["kind"] == "DaemonSet")
    assert ds["spec"]["template"]["spec"]["volumes"][0]["configMap"]["name"] == "mine"


def test_helm_values_for_device_health_become_driver_arguments():
    from support.helm_template import helm_template

    objects = helm_template(os.path.join(DEPLOY, "helm", "gpudra"), namespace="g",
                            values={"deviceTaintRules": True, "additionalXidsToIgnore": "48,63"})
    ds = next(o for o in objects if o["kind"] == "DaemonSet" and o["metadata"]["name"] == "gpudra-kubelet-plugin")
    args = ds["spec"]["template"]["spec"]["containers"][0]["args"]
    ctx = run_cmd.make_context("run", args[2:] + ["--node-name", "n"])
    assert ctx.params["device_taint_rules"] and ctx.params["additional_xids_to_ignore"] == "48,63"


def test_compute_domain_pods_run_commands_gpudra_accepts():
    """The compute-domain plugin runs `driver run --driver compute-domain` beside the GPU plugin (its own health
    port), the controller `driver compute-domain-controller --in-cluster`; each with its own service account."""
    docs = {(d["kind"], d["metadata"]["name"]): d for d in _docs("compute-domains.yaml")}
    plugin = docs[("DaemonSet", "gpudra-compute-domain-kubelet-plugin")]["spec"]["template"]["spec"]
    container = plugin["containers"][0]
    ctx = run_cmd.make_context("run", container["args"][2:] + ["--node-name", "n"])
    assert ctx.params["driver_kind"] == "compute-domain" and ctx.params["in_cluster"]
    assert ctx.params["healthcheck_port"] == container["livenessProbe"]["grpc"]["port"]
    gpu_plugin = _docs("daemonset.yaml")[0]["spec"]["template"]["spec"]["containers"][0]
    assert ctx.params["healthcheck_port"] != gpu_plugin["livenessProbe"]["grpc"]["port"]  # both on one node
    controller = docs[("Deployment", "gpudra-compute-domain-controller")]["spec"]["template"]["spec"]
    args = controller["containers"][0]["args"]
    assert args[:2] == ["driver", "compute-domain-controller"]
    assert compute_domain_controller_cmd.make_context("compute-domain-controller", args[2:]).params["in_cluster"]
    for pod in (plugin, controller):
        assert ("ServiceAccount", pod["serviceAccountName"]) in docs


def test_the_crd_files_are_the_one_gpudra_validates_with():
    """deploy/kubernetes and the chart's crds/ link to gpudra/computedomain/computedomains.crd.yaml: one copy."""
    source = os.path.join(os.path.dirname(DEPLOY), "gpudra", "computedomain", "computedomains.crd.yaml")
    for path in (os.path.join(DEPLOY, "kubernetes", "computedomains.crd.yaml"),
                 os.path.join(DEPLOY, "helm", "gpudra", "crds", "computedomains.crd.yaml")):
        assert os.path.realpath(path) == os.path.realpath(source)
