"""ResourceClaim helpers: identity, API defaulting of requests, tolerations."""

from __future__ import annotations

import copy
from typing import Any


def _metadata(claim: Any) -> dict:
    metadata = claim.get("metadata") if isinstance(claim, dict) else None
    return metadata if isinstance(metadata, dict) else {}


def claim_namespace(claim: dict[str, Any]) -> str:
    namespace = _metadata(claim).get("namespace")
    return namespace if isinstance(namespace, str) and namespace else "default"


def claim_label(claim: dict[str, Any]) -> str:
    name = _metadata(claim).get("name")
    return f"{claim_namespace(claim)}/{name if isinstance(name, str) else ''}"


def is_allocated(claim: dict[str, Any]) -> bool:
    status = claim.get("status") if isinstance(claim, dict) else None
    return isinstance(status, dict) and bool(status.get("allocation"))


def _default_exact(request: dict[str, Any]) -> None:
    if not request.get("allocationMode"):
        request["allocationMode"] = "ExactCount"
    if request["allocationMode"] == "ExactCount" and not request.get("count"):
        request["count"] = 1
    for toleration in request.get("tolerations") or []:
        if isinstance(toleration, dict) and not toleration.get("operator"):
            toleration["operator"] = "Equal"


def defaulted_requests(claim: dict[str, Any]) -> list[dict[str, Any]]:
    """The claim's requests with API defaulting applied (copies; the claim is not modified).

    An unknown allocationMode is kept as is so that the allocator can report it as upstream does.
    """
    requests = copy.deepcopy((((claim or {}).get("spec") or {}).get("devices") or {}).get("requests") or [])
    for request in requests:
        if not isinstance(request, dict):
            continue
        if isinstance(request.get("exactly"), dict):
            _default_exact(request["exactly"])
        for sub in request.get("firstAvailable") or []:
            if isinstance(sub, dict):
                _default_exact(sub)
    return requests


def tolerates(toleration: dict[str, Any], taint: dict[str, Any]) -> bool:
    if not isinstance(toleration, dict):
        return False
    effect = toleration.get("effect")
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key")
    if key and key != taint.get("key"):
        return False
    operator = toleration.get("operator") or "Equal"
    if operator == "Exists":
        return True
    if operator == "Equal":
        return (toleration.get("value") or "") == (taint.get("value") or "")
    return False


def taint_prevents_allocation(taints: list[dict[str, Any]], tolerations: list[dict[str, Any]]) -> bool:
    """1.35+: an untolerated NoSchedule/NoExecute taint blocks; other effects are informational."""
    for taint in taints:
        if taint.get("effect") not in ("NoSchedule", "NoExecute"):
            continue
        if not any(tolerates(t, taint) for t in tolerations):
            return True
    return False
