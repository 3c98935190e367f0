"""What the allocator caches between calls and between Allocators (parsed slices, per-node pool views,
candidate lists, what candidates consume, parsed classes, claim readings) must follow changed objects.

A changed ResourceSlice, DeviceClass or ResourceClaim arrives either as a new object (as an informer delivers
it) or edited in place with a new generation or resourceVersion. Either way the next allocation must see it:
on a ready Allocator that answered before the change, and on an Allocator built per pod (sharing the caches
of the one before). Each is compared with an Allocator built from deep copies (which shares nothing) and with
the independent reference port (tests/support/reference_allocator.py), and the change must alter the answer (else the
test could not fail on a stale cache).
"""

from __future__ import annotations

from typing import Any, Callable

import pytest

from gpudra.allocator import Allocator, Features, forget_cached_objects
from gpudra.copying import copy_object
from support.reference_allocator import Reference

DRIVER = "gpu.example.com"
FEATURES = Features.parse("default")
NODE = {"metadata": {"name": "n1", "labels": {"zone": "a"}}}


def device_class(selector: str = f'device.driver == "{DRIVER}"') -> dict[str, Any]:
    return {"metadata": {"name": "gpu", "generation": 1}, "spec": {"selectors": [{"cel": {"expression": selector}}]}}


def gpu(index: int, model: str = "H100") -> dict[str, Any]:
    return {"name": f"gpu-{index}", "attributes": {"model": {"string": model}, "index": {"int": index}},
            "capacity": {"memory": {"value": "80Gi"}}}


def node_slice(gpus: int = 4) -> dict[str, Any]:
    return {"metadata": {"name": "n1-gpus", "generation": 1},
            "spec": {"driver": DRIVER, "nodeName": "n1", "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1},
                     "devices": [gpu(i) for i in range(gpus)]}}


def claim(count: int, selector: str | None = None) -> dict[str, Any]:
    request: dict[str, Any] = {"deviceClassName": "gpu", "count": count}
    if selector:
        request["selectors"] = [{"cel": {"expression": selector}}]
    return {"metadata": {"name": f"c{count}", "namespace": "default", "generation": 1},
            "spec": {"devices": {"requests": [{"name": "r", "exactly": request}]}}}


def answer(outcome: Any) -> tuple:
    """Outcome and the devices picked, in order."""
    devices = [[(r["request"], r["device"]) for r in a["devices"]["results"]] for a in outcome.allocations or []]
    return outcome.outcome, devices


def reference_answer(classes: list, slices: list, claims: list) -> tuple:
    kind, payload = Reference(FEATURES, classes, slices, []).allocate(NODE, claims)
    devices = [[(r["request"], r["device"]) for r in a["devices"]["results"]] for a in payload] if kind == "allocated" else []
    return kind, devices


def bump(obj: dict[str, Any], pool: bool = False) -> None:
    """What the API server (metadata.generation) and a driver (spec.pool.generation) do on a change."""
    obj["metadata"]["generation"] += 1
    if pool:
        obj["spec"]["pool"]["generation"] += 1


def remove_first_device(slices: list, classes: list, claims: list, in_place: bool) -> None:
    if in_place:
        del slices[0]["spec"]["devices"][0]
        bump(slices[0], pool=True)
    else:
        changed = copy_object(slices[0])
        del changed["spec"]["devices"][0]
        bump(changed, pool=True)
        slices[0] = changed


def taint_first_device(slices: list, classes: list, claims: list, in_place: bool) -> None:
    target = slices[0] if in_place else copy_object(slices[0])
    target["spec"]["devices"][0]["taints"] = [{"key": "broken", "value": "yes", "effect": "NoSchedule"}]
    bump(target, pool=True)
    slices[0] = target


def new_model_on_first_device(slices: list, classes: list, claims: list, in_place: bool) -> None:
    """Only metadata.generation moves (the driver forgot its pool generation): still a change."""
    target = slices[0] if in_place else copy_object(slices[0])
    target["spec"]["devices"][0]["attributes"]["model"] = {"string": "A100"}
    bump(target)
    slices[0] = target


def narrower_class(slices: list, classes: list, claims: list, in_place: bool) -> None:
    target = classes[0] if in_place else copy_object(classes[0])
    target["spec"]["selectors"] = [{"cel": {"expression": 'device.attributes["gpu.example.com"].index >= 1'}}]
    bump(target)
    classes[0] = target


