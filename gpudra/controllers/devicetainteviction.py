"""The device taint eviction controller (KEP-5055): pods whose allocated devices carry a NoExecute taint that their
claim does not tolerate are evicted, at once or after the toleration's `tolerationSeconds`.

Learned from kube-controller-manager's pkg/controller/devicetainteviction/device_taint_eviction.go (kubernetes
v1.34.4, and the v1.36 form that matches DeviceTaintRules itself): `evictionTime` / `claimEvictionTime` (per
allocated device, every NoExecute taint; a toleration with the NoExecute effect that `ToleratesTaint` accepts and no
`tolerationSeconds` ignores the taint, otherwise the smallest `tolerationSeconds` of the matching tolerations, at
least 0, is added to the taint's `timeAdded`; the claim's time is the earliest), `handlePod` (only scheduled pods;
each pod claim found as `resourceclaim.Name` finds it, a template claim must be controlled by the pod
(`IsForPod`), every claim must list the pod in `reservedFor`; the pod's time is the earliest of its claims) and
`addConditionAndDeletePod` (condition DisruptionTarget, reason DeletionByDeviceTaintManager, event
DeviceTaintManagerEviction "Marking for deletion", then the deletion). Tolerations are the ones the allocator
copied into each allocation result (`results[].tolerations`), not the request's. Only the newest generation of a
pool counts (`pool.getDevice`). The controller runs when both DynamicResourceAllocation and DRADeviceTaints are on
(cmd/kube-controller-manager/app/core.go); DeviceTaintRules count when their gate is on (DRADeviceTaintRules from
1.35; in 1.34 they came with DRADeviceTaints). How a rule reaches a device changed: in 1.34 the resourceslicetracker
adds rule taints to the published devices (a device no slice lists has none; selectors with a device class or CEL
count); from 1.35 the controller matches each rule against each allocated device itself (`allEvictingDeviceTaints`,
`ruleMatchesDevice`: driver, pool and device only, a rule without selector matches nothing), slice or not.

Everything here is a function of the objects and the time: the local cluster's control loop
(gpudra.cluster.controller) calls `pod_evictions` each round and deletes the pods whose time has come; a pod whose
taint goes away before then simply stays (upstream's "Cancelling deletion" needs the controller's memory and is
not modelled).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Iterable, Sequence

from gpudra.allocator.claims import tolerates
from gpudra.allocator.taintrules import apply_device_taint_rules
from gpudra.api.objectmeta import key_of
from gpudra.api.podgroupclaims import is_for_pod, is_reserved_for_pod
from gpudra.versions import gate_state
from gpudra.api.objectmeta import parse_time

NO_EXECUTE = "NoExecute"
CONDITION_TYPE = "DisruptionTarget"
CONDITION_REASON = "DeletionByDeviceTaintManager"
CONDITION_MESSAGE = "Device Taint manager: deleting due to NoExecute taint"
EVENT_REASON = "DeviceTaintManagerEviction"
EVENT_MESSAGE = "Marking for deletion"
CONTROLLER_NAME = "device-taint-eviction-controller"

DeviceKey = tuple[str, str, str]  # driver, pool, device


@dataclass(frozen=True)
class PodEviction:
    """A pod that must go, when, and which taints say so ("<driver>/<pool>/<device>: key=value")."""

    pod: str  # namespace/name
    uid: str
    when: datetime
    reasons: tuple[str, ...]

    def due(self, now: datetime) -> bool:
        return self.when <= now


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _gate_on(gate: str, features: Any, version: str) -> bool:
    named = features.gate_enabled(gate) if features is not None else None
    return bool(gate_state(gate, version).default if named is None else named)


def eviction_enabled(features: Any, version: str) -> bool:
    """The controller runs only with DynamicResourceAllocation and DRADeviceTaints on (beta and on from 1.36)."""
    return _gate_on("DynamicResourceAllocation", features, version) and _gate_on("DRADeviceTaints", features, version)


def taint_rules_enabled(features: Any, version: str) -> bool:
    """DeviceTaintRules count when their gate is on: DRADeviceTaintRules from 1.35, DRADeviceTaints in 1.34."""
    gate = "DRADeviceTaintRules" if gate_state("DRADeviceTaintRules", version).stage else "DRADeviceTaints"
    return _gate_on(gate, features, version)


def _pool_of(slice_obj: dict[str, Any]) -> tuple[str, str, int]:
    spec = _dict(slice_obj.get("spec"))
    pool = _dict(spec.get("pool"))
    generation = pool.get("generation")
    return (str(spec.get("driver") or ""), str(pool.get("name") or ""),
            generation if isinstance(generation, int) else 0)


def newest_devices(slices: Iterable[dict[str, Any]]) -> dict[DeviceKey, dict[str, Any]]:
    """(driver, pool, device) -> device, from the slices of each pool's newest generation only."""
    slices = list(slices)
    newest: dict[tuple[str, str], int] = {}
    for slice_obj in slices:
        driver, pool_name, generation = _pool_of(slice_obj)
        newest[(driver, pool_name)] = max(newest.get((driver, pool_name), generation), generation)
    devices: dict[DeviceKey, dict[str, Any]] = {}
    for slice_obj in slices:
        driver, pool_name, generation = _pool_of(slice_obj)
        spec = _dict(slice_obj.get("spec"))
        if generation != newest[(driver, pool_name)]:
            continue
        for device in _list(spec.get("devices")):
            if isinstance(device, dict) and isinstance(device.get("name"), str):
                devices[(driver, pool_name, device["name"])] = device
    return devices


