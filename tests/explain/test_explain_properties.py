"""The funnel agrees with the allocator: for one request without constraints or counters, a node fits
exactly when the funnel ends with at least `count` devices; funnels never grow; held devices are named."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpudra.allocator import Allocator, Features
from gpudra.explain import model
from gpudra.explain.devices import slice_index
from gpudra.explain.dra import AllocatedDevices, analyze_node
from gpudra.versions import KUBERNETES_VERSIONS
from test_explain_scenarios import DRIVER, PRODUCT, claim, device_class, gpu, gpu_slice, node, request

PRODUCTS = ("A100", "H100")
TAINT = {"key": "example.com/broken", "value": "yes", "effect": "NoSchedule"}


@st.composite
def clusters(draw):
    devices = []
    for index in range(draw(st.integers(0, 5))):
        extra = {"taints": [TAINT]} if draw(st.booleans()) and draw(st.booleans()) else {}
        devices.append(gpu(f"gpu-{index}", draw(st.sampled_from(PRODUCTS)), **extra))
    held = [d["name"] for d in devices if draw(st.booleans()) and draw(st.booleans())]
    count = draw(st.integers(1, 3))
    selectors = (f"{PRODUCT} == '{draw(st.sampled_from(PRODUCTS))}'",) if draw(st.booleans()) else ()
    tolerations = [{"key": TAINT["key"], "operator": "Exists"}] if draw(st.booleans()) else []
    return devices, held, count, selectors, tolerations


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters())
def test_funnel_matches_the_allocator(case):
    devices, held, count, selectors, tolerations = case
    extra = {"tolerations": tolerations} if tolerations else {}
    target = claim("c", [request(count=count, selectors=selectors, **extra)])
    holder = claim("holder", [request(count=max(len(held), 1))], allocated=("node-a", held), reserved_for="h")
    allocated = [holder] if held else []
    slices = [gpu_slice("node-a", devices)] if devices else []
    classes = {DRIVER: device_class()}
    the_node = node("node-a")

    outcome = Allocator(list(classes.values()), slices, allocated, Features.parse("default")).allocate(the_node, [target])
    analysis = analyze_node(the_node, [target], slices, classes, AllocatedDevices.from_claims(allocated))

    funnel = analysis.requests[0]
    assert (outcome.outcome == "allocated") == (funnel.available >= count)
    if outcome.outcome != "allocated":
        # analyze_node explains failures; for one plain request the reason is always the device shortage.
        assert [r.code for r in analysis.reasons] == [model.DRA_DEVICES]
    counts = [s.count for s in funnel.steps]
    assert counts == sorted(counts, reverse=True)
    assert counts[0] == len(devices)
    free = funnel.step("free")
    if free is not None:
        before = funnel.steps[funnel.steps.index(free) - 1].count
        assert before - free.count == sum(funnel.holders.values())


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(["mesh-0", "mesh-1", None]), max_size=5), st.integers(0, 5), st.integers(1, 3))
def test_match_attribute_explanation_matches_the_allocator(meshes, held_count, count):
    devices = [gpu(f"gpu-{i}", attributes={"mesh": {"string": m}} if m else {}) for i, m in enumerate(meshes)]
    held = [d["name"] for d in devices[:held_count]]
    target = claim("c", [request(count=count)], constraints=[{"matchAttribute": f"{DRIVER}/mesh"}])
    allocated = [claim("holder", [request(count=max(len(held), 1))], allocated=("node-a", held))] if held else []
    slices = [gpu_slice("node-a", devices)] if devices else []
    classes = {DRIVER: device_class()}
    the_node = node("node-a")

    outcome = Allocator(list(classes.values()), slices, allocated, Features.parse("default")).allocate(the_node, [target])
    analysis = analyze_node(the_node, [target], slices, classes, AllocatedDevices.from_claims(allocated))

    free = [m for m in meshes[held_count:]]
    best = max((free.count(m) for m in ("mesh-0", "mesh-1")), default=0)
    assert (outcome.outcome == "allocated") == (best >= count)
    if outcome.outcome != "allocated":
        codes = [r.code for r in analysis.reasons]
        assert codes == ([model.DRA_DEVICES] if len(free) < count else [model.DRA_CONSTRAINT])
        if codes == [model.DRA_CONSTRAINT]:
            report = analysis.constraints[0]
            assert max(report.groups.values(), default=0) == best and report.need == count
            assert report.missing == free.count(None)


# explain reads requests, taints and counters through the allocator's own code -----------------------------
COUNTER_SET = {"name": "mem", "counters": {"size": {"value": "4"}}}


@st.composite
def one_request_cases(draw):
    devices = []
    for index in range(draw(st.integers(0, 5))):
        extra = {}
        if draw(st.booleans()):
            extra["taints"] = [dict(TAINT, effect=draw(st.sampled_from(["NoSchedule", "NoExecute", "None"])))]
        if draw(st.booleans()):
            extra["consumesCounters"] = [{"counterSet": "mem", "counters": {"size": {"value": str(draw(st.integers(1, 5)))}}}]
        devices.append(gpu(f"gpu-{index}", "H100", **extra))
    held = [d["name"] for d in devices if draw(st.integers(0, 3)) == 0]
    # count as the API allows it and as manifests spell it: absent, a number, a numeric string
    count = draw(st.sampled_from([None, 1, 2, 3, "1", "2", "3"]))
    tolerations = [{"key": TAINT["key"], "operator": "Exists"}] if draw(st.booleans()) else []
    # every release's default gates: before 1.36 device taints and partitionable devices are off
    version = draw(st.sampled_from(KUBERNETES_VERSIONS))
    return devices, held, count, tolerations, version


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(one_request_cases())
def test_explain_agrees_with_allocate_on_one_request(case):
    devices, held, count, tolerations, version = case
    features = Features.default(version)
    extra = {"tolerations": tolerations} if tolerations else {}
    target = claim("c", [request(count=count, **extra)])
    if count is None:
        del target["spec"]["devices"]["requests"][0]["exactly"]["count"]
    holder = claim("holder", [request(count=max(len(held), 1))], allocated=("node-a", held), reserved_for="h")
    allocated = [holder] if held else []
    counters = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": "node-a-counters"},
                "spec": {"driver": DRIVER, "pool": {"name": "node-a", "generation": 1, "resourceSliceCount": 2},
                         "sharedCounters": [COUNTER_SET]}}
    slices = [gpu_slice("node-a", devices, slice_count=2), counters] if devices else []
    classes = {DRIVER: device_class()}
    the_node = node("node-a")

    outcome = Allocator(list(classes.values()), slices, allocated, features).allocate(the_node, [target])
    analysis = analyze_node(the_node, [target], slices, classes, AllocatedDevices.from_claims(allocated),
                            index=slice_index(slices, features))
    funnel = analysis.requests[0]
    wanted = int(count or 1)
    assert funnel.count == wanted  # the same reading of the request
    consuming = any(d.get("consumesCounters") for d in devices)
    # Upstream quirk (search.py, _allocate_device): a device refused for its taint keeps the counters it
    # took for the rest of the call, so one request can fail on counters even with a device left over
    taint_keeps_counters = features.device_taints and not tolerations and any(
        d.get("consumesCounters") and d.get("taints") and d["taints"][0]["effect"] != "None" for d in devices)
    if (wanted == 1 and not taint_keeps_counters) or not consuming:
        # jointly consumed counters are the search's business, not the funnel's
        assert (outcome.outcome == "allocated") == (funnel.available >= wanted), analysis.reasons
    if outcome.outcome != "allocated":
        assert analysis.reasons  # explain always says why