def bigger_claim(slices: list, classes: list, claims: list, in_place: bool) -> None:
    target = claims[0] if in_place else copy_object(claims[0])
    target["spec"]["devices"]["requests"][0]["exactly"]["count"] = 4
    bump(target)
    claims[0] = target


CHANGES: dict[str, tuple[Callable[..., None], int, str | None]] = {
    # change, GPUs the claim asks for, claim selector
    "device removed": (remove_first_device, 4, None),
    "taint added": (taint_first_device, 1, None),
    "attribute changed": (new_model_on_first_device, 1, 'device.attributes["gpu.example.com"].model == "H100"'),
    "class selector changed": (narrower_class, 1, None),
    "claim changed": (bigger_claim, 1, 'device.attributes["gpu.example.com"].index >= 1'),
}


@pytest.mark.parametrize("in_place", [True, False], ids=["edited in place", "new object"])
@pytest.mark.parametrize("change", list(CHANGES))
def test_a_changed_object_is_seen_by_the_next_allocation(change: str, in_place: bool) -> None:
    edit, count, selector = CHANGES[change]
    classes, slices, claims = [device_class()], [node_slice()], [claim(count, selector)]
    ready = Allocator(classes, slices, [], FEATURES)
    before = answer(ready.allocate(NODE, claims))
    assert before == answer(Allocator(classes, slices, [], FEATURES).allocate(NODE, claims))  # caches warm
    assert before == reference_answer(classes, slices, claims)

    edit(slices, classes, claims, in_place)

    expected = reference_answer(classes, slices, claims)
    assert expected != before, "the change must alter the answer, or a stale cache would go unnoticed"
    fresh = Allocator(copy_object(classes), copy_object(slices), [], FEATURES)
    assert answer(fresh.allocate(NODE, copy_object(claims))) == expected
    assert answer(Allocator(classes, slices, [], FEATURES).allocate(NODE, claims)) == expected  # per pod
    if in_place or change == "claim changed":
        # a ready Allocator keeps its own object lists: it sees edits of its objects, and new claims
        assert answer(ready.allocate(NODE, claims)) == expected
        assert ready.fits(NODE, claims).outcome == expected[0]


def test_an_edit_without_a_new_generation_needs_forget_cached_objects() -> None:
    """Objects are treated as immutable unless their generation or resourceVersion moves (as in Kubernetes);
    `forget_cached_objects` drops everything parsed for edits that do not say so."""
    classes, slices, claims = [device_class()], [node_slice()], [claim(4)]
    assert Allocator(classes, slices, [], FEATURES).allocate(NODE, claims).outcome == "allocated"
    del slices[0]["spec"]["devices"][0]  # no generation bump
    forget_cached_objects()
    assert Allocator(classes, slices, [], FEATURES).allocate(NODE, claims).outcome == "unallocatable"
    assert reference_answer(classes, slices, claims)[0] == "unallocatable"


def test_a_new_resource_version_alone_invalidates() -> None:
    """An informer's object carries the API server's resourceVersion, which moves with every change."""
    classes, slices, claims = [device_class()], [node_slice()], [claim(1)]
    slices[0]["metadata"]["resourceVersion"] = "100"
    ready = Allocator(classes, slices, [], FEATURES)
    assert answer(ready.allocate(NODE, claims))[1] == [[("r", "gpu-0")]]
    slices[0]["spec"]["devices"][0]["taints"] = [{"key": "broken", "effect": "NoExecute"}]
    slices[0]["metadata"]["resourceVersion"] = "101"
    assert answer(ready.allocate(NODE, claims))[1] == [[("r", "gpu-1")]]
    assert answer(ready.allocate(NODE, claims)) == reference_answer(classes, slices, claims)


def test_pods_in_a_row_reuse_the_same_parsed_objects() -> None:
    """The point of the caches: Allocators built one per pod from the same objects share the parsed slices,
    the node's view and the claim's reading (a fresh object list with the same objects counts as the same)."""
    classes, slices, claims = [device_class()], [node_slice()], [claim(1)]
    first = Allocator(classes, slices, [], FEATURES)
    first.allocate(NODE, claims)
    second = Allocator(list(classes), list(slices), [], FEATURES)
    assert second.index is first.index
    assert second.node_view(NODE) is first.node_view(NODE)
    assert second.claim_plan(claims[0]) is first.claim_plan(claims[0])
    other = Allocator(classes, copy_object(slices), [], FEATURES)
    assert other.index is not first.index