def _taint_text(device: DeviceKey, taint: dict[str, Any]) -> str:
    value = taint.get("value")
    return f"{'/'.join(device)}: {taint.get('key')}" + (f"={value}" if value else "")


def claim_eviction(claim: dict[str, Any], devices: dict[DeviceKey, dict[str, Any]],
                   rules: Sequence[dict[str, Any]] = ()) -> tuple[datetime, tuple[str, ...]] | None:
    """When the pods using this allocated claim must go and why; None: no untolerated NoExecute taint. `rules`:
    DeviceTaintRules matched to the allocated devices directly (1.35+)."""
    when: datetime | None = None
    reasons: list[str] = []
    allocation = _dict(_dict(claim.get("status")).get("allocation"))
    for result in _list(_dict(allocation.get("devices")).get("results")):
        result = _dict(result)
        key = (str(result.get("driver") or ""), str(result.get("pool") or ""), str(result.get("device") or ""))
        device = devices.get(key) or {}  # an unpublished device carries no slice taint, rules may still match
        tolerations = [t for t in _list(result.get("tolerations")) if isinstance(t, dict)]
        taints = [(_dict(t), _taint_text(key, _dict(t))) for t in _list(device.get("taints"))]
        taints += [(_dict(_dict(r.get("spec")).get("taint")), f"DeviceTaintRule {_dict(r.get('metadata')).get('name')}")
                   for r in rules if rule_matches(r, key)]
        for taint, source in taints:
            if taint.get("effect") != NO_EXECUTE:
                continue
            added = parse_time(taint.get("timeAdded"))
            if added is None:
                continue  # the API server always sets timeAdded; upstream computes no time without it
            matching = [t for t in tolerations if t.get("effect") == NO_EXECUTE and tolerates(t, taint)]
            if any(t.get("tolerationSeconds") is None for t in matching):
                continue  # tolerated forever
            if matching:
                added += timedelta(seconds=min(_seconds(t.get("tolerationSeconds")) for t in matching))
            reasons.append(source)
            when = added if when is None or added < when else when
    return None if when is None else (when, tuple(sorted(set(reasons))))


def _seconds(value: Any) -> int:
    """tolerationSeconds as upstream counts it: negative is 0 (the API server only stores integers; anything else
    is read as 0 here rather than stopping the loop)."""
    return max(value, 0) if isinstance(value, int) and not isinstance(value, bool) else 0


def _pod_claim_name(pod: dict[str, Any], pod_claim: dict[str, Any]) -> tuple[str | None, bool]:
    """(claim name or None, whether the claim must be the pod's own): resourceclaim.Name."""
    if isinstance(pod_claim.get("resourceClaimName"), str):
        return pod_claim["resourceClaimName"], False
    if isinstance(pod_claim.get("resourceClaimTemplateName"), str):
        for status in _list(_dict(pod.get("status")).get("resourceClaimStatuses")):
            status = _dict(status)
            if status.get("name") == pod_claim.get("name"):
                name = status.get("resourceClaimName")
                return (name if isinstance(name, str) else None), True
    return None, False


