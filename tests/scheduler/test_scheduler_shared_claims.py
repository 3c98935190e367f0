"""The scheduler's per-shape shortcuts give the answers of the plain path: claims of one shape asked about through
shared copies (`Scheduler._shared_claims`), plain scores ranked as ints (`shapeindex.plain_key`), and requests read
once per pod (`resources.pod_request_totals`)."""

from __future__ import annotations

import copy

import pytest

from gpudra.scheduler import Scheduler

from gpudra.controllers import ManagedCluster
from gpudra.scheduler.resources import ResourceError, pod_request_totals, pod_requests
from gpudra.scheduler.shapeindex import plain_key
from tests.support.builders import claim, claim_spec, device_class, devices, node, pod, resource_slice, template


def _objects() -> list[dict]:
    objects = [device_class(), template("one"), template("two", count=2), template("pair", count=2), claim("solo")]
    for index in range(12):
        objects.append(node(f"n{index:02d}", cpu=str(2 + index % 3)))
        objects.append(resource_slice(f"n{index:02d}", devices(1 + index % 4)))
    shapes = [{"templates": {"gpu": "one"}}, {"templates": {"gpu": "two"}}, {"templates": {"gpu": "pair"}},
              {"templates": {"gpu": "one"}, "cpu": "500m"}]
    objects += [pod(f"p{i:02d}", **shapes[i % 4]) for i in range(30)]
    objects.append(pod("solo-pod", claims={"gpu": "solo"}))
    return objects


def _run(objects: list[dict], shared: bool, policy: str = "kube") -> tuple[list, dict]:
    cluster = ManagedCluster(copy.deepcopy(objects))
    scheduler = Scheduler(cluster, policy=policy)
    if not shared:
        scheduler._shared_claims = lambda dra: None  # type: ignore[method-assign,assignment,return-value]
    results = [(r.pod, r.node, dict(r.scores), r.message(), r.error) for r in scheduler.run()]
    allocations = {key: (c.get("status") or {}).get("allocation") for key, c in cluster.claims.items()}
    return results, allocations


@pytest.mark.parametrize("policy", ["kube", "binpack"])
def test_shared_claim_copies_give_the_answers_of_each_pods_own_claims(policy):
    objects = _objects()
    shared = _run(objects, True, policy)
    assert shared == _run(objects, False, policy)
    assert any(node_name is None for _, node_name, _, _, _ in shared[0])  # the cluster fills up


def test_a_changed_template_spec_is_a_new_shape_with_its_own_copies():
    cluster = ManagedCluster(copy.deepcopy(_objects()))
    scheduler = Scheduler(cluster)
    for key in cluster.pending_pods()[:8]:
        scheduler.schedule_pod(key)
    copies_before = {signature: list(copies) for signature, copies in scheduler._claim_copies.items()}
    # the resourceclaim controller's claims of the pods still pending now ask for three devices instead of one
    pending = cluster.pending_pods()
    changed = [key for key in pending if "one" in str(cluster.pods[key]["spec"]["resourceClaims"])]
    for key in changed:
        for claim_key in cluster.pod_claim_keys(cluster.pods[key]):
            cluster.claims[claim_key]["spec"] = claim_spec(3)
    fresh = ManagedCluster(copy.deepcopy(list(cluster.nodes.values()) + cluster.slices
                                  + list(cluster.device_classes.values()) + list(cluster.templates.values())
                                  + list(cluster.claims.values()) + list(cluster.pods.values())))
    plain = Scheduler(fresh)
    plain._shared_claims = lambda dra: None  # type: ignore[method-assign,assignment,return-value]
    for key in pending:
        got, want = scheduler.schedule_pod(key), plain.schedule_pod(key)
        assert (got.node, got.message(), got.error) == (want.node, want.message(), want.error), key
    new = [copies for signature, copies in scheduler._claim_copies.items() if signature not in copies_before]
    assert any(c[0]["spec"] == claim_spec(3) for c in new)  # the changed spec got copies of its own
    for signature, copies in copies_before.items():  # and the earlier copies were left as they were
        assert scheduler._claim_copies.get(signature, copies) == copies


