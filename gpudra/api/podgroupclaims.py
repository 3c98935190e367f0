"""Per-group ResourceClaims (KEP-5729, DRAWorkloadResourceClaims, 1.36 alpha; it needs GenericWorkload): which
claim a pod of a PodGroup uses, whom the claim is reserved for, and who may use it.

The rules, one copy for every consumer (resourceclaim controller, scheduler, kubelet stand-ins), as
k8s.io/dynamic-resource-allocation@v0.36.3 resourceclaim/resourceclaim.go states them:
- `bind_to` (BindTo): a pod claim that equals one of its PodGroup's `spec.resourceClaims` entries exactly (same
  name, same resourceClaimName, same resourceClaimTemplateName) is the group's claim, reserved for the PodGroup
  (`{apiGroup: scheduling.k8s.io, resource: podgroups, name, uid}`); any other is the pod's own (`resource: pods`).
- `is_reserved_for_pod` (IsReservedForPod): the pod's uid is in reservedFor, or (gate on) a podgroups entry names
  the pod's PodGroup.
- `is_for_pod` (IsForPod): a claim from a template must be controlled by the pod or (gate on) by a
  scheduling.k8s.io PodGroup of the pod's group name.
- `name_from_pod_group` (NameFromPodGroup): the group's claim name, from resourceClaimName or the PodGroup's
  `status.resourceClaimStatuses`.
Every function works on the objects as dicts and is pure.
"""

from __future__ import annotations

import functools
from typing import Any

from gpudra.errors import GpudraError

GATE = "DRAWorkloadResourceClaims"
SCHEDULING_GROUP = "scheduling.k8s.io"
POD_GROUPS = "podgroups"
CLAIM_NOT_CREATED = "ResourceClaim not created yet"  # resourceclaim.ErrClaimNotFound
API_UNSUPPORTED = "none of the supported fields are set"  # resourceclaim.ErrAPIUnsupported


class PodGroupClaimError(GpudraError, ValueError):
    pass


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _meta(obj: dict[str, Any]) -> dict[str, Any]:
    return _dict(obj.get("metadata"))


@functools.lru_cache(maxsize=64)  # asked for every claim the scheduler looks at; Features is frozen (hashable)
def workload_claims_enabled(version: str, features: Any = None) -> bool:
    """DRAWorkloadResourceClaims and GenericWorkload both on for `version` (features: gpudra.allocator.Features,
    else the release's defaults). Before 1.36 the gate does not exist: off."""
    from gpudra.versions import gate_state

    from .gates import gate_on

    if gate_state(GATE, version).stage is None:
        return False  # a release without the gate: a feature list that names it changes nothing
    return gate_on(GATE, version, features) and gate_on("GenericWorkload", version, features)


def pod_group_name(pod: dict[str, Any]) -> str | None:
    """`spec.schedulingGroup.podGroupName`, or None."""
    name = _dict(_dict(pod.get("spec")).get("schedulingGroup")).get("podGroupName")
    return name if isinstance(name, str) and name else None


def is_pod_group(obj: dict[str, Any]) -> bool:
    return obj.get("kind") == "PodGroup" and str(obj.get("apiVersion") or "").startswith(SCHEDULING_GROUP + "/")


def group_consumer(pod_group: dict[str, Any]) -> dict[str, Any]:
    """The ResourceClaimConsumerReference that reserves a claim for the PodGroup."""
    meta = _meta(pod_group)
    return {"apiGroup": SCHEDULING_GROUP, "resource": POD_GROUPS, "name": meta.get("name"), "uid": meta.get("uid")}


def pod_consumer(pod: dict[str, Any]) -> dict[str, Any]:
    meta = _meta(pod)
    return {"resource": "pods", "name": meta.get("name"), "uid": meta.get("uid")}


def is_group_consumer(entry: dict[str, Any]) -> bool:
    return entry.get("apiGroup") == SCHEDULING_GROUP and entry.get("resource") == POD_GROUPS


def _supported(claim_ref: dict[str, Any]) -> bool:
    return bool(claim_ref.get("resourceClaimName") or claim_ref.get("resourceClaimTemplateName"))


def group_claim_for(pod: dict[str, Any], pod_group: dict[str, Any] | None,
                    pod_claim: dict[str, Any]) -> dict[str, Any] | None:
    """The PodGroup's `spec.resourceClaims` entry that `pod_claim` stands for (BindTo's exact match), or None when
    the claim is the pod's own. PodGroupClaimError as BindTo errs (an unsupported entry, a pod of another group)."""
    namespace, name = _meta(pod).get("namespace") or "default", _meta(pod).get("name")
    if not _supported(pod_claim):
        raise PodGroupClaimError(f"Pod {namespace}/{name} claim {pod_claim.get('name')}: {API_UNSUPPORTED}")
    if pod_group is None:
        return None
    group_name = pod_group_name(pod)
    group_meta = _meta(pod_group)
    group_namespace = group_meta.get("namespace") or "default"
    if group_name is None:
        raise PodGroupClaimError(f"Pod {namespace}/{name} does not belong to a PodGroup")
    if namespace != group_namespace or group_name != group_meta.get("name"):
        raise PodGroupClaimError(f"Pod {namespace}/{name} belongs to PodGroup {namespace}/{group_name}, not "
                                 f"PodGroup {group_namespace}/{group_meta.get('name')}")
    for group_claim in _dict(pod_group.get("spec")).get("resourceClaims") or []:
        group_claim = _dict(group_claim)
        if not _supported(group_claim):
            raise PodGroupClaimError(f"PodGroup {group_namespace}/{group_meta.get('name')} claim "
                                     f"{group_claim.get('name')}: {API_UNSUPPORTED}")
        if all(group_claim.get(field) == pod_claim.get(field)
               for field in ("name", "resourceClaimName", "resourceClaimTemplateName")):
            return group_claim
    return None


