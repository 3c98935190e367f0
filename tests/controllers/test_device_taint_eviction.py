"""The device taint eviction controller against upstream's own cases: TestHandlers of
kubernetes/kubernetes v1.34.4 pkg/controller/devicetainteviction/device_taint_eviction_test.go, copied as data.

Upstream applies each case's events to its informer handlers in every order and requires the same final state
(the pods scheduled for eviction, with their times) whatever the order: that final state is a function of the
objects, which is what `pod_evictions` computes. Each case below is upstream's final objects (initial state plus
events) and its expected `evicting` list. Fixtures keep upstream's names (slice, sliceTainted, inUseClaim, ...).
"""

from __future__ import annotations

import copy
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from gpudra.allocator.features import Features
from gpudra.controllers.devicetainteviction import (
    CONDITION_MESSAGE,
    CONDITION_REASON,
    eviction_enabled,
    pod_evictions,
    rules_match_allocations,
    taint_rules_enabled,
    with_disruption_condition,
)

NODE, NODE2, DRIVER = "worker", "worker-2", "some-driver"
POD, POD_UID, NAMESPACE = "my-pod", "1234", "default"
CLAIM = POD + "-my-resource"
TAINT_KEY, TAINT_VALUE = "example.com/taint", "something"
TAINT_TIME = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
STAMP = TAINT_TIME.strftime("%Y-%m-%dT%H:%M:%SZ")
HOUR = timedelta(seconds=3600)  # upstream's tolerationDuration


def make_slice(node: str, devices: list[dict[str, Any]], *, generation: int = 1, name: str | None = None
               ) -> dict[str, Any]:
    return {"kind": "ResourceSlice", "metadata": {"name": name or f"{node}-{DRIVER}"},
            "spec": {"driver": DRIVER, "nodeName": node, "pool": {"name": node, "generation": generation,
                                                                 "resourceSliceCount": 1}, "devices": devices}}


def taint(effect: str, *, key: str = TAINT_KEY, value: str | None = None, added: bool = True) -> dict[str, Any]:
    out: dict[str, Any] = {"key": key, "effect": effect}
    if value is not None:
        out["value"] = value
    if added:
        out["timeAdded"] = STAMP
    return out


# st.MakeResourceSlice(nodeName, driver).Device("instance").Device("instance-no-schedule", ...)...
simpleSlice = make_slice(NODE, [{"name": "instance"}])
slice_ = make_slice(NODE, [{"name": "instance"},
                           {"name": "instance-no-schedule", "taints": [taint("NoSchedule", added=False)]},
                           {"name": "instance-no-execute", "taints": [taint("NoExecute")]}])


def derived(base: dict[str, Any], edit: Any) -> dict[str, Any]:
    obj = copy.deepcopy(base)
    edit(obj)
    return obj


def _replaced(s: dict[str, Any]) -> None:
    s["metadata"]["name"] += "-updated"
    s["spec"]["pool"]["generation"] += 1


def _other_devices(s: dict[str, Any]) -> None:
    for d in s["spec"]["devices"]:
        d["name"] += "-other"


def _tainted(s: dict[str, Any]) -> None:
    s["spec"]["devices"][0]["taints"] = [taint("NoExecute", value=TAINT_VALUE)]


sliceReplaced = derived(slice_, _replaced)
sliceOtherDevices = derived(slice_, _other_devices)
sliceTainted = derived(slice_, _tainted)


def _extended(s: dict[str, Any]) -> None:
    s["spec"]["devices"].append(dict(copy.deepcopy(s["spec"]["devices"][0]), name="instance-other"))


def _set_effect(effect: str) -> Any:
    def edit(s: dict[str, Any]) -> None:
        for d in s["spec"]["devices"]:
            for t in d.get("taints") or []:
                t["effect"] = effect
    return edit


def _value_other(s: dict[str, Any]) -> None:
    for d in s["spec"]["devices"]:
        for t in d.get("taints") or []:
            t["value"] = (t.get("value") or "") + "-other"


