"""kubectl's table columns for the kinds a local cluster holds, and `describe`'s text."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Callable

from gpudra.api.dump import dump_yaml_data

from .store import created_serial, public_view
from .describe_pod import describe_pod
from .tables import render_table


def age(timestamp: str | None, now: datetime | None = None) -> str:
    """kubectl's short duration: 42s, 5m, 3h, 2d."""
    if not timestamp:
        return "<unknown>"
    try:
        then = datetime.strptime(timestamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
    except ValueError:
        return "<unknown>"
    seconds = max(0, int(((now or datetime.now(timezone.utc)) - then).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size * (2 if unit != "d" else 1):
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _meta(obj: dict[str, Any]) -> dict[str, Any]:
    return obj.get("metadata") or {}


def pod_status(pod: dict[str, Any]) -> str:
    """kubectl's STATUS column: Terminating, the waiting reason, Pending, Running…"""
    if _meta(pod).get("deletionTimestamp"):
        return "Terminating"
    status = pod.get("status") or {}
    for container in status.get("containerStatuses") or []:
        waiting = (container.get("state") or {}).get("waiting")
        if waiting:
            return waiting.get("reason") or "Waiting"
    return status.get("phase") or "Pending"


def claim_state(claim: dict[str, Any]) -> str:
    """kubectl's STATE column for ResourceClaims: pending, allocated, allocated,reserved, deleted."""
    status = claim.get("status") or {}
    parts = []
    if _meta(claim).get("deletionTimestamp"):
        parts.append("deleted")
    if status.get("allocation"):
        parts.append("allocated")
    if status.get("reservedFor"):
        parts.append("reserved")
    return ",".join(parts) or "pending"


def _pod_row(pod: dict[str, Any], wide: bool) -> list[str]:
    containers = (pod.get("spec") or {}).get("containers") or []
    ready = sum(1 for c in (pod.get("status") or {}).get("containerStatuses") or [] if c.get("ready"))
    row = [_meta(pod).get("name", ""), f"{ready}/{len(containers)}", pod_status(pod), "0",
           age(_meta(pod).get("creationTimestamp"))]
    if wide:
        claims = [s.get("resourceClaimName") or "" for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []]
        claims += [c.get("resourceClaimName") for c in (pod.get("spec") or {}).get("resourceClaims") or []
                   if c.get("resourceClaimName")]
        row += [(pod.get("spec") or {}).get("nodeName") or "<none>", ",".join(claims) or "<none>"]
    return row


def _claim_row(claim: dict[str, Any], wide: bool) -> list[str]:
    row = [_meta(claim).get("name", ""), claim_state(claim), age(_meta(claim).get("creationTimestamp"))]
    if wide:
        results = (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results") or []
        reserved = [e.get("name", "") for e in (claim.get("status") or {}).get("reservedFor") or []]
        row += [",".join(f"{r.get('pool')}/{r.get('device')}" for r in results) or "<none>",
                ",".join(reserved) or "<none>"]
    return row


def _node_row(node: dict[str, Any], wide: bool) -> list[str]:
    ready: dict[str, Any] = next((c for c in (node.get("status") or {}).get("conditions") or [] if c.get("type") == "Ready"), {})
    row = [_meta(node).get("name", ""), "Ready" if ready.get("status") == "True" else "NotReady", "<none>",
           age(_meta(node).get("creationTimestamp")),
           ((node.get("status") or {}).get("nodeInfo") or {}).get("kubeletVersion", "")]
    if wide:
        row += [(_meta(node).get("labels") or {}).get("gpudra.local/profile", "")]
    return row


def _slice_row(obj: dict[str, Any], wide: bool) -> list[str]:
    spec = obj.get("spec") or {}
    row = [_meta(obj).get("name", ""), spec.get("nodeName") or "", spec.get("driver", ""),
           (spec.get("pool") or {}).get("name", ""), age(_meta(obj).get("creationTimestamp"))]
    if wide:
        row += [str(len(spec.get("devices") or [])), str((spec.get("pool") or {}).get("generation", ""))]
    return row


def _deployment_row(obj: dict[str, Any], wide: bool) -> list[str]:
    status = obj.get("status") or {}
    replicas = (obj.get("spec") or {}).get("replicas", 1)
    return [_meta(obj).get("name", ""), f"{status.get('readyReplicas', 0)}/{replicas}",
            str(status.get("updatedReplicas", 0)), str(status.get("availableReplicas", 0)),
            age(_meta(obj).get("creationTimestamp"))]


def _replica_set_row(obj: dict[str, Any], wide: bool) -> list[str]:
    status = obj.get("status") or {}
    return [_meta(obj).get("name", ""), str((obj.get("spec") or {}).get("replicas", 1)), str(status.get("replicas", 0)),
            str(status.get("readyReplicas", 0)), age(_meta(obj).get("creationTimestamp"))]


def _event_row(event: dict[str, Any], wide: bool) -> list[str]:
    ref = event.get("involvedObject") or {}
    return [age(event.get("lastTimestamp")), event.get("type", ""), event.get("reason", ""),
            f"{(ref.get('kind') or '').lower()}/{ref.get('name', '')}", event.get("message", "")]


def _budget_row(obj: dict[str, Any], wide: bool) -> list[str]:
    spec = obj.get("spec") or {}

    def shown(value: Any) -> str:
        return "N/A" if value is None else str(value)

    return [_meta(obj).get("name", ""), shown(spec.get("minAvailable")), shown(spec.get("maxUnavailable")),
            str((obj.get("status") or {}).get("disruptionsAllowed", 0)), age(_meta(obj).get("creationTimestamp"))]


def _priority_class_row(obj: dict[str, Any], wide: bool) -> list[str]:
    # preemptionPolicy's API default is PreemptLowerPriority (pkg/apis/scheduling/v1/defaults.go)
    return [_meta(obj).get("name", ""), str(obj.get("value", 0)), str(bool(obj.get("globalDefault"))).lower(),
            age(_meta(obj).get("creationTimestamp")), obj.get("preemptionPolicy") or "PreemptLowerPriority"]


def _plain_row(obj: dict[str, Any], wide: bool) -> list[str]:
    return [_meta(obj).get("name", ""), age(_meta(obj).get("creationTimestamp"))]


COLUMNS: dict[str, tuple[list[str], list[str], Callable[[dict[str, Any], bool], list[str]]]] = {
    "Pod": (["NAME", "READY", "STATUS", "RESTARTS", "AGE"], ["NODE", "CLAIMS"], _pod_row),
    "ResourceClaim": (["NAME", "STATE", "AGE"], ["DEVICES", "RESERVED-FOR"], _claim_row),
    "Node": (["NAME", "STATUS", "ROLES", "AGE", "VERSION"], ["PROFILE"], _node_row),
    "ResourceSlice": (["NAME", "NODE", "DRIVER", "POOL", "AGE"], ["DEVICES", "GENERATION"], _slice_row),
    "Deployment": (["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"], [], _deployment_row),
    "ReplicaSet": (["NAME", "DESIRED", "CURRENT", "READY", "AGE"], [], _replica_set_row),
    "Event": (["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"], [], _event_row),
    # pkg/printers/internalversion/printers.go (v1.36.0)
    "PodDisruptionBudget": (["NAME", "MIN AVAILABLE", "MAX UNAVAILABLE", "ALLOWED DISRUPTIONS", "AGE"], [],
                            _budget_row),
    "PriorityClass": (["NAME", "VALUE", "GLOBAL-DEFAULT", "AGE", "PREEMPTIONPOLICY"], [], _priority_class_row),
}


def table(kind: str, objects: list[dict[str, Any]], *, wide: bool = False, with_namespace: bool = False) -> str:
    headers, wide_headers, row = COLUMNS.get(kind, (["NAME", "AGE"], [], _plain_row))
    headers = headers + (wide_headers if wide else [])
    rows = [row(obj, wide) for obj in objects]
    if with_namespace:
        headers = ["NAMESPACE"] + headers
        rows = [[_meta(obj).get("namespace", "")] + r for obj, r in zip(objects, rows)]
    return render_table(headers, rows)


def describe(obj: dict[str, Any], events: list[dict[str, Any]], *, claims: dict[str, dict[str, Any]] | None = None,
             record: dict[str, Any] | None = None, why: list[str] | None = None) -> str:
    """kubectl describe's shape: identity, the object's content, then its events. A pod in kubectl describe pod's
    layout, with its claims' devices (`claims`: the namespace's claims by name), the kubelet stand-in's
    `record` of what each container got and, pending, `why` per node (gpudra.cluster.why)."""
    view = public_view(obj)
    meta = view.get("metadata") or {}
    if view.get("kind") == "Pod":
                return "\n".join(describe_pod(view, claims or {}, record, pod_status(obj), why) + _events(events)) + "\n"
    lines = [f"Name:         {meta.get('name', '')}"]
    if meta.get("namespace"):
        lines.append(f"Namespace:    {meta['namespace']}")
    lines.append(f"Kind:         {view.get('kind', '')}")
    if meta.get("labels"):
        lines.append("Labels:       " + "\n              ".join(f"{k}={v}" for k, v in sorted(meta["labels"].items())))
    lines.append(f"Created:      {meta.get('creationTimestamp', '')}")
    if meta.get("ownerReferences"):
        lines.append("Controlled By:  " + ", ".join(f"{r.get('kind')}/{r.get('name')}" for r in meta["ownerReferences"]))
    if view.get("kind") == "ResourceClaim":
        lines.append(f"State:        {claim_state(obj)}")
    for section in ("spec", "status"):
        if view.get(section):
            lines.append(f"{section.capitalize()}:")
            body = dump_yaml_data(view[section]).rstrip("\n")
            lines.extend("  " + line for line in body.splitlines())
    return "\n".join(lines + _events(events)) + "\n"


def _events(events: list[dict[str, Any]]) -> list[str]:
    lines = ["Events:" if events else "Events:       <none>"]
    if events:
        # oldest first, as kubectl describe sorts them; within a second the store's creation order decides
        events = sorted(events, key=lambda e: (e.get("lastTimestamp") or e.get("firstTimestamp") or "",
                                               created_serial(e)))
        rows = [[e.get("type", ""), e.get("reason", ""), age(e.get("lastTimestamp")),
                 (e.get("source") or {}).get("component", ""), e.get("message", "")] for e in events]
        lines.extend("  " + line for line in render_table(["Type", "Reason", "Age", "From", "Message"], rows).splitlines())
    return lines
