"""Device binding conditions (KEP-5007): the DynamicResources PreBind wait for devices that must be attached first.

A device in a ResourceSlice may list `bindingConditions` and `bindingFailureConditions`; the allocator copies both
into the claim's allocation result. With the gates DRADeviceBindingConditions and DRAResourceClaimDeviceStatus on
(the allocator feature `DeviceBindingAndStatus`), kube-scheduler's PreBind writes the allocation with an
`allocationTimestamp`, then waits until every binding condition is True in the claim's
`status.devices[].conditions` (written by the device's driver or controller). A True failure condition, or the
binding timeout passed since the allocation timestamp, fails PreBind: Unreserve takes the pod out of reservedFor,
the pod goes back to the queue, and its next attempt's Filter finds the claim "not available on the node" so
PostFilter deallocates it.

Learned from kubernetes v1.34.4, v1.35.0 and v1.36.0 pkg/scheduler/framework/plugins/dynamicresources/
dynamicresources.go (`isClaimReadyForBinding`, `isClaimTimeout`, `isPodReadyForBinding`, `hasBindingConditions`,
`PreBind`, `Filter`) and pkg/scheduler/apis/config/types_pluginargs.go (`DynamicResourcesArgs.BindingTimeout`,
default `DynamicResourcesBindingTimeoutDefault` = 600 s; 1.34 has the constant `BindingTimeoutDefaultSeconds`).
This module is pure: the claim, the time and the timeout come in, a `BindingState` goes out.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any
from gpudra.api.objectmeta import parse_time

BINDING_TIMEOUT_S = 600.0  # DynamicResourcesBindingTimeoutDefault (1.35+), BindingTimeoutDefaultSeconds (1.34)
MIN_BINDING_TIMEOUT_S = 1.0  # ValidateDynamicResourcesArgs: "must be at least 1 second"
PREBIND_PLUGIN_ERROR = 'running PreBind plugin "DynamicResources": '  # framework.go RunPreBindPlugins

READY, WAITING, FAILED, TIMED_OUT = "ready", "waiting", "failed", "timed-out"


@dataclass(frozen=True)
class PendingCondition:
    """One binding condition not True yet on one allocated device."""

    claim: str  # claim name
    driver: str
    pool: str
    device: str
    condition: str

    def describe(self) -> str:
        return f"condition {self.condition} on device {self.driver}/{self.pool}/{self.device}"


@dataclass(frozen=True)
class BindingState:
    """Where one claim (or a pod's claims together) stands at PreBind."""

    state: str  # READY | WAITING | FAILED | TIMED_OUT
    claim: str = ""  # the claim that failed or timed out
    reason: str = ""  # the failure condition's reason and message (FAILED)
    message: str = ""
    pending: tuple[PendingCondition, ...] = ()  # WAITING: the conditions not True yet

    def error(self, kubernetes_version: str) -> str:
        """The PreBind error as the release words it (empty unless FAILED or TIMED_OUT)."""
        new_words = _minor(kubernetes_version) >= 36
        if self.state == FAILED:
            quoted = _go_quote(self.message)
            if new_words:  # ErrDeviceBindingFailed wrapped, 1.36
                return f"device binding failed: claim={self.claim}, reason={self.reason}, message={quoted}"
            return f"claim {self.claim} binding failed: reason={self.reason}, message={quoted}"
        if self.state == TIMED_OUT:
            if new_words:  # ErrDeviceBindingTimeout wrapped, 1.36
                return f"device binding timeout: claim={self.claim}"
            return f"claim {self.claim} binding timeout"
        return ""

    def waiting_text(self) -> str:
        """'waiting for condition attached on device nic.example.com/pool/nic-0, …'."""
        return "waiting for " + ", ".join(p.describe() for p in self.pending)


def _minor(version: str) -> int:
    return int(version.split(".")[1])


def _go_quote(text: str) -> str:
    """Go's %q for the printable ASCII and common escapes a condition message holds (json.dumps agrees there)."""
    return json.dumps(text, ensure_ascii=False)


def format_time(moment: datetime) -> str:
    """metav1.Time's wire form: seconds, UTC, 'Z'."""
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _results(claim: dict[str, Any]) -> list[dict[str, Any]]:
    allocation = (claim.get("status") or {}).get("allocation") or {}
    return [r for r in (allocation.get("devices") or {}).get("results") or [] if isinstance(r, dict)]


def has_binding_conditions(claim: dict[str, Any]) -> bool:
    """hasBindingConditions for one claim: some allocated device lists a binding condition."""
    return any(result.get("bindingConditions") for result in _results(claim))


def _device_status(claim: dict[str, Any], result: dict[str, Any]) -> dict[str, Any] | None:
    """getAllocatedDeviceStatus: the status.devices entry for the result's driver, pool and device."""
    for entry in (claim.get("status") or {}).get("devices") or []:
        if (isinstance(entry, dict) and entry.get("driver") == result.get("driver")
                and entry.get("pool") == result.get("pool") and entry.get("device") == result.get("device")):
            return entry
    return None


def _condition(entry: dict[str, Any] | None, kind: str) -> dict[str, Any] | None:
    """apimeta.FindStatusCondition."""
    for condition in (entry or {}).get("conditions") or []:
        if isinstance(condition, dict) and condition.get("type") == kind:
            return condition
    return None


def claim_binding_state(claim: dict[str, Any], now: datetime, timeout_s: float = BINDING_TIMEOUT_S) -> BindingState:
    """isClaimReadyForBinding, then isClaimTimeout where it is not ready: a device without a status entry waits,
    a True failure condition fails, every binding condition True is ready (a claim without binding conditions
    is ready at once); not ready past allocationTimestamp + timeout is timed out (no timestamp: never)."""
    name = str((claim.get("metadata") or {}).get("name") or "")
    results = _results(claim)
    if not results and (claim.get("status") or {}).get("allocation") is None:
        return BindingState(WAITING, name)
    pending: list[PendingCondition] = []
    for result in results:
        conditions = list(result.get("bindingConditions") or [])
        if not conditions:
            continue
        entry = _device_status(claim, result)
        ids = (str(result.get("driver", "")), str(result.get("pool", "")), str(result.get("device", "")))
        if entry is None:
            pending.extend(PendingCondition(name, *ids, str(c)) for c in conditions)
            continue
        for failure in result.get("bindingFailureConditions") or []:
            found = _condition(entry, failure)
            if found is not None and found.get("status") == "True":
                return BindingState(FAILED, name, str(found.get("reason") or ""), str(found.get("message") or ""))
        pending.extend(PendingCondition(name, *ids, str(c)) for c in conditions
                       if (_condition(entry, c) or {}).get("status") != "True")
    if not pending:
        return BindingState(READY, name)
    # isClaimTimeout: any result whose bindingConditions is set (even empty) with the timestamp past the timeout
    stamp = parse_time(((claim.get("status") or {}).get("allocation") or {}).get("allocationTimestamp"))
    if stamp is not None and any(r.get("bindingConditions") is not None for r in results):
        if stamp + timedelta(seconds=timeout_s) < now:
            return BindingState(TIMED_OUT, name)
    return BindingState(WAITING, name, pending=tuple(pending))


def pod_binding_state(claims: list[dict[str, Any]], now: datetime, timeout_s: float = BINDING_TIMEOUT_S) -> BindingState:
    """isPodReadyForBinding: the first claim that failed, timed out or waits decides, in the pod's claim order;
    the waits of all waiting claims are listed together."""
    pending: list[PendingCondition] = []
    first_wait: BindingState | None = None
    for claim in claims:
        state = claim_binding_state(claim, now, timeout_s)
        if state.state in (FAILED, TIMED_OUT) and first_wait is None:
            return state
        if state.state == WAITING:
            first_wait = first_wait or state
            pending.extend(state.pending)
    if first_wait is None:
        return BindingState(READY)
    return BindingState(WAITING, first_wait.claim, pending=tuple(pending))


def unavailable_for_binding(claim: dict[str, Any], now: datetime, timeout_s: float = BINDING_TIMEOUT_S) -> str | None:
    """The Filter check on an allocated claim: FAILED or TIMED_OUT (the claim is then "not available on the node"
    on every node, so that PostFilter deallocates it); None otherwise."""
    if (claim.get("status") or {}).get("allocation") is None:
        return None
    state = claim_binding_state(claim, now, timeout_s)
    return state.state if state.state in (FAILED, TIMED_OUT) else None
