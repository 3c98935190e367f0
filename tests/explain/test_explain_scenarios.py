"""Explanations on small clusters where the reason a pod does not fit is known by construction."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gpudra.explain import model
from gpudra.explain.analyze import TargetError, explain, parse_target
from gpudra.explain.render import render, to_text

DRIVER = "gpu.example.com"


# ------------------------------------------------------------------------------------------ builders


def device_class(name: str = DRIVER, expression: str = f"device.driver == '{DRIVER}'") -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": expression}}]}}


def node(name: str, cpu: str = "16", memory: str = "64Gi", taints: list | None = None) -> dict[str, Any]:
    obj = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
           "status": {"allocatable": {"cpu": cpu, "memory": memory, "pods": "110"}}}
    if taints:
        obj["spec"] = {"taints": taints}
    return obj


def gpu(name: str, product: str = "H100", memory: str = "80Gi", **extra: Any) -> dict[str, Any]:
    attributes = {"productName": {"string": product}}
    for key, value in extra.pop("attributes", {}).items():
        attributes[key] = value
    device = {"name": name, "attributes": attributes, "capacity": {"memory": {"value": memory}}}
    device.update(extra)
    return device


def gpu_slice(node_name: str, devices: list[dict[str, Any]], pool: str | None = None, slice_count: int = 1,
              name: str | None = None, **spec: Any) -> dict[str, Any]:
    body = {"driver": DRIVER, "nodeName": node_name,
            "pool": {"name": pool or node_name, "generation": 1, "resourceSliceCount": slice_count},
            "devices": devices}
    body.update(spec)
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": name or f"{node_name}-gpus"}, "spec": body}


def request(name: str = "gpu", count: int = 1, selectors: tuple[str, ...] = (), device_class_name: str = DRIVER,
            **extra: Any) -> dict[str, Any]:
    exactly = {"deviceClassName": device_class_name, "allocationMode": "ExactCount", "count": count}
    if selectors:
        exactly["selectors"] = [{"cel": {"expression": e}} for e in selectors]
    exactly.update(extra)
    return {"name": name, "exactly": exactly}


def claim(name: str, requests: list[dict[str, Any]], constraints: list | None = None,
          allocated: tuple[str, list[str]] | None = None, reserved_for: str | None = None) -> dict[str, Any]:
    obj = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
           "metadata": {"name": name, "namespace": "default"},
           "spec": {"devices": {"requests": requests}}}
    if constraints:
        obj["spec"]["devices"]["constraints"] = constraints
    if allocated:
        node_name, devices = allocated
        obj["status"] = {"allocation": {
            "devices": {"results": [{"request": requests[0]["name"], "driver": DRIVER, "pool": node_name,
                                     "device": d} for d in devices]},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": [node_name]}]}]}}}
        if reserved_for:
            obj["status"]["reservedFor"] = [{"resource": "pods", "name": reserved_for, "uid": f"uid-{reserved_for}"}]
    return obj


def pod(name: str, claims: dict[str, str] | None = None, cpu: str = "1", node_name: str | None = None,
        templates: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"containers": [{"name": "main", "image": "x", "resources": {"requests": {"cpu": cpu}}}]}
    refs = [{"name": k, "resourceClaimName": v} for k, v in (claims or {}).items()]
    refs += [{"name": k, "resourceClaimTemplateName": v} for k, v in (templates or {}).items()]
    if refs:
        body["resourceClaims"] = refs
        body["containers"][0]["resources"]["claims"] = [{"name": r["name"]} for r in refs]
    if node_name:
        body["nodeName"] = node_name
    body.update(spec)
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"}, "spec": body}


def template(name: str, requests: list[dict[str, Any]], constraints: list | None = None) -> dict[str, Any]:
    devices: dict[str, Any] = {"requests": requests}
    if constraints:
        devices["constraints"] = constraints
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": "default"}, "spec": {"spec": {"devices": devices}}}


PRODUCT = f"device.attributes['{DRIVER}'].productName"
MEMORY_AT_LEAST_80 = f"device.capacity['{DRIVER}'].memory.compareTo(quantity('80Gi')) >= 0"


def funnel_counts(explanation, node_name: str, request: str = "gpu") -> dict[str, int]:
    entry = explanation.node(node_name)
    assert entry is not None
    funnel = next(r for r in entry.requests if r.request == request)
    return {(f"{s.step}#{s.index}" if s.index is not None else s.step): s.count for s in funnel.steps}


def step(explanation, node_name: str, key: str, request: str = "gpu"):
    entry = explanation.node(node_name)
    funnel = next(r for r in entry.requests if r.request == request)
    return next(s for s in funnel.steps if s.step == key)


def fix_kinds(explanation) -> list[str]:
    return [f.kind for f in explanation.fixes]


# ------------------------------------------------------------------------------------------ scenarios


def test_wrong_product():
    objects = [device_class(), node("node-a"), gpu_slice("node-a", [gpu("gpu-0", "A100"), gpu("gpu-1", "A100")]),
               claim("want-h100", [request(selectors=(f"{PRODUCT} == 'H100'",))]),
               pod("p", {"gpu": "want-h100"})]
    e = explain(objects, "pod/p")
    assert not e.fits
    assert e.summary == ("0/1 nodes are available: 1 node: request 'gpu' of claim 'want-h100' needs 1 device, "
                         "no free device matches.")
    assert funnel_counts(e, "node-a") == {"visible": 2, "class": 2, "selector#0": 0}
    assert "productName seen: A100 ×2" in step(e, "node-a", "selector").details
    # The only change that helps is dropping the product selector.
    assert fix_kinds(e) == ["drop-selector"]
    assert "node node-a fits without selector #0" in e.fixes[0].message


def test_too_little_memory():
    objects = [device_class(), node("node-a"),
               gpu_slice("node-a", [gpu("gpu-0", "A100", "40Gi"), gpu("gpu-1", "A100", "40Gi"),
                                    gpu("gpu-2", "H100", "80Gi")]),
               claim("big", [request(count=2, selectors=(MEMORY_AT_LEAST_80,))]),
               pod("p", {"gpu": "big"})]
    e = explain(objects, "pod/p")
    assert e.summary == ("0/1 nodes are available: 1 node: request 'gpu' of claim 'big' needs 2 devices, "
                         "1 free matches.")
    assert funnel_counts(e, "node-a") == {"visible": 3, "class": 3, "selector#0": 1, "free": 1}
    assert "memory seen: 40Gi ×2, 80Gi ×1" in step(e, "node-a", "selector").details
    assert e.fixes[0].kind == "lower-count"
    assert e.fixes[0].change == {"claim": "default/big", "request": "gpu", "count": 1}


def test_devices_held_by_another_pod():
    objects = [device_class(), node("node-a"), node("node-b"),
               gpu_slice("node-a", [gpu("gpu-0"), gpu("gpu-1")]),
               gpu_slice("node-b", [gpu("gpu-0"), gpu("gpu-1")]),
               claim("old-job", [request(count=2)], allocated=("node-a", ["gpu-0", "gpu-1"]), reserved_for="old"),
               pod("old", {"gpu": "old-job"}, node_name="node-a"),
               claim("other", [request(count=1)], allocated=("node-b", ["gpu-0"]), reserved_for="other"),
               pod("other", {"gpu": "other"}, node_name="node-b"),
               claim("new", [request(count=2)]), pod("new", {"gpu": "new"})]
    e = explain(objects, "pod/new")
    assert e.summary == ("0/2 nodes are available: 2 nodes: request 'gpu' of claim 'new' needs 2 devices, "
                         "at most 1 free matches.")
    assert funnel_counts(e, "node-a") == {"visible": 2, "class": 2, "free": 0}
    assert step(e, "node-a", "free").details == ["2 held by claim default/old-job (pod default/old)"]
    assert e.node("node-a").requests[0].holders == {"default/old-job": 2}
    # Releasing `other` frees one device, releasing `old-job` two: the smaller change is offered.
    assert e.fixes[0].kind == "release-claim"
    assert e.fixes[0].message == "node node-b fits if claim default/other is released (deleting pod default/other)"
    assert e.fixes[0].change == {"claim": "default/other", "pods": ["default/other"]}


def test_pending_pods_ahead_in_the_queue_take_devices_first():
    objects = [device_class(), node("node-a"), gpu_slice("node-a", [gpu("gpu-0")]),
               template("one", [request()]),
               pod("first", templates={"gpu": "one"}), pod("second", templates={"gpu": "one"})]
    first = explain(objects, "pod/first")
    assert first.fits and first.placement["node"] == "node-a"
    assert first.summary.startswith("would be scheduled to node node-a")
    second = explain(objects, "pod/second")
    assert not second.fits
    holders = second.node("node-a").requests[0].holders
    assert list(holders) == [first.placement and next(iter(first.placement["devices"]))]
    assert second.fixes[0].kind == "release-claim"
    assert "deleting pod default/first" in second.fixes[0].message


def test_nvlink_mesh_split():
    mesh = lambda i: {"nvlinkDomain": {"string": f"mesh-{i}"}}  # noqa: E731
    devices = [gpu(f"gpu-{i}", attributes=mesh(0 if i < 3 else 1)) for i in range(5)]
    objects = [device_class(), node("node-a"), gpu_slice("node-a", devices),
               claim("ring", [request(count=4)], constraints=[{"matchAttribute": f"{DRIVER}/nvlinkDomain"}]),
               pod("p", {"gpu": "ring"})]
    e = explain(objects, "pod/p")
    assert e.summary == ("0/1 nodes are available: 1 node: claim 'ring' constraint #0 matchAttribute "
                         f"{DRIVER}/nvlinkDomain: mesh-0: 3 free, mesh-1: 2 free; need 4 with the same nvlinkDomain.")
    entry = e.node("node-a")
    assert funnel_counts(e, "node-a")["free"] == 5  # enough devices, wrong shape
    assert entry.constraints[0].groups == {"mesh-0": 3, "mesh-1": 2}
    assert entry.constraints[0].need == 4
    assert e.fixes[0].kind == "lower-count"
    assert e.fixes[0].change["count"] == 3


def test_lower_count_respects_the_constraint_where_another_node_has_more_free_devices():
    """node-b has 5 free devices, more than the 4 of one NVLink domain on node-a; the constraint is not checked on
    node-b (too few devices stops it first), so 5 is no count that fits: the fix asks for 4."""
    mesh = lambda i: {"nvlinkDomain": {"string": f"mesh-{i // 4}"}}  # noqa: E731
    devices = [gpu(f"gpu-{i}", attributes=mesh(i)) for i in range(8)]
    objects = [device_class(), node("node-a"), node("node-b"), gpu_slice("node-a", devices),
               gpu_slice("node-b", copy.deepcopy(devices)),
               claim("held", [request(count=3)], allocated=("node-b", ["gpu-0", "gpu-1", "gpu-2"]), reserved_for="old"),
               pod("old", {"gpu": "held"}, node_name="node-b"),
               claim("ring", [request(count=6)], constraints=[{"matchAttribute": f"{DRIVER}/nvlinkDomain"}]),
               pod("p", {"gpu": "ring"})]
    e = explain(objects, "pod/p")
    assert not e.fits
    assert e.node("node-a").constraints[0].groups == {"mesh-0": 4, "mesh-1": 4}
    lowered = [fix for fix in e.fixes if fix.kind == "lower-count"]
    assert [fix.change["count"] for fix in lowered] == [4]
    assert lowered[0].message == "node node-a fits if request 'gpu' in claim default/ring asks for 4 instead of 6 devices"


def test_untolerated_device_taint():
    taint = {"key": "example.com/unhealthy", "value": "ecc", "effect": "NoSchedule"}
    objects = [device_class(), node("node-a"),
               gpu_slice("node-a", [gpu("gpu-0", taints=[taint]), gpu("gpu-1", taints=[taint]), gpu("gpu-2")]),
               claim("two", [request(count=2)]), pod("p", {"gpu": "two"})]
    e = explain(objects, "pod/p")
    assert e.summary.endswith("request 'gpu' of claim 'two' needs 2 devices, 1 free matches.")
    assert funnel_counts(e, "node-a") == {"visible": 3, "class": 3, "free": 3, "tolerated": 1}
    assert step(e, "node-a", "tolerated").details == ["2 with untolerated taint example.com/unhealthy=ecc:NoSchedule"]
    assert e.fixes[0].kind == "tolerate-device-taint"
    assert e.fixes[0].change["toleration"] == {"key": "example.com/unhealthy", "operator": "Equal", "value": "ecc",
                                               "effect": "NoSchedule"}
    assert "tolerates device taint example.com/unhealthy=ecc:NoSchedule" in e.fixes[0].message


def test_counters_exhausted():
    counters = [{"name": "gpu-0-memory", "counters": {"memory": {"value": "80Gi"}}}]
    consume = lambda amount: [{"counterSet": "gpu-0-memory", "counters": {"memory": {"value": amount}}}]  # noqa: E731
    devices = [
        gpu("gpu-0", attributes={"kind": {"string": "full"}}, consumesCounters=consume("80Gi")),
        gpu("gpu-0-mig-a", memory="40Gi", attributes={"kind": {"string": "mig"}}, consumesCounters=consume("40Gi")),
        gpu("gpu-0-mig-b", memory="40Gi", attributes={"kind": {"string": "mig"}}, consumesCounters=consume("40Gi")),
    ]
    counter_slice = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": "node-a-counters"},
                     "spec": {"driver": DRIVER, "nodeName": "node-a",
                              "pool": {"name": "node-a", "generation": 1, "resourceSliceCount": 2},
                              "sharedCounters": counters}}
    full = f"device.attributes['{DRIVER}'].kind == 'full'"
    objects = [device_class(), node("node-a"), counter_slice, gpu_slice("node-a", devices, slice_count=2),
               claim("mig", [request()], allocated=("node-a", ["gpu-0-mig-a"]), reserved_for="small"),
               pod("small", {"gpu": "mig"}, node_name="node-a"),
               claim("whole", [request(selectors=(full,))]), pod("p", {"gpu": "whole"})]
    e = explain(objects, "pod/p")
    assert e.summary.endswith("request 'gpu' of claim 'whole' needs 1 device, no free device matches.")
    assert funnel_counts(e, "node-a") == {"visible": 3, "class": 3, "selector#0": 1, "free": 1, "counters": 0}
    detail = step(e, "node-a", "counters").details[0]
    assert "short of counter gpu-0-memory/memory (needs 80Gi, 40Gi left" in detail
    assert "consumed by claim default/mig" in detail
    assert e.fixes[0].kind == "release-claim"
    assert e.fixes[0].message == "node node-a fits if claim default/mig is released (deleting pod default/small)"


def test_missing_device_class():
    objects = [device_class(), node("node-a"), gpu_slice("node-a", [gpu("gpu-0")]),
               claim("typo", [request(device_class_name="gpu.exmaple.com")]), pod("p", {"gpu": "typo"})]
    e = explain(objects, "pod/p")
    assert e.summary == ("0/1 nodes are available: request gpu: device class gpu.exmaple.com does not exist.")
    assert any("did you mean 'gpu.example.com'" in p for p in e.problems)
    assert e.fixes[0].kind == "use-existing-class"
    assert e.fixes[0].change["deviceClassName"] == DRIVER
    assert e.fixes[0].nodes == ["node-a"]


def test_cel_runtime_error_names_the_device():
    # memoryGiB exists on no device: CEL raises "no such key", which aborts the scheduling attempt.
    objects = [device_class(), node("node-a"), gpu_slice("node-a", [gpu("gpu-0"), gpu("gpu-1")]),
               claim("bad", [request(selectors=(f"device.attributes['{DRIVER}'].memoryGiB > 40",))]),
               pod("p", {"gpu": "bad"})]
    e = explain(objects, "pod/p")
    assert not e.fits
    assert "memoryGiB" in e.summary and e.summary.startswith("0/1 nodes are available:")
    errors = e.node("node-a").cel_errors
    assert errors and errors[0].device == f"{DRIVER}/node-a/gpu-0"
    assert "memoryGiB" in errors[0].message
    assert errors[0].where == "claim default/bad request gpu selector #0"
    assert e.node("node-a").reasons[0].code == model.DRA_ERROR


def test_cel_compile_error_is_a_pod_problem():
    objects = [device_class(), node("node-a"), gpu_slice("node-a", [gpu("gpu-0")]),
               claim("bad", [request(selectors=("device.attributes[",))]), pod("p", {"gpu": "bad"})]
    e = explain(objects, "pod/p")
    assert not e.fits
    assert e.cel_errors and e.cel_errors[0].where == "claim default/bad request gpu selector #0"
    assert e.cel_errors[0].device == ""


def test_insufficient_cpu():
    objects = [device_class(), node("node-a", cpu="4"), node("node-b", cpu="2"),
               gpu_slice("node-a", [gpu("gpu-0")]), gpu_slice("node-b", [gpu("gpu-0")]),
               claim("one", [request()]), pod("p", {"gpu": "one"}, cpu="8")]
    e = explain(objects, "pod/p")
    assert e.summary == "0/2 nodes are available: 2 nodes: Insufficient cpu."
    reason = e.node("node-a").reasons[0]
    assert reason.code == model.INSUFFICIENT
    assert reason.data["requested"] == 8000 and reason.data["capacity"] == 4000
    assert "(the pod requests 8, 4 of 4 free)" in to_text(e)
    # DRA would fit: no device funnel is shown for these nodes.
    assert e.node("node-a").requests == []
    assert e.fixes[0].kind == "lower-resource"
    assert e.fixes[0].message == "node node-a fits if the pod requests 4 cpu instead of 8"


def test_node_taint_and_mixed_summary():
    taint = {"key": "dedicated", "value": "infra", "effect": "NoSchedule"}
    objects = [device_class(), node("node-a", taints=[taint]), node("node-b"), node("node-c"),
               gpu_slice("node-a", [gpu("gpu-0")]), gpu_slice("node-b", [gpu("gpu-0", "A100")]),
               claim("h100", [request(selectors=(f"{PRODUCT} == 'H100'",))]), pod("p", {"gpu": "h100"})]
    e = explain(objects, "pod/p")
    assert e.summary == ("0/3 nodes are available: 2 nodes: request 'gpu' of claim 'h100' needs 1 device, "
                         "no free device matches; 1 node: node(s) had untolerated taint {dedicated: infra}.")
    assert e.fixes[0].kind == "tolerate-node-taint"
    assert e.fixes[0].nodes == ["node-a"]


def test_all_mode_with_one_device_in_use():
    objects = [device_class(), node("node-a"), gpu_slice("node-a", [gpu("gpu-0"), gpu("gpu-1"), gpu("gpu-2")]),
               claim("held", [request()], allocated=("node-a", ["gpu-1"]), reserved_for="x"),
               pod("x", {"gpu": "held"}, node_name="node-a"),
               claim("all", [{"name": "gpu", "exactly": {"deviceClassName": DRIVER, "allocationMode": "All"}}]),
               pod("p", {"gpu": "all"})]
    e = explain(objects, "pod/p")
    assert e.summary.endswith("request 'gpu' of claim 'all' asks for all 3 matching devices, 2 can be allocated.")
    assert e.node("node-a").reasons[0].code == model.DRA_ALL


def test_first_available_lists_every_alternative():
    objects = [device_class(), node("node-a"), gpu_slice("node-a", [gpu("gpu-0", "A100")]),
               claim("alt", [{"name": "gpu", "firstAvailable": [
                   {"name": "big", "deviceClassName": DRIVER, "count": 2},
                   {"name": "h100", "deviceClassName": DRIVER, "selectors": [
                       {"cel": {"expression": f"{PRODUCT} == 'H100'"}}]}]}]),
               pod("p", {"gpu": "alt"})]
    e = explain(objects, "pod/p")
    assert e.summary.endswith("request 'gpu' of claim 'alt': no alternative fits (big: needs 2 devices, "
                              "1 free matches; h100: needs 1 device, no free device matches).")
    assert [r.request for r in e.node("node-a").requests] == ["gpu/big", "gpu/h100"]


def test_incomplete_pool_is_reported():
    objects = [device_class(), node("node-a"), gpu_slice("node-a", [gpu("gpu-0")], slice_count=2),
               claim("one", [request()]), pod("p", {"gpu": "one"})]
    e = explain(objects, "pod/p")
    entry = e.node("node-a")
    assert entry.pool_problems == [f"pool {DRIVER}/node-a is incomplete: 1 of 2 ResourceSlices published"]
    assert funnel_counts(e, "node-a") == {"visible": 0}
    assert "1 devices not usable" in step(e, "node-a", "visible").details[0]


def test_pod_that_fits_says_where_and_with_which_devices():
    objects = [device_class(), node("node-a"), node("node-b"),
               gpu_slice("node-a", [gpu("gpu-0", "A100")]), gpu_slice("node-b", [gpu("gpu-0"), gpu("gpu-1")]),
               claim("h100", [request(selectors=(f"{PRODUCT} == 'H100'",))]), pod("p", {"gpu": "h100"})]
    e = explain(objects, "pod/p")
    assert e.fits and e.fixes == []
    assert e.placement["node"] == "node-b"
    assert e.placement["devices"]["default/h100"] == [
        {"request": "gpu", "driver": DRIVER, "pool": "node-b", "device": "gpu-0"}]
    assert to_text(e).startswith("pod default/p fits: would be scheduled to node node-b")


def test_bound_pod_is_reported_where_it_runs():
    objects = [device_class(), node("node-a"), gpu_slice("node-a", [gpu("gpu-0")]),
               claim("c", [request()], allocated=("node-a", ["gpu-0"]), reserved_for="p"),
               pod("p", {"gpu": "c"}, node_name="node-a")]
    e = explain(objects, "pod/p")
    assert e.fits and e.summary == "already bound to node node-a"


def test_explain_claim():
    objects = [device_class(), node("node-a"), node("node-b"),
               gpu_slice("node-a", [gpu("gpu-0")]), gpu_slice("node-b", [gpu("gpu-0"), gpu("gpu-1", "A100")]),
               claim("two-h100", [request(count=2, selectors=(f"{PRODUCT} == 'H100'",))])]
    e = explain(objects, "claim/two-h100")
    assert e.kind == "ResourceClaim" and not e.fits
    assert e.summary == ("0/2 nodes are available: 2 nodes: request 'gpu' of claim 'two-h100' needs 2 devices, "
                         "1 free matches.")
    assert e.fixes[0].kind == "lower-count"
    fitting = copy.deepcopy(objects)
    fitting[-1]["spec"]["devices"]["requests"][0]["exactly"]["count"] = 1
    ok = explain(fitting, "claim/two-h100")
    assert ok.fits and ok.placement["node"] == "node-a"


def test_explanations_are_deterministic_and_serialisable():
    import json

    objects = [device_class(), node("node-a"), gpu_slice("node-a", [gpu("gpu-0", "A100")]),
               claim("h100", [request(selectors=(f"{PRODUCT} == 'H100'",))]), pod("p", {"gpu": "h100"})]
    first = explain(objects, "pod/p").to_dict()
    second = explain(copy.deepcopy(objects), "pod/p").to_dict()
    assert first == second
    assert json.loads(json.dumps(first)) == first
    assert first["nodes"][0]["requests"][0]["funnel"][-1] == {
        "step": "selector", "label": f"selector #0: {PRODUCT} == 'H100'", "count": 0, "index": 0,
        "details": ["productName seen: A100 ×1"]}


def test_unknown_targets():
    with pytest.raises(TargetError, match="pod default/nope not found"):
        explain([node("node-a")], "pod/nope")
    with pytest.raises(TargetError, match="exists as other/p; use -n"):
        explain([node("node-a"), dict(pod("p"), metadata={"name": "p", "namespace": "other"})], "pod/p")
    with pytest.raises(TargetError, match="only pods and ResourceClaims"):
        parse_target("deployment/x")
    assert parse_target("pods/x") == ("Pod", "x")
    assert parse_target("resourceclaim/x") == ("ResourceClaim", "x")


def test_extended_resource_served_by_dra():
    gpu_class = device_class()
    gpu_class["spec"]["extendedResourceName"] = "nvidia.com/gpu"
    p = pod("p")
    p["spec"]["containers"][0]["resources"]["limits"] = {"nvidia.com/gpu": "3"}
    objects = [gpu_class, node("node-a"), gpu_slice("node-a", [gpu("gpu-0"), gpu("gpu-1")]), p]
    e = explain(objects, "pod/p")
    assert e.summary == ("0/1 nodes are available: 1 node: extended resource 'nvidia.com/gpu' of container 'main' "
                         "needs 3 devices, 2 free match.")
    funnel = e.node("node-a").requests[0]
    assert funnel.device_class == DRIVER and funnel.count == 3 and funnel.available == 2


def test_cel_hint_says_how_to_guard_the_lookup():
    objects = [device_class(), node("node-a"), gpu_slice("node-a", [gpu("gpu-0")]),
               claim("bad", [request(selectors=(f"device.attributes['{DRIVER}'].memoryGiB > 40",))]),
               pod("p", {"gpu": "bad"})]
    e = explain(objects, "pod/p")
    assert any(f"guard it: 'memoryGiB' in device.attributes['{DRIVER}']" in note for note in e.notes)


def test_text_shows_nodes_closest_to_fitting_first_and_caps_sections():
    objects = [device_class()]
    for i in range(12):
        # n07 has two matching GPUs (one short); every other node one GPU of its own product (none match).
        devices = [gpu("gpu-0", "X"), gpu("gpu-1", "X")] if i == 7 else [gpu("gpu-0", f"P{i}")]
        objects += [node(f"n{i:02d}"), gpu_slice(f"n{i:02d}", devices)]
    objects += [claim("x", [request(count=3, selectors=(f"{PRODUCT} == 'X'",))]), pod("p", {"gpu": "x"})]
    e = explain(objects, "pod/p", fixes=False)
    assert e.summary == ("0/12 nodes are available: 12 nodes: request 'gpu' of claim 'x' needs 3 devices, "
                         "at most 2 free match.")
    text = to_text(e)
    headers = [line for line in text.splitlines() if line.startswith("node ")]
    assert headers[:2] == ["node n07:", "node n00:"]
    assert len(headers) == 10
    assert "… and 2 more nodes (--node NAME shows one, -o wide or -o yaml shows all)" in text
    wide = render(e, "wide")
    assert len([line for line in wide.splitlines() if line.startswith("node ")]) == 12 and "more nodes" not in wide


def test_requests_that_fit_alone_but_not_together():
    objects = [device_class(), node("node-a"), gpu_slice("node-a", [gpu("gpu-0"), gpu("gpu-1"), gpu("gpu-2")]),
               claim("c", [request("a", count=2), request("b", count=2)]), pod("p", {"gpu": "c"})]
    e = explain(objects, "pod/p")
    assert e.summary == ("0/1 nodes are available: 1 node: claim 'c' needs 4 devices for all requests together, "
                         "only 3 distinct free devices match.")
    assert [r.available for r in e.node("node-a").requests] == [3, 3]
    assert e.fixes[0].kind == "lower-count"
    assert e.fixes[0].message == "node node-a fits if request 'a' in claim default/c asks for 1 instead of 2 devices"


def test_own_claim_allocated_where_the_pod_cannot_go():
    objects = [device_class(), node("node-a"), node("node-b"),
               gpu_slice("node-a", [gpu("gpu-0")]), gpu_slice("node-b", [gpu("gpu-0")]),
               claim("shared", [request()], allocated=("node-a", ["gpu-0"]), reserved_for="other"),
               pod("other", {"gpu": "shared"}, node_name="node-a"),
               pod("p", {"gpu": "shared"}, nodeSelector={"kubernetes.io/hostname": "node-b"})]
    e = explain(objects, "pod/p")
    assert e.summary == ("0/2 nodes are available: 1 node: claim 'shared' is allocated for node=node-a; "
                         "1 node: node(s) didn't match Pod's node affinity/selector.")
    assert e.fixes[0].kind == "reallocate-claim"
    assert e.fixes[0].message == ("node node-b fits if claim default/shared is deallocated and allocated again "
                                  "(deleting pod default/other)")


def test_invalid_pool():
    objects = [device_class(), node("node-a"),
               gpu_slice("node-a", [gpu("gpu-0")], slice_count=2, name="s1"),
               gpu_slice("node-a", [gpu("gpu-0")], slice_count=2, name="s2"),
               claim("c", [request()]), pod("p", {"gpu": "c"})]
    e = explain(objects, "pod/p")
    assert e.summary == "0/1 nodes are available: 1 node: invalid resource pools were encountered."
    assert e.node("node-a").pool_problems == [f"pool {DRIVER}/node-a is invalid: duplicate device name gpu-0"]
    assert funnel_counts(e, "node-a") == {"visible": 0}


def test_consumable_capacity_exhausted_by_a_share():
    shared = gpu("gpu-0", allowMultipleAllocations=True)
    holder = claim("share", [request(capacity={"requests": {"memory": "60Gi"}})],
                   allocated=("node-a", ["gpu-0"]), reserved_for="small")
    holder["status"]["allocation"]["devices"]["results"][0].update(
        {"shareID": "7c4a0e55-0b8e-4f0e-9a55-3a1d3b4f0001", "consumedCapacity": {"memory": "60Gi"}})
    objects = [device_class(), node("node-a"), gpu_slice("node-a", [shared]), holder,
               pod("small", {"gpu": "share"}, node_name="node-a"),
               claim("slice", [request(capacity={"requests": {"memory": "40Gi"}})]), pod("p", {"gpu": "slice"})]
    e = explain(objects, "pod/p")
    assert e.summary.endswith("request 'gpu' of claim 'slice' needs 1 device, no free device matches.")
    counts = funnel_counts(e, "node-a")
    assert counts["free"] == 1 and counts["capacity"] == 0  # a shared device is not "in use"
    assert step(e, "node-a", "capacity").details == ["1 with too little memory left"]
    assert e.fixes[0].kind == "release-claim" and e.fixes[0].change["claim"] == "default/share"


def test_a_constraint_failing_on_many_nodes_is_one_group_in_the_summary():
    """Each node names its own NVLink domains; the summary groups the nodes under the constraint with the largest
    group any node has (a 2,000-node cluster made a 300 KB line of one group per node)."""
    objects = [device_class()]
    for index, split in enumerate([(2, 2), (3, 1), (1, 1)]):
        name = f"node-{index}"
        devices = [gpu(f"gpu-{i}", attributes={"nvlinkDomain": {"string": f"{name}-nvl-{0 if i < split[0] else 1}"}})
                   for i in range(sum(split))]
        objects += [node(name), gpu_slice(name, devices)]
    objects += [claim("ring", [request(count=4)], constraints=[{"matchAttribute": f"{DRIVER}/nvlinkDomain"}]),
                pod("p", {"gpu": "ring"})]
    e = explain(objects, "pod/p")
    assert e.summary == ("0/3 nodes are available: 2 nodes: claim 'ring' constraint #0 matchAttribute "
                         f"{DRIVER}/nvlinkDomain: at most 3 free with the same nvlinkDomain on a node; need 4; "
                         "1 node: request 'gpu' of claim 'ring' needs 4 devices, 2 free match.")
    assert e.node("node-1").reasons[0].message.endswith("node-1-nvl-0: 3 free, node-1-nvl-1: 1 free; need 4 with "
                                                        "the same nvlinkDomain")


def test_the_summary_names_ten_kinds_of_reason_and_counts_the_rest():
    from gpudra.explain.analyze import MAX_SUMMARY_REASONS, summary_line

    nodes = []
    for index in range(MAX_SUMMARY_REASONS + 3):
        entry = model.NodeExplanation(f"n{index:02d}", fits=False)
        entry.reasons.append(model.Reason(model.OTHER, f"reason {index:02d}"))
        nodes.append(entry)
    nodes[0].reasons[0] = model.Reason(model.OTHER, "reason 01")  # two nodes share one reason
    line = summary_line(len(nodes) + 1, nodes + [model.NodeExplanation("ok", fits=True)])
    assert line.startswith("1/14 nodes are available: 2 nodes: reason 01; 1 node: reason 02;")
    assert line.count("; ") == MAX_SUMMARY_REASONS
    assert line.endswith("; 2 nodes: 2 other reasons (each node's own in its section, -o wide or -o yaml).")