def rules_match_allocations(version: str) -> bool:
    """Whether this release's controller matches DeviceTaintRules to allocated devices itself (1.35+), rather than
    seeing them as slice taints (1.34)."""
    return gate_state("DRADeviceTaintRules", version).stage is not None


def rule_matches(rule: dict[str, Any], device: DeviceKey) -> bool:
    """ruleMatchesDevice: each of driver, pool, device that the selector sets must equal the device's."""
    selector = _dict(rule.get("spec")).get("deviceSelector")
    if not isinstance(selector, dict):
        return False
    return all(not selector.get(field) or selector.get(field) == value
               for field, value in zip(("driver", "pool", "device"), device))


def pod_evictions(pods: Iterable[dict[str, Any]], claims: Iterable[dict[str, Any]], slices: Sequence[dict[str, Any]],
                  rules: Sequence[dict[str, Any]] = (), device_classes: Sequence[dict[str, Any]] = (), *,
                  rules_by_allocation: bool = True, group_claims: bool = False) -> list[PodEviction]:
    """Every scheduled, not yet deleted or finished pod that a NoExecute device taint evicts, earliest first.
    `rules` are the DeviceTaintRules to apply (empty where their gate is off); `rules_by_allocation` says how
    (`rules_match_allocations` of the release). `group_claims` (DRAWorkloadResourceClaims on): a claim of the pod's
    PodGroup, owned by and reserved for the group, counts for each of its pods (IsForPod, IsReservedForPod)."""
    if not any(_dict(_dict(r.get("spec")).get("taint")).get("effect") == NO_EXECUTE for r in rules) and not any(
            _dict(t).get("effect") == NO_EXECUTE for s in slices for d in _list(_dict(s.get("spec")).get("devices"))
            for t in _list(_dict(d).get("taints"))):
        return []  # the common case, every round of a healthy cluster: nothing can evict
    if rules and not rules_by_allocation:
        slices = apply_device_taint_rules(list(slices), list(rules), device_classes)
        rules = ()
    devices = newest_devices(slices)
    claim_times: dict[str, tuple[datetime, tuple[str, ...]] | None] = {}
    by_key = {key_of(c): c for c in claims if _dict(c.get("status")).get("allocation")}
    evictions = []
    for pod in pods:
        meta = _dict(pod.get("metadata"))
        spec, status = _dict(pod.get("spec")), _dict(pod.get("status"))
        if not spec.get("nodeName") or meta.get("deletionTimestamp") or status.get("phase") in ("Succeeded", "Failed"):
            continue
        uid = str(meta.get("uid") or "")
        namespace = str(meta.get("namespace") or "default")
        when: datetime | None = None
        reasons: set[str] = set()
        for pod_claim in _list(spec.get("resourceClaims")):
            name, must_own = _pod_claim_name(pod, _dict(pod_claim))
            claim = by_key.get(f"{namespace}/{name}") if name else None
            if (claim is None or (must_own and is_for_pod(pod, claim, group_claims) is not None)
                    or not is_reserved_for_pod(pod, claim, group_claims)):
                continue
            key = f"{namespace}/{name}"
            if key not in claim_times:
                claim_times[key] = claim_eviction(claim, devices, rules)
            found = claim_times[key]
            if found is None:
                continue
            reasons.update(found[1])
            when = found[0] if when is None or found[0] < when else when
        if when is not None:
            evictions.append(PodEviction(pod=key_of(pod), uid=uid, when=when, reasons=tuple(sorted(reasons))))
    return sorted(evictions, key=lambda e: (e.when, e.pod))


def disruption_condition(now: datetime) -> dict[str, Any]:
    """The condition upstream puts on the pod before deleting it (apipod.UpdatePodCondition)."""
    return {"type": CONDITION_TYPE, "status": "True", "reason": CONDITION_REASON, "message": CONDITION_MESSAGE,
            "lastTransitionTime": now.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}


def with_disruption_condition(status: dict[str, Any], now: datetime) -> dict[str, Any]:
    """The pod status with DisruptionTarget set (an existing one of that type is replaced)."""
    conditions = [c for c in _list(status.get("conditions")) if _dict(c).get("type") != CONDITION_TYPE]
    return {**status, "conditions": conditions + [disruption_condition(now)]}
