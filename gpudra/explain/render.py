"""Explanations as text for people, or YAML/JSON for tools."""

from __future__ import annotations

import json
from typing import Any

from gpudra.api.dump import dump_yaml_data
from gpudra.explain.model import Explanation, NodeExplanation, RequestFunnel

# Nodes whose explanations read the same are shown once; this many names head the group.
NAMES_PER_GROUP = 6
# Text output shows the nodes closest to fitting first, and at most this many sections.
MAX_NODE_SECTIONS = 10


def to_yaml(explanation: Explanation) -> str:
    return dump_yaml_data(explanation.to_dict(), width=120)


def to_json(explanation: Explanation) -> str:
    return json.dumps(explanation.to_dict(), indent=2, ensure_ascii=False) + "\n"


def render(explanation: Explanation, fmt: str = "text", node: str | None = None) -> str:
    """yaml, json, or the text report (`table`/`text`; `wide`: every node's section, none left out)."""
    if fmt == "yaml":
        return to_yaml(explanation)
    if fmt == "json":
        return to_json(explanation)
    return to_text(explanation, node=node, max_sections=None if fmt == "wide" else MAX_NODE_SECTIONS)


def to_text(explanation: Explanation, node: str | None = None, max_sections: int | None = MAX_NODE_SECTIONS) -> str:
    lines: list[str] = []
    if explanation.fits and explanation.placement:
        placement = explanation.placement
        lines.append(f"{explanation.target} fits: {explanation.summary}")
        for claim, results in (placement.get("devices") or {}).items():
            devices = ", ".join(_result_text(r) for r in results) or "(no devices)"
            lines.append(f"  claim {claim}: {devices}")
        for note in explanation.notes:
            lines.append(f"note: {note}")
        return "\n".join(lines) + "\n"

    lines.append(f"{explanation.target} does not fit.")
    lines.extend(node_sections(explanation, node, max_sections))
    if explanation.fixes:
        lines.append("")
        lines.append("What would make it fit:")
        for fix in explanation.fixes:
            lines.append(f"  - {fix.message}")
    elif not explanation.fits and not explanation.nodes and not getattr(explanation.context, "gang_note", None):
        lines.append("")
        lines.append("There are no nodes to place it on: give the cluster's Nodes and ResourceSlices with it "
                     "(-f CLUSTER_DIR) or ask a live cluster (--kubeconfig/--context).")
    elif not explanation.fits:
        lines.append("")
        lines.append("No single change that was tried (releasing one claim, tolerating a taint, lowering a count,"
                     " dropping a selector) makes it fit.")
    for note in explanation.notes:
        lines.append(f"note: {note}")
    return "\n".join(lines) + "\n"


def node_sections(explanation: Explanation, node: str | None = None,
                  max_sections: int | None = MAX_NODE_SECTIONS) -> list[str]:
    """Why it does not fit: the scheduler's summary, problems and CEL errors, then one section per group of nodes
    that read alike, closest to fitting first (`gpudra describe pod` on a local cluster shows these too)."""
    lines = [explanation.summary]
    for problem in explanation.problems:
        lines.append(f"problem: {problem}")
    for error in explanation.cel_errors:
        lines.append("CEL error: " + _cel_text(error))
    nodes = [n for n in explanation.nodes if node is None or n.node == node]
    groups = sorted(_group_nodes(nodes), key=lambda group: (_distance(group[2]), group[0][0]))
    shown = groups if max_sections is None else groups[:max_sections]
    for names, body, _ in shown:
        lines.append("")
        lines.append(_names_header(names) + (":" if body else ""))
        lines.extend(body)
    hidden = sum(len(names) for names, _, _ in groups[len(shown):])
    if hidden:
        lines.append("")
        lines.append(f"… and {hidden} more node{'s' if hidden != 1 else ''} (--node NAME shows one, "
                     "-o wide or -o yaml shows all)")
    return lines


def _result_text(result: dict[str, Any]) -> str:
    return f"{result.get('request')}={result.get('driver')}/{result.get('pool')}/{result.get('device')}"


def _cel_text(error: Any) -> str:
    where = f"{error.where}: " if error.where else ""
    device = f" (device {error.device})" if error.device else ""
    return f"{where}{error.message}{device}"


def _names_header(names: list[str]) -> str:
    if len(names) == 1:
        return f"node {names[0]}"
    shown = ", ".join(names[:NAMES_PER_GROUP])
    more = f" and {len(names) - NAMES_PER_GROUP} more" if len(names) > NAMES_PER_GROUP else ""
    return f"nodes {shown}{more} ({len(names)})"


def _group_nodes(nodes: list[NodeExplanation]) -> list[tuple[list[str], list[str], NodeExplanation]]:
    groups: dict[tuple[str, ...], tuple[list[str], NodeExplanation]] = {}
    for entry in nodes:
        body = tuple(_node_body(entry))
        groups.setdefault(body, ([], entry))[0].append(entry.node)
    return [(names, list(body), first) for body, (names, first) in groups.items()]


def _distance(entry: NodeExplanation) -> tuple[int, int]:
    """How far a node is from fitting: failed filters first, then devices missing."""
    missing = 0
    for reason in entry.reasons:
        data = reason.data or {}
        if "need" in data and "free" in data:
            missing += max(int(data["need"]) - int(data["free"]), 0)
    return (0 if entry.fits else len(entry.reasons), missing)


def _node_body(entry: NodeExplanation) -> list[str]:
    lines: list[str] = []
    if entry.fits:
        lines.append("  fits")
    for reason in entry.reasons:
        lines.append(f"  ✗ {reason.message}{_reason_facts(reason)}")
    for request in entry.requests:
        lines.extend(_funnel_lines(request))
    for constraint in entry.constraints:
        lines.append(f"  constraint #{constraint.index} of claim {constraint.claim} (matchAttribute "
                     f"{constraint.attribute}): {constraint.message}")
    for problem in entry.pool_problems:
        lines.append(f"  {problem}")
    for error in entry.cel_errors:
        lines.append("  CEL error: " + _cel_text(error))
    return lines


def format_amount(resource: str, value: int) -> str:
    """Scheduler integers back to quantities: cpu is in millicores, memory in bytes."""
    if resource == "cpu":
        return f"{value // 1000}" if value % 1000 == 0 else f"{value}m"
    if resource == "memory" or resource.startswith("hugepages-") or resource == "ephemeral-storage":
        for unit, size in (("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)):
            if value and value % size == 0:
                return f"{value // size}{unit}"
    return str(value)


def _reason_facts(reason: Any) -> str:
    data = reason.data or {}
    if {"resource", "requested", "used", "capacity"} <= set(data):
        resource = data["resource"]
        free = max(int(data["capacity"]) - int(data["used"]), 0)
        return (f" (the pod requests {format_amount(resource, data['requested'])}, "
                f"{format_amount(resource, free)} of {format_amount(resource, data['capacity'])} free)")
    if "taint" in data and isinstance(data["taint"], dict):
        return ""
    return ""


def _funnel_lines(request: RequestFunnel) -> list[str]:
    want = "all matching devices" if request.mode == "All" else f"{request.count} device" + (
        "" if request.count == 1 else "s")
    lines = [f"  claim {request.claim}, request {request.request} ({want} of class {request.device_class}):"]
    width = max((len(str(step.count)) for step in request.steps), default=1)
    for step in request.steps:
        lines.append(f"    {step.count:>{width}}  {step.label}")
        for detail in step.details:
            lines.append(f"    {'':>{width}}    {detail}")
    return lines
