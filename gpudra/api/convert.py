"""Convert resource.k8s.io v1beta1 / v1beta2 (and v1alpha3) objects to v1, as the API server does.

v1beta2 and v1 share one layout. v1beta1 (and v1alpha3) differ in three places:
- a request's fields sit directly on the request; v1 wraps them in `exactly` (or uses `firstAvailable`);
- a device's fields sit under `basic`; v1 puts them on the device itself;
- v1alpha3 capacities are bare quantities; later versions write `{value: …}`.
The same helpers repair v1 documents written in an older layout (`gpudra validate --fix`).
"""

from __future__ import annotations

from typing import Any

from gpudra.copying import copy_object
from gpudra.plain import as_list

GROUP = "resource.k8s.io"
V1 = f"{GROUP}/v1"
OLD_VERSIONS = (f"{GROUP}/v1beta1", f"{GROUP}/v1beta2", f"{GROUP}/v1alpha3")
DRA_KINDS = ("DeviceClass", "ResourceSlice", "ResourceClaim", "ResourceClaimTemplate")

# Fields of a v1beta1 DeviceRequest that v1 moved into ExactDeviceRequest.
EXACT_REQUEST_FIELDS = (
    "deviceClassName", "selectors", "allocationMode", "count", "adminAccess", "tolerations", "capacity",
)


def needs_conversion(obj: Any) -> bool:
    return isinstance(obj, dict) and obj.get("apiVersion") in OLD_VERSIONS and obj.get("kind") in DRA_KINDS


def to_v1(obj: dict[str, Any]) -> dict[str, Any]:
    """A v1 copy of a DRA object in any served version; other objects are returned as a copy unchanged."""
    result = copy_object(obj)
    if not needs_conversion(obj):
        return result
    result["apiVersion"] = V1
    upgrade_layout(result)
    return result


def upgrade_layout(obj: dict[str, Any]) -> list[str]:
    """Rewrite old-layout fragments of a DRA object in place; returns the paths that changed."""
    changed: list[str] = []
    kind = obj.get("kind")
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return changed
    if kind == "ResourceSlice":
        for position, device in enumerate(as_list(spec.get("devices"))):
            if isinstance(device, dict) and flatten_device(device):
                changed.append(f"spec.devices[{position}]")
    elif kind == "ResourceClaim":
        changed += _upgrade_claim_spec(spec, "spec")
    elif kind == "ResourceClaimTemplate":
        inner = spec.get("spec")
        if isinstance(inner, dict):
            changed += _upgrade_claim_spec(inner, "spec.spec")
    return changed


def _upgrade_claim_spec(spec: dict[str, Any], path: str) -> list[str]:
    changed: list[str] = []
    devices = spec.get("devices")
    if not isinstance(devices, dict):
        return changed
    for position, request in enumerate(as_list(devices.get("requests"))):
        if isinstance(request, dict) and wrap_request(request):
            changed.append(f"{path}.devices.requests[{position}]")
    return changed



def wrap_request(request: dict[str, Any]) -> bool:
    """Move v1beta1 flat request fields under `exactly`, in place, keeping key order. True if changed."""
    flat = [name for name in EXACT_REQUEST_FIELDS if name in request]
    if not flat or request.get("firstAvailable"):
        # v1beta1 forbids the flat fields next to firstAvailable; leave them for validation to report.
        return False
    moved = {name: request[name] for name in request if name in EXACT_REQUEST_FIELDS}
    rebuilt: dict[str, Any] = {}
    for name, value in request.items():
        if name in EXACT_REQUEST_FIELDS:
            if "exactly" not in rebuilt:
                exactly = request.get("exactly")
                existing = exactly if isinstance(exactly, dict) else {}
                rebuilt["exactly"] = {**moved, **existing}
            continue
        if name == "exactly" and "exactly" in rebuilt:
            continue
        rebuilt[name] = value
    request.clear()
    request.update(rebuilt)
    return True


def flatten_device(device: dict[str, Any]) -> bool:
    """Lift a v1beta1 `basic` device's fields onto the device, in place; also fix bare capacities."""
    changed = False
    basic = device.get("basic")
    if "basic" in device:
        rebuilt: dict[str, Any] = {}
        for name, value in device.items():
            if name == "basic":
                if isinstance(basic, dict):
                    for inner_name, inner_value in basic.items():
                        rebuilt.setdefault(inner_name, inner_value)
                continue
            rebuilt[name] = value
        device.clear()
        device.update(rebuilt)
        changed = True
    capacity = device.get("capacity")
    if isinstance(capacity, dict):
        for name, value in list(capacity.items()):
            if isinstance(value, (str, int)) and not isinstance(value, bool):
                capacity[name] = {"value": value}
                changed = True
    return changed


def newer_layout_paths(obj: dict[str, Any]) -> list[tuple[str, str]]:
    """(path, field) of v1-only fields in a v1beta1 / v1alpha3 object, which those versions do not know."""
    if obj.get("apiVersion") not in (f"{GROUP}/v1beta1", f"{GROUP}/v1alpha3"):
        return []
    found: list[tuple[str, str]] = []
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return found
    kind = obj.get("kind")
    if kind == "ResourceSlice":
        for position, device in enumerate(as_list(spec.get("devices"))):
            if isinstance(device, dict):
                found += [(f"spec.devices[{position}].{name}", name) for name in device if name not in ("name", "basic")]
    elif kind in ("ResourceClaim", "ResourceClaimTemplate"):
        inner = spec.get("spec") if kind == "ResourceClaimTemplate" else spec
        base = "spec.spec" if kind == "ResourceClaimTemplate" else "spec"
        devices = inner.get("devices") if isinstance(inner, dict) else None
        for position, request in enumerate(as_list(devices.get("requests") if isinstance(devices, dict) else None)):
            if isinstance(request, dict) and "exactly" in request:
                found.append((f"{base}.devices.requests[{position}].exactly", "exactly"))
    return found
