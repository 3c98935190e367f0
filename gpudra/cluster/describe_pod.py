"""`gpudra describe pod`: kubectl describe pod's layout, plus what DRA did for the pod.

kubectl's sections (identity, status, containers with state, conditions, events) come first, in its order and
spelling, so the output reads like the real cluster's; then two of gpudra's own: the pod's ResourceClaims with the
devices allocated to them, and per container what the kubelet stand-in applied from the CDI specs (device nodes,
the environment the driver set, mounts).
"""

from __future__ import annotations

from typing import Any

from .tables import render_table

INDENT = "  "


def _field(label: str, value: Any, width: int = 18) -> str:
    return f"{label + ':':<{width}}{value if value not in (None, '') else '<none>'}"


def _pairs(mapping: dict[str, Any] | None) -> str:
    if not mapping:
        return "<none>"
    return ("\n" + " " * 18).join(f"{key}={value}" for key, value in sorted(mapping.items()))


def _state(status: dict[str, Any]) -> list[str]:
    state = status.get("state") or {}
    if "running" in state:
        return [_field("State", "Running", 16), INDENT + _field("Started", state["running"].get("startedAt"), 14)]
    if "waiting" in state:
        return [_field("State", "Waiting", 16), INDENT + _field("Reason", state["waiting"].get("reason"), 14)]
    if "terminated" in state:
        return [_field("State", "Terminated", 16),
                INDENT + _field("Reason", state["terminated"].get("reason"), 14)]
    return [_field("State", "Waiting", 16), INDENT + _field("Reason", "Pending", 14)]


def _container(container: dict[str, Any], status: dict[str, Any], view: dict[str, Any] | None) -> list[str]:
    lines = [f"{container.get('name', '')}:"]
    body = [_field("Image", container.get("image"), 16)]
    if container.get("command"):
        body.append("Command:")
        body.extend(INDENT + str(part) for part in container["command"])
    if container.get("args"):
        body.append("Args:")
        body.extend(INDENT + str(part) for part in container["args"])
    body.extend(_state(status))
    body.append(_field("Ready", "True" if status.get("ready") else "False", 16))
    body.append(_field("Restart Count", status.get("restartCount", 0), 16))
    body.extend(_resources(container.get("resources") or {}))
    claims = [c.get("name") for c in ((container.get("resources") or {}).get("claims") or [])]
    if claims:
        body.append(_field("Claims", ", ".join(str(c) for c in claims), 16))
    env = [f"{e.get('name')}={e.get('value', '')}" for e in container.get("env") or []]
    body.extend(_list_field("Environment", env))
    if view is not None:  # gpudra: what the CDI edits gave the container
        body.extend(_list_field("CDI Devices", view.get("cdiDevices") or []))
        body.extend(_list_field("Device Nodes", view.get("deviceNodes") or []))
        body.extend(_list_field("Injected Env", [e for e in view.get("env") or [] if e not in env]))
        body.extend(_list_field("Mounts", view.get("mounts") or []))
    return lines + [INDENT + line for line in body]


def _resources(resources: dict[str, Any]) -> list[str]:
    """kubectl's `Limits:` and `Requests:` blocks; requests unset but limited show the limit, as the API server's
    defaulting fills them in (pkg/apis/core/v1/defaults.go, SetDefaults_Pod)."""
    limits = resources.get("limits") or {}
    requests = {**limits, **(resources.get("requests") or {})}
    lines = []
    for label, values in (("Limits", limits), ("Requests", requests)):
        if values:
            width = max(len(str(name)) for name in values) + 3
            lines.append(f"{label}:")
            lines.extend(INDENT + f"{str(name) + ':':<{width}}{value}" for name, value in sorted(values.items()))
    return lines


def _list_field(label: str, items: list[str]) -> list[str]:
    """`Label:` then one indented line per item, or `Label:  <none>` in the column of the other values."""
    return [f"{label}:", *(INDENT + str(item) for item in items)] if items else [_field(label, None, 16)]


def _devices(claim: dict[str, Any] | None) -> str:
    results = ((((claim or {}).get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results")
    return ", ".join(f"{r.get('pool')}/{r.get('device')}" for r in results or []) or "<not allocated>"


def _claims(pod: dict[str, Any], claims: dict[str, dict[str, Any]]) -> list[str]:
    statuses = {s.get("name"): s.get("resourceClaimName")
                for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []}
    rows = []
    for pod_claim in (pod.get("spec") or {}).get("resourceClaims") or []:
        name = pod_claim.get("resourceClaimName") or statuses.get(pod_claim.get("name"))
        claim = claims.get(name or "")
        source = ("template " + pod_claim["resourceClaimTemplateName"]) if pod_claim.get(
            "resourceClaimTemplateName") else "claim"
        rows.append([str(pod_claim.get("name", "")), name or "<not created>", source, _devices(claim)])
    extended = (pod.get("status") or {}).get("extendedResourceClaimStatus") or {}
    if extended.get("resourceClaimName"):  # made by the scheduler for the containers' extended resources
        resources = sorted({str(m.get("resourceName")) for m in extended.get("requestMappings") or []})
        rows.append([", ".join(resources), extended["resourceClaimName"], "extended resources",
                     _devices(claims.get(extended["resourceClaimName"]))])
    if not rows:
        return ["Resource Claims:  <none>"]
    table = render_table(["Name", "ResourceClaim", "From", "Devices"], rows)
    return ["Resource Claims:"] + [INDENT + line for line in table.splitlines()]


def describe_pod(pod: dict[str, Any], claims: dict[str, dict[str, Any]], record: dict[str, Any] | None,
                 status_word: str, why: list[str] | None = None) -> list[str]:
    """The lines before Events. `claims`: the namespace's claims by name; `record`: the kubelet stand-in's record
    of the started pod (None: not started); `why`: for a pending pod, explain's per-node summary."""
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    owners = meta.get("ownerReferences") or []
    lines = [
        _field("Name", meta.get("name")),
        _field("Namespace", meta.get("namespace")),
        _field("Priority", spec.get("priority", 0)),
        _field("Service Account", spec.get("serviceAccountName", "default")),
        _field("Node", spec.get("nodeName")),
        _field("Start Time", status.get("startTime")),
        _field("Labels", _pairs(meta.get("labels"))),
        _field("Annotations", _pairs(meta.get("annotations"))),
        _field("Status", status_word),
    ]
    if owners:
        lines.append(_field("Controlled By", ", ".join(f"{r.get('kind')}/{r.get('name')}" for r in owners)))
    views = {v.get("name"): v for v in (record or {}).get("containers") or []}
    statuses = {s.get("name"): s for s in status.get("containerStatuses") or []}
    lines.append("Containers:")
    for container in spec.get("containers") or []:
        lines.extend(INDENT + line for line in _container(container, statuses.get(container.get("name"), {}),
                                                          views.get(container.get("name"))))
    conditions = [[c.get("type", ""), c.get("status", "")] for c in status.get("conditions") or []]
    if conditions:
        lines.append("Conditions:")
        lines.extend(INDENT + line for line in render_table(["Type", "Status"], conditions).splitlines())
    lines.extend(_claims(pod, claims))
    if why:
        target = f"pod/{meta.get('name')}" + (f" -n {meta['namespace']}" if meta.get("namespace") else "")
        lines.append(f"Why Pending:      (`gpudra explain {target}` shows every node and what would make it fit)")
        lines.extend(INDENT + line if line else "" for line in why)
    return lines
