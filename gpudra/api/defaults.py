"""Defaulting as the API server applies it to resource.k8s.io/v1 objects.

- ExactDeviceRequest / DeviceSubRequest: empty `allocationMode` becomes `ExactCount`; with ExactCount a zero or
  missing `count` becomes 1.
- DeviceToleration: empty `operator` becomes `Equal`.
- DeviceTaint (in a ResourceSlice's devices and a DeviceTaintRule's spec): `timeAdded` becomes the current time
  (only when `now` is given, so results stay reproducible).
Objects in v1beta1 / v1beta2 are converted to v1 first. The input is never modified.
A ComputeDomain (resource.nvidia.com/v1beta1) gets its CRD's defaults (gpudra.api.schema.computedomain).
"""

from __future__ import annotations

from typing import Any

from gpudra.api.convert import to_v1
from gpudra.api.schema import computedomain


def apply_defaults(obj: dict[str, Any], now: str | None = None) -> dict[str, Any]:
    if computedomain.is_compute_domain(obj):
        return computedomain.apply_defaults(obj)
    result = to_v1(obj)
    kind = result.get("kind")
    spec = result.get("spec")
    if not isinstance(spec, dict):
        return result
    if kind == "ResourceClaim":
        default_claim_spec(spec)
        _default_status(result.get("status"))
    elif kind == "ResourceClaimTemplate" and isinstance(spec.get("spec"), dict):
        default_claim_spec(spec["spec"])
    elif kind == "ResourceSlice":
        for device in _dicts(spec.get("devices")):
            for taint in _dicts(device.get("taints")):
                if now is not None and not taint.get("timeAdded"):
                    taint["timeAdded"] = now
    elif kind == "DeviceTaintRule" and isinstance(spec.get("taint"), dict):
        if now is not None and not spec["taint"].get("timeAdded"):
            spec["taint"]["timeAdded"] = now
    return result


def default_claim_spec(spec: dict[str, Any]) -> dict[str, Any]:
    """Default a ResourceClaimSpec in place (also used for templates); returns it."""
    devices = spec.get("devices")
    if not isinstance(devices, dict):
        return spec
    for request in _dicts(devices.get("requests")):
        exactly = request.get("exactly")
        if isinstance(exactly, dict):
            _default_request(exactly)
        for sub in _dicts(request.get("firstAvailable")):
            _default_request(sub)
    return spec


def _default_request(request: dict[str, Any]) -> None:
    if not request.get("allocationMode"):
        request["allocationMode"] = "ExactCount"
    if request["allocationMode"] == "ExactCount" and not request.get("count"):
        request["count"] = 1
    for toleration in _dicts(request.get("tolerations")):
        if not toleration.get("operator"):
            toleration["operator"] = "Equal"


def _default_status(status: Any) -> None:
    if not isinstance(status, dict):
        return
    allocation = status.get("allocation")
    devices = allocation.get("devices") if isinstance(allocation, dict) else None
    for result in _dicts(devices.get("results") if isinstance(devices, dict) else None):
        for toleration in _dicts(result.get("tolerations")):
            if not toleration.get("operator"):
                toleration["operator"] = "Equal"


def _dicts(value: Any) -> list[dict[str, Any]]:
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []
