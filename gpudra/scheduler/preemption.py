"""DefaultPreemption, kube-scheduler's PostFilter: when a pod fits no node, find the node where removing the fewest,
least important lower-priority pods makes it fit, evict them, and nominate the node for the pod.

Learned from kubernetes v1.34.4 (unchanged in the parts used here through v1.36):
- pkg/scheduler/framework/plugins/defaultpreemption/default_preemption.go: `SelectVictimsOnNode` (remove every
  pod of lower priority, check the pod fits, then reprieve as many as possible: PDB-violating pods first, then
  the others, each group most important first, `util.MoreImportantPod`: higher priority, then earlier
  status.startTime); `PodEligibleToPreemptOthers` (preemptionPolicy Never; a nominated node still holding pods
  terminating by preemption); `filterPodsWithPDBViolation`; `calculateNumCandidates` (10% of the candidate
  nodes, at least 100).
- pkg/scheduler/framework/preemption/preemption.go: `findCandidates` (only nodes whose Filter status was
  Unschedulable, not UnschedulableAndUnresolvable), `DryRunPreemption`, `pickOneNodeForPreemption` (fewest PDB
  violations, lowest highest-victim priority, smallest sum of priorities, fewest victims, latest start time of
  the highest-priority victims, then the first), `prepareCandidate` (DisruptionTarget condition
  PreemptionByScheduler, delete the victims) and the nomination (status.nominatedNodeName).
- pkg/scheduler/schedule_one.go `evaluateNominatedNode`: a pod with a nominated node is tried there first.

Devices held through ResourceClaims: kube-scheduler 1.33 to 1.36 frees none of them by preemption. The
DynamicResources plugin (pkg/scheduler/framework/plugins/dynamicresources/dynamicresources.go) answers
`PreFilterExtensions()` with nil, so removing a victim in the dry run does not release its claims, and its
Filter rejections ("cannot allocate all claims", `statusUnschedulable`) are UnschedulableAndUnresolvable, so a
node rejected for devices is no preemption candidate (kubernetes/website#54770 lists it as a DRA limitation).
gpudra answers the same by default. `dra=True` models KEP-5690 (DRA preemption, gate DRAPreemption, targeted at
1.38, in no release gpudra models; keps/sig-scheduling/5690-dra-preemption): a device rejection becomes a
candidate, and removing a victim releases each of its claims that no remaining pod reserves and whose devices
are all on this node (allocation nodeSelector naming the node); shared claims a remaining pod reserves keep
their devices.

Where gpudra differs, deterministically: candidate nodes are dry-run from the first in name order (upstream
starts at a random offset), ties in `pick_one_node` go to the first node in that order (upstream: Go map order),
a pod without status.startTime counts as started now (as upstream). Offline a victim's grace period is zero: its
pod is deleted at once, its claims released as the resourceclaim controller would, and the preemptor is
retried right away on its nominated node (kube-scheduler retries it once the victims are gone). With
`Scheduler(graceful_preemption=True)` (the local cluster, gpudra.cluster.preemption) the victims are only marked
and the caller deletes them through its API server; the pod waits, nominated, and PostFilter's status message
("preemption: ...", FitError's PostFilterMsg) is kept: `decide` builds it from the dry run's node statuses as
`Preempt` does (nodes not tried: "Preemption is not helpful for scheduling").
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable

from gpudra.allocator.nodematch import requirement_matches
from gpudra.api.objectmeta import is_terminal, name_of, namespace_of

from . import framework as fw
from .claimstatus import claim_allocation, reserved_for
from .state import ClusterState
from gpudra.api.objectmeta import parse_time

MIN_CANDIDATE_NODES_PERCENTAGE = 10  # DefaultPreemptionArgs defaults (pkg/scheduler/apis/config/v1/defaults.go)
MIN_CANDIDATE_NODES_ABSOLUTE = 100
NEVER = "Never"
NOT_ELIGIBLE_NEVER = "not eligible due to preemptionPolicy=Never."
NOT_ELIGIBLE_TERMINATING = "not eligible due to a terminating pod on the nominated node."
DISRUPTION_TARGET = "DisruptionTarget"
PREEMPTION_BY_SCHEDULER = "PreemptionByScheduler"
DRA_DEVICE_REJECTIONS = ("cannot allocate all claims",)  # what KEP-5690 makes resolvable by preemption
NO_VICTIMS = "No preemption victims found for incoming pod"
NOT_HELPFUL = "Preemption is not helpful for scheduling"
POST_FILTER_PREFIX = "preemption: "  # DefaultPreemption.PostFilter prefixes its status message


@dataclass(frozen=True)
class Victim:
    """What candidate selection reads of a victim."""

    pod: str  # namespace/name
    priority: int
    start_time: float  # seconds since the epoch; math.inf for a pod without status.startTime ("now")


@dataclass(frozen=True)
class Candidate:
    """One node where preemption makes the pod fit: its victims, most important first."""

    node: str
    victims: tuple[Victim, ...]
    pdb_violations: int = 0
    released_claims: tuple[str, ...] = ()  # claims the victims' removal deallocates (dra only)

    @property
    def victim_pods(self) -> tuple[str, ...]:
        return tuple(victim.pod for victim in self.victims)


def _start_time(pod: dict[str, Any]) -> float:
    started = parse_time((pod.get("status") or {}).get("startTime"))
    return math.inf if started is None else started.timestamp()


def victim_of(cluster: ClusterState, key: str) -> Victim:
    pod = cluster.pods[key]
    return Victim(key, cluster.pod_priority(pod), _start_time(pod))


def more_important(a: Victim) -> tuple[int, float]:
    """Sort key, most important first (util.MoreImportantPod): higher priority, then the earlier start."""
    return (-a.priority, a.start_time)


def eligible(cluster: ClusterState, pod: dict[str, Any]) -> tuple[bool, str]:
    """PodEligibleToPreemptOthers (without a nominated node found UnschedulableAndUnresolvable, which gpudra's
    immediate retry never leaves behind)."""
    spec = pod.get("spec") or {}
    if spec.get("preemptionPolicy") == NEVER:
        return False, NOT_ELIGIBLE_NEVER
    nominated = (pod.get("status") or {}).get("nominatedNodeName")
    if nominated and nominated in cluster.usage:
        priority = cluster.pod_priority(pod)
        for key in cluster.usage[nominated].pods:
            other = cluster.pods.get(key)
            if other is not None and cluster.pod_priority(other) < priority and _terminating_by_preemption(other):
                return False, NOT_ELIGIBLE_TERMINATING
    return True, ""


def _terminating_by_preemption(pod: dict[str, Any]) -> bool:
    if not (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == DISRUPTION_TARGET:
            return bool(condition.get("status") == "True" and condition.get("reason") == PREEMPTION_BY_SCHEDULER)
    return False


def potential_nodes(result: fw.PodResult, dra: bool) -> list[str]:
    """Nodes whose rejection preemption may resolve: every reason resolvable (Unschedulable); with `dra`, a
    DynamicResources device rejection counts as resolvable too."""
    found = []
    for node, verdict in result.filtered.items():
        if verdict.reasons and all(
            reason.resolvable or (dra and reason.plugin == fw.DYNAMIC_RESOURCES
                                  and reason.message in DRA_DEVICE_REJECTIONS)
            for reason in verdict.reasons
        ):
            found.append(node)
    return sorted(found)


def num_candidates(num_nodes: int) -> int:
    """calculateNumCandidates with the default DefaultPreemptionArgs."""
    return min(max(num_nodes * MIN_CANDIDATE_NODES_PERCENTAGE // 100, MIN_CANDIDATE_NODES_ABSOLUTE), num_nodes)


# ----- PodDisruptionBudgets ------------------------------------------------------------------------


def _labels_match(selector: Any, labels: dict[str, str]) -> bool:
    """A metav1.LabelSelector as a PDB uses it: nil or empty matches nothing."""
    if not isinstance(selector, dict) or not (selector.get("matchLabels") or selector.get("matchExpressions")):
        return False
    if any(labels.get(key) != value for key, value in (selector.get("matchLabels") or {}).items()):
        return False
    return all(requirement_matches(r, labels) for r in selector.get("matchExpressions") or [])


def pdbs_of(cluster: ClusterState) -> list[dict[str, Any]]:
    return [obj for obj in cluster.other_objects if obj.get("kind") == "PodDisruptionBudget"]


def split_by_pdb_violation(cluster: ClusterState, victims: list[Victim],
                           pdbs: list[dict[str, Any]]) -> tuple[list[Victim], list[Victim]]:
    """filterPodsWithPDBViolation: (violating, non-violating), each in the input's order. Every matching PDB's
    status.disruptionsAllowed is spent in turn; a pod named in status.disruptedPods spends none."""
    allowed = [int((pdb.get("status") or {}).get("disruptionsAllowed") or 0) for pdb in pdbs]
    violating: list[Victim] = []
    others: list[Victim] = []
    for victim in victims:
        pod = cluster.pods[victim.pod]
        labels = (pod.get("metadata") or {}).get("labels") or {}
        violated = False
        if labels:
            for index, pdb in enumerate(pdbs):
                if namespace_of(pdb) != namespace_of(pod):
                    continue
                if not _labels_match((pdb.get("spec") or {}).get("selector"), labels):
                    continue
                if name_of(pod) in ((pdb.get("status") or {}).get("disruptedPods") or {}):
                    continue
                allowed[index] -= 1
                if allowed[index] < 0:
                    violated = True
        (violating if violated else others).append(victim)
    return violating, others


# ----- choosing among candidates ------------------------------------------------------------------


def pick_one_node(candidates: list[Candidate]) -> Candidate | None:
    """pickOneNodeForPreemption with the default criteria, each only among the nodes best by the ones before:
    fewest PDB violations, lowest priority of the most important victim, smallest sum of victim priorities
    (each shifted by 2^31 so that negative priorities count), fewest victims, latest earliest start time among
    the highest-priority victims; then the first. Victims must be sorted most important first."""
    if not candidates:
        return None

    def earliest_top_start(candidate: Candidate) -> float:
        top = candidate.victims[0].priority
        return min(v.start_time for v in candidate.victims if v.priority == top)

    criteria = (
        lambda c: -c.pdb_violations,
        lambda c: -c.victims[0].priority,
        lambda c: -sum(v.priority + 2**31 for v in c.victims),
        lambda c: -len(c.victims),
        earliest_top_start,
    )
    remaining = list(candidates)
    for score in criteria:
        best = max(score(c) for c in remaining)
        remaining = [c for c in remaining if score(c) == best]
        if len(remaining) == 1:
            break
    return remaining[0]


# ----- the dry run --------------------------------------------------------------------------------


def _node_local(claim: dict[str, Any], node: str) -> bool:
    """Whether the claim's allocation is usable on exactly this node by name (KEP-5690 frees no claim of
    network-attached or multi-node devices)."""
    selector = (claim_allocation(claim) or {}).get("nodeSelector") or {}
    terms = selector.get("nodeSelectorTerms") or []
    if len(terms) != 1 or (terms[0] or {}).get("matchExpressions"):
        return False
    fields = (terms[0] or {}).get("matchFields") or []
    return (len(fields) == 1 and fields[0].get("key") == "metadata.name" and fields[0].get("operator") == "In"
            and fields[0].get("values") == [node])


class _DryRun:
    """One node's what-if on a fork of the cluster: victims are taken off and put back as SelectVictimsOnNode
    does, the preemptor's Filter asked after each change."""

    def __init__(self, scheduler: Any, pod_key: str, node: str, victims: list[Victim], dra: bool):
        cluster: ClusterState = scheduler.cluster
        self.node, self.dra = node, dra
        claims = {claim for victim in victims for claim in cluster.pod_claim_keys(cluster.pods[victim.pod])}
        self.fork = cluster.fork(pods=[v.pod for v in victims], claims=claims)
        # a scheduler of its own over the fork: its caches key on the fork's epochs; no search budget, so that the
        # answer does not depend on the machine's speed
        self.scheduler = type(scheduler)(self.fork, policy=scheduler.policy, filter_timeout=None)
        self.info = self.scheduler.pod_info(pod_key)
        self.released: dict[str, list[tuple[str, dict[str, Any]]]] = {}  # victim -> claims it deallocated

    def fits(self) -> bool:
        return not self.rejections()

    def rejections(self) -> list[str]:
        """The preemptor's Filter messages on the node as it now stands (none: it fits)."""
        # InterPodAffinity's AddPod/RemovePod: its counts follow the victims taken off and put back
        self.scheduler.refresh_affinity(self.info)
        evaluation = self.scheduler.filter_node(self.info, self.node)
        if evaluation.fatal is not None:
            return [str(evaluation.fatal)]
        return [reason.message for reason in evaluation.result.reasons]

    def remove(self, victim: str) -> None:
        fork = self.fork
        pod = fork.pods[victim]
        releasable = []
        if self.dra:  # KEP-5690 RemovePod: the victim's node-local claims that only victims reserve
            uid = (pod.get("metadata") or {}).get("uid")
            for claim_key in fork.pod_claim_keys(pod):
                claim = fork.claims.get(claim_key)
                if claim is None or claim_allocation(claim) is None or not _node_local(claim, self.node):
                    continue
                if all(entry.get("uid") == uid for entry in reserved_for(claim)):
                    releasable.append((claim_key, claim_allocation(claim) or {}))
        fork.unbind(victim, [key for key, _ in releasable])
        self.released[victim] = [(key, allocation) for key, allocation in releasable
                                 if claim_allocation(fork.claims[key]) is None]

    def add(self, victim: str) -> None:
        self.fork.bind(victim, self.node, self.released.pop(victim, []))


