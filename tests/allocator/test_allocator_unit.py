"""Focused tests of allocator building blocks and of behaviour the conformance cases only touch."""

from __future__ import annotations

import itertools
import time
import types
from pathlib import Path

import pytest
import yaml

from gpudra.allocator import TIMED_OUT, Allocator, Features, build_report
from gpudra.allocator.capacity import consumption
from gpudra.allocator.constraints import DistinctAttribute, MatchAttribute
from gpudra.allocator.model import SliceInfo
from gpudra.allocator.nodematch import NodeInfo, selector_matches
from gpudra.allocator import search as search_module
from gpudra.allocator.search import Search

GI = 1024**3 * 10**9  # 1Gi in nanos


def slice_obj(name, node, devices, pool=None, driver="gpu.example.com", count=1, generation=1, **spec):
    body = {
        "driver": driver,
        "pool": {"name": pool or node, "generation": generation, "resourceSliceCount": count},
        "devices": devices,
    }
    if node:
        body["nodeName"] = node
    body.update(spec)
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": name}, "spec": body}


def device(name, **fields):
    return {"name": name, **fields}


def gpu_class(name="gpu", driver="gpu.example.com", config=None):
    spec = {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]}
    if config:
        spec["config"] = config
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name}, "spec": spec}


def claim(name, requests, constraints=None, namespace="default", config=None):
    devices = {"requests": requests}
    if constraints:
        devices["constraints"] = constraints
    if config:
        devices["config"] = config
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"devices": devices},
    }


def exact(name, count=None, cls="gpu", **fields):
    body = {"deviceClassName": cls, **fields}
    if count is not None:
        body["count"] = count
    return {"name": name, "exactly": body}


def picked(outcome, index=0):
    return [r["device"] for r in outcome.allocations[index]["devices"]["results"]]


# features -----------------------------------------------------------------------------------------
def test_features_default_is_136_defaults():
    features = Features.parse("default")
    assert features.enabled() == [
        "AdminAccess", "ConsumableCapacity", "DeviceBindingAndStatus", "DeviceTaints",
        "PartitionableDevices", "PrioritizedList",
    ]


def test_features_tokens_apply_left_to_right():
    assert Features.parse("none,PrioritizedList,+DRAAdminAccess").enabled() == ["AdminAccess", "PrioritizedList"]
    assert "DeviceTaints" not in Features.parse("-DeviceTaints").enabled()
    assert Features.parse("all,-ListTypeAttributes") == Features.parse("default")
    assert Features.parse("none,DRADeviceBindingConditions").device_binding_and_status


def test_features_unknown_token_is_a_clean_error():
    with pytest.raises(ValueError, match="unknown feature 'Bogus'"):
        Features.parse("none,Bogus")


# node matching ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "requirement, labels, expected",
    [
        ({"key": "zone", "operator": "In", "values": ["a", "b"]}, {"zone": "b"}, True),
        ({"key": "zone", "operator": "NotIn", "values": ["a"]}, {}, True),
        ({"key": "zone", "operator": "Exists"}, {"zone": ""}, True),
        ({"key": "zone", "operator": "DoesNotExist"}, {"zone": "a"}, False),
        ({"key": "gpus", "operator": "Gt", "values": ["4"]}, {"gpus": "8"}, True),
        ({"key": "gpus", "operator": "Lt", "values": ["4"]}, {"gpus": "x"}, False),
    ],
)
def test_node_selector_requirements(requirement, labels, expected):
    selector = {"nodeSelectorTerms": [{"matchExpressions": [requirement]}]}
    assert selector_matches(selector, NodeInfo("n1", labels)) is expected


def test_empty_node_selector_term_matches_nothing_and_fields_use_the_name():
    assert not selector_matches({"nodeSelectorTerms": [{}]}, NodeInfo("n1"))
    by_name = {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}
    assert selector_matches(by_name, NodeInfo("n1")) and not selector_matches(by_name, NodeInfo("n2"))


# capacity policies -------------------------------------------------------------------------------------
def _device_info(raw):
    return SliceInfo(slice_obj("s", "n", [raw]), 0).devices[0]


