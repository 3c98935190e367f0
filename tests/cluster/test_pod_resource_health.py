"""Device health in Pod status (KEP-4680, gate ResourceHealthStatus: alpha from 1.31, beta from 1.36): the kubelet
stand-in reads each node driver's health stream (NodeWatchResources) and writes each container's
`allocatedResourcesStatus` as the kubelet's DRA manager does (kubernetes/kubernetes pkg/kubelet/cm/dra/manager.go,
UpdateAllocatedResourcesStatus): `claim:<podClaim>[/<request>]`, one entry per prepared device named by its first
CDI device ID, Healthy/Unhealthy/Unknown. On the embedded cluster here; on the real control plane in
tests/oracles/test_kube_cluster.py."""

from __future__ import annotations

import json
import time

from click.testing import CliRunner

from gpudra.cli import cli
from gpudra.cluster.controller import reconcile
from gpudra.cluster.kubelet import allocated_resources_status, resource_health_enabled
from gpudra.cluster.layout import ClusterDir
from gpudra.allocator.features import Features

WORKLOAD = """apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: one-gpu}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly: {deviceClassName: gpu.nvidia.com}
---
apiVersion: v1
kind: Pod
metadata: {name: trainer}
spec:
  containers:
  - {name: main, image: cuda, resources: {claims: [{name: gpu}]}}
  - {name: sidecar, image: busybox}
  resourceClaims: [{name: gpu, resourceClaimTemplateName: one-gpu}]
"""


def run(*args: str, code: int = 0) -> str:
    result = CliRunner().invoke(cli, list(args))
    assert result.exit_code == code, result.output
    return result.stdout


def pod_and_device(directory: str) -> tuple[dict, dict]:
    reconcile(ClusterDir(directory))
    pod = json.loads(run("get", "pod/trainer", "-o", "json", "--dir", directory))
    claim_name = pod["status"]["resourceClaimStatuses"][0]["resourceClaimName"]
    claim = json.loads(run("get", f"resourceclaim/{claim_name}", "-o", "json", "--dir", directory))
    return pod, claim["status"]["allocation"]["devices"]["results"][0]


def test_an_xid_turns_the_running_pods_gpu_unhealthy_in_its_status(cluster_state, tmp_path):
    run("cluster", "up", "--dir", cluster_state, "--nodes", "l4-node", "--kubernetes-version", "1.34",
        "--features", "default,+ResourceHealthStatus", "--no-control-plane")
    manifest = tmp_path / "w.yaml"
    manifest.write_text(WORKLOAD)
    run("apply", "-f", str(manifest), "--dir", cluster_state)
    pod, device = pod_and_device(cluster_state)
    assert pod["status"]["phase"] == "Running"
    main, sidecar = pod["status"]["containerStatuses"]
    assert "allocatedResourcesStatus" not in sidecar  # no claims: the kubelet skips it
    (entry,) = main["allocatedResourcesStatus"]
    assert entry["name"] == "claim:gpu"
    (resource,) = entry["resources"]
    assert resource["health"] == "Healthy"
    assert resource["resourceID"].startswith("k8s.gpu.nvidia.com/claim=")  # the device's first CDI ID

    index = device["device"].rsplit("-", 1)[1]
    run("driver", "inject-event", "--root", f"{cluster_state}/nodes/{device['pool']}", "--gpu", index,
        "--xid", "79")
    deadline = time.monotonic() + 60  # the driver notices the event on its next health poll
    while True:
        pod, _ = pod_and_device(cluster_state)
        (entry,) = pod["status"]["containerStatuses"][0]["allocatedResourcesStatus"]
        if entry["resources"][0]["health"] != "Healthy" or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert entry["resources"] == [{"resourceID": resource["resourceID"], "health": "Unhealthy"}]


def test_without_the_gate_a_1_34_pod_reports_no_device_health(cluster_state, tmp_path):
    run("cluster", "up", "--dir", cluster_state, "--nodes", "l4-node", "--kubernetes-version", "1.34",
        "--no-control-plane")
    manifest = tmp_path / "w.yaml"
    manifest.write_text(WORKLOAD)
    run("apply", "-f", str(manifest), "--dir", cluster_state)
    pod, _ = pod_and_device(cluster_state)
    assert pod["status"]["phase"] == "Running"
    assert all("allocatedResourcesStatus" not in c for c in pod["status"]["containerStatuses"])


def test_the_gate_follows_the_release_and_the_features_flag():
    # kube_features.go: ResourceHealthStatus alpha (off) since 1.31, beta (on) from 1.36
    assert not resource_health_enabled(Features.parse("default", "1.34"), "1.34")
    assert resource_health_enabled(Features.parse("default,+ResourceHealthStatus", "1.34"), "1.34")
    assert resource_health_enabled(Features.parse("default", "1.36"), "1.36")
    assert not resource_health_enabled(Features.parse("default,-ResourceHealthStatus", "1.36"), "1.36")


def test_entries_follow_the_kubelets_dra_manager():
    """UpdateAllocatedResourcesStatus: the name carries the request when the container names one; every device of
    the claim is listed, whatever request it serves; no CDI ID -> driver/pool/device; unreported -> Unknown; the
    claim is found through status.resourceClaimStatuses only (a directly named claim gets no entry)."""
    pod = {"spec": {"containers": [
        {"name": "a", "resources": {"claims": [{"name": "pair", "request": "first"}, {"name": "direct"}]}}]},
        "status": {"resourceClaimStatuses": [{"name": "pair", "resourceClaimName": "p-pair-x1"}]}}
    record = {"node": "n", "claims": [
        {"name": "p-pair-x1", "drivers": ["gpu.nvidia.com"], "devices": [
            {"driver": "gpu.nvidia.com", "pool": "n", "device": "gpu-0", "requestNames": ["first"],
             "cdiDeviceIDs": ["k8s.gpu.nvidia.com/device=gpu-0"]},
            {"driver": "gpu.nvidia.com", "pool": "n", "device": "gpu-1", "requestNames": ["second"],
             "cdiDeviceIDs": []}]},
        {"name": "direct", "drivers": ["gpu.nvidia.com"], "devices": [
            {"driver": "gpu.nvidia.com", "pool": "n", "device": "gpu-2", "requestNames": ["x"],
             "cdiDeviceIDs": ["k8s.gpu.nvidia.com/device=gpu-2"]}]}]}
    health = {("gpu.nvidia.com", "n", "gpu-0"): "Unhealthy"}
    assert allocated_resources_status(pod, record, health, "gpu.nvidia.com") == {"a": [
        {"name": "claim:pair/first", "resources": [
            {"resourceID": "k8s.gpu.nvidia.com/device=gpu-0", "health": "Unhealthy"},
            {"resourceID": "gpu.nvidia.com/n/gpu-1", "health": "Unknown"}]}]}