def bind_to(pod: dict[str, Any], pod_group: dict[str, Any] | None, pod_claim: dict[str, Any]) -> dict[str, Any]:
    """The reservedFor entry for the pod's use of `pod_claim`: its PodGroup's, or the pod's own."""
    if pod_group is not None and group_claim_for(pod, pod_group, pod_claim) is not None:
        return group_consumer(pod_group)
    group_claim_for(pod, None, pod_claim)  # raises for an entry that names nothing
    return pod_consumer(pod)


def is_reserved_for_pod(pod: dict[str, Any], claim: dict[str, Any], accept_group: bool) -> bool:
    uid = _meta(pod).get("uid")
    group = pod_group_name(pod)
    for entry in _dict(claim.get("status")).get("reservedFor") or []:
        entry = _dict(entry)
        if entry.get("uid") == uid:
            return True
        if accept_group and group is not None and is_group_consumer(entry) and entry.get("name") == group:
            return True
    return False


def _controller(obj: dict[str, Any]) -> dict[str, Any] | None:
    return next((_dict(ref) for ref in _meta(obj).get("ownerReferences") or [] if _dict(ref).get("controller")),
                None)


def is_for_pod(pod: dict[str, Any], claim: dict[str, Any], accept_group: bool) -> str | None:
    """Why a claim from a template may not serve the pod (IsForPod), or None."""
    claim_ns, claim_name = _meta(claim).get("namespace") or "default", _meta(claim).get("name")
    pod_ns, pod_name = _meta(pod).get("namespace") or "default", _meta(pod).get("name")
    if claim_ns != pod_ns:
        return f"ResourceClaim {claim_ns}/{claim_name} is not in the same namespace as Pod {pod_ns}/{pod_name}"
    controller = _controller(claim)
    if controller is not None and controller.get("uid") == _meta(pod).get("uid"):
        return None
    if accept_group:
        group = pod_group_name(pod)
        if (group is not None and controller is not None and controller.get("name") == group
                and controller.get("kind") == "PodGroup"
                and str(controller.get("apiVersion") or "").startswith(SCHEDULING_GROUP + "/")):
            return None
        return (f"ResourceClaim {claim_ns}/{claim_name} was not created for Pod {pod_ns}/{pod_name} "
                f"(neither Pod nor PodGroup {group or ''} is the owner)")
    return f"ResourceClaim {claim_ns}/{claim_name} was not created for Pod {pod_ns}/{pod_name} (Pod is not owner)"


def is_for_pod_group(pod_group: dict[str, Any], claim: dict[str, Any]) -> str | None:
    claim_ns, claim_name = _meta(claim).get("namespace") or "default", _meta(claim).get("name")
    group_ns, group_name = _meta(pod_group).get("namespace") or "default", _meta(pod_group).get("name")
    if claim_ns != group_ns:
        return (f"ResourceClaim {claim_ns}/{claim_name} is not in the same namespace as PodGroup "
                f"{group_ns}/{group_name}")
    controller = _controller(claim)
    if controller is None or controller.get("uid") != _meta(pod_group).get("uid"):
        return (f"ResourceClaim {claim_ns}/{claim_name} was not created for PodGroup {group_ns}/{group_name} "
                "(PodGroup is not owner)")
    return None


def name_from_pod_group(pod_group: dict[str, Any], group_claim: dict[str, Any]) -> tuple[str | None, bool]:
    """(claim name or None for "no claim needed", whether the owner must be checked); PodGroupClaimError when the
    claim is not created yet (CLAIM_NOT_CREATED) or the entry names nothing."""
    group_ns, group_name = _meta(pod_group).get("namespace") or "default", _meta(pod_group).get("name")
    if group_claim.get("resourceClaimName"):
        return str(group_claim["resourceClaimName"]), False
    if group_claim.get("resourceClaimTemplateName"):
        for status in _dict(pod_group.get("status")).get("resourceClaimStatuses") or []:
            if _dict(status).get("name") == group_claim.get("name"):
                name = _dict(status).get("resourceClaimName")
                return (str(name) if name else None), True
        raise PodGroupClaimError(f"PodGroup {group_ns}/{group_name}: {CLAIM_NOT_CREATED}")
    raise PodGroupClaimError(f"PodGroup {group_ns}/{group_name}, spec.resourceClaim {group_claim.get('name')}: "
                             f"{API_UNSUPPORTED}")


def find_pod_group(objects: Any, pod: dict[str, Any]) -> dict[str, Any] | None:
    """The pod's PodGroup among `objects` (same namespace, `spec.schedulingGroup.podGroupName`), or None."""
    group = pod_group_name(pod)
    if group is None:
        return None
    namespace = _meta(pod).get("namespace") or "default"
    for obj in objects:
        if (isinstance(obj, dict) and is_pod_group(obj) and _meta(obj).get("name") == group
                and (_meta(obj).get("namespace") or "default") == namespace):
            return obj
    return None
