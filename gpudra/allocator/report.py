"""The brief what-if report (the structure of the conformance `expected.yaml` files).

Modes: `together` (all pending claims jointly, one result per node), `each` (every pending claim
alone on every node), `sequential` (first fit, claim after claim, committing each allocation).
"""

from __future__ import annotations

import json
from typing import Any, Callable, NotRequired, TypedDict

from gpudra.copying import copy_object
from gpudra.plain import as_dict, as_list, as_str

from .allocator import FILTER_TIMEOUT_S, Allocator
from .claims import claim_label, is_allocated
from .features import Features
from .outcome import AllocationOutcome

MODES = ("together", "each", "sequential")


class ReportEntry(TypedDict):
    """One allocate() call of a report: the node, the claims tried together, and what came of it."""

    node: str
    claims: list[str]
    outcome: str  # "allocated" | "unallocatable" | "error"
    error: NotRequired[str | None]  # outcome "error"
    errorNodeLocal: NotRequired[bool]  # outcome "error"
    allocations: NotRequired[dict[str, dict[str, Any]]]  # outcome "allocated": claim -> v1 status.allocation


class AllocationReport(TypedDict, total=False):
    """build_report's answer, the conformance cases' expected.yaml structure (keys as written there)."""

    results: list[ReportEntry]
    nodesThatFit: dict[str, int]  # mode each, summary: claim -> how many nodes fit it alone
    nodesTried: int  # mode each, summary
    finalAllocations: dict[str, dict[str, Any]]  # mode sequential: claim -> its status.allocation at the end
    unallocatedClaims: list[str]  # mode sequential


