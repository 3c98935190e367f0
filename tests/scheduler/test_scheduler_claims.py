"""Claims in the scheduling cycle: sharing, the reservedFor limit, deallocation, extended resources."""

from __future__ import annotations

import re

from gpudra.scheduler import Scheduler

from gpudra.controllers import ManagedCluster
from gpudra.scheduler.claimstatus import DELETE_PROTECTION_FINALIZER
from tests.support.builders import claim, device_class, devices, gpu_cluster, node, pod, resource_slice, template
from tests.support.scheduling import devices_of, placed, schedule


def test_binding_writes_allocation_finalizer_reservation_and_node():
    cluster, _, results = schedule([*gpu_cluster({"a": 2}), template("t"), pod("p", templates={"gpu": "t"})])
    assert placed(results) == {"default/p": "a"}
    (claim_key,) = cluster.claims
    generated = cluster.claims[claim_key]
    the_pod = cluster.pods["default/p"]
    assert generated["metadata"]["finalizers"] == [DELETE_PROTECTION_FINALIZER]
    assert generated["status"]["reservedFor"] == [
        {"resource": "pods", "name": "p", "uid": the_pod["metadata"]["uid"]}
    ]
    assert devices_of(cluster, claim_key) == ["a/gpu-0"]
    assert generated["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["values"] == ["a"]
    assert the_pod["spec"]["nodeName"] == "a"
    assert {"type": "PodScheduled", "status": "True"} in the_pod["status"]["conditions"]


def test_shared_claim_is_reserved_for_every_pod_and_pins_them_to_its_node():
    objects = [*gpu_cluster({"a": 1, "b": 4}), claim("shared"),
               pod("p1", claims={"gpu": "shared"}), pod("p2", claims={"gpu": "shared"}, cpu="1"),
               pod("p3", claims={"gpu": "shared"}, cpu="1")]
    cluster, _, results = schedule(objects, policy="spread")
    node_of_claim = devices_of(cluster, "default/shared")[0].split("/")[0]
    assert set(placed(results).values()) == {node_of_claim}
    reserved = [entry["name"] for entry in cluster.claims["default/shared"]["status"]["reservedFor"]]
    assert reserved == ["p1", "p2", "p3"]


def test_the_257th_pod_of_a_shared_claim_is_unschedulable():
    pods = [pod(f"p{i:03d}", claims={"gpu": "shared"}) for i in range(257)]
    objects = [device_class(), {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "a"}},
               resource_slice("a", devices(1)), claim("shared"), *pods]
    cluster, _, results = schedule(objects)
    assert sum(1 for r in results.values() if r.scheduled) == 256
    last = results["default/p256"]
    assert not last.scheduled
    assert "reserved for 256 pods, the maximum of 256" in last.message()
    assert len(cluster.claims["default/shared"]["status"]["reservedFor"]) == 256


def test_pod_end_unreserves_deallocates_and_deletes_template_claims():
    objects = [*gpu_cluster({"a": 1}), template("t"), claim("shared"),
               pod("p", templates={"gpu": "t"}, claims={"s": "shared"}), pod("q", claims={"s": "shared"}),
               pod("waiting", templates={"gpu": "t"})]
    # one device: p takes it through its template claim... and the shared claim needs a device too
    objects[2] = resource_slice("a", devices(2))
    cluster, scheduler, results = schedule(objects)
    assert placed(results) == {"default/p": "a", "default/q": "a", "default/waiting": None}
    template_claim = next(k for k in cluster.claims if k.startswith("default/p-gpu-"))
    cluster.end_pod("default/p")
    assert template_claim not in cluster.claims  # generated claim deleted
    shared = cluster.claims["default/shared"]
    assert [e["name"] for e in shared["status"]["reservedFor"]] == ["q"]  # still used by q: stays allocated
    assert shared["status"]["allocation"]
    assert cluster.pods["default/p"]["status"]["phase"] == "Succeeded"
    # the freed device lets the waiting pod in
    assert scheduler.schedule_pod("default/waiting").node == "a"
    cluster.delete_pod("default/q")
    assert "status" not in shared and "finalizers" not in shared["metadata"]  # deallocated
    assert "default/q" not in cluster.pods


def test_freed_devices_are_reused_by_the_next_run():
    objects = [*gpu_cluster({"a": 1}), template("t"), pod("p1", templates={"gpu": "t"}), pod("p2", templates={"gpu": "t"})]
    cluster, scheduler, results = schedule(objects)
    assert placed(results) == {"default/p1": "a", "default/p2": None}
    cluster.end_pod("default/p1")
    (again,) = scheduler.run()
    assert again.pod == "default/p2" and again.node == "a"


