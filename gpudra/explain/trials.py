"""Verifying a fix candidate: the cluster as the target met it, changed by the candidate, and the target attempted
again. Two ways, the same answers (tests/explain/test_explain_shared_work.py): a trial of the snapshot's objects built into
a new cluster (`Trial`: copied only where a run or the candidate writes), or a fork of the replayed cluster changed
by its own transitions (`release_on_fork`, and the request edits of gpudra.explain.fixes), which spares building a
cluster of thousands of objects per candidate.
"""

from __future__ import annotations

from typing import Any

from gpudra.explain import simulate
from gpudra.explain.model import Explanation
from gpudra.api.objectmeta import key_of


def find_object(objects: list[dict[str, Any]], kind: str, key: str) -> dict[str, Any] | None:
    """The object, for a candidate to change: in a `Trial` a shared object is first replaced by a copy of its own."""
    for position, obj in enumerate(objects):
        if isinstance(obj, dict) and obj.get("kind") == kind and key_of(obj) == key:
            if isinstance(objects, Trial) and id(obj) not in objects.own:
                obj = objects[position] = simulate.copy_object(obj)
                objects.own.add(id(obj))
            return obj
    return None


class Trial(list):
    """The snapshot for one candidate, copied only where it can change: the objects a simulation writes (see
    `written_by_a_run`) are copies, the rest are the snapshot's own objects, shared by every trial; `find_object` copies
    what a candidate changes. Copying 2,000 pods and claims per candidate would cost more than verifying it."""

    def __init__(self, base: list[dict[str, Any]], written: set[int]):
        super().__init__(simulate.copy_object(obj) if id(obj) in written else obj for obj in base)
        self.own = {id(obj) for obj, old in zip(self, base) if obj is not old}


def written_by_a_run(cluster: Any) -> set[int]:
    """Ids of the objects of `simulate.snapshot(cluster)` that replaying the queue up to the target and attempting
    it may write (see written_keys)."""
    pods, claims = written_keys(cluster)
    return {id(cluster.pods[key]) for key in pods} | {id(cluster.claims[key]) for key in claims}


def written_keys(cluster: Any) -> tuple[list[str], list[str]]:
    """(pod keys, claim keys) a run may write: pods that are not bound (the queue: status, nodeName) or have
    finished (their claims are released), and every claim such a pod uses (allocation, reservedFor, finalizers).
    Bound pods, their claims and the rest are only read (Cluster.apply finds namespaces, uids, template claims and
    reservations in place)."""
    pods: list[str] = []
    claims: list[str] = []
    for key, pod in cluster.pods.items():
        if (pod.get("spec") or {}).get("nodeName") and (pod.get("status") or {}).get("phase") not in (
                "Succeeded", "Failed"):
            continue
        pods.append(key)
        claims.extend(claim_key for claim_key in cluster.pod_claim_keys(pod) if claim_key in cluster.claims)
    return pods, claims


def fits_with_change(objects: list[dict[str, Any]], explanation: Explanation, policy: str, features: Any = None,
          kubernetes_version: str | None = None, released: dict[str, Any] | None = None) -> str | None:
    """The node the target would go to with the candidate's change, or None. `released`: the change of a
    release-claim candidate, for `release_cannot_help` to answer without attempting the pod on every node."""
    if explanation.kind == "Pod":
        try:
            cluster = simulate.build_cluster(objects, features, kubernetes_version)
            if released is not None and release_cannot_help(cluster, explanation, released, policy):
                return None
        except (ValueError, KeyError):  # a candidate can produce input the scheduler rejects: not a fix
            return None
        return attempt_target(cluster, explanation, policy)
    cluster = simulate.build_cluster(objects, features, kubernetes_version)
    claim = cluster.claims.get(f"{explanation.namespace}/{explanation.name}")
    if claim is None:
        return None
    for node_name in cluster.node_names():
        if simulate.fits(cluster, cluster.nodes[node_name], [claim]).outcome == "allocated":
            return node_name
    return None