def _twice(s: dict[str, Any]) -> None:
    s["spec"]["devices"][0]["taints"] = [taint("NoExecute"), taint("NoExecute", key=TAINT_KEY + "-other")]


def _untainted(s: dict[str, Any]) -> None:
    s["spec"]["devices"][1]["taints"] = []
    s["spec"]["devices"][2]["taints"] = []


def _slice2(s: dict[str, Any]) -> None:
    s["metadata"]["name"] += "-2"
    s["spec"]["nodeName"] = NODE2
    s["spec"]["pool"]["name"] = NODE2
    s["spec"]["pool"]["generation"] += 1


sliceTaintedExtended = derived(sliceTainted, _extended)
sliceTaintedNoSchedule = derived(sliceTainted, _set_effect("NoSchedule"))
sliceTaintedValueOther = derived(sliceTainted, _value_other)
sliceTaintedTwice = derived(slice_, _twice)
sliceUntainted = derived(slice_, _untainted)
slice2 = derived(slice_, _slice2)

claim = {"kind": "ResourceClaim", "metadata": {"name": CLAIM, "namespace": NAMESPACE},
         "spec": {"devices": {"requests": [{"name": "req-1", "exactly": {"deviceClassName": "my-resource-class"}}]}}}


def in_use(tolerations: list[dict[str, Any]] | None = None, *, owner_uid: str = POD_UID,
           uid: str | None = None) -> dict[str, Any]:
    out = copy.deepcopy(claim)
    out["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "name": POD, "uid": owner_uid,
                                           "controller": True}]
    if uid:
        out["metadata"]["uid"] = uid
    result: dict[str, Any] = {"driver": DRIVER, "pool": NODE, "device": "instance", "request": "req-1"}
    if tolerations is not None:
        result["tolerations"] = tolerations
    out["status"] = {"allocation": {"devices": {"results": [result]}},
                     "reservedFor": [{"resource": "pods", "name": POD, "uid": POD_UID}]}
    return out


def toleration(operator: str, *, key: str | None = None, value: str | None = None,
               seconds: int | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"operator": operator, "effect": "NoExecute"}
    if key is not None:
        out["key"] = key
    if value is not None:
        out["value"] = value
    if seconds is not None:
        out["tolerationSeconds"] = seconds
    return out


inUseClaim = in_use()
inUseClaimWithToleration = in_use([toleration("Equal", key=TAINT_KEY, value=TAINT_VALUE, seconds=3600)])
inUseClaimOld = in_use(owner_uid=POD_UID + "-other", uid="other")


