"""The DynamicResources plugin: which claims a pod needs, which must still be allocated, the special claim for
extended resources served by DRA, and the per-node verdict through the allocator."""

from __future__ import annotations

import math

from dataclasses import dataclass, field
from typing import Any, Callable

from . import framework as fw
from .allocation import TIMED_OUT, AllocationOutcome, allocate, fits
from . import groupclaims
from .claimstatus import MAX_RESERVED_FOR, claim_allocation, reserved_for
from .state import ClusterState
from gpudra.api.objectmeta import canonical_json, ensure_uid_of, name_of, namespace_of, stable_uid, truncate_generate_name
from gpudra.schedulinghelpers import node_selector_matches
from .resources import container_requests, is_extended
from gpudra.api.objectmeta import owned_by, owner_reference, unique_generated_name

IMPLICIT_EXTENDED_RESOURCE_PREFIX = "deviceclass.resource.kubernetes.io/"
FIRST_AVAILABLE_MAX = 8  # FirstAvailableDeviceRequestMaxSize

# The scheduler marks the claim it creates for DRA-served extended resources (KEP-5004)
EXTENDED_RESOURCE_CLAIM_ANNOTATION = "resource.kubernetes.io/extended-resource-claim"


@dataclass(frozen=True)
class ExtendedRequest:
    container_index: int  # index in init containers followed by containers
    container_name: str
    resource: str
    request_name: str  # container-<i>-request-<j>
    count: int
    device_class: str


@dataclass
class DraPodState:
    claims: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)  # (pod claim, key, claim)
    to_allocate: list[str] = field(default_factory=list)  # claim keys, pod.spec.resourceClaims order
    allocated: list[str] = field(default_factory=list)
    reasons: list[fw.Reason] = field(default_factory=list)  # pod-level (PreFilter) rejections
    extended: list[ExtendedRequest] = field(default_factory=list)
    extended_claim_name: str = ""
    signature: str = ""
    # per claim in to_allocate: a claim with an equal spec, shared by every pod with this `signature`
    # (`Scheduler._shared_claims`), so that the allocator reads a spec once per shape, not once per claim; for
    # searches that only say whether the claims fit (`filter_node`'s `defer`)
    shared_claims: list[dict[str, Any]] | None = None
    # One search budget for every node the pod is tried on (time.monotonic()); kube-scheduler runs the
    # nodes' Filters in parallel, so a pod waits about one Filter timeout, not one per node.
    deadline: float | None = None
    # allocated claim key -> "failed" | "timed-out": its devices' binding failed or timed out (KEP-5007), so the
    # claim is not available on any node and PostFilter deallocates it
    unbindable: dict[str, str] = field(default_factory=dict)

    @property
    def relevant(self) -> bool:
        return bool(self.claims or self.extended)


def extended_resource_classes(cluster: ClusterState) -> dict[str, str]:
    """extended resource name -> DeviceClass. An explicit `extendedResourceName` claimed by several classes goes
    to the newest one (creationTimestamp), ties to the lexicographically first name; every class also answers
    to its implicit `deviceclass.resource.kubernetes.io/<class>` name."""
    mapping: dict[str, str] = {}
    explicit: dict[str, list[tuple[str, str]]] = {}
    if not getattr(cluster, "extended_resources_via_dra", True):
        return mapping  # DRAExtendedResource off: extended resources are the device plugins' alone
    for name, device_class in cluster.device_classes.items():
        mapping[IMPLICIT_EXTENDED_RESOURCE_PREFIX + name] = name
        resource = (device_class.get("spec") or {}).get("extendedResourceName")
        if resource:
            created = str((device_class.get("metadata") or {}).get("creationTimestamp") or "")
            explicit.setdefault(resource, []).append((created, name))
    for resource, candidates in explicit.items():
        newest = max(created for created, _ in candidates)
        mapping[resource] = min(name for created, name in candidates if created == newest)
    return mapping


