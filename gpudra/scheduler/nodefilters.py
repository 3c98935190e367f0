"""The Filter plugins that read the Node object and the node's counted requests: NodeUnschedulable, NodeName,
TaintToleration, NodeAffinity (`node_reasons`) and NodeResourcesFit (`fit_reasons`), with kube-scheduler's messages
(pkg/scheduler/framework/plugins/{nodeunschedulable,nodename,tainttoleration,nodeaffinity,noderesources}, v1.36.0).

Pure: they read a pod's `PodInfo` and one node, never the cluster, so the scheduling cycle can cache their verdicts
per node shape (gpudra.scheduler.scheduler) and explanations can ask for every reason at once.
"""

from __future__ import annotations

from typing import Any

from gpudra import schedulinghelpers as nodematch

from . import framework as fw
from . import resources as res
from .cyclestate import PodInfo
from .transitions import NodeUsage


def node_reasons(info: PodInfo, node_name: str, node: dict[str, Any], all_reasons: bool) -> list[fw.Reason]:
    """NodeUnschedulable, NodeName, TaintToleration and NodeAffinity, in that order; the first failing plugin
    ends the list unless `all_reasons`."""
    pod = info.pod
    reasons: list[fw.Reason] = []
    if nodematch.node_is_unschedulable_for(node, pod):
        reasons.append(fw.Reason(fw.NODE_UNSCHEDULABLE, "node(s) were unschedulable", resolvable=False))
        if not all_reasons:
            return reasons
    wanted = (pod.get("spec") or {}).get("nodeName")
    if wanted and wanted != node_name:
        reasons.append(
            fw.Reason(fw.NODE_NAME, "node(s) didn't match the requested node name", {"nodeName": wanted}, False)
        )
        if not all_reasons:
            return reasons
    taint = nodematch.first_untolerated_taint(nodematch.node_taints(node), info.tolerations)
    if taint is not None:
        reasons.append(
            fw.Reason(
                fw.TAINT_TOLERATION,
                f"node(s) had untolerated taint {{{taint.get('key', '')}: {taint.get('value', '')}}}",
                {"taint": taint},
                resolvable=False,
            )
        )
        if not all_reasons:
            return reasons
    if not nodematch.pod_matches_node_selector_and_affinity(pod, node):
        reasons.append(
            fw.Reason(fw.NODE_AFFINITY, "node(s) didn't match Pod's node affinity/selector", resolvable=False)
        )
    return reasons


def fit_reasons(
    info: PodInfo, usage: NodeUsage, allocatable: dict[str, int] | None, dra_served: set[str]
) -> list[fw.Reason]:
    """NodeResourcesFit: the pod slot, then every request in `info.fit_order` that the node's free allocatable
    (`usage`: what is counted on it) cannot hold; `dra_served`: extended resources DRA serves instead."""
    reasons: list[fw.Reason] = []
    if allocatable is not None and len(usage.pods) + 1 > allocatable.get(res.PODS, 0):
        reasons.append(
            fw.Reason(
                fw.NODE_RESOURCES_FIT,
                "Too many pods",
                {"resource": res.PODS, "requested": 1, "used": len(usage.pods), "capacity": allocatable[res.PODS]},
            )
        )
    for resource in info.fit_order:
        wanted = info.requests[resource]
        if wanted <= 0 or resource in dra_served or resource == res.PODS:
            continue
        extended = res.is_extended(resource)
        if allocatable is None and not extended:
            continue
        capacity = (allocatable or {}).get(resource, 0)
        used = usage.requested.get(resource, 0)
        if wanted > capacity - used:
            reasons.append(
                fw.Reason(
                    fw.NODE_RESOURCES_FIT,
                    f"Insufficient {resource}",
                    {"resource": resource, "requested": wanted, "used": used, "capacity": capacity},
                )
            )
    return reasons
