"""`--policy fragmentation`: Fragmentation Gradient Descent (Weng et al., USENIX ATC'23) adapted to DRA.

Target workload: the distribution of device demands among the pods of the input itself. Every non-terminal pod
that uses devices (claims or DRA-served extended resources) contributes one sample; samples with the same shape
(claim specs plus cpu/memory requests) form one workload class m with weight p_m = its share of the samples.
Pods without devices are left out: they cannot use a free GPU whatever we do, so they would add the same
amount to every choice.

Fragmentation of node n for class m: F_n(m) = the node's free device capacity when m cannot be placed on n
(cpu or memory short, or the allocator finds no devices for m's claims), else 0: free capacity the typical
workload cannot use is fragmented. F_n = Σ_m p_m·F_n(m). Capacity is counted in physical devices
(`ClusterState.free_capacity`): 1 per untouched device, and for a GPU split through counters (MIG) the free share of
its counter set, as FGD counts free GPU milli. (FGD also counts, for a class that fits, the partial GPUs too
small for it; that per-GPU test is left out: the allocator answers for the node as a whole.)

Score of a feasible node: F_n(before) − F_n(after placing the pod), i.e. the node whose fragmentation grows least
wins (a decrease is best); ties go to the node left with fewer free devices (best fit), then to the name.
Inside the chosen node, the first-fit devices and the binpack-steered alternative (devicechoice) are compared
the same way. Placing a pod on node n changes only F_n, so comparing the per-node deltas compares the
cluster-wide fragmentation after each choice, which is the FGD rule.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from . import resources as res
from .allocation import fits as fits_claims
from .devicechoice import claims_to_allocate, probe_claim, steered_alternative
from .dra import dra_served_extended, extended_claim, extended_resource_classes, prefilter
from .scoring import MAX_NODE_SCORE, Policy

if TYPE_CHECKING:  # pragma: no cover
    from .cyclestate import NodeEval, PodInfo
    from .scheduler import Scheduler
    from .state import ClusterState


@dataclass
class WorkloadClass:
    pod: dict[str, Any]
    claims: list[dict[str, Any]]
    requests: dict[str, int]
    weight: float
    pods: int
    claim_set: int = 0  # index of its claims among the workload's distinct claim sets (`_claim_sets`)


# (cluster generation, node, the node's device epoch, devices the caller added to the allocator's state)
DeviceState = tuple[int, str, int, tuple[tuple[str, str, str], ...]]


@dataclass
class FragmentationMemo:
    """What the fragmentation measure remembers about one cluster: its workload classes until the pods change
    (`workload_key`), and for each node device state whether each claim set fits (`device_verdicts`, indexed by
    `WorkloadClass.claim_set`; None: not asked yet)."""

    cluster: "ClusterState"
    workload_key: tuple[int, int] | None = None
    classes: list[WorkloadClass] = field(default_factory=list)
    device_verdicts: dict[DeviceState, list[bool | None]] = field(default_factory=dict)


def _probe_claims(scheduler: "Scheduler", pod: dict[str, Any]) -> list[dict[str, Any]] | None:
    cluster = scheduler.cluster
    state = prefilter(cluster, pod, extended_resource_classes(cluster))
    if state.reasons:
        return None
    claims = []
    for index, (_, _, claim) in enumerate(state.claims):
        claims.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {"name": f"probe-{index}", "namespace": "gpudra-probe", "uid": f"probe-{index}"},
                "spec": claim.get("spec") or {},
            }
        )
    served = dra_served_extended(state, None)
    if served:
        claims.append(extended_claim(pod, state, served))
    return claims


def workload_classes(scheduler: "Scheduler", memo: FragmentationMemo) -> list[WorkloadClass]:
    key = (scheduler.cluster.generation, len(scheduler.cluster.pods))  # new pods change the target workload
    if memo.workload_key == key:
        return memo.classes
    groups: dict[str, WorkloadClass] = {}
    samples = 0
    for pod in scheduler.cluster.pods.values():
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        claims = _probe_claims(scheduler, pod)
        if not claims:
            continue
        try:
            requests = res.pod_requests(pod)
        except res.ResourceError:
            continue
        shape = json.dumps([[c.get("spec") for c in claims], sorted(requests.items())], sort_keys=True, default=str)
        samples += 1
        if shape in groups:
            groups[shape].pods += 1
        else:
            groups[shape] = WorkloadClass(pod, claims, requests, 0.0, 1)
    for group in groups.values():
        group.weight = group.pods / samples
    classes = [groups[shape] for shape in sorted(groups)]
    claim_sets: dict[str, int] = {}
    for workload in classes:  # classes that differ only in cpu/memory ask the allocator one question
        specs = json.dumps([c.get("spec") for c in workload.claims], sort_keys=True, default=str)
        workload.claim_set = claim_sets.setdefault(specs, len(claim_sets))
    memo.workload_key, memo.classes = key, classes
    return classes


MAX_DEVICE_VERDICTS = 200_000


def node_fragmentation(
    scheduler: "Scheduler", memo: FragmentationMemo, node: str, free_capacity: float,
    extra_requests: dict[str, int] | None = None, extra_devices: tuple[tuple[str, str, str], ...] = (),
) -> float:
    """F_n under the allocator's current state (plus `extra_requests` of cpu/memory already committed and
    `extra_devices` the caller has added to the allocator's state)."""
    if free_capacity <= 0:
        return 0.0
    cluster = scheduler.cluster
    classes = workload_classes(scheduler, memo)
    allocatable = cluster.allocatable(node)
    free_cpu = free_memory = 0
    if allocatable is not None:
        usage, extra = cluster.usage[node], extra_requests or {}
        free_cpu = allocatable.get(res.CPU, 0) - usage.requested.get(res.CPU, 0) - extra.get(res.CPU, 0)
        free_memory = allocatable.get(res.MEMORY, 0) - usage.requested.get(res.MEMORY, 0) - extra.get(res.MEMORY, 0)
    # whether a claim set fits depends only on the node's devices: one answer per device state of the node
    verdicts = memo.device_verdicts
    state: DeviceState = (cluster.generation, node, cluster.device_epoch.get(node, 0), extra_devices)
    known = verdicts.get(state)
    if known is None:
        if len(verdicts) >= MAX_DEVICE_VERDICTS:
            verdicts.clear()
        known = verdicts[state] = [None] * (1 + max(w.claim_set for w in classes)) if classes else []
    allocator = cluster.allocator()
    node_obj = cluster.nodes[node]
    total = 0.0
    for workload in classes:  # in class order: the same sum, bit for bit
        requests = workload.requests
        wanted_cpu, wanted_memory = requests.get(res.CPU, 0), requests.get(res.MEMORY, 0)
        fits: bool | None = allocatable is None or (
            (not wanted_cpu or wanted_cpu <= free_cpu) and (not wanted_memory or wanted_memory <= free_memory)
        )
        if fits:
            fits = known[workload.claim_set]
            if fits is None:
                outcome = fits_claims(allocator, node_obj, workload.claims).outcome
                fits = outcome == "allocated"
                if outcome != "error":  # a time-out may go otherwise next time
                    known[workload.claim_set] = fits
        if not fits:
            total += workload.weight * free_capacity
    return total