def test_capacity_range_policy_rounds_up_to_step_and_rejects_above_max():
    raw = device(
        "d",
        allowMultipleAllocations=True,
        capacity={"mem": {"value": "10Gi", "requestPolicy": {"default": "1Gi", "validRange": {"min": "1Gi", "max": "8Gi", "step": "2Gi"}}}},
    )
    info = _device_info(raw)
    assert consumption(info, {"mem": 2 * GI}) == {"mem": 3 * GI}
    assert consumption(info, {}) == {"mem": GI}
    assert consumption(info, {"mem": 9 * GI}) is None
    assert consumption(info, {"other": GI}) is None


def test_capacity_valid_values_round_up_to_next_value():
    raw = device(
        "d",
        allowMultipleAllocations=True,
        capacity={"mem": {"value": "10Gi", "requestPolicy": {"default": "2Gi", "validValues": ["2Gi", "4Gi"]}}},
    )
    info = _device_info(raw)
    assert consumption(info, {"mem": 3 * GI}) == {"mem": 4 * GI}
    assert consumption(info, {"mem": 5 * GI}) is None


# constraints ---------------------------------------------------------------------------------------------
def test_match_attribute_with_lists_needs_a_common_element_and_undoes():
    devices = [
        _device_info(device("a", attributes={"links": {"strings": ["x", "y"]}})),
        _device_info(device("b", attributes={"links": {"strings": ["y", "z"]}})),
        _device_info(device("c", attributes={"links": {"string": "x"}})),
    ]
    constraint = MatchAttribute([], "gpu.example.com/links", list_types=True)
    assert constraint.add("r", "r", devices[0]) and constraint.add("r", "r", devices[1])
    assert not constraint.add("r", "r", devices[2])  # {x,y} ∩ {y,z} ∩ {x} is empty
    constraint.remove("r", "r", devices[1])
    assert constraint.add("r", "r", devices[2])


def test_distinct_attribute_keeps_one_value_per_request():
    a = _device_info(device("a", attributes={"numa": {"int": 0}}))
    b = _device_info(device("b", attributes={"numa": {"int": 1}}))
    c = _device_info(device("c", attributes={"numa": {"int": 0}}))
    constraint = DistinctAttribute([], "gpu.example.com/numa", list_types=False)
    assert constraint.add("r1", "r1", a)
    assert not constraint.add("r2", "r2", c)
    assert constraint.add("r1", "r1", b)  # overwrites r1's value (upstream quirk) ...
    assert constraint.add("r2", "r2", c)  # ... so numa 0 is free again


# allocator behaviour ----------------------------------------------------------------------------------------
def eight_gpus(node="n1"):
    return slice_obj(
        f"{node}-gpus",
        node,
        [device(f"gpu-{i}", attributes={"numa": {"int": i // 4}}) for i in range(8)],
    )


def test_allocated_claims_can_be_added_and_removed():
    allocator = Allocator([gpu_class()], [eight_gpus()], [], Features.parse("default"))
    want_all = [claim("c", [exact("gpu", allocationMode="All")])]
    first = allocator.allocate("n1", want_all)
    assert first.outcome == "allocated" and len(picked(first)) == 8
    held = dict(want_all[0], status={"allocation": first.allocations[0]})
    allocator.add_allocated_claim(held)
    assert allocator.allocate("n1", [claim("d", [exact("gpu")])]).outcome == "unallocatable"
    allocator.remove_allocated_claim(held)
    assert picked(allocator.allocate("n1", [claim("d", [exact("gpu")])])) == ["gpu-0"]


def test_match_attribute_backtracks_to_a_consistent_set():
    allocator = Allocator([gpu_class()], [eight_gpus()], [], Features.parse("default"))
    busy = claim("busy", [exact("gpu")])
    busy["status"] = {"allocation": {"devices": {"results": [
        {"request": "gpu", "driver": "gpu.example.com", "pool": "n1", "device": "gpu-1"}]}}}
    allocator.add_allocated_claim(busy)
    outcome = allocator.allocate(
        "n1", [claim("c", [exact("gpu", count=4)], constraints=[{"matchAttribute": "gpu.example.com/numa"}])]
    )
    assert picked(outcome) == ["gpu-4", "gpu-5", "gpu-6", "gpu-7"]


def test_missing_class_is_an_error_and_unknown_node_is_unallocatable():
    allocator = Allocator([gpu_class()], [eight_gpus()], [], "default")
    error = allocator.allocate("n1", [claim("c", [exact("gpu", cls="nope")])])
    assert error.outcome == "error" and "nope" in error.error and not error.error_node_local
    assert allocator.allocate("elsewhere", [claim("c", [exact("gpu")])]).outcome == "unallocatable"


def test_too_many_devices_is_an_error():
    allocator = Allocator([gpu_class()], [eight_gpus()], [], "default")
    outcome = allocator.allocate("n1", [claim("c", [exact("gpu", count=33)])])
    assert outcome.outcome == "error" and "exceeds the claim limit of 32" in outcome.error


def test_configs_and_first_available_names():
    config = [{"opaque": {"driver": "gpu.example.com", "parameters": {"a": 1}}}]
    allocator = Allocator([gpu_class(config=config)], [eight_gpus()], [], "default")
    request = {"name": "gpu", "firstAvailable": [
        {"name": "many", "deviceClassName": "gpu", "count": 9},
        {"name": "few", "deviceClassName": "gpu", "count": 2},
    ]}
    claim_config = [{"requests": ["gpu/few"], "opaque": {"driver": "gpu.example.com", "parameters": {"b": 2}}}]
    outcome = allocator.allocate("n1", [claim("c", [request], config=claim_config)])
    allocation = outcome.allocations[0]
    assert [r["request"] for r in allocation["devices"]["results"]] == ["gpu/few", "gpu/few"]
    assert allocation["devices"]["config"] == [
        {"source": "FromClass", "requests": ["gpu/few"], "opaque": config[0]["opaque"]},
        {"source": "FromClaim", "requests": ["gpu/few"], "opaque": claim_config[0]["opaque"]},
    ]
    assert allocation["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["values"] == ["n1"]


def test_report_modes_shape():
    objects = [gpu_class(), eight_gpus("n1"), eight_gpus("n2"),
               claim("a", [exact("gpu", count=8)]), claim("b", [exact("gpu", count=8)])]
    together = build_report(objects, "together", features="default")
    assert [(r["node"], r["outcome"]) for r in together["results"]] == [("n1", "unallocatable"), ("n2", "unallocatable")]
    each = build_report(objects, "each", features="default")
    assert [(r["node"], r["claims"], r["outcome"]) for r in each["results"]] == [
        ("n1", ["default/a"], "allocated"), ("n2", ["default/a"], "allocated"),
        ("n1", ["default/b"], "allocated"), ("n2", ["default/b"], "allocated"),
    ]
    sequential = build_report(objects + [claim("c", [exact("gpu")])], "sequential", features="default")
    assert sorted(sequential["finalAllocations"]) == ["default/a", "default/b"]
    assert sequential["unallocatedClaims"] == ["default/c"]
    only_b = build_report(objects, "each", nodes=["n2"], claims=["b"], features="default")
    assert [(r["node"], r["claims"]) for r in only_b["results"]] == [("n2", ["default/b"])]


# the combinations shortcut must not change any answer ------------------------------------------------------
CONFORMANCE = Path(__file__).parent.parent / "data" / "conformance"


def _strip_share_ids(value):
    if isinstance(value, dict):
        return {k: _strip_share_ids(v) for k, v in value.items() if k != "shareID"}
    if isinstance(value, list):
        return [_strip_share_ids(v) for v in value]
    return value


def _case_report(case: Path) -> dict:
    from support.conformance import _split, parse_args

    args = parse_args((case / "args").read_text())
    objects = [d for d in yaml.safe_load_all((case / "input.yaml").read_text()) if d]
    return _strip_share_ids(
        build_report(objects, args.mode, _split(args.node), _split(args.claims), Features.parse(args.features),
                     timeout=None)
    )


@pytest.mark.parametrize(
    "case",
    [c for c in sorted(CONFORMANCE.glob("*/*")) if (c / "args").exists() and "scale" not in c.name][::7],
    ids=lambda c: f"{c.parent.name}/{c.name}",
)
def test_combination_search_equals_permutation_search(case, monkeypatch):
    fast = _case_report(case)
    monkeypatch.setattr(Search, "_mark_order_independent_requests", lambda self: None)
    slow = _case_report(case)
    assert fast == slow


def test_excluded_devices_are_skipped_for_one_call_only():
    allocator = Allocator([gpu_class()], [eight_gpus()], [], "default")
    request = [claim("c", [exact("gpu", count=2)])]
    hidden = {("gpu.example.com", "n1", "gpu-0"), ("gpu.example.com", "n1", "gpu-2")}
    assert picked(allocator.allocate("n1", request, exclude_devices=hidden)) == ["gpu-1", "gpu-3"]
    assert picked(allocator.allocate("n1", request)) == ["gpu-0", "gpu-1"]


# random small clusters: combination search vs upstream-style permutation search ---------------------------
from hypothesis import given, settings, strategies as st  # noqa: E402


@st.composite
def small_scenarios(draw):
    devices = []
    for i in range(draw(st.integers(1, 7))):
        fields = {"attributes": {"numa": {"int": draw(st.integers(0, 2))}, "model": {"string": draw(st.sampled_from("ab"))}}}
        if draw(st.booleans()):
            fields["capacity"] = {"mem": {"value": f"{draw(st.integers(1, 4))}Gi"}}
        devices.append(device(f"gpu-{i}", **fields))
    claims = []
    for c in range(draw(st.integers(1, 3))):
        requests = []
        for r in range(draw(st.integers(1, 2))):
            body = {}
            if draw(st.booleans()):
                body["selectors"] = [{"cel": {"expression": 'device.attributes["gpu.example.com"].model == "a"'}}]
            requests.append(exact(f"r{r}", count=draw(st.integers(1, 3)), **body))
        constraints = []
        if draw(st.booleans()):
            constraints.append({"matchAttribute": "gpu.example.com/numa"})
        claims.append(claim(f"c{c}", requests, constraints=constraints))
    return [gpu_class(), slice_obj("n1-gpus", "n1", devices)], claims


@settings(max_examples=60, deadline=None)
@given(small_scenarios())
def test_combination_search_equals_permutation_search_on_random_clusters(scenario):
    objects, claims = scenario
    allocator = Allocator([objects[0]], [objects[1]], [], "default")
    fast = allocator.allocate("n1", claims)
    original = Search._mark_order_independent_requests
    Search._mark_order_independent_requests = lambda self: None
    try:
        slow = allocator.allocate("n1", claims)
    finally:
        Search._mark_order_independent_requests = original
    assert fast.outcome == slow.outcome
    assert _strip_share_ids(fast.allocations) == _strip_share_ids(slow.allocations)


def test_capacity_requests_without_the_gate_depend_on_the_upstream_variant():
    objects = [gpu_class(), eight_gpus()]
    wants_memory = [claim("c", [exact("gpu", capacity={"requests": {"memory": "1Gi"}})])]
    stable = Features.parse("none,PrioritizedList")  # kube-scheduler would pick its stable variant
    assert stable.stable_variant
    assert Allocator(objects[:1], objects[1:], [], stable).allocate("n1", wants_memory).outcome == "allocated"
    incubating = stable.with_variant("incubating")
    outcome = Allocator(objects[:1], objects[1:], [], incubating).allocate("n1", wants_memory)
    assert outcome.outcome == "error" and "DRAConsumableCapacity feature is disabled" in outcome.error
    assert not Features.parse("none,DeviceBindingAndStatus").stable_variant
    with pytest.raises(ValueError):
        stable.with_variant("bogus")


def test_timeout_ends_a_hopeless_search_as_a_node_local_error(monkeypatch):
    # Ten devices, one on another NUMA node, a claim for all ten on one NUMA node. The stable
    # variant tries permutations, and with counters and a constraint (a rejected device leaks its
    # counters) no shortcut is exact: the search must try every order of the other nine (9! paths).
    devices = [device(f"gpu-{i}", attributes={"numa": {"int": int(i == 9)}},
                      consumesCounters=[{"counterSet": "pcie", "counters": {"lanes": {"value": "1"}}}])
               for i in range(10)]
    counters = slice_obj("counters", None, [], pool="n1", count=2,
                         sharedCounters=[{"name": "pcie", "counters": {"lanes": {"value": "1000000000"}}}])
    slices = [slice_obj("s", "n1", devices, count=2), counters]
    del counters["spec"]["devices"]
    stable = Features.parse("none,PartitionableDevices")
    assert stable.stable_variant
    allocator = Allocator([gpu_class()], slices, [], stable)
    hopeless = [claim("c", [exact("gpus", count=10)], constraints=[{"matchAttribute": "gpu.example.com/numa"}])]
    # The search reads its clock every 1024 steps; here that clock moves 1000 s a reading, so a search of more
    # than 4 x 1024 steps meets the deadline whatever the machine's speed (9! paths are far more), and one that
    # needs fewer never does. CEL keeps the real clock, an hour from its deadline.
    start = time.monotonic()
    readings = itertools.count(1)
    monkeypatch.setattr(search_module, "time", types.SimpleNamespace(monotonic=lambda: start + 1000 * next(readings)))
    outcome = allocator.allocate("n1", hopeless, timeout=None, deadline=start + 3600)
    assert outcome.outcome == "error" and outcome.error_node_local and "timed out" in outcome.error
    # incubating tries combinations only: the same question is answered in a few steps.
    readings = itertools.count(1)
    incubating = Allocator([gpu_class()], slices, [], stable.with_variant("incubating"))
    assert incubating.allocate("n1", hopeless, timeout=None, deadline=start + 3600).outcome == "unallocatable"


def test_a_search_whose_deadline_has_passed_ends_before_it_starts():
    """Upstream's allocateOne checks its context before anything else (`if alloc.ctx.Err() != nil { return
    ... "filter operation aborted" }`, structured/internal/{stable,incubating,experimental}/allocator_*.go,
    v0.36.2), and kube-scheduler's DynamicResources Filter reports a context past its deadline as "timed out
    trying to allocate devices": once the deadline has passed, even a claim that one free device would satisfy
    in one step is not allocated."""
    allocator = Allocator([gpu_class()], [slice_obj("s", "n1", [device("gpu-0")])], [], Features.parse("default"))
    one = [claim("c", [exact("gpu", count=1)])]
    assert allocator.allocate("n1", one, timeout=None).outcome == "allocated"
    outcome = allocator.allocate("n1", one, timeout=None, deadline=time.monotonic() - 1)
    assert (outcome.outcome, outcome.error, outcome.error_node_local) == ("error", TIMED_OUT, True)


@pytest.mark.parametrize("first, second, same", [
    ({"int": 1}, {"bool": True}, False),  # Python's 1 == True; upstream's typed values never match across types
    ({"bool": True}, {"int": 1}, False),
    ({"int": 1}, {"string": "1"}, False),
    ({"string": "1"}, {"int": 1}, False),
    ({"version": "1.0.0"}, {"string": "1.0.0"}, False),
    ({"int": 1}, {"int": 1}, True),
])
def test_match_attribute_compares_typed_values(first, second, same):
    """matchAttribute holds when the devices' attribute values are equal as DeviceAttributes (type and value), as
    upstream's allocator compares them; whatever order the search meets the devices in."""
    devices = [device("gpu-0", attributes={"x": first}), device("gpu-1", attributes={"x": second})]
    allocator = Allocator([gpu_class()], [slice_obj("s", "n1", devices)], [], Features.parse("default"))
    both = [claim("c", [exact("gpus", count=2)], constraints=[{"matchAttribute": "gpu.example.com/x"}])]
    assert allocator.allocate("n1", both).outcome == ("allocated" if same else "unallocatable")


def test_node_labels_edited_in_place_are_noticed():
    zone_slice = slice_obj("net", None, [device("nic-0")], pool="net",
                           nodeSelector={"nodeSelectorTerms": [{"matchExpressions": [
                               {"key": "zone", "operator": "In", "values": ["a"]}]}]})
    allocator = Allocator([gpu_class()], [zone_slice], [], "default")
    node = {"metadata": {"name": "n1", "labels": {"zone": "a"}}}
    want = [claim("c", [exact("gpu")])]
    assert allocator.allocate(node, want).outcome == "allocated"
    node["metadata"]["labels"]["zone"] = "b"
    assert allocator.allocate(node, want).outcome == "unallocatable"


def test_in_place_slice_edits_need_forget_cached_objects():
    from gpudra.allocator import forget_cached_objects

    slices = [eight_gpus()]
    want = [claim("c", [exact("gpu", count=8)])]
    assert Allocator([gpu_class()], slices, [], "default").allocate("n1", want).outcome == "allocated"
    del slices[0]["spec"]["devices"][7]
    forget_cached_objects()
    assert Allocator([gpu_class()], slices, [], "default").allocate("n1", want).outcome == "unallocatable"
