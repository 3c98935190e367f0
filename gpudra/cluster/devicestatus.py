"""What a device's driver or controller writes into a claim's status.devices: conditions on one allocated device.

Binding conditions (KEP-5007) are met here: a fabric manager that attaches a device to its node sets the device's
binding condition True (or a binding failure condition True when the attach fails), and the scheduler's PreBind
binds the waiting pod (gpudra.scheduler.bindingconditions). gpudra's GPU plugin writes no status.devices entry, as
NVIDIA's does not; this is the write a second driver (or a test standing in for it) makes. The entry is the
AllocatedDeviceStatus of resource.k8s.io/v1 (driver, pool, device, conditions as metav1.Condition), and the API
server's rule holds: only an allocated device may have one (gpudra.api.schema.claim).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gpudra.copying import copy_object
from gpudra.scheduler.bindingconditions import format_time

from .store import StoreError


@dataclass(frozen=True)
class DeviceCondition:
    type: str
    status: bool
    reason: str = "Set"  # metav1.Condition's reason must be non-empty CamelCase on the wire
    message: str = ""


def with_device_conditions(claim: dict[str, Any], driver: str, pool: str, device: str,
                           conditions: list[DeviceCondition], now: datetime) -> dict[str, Any]:
    """A copy of the claim with the conditions set on the device's status.devices entry (created when missing);
    a condition keeps its lastTransitionTime unless its status changes (apimeta.SetStatusCondition)."""
    claim = copy_object(claim)
    status = claim.setdefault("status", {})
    entries = status.setdefault("devices", [])
    entry = next((e for e in entries if (e.get("driver"), e.get("pool"), e.get("device")) == (driver, pool, device)),
                 None)
    if entry is None:
        entry = {"driver": driver, "pool": pool, "device": device}
        entries.append(entry)
    existing = {c.get("type"): c for c in entry.get("conditions") or []}
    for condition in conditions:
        value = "True" if condition.status else "False"
        before = existing.get(condition.type)
        moment = before.get("lastTransitionTime") if before and before.get("status") == value else format_time(now)
        existing[condition.type] = {"type": condition.type, "status": value, "reason": condition.reason,
                                    "message": condition.message, "lastTransitionTime": moment}
    entry["conditions"] = list(existing.values())
    return claim


def set_device_conditions(store: Any, namespace: str, claim_name: str, driver: str, pool: str, device: str,
                          conditions: list[DeviceCondition], now: datetime) -> dict[str, Any]:
    """Write the conditions into the stored claim (the driver's status update); StoreError when the claim is gone
    or the device is not allocated in it (the API server's 422)."""
    claim = store.get("ResourceClaim", namespace, claim_name)
    if claim is None:
        raise StoreError(f'resourceclaims "{claim_name}" not found', 404)
    return store.replace(with_device_conditions(claim, driver, pool, device, conditions, now))  # type: ignore[no-any-return]
