"""Per-group ResourceClaims in the scheduler (DRAWorkloadResourceClaims, 1.36): the pod-group cases of
kube-scheduler's own table, and a gang sharing one group claim through `gpudra schedule`.

Source: kubernetes v1.36.0 pkg/scheduler/framework/plugins/dynamicresources/dynamicresources_test.go
TestPlugin, the cases podgroup-claim-reference(-feature-disabled-reserves-for-pod), podgroup-claim-template,
podgroup-with-resources(-feature-disabled-reserves-for-pod), postfilter-unreserve-podgroup,
postfilter-skip-unreserve-podgroup-feature-disabled, postfilter-skip-unreserve-podgroup-when-pods-active,
with its fixtures (pod my-pod uid 1234, PodGroup my-podgroup uid 5678, claim my-pod-my-resource, node worker,
driver some-driver, one device instance-1). gpudra's queue pass stands for the pod's next attempts, so
postfilter-unreserve-podgroup ends with the claim unreserved *and* deallocated (the next PostFilter's
"deallocation of ResourceClaim completed") and the pod placed afresh where a device is.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from gpudra.cli import cli
from gpudra.controllers import ManagedCluster
from gpudra.scheduler.scheduler import Scheduler

DATA = Path(__file__).parent.parent / "data" / "gang"
ON = "default,+GenericWorkload,+DRAWorkloadResourceClaims"
OFF = "default,+GenericWorkload"
GROUP_RESERVATION = {"apiGroup": "scheduling.k8s.io", "resource": "podgroups", "name": "my-podgroup", "uid": "5678"}
POD_RESERVATION = {"resource": "pods", "name": "my-pod", "uid": "1234"}
BY_NAME = {"name": "my-resource", "resourceClaimName": "my-pod-my-resource"}
BY_TEMPLATE = {"name": "my-resource", "resourceClaimTemplateName": "my-pod-my-resource"}

NODE = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "worker", "labels": {"kubernetes.io/hostname": "worker"}}}
SLICE = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": "worker-some-driver"},
         "spec": {"driver": "some-driver", "nodeName": "worker", "pool": {"name": "worker", "generation": 1,
                                                                           "resourceSliceCount": 1},
                  "devices": [{"name": "instance-1"}]}}
CLASS = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "my-resource-class"}}
ALLOCATION = {"devices": {"results": [{"driver": "some-driver", "pool": "worker", "device": "instance-1",
                                       "request": "req-1"}]},
              "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In",
                                                                       "values": ["worker"]}]}]}}
WRONG_TOPOLOGY = {"devices": ALLOCATION["devices"],
                  "nodeSelector": {"nodeSelectorTerms": [{"matchExpressions": [
                      {"key": "no-such-label", "operator": "In", "values": ["no-such-value"]}]}]}}


def pod(pod_claims: list[dict[str, Any]], name: str = "my-pod", uid: str = "1234", node: str | None = None,
        template_status: bool = False) -> dict[str, Any]:
    spec: dict[str, Any] = {"schedulingGroup": {"podGroupName": "my-podgroup"}, "resourceClaims": pod_claims,
                            "containers": [{"name": "c"}]}
    if node:
        spec["nodeName"] = node
    obj = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default", "uid": uid},
           "spec": spec}
    if template_status:
        obj["status"] = {"resourceClaimStatuses": [{"name": "my-resource", "resourceClaimName": "my-pod-my-resource"}]}
    return obj


def pod_group(group_claim: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "PodGroup",
            "metadata": {"name": "my-podgroup", "namespace": "default", "uid": "5678"},
            "spec": {"schedulingPolicy": {"basic": {}}, "resourceClaims": [group_claim]}}


def group_claim(allocation: dict[str, Any] | None = None, reserved: list[dict[str, Any]] | None = None
                ) -> dict[str, Any]:
    """pendingPodGroupClaim (owned by the PodGroup), allocated and reserved as asked."""
    claim: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": "my-pod-my-resource", "namespace": "default", "uid": "claim-uid",
                     "ownerReferences": [{"apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "PodGroup",
                                          "name": "my-podgroup", "uid": "5678", "controller": True}]},
        "spec": {"devices": {"requests": [{"name": "req-1", "exactly": {"deviceClassName": "my-resource-class"}}]}}}
    status: dict[str, Any] = {}
    if allocation is not None:
        status["allocation"] = copy.deepcopy(allocation)
    if reserved:
        status["reservedFor"] = reserved
    if status:
        claim["status"] = status
    return claim


def schedule(objects: list[dict[str, Any]], features: str) -> tuple[ManagedCluster, dict[str, Any]]:
    cluster = ManagedCluster([NODE, SLICE, CLASS, *objects], features=features, kubernetes_version="1.36")
    results = {r.pod: r for r in Scheduler(cluster).run()}
    return cluster, results


CASES = {
    # name: (pod claim, pod's template status, PodGroup entry, claim allocation, gates, reservedFor after)
    "podgroup-claim-reference-feature-disabled-reserves-for-pod": (BY_NAME, False, BY_NAME, ALLOCATION, OFF,
                                                                   [POD_RESERVATION]),
    "podgroup-claim-reference": (BY_NAME, False, BY_NAME, ALLOCATION, ON, [GROUP_RESERVATION]),
    "podgroup-claim-template": (BY_TEMPLATE, True, BY_TEMPLATE, ALLOCATION, ON, [GROUP_RESERVATION]),
    "podgroup-with-resources": (BY_NAME, False, BY_NAME, None, ON, [GROUP_RESERVATION]),
    "podgroup-with-resources-feature-disabled-reserves-for-pod": (BY_NAME, False, BY_NAME, None, OFF,
                                                                  [POD_RESERVATION]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_reserved_for_the_pod_group_upstream_cases(case: str) -> None:
    pod_claim, template_status, entry, allocation, features, reserved = CASES[case]
    cluster, results = schedule([pod_group(entry), group_claim(allocation),
                                 pod([pod_claim], template_status=template_status)], features)
    assert results["default/my-pod"].scheduled and results["default/my-pod"].node == "worker"
    claim = cluster.claims["default/my-pod-my-resource"]
    assert claim["status"]["reservedFor"] == reserved
    assert claim["status"]["allocation"]["devices"]["results"][0]["device"] == "instance-1"


def test_postfilter_unreserve_podgroup() -> None:
    """The group's claim, reserved for the group, is allocated where no node is: with no pod of the group
    scheduled, PostFilter takes the group out of reservedFor, the claim is deallocated and allocated afresh."""
    cluster, results = schedule([pod_group(BY_NAME), group_claim(WRONG_TOPOLOGY, [GROUP_RESERVATION]),
                                 pod([BY_NAME])], ON)
    assert results["default/my-pod"].scheduled
    claim = cluster.claims["default/my-pod-my-resource"]
    assert claim["status"]["allocation"]["nodeSelector"] == ALLOCATION["nodeSelector"]
    assert claim["status"]["reservedFor"] == [GROUP_RESERVATION]


@pytest.mark.parametrize("case, features, other_pod_scheduled", [
    ("postfilter-skip-unreserve-podgroup-feature-disabled", OFF, False),
    ("postfilter-skip-unreserve-podgroup-when-pods-active", ON, True),
])
def test_postfilter_keeps_the_group_reservation(case: str, features: str, other_pod_scheduled: bool) -> None:
    others = [pod([], name="my-pod-2", uid="my-pod-2", node="worker")] if other_pod_scheduled else []
    cluster, results = schedule([pod_group(BY_NAME), group_claim(WRONG_TOPOLOGY, [GROUP_RESERVATION]),
                                 pod([BY_NAME]), *others], features)
    assert not results["default/my-pod"].scheduled
    assert "resourceclaim not available on the node" in results["default/my-pod"].message()
    claim = cluster.claims["default/my-pod-my-resource"]
    assert claim["status"]["reservedFor"] == [GROUP_RESERVATION]
    assert claim["status"]["allocation"]["nodeSelector"] == WRONG_TOPOLOGY["nodeSelector"]


# ----- a gang of two pods sharing one claim of two NVLink-linked GPUs, through `gpudra schedule` ----------------
GANG = ["--kubernetes-version", "1.36", "--features", "default,+GenericWorkload,+GangScheduling"]


def _run(extra_gates: str) -> list[dict[str, Any]]:
    args = ["schedule", "-f", str(DATA / "group-claim-1.36.yaml"), *GANG[:3], GANG[3] + extra_gates, "-o", "yaml"]
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return [d for d in yaml.safe_load_all(result.stdout) if d]


def test_gang_shares_one_group_claim_allocated_once() -> None:
    docs = _run(",+DRAWorkloadResourceClaims")
    claims = [d for d in docs if d["kind"] == "ResourceClaim"]
    assert len(claims) == 1
    claim = claims[0]
    assert claim["metadata"]["generateName"] == "trainers-gpus-"
    assert claim["metadata"]["ownerReferences"] == [
        {"apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "PodGroup", "name": "trainers",
         "uid": next(d for d in docs if d["kind"] == "PodGroup")["metadata"]["uid"], "controller": True}]
    assert claim["metadata"]["annotations"] == {"resource.kubernetes.io/pod-claim-name": "gpus"}
    [reservation] = claim["status"]["reservedFor"]
    assert (reservation["apiGroup"], reservation["resource"], reservation["name"]) == (
        "scheduling.k8s.io", "podgroups", "trainers")
    devices = [(r["pool"], r["device"]) for r in claim["status"]["allocation"]["devices"]["results"]]
    assert devices in ([("node-a", "gpu-0"), ("node-a", "gpu-1")], [("node-a", "gpu-2"), ("node-a", "gpu-3")])
    group = next(d for d in docs if d["kind"] == "PodGroup")
    assert group["status"]["resourceClaimStatuses"] == [{"name": "gpus", "resourceClaimName": claim["metadata"]["name"]}]
    pods = [d for d in docs if d["kind"] == "Pod"]
    assert {p["spec"]["nodeName"] for p in pods} == {"node-a"}
    assert all(p["status"]["resourceClaimStatuses"] == [{"name": "gpus", "resourceClaimName": claim["metadata"]["name"]}]
               for p in pods)


def test_gate_off_gives_each_pod_its_own_claim() -> None:
    docs = _run("")
    claims = [d for d in docs if d["kind"] == "ResourceClaim"]
    assert sorted(c["metadata"]["generateName"] for c in claims) == ["worker-0-gpus-", "worker-1-gpus-"]
    assert all(c["status"]["reservedFor"][0]["resource"] == "pods" for c in claims)


def test_a_gang_that_misses_its_quorum_gives_the_group_claim_back() -> None:
    """A third pod joins the gang (minCount 3) but asks for more cpu than any node has: the two others are placed
    and the group's claim allocated for them, then Unreserve at the Permit timeout frees them, and with no pod of
    the group scheduled the group's claim is unreserved and deallocated."""
    docs = [d for d in yaml.safe_load_all((DATA / "group-claim-1.36.yaml").read_text()) if d]
    next(d for d in docs if d["kind"] == "PodGroup")["spec"]["schedulingPolicy"]["gang"]["minCount"] = 3
    big = copy.deepcopy(next(d for d in docs if d["kind"] == "Pod"))
    big["metadata"]["name"] = "worker-big"
    big["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "100"}
    cluster = ManagedCluster([*docs, big], features="default,+GenericWorkload,+GangScheduling,+DRAWorkloadResourceClaims",
                             kubernetes_version="1.36")
    results = Scheduler(cluster).run()
    assert len(results) == 3 and not any(r.scheduled for r in results)
    [claim] = cluster.claims.values()
    assert not (claim.get("status") or {}).get("allocation") and not (claim.get("status") or {}).get("reservedFor")