def select_victims_on_node(scheduler: Any, pod_key: str, node: str, pdbs: list[dict[str, Any]],
                           dra: bool = False, exclude: Iterable[str] = ()) -> Candidate | None:
    """SelectVictimsOnNode: None when no lower-priority pod is there or the pod does not fit without all of them;
    else the victims that must go (most important first) after reprieving every pod the node can keep."""
    return _dry_run_node(scheduler, pod_key, node, pdbs, dra, exclude)[0]


def _dry_run_node(scheduler: Any, pod_key: str, node: str, pdbs: list[dict[str, Any]], dra: bool,
                  exclude: Iterable[str]) -> tuple[Candidate | None, list[str]]:
    """SelectVictimsOnNode with the node's status when it gives no candidate (what DryRunPreemption records)."""
    cluster: ClusterState = scheduler.cluster
    preemptor = cluster.pods[pod_key]
    priority = cluster.pod_priority(preemptor)
    skipped = set(exclude)
    potential = [victim_of(cluster, key) for key in cluster.usage.get(node, _NO_USAGE).pods
                 if key in cluster.pods and key not in skipped and not is_terminal(cluster.pods[key])
                 and cluster.pod_priority(cluster.pods[key]) < priority]
    if not potential:
        return None, [NO_VICTIMS]
    run = _DryRun(scheduler, pod_key, node, potential, dra)
    for victim in potential:
        run.remove(victim.pod)
    rejections = run.rejections()
    if rejections:
        return None, rejections
    potential.sort(key=more_important)
    violating, others = split_by_pdb_violation(cluster, potential, pdbs)
    victims: list[Victim] = []
    released: list[str] = []
    violations = 0

    def reprieve(victim: Victim) -> bool:
        run.add(victim.pod)
        if run.fits():
            return True
        run.remove(victim.pod)
        victims.append(victim)
        released.extend(key for key, _ in run.released.get(victim.pod, []))
        return False

    for victim in violating:
        if not reprieve(victim):
            violations += 1
    for victim in others:
        reprieve(victim)
    if violating and others:
        victims.sort(key=more_important)
    return Candidate(node, tuple(victims), violations, tuple(released)), []


