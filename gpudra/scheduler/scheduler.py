"""The scheduling cycle: queue order, filters, scoring, binding — kube-scheduler's default profile for the
plugins that matter on GPU nodes.

Per pod: PreFilter (claims exist, classes exist, shared-claim limit; InterPodAffinity's topology counts) → Filter
on each node in the order NodeUnschedulable, NodeName, TaintToleration, NodeAffinity, NodeResourcesFit,
InterPodAffinity, DynamicResources → Score with the chosen policy (plus InterPodAffinity's) → bind (allocate claims,
reserve them, set spec.nodeName).

Like kube-scheduler, with many nodes only the first `num_feasible_nodes_to_find` feasible nodes (searching
round-robin from where the previous pod stopped) are scored (`percentageOfNodesToScore`, adaptive by default:
50% − nodes/125, at least 5% and at least 100 nodes). `percentage_of_nodes_to_score=100` scores every node.

Per-node verdicts are cached per "pod shape" (everything that decides a verdict: node name, selectors,
affinity, tolerations, requests, claim specs) and node epoch (see `ClusterState.epoch`). Pods created from one
template share a shape, so a verdict is recomputed only for nodes whose state changed since the last pod — this
is what makes thousands of pods per second possible without changing a single answer. A pod whose InterPodAffinity
verdicts or scores depend on other pods' placement (`PodInfo.placement_dependent`) is judged afresh on every node:
a bind changes one node's epoch but another node's topology domain.

This module is the cycle of one pod (kube-scheduler's schedulingCycle, pkg/scheduler/schedule_one.go). Around it:
the queue pass (gpudra.scheduler.queue), the cycle's records (cyclestate), the Node-object and NodeResourcesFit
filters (nodefilters), Reserve/Bind/PreBind (bindingcycle), the caches' bounds (verdictcache).
"""

from __future__ import annotations

import math
import time
from datetime import datetime, timezone
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Callable, cast

from gpudra.allocator import FILTER_TIMEOUT_S
from gpudra.copying import copy_object

from . import framework as fw
from . import resources as res
from .bindingcycle import finish, prebind
from .claimstatus import claim_allocation, reserved_for
from .cyclestate import NodeEval, PodInfo, PodShape, timed_out
from .nodefilters import fit_reasons, node_reasons
from .queue import run_queue
from .state import ClusterState
from . import groupclaims, preemption
from . import interpodaffinity as ipa
from . import bindingconditions as binding
from .dra import (
    DraPodState,
    DraVerdict,
    ExtendedRequest,
    dra_served_extended,
    extended_resource_classes,
    first_available_score,
    prefilter,
)
from .dra import filter_node as dra_filter_node
from gpudra.api.objectmeta import canonical_json, name_of
from .shapeindex import PlainScores, ShapeIndex
from .policies import get_policy
from .ties import BY_NAME, TieRule, pick
from .ties import check as check_ties
from .verdictcache import MAX_INDEXED_SHAPES, make_room, per_node_slot

if TYPE_CHECKING:
    from .scoring import Policy

MIN_FEASIBLE_NODES_TO_FIND = 100
MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND = 5
DEFAULT_PERCENTAGE_OF_NODES_TO_SCORE = 0  # 0 = adaptive, as kube-scheduler's default
# PodInfo.node_shape of a pod without nodeName, nodeSelector, node affinity or tolerations (what the Node-object
# plugins read): the JSON text of the four values, so that no other pod's shape can equal it
UNCONSTRAINED_NODE_SHAPE = "[null,null,null,[]]"


