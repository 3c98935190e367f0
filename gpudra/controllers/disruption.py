"""The disruption controller: each PodDisruptionBudget's status (how many of its pods are healthy, how many must
be, how many disruptions that allows), which preemption reads (gpudra.scheduler.preemption splits victims by
`status.disruptionsAllowed`).

Learned from kube-controller-manager's pkg/controller/disruption/disruption.go (kubernetes v1.36.0): `trySync`,
`getPodsForPdb` (the PDB's selector over its namespace's pods: a missing selector matches none, an empty one
every pod), `getExpectedPodCount` (an integer minAvailable: desiredHealthy is it and expectedPods the number of
pods; a percentage or maxUnavailable: expectedPods is the summed scale of the pods' controllers, `getExpectedScale`
with the ReplicaSet (not one a Deployment owns), Deployment and StatefulSet finders, percentages rounded up,
desiredHealthy = expectedPods - maxUnavailable at least 0), `countHealthyPods` (pods not being deleted and Ready)
and `updatePdbStatus` (disruptionsAllowed = currentHealthy - desiredHealthy, 0 when negative or no pod is
expected), and k8s.io/component-helpers apps/poddisruptionbudget `UpdateDisruptionAllowedCondition`.
status.disruptedPods is written only by the eviction API, which gpudra does not serve: it stays empty here.
"""

from __future__ import annotations

import math
import re
from typing import Any

from gpudra.allocator.nodematch import requirement_matches

CONDITION_TYPE = "DisruptionAllowed"


class ScaleUnknown(Exception):
    """A pod's controller has no scale the controller can find ("found no controllers for pod")."""


def selects(selector: Any, labels: dict[str, str]) -> bool:
    """metav1.LabelSelectorAsSelector over a pod's labels: None matches nothing, {} everything."""
    if not isinstance(selector, dict):
        return False
    if any(labels.get(key) != value for key, value in (selector.get("matchLabels") or {}).items()):
        return False
    return all(requirement_matches(r, labels) for r in selector.get("matchExpressions") or [])


def _scaled(value: Any, total: int) -> int:
    """intstr.GetScaledValueFromIntOrPercent with roundUp."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    match = re.fullmatch(r"(\d+)%", str(value))
    if match is None:
        raise ScaleUnknown(f"invalid value for IntOrString: {value!r}")
    return math.ceil(int(match.group(1)) * total / 100)


def _controller(obj: dict[str, Any]) -> dict[str, Any] | None:
    return next((r for r in (obj.get("metadata") or {}).get("ownerReferences") or []
                 if isinstance(r, dict) and r.get("controller")), None)


def _replicas(obj: dict[str, Any]) -> int:
    replicas = (obj.get("spec") or {}).get("replicas")
    return replicas if isinstance(replicas, int) else 1


def expected_scale(pods: list[dict[str, Any]], owners: dict[tuple[str, str, str], dict[str, Any]]) -> int:
    """getExpectedScale: the summed replicas of the controllers of `pods` (pods without one are unmanaged and
    not counted). `owners`: (kind, namespace, name) -> ReplicaSet, Deployment or StatefulSet."""
    scales: dict[str, int] = {}
    for pod in pods:
        ref = _controller(pod)
        if ref is None or ref.get("uid") in scales:
            continue
        namespace = (pod.get("metadata") or {}).get("namespace") or "default"
        owner = owners.get((str(ref.get("kind")), namespace, str(ref.get("name"))))
        if owner is None or (owner.get("metadata") or {}).get("uid") != ref.get("uid"):
            raise ScaleUnknown(f'found no controllers for pod "{(pod.get("metadata") or {}).get("name")}"')
        if ref.get("kind") == "ReplicaSet":
            parent = _controller(owner)
            if parent is not None and parent.get("kind") == "Deployment":
                deployment = owners.get(("Deployment", namespace, str(parent.get("name"))))
                if deployment is None or (deployment.get("metadata") or {}).get("uid") != parent.get("uid"):
                    raise ScaleUnknown(f'found no controllers for pod "{(pod.get("metadata") or {}).get("name")}"')
                owner = deployment
        scales[str((owner.get("metadata") or {}).get("uid"))] = _replicas(owner)
        scales.setdefault(str(ref.get("uid")), 0)  # this pod's controller is known now
    return sum(scales.values())


def _ready(pod: dict[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


def pdb_status(pdb: dict[str, Any], pods: list[dict[str, Any]],
               owners: dict[tuple[str, str, str], dict[str, Any]], now: str) -> dict[str, Any] | None:
    """The PDB's status as the controller writes it; None when the expected count cannot be known (upstream
    records CalculateExpectedPodCountFailed and leaves the status)."""
    meta = pdb.get("metadata") or {}
    spec = pdb.get("spec") or {}
    namespace = meta.get("namespace") or "default"
    selected = [p for p in pods if ((p.get("metadata") or {}).get("namespace") or "default") == namespace
                and selects(spec.get("selector"), (p.get("metadata") or {}).get("labels") or {})]
    expected = desired = 0
    try:
        if spec.get("maxUnavailable") is not None:
            expected = expected_scale(selected, owners)
            desired = max(expected - _scaled(spec["maxUnavailable"], expected), 0)
        elif isinstance(spec.get("minAvailable"), int):
            desired, expected = spec["minAvailable"], len(selected)
        elif spec.get("minAvailable") is not None:
            expected = expected_scale(selected, owners)
            desired = _scaled(spec["minAvailable"], expected)
    except ScaleUnknown:
        return None
    healthy = sum(1 for p in selected if not (p.get("metadata") or {}).get("deletionTimestamp") and _ready(p))
    allowed = healthy - desired
    if expected <= 0 or allowed <= 0:
        allowed = 0
    generation = meta.get("generation") or 0
    status, reason = ("True", "SufficientPods") if allowed > 0 else ("False", "InsufficientPods")
    old: dict[str, Any] = next((c for c in (pdb.get("status") or {}).get("conditions") or []
                                if c.get("type") == CONDITION_TYPE), {})
    # apimeta.SetStatusCondition: the transition time moves only when the status does
    changed_at = old["lastTransitionTime"] if old.get("status") == status and old.get("lastTransitionTime") else now
    condition: dict[str, Any] = {"type": CONDITION_TYPE, "status": status, "reason": reason, "message": "",
                                 "observedGeneration": generation, "lastTransitionTime": changed_at}
    return {"currentHealthy": healthy, "desiredHealthy": desired, "expectedPods": expected,
            "disruptionsAllowed": allowed, "observedGeneration": generation, "conditions": [condition]}
