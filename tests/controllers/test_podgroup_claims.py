"""The resourceclaim controller's PodGroup claims (DRAWorkloadResourceClaims, 1.36) against upstream's own table:
kubernetes v1.36.0 pkg/controller/resourceclaim/controller_test.go TestSyncHandler, its pod-group cases with their
fixtures (pod test-pod uid uidpod1, PodGroup test-podgroup uid uidpodgroup1 in my-namespace, pod claim
acme-resource from template my-template).

Upstream syncs one key (a pod, a PodGroup, a claim) per case; gpudra's ManagedCluster runs the controller over
every object at once, which is what the key's sync and the others' would leave. So the cases carried over are
those whose end state one sync decides: the same claims (compared by generateName, annotation, owner and
reservations: the suffix is random upstream and hashed in gpudra) and statuses. Left out: "skip create for Pod
with PodGroup after template exists" (a pod's sync alone never creates the group's claim; the PodGroup's sync,
which gpudra runs too, does: "create for PodGroup"), the cache and conflict cases (no informer cache, no API
server) and the metrics.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gpudra.controllers import ManagedCluster

NS = "my-namespace"
ON = "default,+GenericWorkload,+DRAWorkloadResourceClaims"
OFF = "default,+GenericWorkload"
POD_CLAIM = {"name": "acme-resource", "resourceClaimTemplateName": "my-template"}
TEMPLATE = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": "my-template", "namespace": NS}, "spec": {}}
GROUP_OWNER = {"apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "PodGroup", "name": "test-podgroup",
               "uid": "uidpodgroup1", "controller": True}
POD_OWNER = {"apiVersion": "v1", "kind": "Pod", "name": "test-pod", "uid": "uidpod1", "controller": True}


def pod(node: str | None = None, status_claim: str | None = None) -> dict[str, Any]:
    """testPodWithPodGroupResource (testPodWithPodGroupAndNodeName with a node and a status)."""
    obj: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod",
                           "metadata": {"name": "test-pod", "namespace": NS, "uid": "uidpod1"},
                           "spec": {"schedulingGroup": {"podGroupName": "test-podgroup"},
                                    "resourceClaims": [dict(POD_CLAIM)], "containers": [{"name": "c"}]}}
    if node:
        obj["spec"]["nodeName"] = node
    if status_claim:
        obj["status"] = {"resourceClaimStatuses": [{"name": "acme-resource", "resourceClaimName": status_claim}]}
    return obj


def group(status_claim: str | None = None, deleted: bool = False) -> dict[str, Any]:
    obj: dict[str, Any] = {"apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "PodGroup",
                           "metadata": {"name": "test-podgroup", "namespace": NS, "uid": "uidpodgroup1"},
                           "spec": {"resourceClaims": [dict(POD_CLAIM)]}}
    if status_claim:
        obj["status"] = {"resourceClaimStatuses": [{"name": "acme-resource", "resourceClaimName": status_claim}]}
    if deleted:
        obj["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return obj


def templated_claim(generate_name: str, owner: dict[str, Any], namespace: str = NS,
                    allocated: bool = False) -> dict[str, Any]:
    """makeTemplatedClaim: `<generateName>-1`, annotated with the pod claim name."""
    obj: dict[str, Any] = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                           "metadata": {"name": f"{generate_name}-1", "generateName": generate_name,
                                        "namespace": namespace,
                                        "annotations": {"resource.kubernetes.io/pod-claim-name": "acme-resource"},
                                        "ownerReferences": [dict(owner)]},
                           "spec": {}}
    if allocated:
        obj["status"] = {"allocation": {"devices": {"results": []}}}
    return obj


GROUP_CLAIM = templated_claim("test-podgroup-acme-resource-", GROUP_OWNER)  # templatedTestPodGroupClaim
POD_OWN_CLAIM = templated_claim("test-pod-acme-resource-", POD_OWNER)  # templatedTestClaim
OTHER_NAMESPACE = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                   "metadata": {"name": "test-pod-acme-resource", "namespace": "not-my-namespace"}, "spec": {}}
CONFLICTING = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
               "metadata": {"name": "test-podgroup-acme-resource", "namespace": NS}, "spec": {}}
GROUP_RESERVATION = {"apiGroup": "scheduling.k8s.io", "resource": "podgroups", "name": "test-podgroup",
                     "uid": "uidpodgroup1"}
POD_RESERVATION = {"resource": "pods", "name": "test-pod", "uid": "uidpod1"}


def shape(claim: dict[str, Any]) -> tuple[Any, ...]:
    """A claim as the table compares it: generateName (the suffix differs), namespace, annotation, owner,
    reservations."""
    meta = claim["metadata"]
    owners = meta.get("ownerReferences") or []
    return (meta.get("generateName") or meta["name"], meta["namespace"], meta.get("annotations"), owners,
            (claim.get("status") or {}).get("reservedFor"))


# name: (gates, objects, expected claims, expected pod status claim generateName, expected group status claim
# generateName); a status of None: no entry
CASES: dict[str, tuple[str, list[dict[str, Any]], list[dict[str, Any]], str | None, str | None]] = {
    "create for PodGroup": (ON, [group(), TEMPLATE], [GROUP_CLAIM], None, "test-podgroup-acme-resource-"),
    "skip create for Pod with PodGroup before template exists": (ON, [pod(), group()], [], None, None),
    "update Pod status with PodGroup claim": (
        ON, [pod(), group(), GROUP_CLAIM, TEMPLATE], [GROUP_CLAIM], "test-podgroup-acme-resource-",
        "test-podgroup-acme-resource-"),
    "create ResourceClaim for Pod with PodGroup claim when feature is disabled": (
        OFF, [pod(), group(), GROUP_CLAIM, TEMPLATE], [GROUP_CLAIM, POD_OWN_CLAIM], "test-pod-acme-resource-", None),
    "nop for PodGroup": (ON, [group(GROUP_CLAIM["metadata"]["name"]), TEMPLATE, GROUP_CLAIM], [GROUP_CLAIM], None,
                         "test-podgroup-acme-resource-"),
    "recreate for PodGroup": (ON, [group(GROUP_CLAIM["metadata"]["name"]), TEMPLATE], [GROUP_CLAIM], None,
                              "test-podgroup-acme-resource-"),
    "find-existing-claim-by-label-podgroup": (ON, [group(), GROUP_CLAIM], [GROUP_CLAIM], None,
                                              "test-podgroup-acme-resource-"),
    "no-such-podgroup": (ON, [], [], None, None),
    "podgroup-deleted": (ON, [group(deleted=True), TEMPLATE], [], None, None),
    "create-with-other-claim-podgroup": (ON, [group(), TEMPLATE, OTHER_NAMESPACE], [OTHER_NAMESPACE, GROUP_CLAIM],
                                         None, "test-podgroup-acme-resource-"),
    "wrong-claim-owner-podgroup": (ON, [group(), CONFLICTING], [CONFLICTING], None, None),
}


@pytest.mark.parametrize("case", list(CASES))
def test_sync_handler_pod_group_cases(case: str) -> None:
    gates, objects, expected, pod_status, group_status = CASES[case]
    cluster = ManagedCluster(copy.deepcopy(objects), features=gates, kubernetes_version="1.36")
    assert sorted(map(shape, cluster.claims.values()), key=repr) == sorted(map(shape, expected), key=repr)
    by_generate_name = {c["metadata"].get("generateName"): c["metadata"]["name"] for c in cluster.claims.values()}
    pods = list(cluster.pods.values())
    if pods:
        statuses = (pods[0].get("status") or {}).get("resourceClaimStatuses")
        assert statuses == ([{"name": "acme-resource", "resourceClaimName": by_generate_name[pod_status]}]
                            if pod_status else None)
    groups = [o for o in cluster.other_objects if o.get("kind") == "PodGroup"]
    if groups:
        statuses = (groups[0].get("status") or {}).get("resourceClaimStatuses")
        assert statuses == ([{"name": "acme-resource", "resourceClaimName": by_generate_name[group_status]}]
                            if group_status else None)


@pytest.mark.parametrize("case, gates, reservation", [
    ("add-reserved-podgroup", ON, GROUP_RESERVATION),
    ("add-reserved-podgroup-feature-disabled", OFF, POD_RESERVATION),
])
def test_a_bound_pods_claim_is_reserved_for_its_group(case: str, gates: str, reservation: dict[str, Any]) -> None:
    """testPodWithPodGroupAndNodeName: bound, its status naming its own allocated claim (templatedTestClaimAllocated)
    that equals the group's entry: reserved for the PodGroup (BindTo), or for the pod with the gate off."""
    claim = templated_claim("test-pod-acme-resource-", POD_OWNER, allocated=True)
    objects = [pod(node="worker", status_claim=claim["metadata"]["name"]), group(), TEMPLATE, claim]
    cluster = ManagedCluster(copy.deepcopy(objects), features=gates, kubernetes_version="1.36")
    assert cluster.claims[f"{NS}/{claim['metadata']['name']}"]["status"]["reservedFor"] == [reservation]