class _NoUsage:
    pods: list[str] = []


_NO_USAGE = _NoUsage()


def find_candidate(scheduler: Any, pod_key: str, result: fw.PodResult, dra: bool = False,
                   exclude: Iterable[str] = ()) -> tuple[Candidate | None, str]:
    """Preempt's steps 1, 2 and 4: (the chosen candidate, or None and why not). `exclude`: pods that are no
    victims (a gang's pods waiting at Permit in gpudra's queue pass)."""
    decision = decide(scheduler, pod_key, result, dra, exclude)
    return decision.candidate, decision.why


@dataclass(frozen=True)
class Decision:
    """What DefaultPreemption's PostFilter answers for one pod."""

    candidate: Candidate | None
    why: str = ""  # why there is no candidate (Preempt's status message without the "preemption: " prefix)
    # PostFilterResult: None keeps status.nominatedNodeName (not eligible), else the node to nominate ("": clear)
    nominate: str | None = ""

    @property
    def message(self) -> str:
        """PostFilterMsg as FitError.Error() appends it; empty when preemption found a candidate."""
        return f"{POST_FILTER_PREFIX}{self.why}" if self.why else ""


def decide(scheduler: Any, pod_key: str, result: fw.PodResult, dra: bool = False, exclude: Iterable[str] = (),
           any_lower: bool = True) -> Decision:
    """Preempt's steps 1, 2 and 4. `any_lower`: whether any bound pod has a lower priority than the pod (when
    not, no node is dry-run: each potential node has no victims)."""
    cluster: ClusterState = scheduler.cluster
    ok, why = eligible(cluster, cluster.pods[pod_key])
    if not ok:
        return Decision(None, why, nominate=None)
    nodes = potential_nodes(result, dra)
    statuses: dict[str, list[str]] = {}
    chosen = None
    if nodes and any_lower:
        pdbs = pdbs_of(cluster)
        wanted = num_candidates(len(nodes))
        skipped = list(exclude)
        non_violating: list[Candidate] = []
        violating: list[Candidate] = []
        for node in nodes:  # DryRunPreemption, from offset 0
            candidate, rejections = _dry_run_node(scheduler, pod_key, node, pdbs, dra, skipped)
            if candidate is None or not candidate.victims:
                statuses[node] = rejections or [f'expected at least one victim pod on node "{node}"']
                continue
            (violating if candidate.pdb_violations else non_violating).append(candidate)
            if non_violating and len(non_violating) + len(violating) >= wanted:
                break
        chosen = pick_one_node(non_violating + violating)
    else:
        statuses = {node: [NO_VICTIMS] for node in nodes}
    if chosen is not None:
        return Decision(chosen, nominate=chosen.node)
    # a FitError over every node: the dry run's statuses, "Preemption is not helpful" for the nodes not tried
    results = [fw.FilterResult(node, [fw.Reason(fw.DEFAULT_PREEMPTION, message, resolvable=False)
                                      for message in statuses.get(node, [NOT_HELPFUL])])
               for node in cluster.node_names()]
    return Decision(None, fw.fit_error_message(len(results), results))


