"""What a ResourceClaim's status says about it, and how a reservation leaves it: the allocation, `reservedFor`, the
devices an allocation holds, the delete-protection finalizer the scheduler adds on allocating.

Pure functions on claim objects, apart from `ClusterState` (gpudra.scheduler.state) so that every package reading
claims (the scheduler's filters, the controllers, the local cluster, the simulator, explanations) reads them one way
without importing the whole cluster view. The field rules are the API server's (k8s.io/api@v0.36.0
resource/v1/types.go: ResourceClaimStatus, ResourceClaimReservedForMaxSize).
"""

from __future__ import annotations

from typing import Any

from .topology import DeviceId

DELETE_PROTECTION_FINALIZER = "resource.kubernetes.io/delete-protection"
MAX_RESERVED_FOR = 256

def claim_allocation(claim: dict[str, Any]) -> dict[str, Any] | None:
    return (claim.get("status") or {}).get("allocation")


def reserved_for(claim: dict[str, Any]) -> list[dict[str, Any]]:
    return list((claim.get("status") or {}).get("reservedFor") or [])


def allocated_device_ids(claim: dict[str, Any]) -> list[DeviceId]:
    allocation = claim_allocation(claim) or {}
    return [
        (result.get("driver", ""), result.get("pool", ""), result.get("device", ""))
        for result in (allocation.get("devices") or {}).get("results") or []
        if not result.get("adminAccess")
    ]



def unreserve(claim: dict[str, Any], uid: str) -> tuple[bool, list[dict[str, Any]]]:
    """Take the pod `uid` out of the claim's reservedFor (the field goes when no one is left); (whether it was
    there, who remains)."""
    entries = reserved_for(claim)
    remaining = [entry for entry in entries if entry.get("uid") != uid]
    if len(remaining) != len(entries):
        if remaining:
            claim["status"]["reservedFor"] = remaining
        else:
            claim["status"].pop("reservedFor", None)
    return len(remaining) != len(entries), remaining
