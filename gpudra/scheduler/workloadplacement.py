"""Topology-aware workload scheduling (Kubernetes 1.36, gate TopologyAwareWorkloadScheduling, alpha; it needs
GenericWorkload): a gang whose PodGroup names `spec.schedulingConstraints.topology[0].key` is placed in one domain
of that node label, the best domain its pods fit.

What kube-scheduler does (kubernetes v1.36.0, read from the module source):
- pkg/scheduler/schedule_one_podgroup.go podGroupSchedulingPlacementAlgorithm: the placement generator splits the
  nodes into placements; for each, the pod group's pods are scheduled one by one (the default pod group algorithm)
  with only the placement's nodes in the snapshot, then reverted; a placement succeeds when the group's Permit
  would (GangScheduling: at least minCount placed). No success: "0/N placements are available, first placement
  status: …"; one: it wins; several: findBestPlacement scores them and the highest wins, ties broken by a random
  Randomizer.
- framework/plugins/topologyaware/topology_placement.go: one placement per value of the key's label (nodes without
  the label are in none); when pods of the group are already scheduled, only their domain (an error when they sit
  in two, on a node the snapshot lacks, or on one without the label). No placement at all is Unschedulable "no
  feasible placements found" (framework/runtime/framework.go RunPlacementGeneratePlugins).
- placement scores (apis/config/v1/default_plugins.go applyTopologyAwareWorkloadScheduling: PodGroupPodsCount with
  weight 1; NodeResourcesFit keeps its weight 1): framework/plugins/podgrouppodscount (scheduled + proposed pods,
  normalised to 0..100 by the highest) and noderesources fit.go ScorePlacement / resource_allocation.go
  scorePlacement (MostAllocated over the placement's nodes summed, the group's pods included: the fullest domain
  scores highest).

Where gpudra differs: the placement trials run without DefaultPreemption (gpudra's preemption evicts for real, and
upstream's nominate-and-wait path for pod groups is not modelled); the placements are tried in the order their
domains first appear in node-name order (upstream: map order), which only decides which one the "first placement
status" describes; groups with the `basic` policy are scheduled pod by pod, without placements.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from . import framework as fw
from . import resources as res
from .scoring import MAX_NODE_SCORE, most_allocated
from .ties import pick

if TYPE_CHECKING:  # pragma: no cover
    from .gangs import Gang
    from .scheduler import Scheduler

PLACEMENT_GENERATOR = "TopologyPlacementGenerator"
NO_PLACEMENTS = "no feasible placements found"
GROUP_UNSCHEDULABLE = "pod group is unschedulable"  # errPodGroupUnschedulable
DEFAULT_RESOURCES = ((res.CPU, 1), (res.MEMORY, 1))  # NodeResourcesFitArgs' default scoring resources
PODS_COUNT_WEIGHT = 1
FIT_WEIGHT = 1


class PlacementError(Exception):
    """An Error status of the placement generator: the pods of the group already scheduled say no one domain."""


@dataclass(frozen=True)
class Placement:
    name: str  # the domain: the label's value
    nodes: tuple[str, ...]


@dataclass(frozen=True)
class Trial:
    """One placement tried: where each pod of the group went (pods that fit nowhere in it are absent)."""

    placement: Placement
    assigned: dict[str, str]  # pod key -> node, in scheduling order
    fit: int = 0  # NodeResourcesFit's placement score of this assignment

    def succeeded(self, min_count: int, scheduled: int) -> bool:
        return scheduled + len(self.assigned) >= min_count


def generate(labels: Mapping[str, Mapping[str, str]], nodes: Sequence[str], key: str,
             scheduled_on: Mapping[str, str]) -> list[Placement]:
    """TopologyPlacement.GeneratePlacements: `labels` every node's labels (the snapshot), `nodes` the parent
    placement's nodes in order, `scheduled_on` pod -> node of the group's pods already scheduled."""
    required: str | None = None
    for pod, node in scheduled_on.items():
        if node not in labels:
            raise PlacementError(f"cannot determine domain for already scheduled pods: getting node for pod {pod}: "
                                 f'nodeinfo "{node}" not found')
        domain = labels[node].get(key)
        if domain is None:
            raise PlacementError(f"cannot determine domain for already scheduled pods: no topology domain found for "
                                 f"pod {pod}")
        if required is not None and domain != required:
            raise PlacementError(f"cannot determine domain for already scheduled pods: more than 1 domain found for "
                                 f"pod group: {required}, {domain}")
        required = domain
    by_domain: dict[str, list[str]] = {}
    for node in nodes:
        domain = labels.get(node, {}).get(key)
        if domain is not None and (required is None or domain == required):
            by_domain.setdefault(domain, []).append(node)
    return [Placement(domain, tuple(members)) for domain, members in by_domain.items()]


def pods_count_scores(scheduled: int, proposed: Sequence[int]) -> list[int]:
    """PodGroupPodsCount: ScorePlacement (scheduled + proposed pods of the group) and NormalizePlacementScore
    (x 100 / the highest, integer division); ValueError when no placement has any pod."""
    raw = [scheduled + count for count in proposed]
    return normalize_pods_count(raw)


def normalize_pods_count(scores: Sequence[int]) -> list[int]:
    highest = max(scores, default=0)
    if highest == 0:
        raise ValueError("no pods from pod group are assigned to any of the candidate placements")
    return [score * MAX_NODE_SCORE // highest for score in scores]


def fit_placement_score(group_requests: Sequence[Mapping[str, int]],
                        nodes: Sequence[tuple[Mapping[str, int], Mapping[str, int]]],
                        resources: Sequence[tuple[str, int]] = DEFAULT_RESOURCES) -> int:
    """NodeResourcesFit.ScorePlacement: MostAllocated over the placement's nodes taken together. `group_requests`:
    the requests of the group's pods proposed in the placement (cpu and memory with the scoring defaults for a
    container that sets none); `nodes`: (allocatable, requested by the pods already there) per node, cpu and
    memory requested with those defaults too. A scalar resource counts only while something has asked for it."""
    requested = [sum(pod.get(name, 0) for pod in group_requests) for name, _ in resources]
    allocatable = [0] * len(resources)
    allocated = [0] * len(resources)
    for node_allocatable, node_requested in nodes:
        for i, (name, _) in enumerate(resources):
            if requested[i] == 0 and res.is_extended(name):
                continue  # calculateNodeAllocatableRequest: nobody asks for it (so far)
            capacity = node_allocatable.get(name, 0)
            if capacity == 0:
                continue
            allocatable[i] += capacity
            allocated[i] += node_requested.get(name, 0)
            requested[i] += node_requested.get(name, 0)
    total = weights = 0
    for i, (_, weight) in enumerate(resources):
        if allocatable[i] == 0:
            continue
        total += most_allocated(requested[i], allocatable[i]) * weight
        weights += weight
    return total // weights if weights else 0


def best(trials: Sequence[Trial], scores: Sequence[int], scheduler: "Scheduler") -> Trial:
    """findBestPlacement: the highest total; equal totals as the scheduler breaks node ties (the first domain name,
    or at random: upstream draws a Randomizer per placement)."""
    order = list(range(len(trials)))
    return trials[pick(order, lambda i: scores[i], lambda i: trials[i].placement.name, scheduler.ties)]


# ----- the algorithm, on gpudra's scheduler ----------------------------------------------------------
def place_group(scheduler: "Scheduler", gang: "Gang", members: list[str]) -> tuple[list[fw.PodResult], bool]:
    """Schedule the gang's pending `members` (queue order) in the best domain of its topology key. Returns their
    results (placed ones bound and in `scheduler._gang_bindings`, for Permit) and whether a placement succeeded;
    when none did, every result says why and nothing is bound."""
    cluster = scheduler.cluster
    assert gang.topology_key is not None
    scheduled_on = {key: cluster.pods[key]["spec"]["nodeName"] for key in gang.members
                    if key in cluster.pods and (cluster.pods[key].get("spec") or {}).get("nodeName")}
    labels = {name: dict(((node.get("metadata") or {}).get("labels") or {})) for name, node in cluster.nodes.items()}
    try:
        placements = generate(labels, cluster.node_names(), gang.topology_key, scheduled_on)
    except PlacementError as exc:
        return [_failed(scheduler, key, str(exc), {"placements": []}, resolvable=False) for key in members], False
    if not placements:
        return [_failed(scheduler, key, NO_PLACEMENTS, {"placements": []}) for key in members], False
    # each placement's pods are reverted before the next is tried, but the last one's stay bound until the choice
    trials: list[Trial] = []
    last: list[fw.PodResult] = []
    for placement in placements:
        _unreserve(scheduler, last)
        trial, last = _trial(scheduler, placement, members)
        trials.append(trial)
    successful = [t for t in trials if t.succeeded(gang.min_count, len(scheduled_on))]
    if not successful:
        _unreserve(scheduler, last)
        tried = [(t.placement.name, len(t.assigned)) for t in trials]
        message = f"0/{len(placements)} placements are available, first placement status: {GROUP_UNSCHEDULABLE}"
        details = {"placements": tried, "placed": {}}
        return [_failed(scheduler, key, message, details) for key in members], False
    if len(successful) == 1:
        chosen = successful[0]
    else:
        proposed = [len(t.assigned) for t in successful]
        counts = pods_count_scores(len(scheduled_on), proposed)
        totals = [PODS_COUNT_WEIGHT * c + FIT_WEIGHT * t.fit for c, t in zip(counts, successful)]
        chosen = best(successful, totals, scheduler)
    if chosen is trials[-1]:
        return last, True  # bound as its trial left it
    _unreserve(scheduler, last)
    return _replay(scheduler, chosen, members), True


def _trial(scheduler: "Scheduler", placement: Placement, members: list[str]) -> tuple[Trial, list[fw.PodResult]]:
    """The pods scheduled one by one with only the placement's nodes (assumed: still bound), and the placement's
    fit score, read from its nodes as they were before."""
    cluster = scheduler.cluster
    nodes = []
    for name in placement.nodes:
        usage = cluster.usage[name]
        requested = dict(usage.requested)
        requested[res.CPU], requested[res.MEMORY] = usage.non_zero_cpu, usage.non_zero_memory
        nodes.append((cluster.allocatable(name) or {}, requested))
    results = _schedule(scheduler, members, lambda key: list(placement.nodes))
    assigned = {r.pod: str(r.node if r.binding is None else r.binding.node) for r in results
                if r.node is not None or r.binding is not None}
    fit = fit_placement_score([res.pod_request_totals(cluster.pods[key])[1] for key in assigned], nodes)
    return Trial(placement, assigned, fit), results


def _unreserve(scheduler: "Scheduler", results: list[fw.PodResult]) -> None:
    """Forget a trial: its placed pods unbound, their claims' allocations undone (last placed first)."""
    for result in reversed(results):
        if result.node is not None or result.binding is not None:
            scheduler.unreserve(result)


