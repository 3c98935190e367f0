"""Upstream's three allocator variants (k8s.io/dynamic-resource-allocation v0.36.2): which one runs,
and one test per behavioural difference between them (and the upstream quirks shared by all).

The same input is answered by the variant the feature gates choose and, forced with
`with_variant` (upstream's EnableAllocators), by another one; each test shows the two answers.
"""

from __future__ import annotations

import pytest

from gpudra.allocator import Allocator, Features
from test_allocator_unit import claim, device, exact, gpu_class, picked, slice_obj

STABLE = Features.parse("none,PrioritizedList,PartitionableDevices,DeviceTaints,AdminAccess")
INCUBATING = STABLE.with_variant("incubating")


def allocate(features, slices, claims, node="n1", classes=None, allocated=None):
    return Allocator(classes or [gpu_class()], slices, allocated or [], features).allocate(node, claims)


def one_gpu(name="c", count=1, **fields):
    return [claim(name, [exact("gpu", count=count, **fields)])]


# which variant runs ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("tokens", "variant"),
    [
        ("none", "stable"),
        ("none,PrioritizedList,PartitionableDevices,DeviceTaints,AdminAccess", "stable"),
        ("none,ConsumableCapacity", "incubating"),
        ("none,DeviceBindingAndStatus", "incubating"),
        ("default", "incubating"),  # kube-scheduler 1.36's defaults
        ("default,-DeviceTaints", "incubating"),
        ("none,ListTypeAttributes", "experimental"),
        ("all", "experimental"),
    ],
)
def test_variant_choice_is_the_first_variant_supporting_every_enabled_feature(tokens, variant):
    assert Features.parse(tokens).variant_name == variant


def test_forcing_a_variant_that_lacks_an_enabled_feature_is_refused():
    assert Features.parse("none,AdminAccess").with_variant("experimental").variant_name == "experimental"
    with pytest.raises(ValueError, match="does not support"):
        Features.parse("default").with_variant("stable")
    with pytest.raises(ValueError, match="unknown allocator"):
        STABLE.with_variant("bogus")


# pool gathering ---------------------------------------------------------------------------------------
def test_slice_order_in_a_pool_stable_input_order_incubating_by_name():
    # One pool in two slices whose names sort against the input (and device) order.
    slices = [
        slice_obj("pool-z", "n1", [device("gpu-0"), device("gpu-1")], pool="n1", count=2),
        slice_obj("pool-a", "n1", [device("gpu-2"), device("gpu-3")], pool="n1", count=2),
    ]
    assert picked(allocate(STABLE, slices, one_gpu())) == ["gpu-0"]
    assert picked(allocate(INCUBATING, slices, one_gpu())) == ["gpu-2"]


def test_pool_order_stable_first_seen_incubating_sorted_by_driver_and_name():
    # Upstream's stable variant ranges over a Go map (a random order); gpudra takes the order in
    # which pools are first seen. incubating sorts by (driver, pool name).
    slices = [
        slice_obj("s-b", "n1", [device("gpu-b")], pool="pool-b"),
        slice_obj("s-a", "n1", [device("gpu-a")], pool="pool-a"),
    ]
    assert picked(allocate(STABLE, slices, one_gpu())) == ["gpu-b"]
    assert picked(allocate(INCUBATING, slices, one_gpu())) == ["gpu-a"]


def test_binding_condition_pools_go_last_in_incubating_even_with_the_gate_off():
    # pool-a holds a device with binding conditions (not allocatable with the gate off) and an
    # ordinary one; incubating still visits the whole pool after pool-b.
    slices = [
        slice_obj("s-a", "n1", [device("gpu-a0", bindingConditions=["ready"]), device("gpu-a1")], pool="pool-a"),
        slice_obj("s-b", "n1", [device("gpu-b")], pool="pool-b"),
    ]
    assert not INCUBATING.device_binding_and_status
    assert picked(allocate(INCUBATING, slices, one_gpu())) == ["gpu-b"]
    assert picked(allocate(STABLE, slices, one_gpu())) == ["gpu-a1"]


def test_completeness_takes_the_resource_slice_count_of_the_first_slice_gathered():
    # Two slices of one generation disagree about resourceSliceCount. stable reads the count of
    # the first slice in input order (1: two slices are too many, so the pool is incomplete);
    # incubating gathers the node's own slices first and reads 2 (complete; its slices by name).
    slices = [
        slice_obj("everywhere", None, [device("gpu-1")], pool="p", count=1, allNodes=True),
        slice_obj("local", "n1", [device("gpu-0")], pool="p", count=2),
    ]
    assert allocate(STABLE, slices, one_gpu()).outcome == "unallocatable"
    assert picked(allocate(INCUBATING, slices, one_gpu())) == ["gpu-1"]


