"""ResourceClaim helpers: identity, how a request is read (API defaulting applied on the fly) and
toleration matching. The search and `explain` both read requests and taints through here."""

from __future__ import annotations

from typing import Any

from .model import as_int

EXACT_COUNT, ALL = "ExactCount", "All"


def request_mode_and_count(request: dict[str, Any]) -> tuple[str, int]:
    """(allocation mode, devices wanted) with the API server's defaulting: an empty mode is
    ExactCount and an ExactCount request without a count (or count 0) wants 1; All gives 0 (the
    count is then what matches). Other modes are returned as they are."""
    mode = request.get("allocationMode") or EXACT_COUNT
    if mode != EXACT_COUNT:
        return mode, 0
    return mode, as_int(request.get("count")) or 1


def _metadata(claim: Any) -> dict[str, Any]:
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


BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")


def untolerated_taints(taints: list[dict[str, Any]], tolerations: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """1.35+: the NoSchedule/NoExecute taints no toleration tolerates (other effects are informational)."""
    return [
        taint for taint in taints
        if isinstance(taint, dict) and taint.get("effect") in BLOCKING_EFFECTS
        and not any(tolerates(t, taint) for t in tolerations)
    ]


def taint_prevents_allocation(taints: list[dict[str, Any]], tolerations: list[dict[str, Any]]) -> bool:
    return bool(untolerated_taints(taints, tolerations))
