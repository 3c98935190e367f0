"""Node selectors, node affinity, taints and tolerations (the NodeAffinity, NodeUnschedulable and
TaintToleration plugins' matching rules).

Below both the scheduler and the workload controllers, as upstream's k8s.io/component-helpers/scheduling/corev1
(nodeaffinity, FindMatchingUntoleratedTaint) is shared by kube-scheduler and the DaemonSet controller."""

from __future__ import annotations

from typing import Any

from gpudra.allocator import nodematch as allocator_nodematch
from gpudra.api.goint import parse_canonical_int64
from gpudra.allocator.nodematch import NodeInfo
# re-exported: the workload controllers' label selectors match their expressions with the same rule
from gpudra.allocator.nodematch import requirement_matches as requirement_matches

NO_SCHEDULE = "NoSchedule"
NO_EXECUTE = "NoExecute"
PREFER_NO_SCHEDULE = "PreferNoSchedule"
UNSCHEDULABLE_TAINT_KEY = "node.kubernetes.io/unschedulable"


def term_matches(term: dict[str, Any], node: dict[str, Any]) -> bool:
    """A NodeSelectorTerm: all of its requirements hold. An empty term matches nothing (as upstream)."""
    return allocator_nodematch.term_matches(term, NodeInfo.of(node))


def node_selector_matches(selector: dict[str, Any] | None, node: dict[str, Any]) -> bool:
    """A v1.NodeSelector: any term matches. None means "every node"."""
    if selector is None:
        return True
    return any(term_matches(term, node) for term in selector.get("nodeSelectorTerms") or [])


def pod_matches_node_selector_and_affinity(pod: dict[str, Any], node: dict[str, Any]) -> bool:
    spec = pod.get("spec") or {}
    labels = (node.get("metadata") or {}).get("labels") or {}
    for key, value in (spec.get("nodeSelector") or {}).items():
        if labels.get(key) != value:
            return False
    affinity = ((spec.get("affinity") or {}).get("nodeAffinity") or {})
    required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if required is not None:
        terms = required.get("nodeSelectorTerms") or []
        if not any(term_matches(term, node) for term in terms):
            return False
    return True


def preferred_affinity_score(pod: dict[str, Any], node: dict[str, Any]) -> int:
    affinity = (((pod.get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {})
    score = 0
    for preferred in affinity.get("preferredDuringSchedulingIgnoredDuringExecution") or []:
        term = preferred.get("preference") or {}
        if term_matches(term, node):
            score += int(preferred.get("weight") or 0)
    return score


def toleration_tolerates(toleration: dict[str, Any], taint: dict[str, Any]) -> bool:
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    operator = toleration.get("operator") or "Equal"
    if key and key != taint.get("key"):
        return False
    if operator == "Exists":
        return True  # an empty key with Exists tolerates everything
    if not key:
        return False
    if operator == "Equal":
        return (toleration.get("value") or "") == (taint.get("value") or "")
    if operator in ("Lt", "Gt"):  # numeric toleration operators (1.35 alpha)
        have = parse_canonical_int64(taint.get("value") or "")
        want = parse_canonical_int64(toleration.get("value") or "")
        if have is None or want is None:
            return False
        return have < want if operator == "Lt" else have > want
    return False


def node_taints(node: dict[str, Any]) -> list[dict[str, Any]]:
    return list((node.get("spec") or {}).get("taints") or [])


def first_untolerated_taint(
    taints: list[dict[str, Any]], tolerations: list[dict[str, Any]], effects: tuple[str, ...] = (NO_SCHEDULE, NO_EXECUTE)
) -> dict[str, Any] | None:
    for taint in taints:
        if taint.get("effect") not in effects:
            continue
        if not any(toleration_tolerates(toleration, taint) for toleration in tolerations):
            return taint
    return None


def count_untolerated_prefer_no_schedule(taints: list[dict[str, Any]], tolerations: list[dict[str, Any]]) -> int:
    relevant = [t for t in tolerations if not t.get("effect") or t.get("effect") == PREFER_NO_SCHEDULE]
    return sum(
        1
        for taint in taints
        if taint.get("effect") == PREFER_NO_SCHEDULE and not any(toleration_tolerates(t, taint) for t in relevant)
    )


def node_is_unschedulable_for(node: dict[str, Any], pod: dict[str, Any]) -> bool:
    if not (node.get("spec") or {}).get("unschedulable"):
        return False
    taint = {"key": UNSCHEDULABLE_TAINT_KEY, "effect": NO_SCHEDULE}
    tolerations = (pod.get("spec") or {}).get("tolerations") or []
    return not any(toleration_tolerates(toleration, taint) for toleration in tolerations)