def test_bound_pods_in_the_input_get_their_reservation():
    allocated = claim("c")
    allocated["status"] = {"allocation": {"devices": {"results": [
        {"request": "gpu", "driver": "gpu.example.com", "pool": "a", "device": "gpu-0"}]}}}
    objects = [*gpu_cluster({"a": 1}), allocated, pod("running", claims={"gpu": "c"}, nodeName="a"),
               template("t"), pod("new", templates={"gpu": "t"})]
    cluster, _, results = schedule(objects)
    assert [e["name"] for e in cluster.claims["default/c"]["status"]["reservedFor"]] == ["running"]
    assert placed(results) == {"default/new": None}


def test_allocated_claim_unusable_everywhere_is_deallocated_and_retried():
    stale = claim("c")
    stale["metadata"]["finalizers"] = [DELETE_PROTECTION_FINALIZER]
    stale["status"] = {"allocation": {
        "devices": {"results": [{"request": "gpu", "driver": "gpu.example.com", "pool": "gone", "device": "gpu-0"}]},
        "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": ["gone"]}]}]}}}
    cluster, _, results = schedule([*gpu_cluster({"a": 1}), stale, pod("p", claims={"gpu": "c"})])
    assert placed(results) == {"default/p": "a"}
    assert devices_of(cluster, "default/c") == ["a/gpu-0"]


def test_a_pod_without_an_allocated_claim_is_not_tried_again_in_the_same_pass(monkeypatch):
    """Upstream's DynamicResources PostFilter (kubernetes `pkg/scheduler/framework/plugins/dynamicresources/
    dynamicresources.go`) deallocates only an allocated claim that was unavailable on some node; a pod with no
    such claim gets Unschedulable ("no new claims to deallocate" / "still not schedulable") and waits for a later
    attempt. Here the pod's Filter budget (its FilterTimeout) is already spent when the device search starts, so
    every node answers "timed out": the pod must stay unschedulable in this pass, not be retried at once with a
    fresh budget."""
    import time
    from types import SimpleNamespace

    from gpudra.allocator import TIMED_OUT
    from gpudra.scheduler import scheduler as scheduler_module

    budgets: list[float] = []

    def clock() -> float:  # the first pod_info's clock is an hour behind: its deadline has passed
        budgets.append(time.monotonic())
        return budgets[-1] - (3600 if len(budgets) == 1 else 0)

    monkeypatch.setattr(scheduler_module, "time", SimpleNamespace(monotonic=clock))
    cluster = ManagedCluster([*gpu_cluster({"a": 1, "b": 1}), template("one"), pod("p", templates={"gpu": "one"})])
    result = Scheduler(cluster, filter_timeout=10).run()[0]
    assert not result.scheduled
    assert {r.message for f in result.filtered.values() for r in f.reasons} == {TIMED_OUT}


def test_extended_resource_served_by_dra():
    objects = [device_class(extended="nvidia.com/gpu"), node("a"), resource_slice("a", devices(4)),
               pod("p", extended={"nvidia.com/gpu": "2"}, cpu="1")]
    cluster, _, results = schedule(objects)
    assert placed(results) == {"default/p": "a"}
    status = cluster.pods["default/p"]["status"]["extendedResourceClaimStatus"]
    name = status["resourceClaimName"]
    assert re.fullmatch(r"p-extended-resources-[a-z0-9]{5}", name)
    # container 0's sorted request names are [cpu, nvidia.com/gpu]: the gpu is request index 1
    assert status["requestMappings"] == [
        {"containerName": "main", "resourceName": "nvidia.com/gpu", "requestName": "container-0-request-1"}]
    special = cluster.claims[f"default/{name}"]
    assert special["metadata"]["annotations"] == {"resource.kubernetes.io/extended-resource-claim": "true"}
    assert special["spec"]["devices"]["requests"][0]["exactly"] == {
        "deviceClassName": "gpu", "allocationMode": "ExactCount", "count": 2}
    assert devices_of(cluster, f"default/{name}") == ["a/gpu-0", "a/gpu-1"]
    cluster.end_pod("default/p")
    assert f"default/{name}" not in cluster.claims


def test_implicit_extended_resource_name_and_too_many_devices():
    objects = [device_class(), node("a"), resource_slice("a", devices(2)),
               pod("p", extended={"deviceclass.resource.kubernetes.io/gpu": "3"}),
               pod("q", extended={"deviceclass.resource.kubernetes.io/gpu": "2"})]
    results = schedule(objects)[2]
    assert placed(results) == {"default/p": None, "default/q": "a"}
    assert results["default/p"].message() == "0/1 nodes are available: 1 cannot allocate all claims."