def attempt_target(cluster: Any, explanation: Explanation, policy: str) -> str | None:
    """Where the target pod goes on `cluster` (pods ahead of it in the queue first), or None."""
    try:
        run = simulate.run_on(cluster, f"{explanation.namespace}/{explanation.name}", policy, evaluate=False)
    except (ValueError, KeyError):  # a candidate can produce input the scheduler rejects: not a fix
        return None
    return run.bound_node if run.pod is not None and not run.was_bound else None


def release_cannot_help(cluster: Any, explanation: Explanation, released: dict[str, Any], policy: str) -> bool:
    """True when releasing a claim (and deleting its pods) provably leaves the target unschedulable, judged on the
    nodes it changes alone: those that see a pool of the claim's devices and those its pods ran on. Every other
    node's verdict depends on nothing that changed (the scheduler's per-node epochs rest on the same fact), and in
    the explanation no node fit. Only when the trial attempts the target next (no pending pod ahead is retried
    first) and nothing else can change the outcome: no timed-out or failed search, none of the target's claims
    released or already allocated (PostFilter could deallocate it and try again). False: attempt it in full."""
    from gpudra.allocator import TIMED_OUT
    from gpudra.scheduler.scheduler import Scheduler

    run = explanation.context
    if run is None or run.pod is None or run.evaluations is None or run.result is None or run.result.error:
        return False
    if any(result.fits or any(r.message == TIMED_OUT for r in result.reasons) for result in run.evaluations.values()):
        return False
    pod_key = f"{explanation.namespace}/{explanation.name}"
    if released.get("claim") in run.cluster.pod_claim_keys(run.pod) or cluster.pending_pods()[:1] != [pod_key]:
        return False
    scheduler = Scheduler(cluster, policy=policy)
    info = scheduler.pod_info(pod_key)
    if info.reasons or info.dra.allocated or (info.pod.get("spec") or {}).get("schedulingGates"):
        return False
    changed: set[str] = set()
    for key in released.get("pods", []):
        node_name = ((run.cluster.pods.get(key) or {}).get("spec") or {}).get("nodeName")
        if node_name:
            changed.add(node_name)
    claim = run.cluster.claims.get(released.get("claim", "")) or {}
    pool_nodes = run.cluster.pool_nodes()
    for result in (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results") or []:
        changed.update(pool_nodes.get((result.get("driver", ""), result.get("pool", "")), ()))
    return not any(scheduler.filter_node(info, node, defer=True).result.fits
                   for node in sorted(n for n in changed if n in cluster.nodes))


def release_on_fork(explanation: Explanation, change: dict[str, Any]) -> Any | None:
    """The cluster as the target met it, with the claim released and its pods deleted by the cluster's own
    transitions on a fork (Cluster.fork): what the release candidate's `mutate` does to the objects, without
    building a cluster of thousands of objects again. None where the two could differ: a deleted pod that uses
    other claims too, or a claim that pods other than the deleted ones reserve."""
    from gpudra.scheduler.claimstatus import reserved_for

    cluster = getattr(explanation.context, "cluster", None)
    if cluster is None:
        return None
    holder, pods = change.get("claim", ""), list(change.get("pods") or [])
    claim = cluster.claims.get(holder)
    if claim is None:
        return None
    uids = set()
    for key in pods:
        pod = cluster.pods.get(key)
        if pod is None or set(cluster.pod_claim_keys(pod)) != {holder}:
            return None
        uids.add((pod.get("metadata") or {}).get("uid"))
    if not {entry.get("uid") for entry in reserved_for(claim)} <= uids:
        return None
    forked = cluster.fork(pods=pods, claims=[holder])
    for key in pods:
        forked.delete_pod(key)
    left = forked.claims.get(holder)
    if left is not None:
        forked.deallocate_claim(left)
    return forked