def split_objects(objects: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    kinds: dict[str, list[dict[str, Any]]] = {
        "DeviceClass": [], "ResourceSlice": [], "ResourceClaim": [], "Node": [], "DeviceTaintRule": []}
    for obj in objects:
        if isinstance(obj, dict) and obj.get("kind") in kinds:
            kinds[obj["kind"]].append(obj)
    return kinds


def _object_name(obj: dict[str, Any]) -> str:
    return as_str(as_dict(obj.get("metadata")).get("name"))


def default_node_names(kinds: dict[str, list[dict[str, Any]]]) -> list[str]:
    names = [_object_name(n) for n in kinds["Node"]]
    if names:
        return names
    seen: list[str] = []
    for slice_obj in kinds["ResourceSlice"]:
        spec = as_dict(slice_obj.get("spec"))
        candidates = [spec.get("nodeName")] + [as_dict(d).get("nodeName") for d in as_list(spec.get("devices"))]
        for name in candidates:
            if name and isinstance(name, str) and name not in seen:
                seen.append(name)
    return seen


def normalize_claim_name(name: str) -> str:
    return name if "/" in name else f"default/{name}"


def _first_fit(allocator: Allocator, claim: dict[str, Any], node_names: list[str], node_refs: list[Any],
               timeout: float | None, by_name: bool = True) -> tuple[int, dict[str, Any] | None, dict[str, Any] | None]:
    """How many nodes fit the claim alone, the first that does in node-name order (the order the scheduler, and so
    `explain`, walks them; with `by_name` False, in the order given) and the first error in input order, each as
    {node, outcome}."""
    # `fits` answers nodes in the device state of one searched before from that search, without building
    # allocations; only the node shown gets its devices, from a search of its own (`allocate` is deterministic).
    fits, first_allocated, first_error = 0, None, None
    for name, ref in zip(node_names, node_refs):
        outcome = allocator.fits(ref, [claim], timeout=timeout)
        if outcome.outcome == "allocated":
            fits += 1
            if first_allocated is None or (by_name and name < str(first_allocated["node"])):
                first_allocated = {"node": name, "ref": ref, "outcome": outcome}
        elif outcome.outcome == "error" and first_error is None:
            first_error = {"node": name, "outcome": outcome}
    if first_allocated is not None:
        ref = first_allocated.pop("ref")
        if first_allocated["outcome"].deferred:
            first_allocated["outcome"] = allocator.allocate(ref, [claim], timeout=timeout)
    return fits, first_allocated, first_error


def _entry(node: str, labels: list[str], outcome: AllocationOutcome) -> ReportEntry:
    entry: ReportEntry = {"node": node, "claims": list(labels), "outcome": outcome.outcome}
    if outcome.outcome == "error":
        entry["error"] = outcome.error
        entry["errorNodeLocal"] = outcome.error_node_local
    elif outcome.outcome == "allocated":
        entry["allocations"] = {label: alloc for label, alloc in zip(labels, outcome.allocations)}
    return entry


def build_report(
    objects: list[dict[str, Any]],
    mode: str = "together",
    nodes: list[str] | None = None,
    claims: list[str] | None = None,
    features: "Features | str | None" = None,
    timeout: float | None = FILTER_TIMEOUT_S,
    progress: Callable[[str, int, int], None] | None = None,
    summary: bool = False,
    allocator_factory: Callable[..., Any] | None = None,
) -> AllocationReport:
    """The brief report; `timeout` (seconds) bounds each allocate() call like the scheduler's
    Filter timeout (10 s by default, as upstream): a longer search is a node-local error; None: no limit.
    `progress(what, done, total)` hears of each claim done (a CLI draws a bar from it).

    `summary` (mode each): per claim only the entry of the first node where it fits (else of the first error),
    and `nodesThatFit` counts the others: what a reader of the claims needs, without one entry per claim and node
    (1,000 claims on 2,000 nodes are two million entries).

    `allocator_factory` stands for gpudra's Allocator (same arguments; allocate, fits and add_allocated_claim as it
    has them): the tests run these modes over the upstream Go allocator (benchmarks/go_allocator.py GoAllocator)."""
    report_progress = progress or (lambda what, done, total: None)
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; use one of {', '.join(MODES)}")
    features = Features.parse(features)
    kinds = split_objects(objects)
    allocated = [c for c in kinds["ResourceClaim"] if is_allocated(c)]
    pending = [c for c in kinds["ResourceClaim"] if not is_allocated(c)]
    if claims:
        wanted = [normalize_claim_name(c) for c in claims]
        by_label = {claim_label(c): c for c in pending}
        missing = [w for w in wanted if w not in by_label]
        if missing:
            raise ValueError(f"no pending ResourceClaim named {', '.join(missing)}")
        pending = [by_label[w] for w in wanted]
    node_names = list(nodes) if nodes else default_node_names(kinds)
    node_objects = {_object_name(n): n for n in kinds["Node"]}
    node_refs = [node_objects.get(name, name) for name in node_names]

    allocator = (allocator_factory or Allocator)(kinds["DeviceClass"], kinds["ResourceSlice"], allocated, features,
                                                 device_taint_rules=kinds["DeviceTaintRule"])
    results: list[ReportEntry] = []
    report: AllocationReport = {}
    if mode == "together":
        if pending:
            labels = [claim_label(c) for c in pending]
            for name, ref in zip(node_names, node_refs):
                results.append(_entry(name, labels, allocator.allocate(ref, pending, timeout=timeout)))
    elif mode == "each":
        # Each claim is tried alone against the same allocated state, and the search reads nothing of a claim
        # but its spec: claims with one spec get one answer per node, so it is searched once (1,000 pending
        # claims of a few shapes on 2,000 nodes: a few thousand searches instead of two million).
        outcomes: dict[tuple[str, str], AllocationOutcome] = {}
        firsts: dict[str, tuple[int, dict[str, Any] | None, dict[str, Any] | None]] = {}
        nodes_that_fit: dict[str, int] = {}
        for done, claim in enumerate(pending, start=1):
            label = claim_label(claim)
            shape = json.dumps(claim.get("spec"), sort_keys=True, default=str)
            if summary:
                if shape not in firsts:
                    # --node's order where given, as sequential mode and `gpudra allocate`'s choice take it
                    firsts[shape] = _first_fit(allocator, claim, node_names, node_refs, timeout, by_name=not nodes)
                fits, first_allocated, first_error = firsts[shape]
                first = first_allocated or first_error
                if first is not None:
                    results.append(_entry(first["node"], [label], first["outcome"]))
                nodes_that_fit[label] = fits
            else:
                for name, ref in zip(node_names, node_refs):
                    outcome = outcomes.get((shape, name))
                    if outcome is None:
                        outcome = outcomes[(shape, name)] = allocator.allocate(ref, [claim], timeout=timeout)
                    results.append(_entry(name, [label], outcome))
            report_progress("allocating claims", done, len(pending))
        if summary:
            report["nodesThatFit"] = nodes_that_fit
            report["nodesTried"] = len(node_names)
    else:
        final = {claim_label(c): copy_object(c["status"]["allocation"]) for c in allocated}
        unallocated = []
        for done, claim in enumerate(pending, start=1):
            label = claim_label(claim)
            for name, ref in zip(node_names, node_refs):
                outcome = allocator.allocate(ref, [claim], timeout=timeout)
                results.append(_entry(name, [label], outcome))
                if outcome.outcome == "allocated":
                    allocation = outcome.allocations[0]
                    final[label] = allocation
                    committed = dict(claim, status=dict(as_dict(claim.get("status")), allocation=allocation))
                    allocator.add_allocated_claim(committed)
                    break
            else:
                unallocated.append(label)
            report_progress("allocating claims", done, len(pending))
        if final:
            report["finalAllocations"] = final
        if unallocated:
            report["unallocatedClaims"] = unallocated
    if results:
        report = {"results": results, **report}  # results first, as expected.yaml files have it
    return report