def pod(*, uid: str = POD_UID, node: str | None = NODE, template: bool = False,
        statuses: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    ref = {"name": "my-resource", ("resourceClaimTemplateName" if template else "resourceClaimName"): CLAIM}
    out: dict[str, Any] = {"kind": "Pod", "metadata": {"name": POD, "namespace": NAMESPACE, "uid": uid},
                           "spec": {"resourceClaims": [ref], "containers": [{"name": "c"}]}, "status": {}}
    if node:
        out["spec"]["nodeName"] = node
    if statuses is not None:
        out["status"]["resourceClaimStatuses"] = statuses
    return out


unscheduledPodWithClaimName = pod(node=None)
podWithClaimName = pod()
podWithClaimNameOther = pod(uid=POD_UID + "-other")
podWithClaimTemplate = pod(template=True)
podWithClaimTemplateInStatus = pod(template=True, statuses=[{"name": "my-resource", "resourceClaimName": CLAIM}])
podWithClaimTemplateNoClaimInStatus = pod(template=True, statuses=[{"name": "my-resource"}])

LATER_MANY = [toleration("Equal", key=TAINT_KEY + "-other", value=TAINT_VALUE, seconds=20),
              toleration("Exists", seconds=60), toleration("Exists", seconds=30)]

# name: (final pods, final claims, final slices, expected (pod uid, fire time) or None)
Objects = list[dict[str, Any]]
CASES: dict[str, tuple[Objects, Objects, Objects, tuple[str, datetime] | None]] = {
    "empty": ([], [], [], None),
    "populate-pools": ([], [], [slice_, slice2], None),
    "update-pools": ([], [], [sliceUntainted], None),
    "untainted-claim": ([], [inUseClaim], [slice_, slice2], None),
    "tainted-claim": ([], [inUseClaim], [sliceTainted, slice2], None),
    "evict-pod-resourceclaim": ([podWithClaimName], [inUseClaim], [sliceTainted, slice2], (POD_UID, TAINT_TIME)),
    "evict-pod-resourceclaim-again": ([podWithClaimName], [inUseClaim], [sliceTainted, slice2],
                                      (POD_UID, TAINT_TIME)),
    "evict-pod-after-scheduling": ([podWithClaimName], [inUseClaim], [sliceTainted, slice2], (POD_UID, TAINT_TIME)),
    "evict-pod-resourceclaim-unrelated-changes": ([podWithClaimName], [inUseClaim], [sliceTaintedExtended, slice2],
                                                  (POD_UID, TAINT_TIME)),
    "evict-pod-resourceclaimtemplate": ([podWithClaimTemplateInStatus], [inUseClaim], [sliceTainted, slice2],
                                        (POD_UID, TAINT_TIME)),
    "evict-pod-later": ([podWithClaimName], [inUseClaimWithToleration], [sliceTainted, slice2],
                        (POD_UID, TAINT_TIME + HOUR)),
    "evict-pod-later-many": ([podWithClaimName], [in_use(LATER_MANY)], [sliceTainted, slice2],
                             (POD_UID, TAINT_TIME + timedelta(seconds=30))),
    "evict-pod-toleration-mismatch": (
        [podWithClaimName], [in_use([toleration("Equal", key=TAINT_KEY + "-other", value=TAINT_VALUE, seconds=60)])],
        [sliceTainted, slice2], (POD_UID, TAINT_TIME)),
    "no-evict-pod-toleration-forever": ([podWithClaimName], [in_use([toleration("Exists")])],
                                        [sliceTainted, slice2], None),
    "no-evict-pod-toleration-forever-many": (
        [podWithClaimName], [in_use([toleration("Exists", seconds=60), toleration("Exists")])],
        [sliceTainted, slice2], None),
    "evict-pod-partial-toleration": ([podWithClaimName], [in_use([toleration("Exists", key=TAINT_KEY)])],
                                     [sliceTaintedTwice, slice2], (POD_UID, TAINT_TIME)),
    "evict-pod-many-taints": (
        [podWithClaimName], [in_use([toleration("Exists", key=TAINT_KEY, seconds=60),
                                     toleration("Exists", key=TAINT_KEY + "-other", seconds=30)])],
        [sliceTaintedTwice, slice2], (POD_UID, TAINT_TIME + timedelta(seconds=30))),
    "no-evict-pod-not-scheduled": ([unscheduledPodWithClaimName], [inUseClaim], [sliceTainted, slice2], None),
    "no-evict-no-taint": ([podWithClaimName], [inUseClaim], [simpleSlice], None),
    "no-evict-no-taint-update": ([podWithClaimName], [inUseClaim], [simpleSlice], None),
    "no-evict-pod-resourceclaimtemplate-no-status": ([podWithClaimTemplate], [inUseClaim], [sliceTainted, slice2],
                                                     None),
    "no-evict-pod-resourceclaimtemplate-no-claim": ([podWithClaimTemplateNoClaimInStatus], [inUseClaim],
                                                    [sliceTainted, slice2], None),
    "no-evict-other-device": ([podWithClaimTemplateInStatus], [inUseClaim], [sliceOtherDevices, slice2], None),
    "no-evict-wrong-pod": ([podWithClaimNameOther], [inUseClaim], [sliceTainted, slice2], None),
    "evict-wrong-pod-replaced": ([podWithClaimName], [inUseClaim], [sliceTainted, slice2], (POD_UID, TAINT_TIME)),
    "cancel-eviction-remove-taint": ([podWithClaimTemplateInStatus], [inUseClaim], [slice_, slice2], None),
    "cancel-eviction-reduce-taint": ([podWithClaimTemplateInStatus], [inUseClaim], [sliceTaintedNoSchedule, slice2],
                                     None),
    "eviction-change-taint": ([podWithClaimTemplateInStatus], [inUseClaimWithToleration],
                              [sliceTaintedValueOther, slice2], (POD_UID, TAINT_TIME)),
    "cancel-eviction-remove-taint-in-new-slice": ([podWithClaimTemplateInStatus], [inUseClaim],
                                                  [sliceReplaced, slice2], None),
    "cancel-eviction-remove-slice": ([podWithClaimTemplateInStatus], [inUseClaim], [slice2], None),
    "cancel-eviction-pod-deletion": ([], [in_use([toleration("Exists", seconds=60)])], [sliceTainted, slice2], None),
    "no-evict-wrong-resourceclaim": ([podWithClaimTemplateInStatus], [inUseClaimOld], [sliceTainted, slice2], None),
    "evict-wrong-resourceclaim-replaced": ([podWithClaimTemplateInStatus], [inUseClaim], [sliceTainted, slice2],
                                           (POD_UID, TAINT_TIME)),
    "no-evict-resourceclaim-deallocated": ([podWithClaimTemplateInStatus], [claim], [sliceTainted, slice2], None),
    "no-evict-resourceclaim-deleted": ([podWithClaimTemplateInStatus], [], [sliceTainted, slice2], None),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_upstream_handler_cases(name: str) -> None:
    pods, claims, slices, expected = CASES[name]
    evictions = pod_evictions(pods, claims, slices)
    assert [(e.uid, e.when) for e in evictions] == ([expected] if expected else [])


def test_an_older_pool_generation_does_not_count() -> None:
    # cancel-eviction-remove-taint-in-new-slice with both slices still listed: the tainted slice is generation 1,
    # the untainted replacement generation 2, so the device is untainted (upstream's pool.getDevice)
    assert pod_evictions([podWithClaimTemplateInStatus], [inUseClaim], [sliceTainted, sliceReplaced, slice2]) == []
    assert pod_evictions([podWithClaimTemplateInStatus], [inUseClaim], [sliceTainted, slice2]) != []


# kubernetes v1.36.0 device_taint_eviction_test.go: its rules, matched by the controller itself (1.35+)
def rule(name: str, selector: dict[str, str] | None, *, effect: str = "NoExecute",
         added: datetime = TAINT_TIME) -> dict[str, Any]:
    spec: dict[str, Any] = {"taint": {"key": TAINT_KEY, "value": TAINT_VALUE, "effect": effect,
                                      "timeAdded": added.strftime("%Y-%m-%dT%H:%M:%SZ")}}
    if selector is not None:
        spec["deviceSelector"] = selector
    return {"kind": "DeviceTaintRule", "metadata": {"name": name}, "spec": spec}


ruleEvict = rule("evict", {"driver": DRIVER})
ruleEvictInstance1 = rule("evict-instance", {"driver": DRIVER, "device": "instance"})
ruleEvictInstance2Later = rule("evict-instance-no-execute", {"driver": DRIVER, "device": "instance-no-execute"},
                               added=TAINT_TIME + timedelta(seconds=40))
ruleNone = rule("evict", {"driver": DRIVER}, effect="None")
ruleEvictOther = rule("evict-other", {"device": "instance"})


def _other_devices_allocation(c: dict[str, Any]) -> None:
    c["metadata"]["name"] = CLAIM + "-other"
    c["metadata"]["ownerReferences"][0].update(name=POD + "-other", uid=POD_UID + "-3")
    c["status"]["allocation"]["devices"]["results"] = [
        {"driver": DRIVER, "pool": NODE, "device": device, "request": "req-1"}
        for device in ("instance-no-schedule", "instance-no-execute")]
    c["status"]["reservedFor"] = [{"resource": "pods", "name": POD, "uid": POD_UID},
                                  {"resource": "pods", "name": POD + "-other", "uid": POD_UID + "-3"}]


inUseClaimOtherNameShared = derived(inUseClaim, _other_devices_allocation)
podWithTwoClaimNames = derived(podWithClaimName, lambda p: p["spec"]["resourceClaims"].append(
    {"name": "my-resource-other", "resourceClaimName": CLAIM + "-other"}))
sliceTaintedNone = derived(sliceTainted, _set_effect("None"))
sliceTaintedUnknown = derived(sliceTainted, _set_effect("unknown-effect"))

# name: (pods, claims, slices, rules, expected (pod uid, fire time, reasons) or None)
RULE_CASES: dict[str, tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]],
                            tuple[str, datetime, tuple[str, ...]] | None]] = {
    # no slice at all: the rule alone taints the allocated device
    "evict-pod-rule": ([podWithClaimName], [inUseClaim], [], [ruleEvict],
                       (POD_UID, TAINT_TIME, ("DeviceTaintRule evict",))),
    "evict-pod-rule-later": ([podWithClaimName], [inUseClaimWithToleration], [], [ruleEvict],
                             (POD_UID, TAINT_TIME + HOUR, ("DeviceTaintRule evict",))),
    "none-pod-rule": ([podWithClaimName], [inUseClaim], [slice_], [ruleNone], None),
    "multiple-claims-same-rule": ([podWithTwoClaimNames], [inUseClaim, inUseClaimOtherNameShared], [], [ruleEvict],
                                  (POD_UID, TAINT_TIME, ("DeviceTaintRule evict",))),
    # the earliest time wins, every rule that would evict is a reason (upstream's "order-1" and "order-2")
    "multiple-claims-different-rules": (
        [podWithTwoClaimNames], [inUseClaim, inUseClaimOtherNameShared], [],
        [ruleEvictInstance2Later, ruleEvictInstance1],
        (POD_UID, TAINT_TIME, ("DeviceTaintRule evict-instance", "DeviceTaintRule evict-instance-no-execute"))),
    "ignore-none-effect": ([podWithClaimTemplateInStatus], [inUseClaim], [sliceTaintedNone, slice2], [], None),
    "ignore-unknown-effect": ([podWithClaimTemplateInStatus], [inUseClaim], [sliceTaintedUnknown, slice2], [], None),
}