def test_more_slices_than_the_count_make_a_pool_incomplete():
    # From n1 one slice of three is visible; the cluster has three where the pool says two.
    slices = [slice_obj(f"s{i}", f"n{i}", [device(f"gpu-{i}")], pool="p", count=2) for i in (1, 2, 3)]
    for features in (STABLE, INCUBATING):
        assert allocate(features, slices, one_gpu()).outcome == "unallocatable"
    assert picked(allocate(STABLE, slices[:2], one_gpu())) == ["gpu-1"]


def test_per_device_node_selection_set_to_false_hides_the_slice_while_partitionable_is_off():
    # Upstream tests the field's presence, not its value.
    slices = [slice_obj("s", "n1", [device("gpu-0")], perDeviceNodeSelection=False)]
    assert allocate(Features.parse("none"), slices, one_gpu()).outcome == "unallocatable"
    assert picked(allocate(Features.parse("none,PartitionableDevices"), slices, one_gpu())) == ["gpu-0"]


# the search ----------------------------------------------------------------------------------------------
def _leaky_pool():
    # Four devices that each take one of four counters; d1 is on the other NUMA node, so the
    # matchAttribute constraint rejects it after it took its counter (which it keeps: upstream quirk).
    devices = [
        device(f"d{i}", attributes={"numa": {"int": int(i == 1)}},
               consumesCounters=[{"counterSet": "s", "counters": {"c": {"value": "1"}}}])
        for i in range(4)
    ]
    counters = slice_obj("counters", None, [], pool="n1", count=2,
                         sharedCounters=[{"name": "s", "counters": {"c": {"value": "4"}}}])
    del counters["spec"]["devices"]
    return [slice_obj("devices", "n1", devices, count=2), counters]


def test_stable_tries_permutations_incubating_combinations():
    # incubating looks for the third device only after the second (d3), and fits; stable also
    # retries d1 in third place, which leaks the last counter, and finds nothing.
    wanted = [claim("c", [exact("gpu", count=3)], constraints=[{"matchAttribute": "gpu.example.com/numa"}])]
    features = Features.parse("none,PartitionableDevices")
    assert allocate(features, _leaky_pool(), wanted).outcome == "unallocatable"
    assert picked(allocate(features.with_variant("incubating"), _leaky_pool(), wanted)) == ["d0", "d2", "d3"]


