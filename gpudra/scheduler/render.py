"""Presentation of a scheduling run: every object (YAML stream or JSON List) or a summary table."""

from __future__ import annotations

import json
from typing import Any

from gpudra.api.dump import dump_yaml_data

from .claimstatus import claim_allocation
from .state import ClusterState
from .framework import PodResult
from gpudra.api.objectmeta import key_of


def all_objects(cluster: ClusterState) -> list[dict[str, Any]]:
    """Every object after the run, grouped by kind in a fixed order (inputs keep their order within a kind)."""
    objects: list[dict[str, Any]] = []
    objects.extend(cluster.other_objects)
    objects.extend(cluster.priority_classes.values())
    objects.extend(cluster.device_classes.values())
    objects.extend(cluster.slices)
    objects.extend(cluster.nodes[name] for name in cluster.node_names())
    objects.extend(cluster.templates.values())
    objects.extend(cluster.workloads)
    objects.extend(cluster.claims.values())
    objects.extend(cluster.pods.values())
    return objects


def to_yaml(cluster: ClusterState) -> str:
    return dump_yaml_data(all_objects(cluster), documents=True)


def to_json(cluster: ClusterState) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": all_objects(cluster)}, indent=2) + "\n"


def _devices(claim: dict[str, Any]) -> str:
    allocation = claim_allocation(claim) or {}
    results = (allocation.get("devices") or {}).get("results") or []
    return ",".join(f"{r.get('pool')}/{r.get('device')}" for r in results) or "-"


def table_rows(cluster: ClusterState, results: list[PodResult], wide: bool = False) -> list[list[str]]:
    """NODE, POD, CLAIM, DEVICES per scheduled pod and claim; `wide` adds the node's score and how many
    nodes were feasible for the pod."""
    rows: list[list[str]] = []
    for result in sorted((r for r in results if r.scheduled), key=lambda r: (r.node or "", r.pod)):
        pod = cluster.pods.get(result.pod)
        claim_keys = cluster.pod_claim_keys(pod) if pod is not None else []
        extra = [_score(result), f"{len(result.scores)}/{result.num_nodes}"] if wide else []
        if not claim_keys:
            rows.append([result.node or "", result.pod, "-", *extra, "-"])
        for claim_key in claim_keys:
            claim = cluster.claims.get(claim_key)
            devices = _devices(claim) if claim is not None else "-"
            rows.append([result.node or "", result.pod, claim_key.split("/", 1)[1], *extra, devices])
    return rows


def _score(result: PodResult) -> str:
    score = result.scores.get(result.node or "")
    return "-" if score is None else f"{score:g}"


def to_table(cluster: ClusterState, results: list[PodResult], wide: bool = False) -> str:
    header = ["NODE", "POD", "CLAIM", *(["SCORE", "FEASIBLE"] if wide else []), "DEVICES"]
    rows = table_rows(cluster, results, wide)
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in [header, *rows]]
    lines.extend(preemption_lines(results))
    waiting = [r for r in results if r.binding is not None]
    if waiting:  # placed and reserved, not bound: PreBind waits for the devices' binding conditions
        lines.append("")
        lines.append(f"WAITING FOR BINDING ({len(waiting)}):")
        lines.extend(f"  {result.pod}: {result.message()}" for result in waiting)
    unschedulable = [r for r in results if not r.scheduled and r.binding is None]
    if unschedulable:
        lines.append("")
        lines.append(f"UNSCHEDULABLE ({len(unschedulable)}):")
        for result in unschedulable:
            lines.append(f"  {result.pod}: {result.message()}")
    return "\n".join(lines) + "\n"


def preemption_lines(results: list[PodResult]) -> list[str]:
    """`PREEMPTED (n):` and one line per victim: the pod deleted (DefaultPreemption), for whom, on which node."""
    victims = [(victim, result) for result in results for victim in result.preempted]
    if not victims:
        return []
    lines = ["", f"PREEMPTED ({len(victims)}):"]
    for victim, result in victims:
        lines.append(f"  {victim}: preempted by {result.pod} on node {result.nominated_node}")
    return lines


def summary(results: list[PodResult]) -> str:
    scheduled = sum(1 for r in results if r.scheduled)
    waiting = sum(1 for r in results if r.binding is not None)
    return f"scheduled {scheduled}/{len(results)} pods" + (f", {waiting} waiting for binding" if waiting else "")


__all__ = ["all_objects", "key_of", "preemption_lines", "summary", "table_rows", "to_json", "to_table", "to_yaml"]