def zone_selector(zone: str) -> dict[str, Any]:
    return {"nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": [zone]}]}]}


def select_zone_a(shared: dict[str, Any]) -> None:
    shared["spec"]["nodeSelector"] = zone_selector("a")


def all_nodes(shared: dict[str, Any]) -> None:
    del shared["spec"]["nodeSelector"]
    shared["spec"]["allNodes"] = True


def device_moved_to_zone_a(shared: dict[str, Any]) -> None:
    del shared["spec"]["nodeSelector"]
    shared["spec"]["perDeviceNodeSelection"] = True
    shared["spec"]["devices"][0]["nodeSelector"] = zone_selector("a")


@pytest.mark.parametrize("edit", [select_zone_a, all_nodes, device_moved_to_zone_a])
def test_a_slice_edited_to_reach_the_node_is_seen(edit: Callable[[dict[str, Any]], None]) -> None:
    """A slice that did not reach the node and, edited in place (a new generation), now does: its devices
    join the node's pools (a slice's nodeSelector, allNodes and per-device node selection may change; only
    nodeName is immutable, ResourceSliceSpec in k8s.io/api resource/v1). The node's cached view was built
    without that slice, so the check for stale views cannot look only at the slices behind the view."""
    classes, claims = [device_class()], [claim(2)]
    shared = {"metadata": {"name": "zone-b", "generation": 1},
              "spec": {"driver": DRIVER, "nodeSelector": zone_selector("b"),
                       "pool": {"name": "zone-b", "generation": 1, "resourceSliceCount": 1}, "devices": [gpu(9)]}}
    slices = [node_slice(gpus=1), shared]
    ready = Allocator(classes, slices, [], FEATURES)
    before = answer(ready.allocate(NODE, claims))
    assert before == reference_answer(classes, slices, claims) == ("unallocatable", [])

    edit(shared)
    bump(shared, pool=True)

    expected = reference_answer(classes, slices, claims)
    assert expected[0] == "allocated"
    assert answer(Allocator(copy_object(classes), copy_object(slices), [], FEATURES).allocate(NODE, claims)) == expected
    assert answer(Allocator(classes, slices, [], FEATURES).allocate(NODE, claims)) == expected  # per pod
    assert answer(ready.allocate(NODE, claims)) == expected
    assert ready.fits(NODE, claims).outcome == "allocated"


def test_a_counter_slice_of_the_node_edited_to_hold_devices_is_seen() -> None:
    """With DRAPartitionableDevices off the allocator skips a slice with counter sets (upstream GatherPools), so
    a node's own counter slice is not behind its view; edited in place into a slice of devices (same nodeName,
    a new generation), its devices are the node's."""
    features = Features.parse("default,-PartitionableDevices")
    classes, claims = [device_class()], [claim(2)]
    counters = {"metadata": {"name": "n1-counters", "generation": 1},
                "spec": {"driver": DRIVER, "nodeName": "n1",
                         "pool": {"name": "n1-counters", "generation": 1, "resourceSliceCount": 1},
                         "sharedCounters": [{"name": "memory", "counters": {"bytes": {"value": "80Gi"}}}]}}
    slices = [node_slice(gpus=1), counters]

    def reference() -> tuple:
        kind, payload = Reference(features, classes, slices, []).allocate(NODE, claims)
        return kind, [[(r["request"], r["device"]) for r in a["devices"]["results"]] for a in payload] if (
            kind == "allocated") else []

    ready = Allocator(classes, slices, [], features)
    assert answer(ready.allocate(NODE, claims)) == reference() == ("unallocatable", [])

    del counters["spec"]["sharedCounters"]
    counters["spec"]["devices"] = [gpu(9)]
    bump(counters, pool=True)

    expected = reference()
    assert expected[0] == "allocated"
    assert answer(Allocator(copy_object(classes), copy_object(slices), [], features).allocate(NODE, claims)) == expected
    assert answer(Allocator(classes, slices, [], features).allocate(NODE, claims)) == expected  # per pod
    assert answer(ready.allocate(NODE, claims)) == expected
