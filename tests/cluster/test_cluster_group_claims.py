"""A PodGroup's own claim on the local cluster (DRAWorkloadResourceClaims, 1.36): the control loop's resourceclaim
controller makes the group's claim once from its template (owned by the PodGroup, recorded in the PodGroup's
status.resourceClaimStatuses, named in each pod's status), the scheduler allocates it once and reserves it for
the PodGroup, and the kubelet stand-in prepares it for each pod of the group (IsReservedForPod accepts the
group's reservation), as kubernetes v1.36.0 pkg/controller/resourceclaim/controller.go,
pkg/scheduler/framework/plugins/dynamicresources and k8s.io/dynamic-resource-allocation@v0.36.3
resourceclaim.go do. Two simulated GB200 NVL72 racks of two trays each; no GB200 hardware."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpudra.cli import cli
from gpudra.cluster.controller import ControlLoop, reconcile
from gpudra.controllers import ManagedCluster
from gpudra.cluster.layout import ClusterConfig, ClusterDir, parse_racks
from gpudra.cluster.nodes import install_device_classes, up

GATES = "default,+GenericWorkload,+GangScheduling,+DRAWorkloadResourceClaims"

MANIFEST = """\
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: two-gpus}
spec:
  spec:
    devices:
      requests:
      - name: gpus
        exactly: {deviceClassName: gpu.nvidia.com, count: 2}
      constraints:
      - matchAttribute: gpu.nvidia.com/productName
---
apiVersion: scheduling.k8s.io/v1alpha2
kind: PodGroup
metadata: {name: trainers}
spec:
  schedulingPolicy: {gang: {minCount: 2}}
  resourceClaims:
  - {name: gpus, resourceClaimTemplateName: two-gpus}
""" + "".join(f"""---
apiVersion: v1
kind: Pod
metadata: {{name: worker-{index}}}
spec:
  schedulingGroup: {{podGroupName: trainers}}
  resourceClaims:
  - {{name: gpus, resourceClaimTemplateName: two-gpus}}
  containers:
  - name: train
    image: pause
    resources:
      claims: [{{name: gpus}}]
""" for index in range(2))


def start(directory: str, features: str) -> ClusterDir:
    cluster = ClusterDir(directory)
    up(cluster, ClusterConfig(nodes=parse_racks("2x2"), kubernetes_version="1.36", features=features))
    install_device_classes(cluster)
    return cluster


def apply(cluster: ClusterDir, tmp_path: Path) -> None:
    path = tmp_path / "group.yaml"
    path.write_text(MANIFEST)
    result = CliRunner().invoke(cli, ["apply", "-f", str(path), "--dir", cluster.path], catch_exceptions=False)
    assert result.exit_code == 0, result.stdout
    for _ in range(4):  # the control plane's resyncs, by hand
        reconcile(cluster)


def test_the_group_claim_is_made_once_reserved_for_the_group_and_prepared_for_both_pods(cluster_state, tmp_path):
    cluster = start(cluster_state, GATES)
    apply(cluster, tmp_path)
    (claim,) = cluster.store.list("ResourceClaim")
    (group,) = cluster.store.list("PodGroup")
    assert claim["metadata"]["generateName"] == "trainers-gpus-"
    (owner,) = claim["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("PodGroup", "trainers", group["metadata"]["uid"])
    assert group["status"]["resourceClaimStatuses"] == [{"name": "gpus", "resourceClaimName": claim["metadata"]["name"]}]
    assert claim["status"]["reservedFor"] == [{"apiGroup": "scheduling.k8s.io", "resource": "podgroups",
                                               "name": "trainers", "uid": group["metadata"]["uid"]}]
    assert len(claim["status"]["allocation"]["devices"]["results"]) == 2
    pods = cluster.store.list("Pod")
    assert len(pods) == 2
    for pod in pods:
        assert pod["status"]["resourceClaimStatuses"] == [{"name": "gpus",
                                                           "resourceClaimName": claim["metadata"]["name"]}]
        assert pod["status"]["phase"] == "Running", pod["status"]
    assert len({pod["spec"]["nodeName"] for pod in pods}) == 1  # where the group's claim is allocated

    # the pods go, the claim stays with its PodGroup (reserved for it); the PodGroup goes, and the claim with it
    for pod in pods:
        assert CliRunner().invoke(cli, ["delete", "pod", pod["metadata"]["name"], "--dir", cluster.path]).exit_code == 0
    for _ in range(4):
        reconcile(cluster)
    (claim,) = cluster.store.list("ResourceClaim")
    assert claim["status"]["reservedFor"][0]["resource"] == "podgroups"
    assert CliRunner().invoke(cli, ["delete", "podgroup", "trainers", "--dir", cluster.path]).exit_code == 0
    for _ in range(4):
        reconcile(cluster)
    assert cluster.store.list("ResourceClaim") == []


def test_without_the_gate_each_pod_gets_its_own_claim(cluster_state, tmp_path):
    cluster = start(cluster_state, "default,+GenericWorkload,+GangScheduling")
    apply(cluster, tmp_path)
    claims = cluster.store.list("ResourceClaim")
    assert sorted(c["metadata"]["generateName"] for c in claims) == ["worker-0-gpus-", "worker-1-gpus-"]
    # the API server drops the field while the gate is off (podgroup/strategy.go
    # dropDisabledDRAWorkloadResourceClaimsFields, v1.36.0)
    (group,) = cluster.store.list("PodGroup")
    assert "resourceClaims" not in group["spec"]
    assert all(p["status"]["phase"] == "Running" for p in cluster.store.list("Pod"))


# kubernetes v1.36.0 pkg/controller/resourceclaim/controller_test.go TestSyncHandler: clear-reserved-podgroup and
# dont-clear-reserved-podgroup-feature-disabled (testClaimReservedForPodGroup with the allocator's finalizer, no
# PodGroup left): the local cluster's garbage collection step stands for that claim's sync
@pytest.mark.parametrize("case, features, cleared", [
    ("clear-reserved-podgroup", "default,+GenericWorkload,+DRAWorkloadResourceClaims", True),
    ("dont-clear-reserved-podgroup-feature-disabled", "default,+GenericWorkload", False),
])
def test_a_reservation_for_a_pod_group_that_is_gone(case, features, cleared):
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
             "metadata": {"name": "test-pod-acme-resource", "namespace": "my-namespace",
                          "finalizers": ["resource.kubernetes.io/delete-protection"],
                          "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "test-pod", "uid": "uidpod1",
                                               "controller": True}]},
             "spec": {},
             "status": {"allocation": {"devices": {"results": []}},
                        "reservedFor": [{"apiGroup": "scheduling.k8s.io", "resource": "podgroups",
                                         "name": "test-podgroup", "uid": "uidpodgroup1"}]}}
    cluster = ManagedCluster([copy.deepcopy(claim)], features=features, kubernetes_version="1.36")
    ControlLoop._collect_garbage(None, cluster)  # type: ignore[arg-type]  # it reads nothing of the loop
    left = cluster.claims.get("my-namespace/test-pod-acme-resource")
    if cleared:  # unreserved and deallocated (the owning pod is gone too: the garbage collector then deletes it)
        assert left is None or not (left.get("status") or {}).get("allocation")
    else:
        assert left is not None
        assert left["status"] == claim["status"] and left["metadata"]["finalizers"] == claim["metadata"]["finalizers"]