def fragmentation_after(
    scheduler: "Scheduler", memo: FragmentationMemo, info: "PodInfo", node: str,
    allocations: list[dict[str, Any]] | None,
) -> float:
    cluster = scheduler.cluster
    devices = [
        (r.get("driver", ""), r.get("pool", ""), r.get("device", ""))
        for allocation in allocations or []
        for r in ((allocation or {}).get("devices") or {}).get("results") or []
        if not r.get("adminAccess")
    ]
    allocator = cluster.allocator()
    probe = probe_claim("candidate", devices) if devices else None
    if probe is not None:
        allocator.add_allocated_claim(probe)
    try:
        return node_fragmentation(scheduler, memo, node, cluster.free_capacity(node, devices), info.requests,
                                  tuple(sorted(set(devices))))
    finally:
        if probe is not None:
            allocator.remove_allocated_claim(probe)


class FragmentationPolicy(Policy):
    name = "fragmentation"

    def __init__(self) -> None:
        self._before: dict[str, tuple[int, int, float]] = {}  # node -> (generation, epoch, F_n)
        self._memo: FragmentationMemo | None = None

    def memo(self, scheduler: "Scheduler") -> FragmentationMemo:
        """The measure's memo for the scheduler's cluster (a fresh one for another cluster: generations and
        device epochs are per cluster)."""
        if self._memo is None or self._memo.cluster is not scheduler.cluster:
            self._memo = FragmentationMemo(scheduler.cluster)
            self._before.clear()
        return self._memo

    def fragmentation_before(self, scheduler: "Scheduler", node: str) -> float:
        memo = self.memo(scheduler)
        key = (scheduler.cluster.generation, scheduler.cluster.epoch.get(node, 0))
        cached = self._before.get(node)
        if cached is not None and cached[:2] == key:
            return cached[2]
        value = node_fragmentation(scheduler, memo, node, scheduler.cluster.free_capacity(node))
        self._before[node] = (*key, value)
        return value

    def node_parts(self, scheduler: "Scheduler", info: "PodInfo", evaluation: "NodeEval") -> Any:
        node = evaluation.result.node
        allocations = evaluation.result.allocations
        memo = self.memo(scheduler)
        delta = (fragmentation_after(scheduler, memo, info, node, allocations)
                 - self.fragmentation_before(scheduler, node))
        free_before = scheduler.cluster.free_node_groups(node)
        return delta, free_before, free_before - scheduler.cluster.groups_opened(node, allocations)

    def combine(self, scheduler: "Scheduler", info: "PodInfo", feasible: list["NodeEval"]) -> dict[str, float]:
        most_free = max((e.parts[1] for e in feasible), default=0)
        scores: dict[str, float] = {}
        for evaluation in feasible:
            delta, _, free_after = evaluation.parts
            best_fit = (MAX_NODE_SCORE - MAX_NODE_SCORE * free_after / most_free) if most_free else 0.0
            scores[evaluation.result.node] = round(-delta, 9) + best_fit * 1e-12
        return scores

    def choose_allocations(self, scheduler: "Scheduler", info: "PodInfo", chosen: "NodeEval") -> list[dict[str, Any]]:
        first_fit = list(chosen.result.allocations or [])
        if not claims_to_allocate(scheduler, info, chosen):
            return first_fit
        alternative = steered_alternative(scheduler, info, chosen, prefer_used_groups=True)
        if alternative is None or alternative == first_fit:
            return first_fit
        node, memo = chosen.result.node, self.memo(scheduler)
        if fragmentation_after(scheduler, memo, info, node, alternative) < fragmentation_after(
            scheduler, memo, info, node, first_fit
        ):
            return alternative
        return first_fit