def test_device_plugin_allocatable_takes_precedence_over_dra():
    objects = [device_class(extended="nvidia.com/gpu"), node("a", extra={"nvidia.com/gpu": "8"}),
               resource_slice("a", devices(1)), pod("p", extended={"nvidia.com/gpu": "4"})]
    cluster, _, results = schedule(objects)
    assert placed(results) == {"default/p": "a"}
    assert "extendedResourceClaimStatus" not in cluster.pods["default/p"].get("status", {})
    assert cluster.usage["a"].requested["nvidia.com/gpu"] == 4


def test_extended_resource_without_class_or_allocatable():
    results = schedule([node("a"), pod("p", extended={"nvidia.com/gpu": "1"})])[2]
    assert results["default/p"].message() == "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."


def test_newest_class_wins_an_extended_resource_name():
    from gpudra.scheduler.dra import extended_resource_classes

    cluster = ManagedCluster([
        device_class("old", extended="nvidia.com/gpu", created="2026-01-01T00:00:00Z"),
        device_class("new-b", extended="nvidia.com/gpu", created="2026-02-01T00:00:00Z"),
        device_class("new-a", extended="nvidia.com/gpu", created="2026-02-01T00:00:00Z"),
    ])
    assert extended_resource_classes(cluster)["nvidia.com/gpu"] == "new-a"


def test_pod_with_two_claims_allocates_them_together():
    objects = [*gpu_cluster({"a": 2, "b": 3}), template("one"), template("two", count=2),
               pod("p", templates={"x": "one", "y": "two"})]
    cluster, _, results = schedule(objects, policy="binpack")
    # a has exactly 3? no: a has 2 devices, so only b fits both claims together
    assert placed(results) == {"default/p": "b"}
    keys = cluster.pod_claim_keys(cluster.pods["default/p"])
    assert [len(devices_of(cluster, key)) for key in keys] == [1, 2]
    assert set(devices_of(cluster, keys[0])).isdisjoint(devices_of(cluster, keys[1]))


def test_scheduler_reports_unknown_claim():
    results = schedule([*gpu_cluster({"a": 1}), pod("p", claims={"gpu": "missing"})])[2]
    assert results["default/p"].message() == (
        '0/1 nodes are available: resourceclaim.resource.k8s.io "missing" not found.'
    )
    assert not results["default/p"].scheduled


def test_scheduler_object_reuse_keeps_state():
    cluster = ManagedCluster([*gpu_cluster({"a": 1}), template("t")])
    scheduler = Scheduler(cluster)
    cluster.apply([pod("p", templates={"gpu": "t"})])
    assert scheduler.run()[0].node == "a"
    cluster.apply([pod("q", templates={"gpu": "t"})])
    (result,) = scheduler.run()
    assert result.pod == "default/q" and result.node is None


def test_extended_resource_claims_of_same_shape_pods_are_their_own():
    objects = [device_class(extended="nvidia.com/gpu"), node("a"), resource_slice("a", devices(4)),
               pod("p", extended={"nvidia.com/gpu": "1"}), pod("q", extended={"nvidia.com/gpu": "1"})]
    cluster, _, results = schedule(objects)
    assert placed(results) == {"default/p": "a", "default/q": "a"}
    for name in ("p", "q"):
        the_pod = cluster.pods[f"default/{name}"]
        claim_name = the_pod["status"]["extendedResourceClaimStatus"]["resourceClaimName"]
        special = cluster.claims[f"default/{claim_name}"]
        assert claim_name.startswith(f"{name}-extended-resources-")
        assert special["metadata"]["ownerReferences"][0]["uid"] == the_pod["metadata"]["uid"]
        assert special["status"]["reservedFor"][0]["name"] == name
    devices_p, devices_q = (devices_of(cluster, k) for k in cluster.claims)
    assert set(devices_p).isdisjoint(devices_q)


def test_invalidate_after_editing_objects_in_place():
    objects = [*gpu_cluster({"a": 1}), template("t"), pod("p1", templates={"gpu": "t"}), pod("p2", templates={"gpu": "t"})]
    cluster, scheduler, results = schedule(objects)
    assert placed(results) == {"default/p1": "a", "default/p2": None}
    held = cluster.pod_claim_keys(cluster.pods["default/p1"])[0]
    del cluster.claims[held]["status"]  # someone released the device behind the scheduler's back
    cluster.pods["default/p1"]["status"]["phase"] = "Succeeded"
    cluster.invalidate()
    assert scheduler.schedule_pod("default/p2").node == "a"
