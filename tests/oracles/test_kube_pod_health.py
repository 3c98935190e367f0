"""Device health in Pod status on the real Kubernetes 1.34 control plane (KEP-4680, gate ResourceHealthStatus, alpha
in 1.34, passed to every component by `cluster up --features`): the node stand-in reads the driver's health stream
and patches the pod's `allocatedResourcesStatus` as the kubelet's DRA manager writes it
(pkg/kubelet/cm/dra/manager.go, UpdateAllocatedResourcesStatus); the real kube-apiserver must accept it
(validation of `claim:<name>` entries against the container's claims, health values, unique resource IDs) and keep
it (it drops the field when the gate is off). An XID injected into the pod's GPU turns the entry Unhealthy."""

from __future__ import annotations

import os
import shutil

import pytest

from support.realkube import BUILD_TIMEOUT_S, built, gpudra, short_dir
from test_kube_cluster import Real, _our_processes

pytestmark = pytest.mark.timeout(BUILD_TIMEOUT_S)

WORKLOAD = """apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: one-gpu, namespace: default}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly: {deviceClassName: gpu.nvidia.com}
---
apiVersion: v1
kind: Pod
metadata: {name: trainer, namespace: default}
spec:
  containers:
  - {name: main, image: registry.k8s.io/pause:3.10, resources: {claims: [{name: gpu, request: gpu}]}}
  resourceClaims: [{name: gpu, resourceClaimTemplateName: one-gpu}]
"""


def _health(real: Real) -> list[dict] | None:
    pod = real.get("pod", "trainer")
    statuses = pod.get("status", {}).get("containerStatuses") or []
    return statuses[0].get("allocatedResourcesStatus") if statuses else None


def test_an_xid_turns_the_pods_gpu_unhealthy_in_its_status_on_the_real_api_server():
    binary = built()
    directory = short_dir("gh")
    try:
        gpudra("cluster", "up", "--dir", directory, "--api-server", "kubernetes", "--nodes", "l4-node",
               "--features", "default,+ResourceHealthStatus")
        real = Real(directory, binary.kubectl)
        real.wait("the L4 node's slice", lambda: real.get("resourceslices")["items"])
        real.kubectl("apply", "-f", "-", stdin=WORKLOAD)
        (entry,) = real.wait("the pod's device health", lambda: _health(real), timeout=180)
        assert entry["name"] == "claim:gpu/gpu"
        (resource,) = entry["resources"]
        assert resource["health"] == "Healthy" and resource["resourceID"].startswith("k8s.gpu.nvidia.com/claim=")

        pod = real.get("pod", "trainer")
        claim = real.get("resourceclaim", pod["status"]["resourceClaimStatuses"][0]["resourceClaimName"])
        (result,) = claim["status"]["allocation"]["devices"]["results"]
        # DRAResourceClaimDeviceStatus (beta, on in 1.34) lets a driver write status.devices; NVIDIA's GPU kubelet
        # plugin writes none (kubernetes-sigs/dra-driver-nvidia-gpu: no AllocatedDeviceStatus outside vendor/, its
        # rbac-kubeletplugin.yaml grants resourceclaims get/list/watch only), so gpudra's driver writes none either
        assert "devices" not in claim["status"]
        gpudra("driver", "inject-event", "--root", os.path.join(directory, "nodes", pod["spec"]["nodeName"]),
               "--gpu", result["device"].rsplit("-", 1)[1], "--xid", "79")
        real.wait("the GPU Unhealthy in the pod's status", lambda: (_health(real) or [{}])[0].get("resources") == [
            {"resourceID": resource["resourceID"], "health": "Unhealthy"}], timeout=120)
    finally:
        gpudra("cluster", "down", "--dir", directory, check=False)
        left = _our_processes(directory)
        shutil.rmtree(directory, ignore_errors=True)
    assert not left, f"cluster down left processes running: {left}"