def _replay(scheduler: "Scheduler", chosen: Trial, members: list[str]) -> list[fw.PodResult]:
    """The chosen placement's pods scheduled again, each to the node its trial gave it (the cluster is as it was
    then, so each finds the same devices); a pod that fit nowhere in the placement is tried there again for its
    own reasons."""
    nodes = list(chosen.placement.nodes)
    return _schedule(scheduler, members, lambda key: [chosen.assigned[key]] if key in chosen.assigned else nodes)


def _schedule(scheduler: "Scheduler", members: list[str], nodes_for: Any) -> list[fw.PodResult]:
    preempt = scheduler.preempt
    scheduler.preempt = False
    try:
        results = []
        for key in members:
            scheduler.placement_nodes = nodes_for(key)
            scheduler._gang_bindings[key] = []
            results.append(scheduler.schedule_pod(key))
        return results
    finally:
        scheduler.placement_nodes = None
        scheduler.preempt = preempt


def _failed(scheduler: "Scheduler", key: str, message: str, details: dict[str, Any],
            resolvable: bool = True) -> fw.PodResult:
    """The pod's result when its group got no placement (an Error status of the generator: not resolvable)."""
    result = fw.PodResult(key, num_nodes=len(scheduler.cluster.node_names()))
    result.prefilter = [fw.Reason(fw.GANG_SCHEDULING, message, details, resolvable=resolvable)]
    scheduler.results[key] = result
    scheduler.cluster.mark_unschedulable(key, result.message())
    return result
