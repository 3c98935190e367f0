"""Pods, claim templates and the scheduling cycle (kube-scheduler 1.36 semantics for GPU nodes).

Public API (objects are plain dicts, as loaded from YAML)::

    from gpudra.controllers import ManagedCluster
    from gpudra.scheduler import Scheduler

    cluster = ManagedCluster(objects) # the scheduler's ClusterState with the controllers run on it: workloads
                                      # expanded into pods, template claims created (resourceclaim controller),
                                      # bound pods (spec.nodeName) counted and their claims reserved
    scheduler = Scheduler(cluster, policy="kube")   # kube | binpack | spread | fragmentation
    results = scheduler.run()         # list[PodResult] in queue order; cluster objects are updated in place

    cluster.pending_pods()            # queue order: priority desc, then creationTimestamp, then input order
    info = scheduler.pod_info("ns/p") # PodInfo: PreFilter (claims resolved, requests, pod-level `reasons`)
    ev = scheduler.filter_node(info, "node-1", all_reasons=True)  # NodeEval; ev.result is a FilterResult
    scheduler.schedule_pod("ns/p")    # one attempt (binds on success)
    cluster.end_pod("ns/p"); cluster.delete_pod("ns/p")           # unreserve, deallocate, delete template claims

Result types (`framework.py`):

- `Reason(plugin, message, details, resolvable, fatal)`: `message` is kube-scheduler's wording;
  `details` carries the data: NodeResourcesFit {resource, requested, used, capacity}; TaintToleration {taint};
  NodeName {nodeName}; DynamicResources {claim, podClaim | podClaims, request, class, nodeSelector, error,
  reservedFor, extendedResources}. Node verdicts are shared by pods of one shape, so per-node DRA reasons
  name claims by their pod claim names (plus `claim` for already-allocated claims, which are part of the shape).
- `FilterResult(node, reasons, allocations)`: `fits` when no reasons; `allocations` = one status.allocation
  per claim to allocate (the DRA-served extended-resource claim last).
- `PodResult(pod, node, scores, filtered, prefilter, error, num_nodes, claims, …, preempted, nominated_node)`:
  `preempted` names the pods DefaultPreemption deleted to make room (`preemption.py`; `Scheduler(preempt=False)`
  turns it off, `dra_preemption=True` frees claimed devices as KEP-5690 proposes, `graceful_preemption=True`
  only marks the victims for a caller that deletes them gracefully and keeps PostFilter's `post_filter` message,
  as the local cluster does); for an unschedulable pod
  `filtered` holds every node's FilterResult (for a scheduled pod it may be partial or empty); `scores` maps
  the feasible nodes that were scored to their total; `message()` is the one-line "0/N nodes are available: …"
  summary (`prefilter` reasons and `error` — a fatal allocator error such as a CEL error — come first).
- A pod whose devices carry binding conditions (KEP-5007, `bindingconditions.py`) waits at PreBind: its result's
  `binding` (BindingWait: node, pending conditions) is set and `node` is None, the pod counts on the node and names
  it in status.nominatedNodeName (`ClusterState.binding_waits`); a later `schedule_pod`/`run` binds it once every
  condition is True in the claim's status.devices, or sets `binding_error` (failure condition, binding timeout).
- Every Reason's `message` is kube-scheduler's wording, so `fit_error_message(n, results)` reproduces the
  summary for any subset of nodes.

Placement rules worth knowing: queue order is priority (spec.priority, else PriorityClass), then
creationTimestamp (pods without one last), then input order; pods with spec.nodeName are bound already
(counted, their claims reserved); pods with schedulingGates wait;
nodes without status.allocatable/capacity are unlimited for cpu/memory/pods; ties go to the first node name.
"""

from .state import ClusterState
from .transitions import ClusterError
from .framework import FilterResult, PodResult, Reason, fit_error_message
from .cyclestate import NodeEval, PodInfo
from .scheduler import Scheduler, num_feasible_nodes_to_find
from .policies import POLICIES

__all__ = [
    "ClusterError",
    "ClusterState",
    "FilterResult",
    "NodeEval",
    "PodInfo",
    "PodResult",
    "POLICIES",
    "Reason",
    "Scheduler",
    "fit_error_message",
    "num_feasible_nodes_to_find",
]