def _request_classes(claim: dict[str, Any]) -> list[tuple[str, str]]:
    """(request name as reported, class name) for every request and subrequest of the claim."""
    found: list[tuple[str, str]] = []
    for request in ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []:
        if request.get("exactly") is not None:
            found.append((request.get("name", ""), (request["exactly"] or {}).get("deviceClassName", "")))
        for sub in request.get("firstAvailable") or []:
            found.append((f"{request.get('name', '')}/{sub.get('name', '')}", sub.get("deviceClassName", "")))
    return found


def prefilter(cluster: ClusterState, pod: dict[str, Any], extended_classes: dict[str, str],
              unbindable: Callable[[dict[str, Any]], str | None] | None = None) -> DraPodState:
    """`unbindable`: the binding check on an allocated claim (gpudra.scheduler.bindingconditions), when the
    gates for binding conditions are on."""
    state = DraPodState()
    pod_uid = ensure_uid_of(pod)
    pod_key = f"{namespace_of(pod)}/{name_of(pod)}"
    signature: list[Any] = []
    for pod_claim, claim_key, problem in cluster.pod_claim_refs(pod):
        if problem:
            state.reasons.append(fw.Reason(fw.DYNAMIC_RESOURCES, problem, {"podClaim": pod_claim}, resolvable=False))
            continue
        if claim_key is None:
            continue  # no claim needed
        if any(key == claim_key for _, key, _ in state.claims):
            continue  # the same claim under two pod claim names is still one claim
        claim = cluster.claims.get(claim_key)
        if claim is None:
            claim_name = claim_key.split("/", 1)[1]
            state.reasons.append(
                fw.Reason(
                    fw.DYNAMIC_RESOURCES,
                    f'resourceclaim.resource.k8s.io "{claim_name}" not found',
                    {"podClaim": pod_claim, "claim": claim_key},
                    resolvable=False,
                )
            )
            continue
        if (claim.get("metadata") or {}).get("deletionTimestamp"):
            state.reasons.append(
                fw.Reason(
                    fw.DYNAMIC_RESOURCES,
                    f'resourceclaim "{name_of(claim)}" is being deleted',
                    {"podClaim": pod_claim, "claim": claim_key},
                    resolvable=False,
                )
            )
            continue
        refs = [c for c in pod.get("spec", {}).get("resourceClaims") or [] if c.get("name") == pod_claim]
        if (refs and refs[0].get("resourceClaimTemplateName") and not owned_by(claim, pod)
                and not groupclaims.owned_by_pod_group(cluster, pod, claim)):
            state.reasons.append(
                fw.Reason(
                    fw.DYNAMIC_RESOURCES,
                    f"ResourceClaim {claim_key} was not created for pod {pod_key} (pod is not owner)",
                    {"podClaim": pod_claim, "claim": claim_key},
                    resolvable=False,
                )
            )
            continue
        state.claims.append((pod_claim, claim_key, claim))
        allocation = claim_allocation(claim)
        if allocation is not None:
            entries = reserved_for(claim)
            if not groupclaims.reserved_for_pod(cluster, pod, claim) and len(entries) >= MAX_RESERVED_FOR:
                state.reasons.append(
                    fw.Reason(
                        fw.DYNAMIC_RESOURCES,
                        f"resourceclaim {claim_key} is already reserved for {len(entries)} pods, "
                        f"the maximum of {MAX_RESERVED_FOR}",
                        {"podClaim": pod_claim, "claim": claim_key, "reservedFor": len(entries)},
                        resolvable=False,
                    )
                )
                continue
            state.allocated.append(claim_key)
            failed = unbindable(claim) if unbindable is not None else None
            if failed is not None:
                state.unbindable[claim_key] = failed
            # the claim's identity is part of the shape: verdicts name it and PostFilter may deallocate it
            signature.append(["allocated", claim_key, allocation.get("nodeSelector"), failed])
            continue
        for request_name, class_name in _request_classes(claim):
            if not class_name:
                continue  # the allocator reports the unsupported request type
            if class_name not in cluster.device_classes:
                state.reasons.append(
                    fw.Reason(
                        fw.DYNAMIC_RESOURCES,
                        f"request {request_name}: device class {class_name} does not exist",
                        {"podClaim": pod_claim, "claim": claim_key, "request": request_name, "class": class_name},
                        resolvable=False,
                    )
                )
        state.to_allocate.append(claim_key)
        signature.append(["allocate", pod_claim, claim.get("spec")])
    state.extended = _extended_requests(pod, extended_classes)
    if state.extended:
        namespace = namespace_of(pod)
        state.extended_claim_name = unique_generated_name(
            f"{name_of(pod)}-extended-resources-", lambda n: f"{namespace}/{n}" in cluster.claims, namespace, pod_uid
        )
        signature.append(["extended", [(r.request_name, r.resource, r.count, r.device_class) for r in state.extended]])
    state.signature = canonical_json(signature)
    return state