@pytest.mark.parametrize("indexed", [True, False])
def test_search_errors_name_each_pods_own_claim(indexed):
    # 40 devices exceed the claim limit of 32: the allocator's message names the claim that asked
    objects = [device_class(), template("huge", count=40), node("n0"), resource_slice("n0", devices(2))]
    objects += [pod(f"p{i}", templates={"gpu": "huge"}) for i in range(3)]
    cluster = ManagedCluster(objects)
    results = Scheduler(cluster, indexed=indexed).run()
    for result in results:
        assert not result.scheduled
        own = cluster.pod_claim_keys(cluster.pods[result.pod])
        assert len(own) == 1
        text = result.error or result.message()
        assert own[0] in text, text
        others = {k for r in results if r is not result for k in cluster.pod_claim_keys(cluster.pods[r.pod])}
        assert not any(other in text for other in others)


@pytest.mark.parametrize("spec", [
    {"containers": [{"name": "a"}]},
    {"containers": [{"name": "a", "resources": {"requests": {"cpu": "1"}}}, {"name": "b", "resources": {
        "limits": {"memory": "1Gi", "nvidia.com/gpu": "1"}}}]},
    {"initContainers": [{"name": "i", "resources": {"requests": {"cpu": "3"}}},
                        {"name": "s", "restartPolicy": "Always", "resources": {"requests": {"memory": "1Gi"}}}],
     "containers": [{"name": "a", "resources": {"requests": {"cpu": "500m"}}}], "overhead": {"cpu": "100m"}},
])
def test_request_totals_are_the_two_readings(spec):
    pod_obj = {"spec": spec}
    assert pod_request_totals(pod_obj) == (pod_requests(pod_obj), pod_requests(pod_obj, non_zero=True))


def test_request_totals_report_a_bad_quantity():
    with pytest.raises(ResourceError):
        pod_request_totals({"spec": {"containers": [{"resources": {"requests": {"cpu": "lots"}}}]}})


@pytest.mark.parametrize("count", [1, 2, 7, 500])
def test_plain_keys_order_as_score_then_first_position(count):
    entries = [(score, position) for score in (-3, 0, 1, 250) for position in range(count)]
    by_tuple = sorted(entries, key=lambda e: (e[0], -e[1]))
    by_key = sorted(entries, key=lambda e: plain_key(e[0], e[1], count))
    assert by_key == by_tuple
    for score, position in entries:
        key = plain_key(score, position, count)
        assert (key // count, count - 1 - key % count) == (score, position)


SHARED_DEVICE = """
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: shared}
spec:
  selectors: [{cel: {expression: 'device.driver == "dra.example.com"'}}]
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: t, namespace: default}
spec:
  spec:
    devices:
      requests:
      - name: r
        firstAvailable:
        - {name: big, deviceClassName: shared, capacity: {requests: {memory: 30Gi}}}
        - {name: small, deviceClassName: shared, capacity: {requests: {memory: 5Gi}}}
      - name: r2
        exactly: {deviceClassName: shared, capacity: {requests: {memory: 1Gi}}}
"""


def _shared_device_objects(nodes: int, pods: int) -> list[dict]:
    from gpudra.api.load import load_text

    objects = [doc.obj for doc in load_text(SHARED_DEVICE, "<test>")]
    for index in range(nodes):
        objects.append(node(f"n{index}"))
        objects.append({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
                        "metadata": {"name": f"n{index}-slice"},
                        "spec": {"driver": "dra.example.com", "nodeName": f"n{index}",
                                 "pool": {"name": f"n{index}", "generation": 1, "resourceSliceCount": 1},
                                 "devices": [{"name": "gpu-0", "allowMultipleAllocations": True,
                                              "capacity": {"memory": {"value": "40Gi"}}}]}})
    objects += [pod(f"p{i:02d}", templates={"gpu": "t"}) for i in range(pods)]
    return objects


@pytest.mark.parametrize("policy", ["kube", "binpack", "spread"])
def test_pods_sharing_a_device_get_distinct_share_ids(policy):
    """Upstream's allocator draws a fresh UUID for each result on a device that allows multiple allocations
    (k8s.io/dynamic-resource-allocation structured allocator: `shareID = uuid.NewUUID()`), so no two results on one
    device carry the same shareID. Claims of one shape asked about through shared copies used to bind the copies'
    allocations for claims that take the full search (firstAvailable, two requests): one shareID for two pods."""
    objects = _shared_device_objects(nodes=2, pods=6)
    results, allocations = _run(objects, True, policy)
    assert (results, allocations) == _run(objects, False, policy)
    shares = [(r["pool"], r["device"], r["shareID"]) for allocation in allocations.values() if allocation
              for r in allocation["devices"]["results"]]
    assert len(shares) >= 6 and len(set(shares)) == len(shares), shares