def disruption_condition(preemptor: dict[str, Any]) -> dict[str, Any]:
    """The victim's DisruptionTarget condition (prepareCandidate / Executor.PreemptPod)."""
    scheduler_name = (preemptor.get("spec") or {}).get("schedulerName") or "default-scheduler"
    return {"type": DISRUPTION_TARGET, "status": "True", "reason": PREEMPTION_BY_SCHEDULER,
            "message": f"{scheduler_name}: preempting to accommodate a higher priority pod"}


def with_condition(status: dict[str, Any], condition: dict[str, Any]) -> dict[str, Any]:
    """`status` with `condition` in place of any condition of its type."""
    kept = [c for c in status.get("conditions") or [] if c.get("type") != condition.get("type")]
    return {**status, "conditions": kept + [condition]}


def evict(cluster: ClusterState, candidate: Candidate, preemptor_key: str) -> None:
    """prepareCandidate with a zero grace period: each victim gets the DisruptionTarget condition and is deleted
    (its claims released as the resourceclaim controller does), and the preemptor is nominated to the node."""
    preemptor = cluster.pods[preemptor_key]
    for victim in candidate.victim_pods:
        pod = cluster.pods.get(victim)
        if pod is None:
            continue
        pod["status"] = with_condition(pod.get("status") or {}, disruption_condition(preemptor))
        cluster.delete_pod(victim)
    preemptor.setdefault("status", {})["nominatedNodeName"] = candidate.node