def _extended_requests(pod: dict[str, Any], extended_classes: dict[str, str]) -> list[ExtendedRequest]:
    spec = pod.get("spec") or {}
    containers = list(spec.get("initContainers") or []) + list(spec.get("containers") or [])
    found: list[ExtendedRequest] = []
    for index, container in enumerate(containers):
        requests = container_requests(container)
        for key_index, resource in enumerate(sorted(requests)):
            if is_extended(resource) and resource in extended_classes and requests[resource] > 0:
                found.append(
                    ExtendedRequest(
                        index,
                        container.get("name", ""),
                        resource,
                        f"container-{index}-request-{key_index}",
                        requests[resource],
                        extended_classes[resource],
                    )
                )
    return found


def dra_served_extended(state: DraPodState, allocatable: dict[str, int] | None) -> list[ExtendedRequest]:
    """The extended-resource requests this node's device plugins do not cover, so DRA must serve them."""
    return [r for r in state.extended if not (allocatable or {}).get(r.resource)]


def extended_claim(pod: dict[str, Any], state: DraPodState, served: list[ExtendedRequest]) -> dict[str, Any]:
    namespace = namespace_of(pod)
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "name": state.extended_claim_name,
            "generateName": truncate_generate_name(f"{name_of(pod)}-extended-resources-"),
            "namespace": namespace,
            "uid": stable_uid("ResourceClaim", namespace, state.extended_claim_name),
            "annotations": {EXTENDED_RESOURCE_CLAIM_ANNOTATION: "true"},
            "ownerReferences": [owner_reference(pod, "v1", "Pod")],
        },
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": r.request_name,
                        "exactly": {"deviceClassName": r.device_class, "allocationMode": "ExactCount", "count": r.count},
                    }
                    for r in served
                ]
            }
        },
    }


def extended_claim_status(state: DraPodState, served: list[ExtendedRequest]) -> dict[str, Any]:
    return {
        "requestMappings": [
            {"containerName": r.container_name, "resourceName": r.resource, "requestName": r.request_name}
            for r in served
        ],
        "resourceClaimName": state.extended_claim_name,
    }


@dataclass
class DraVerdict:
    reasons: list[fw.Reason]
    allocations: list[dict[str, Any]] | None = None  # per claim in to_allocate (+ extended claim last)
    extended_claim: dict[str, Any] | None = None
    fatal: str | None = None
    first_available: int | None = None  # the Score of `allocations`, computed once per verdict
    deferred: bool = False  # fits, but `allocations` were not computed (see `filter_node`'s `defer`)