def num_feasible_nodes_to_find(num_all_nodes: int, percentage: int = DEFAULT_PERCENTAGE_OF_NODES_TO_SCORE) -> int:
    if num_all_nodes < MIN_FEASIBLE_NODES_TO_FIND or percentage >= 100:
        return num_all_nodes
    adaptive = percentage
    if adaptive <= 0:
        adaptive = max(50 - num_all_nodes // 125, MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND)
    count = num_all_nodes * adaptive // 100
    return max(count, MIN_FEASIBLE_NODES_TO_FIND)


class Scheduler:
    def __init__(
        self,
        cluster: ClusterState,
        policy: str | Policy = "kube",
        percentage_of_nodes_to_score: int | None = None,
        indexed: bool = True,
        filter_timeout: float | None = FILTER_TIMEOUT_S,
        preempt: bool = True,
        dra_preemption: bool = False,
        graceful_preemption: bool = False,
        clock: Callable[[], datetime] | None = None,
        binding_timeout: float = binding.BINDING_TIMEOUT_S,
        ties: TieRule = BY_NAME,
    ):
        """`filter_timeout`: seconds of device search one pod may spend over all nodes (None: no limit).
        `preempt`: DefaultPreemption runs for a pod that fits nowhere (gpudra.scheduler.preemption);
        `dra_preemption`: victims' claims are freed by it as KEP-5690 proposes (in no release up to 1.36);
        `graceful_preemption`: victims are marked, not removed (`PodResult.preempted`: the caller deletes them),
        and an unschedulable pod's message carries PostFilter's "preemption: ..." part (the local cluster).
        `clock`: the time binding conditions are judged at (allocationTimestamp, the binding timeout);
        `binding_timeout`: DynamicResourcesArgs.bindingTimeout in seconds (at least 1; default 600);
        `ties`: how equal top scores are broken (gpudra.scheduler.ties: the first node name, or a seeded
        random.Random drawing as kube-scheduler's selectHost)."""
        if binding_timeout < binding.MIN_BINDING_TIMEOUT_S:
            raise ValueError(f"binding timeout {binding_timeout:g}s: must be at least 1 second")
        self.clock = clock or (lambda: datetime.now(timezone.utc))
        self.binding_timeout = binding_timeout
        self.ties = check_ties(ties)
        # the nodes a pod group's placement leaves (gpudra.scheduler.workloadplacement); None: every node
        self.placement_nodes: list[str] | None = None
        self.cluster = cluster
        self.policy = get_policy(policy)
        if percentage_of_nodes_to_score is None:
            percentage_of_nodes_to_score = self.policy.default_percentage_of_nodes_to_score
        self.percentage_of_nodes_to_score = percentage_of_nodes_to_score
        self.results: dict[str, fw.PodResult] = {}
        self.filter_timeout = filter_timeout
        self.preempt = preempt
        self.dra_preemption = dra_preemption
        self.graceful_preemption = graceful_preemption
        self._next_start_node_index = 0
        self._cache: dict[PodShape, dict[str, NodeEval]] = {}
        self.indexed = indexed  # False: always the plain linear scan (same answers; for tests)
        # False: every feasible node's allocations are computed when it is filtered, one device search per node
        # (same answers; for tests). True: as the policy allows (`Policy.node_allocations`).
        self.defer_allocations = True
        self._indexes: dict[PodShape, ShapeIndex] = {}
        self._shape_uses: dict[PodShape, int] = {}
        self._cache_generation = -1
        # (claims signature, extended resources served, allocations deferred) -> node -> (device epoch, verdict)
        self._dra_cache: dict[tuple[str, tuple[str, ...], bool], dict[str, tuple[int, DraVerdict]]] = {}
        self._dra_generation = -1
        self._extended_classes: dict[str, str] | None = None
        self._extended_generation = -1
        self._claim_copies: dict[str, list[dict[str, Any]]] = {}  # see _shared_claims
        self._node_verdicts: dict[str, dict[str, tuple[fw.Reason, ...]]] = {}  # see filter_node
        self._node_generation = -1
        # gang members of the running queue pass -> (claims their bind allocated, extended claim it created)
        self._gang_bindings: dict[str, Any] = {}

    # ----- PreFilter ----------------------------------------------------------------------------
    def extended_classes(self) -> dict[str, str]:
        if self._extended_classes is None or self._extended_generation != self.cluster.generation:
            self._extended_classes = extended_resource_classes(self.cluster)
            self._extended_generation = self.cluster.generation
        return self._extended_classes

    def pod_info(self, pod_key: str) -> PodInfo:
        pod = self.cluster.pods[pod_key]
        spec = pod.get("spec") or {}
        reasons: list[fw.Reason] = []
        try:
            requests, non_zero = res.pod_request_totals(pod)
        except res.ResourceError as exc:
            requests, non_zero = {}, {}
            reasons.append(fw.Reason(fw.NODE_RESOURCES_FIT, str(exc), resolvable=False))
        dra = prefilter(self.cluster, pod, self.extended_classes(), self._unbindable_check())
        if dra.to_allocate:
            dra.shared_claims = self._shared_claims(dra)
        # no filter timeout: no limit at all (math.inf), not a Filter timeout per node searched
        dra.deadline = math.inf if self.filter_timeout is None else time.monotonic() + self.filter_timeout
        reasons.extend(dra.reasons)
        tolerations = list(spec.get("tolerations") or [])
        node_name, selector = spec.get("nodeName"), spec.get("nodeSelector")
        affinity = (spec.get("affinity") or {}).get("nodeAffinity")
        if node_name is None and not selector and not affinity and not tolerations:
            node_shape = UNCONSTRAINED_NODE_SHAPE  # most pods: no JSON to write
        else:
            node_shape = canonical_json([node_name, selector, affinity, tolerations])
        fit_order = [r for r in (res.CPU, res.MEMORY, res.EPHEMERAL_STORAGE) if r in requests]
        fit_order += sorted(r for r in requests if r not in (res.CPU, res.MEMORY, res.EPHEMERAL_STORAGE))
        shape = (node_shape, tuple(sorted(requests.items())), non_zero.get(res.CPU, 0), non_zero.get(res.MEMORY, 0),
                 dra.signature)
        info = PodInfo(
            pod_key,
            pod,
            requests,
            non_zero.get(res.CPU, 0),
            non_zero.get(res.MEMORY, 0),
            tolerations,
            dra,
            reasons,
            shape,
            node_shape,
            tuple(fit_order),
            non_zero,
        )
        self.refresh_affinity(info)
        return info

    # ----- InterPodAffinity (gpudra.scheduler.interpodaffinity) -----------------------------------
    def refresh_affinity(self, info: PodInfo) -> None:
        """InterPodAffinity's PreFilter and PreScore for the pods counted on nodes now."""
        pod = info.pod
        with_affinity = self._existing_with_affinity()
        own = ipa.has_pod_affinity(pod)
        if not own and not with_affinity:
            info.affinity = info.affinity_scores = None
            return
        everyone = self._existing_pods() if own else []
        namespaces = {name_of(obj): dict((obj.get("metadata") or {}).get("labels") or {})
                      for obj in self.cluster.other_objects if obj.get("kind") == "Namespace"}
        info.affinity = ipa.prefilter(pod, everyone, with_affinity, namespaces)
        info.affinity_scores = ipa.prescore(pod, everyone, with_affinity, namespaces)

    def _existing_pods(self) -> list[ipa.ExistingPod]:
        cluster = self.cluster
        return [ipa.ExistingPod(cluster.pods[key], self._node_labels(node))
                for node, usage in cluster.usage.items() if node in cluster.nodes
                for key in usage.pods if key in cluster.pods]

    def _node_labels(self, node: str) -> dict[str, str]:
        return (self.cluster.nodes[node].get("metadata") or {}).get("labels") or {}

    def _existing_with_affinity(self) -> list[ipa.ExistingPod]:
        """NodeInfo.PodsWithAffinity over all nodes: pods with a pod (anti-)affinity section counted on a node
        (bound, or assumed while waiting at PreBind)."""
        cluster = self.cluster
        found = []
        for key in cluster.pods_with_pod_affinity:
            pod = cluster.pods.get(key)
            if pod is None:
                continue
            node = (pod.get("spec") or {}).get("nodeName") or cluster.binding_waits.get(key)
            usage = cluster.usage.get(node or "")
            if node in cluster.nodes and usage is not None and key in usage.pods:
                found.append(ipa.ExistingPod(pod, self._node_labels(node)))
        return found

    def _affinity_reason(self, info: PodInfo, node: dict[str, Any]) -> fw.Reason | None:
        if info.affinity is None:
            return None
        found = info.affinity.reason((node.get("metadata") or {}).get("labels") or {})
        if found is None:
            return None
        return fw.Reason(fw.INTER_POD_AFFINITY, found[0], {}, resolvable=found[1])

    def _combine(self, info: PodInfo, feasible: list[NodeEval]) -> Mapping[str, float]:
        """The policy's scores plus InterPodAffinity's, normalised over the feasible nodes (weight 2)."""
        scores = self.policy.combine(self, info, feasible)
        if info.affinity_scores is None:
            return scores
        state = info.affinity_scores
        raw = {e.result.node: state.score(self._node_labels(e.result.node)) for e in feasible}
        normalized = ipa.normalize(raw)
        return {node: score + ipa.SCORE_WEIGHT * normalized[node] for node, score in scores.items()}

    def _unbindable_check(self) -> Callable[[dict[str, Any]], str | None] | None:
        """The Filter's binding check on allocated claims (gates DRADeviceBindingConditions and
        DRAResourceClaimDeviceStatus): failed or timed out -> "resourceclaim not available on the node"."""
        if not self.cluster.features.device_binding_and_status:
            return None
        now, timeout = self.clock(), self.binding_timeout
        return lambda claim: binding.unavailable_for_binding(claim, now, timeout)

    def _shared_claims(self, dra: DraPodState) -> list[dict[str, Any]]:
        """What the allocator is asked about for the claims to allocate: copies of the first such claims seen with
        `dra.signature` (which holds their specs' canonical JSON, so every pod with the signature has equal
        specs), their metadata and spec only, never written. The allocator reads a claim spec and a request once
        per object; a claim from a template has its own copy of both. Whether claims fit does not depend on which
        claim asks: only error messages name it (dra.filter_node asks again with the pod's own claims for those),
        and the shareIDs of built allocations (so searches that build them use the pod's own claims)."""
        shared = self._claim_copies.get(dra.signature)
        if shared is None:
            make_room(self._claim_copies)
            claims = self.cluster.claims
            shared = self._claim_copies[dra.signature] = [
                {key: copy_object(value) for key, value in claims[claim_key].items() if key != "status"}
                for claim_key in dra.to_allocate
            ]
        return shared

    # ----- Filter -------------------------------------------------------------------------------
    def filter_node(self, info: PodInfo, node_name: str, all_reasons: bool = False, defer: bool = False) -> NodeEval:
        """Run every filter for one node. Like kube-scheduler, the first failing plugin ends the evaluation
        unless `all_reasons` is set (then every plugin reports, for explanations). `defer`: a feasible node's
        allocations may be left to `bindingcycle.finish` (`NodeEval.deferred`)."""
        cluster = self.cluster
        node = cluster.nodes[node_name]
        reasons: list[fw.Reason] = []
        evaluation = NodeEval(fw.FilterResult(node_name, reasons), epoch=cluster.epoch.get(node_name, 0))

        if all_reasons:
            reasons.extend(node_reasons(info, node_name, node, True))
        else:
            # these plugins read only the Node object and the pod's spec: one verdict per node and generation
            if self._node_generation != cluster.generation:
                self._node_verdicts.clear()
                self._node_generation = cluster.generation
            per_node = per_node_slot(self._node_verdicts, info.node_shape)
            found = per_node.get(node_name)
            if found is None:
                found = per_node[node_name] = tuple(node_reasons(info, node_name, node, False))
            if found:
                reasons.extend(found)
                return evaluation
        allocatable = cluster.allocatable(node_name)
        served = dra_served_extended(info.dra, allocatable) if info.dra.extended else []
        evaluation.served = served
        reasons.extend(fit_reasons(info, cluster.usage[node_name], allocatable, {r.resource for r in served}))
        if reasons and not all_reasons:
            return evaluation
        affinity = self._affinity_reason(info, node)
        if affinity is not None:
            reasons.append(affinity)
            if not all_reasons:
                return evaluation
        if info.dra.relevant:
            verdict: DraVerdict = self._dra_verdict(info, node_name, node, served, defer)
            reasons.extend(verdict.reasons)
            if verdict.fatal:
                evaluation.fatal = verdict.fatal
            elif not verdict.reasons:
                evaluation.deferred = verdict.deferred
                evaluation.result.allocations = verdict.allocations
                evaluation.extended_claim = verdict.extended_claim
                if verdict.first_available is None:  # depends on claim specs and devices: shared like the verdict
                    claims = [cluster.claims[k] for k in info.dra.to_allocate]
                    verdict.first_available = first_available_score(claims, verdict.allocations or [])
                evaluation.first_available = verdict.first_available
        return evaluation

    def _dra_verdict(self, info: PodInfo, node_name: str, node: dict[str, Any],
                     served: list[ExtendedRequest], defer: bool = False) -> DraVerdict:
        """The DynamicResources verdict, shared by every pod with the same claims (`dra.signature`) while no
        device the node can see is allocated or released (`ClusterState.device_epoch`): unlike the per-shape cache,
        pods that differ only in cpu/memory, and binds of pods without claims, do not cause new allocator runs.
        Errors are not shared: their messages name the pod's own claims."""
        cluster = self.cluster
        if self._dra_generation != cluster.generation:
            self._dra_cache.clear()
            self._dra_generation = cluster.generation
        key = (info.dra.signature, tuple(r.resource for r in served), defer)
        per_node = per_node_slot(self._dra_cache, key)
        device_epoch = cluster.device_epoch.get(node_name, 0)
        cached = per_node.get(node_name)
        if cached is not None and cached[0] == device_epoch:
            return cached[1]
        verdict = dra_filter_node(cluster, info.pod, info.dra, node, served, defer)
        if verdict.fatal is None and not any(r.details.get("error") for r in verdict.reasons):
            per_node[node_name] = (device_epoch, verdict)
        return verdict

    # ----- one pod ------------------------------------------------------------------------------
    def schedule_pod(self, pod_key: str) -> fw.PodResult:
        if pod_key in self.cluster.binding_waits:  # its binding cycle goes on: PreBind polls its claims again
            result = fw.PodResult(pod_key, num_nodes=len(self.cluster.node_names()))
            result.claims = self.cluster.pod_claim_keys(self.cluster.pods[pod_key])
            result = prebind(self, result)
        else:
            result = self._attempt_nominated(pod_key) or self._attempt(pod_key)
        if not result.scheduled and not result.at_prebind and self._post_filter(pod_key, result):
            result = self._attempt(pod_key)
        if not result.scheduled and not result.at_prebind and self.preempt:
            result = self._preempt(pod_key, result)
        self.results[pod_key] = result
        if result.binding_error is not None:  # a binding-cycle error: FailureHandler's SchedulerError
            self.cluster.mark_unschedulable(pod_key, result.message(), "SchedulerError")
        elif not result.scheduled and result.binding is None:
            gated = bool(result.prefilter) and result.prefilter[0].plugin == fw.SCHEDULING_GATES
            self.cluster.mark_unschedulable(pod_key, result.message(), "SchedulingGated" if gated else "Unschedulable")
        return result

    def _attempt_nominated(self, pod_key: str) -> fw.PodResult | None:
        """evaluateNominatedNode (pkg/scheduler/schedule_one.go): a pod nominated by an earlier preemption goes to
        its nominated node when it fits there; None when it has none or does not fit there."""
        cluster = self.cluster
        pod = cluster.pods[pod_key]
        nominated = (pod.get("status") or {}).get("nominatedNodeName")
        if not nominated or nominated not in cluster.nodes or (pod.get("spec") or {}).get("schedulingGates"):
            return None
        if self.placement_nodes is not None and nominated not in self.placement_nodes:
            return None  # a pod group's placement leaves the nominated node out
        info = self.pod_info(pod_key)
        if info.reasons:
            return None
        evaluation = self.evaluate_fresh(info, nominated)
        if evaluation.fatal is not None or evaluation.result.reasons:
            return None
        result = fw.PodResult(pod_key, num_nodes=len(cluster.node_names()))
        return finish(self, info, result, evaluation, self._combine(info, [evaluation]))

    def _preempt(self, pod_key: str, result: fw.PodResult) -> fw.PodResult:
        """DefaultPreemption's PostFilter (gpudra.scheduler.preemption.post_filter)."""
        return preemption.post_filter(self, pod_key, result)

    def _attempt(self, pod_key: str) -> fw.PodResult:
        cluster = self.cluster
        info = self.pod_info(pod_key)
        nodes = cluster.node_names() if self.placement_nodes is None else self.placement_nodes
        result = fw.PodResult(pod_key, num_nodes=len(nodes))
        gates = (info.pod.get("spec") or {}).get("schedulingGates")
        if gates:
            names = ", ".join(str((gate or {}).get("name", "")) for gate in gates)
            result.prefilter = [
                fw.Reason(fw.SCHEDULING_GATES, f"Scheduling is blocked due to non-empty scheduling gates: {names}",
                          {"gates": gates}, resolvable=False)
            ]
            return result
        if info.reasons:
            result.prefilter = info.reasons
            return result
        if not nodes:
            return result
        to_find = num_feasible_nodes_to_find(len(nodes), self.percentage_of_nodes_to_score)
        start = self._next_start_node_index % len(nodes)
        if self._cache_generation != cluster.generation:
            self._cache.clear()
            self._indexes.clear()
            self._shape_uses.clear()
            self._cache_generation = cluster.generation
        policy = self.policy
        if self.indexed and policy.indexable and not info.placement_dependent and self.placement_nodes is None:
            uses = self._shape_uses.get(info.shape, 0) + 1
            self._shape_uses[info.shape] = uses
            if uses >= 2:  # a shape seen before: worth indexing every node's verdict
                return self._attempt_indexed(info, result, start, to_find)
        feasible: list[NodeEval] = []
        processed = 0
        cache = {} if info.placement_dependent else per_node_slot(self._cache, info.shape)
        epochs = cluster.epoch
        filtered = cast(dict[str, fw.FilterResult], result.filtered)  # a fresh result's: the empty dict default
        for node_name in nodes[start:] + nodes[:start] if start else nodes:
            # the hot loop: a cached verdict is valid while the node's epoch is unchanged
            evaluation = cache.get(node_name)
            if evaluation is None or evaluation.epoch != epochs[node_name]:
                evaluation = self.evaluate_fresh(info, node_name)
                if evaluation.fatal is not None:
                    result.error = evaluation.fatal
                    filtered[node_name] = evaluation.result
                    # findNodesThatFit moves nextStartNodeIndex "regardless of whether an error has occurred"
                    self._next_start_node_index = (start + processed) % len(nodes)
                    return result
                if not timed_out(evaluation):  # another attempt gets a budget of its own
                    cache[node_name] = evaluation
            processed += 1
            if evaluation.result.reasons:
                filtered[node_name] = evaluation.result
            else:
                feasible.append(evaluation)
                if len(feasible) >= to_find:
                    break
        self._next_start_node_index = (start + processed) % len(nodes)
        if not feasible:
            return result
        scores = self._combine(info, feasible)  # parts were computed with each verdict
        best = self._best(feasible, scores)
        return finish(self, info, result, best, scores)

    def evaluate_fresh(self, info: PodInfo, node_name: str) -> NodeEval:
        """filter_node plus the policy's scoring inputs for a feasible node (what the caches hold)."""
        evaluation = self.filter_node(info, node_name,
                                      defer=self.defer_allocations and not self.policy.node_allocations)
        if evaluation.fatal is None and not evaluation.result.reasons:
            evaluation.parts = self.policy.node_parts(self, info, evaluation)
        return evaluation

    def _best(self, feasible: list[NodeEval], scores: Mapping[str, float]) -> NodeEval:
        """The highest score; ties as `self.ties` breaks them (feasible: in evaluation order)."""
        return pick(feasible, lambda e: scores[e.result.node], lambda e: e.result.node, self.ties)

    def _shape_index(self, info: PodInfo) -> ShapeIndex:
        """The pod shape's index, brought up to date and made the most recently used one."""
        index = self._indexes.pop(info.shape, None)
        if index is None:
            if len(self._indexes) >= MAX_INDEXED_SHAPES:
                # least recently used first; its verdicts go back to the plain cache, so indexing the shape
                # again re-evaluates only the nodes that changed since
                evicted = next(iter(self._indexes))
                old = self._indexes.pop(evicted)
                make_room(self._cache)
                self._cache[evicted] = {old.nodes[i]: e for i, e in enumerate(old.evals) if e is not None}
            index = ShapeIndex(self, info, self._cache.pop(info.shape, {}))
        else:
            index.refresh(self, info)
        self._indexes[info.shape] = index  # most recently used last
        return index

    def _attempt_indexed(self, info: PodInfo, result: fw.PodResult, start: int, to_find: int) -> fw.PodResult:
        index = self._shape_index(info)
        chosen, keys, processed, fatal = index.select(start, to_find)
        self._next_start_node_index = (start + processed) % len(index.nodes)  # on an error too, as upstream
        if fatal is not None:  # re-run for this pod's own error message (it names the pod's claims)
            node_name = index.nodes[fatal]
            evaluation = self.filter_node(info, node_name)
            result.error = evaluation.fatal or "; ".join(r.message for r in evaluation.result.reasons)
            result.filtered = {node_name: evaluation.result}  # a fresh result's filtered is empty
            return result
        if not chosen:
            result.filtered = fw.FilterResults([e.result for e in index.evals if e is not None and e.result.reasons])
            return result
        scores: Mapping[str, float]
        if index.nonplain == 0:
            plain = cast(list[int], keys)  # no feasible node's score is other than plain: every key is an int
            count = len(index.nodes)
            if self.ties == BY_NAME:
                best = index.evals[count - 1 - max(plain) % count]  # plain_key: ties to the first name
            else:  # the score is key // count; `chosen` is in scan order, as the linear scan evaluates
                at = pick(range(len(chosen)), lambda n: plain[n] // count, str, self.ties)
                best = index.evals[chosen[at]]
            scores = PlainScores(index.nodes, plain, chosen)
        else:
            feasible = cast(list[NodeEval], [index.evals[i] for i in chosen])  # chosen positions hold verdicts
            scores = self._combine(info, feasible)
            best = self._best(feasible, scores)
        assert best is not None
        return finish(self, info, result, best, scores)

    def _post_filter(self, pod_key: str, result: fw.PodResult) -> bool:
        """DynamicResources PostFilter: an allocated claim that is usable on no node and reserved for nobody
        else (a PodGroup's claim: once no pod of the group is scheduled) is deallocated so the next attempt can
        allocate it afresh."""
        if result.scheduled or result.prefilter or result.error or not result.filtered:
            return False
        pod = self.cluster.pods[pod_key]
        if all(claim_allocation(self.cluster.claims.get(key) or {}) is None for key in self.cluster.pod_claim_keys(pod)):
            return False  # only an allocated claim of the pod's can be "not available on the node"
        uid = (pod.get("metadata") or {}).get("uid")
        for filter_result in result.filtered.values():
            for reason in filter_result.reasons:
                if reason.message != "resourceclaim not available on the node":
                    continue
                claim = self.cluster.claims.get(reason.details.get("claim", ""))
                if claim is None or claim_allocation(claim) is None:
                    continue
                # unreservePodGroupClaims ("ResourceClaim unreserved for PodGroup") and the deallocation of the
                # PostFilter after it, in one step as gpudra's retry stands for the pod's next attempts
                groupclaims.unreserve_for_group(self.cluster, pod, claim)
                others = [e for e in reserved_for(claim) if e.get("uid") != uid]
                if not others:
                    self.cluster.deallocate_claim(claim)
                    return True
        return False

    # ----- the whole queue ----------------------------------------------------------------------
    def run(self, on_result: Callable[[fw.PodResult], None] | None = None) -> list[fw.PodResult]:
        """Schedule every pending pod once, in queue order (gpudra.scheduler.queue)."""
        return run_queue(self, on_result)

    def unreserve(self, result: fw.PodResult) -> None:
        """Unreserve for a gang pod this queue pass placed: its bind, and the claims that bind allocated, undone."""
        allocated, extended = self._gang_bindings.get(result.pod) or ([], None)
        self.cluster.unbind(result.pod, allocated, extended)
        result.node, result.claims, result.binding = None, [], None