@pytest.mark.parametrize("name", sorted(RULE_CASES))
def test_upstream_1_36_rule_cases(name: str) -> None:
    pods, claims, slices, rules, expected = RULE_CASES[name]
    evictions = pod_evictions(pods, claims, slices, rules)
    assert [(e.uid, e.when, e.reasons) for e in evictions] == ([expected] if expected else [])


def test_a_rule_selector_matches_driver_pool_and_device_only() -> None:
    assert pod_evictions([podWithClaimName], [inUseClaim], [], [ruleEvictOther]) != []  # device only: any driver
    assert pod_evictions([podWithClaimName], [inUseClaim], [], [rule("x", {"device": "instance-2"})]) == []
    assert pod_evictions([podWithClaimName], [inUseClaim], [], [rule("x", None)]) == []  # no selector: nothing


def test_in_1_34_rules_taint_only_published_devices() -> None:
    """1.34: the resourceslicetracker adds rule taints to slices, so a device no slice lists is not tainted."""
    assert pod_evictions([podWithClaimName], [inUseClaim], [], [ruleEvict], rules_by_allocation=False) == []
    (eviction,) = pod_evictions([podWithClaimName], [inUseClaim], [simpleSlice], [ruleEvict],
                                rules_by_allocation=False)
    assert eviction.when == TAINT_TIME and eviction.reasons == (f"{DRIVER}/{NODE}/instance: {TAINT_KEY}={TAINT_VALUE}",)
    assert not rules_match_allocations("1.34") and rules_match_allocations("1.35") and rules_match_allocations("1.36")


