"""The scheduler's side of per-group ResourceClaims (DRAWorkloadResourceClaims, 1.36 alpha, + GenericWorkload).

As kubernetes v1.36.0 pkg/scheduler/framework/plugins/dynamicresources/dynamicresources.go treats them:
- a pod claim that is its PodGroup's claim (gpudra.api.podgroupclaims.bind_to) is reserved for the PodGroup
  (podResourceClaimBindings), not for the pod, and is allocated once: the group's next pod finds it allocated
  and reserved for its group, and goes where the allocation is available;
- a claim from a template may be controlled by the pod's PodGroup (IsForPod with acceptPodGroupOwner);
- a gang whose pods all failed gives its group claims back: PostFilter's unreservePodGroupClaims takes the
  PodGroup out of reservedFor once no pod of the group is scheduled ("ResourceClaim unreserved for PodGroup"),
  and the allocation, reserved for nobody, is then deallocated.
Every answer is the pod's own (per-pod claims) while the gates are off.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpudra.api.objectmeta import name_of, namespace_of
from gpudra.api.podgroupclaims import (PodGroupClaimError, bind_to, find_pod_group, is_for_pod, is_group_consumer,
                                       is_reserved_for_pod, pod_consumer, pod_group_name, workload_claims_enabled)

if TYPE_CHECKING:  # pragma: no cover
    from .state import ClusterState

UNRESERVED_FOR_POD_GROUP = "ResourceClaim unreserved for PodGroup"


def enabled(cluster: "ClusterState") -> bool:
    return workload_claims_enabled(cluster.kubernetes_version, cluster.features)


def pod_group_of(cluster: "ClusterState", pod: dict[str, Any]) -> dict[str, Any] | None:
    """The pod's PodGroup object while the gates are on (getPodGroup), else None."""
    return find_pod_group(cluster.other_objects, pod) if enabled(cluster) else None


def consumer(cluster: "ClusterState", pod: dict[str, Any], claim: dict[str, Any]) -> dict[str, Any]:
    """The reservedFor entry the scheduler writes for the pod's use of `claim`: its PodGroup's for the group's
    claim, else the pod's own."""
    group = pod_group_of(cluster, pod)
    if group is not None:
        statuses = {entry.get("name"): entry.get("resourceClaimName")
                    for entry in (pod.get("status") or {}).get("resourceClaimStatuses") or []}
        for pod_claim in (pod.get("spec") or {}).get("resourceClaims") or []:
            resolved = pod_claim.get("resourceClaimName") or statuses.get(pod_claim.get("name"))
            if resolved != name_of(claim):
                continue
            try:
                return bind_to(pod, group, pod_claim)
            except PodGroupClaimError:
                break
    return pod_consumer(pod)


def reserved_for_pod(cluster: "ClusterState", pod: dict[str, Any], claim: dict[str, Any]) -> bool:
    return is_reserved_for_pod(pod, claim, enabled(cluster))


def owned_by_pod_group(cluster: "ClusterState", pod: dict[str, Any], claim: dict[str, Any]) -> bool:
    """A claim from a template that the pod's PodGroup controls serves the pod (gates on)."""
    return enabled(cluster) and is_for_pod(pod, claim, True) is None


def _group_still_scheduled(cluster: "ClusterState", pod: dict[str, Any]) -> bool:
    """Whether another pod of the pod's group is bound or waits at PreBind (PodGroupState.ScheduledPodsCount)."""
    group, namespace, uid = pod_group_name(pod), namespace_of(pod), (pod.get("metadata") or {}).get("uid")
    for key, other in cluster.pods.items():
        if ((other.get("metadata") or {}).get("uid") != uid and pod_group_name(other) == group
                and namespace_of(other) == namespace
                and ((other.get("spec") or {}).get("nodeName") or key in cluster.binding_waits)):
            return True
    return False


def unreserve_for_group(cluster: "ClusterState", pod: dict[str, Any], claim: dict[str, Any]) -> bool:
    """unreservePodGroupClaims: take the pod's PodGroup out of the claim's reservedFor when no pod of the group is
    scheduled any more. Whether it did."""
    group = pod_group_name(pod)
    entries = list((claim.get("status") or {}).get("reservedFor") or [])
    remaining = [e for e in entries if not (is_group_consumer(e) and e.get("name") == group)]
    if not enabled(cluster) or group is None or len(remaining) == len(entries) or _group_still_scheduled(cluster, pod):
        return False
    if remaining:
        claim["status"]["reservedFor"] = remaining
    else:
        claim["status"].pop("reservedFor", None)
    return True
