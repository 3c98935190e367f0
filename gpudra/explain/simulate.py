"""The only place explain talks to the scheduler: build the cluster, replay the queue up to the target
pod, attempt it, and run the allocator on a node. Keeping this narrow lets the scheduler evolve."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from gpudra.copying import copy_object


@dataclass
class Run:
    cluster: Any  # gpudra.controllers.ManagedCluster after the replay
    pod: dict[str, Any] | None  # the target pod, None when it does not exist
    result: Any = None  # gpudra.scheduler.framework.PodResult of the target's attempt
    bound_node: str | None = None  # where the pod is (was_bound) or would be scheduled
    was_bound: bool = False
    # For a pod that does not fit: every filter's verdict per node (not only the first failing one),
    # and the claims the DynamicResources filter allocates there (pending claims + extended-resource claim).
    evaluations: dict[str, Any] | None = None
    claims_by_node: dict[str, list[dict[str, Any]]] | None = None
    scheduled_before: list[str] = field(default_factory=list)  # pods placed ahead of the target
    # (claim key, request) -> how users know it, for the claim the scheduler makes for extended resources
    request_labels: dict[tuple[str, str], str] = field(default_factory=dict)
    gang_note: str | None = None  # why the target's gang (gpudra.scheduler.gangs) was not bound, in its terms


def build_cluster(objects: list[dict[str, Any]], features: Any = None, kubernetes_version: str | None = None) -> Any:
    from gpudra.controllers import ManagedCluster

    return ManagedCluster(objects, features, kubernetes_version)


def _scheduler(cluster: Any, policy: str) -> Any:
    from gpudra.scheduler.scheduler import Scheduler

    return Scheduler(cluster, policy=policy)


Progress = Callable[[str, int, int], None]  # (what, done, total)


def run_until(objects: list[dict[str, Any]], pod_key: str, policy: str = "kube",
              progress: Progress | None = None, features: Any = None,
              kubernetes_version: str | None = None, evaluate: bool = True) -> Run:
    """Schedule pending pods in queue order until the target's turn, then attempt the target.

    A pod that is already bound is reported where it is; one that comes out scheduled is reported
    where it would go. The attempt's per-node verdicts are kept for the explanation (`evaluate`; checking
    whether a fix makes the pod fit needs only the attempt).
    """
    return run_on(build_cluster(objects, features, kubernetes_version), pod_key, policy, progress, evaluate)


def run_on(cluster: Any, pod_key: str, policy: str = "kube", progress: Progress | None = None,
           evaluate: bool = True) -> Run:
    """`run_until` on a cluster already built (nothing scheduled on it yet)."""
    pod = cluster.pods.get(pod_key)
    if pod is None:
        return Run(cluster, None)
    node = (pod.get("spec") or {}).get("nodeName")
    if node:
        return Run(cluster, pod, bound_node=node, was_bound=True)
    from gpudra.scheduler.queue import queue_run

    scheduler = _scheduler(cluster, policy)
    from gpudra.scheduler import gangs

    plan = gangs.plan(cluster)
    if pod_key in plan.member_of or pod_key in plan.waiting:
        return _run_gang(scheduler, pod_key, plan)
    ahead: list[str] = []
    queue = cluster.pending_pods()
    total = queue.index(pod_key) if pod_key in queue else len(queue)
    with queue_run():
        for done, key in enumerate(queue[:total], start=1):
            if scheduler.schedule_pod(key).scheduled:
                ahead.append(key)
            if progress is not None:
                progress("placing the pods ahead in the queue", done, total)
        result = scheduler.schedule_pod(pod_key)
        pod = cluster.pods.get(pod_key, pod)
        run = Run(cluster, pod, result, bound_node=result.node if result.scheduled else None, scheduled_before=ahead)
        if evaluate and not result.scheduled and not result.prefilter and not result.at_prebind:  # every filter's verdict on every node
            run.evaluations, run.claims_by_node = _evaluate_all(scheduler, pod_key)
            run.request_labels = _extended_labels(scheduler, pod_key)
    return run


def _run_gang(scheduler: Any, pod_key: str, plan: Any) -> Run:
    """A pod of a gang is decided with its whole group (Permit): the queue runs through, and a gang that missed
    its quorum is described in its own numbers (gpudra.explain.gangs), with the group's pods all unbound. A pod
    left over by a group that met its quorum is explained as any other pod, node by node."""
    from gpudra.scheduler.queue import queue_run

    cluster = scheduler.cluster
    scheduler.run()
    result = scheduler.results.get(pod_key)
    pod = cluster.pods[pod_key]
    run = Run(cluster, pod, result, bound_node=result.node if result is not None and result.scheduled else None)
    gang = plan.gangs.get(plan.member_of.get(pod_key, ""))
    if gang is None or run.bound_node is not None or result is None:
        return run
    from gpudra.scheduler.framework import GANG_SCHEDULING

    from .gangs import shortfall

    if result.gang or (result.prefilter and result.prefilter[0].plugin == GANG_SCHEDULING):
        run.gang_note = shortfall(scheduler, pod_key, gang).line()
    elif not result.prefilter:  # the group met its quorum without this pod: why this pod fits nowhere
        with queue_run():
            run.evaluations, run.claims_by_node = _evaluate_all(scheduler, pod_key)
            run.request_labels = _extended_labels(scheduler, pod_key)
    return run


def _extended_labels(scheduler: Any, pod_key: str) -> dict[tuple[str, str], str]:
    info = scheduler.pod_info(pod_key)
    if not info.dra.extended_claim_name:
        return {}
    claim = f"{pod_key.split('/', 1)[0]}/{info.dra.extended_claim_name}"
    return {(claim, r.request_name): f"extended resource '{r.resource}' of container '{r.container_name}'"
            for r in info.dra.extended}


def _evaluate_all(scheduler: Any, pod_key: str) -> tuple[dict[str, Any], dict[str, list[dict[str, Any]]]]:
    from gpudra.scheduler.dra import extended_claim

    cluster = scheduler.cluster
    info = scheduler.pod_info(pod_key)
    evaluations: dict[str, Any] = {}
    claims_by_node: dict[str, list[dict[str, Any]]] = {}
    pending = [cluster.claims[key] for key in info.dra.to_allocate if key in cluster.claims]
    for node_name in cluster.node_names():
        # `defer`: the DynamicResources verdicts the target's attempt just made are reused (the allocations of a
        # node where the claims fit are not needed to explain why the pod does not)
        evaluation = scheduler.filter_node(info, node_name, all_reasons=True, defer=scheduler.defer_allocations and not scheduler.policy.node_allocations)
        evaluations[node_name] = evaluation.result
        claims = list(pending)
        if evaluation.served:
            claims.append(extended_claim(info.pod, info.dra, evaluation.served))
        claims_by_node[node_name] = claims
    return evaluations, claims_by_node


def allocate(cluster: Any, node: dict[str, Any], claims: list[dict[str, Any]]) -> Any:
    """The allocator's verdict for `claims` on `node` against the cluster's current allocations."""
    from gpudra.scheduler.allocation import allocate as run

    return run(cluster.allocator(), node, claims)


def fits(cluster: Any, node: dict[str, Any], claims: list[dict[str, Any]]) -> Any:
    """`allocate`'s verdict where the allocations themselves are not needed: nodes in the same device state share
    one search, and "allocated" may come without allocations (Allocator.fits)."""
    from gpudra.scheduler.allocation import fits as run

    return run(cluster.allocator(), node, claims)


def snapshot(cluster: Any, copy: bool = True) -> list[dict[str, Any]]:
    """The cluster as objects at this moment (pods bound, claims allocated and reserved, template claims
    created), so a what-if starts from the state the target pod met rather than replaying the queue.
    `copy=False`: the cluster's own objects, for a caller that copies before it changes anything."""
    objects: list[dict[str, Any]] = []
    objects.extend(cluster.device_classes.values())
    objects.extend(cluster.slices)
    objects.extend(cluster.nodes.values())
    objects.extend(getattr(cluster, "priority_classes", {}).values())
    objects.extend(cluster.templates.values())
    objects.extend(cluster.claims.values())
    objects.extend(cluster.pods.values())  # workloads are already expanded into these pods
    objects.extend(getattr(cluster, "other_objects", []))
    return working_copy(objects) if copy else objects


# What a simulation reads but never changes: shared between the copies (on 2,000 nodes they are nearly all of
# the input, and explain makes a copy per verified fix).
READ_ONLY_KINDS = frozenset({"ResourceSlice", "Node", "DeviceClass"})


def working_copy(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A copy a simulation or a fix may change: pods, claims and the rest are copied, slices, nodes and
    classes shared (see READ_ONLY_KINDS)."""
    return [obj if isinstance(obj, dict) and obj.get("kind") in READ_ONLY_KINDS else copy_object(obj)
            for obj in objects]