def test_deleted_and_finished_pods_are_left_alone() -> None:
    deleting = derived(podWithClaimName, lambda p: p["metadata"].__setitem__("deletionTimestamp", STAMP))
    finished = derived(podWithClaimName, lambda p: p["status"].__setitem__("phase", "Succeeded"))
    for p in (deleting, finished):
        assert pod_evictions([p], [inUseClaim], [sliceTainted]) == []


def test_the_condition_upstream_writes_before_deleting() -> None:
    status = with_disruption_condition({"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
                                       TAINT_TIME)
    assert status["conditions"][0] == {"type": "Ready", "status": "True"}
    assert {k: status["conditions"][1][k] for k in ("type", "status", "reason", "message")} == {
        "type": "DisruptionTarget", "status": "True", "reason": CONDITION_REASON, "message": CONDITION_MESSAGE}
    assert CONDITION_REASON == "DeletionByDeviceTaintManager"


def test_gates_per_release() -> None:
    # core.go: the controller needs DynamicResourceAllocation and DRADeviceTaints (alpha 1.33, beta on in 1.36)
    assert not eviction_enabled(Features.parse("default", "1.34"), "1.34")
    assert eviction_enabled(Features.parse("default,+DRADeviceTaints", "1.34"), "1.34")
    assert eviction_enabled(Features.parse("default", "1.36"), "1.36")
    assert not eviction_enabled(Features.parse("default,-DRADeviceTaints", "1.36"), "1.36")
    # DeviceTaintRules: DRADeviceTaintRules from 1.35 (beta but off in 1.36), DRADeviceTaints in 1.34
    assert not taint_rules_enabled(Features.parse("default", "1.36"), "1.36")
    assert taint_rules_enabled(Features.parse("default,+DRADeviceTaintRules", "1.36"), "1.36")
    assert taint_rules_enabled(Features.parse("default,+DRADeviceTaints", "1.34"), "1.34")


def test_negative_or_malformed_toleration_seconds_count_as_zero() -> None:
    for seconds in (-5, "60", 1.5, True):
        claim_ = in_use([toleration("Exists")])
        claim_["status"]["allocation"]["devices"]["results"][0]["tolerations"][0]["tolerationSeconds"] = seconds
        (eviction,) = pod_evictions([podWithClaimName], [claim_], [sliceTainted])
        assert eviction.when == TAINT_TIME, seconds


# kubernetes v1.36.0 device_taint_eviction_test.go TestHandlers: evict-pod-resourceclaim-podgroup and
# no-evict-pod-in-podgroup-without-claim (workloadResourceClaimsEnabled), the PodGroup's claim owned by and
# reserved for my-podgroup (uid 5678); with the gate off a group's reservation is no pod's
inUseClaimByPodGroup = copy.deepcopy(inUseClaim)
inUseClaimByPodGroup["metadata"]["ownerReferences"] = [{"apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "PodGroup",
                                                        "name": "my-podgroup", "uid": "5678", "controller": True}]
inUseClaimByPodGroup["status"]["reservedFor"] = [{"apiGroup": "scheduling.k8s.io", "resource": "podgroups",
                                                  "name": "my-podgroup", "uid": "5678"}]
podWithPodGroupClaim = pod()
podWithPodGroupClaim["spec"]["schedulingGroup"] = {"podGroupName": "my-podgroup"}
podWithPodGroup = copy.deepcopy(podWithPodGroupClaim)
podWithPodGroup["spec"].pop("resourceClaims")


@pytest.mark.parametrize("case, pods, group_claims, expected", [
    ("evict-pod-resourceclaim-podgroup", [podWithPodGroupClaim], True, [(POD_UID, TAINT_TIME)]),
    ("no-evict-pod-in-podgroup-without-claim", [podWithPodGroup], True, []),
    ("evict-pod-resourceclaim-podgroup, gate off", [podWithPodGroupClaim], False, []),
])
def test_pod_group_claims(case: str, pods: Objects, group_claims: bool, expected: list[Any]) -> None:
    evictions = pod_evictions(pods, [inUseClaimByPodGroup], [sliceTainted, slice2], group_claims=group_claims)
    assert [(e.uid, e.when) for e in evictions] == expected
