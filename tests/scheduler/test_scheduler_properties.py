"""Invariants of the scheduling cycle on random small clusters, for every policy."""

from __future__ import annotations

import copy

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpudra.scheduler import Scheduler

from gpudra.controllers import ManagedCluster
from gpudra.schedulinghelpers import node_selector_matches
from gpudra.scheduler.resources import pod_requests
from tests.support.builders import claim, device_class, devices, node, pod, resource_slice, template

POLICIES = ("kube", "binpack", "spread", "fragmentation")


@st.composite
def clusters(draw):
    objects = [device_class(), template("one"), template("two", count=2), claim("shared")]
    for index in range(draw(st.integers(1, 4))):
        name = f"n{index}"
        objects.append(node(name, cpu=str(draw(st.integers(1, 8)))))
        count = draw(st.integers(0, 4))
        if count:
            objects.append(resource_slice(name, devices(count)))
    for index in range(draw(st.integers(1, 8))):
        kind = draw(st.sampled_from(["none", "one", "two", "shared", "both"]))
        templates = {"gpu": kind} if kind in ("one", "two") else ({"gpu": "one"} if kind == "both" else None)
        claims = {"s": "shared"} if kind in ("shared", "both") else None
        cpu = draw(st.sampled_from([None, "500m", "1", "3"]))
        objects.append(pod(f"p{index}", templates=templates, claims=claims, cpu=cpu))
    return objects, draw(st.sampled_from(POLICIES))


def placement(objects, policy):
    cluster = ManagedCluster(copy.deepcopy(objects))
    results = Scheduler(cluster, policy=policy).run()
    return cluster, results


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters())
def test_scheduling_invariants(case):
    objects, policy = case
    cluster, results = placement(objects, policy)
    holders: dict = {}
    for key, current in cluster.claims.items():
        allocation = (current.get("status") or {}).get("allocation")
        if not allocation:
            assert not (current.get("status") or {}).get("reservedFor")
            continue
        for result in allocation["devices"]["results"]:
            device = (result["pool"], result["device"])
            assert device not in holders, f"{device} allocated to {holders.get(device)} and {key}"
            holders[device] = key
    used_cpu: dict = {}
    for result in results:
        the_pod = cluster.pods[result.pod]
        if not result.scheduled:
            assert "nodeName" not in the_pod["spec"]
            continue
        node_name = the_pod["spec"]["nodeName"]
        assert node_name == result.node
        used_cpu[node_name] = used_cpu.get(node_name, 0) + pod_requests(the_pod).get("cpu", 0)
        for claim_key in cluster.pod_claim_keys(the_pod):
            status = cluster.claims[claim_key]["status"]
            assert the_pod["metadata"]["uid"] in {entry["uid"] for entry in status["reservedFor"]}
            assert node_selector_matches(status["allocation"].get("nodeSelector"), cluster.nodes[node_name])
            assert all(r["pool"] == node_name for r in status["allocation"]["devices"]["results"])
    for node_name, cpu in used_cpu.items():
        assert cpu <= cluster.allocatable(node_name)["cpu"]

    again, again_results = placement(objects, policy)
    assert [(r.pod, r.node) for r in again_results] == [(r.pod, r.node) for r in results]

    for key in list(cluster.pods):
        cluster.end_pod(key)
    assert not cluster.allocated_devices
    assert all(not (c.get("status") or {}).get("allocation") for c in cluster.claims.values())
    assert all(not usage.pods for usage in cluster.usage.values())


@pytest.mark.parametrize("policy", POLICIES)
def test_shape_index_gives_the_linear_scan_answers(policy):
    # 150 nodes: kube scores the first 100 feasible nodes from a rotating start, so both the rotation and the
    # stop point matter; some nodes carry PreferNoSchedule taints (scores then depend on the whole set)
    objects = [device_class(), template("one"), template("two", count=2)]
    for index in range(150):
        taints = [{"key": "spot", "value": "1", "effect": "PreferNoSchedule"}] if index % 37 == 5 else None
        objects.append(node(f"n{index:03d}", cpu=str(2 + index % 3), taints=taints))
        objects.append(resource_slice(f"n{index:03d}", devices(1 + index % 3)))
    shapes = [{"templates": {"gpu": "one"}}, {"templates": {"gpu": "two"}}, {"cpu": "1"},
              {"templates": {"gpu": "one"}, "cpu": "500m"}]
    objects += [pod(f"p{i:03d}", **shapes[(i * 7) % 11 % 4]) for i in range(420)]

    if policy != "kube":  # these score every node: keep the case small
        objects = objects[:3] + objects[3 : 3 + 2 * 40] + [o for o in objects if o["kind"] == "Pod"][:110]

    def run(indexed: bool):
        cluster = ManagedCluster(copy.deepcopy(objects))
        scheduler = Scheduler(cluster, policy=policy, indexed=indexed)
        return [(r.pod, r.node, r.scores, r.message()) for r in scheduler.run()]

    linear, indexed = run(False), run(True)
    assert indexed == linear
    assert any(node_name is None for _, node_name, _, _ in linear)  # the cluster fills up


def test_scores_are_those_of_the_moment_the_pod_was_placed():
    objects = [node(f"n{i:03d}") for i in range(120)] + [pod(f"p{i}") for i in range(3)]
    cluster = ManagedCluster(copy.deepcopy(objects))
    results = Scheduler(cluster).run()  # the second and third pods use the shape index
    # scores are read only now, after later pods changed the nodes (each pod adds 100m/200Mi for scoring)
    linear = Scheduler(ManagedCluster(copy.deepcopy(objects)), indexed=False).run()
    assert [dict(r.scores) for r in results] == [dict(r.scores) for r in linear]
