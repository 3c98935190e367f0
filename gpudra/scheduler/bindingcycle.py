"""The cycle's end for the chosen node: the allocations a deferred verdict left out, the policy's choice of devices,
Reserve and Bind (or assume the pod and wait at PreBind for its devices' binding conditions), and PreBind's poll
of those conditions on later passes.

kube-scheduler's binding cycle (pkg/scheduler/schedule_one.go's bindingCycle; DynamicResources' Reserve, PreBind
and Unreserve in pkg/scheduler/framework/plugins/dynamicresources/dynamicresources.go, v1.36.0), apart from how the
node was found (gpudra.scheduler.scheduler). What the cluster view records is gpudra.scheduler.transitions'.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from gpudra.api.objectmeta import key_of

from . import bindingconditions as binding
from . import framework as fw
from .cyclestate import NodeEval, PodInfo
from .dra import extended_claim, extended_claim_status
from .dra import filter_node as dra_filter_node

if TYPE_CHECKING:
    from .scheduler import Scheduler


def finish(scheduler: Scheduler, info: PodInfo, result: fw.PodResult, best: NodeEval,
           scores: Mapping[str, float]) -> fw.PodResult:
    """The chosen node `best` (`scores`: every scored node's): its deferred allocations searched, the policy's
    choice of devices, Reserve and Bind, and PreBind at once for a pod that waits there."""
    result.scores = scores
    if best.deferred:
        best = with_allocations(scheduler, info, best)
    allocations = scheduler.policy.choose_allocations(scheduler, info, best)
    result.claims = bind(scheduler, info, best, allocations)
    result.node = best.result.node
    if info.key in scheduler.cluster.binding_waits:
        return prebind(scheduler, result)
    return result


def prebind(scheduler: Scheduler, result: fw.PodResult) -> fw.PodResult:
    """DynamicResources PreBind for a pod assumed on its node: every binding condition True binds it; a True
    failure condition or the binding timeout is an error (Unreserve: `abandon_binding`); else it waits."""
    cluster = scheduler.cluster
    pod_key = result.pod
    node = cluster.binding_waits[pod_key]
    claims = [cluster.claims[key] for key in cluster.pod_claim_keys(cluster.pods[pod_key]) if key in cluster.claims]
    state = binding.pod_binding_state(claims, scheduler.clock(), scheduler.binding_timeout)
    result.node, result.binding, result.binding_error = None, None, None
    if state.state == binding.READY:
        result.node = cluster.finish_binding(pod_key)
    elif state.state == binding.WAITING:
        result.binding = fw.BindingWait(node, state.pending)
    else:
        cluster.abandon_binding(pod_key)
        result.binding_error = state.error(cluster.kubernetes_version)
    return result


def with_allocations(scheduler: Scheduler, info: PodInfo, deferred: NodeEval) -> NodeEval:
    """The chosen node's evaluation with the allocations its deferred verdict left out: the node's devices
    are as they were when it was judged (its epoch is current), so the search finds what it would have."""
    node_name = deferred.result.node
    cluster = scheduler.cluster
    # one search on one node: it gets a Filter timeout of its own rather than what is left of the pod's
    verdict = dra_filter_node(cluster, info.pod, info.dra, cluster.nodes[node_name], deferred.served, own_budget=True)
    if verdict.reasons or verdict.fatal or verdict.allocations is None:
        raise RuntimeError(f"internal error: node {node_name} was judged to fit pod {info.key}, but its search "
                           f"now says: {verdict.fatal or '; '.join(r.message for r in verdict.reasons)}")
    evaluation = NodeEval(fw.FilterResult(node_name, deferred.result.reasons, verdict.allocations),
                          deferred.epoch, deferred.served, verdict.extended_claim, deferred.first_available,
                          None, deferred.parts)
    return evaluation


def bind(scheduler: Scheduler, info: PodInfo, chosen: NodeEval, allocations: list[dict[str, Any]] | None) -> list[str]:
    """Bind the pod to the chosen node; returns its claim keys."""
    allocations = list(allocations or [])
    pairs = [(key, allocations[i]) for i, key in enumerate(info.dra.to_allocate)]  # bind copies
    special = None
    if chosen.extended_claim is not None:
        # the cached verdict may come from another pod of the same shape: name and owner are this pod's
        special = extended_claim(info.pod, info.dra, chosen.served)
        pairs.append((key_of(special), allocations[len(info.dra.to_allocate)]))
        info.pod.setdefault("status", {})["extendedResourceClaimStatus"] = extended_claim_status(
            info.dra, chosen.served
        )
    totals = None if info.reasons else (info.requests, info.non_zero)
    if info.key in scheduler._gang_bindings:  # what Unreserve must undo if the gang misses its quorum
        scheduler._gang_bindings[info.key] = ([key for key, _ in pairs], key_of(special) if special else None)
    if waits_at_prebind(scheduler, info, [allocation for _, allocation in pairs]):
        return scheduler.cluster.assume(info.key, chosen.result.node, pairs, special, totals,
                                        binding.format_time(scheduler.clock()))
    return scheduler.cluster.bind(info.key, chosen.result.node, pairs, special, totals)


def waits_at_prebind(scheduler: Scheduler, info: PodInfo, allocations: list[dict[str, Any]]) -> bool:
    """hasBindingConditions over the pod's claims as PreBind sees them: the new allocations and the claims
    allocated before (gates DRADeviceBindingConditions and DRAResourceClaimDeviceStatus)."""
    if not scheduler.cluster.features.device_binding_and_status:
        return False
    allocated = [scheduler.cluster.claims[key] for key in info.dra.allocated]
    return (any(r.get("bindingConditions") for a in allocations for r in (a.get("devices") or {}).get("results") or [])
            or any(binding.has_binding_conditions(claim) for claim in allocated))