def test_distinct_attribute_is_honoured_by_incubating_without_consumable_capacity():
    slices = [slice_obj("s", "n1", [device(f"gpu-{i}", attributes={"slot": {"int": i // 2}}) for i in range(4)])]
    wanted = [claim("c", [exact("gpu", count=2)], constraints=[{"distinctAttribute": "gpu.example.com/slot"}])]
    assert picked(allocate(INCUBATING, slices, wanted)) == ["gpu-0", "gpu-2"]
    outcome = allocate(STABLE, slices, wanted)
    assert outcome.outcome == "error" and "empty constraint" in outcome.error


def test_capacity_field_without_consumable_capacity_is_ignored_by_stable_and_rejected_by_incubating():
    slices = [slice_obj("s", "n1", [device("gpu-0")])]
    for capacity in ({"requests": {"memory": "1Gi"}}, {}):
        wanted = one_gpu(capacity=capacity)
        assert picked(allocate(STABLE, slices, wanted)) == ["gpu-0"]
        outcome = allocate(INCUBATING, slices, wanted)
        assert outcome.outcome == "error" and "DRAConsumableCapacity feature is disabled" in outcome.error


# results ------------------------------------------------------------------------------------------------
def test_tolerations_are_copied_into_results_with_device_taints_off():
    toleration = {"key": "maintenance", "operator": "Exists", "effect": "NoSchedule"}
    slices = [slice_obj("s", "n1", [device("gpu-0", taints=[{"key": "maintenance", "effect": "NoSchedule"}])])]
    for features in (Features.parse("default,-DeviceTaints"), Features.parse("none")):
        outcome = allocate(features, slices, one_gpu(tolerations=[toleration]))
        assert outcome.allocations[0]["devices"]["results"][0]["tolerations"] == [toleration]
    # Without the gate the taint does not count, so an untolerating request gets the device too.
    untolerated = allocate(Features.parse("default,-DeviceTaints"), slices, one_gpu())
    assert picked(untolerated) == ["gpu-0"] and "tolerations" not in untolerated.allocations[0]["devices"]["results"][0]


def test_admin_access_results_follow_the_variant_slice_order():
    slices = [
        slice_obj("pool-z", "n1", [device("gpu-0"), device("gpu-1")], pool="n1", count=2),
        slice_obj("pool-a", "n1", [device("gpu-2"), device("gpu-3")], pool="n1", count=2),
    ]
    everything = [claim("c", [exact("gpu", allocationMode="All", adminAccess=True)])]
    stable = allocate(STABLE, slices, everything)
    assert picked(stable) == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]
    assert all(r["adminAccess"] for r in stable.allocations[0]["devices"]["results"])
    assert picked(allocate(INCUBATING, slices, everything)) == ["gpu-2", "gpu-3", "gpu-0", "gpu-1"]
    two = one_gpu(count=2, adminAccess=True)
    assert picked(allocate(STABLE, slices, two)) == ["gpu-0", "gpu-1"]
    assert picked(allocate(INCUBATING, slices, two)) == ["gpu-2", "gpu-3"]


def test_binds_to_node_pins_the_node_selector_except_in_stable():
    selector = {"nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}
    slices = [slice_obj("s", None, [device("gpu-0", bindsToNode=True)], pool="net", nodeSelector=selector)]
    node = {"metadata": {"name": "n1", "labels": {"zone": "a"}}}
    pinned = allocate(INCUBATING, slices, one_gpu(), node=node)
    assert pinned.allocations[0]["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["values"] == ["n1"]
    assert allocate(STABLE, slices, one_gpu(), node=node).allocations[0]["nodeSelector"] == selector


# quirks every variant shares -------------------------------------------------------------------------------
def test_counters_are_kept_per_pool_name_across_drivers():
    # Two drivers publish a pool called n1, each with its own counter set. Upstream keys counter
    # bookkeeping by pool name alone, so the second driver's device is checked against the first
    # pool's counter sets, which say nothing about its set: it fits despite its own counter.
    def pool(driver, set_name, value):
        devices = [device("dev", consumesCounters=[{"counterSet": set_name, "counters": {"c": {"value": "2"}}}])]
        counters = slice_obj(f"{driver}-counters", None, [], pool="n1", driver=driver, count=2,
                             sharedCounters=[{"name": set_name, "counters": {"c": {"value": value}}}])
        del counters["spec"]["devices"]
        return [slice_obj(f"{driver}-devices", "n1", devices, driver=driver, count=2), counters]

    classes = [gpu_class("a", "a.example.com"), gpu_class("b", "b.example.com")]
    slices = pool("a.example.com", "set-a", "2") + pool("b.example.com", "set-b", "1")
    both = [claim("c", [exact("first", cls="a"), exact("second", cls="b")])]
    alone = [claim("c", [exact("second", cls="b")])]
    for features in (STABLE, INCUBATING):
        assert allocate(features, slices, alone, classes=classes).outcome == "unallocatable"
        assert picked(allocate(features, slices, both, classes=classes)) == ["dev", "dev"]


def test_undoing_a_multi_allocatable_device_keeps_its_counters():
    # Upstream quirk (incubating/experimental with consumable capacity): backtracking over a device
    # that allows multiple allocations does not return its counters. "big" wants 2 devices, tries
    # the shareable one alone and gives up; its 3 counters stay taken, so "small" finds none left.
    devices = [
        device("dedicated", consumesCounters=[{"counterSet": "cs", "counters": {"mem": {"value": "3"}}}]),
        device("shared", allowMultipleAllocations=True, capacity={"bw": {"value": "4"}},
               consumesCounters=[{"counterSet": "cs", "counters": {"mem": {"value": "3"}}}]),
    ]
    counters = slice_obj("counters", None, [], pool="n1", count=2,
                         sharedCounters=[{"name": "cs", "counters": {"mem": {"value": "4"}}}])
    del counters["spec"]["devices"]
    slices = [slice_obj("devices", "n1", devices, count=2), counters]
    wanted = [claim("c", [{"name": "r", "firstAvailable": [
        {"name": "big", "deviceClassName": "gpu", "count": 2},
        {"name": "small", "deviceClassName": "gpu", "count": 1,
         "selectors": [{"cel": {"expression": "!device.allowMultipleAllocations"}}]},
    ]}])]
    features = Features.parse("none,ConsumableCapacity,PartitionableDevices,PrioritizedList")
    assert features.variant_name == "incubating"
    assert allocate(features, slices, wanted).outcome == "unallocatable"
    # Without the shareable device's detour the dedicated one fits.
    assert picked(allocate(features, [slices[0] | {"spec": dict(slices[0]["spec"], devices=devices[:1])}, counters],
                           wanted)) == ["dedicated"]


def test_allow_multiple_allocations_is_visible_to_cel_except_in_stable():
    # incubating hands the field to CEL even with DRAConsumableCapacity off; stable never does.
    slices = [slice_obj("s", "n1", [device("gpu-0", allowMultipleAllocations=True), device("gpu-1")])]
    shared = [claim("c", [exact("gpu", selectors=[{"cel": {"expression": "device.allowMultipleAllocations"}}])])]
    assert not INCUBATING.consumable_capacity
    assert picked(allocate(INCUBATING, slices, shared)) == ["gpu-0"]
    assert allocate(STABLE, slices, shared).outcome == "unallocatable"
