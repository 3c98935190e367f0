"""ResourceClaim helpers: identity and toleration matching. (API defaulting of requests —
ExactCount, count 1 — is applied on the fly by the search.)"""

from __future__ import annotations

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
