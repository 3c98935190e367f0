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
from gpudra.driver.slices import device_classes

DEPLOY = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "deploy")
KINDS = {("v1", "Namespace"): k8s.V1Namespace, ("v1", "ServiceAccount"): k8s.V1ServiceAccount,
         ("rbac.authorization.k8s.io/v1", "ClusterRole"): k8s.V1ClusterRole,
         ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): k8s.V1ClusterRoleBinding,
         ("apps/v1", "DaemonSet"): k8s.V1DaemonSet}


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


@pytest.mark.parametrize("name", ["namespace.yaml", "rbac.yaml", "daemonset.yaml"])
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