def mark_for_deletion(cluster: ClusterState, candidate: Candidate, preemptor_key: str,
                      deletion_timestamp: str) -> tuple[str, ...]:
    """prepareCandidate where an API server deletes the victims gracefully: each victim not terminating yet
    gets the DisruptionTarget condition and `deletion_timestamp`, and stays on its node (with its claims) until
    its grace period is over; the preemptor is nominated to the node. Returns the victims the caller must
    delete (a victim already terminating is skipped, as upstream makes no second call for it)."""
    preemptor = cluster.pods[preemptor_key]
    to_delete = []
    for victim in candidate.victim_pods:
        pod = cluster.pods.get(victim)
        if pod is None or (pod.get("metadata") or {}).get("deletionTimestamp"):
            continue
        pod["status"] = with_condition(pod.get("status") or {}, disruption_condition(preemptor))
        pod.setdefault("metadata", {})["deletionTimestamp"] = deletion_timestamp
        to_delete.append(victim)
    preemptor.setdefault("status", {})["nominatedNodeName"] = candidate.node
    return tuple(to_delete)


def post_filter(scheduler: Any, pod_key: str, result: fw.PodResult) -> fw.PodResult:
    """DefaultPreemption's PostFilter for a pod that fit nowhere: evict the chosen node's victims, nominate it,
    and try the pod again there. With `scheduler.graceful_preemption` the victims are only marked (the caller
    deletes them; they go when their grace period is over), the pod waits for a later run, and its message
    carries the PostFilter's "preemption: ..." part."""
    if result.prefilter or result.error or not result.filtered:
        return result
    cluster: ClusterState = scheduler.cluster
    graceful = bool(scheduler.graceful_preemption)
    pod = cluster.pods[pod_key]
    priority = cluster.pod_priority(pod)
    any_lower = any(other < priority for other in cluster.bound_priorities)  # else nothing anywhere to preempt
    if not any_lower and not graceful:
        decision = Decision(None, NOT_HELPFUL)
    else:
        decision = decide(scheduler, pod_key, result, scheduler.dra_preemption, scheduler._gang_bindings, any_lower)
    candidate = decision.candidate
    if candidate is None:
        if decision.nominate is not None:
            (pod.get("status") or {}).pop("nominatedNodeName", None)  # NewPostFilterResultWithNominatedNode("")
        if graceful:
            result.post_filter = decision.message
        return result
    if graceful:
        # in memory only, so that this pass sees the victims as terminating; the API server sets the real one
        deletion = scheduler.clock().strftime("%Y-%m-%dT%H:%M:%SZ")
        result.preempted = mark_for_deletion(cluster, candidate, pod_key, deletion)
        result.nominated_node = candidate.node
        return result
    evict(cluster, candidate, pod_key)
    retry: fw.PodResult = scheduler._attempt_nominated(pod_key) or scheduler._attempt(pod_key)
    retry.preempted = candidate.victim_pods
    retry.nominated_node = candidate.node
    return retry


def hold_nominated(scheduler: Any, result: fw.PodResult) -> None:
    """RunFilterPluginsWithNominatedPods (pkg/scheduler/framework/runtime/framework.go, addGENominatedPods): a pod
    nominated to a node and still waiting counts there for every pod of equal or lower priority, which the queue
    orders after it, until the queue pass ends (`ClusterState.release_nominated`). As upstream, its claims are not
    counted (DynamicResources has no PreFilterExtensions). Only where victims leave gracefully: offline the pod
    is bound or its nomination cleared in the same attempt."""
    if not scheduler.graceful_preemption or result.scheduled or result.at_prebind:
        return
    cluster: ClusterState = scheduler.cluster
    pod = cluster.pods.get(result.pod)
    nominated = ((pod or {}).get("status") or {}).get("nominatedNodeName")
    if pod is not None and nominated:
        cluster.hold_nominated(result.pod, str(nominated))


__all__ = ["Candidate", "Decision", "Victim", "decide", "evict", "find_candidate", "hold_nominated",
           "mark_for_deletion", "pick_one_node", "post_filter", "select_victims_on_node"]