def filter_node(
    cluster: ClusterState, pod: dict[str, Any], state: DraPodState, node: dict[str, Any], served: list[ExtendedRequest],
    defer: bool = False, own_budget: bool = False,
) -> DraVerdict:
    """The DynamicResources Filter on one node. `defer`: the caller needs the allocations only if it picks this
    node, so a node in the same device state as one searched before may answer "fits" without them
    (`deferred`; call again without `defer` to get them). `own_budget`: the search gets a Filter timeout of its
    own instead of what is left of the pod's (`state.deadline`)."""
    for claim_key in state.allocated:
        claim = cluster.claims[claim_key]
        selector = (claim_allocation(claim) or {}).get("nodeSelector")
        failed = state.unbindable.get(claim_key)
        if failed is not None:  # Filter: isClaimReadyForBinding erred, or not ready and isClaimTimeout
            return DraVerdict([fw.Reason(fw.DYNAMIC_RESOURCES, "resourceclaim not available on the node",
                                         {"claim": claim_key, "nodeSelector": selector, "binding": failed},
                                         resolvable=False)])
        if not node_selector_matches(selector, node):
            return DraVerdict(
                [
                    fw.Reason(
                        fw.DYNAMIC_RESOURCES,
                        "resourceclaim not available on the node",
                        {"claim": claim_key, "nodeSelector": selector},
                        resolvable=False,
                    )
                ]
            )
    own_claims = [cluster.claims[key] for key in state.to_allocate]
    # only a search that builds no allocations may ask about the shared claims: a result's shareID is derived
    # from its claim's name
    shared = defer and state.shared_claims is not None
    claims = list(state.shared_claims or ()) if shared else own_claims
    special = extended_claim(pod, state, served) if served else None
    if special is not None:
        claims.append(special)
    if not claims:
        return DraVerdict([], [])
    # own budget: a Filter timeout of its own, unless the pod's budget is unlimited (the scheduler has none)
    deadline = None if own_budget and state.deadline != math.inf else state.deadline
    if defer:
        outcome: AllocationOutcome = fits(cluster.allocator(), node, claims, deadline=deadline)
    else:
        outcome = allocate(cluster.allocator(), node, claims, deadline=deadline)
    if shared and (outcome.outcome == "error" and outcome.error != TIMED_OUT
                   or outcome.outcome == "allocated" and not outcome.deferred):
        # An error message names a claim, and allocations built for the shared copies carry shareIDs derived from
        # the copies' names (the same for every pod of the shape: two pods sharing a device would get one
        # shareID): search again with the pod's own claims (whether they fit is the same).
        claims = own_claims + claims[len(own_claims):]
        outcome = fits(cluster.allocator(), node, claims, deadline=deadline)
    if outcome.outcome == "allocated":
        if outcome.deferred:  # one claim without firstAvailable (Allocator.fit_key): its Score is 0
            return DraVerdict([], None, special, first_available=0, deferred=True)
        return DraVerdict([], outcome.allocations, special)
    if outcome.outcome == "error":
        details = {"error": outcome.error, "podClaims": [c for c, key, _ in state.claims if key in state.to_allocate]}
        if outcome.error_node_local:
            return DraVerdict([fw.Reason(fw.DYNAMIC_RESOURCES, outcome.error or "", details)])
        return DraVerdict([fw.Reason(fw.DYNAMIC_RESOURCES, outcome.error or "", details, fatal=True)], fatal=outcome.error)
    # verdicts are shared by pods of one shape: name the pod's claims by their pod claim names
    pod_claims = [pod_claim for pod_claim, key, _ in state.claims if key in state.to_allocate]
    return DraVerdict(
        [
            fw.Reason(
                fw.DYNAMIC_RESOURCES,
                "cannot allocate all claims",
                {"podClaims": pod_claims, "extendedResources": bool(special)},
                resolvable=False,
            )
        ]
    )


def first_available_score(claims: list[dict[str, Any]], allocations: list[dict[str, Any]]) -> int:
    """1.35+ DynamicResources Score: 8 - index of the chosen subrequest, summed over firstAvailable requests."""
    score = 0
    for claim, allocation in zip(claims, allocations):
        results = ((allocation or {}).get("devices") or {}).get("results") or []
        chosen = {}
        for result in results:
            parent, _, sub = (result.get("request") or "").partition("/")
            if sub and parent not in chosen:
                chosen[parent] = sub
        for request in ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []:
            subs = [s.get("name") for s in request.get("firstAvailable") or []]
            if subs and request.get("name") in chosen and chosen[request["name"]] in subs:
                score += FIRST_AVAILABLE_MAX - subs.index(chosen[request["name"]])
    return score
