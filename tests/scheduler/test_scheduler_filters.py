"""Every filter of the scheduling cycle, the summary line, and queue order."""

from __future__ import annotations

import copy

import pytest

from gpudra.scheduler import Scheduler

from gpudra.controllers import ManagedCluster
from gpudra.scheduler.resources import pod_requests
from tests.support.builders import gpu_cluster, node, pod, pod_spec, template
from tests.support.scheduling import placed, schedule


def reasons_on(objects: list[dict], pod_key: str, node_name: str) -> list[str]:
    cluster = ManagedCluster(copy.deepcopy(objects))
    scheduler = Scheduler(cluster)
    info = scheduler.pod_info(pod_key)
    return [r.message for r in scheduler.filter_node(info, node_name).result.reasons]


def test_node_name_filter():
    objects = [node("a"), node("b"), pod("p", nodeName="b")]
    cluster = ManagedCluster(objects)
    # a pod with spec.nodeName is already bound (the scheduler never sees it), but the filter exists for explain
    cluster.pods["default/p"]["spec"]["nodeName"] = "b"
    scheduler = Scheduler(cluster)
    info = scheduler.pod_info("default/p")
    assert [r.message for r in scheduler.filter_node(info, "a").result.reasons] == [
        "node(s) didn't match the requested node name"
    ]
    assert scheduler.filter_node(info, "b").result.fits


def test_bound_pods_are_not_scheduled_but_use_resources():
    bound = pod("old", cpu="6", nodeName="a")
    _, _, results = schedule([node("a"), node("b", cpu="4"), bound, pod("new", cpu="3")])
    assert placed(results) == {"default/new": "b"}


def test_node_selector():
    objects = [node("a", labels={"gpu": "h100"}), node("b", labels={"gpu": "a100"}),
               pod("p", nodeSelector={"gpu": "a100"})]
    assert reasons_on(objects, "default/p", "a") == ["node(s) didn't match Pod's node affinity/selector"]
    assert placed(schedule(objects)[2]) == {"default/p": "b"}


@pytest.mark.parametrize(
    "requirement, matching",
    [
        ({"key": "zone", "operator": "In", "values": ["x", "y"]}, {"a", "b"}),
        ({"key": "zone", "operator": "NotIn", "values": ["x"]}, {"b", "c"}),
        ({"key": "zone", "operator": "Exists"}, {"a", "b"}),
        ({"key": "zone", "operator": "DoesNotExist"}, {"c"}),
        ({"key": "gpus", "operator": "Gt", "values": ["4"]}, {"b"}),
        ({"key": "gpus", "operator": "Lt", "values": ["8"]}, {"a"}),
    ],
)
def test_required_node_affinity_operators(requirement, matching):
    nodes = [node("a", labels={"zone": "x", "gpus": "4"}), node("b", labels={"zone": "y", "gpus": "8"}),
             node("c", labels={})]
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [requirement]}]}}}
    objects = [*nodes, pod("p", affinity=affinity)]
    cluster = ManagedCluster(objects)
    scheduler = Scheduler(cluster)
    info = scheduler.pod_info("default/p")
    fits = {n for n in "abc" if scheduler.filter_node(info, n).result.fits}
    assert fits == matching


def test_node_affinity_match_fields_and_terms_are_ored():
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["c"]}]},
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["x"]}]},
    ]}}}
    objects = [node("a", labels={"zone": "x"}), node("b"), node("c"), pod("p", affinity=affinity)]
    cluster = ManagedCluster(objects)
    scheduler = Scheduler(cluster)
    info = scheduler.pod_info("default/p")
    assert {n for n in "abc" if scheduler.filter_node(info, n).result.fits} == {"a", "c"}


@pytest.mark.parametrize("effect", ["NoSchedule", "NoExecute"])
def test_untolerated_taints_filter(effect):
    taint = {"key": "nvidia.com/gpu", "value": "present", "effect": effect}
    objects = [node("a", taints=[taint]), node("b"), pod("p")]
    assert reasons_on(objects, "default/p", "a") == ["node(s) had untolerated taint {nvidia.com/gpu: present}"]
    tolerant = pod("q", tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": effect}])
    assert reasons_on([*objects[:2], tolerant], "default/q", "a") == []
    equal = pod("r", tolerations=[{"key": "nvidia.com/gpu", "operator": "Equal", "value": "other"}])
    assert reasons_on([*objects[:2], equal], "default/r", "a") != []


def test_prefer_no_schedule_only_scores():
    taint = {"key": "spot", "value": "true", "effect": "PreferNoSchedule"}
    objects = [node("a", taints=[taint]), node("b"), pod("p")]
    assert reasons_on(objects, "default/p", "a") == []
    assert placed(schedule(objects)[2]) == {"default/p": "b"}  # a would win the name tie-break


def test_unschedulable_node():
    objects = [node("a", unschedulable=True), pod("p")]
    assert reasons_on(objects, "default/p", "a") == ["node(s) were unschedulable"]
    tolerant = pod("q", tolerations=[{"key": "node.kubernetes.io/unschedulable", "operator": "Exists",
                                      "effect": "NoSchedule"}])
    assert reasons_on([objects[0], tolerant], "default/q", "a") == []


def test_cpu_memory_pods_and_extended_resources():
    objects = [
        node("a", cpu="2", memory="1Gi", pods="1", extra={"example.com/fpga": "1"}),
        pod("existing", nodeName="a"),
        pod("p", cpu="3", memory="2Gi", extended={"example.com/fpga": "2"}),
    ]
    assert reasons_on(objects, "default/p", "a") == [
        "Too many pods", "Insufficient cpu", "Insufficient memory", "Insufficient example.com/fpga"
    ]


def test_requests_fit_exactly_and_used_resources_count():
    objects = [node("a", cpu="4", memory="4Gi"), pod("one", cpu="2", memory="2Gi"), pod("two", cpu="2", memory="2Gi"),
               pod("three", cpu="100m")]
    results = schedule(objects)[2]
    assert placed(results) == {"default/one": "a", "default/two": "a", "default/three": None}
    assert results["default/three"].message() == "0/1 nodes are available: 1 Insufficient cpu."


def test_init_containers_take_the_maximum_and_sidecars_add_up():
    spec = pod_spec(cpu="1")
    spec["initContainers"] = [
        {"name": "init", "resources": {"requests": {"cpu": "3"}}},
        {"name": "sidecar", "restartPolicy": "Always", "resources": {"requests": {"cpu": "500m"}}},
        {"name": "init2", "resources": {"requests": {"cpu": "1"}}},
    ]
    requests = pod_requests({"spec": spec})
    # max(init 3, sidecar 0.5 + init2 1, containers 1 + sidecar 0.5) = 3
    assert requests["cpu"] == 3000
    spec["initContainers"][0]["resources"]["requests"]["cpu"] = "1"
    assert pod_requests({"spec": spec})["cpu"] == 1500
    spec["overhead"] = {"cpu": "250m"}
    assert pod_requests({"spec": spec})["cpu"] == 1750


def test_limits_stand_in_for_missing_requests():
    spec = pod_spec()
    spec["containers"][0]["resources"] = {"limits": {"cpu": "2", "memory": "1Gi"}}
    assert pod_requests({"spec": spec}) == {"cpu": 2000, "memory": 1024**3}


def test_dynamic_resources_filter_and_summary_line():
    objects = [
        *gpu_cluster({"a": 1, "b": 2}),
        node("c", cpu="1"),
        template("two-gpus", count=2),
        pod("p", templates={"gpu": "two-gpus"}, cpu="2"),
    ]
    results = schedule(objects)[2]
    assert placed(results) == {"default/p": "b"}
    objects.append(pod("q", templates={"gpu": "two-gpus"}, cpu="2"))
    results = schedule(objects)[2]
    assert results["default/q"].message() == (
        "0/3 nodes are available: 1 Insufficient cpu, 2 cannot allocate all claims."
    )


def test_missing_device_class_is_a_prefilter_reason():
    objects = [*gpu_cluster({"a": 1}), template("t", device_class_name="tpu"), pod("p", templates={"g": "t"})]
    results = schedule(objects)[2]
    assert results["default/p"].message() == (
        "0/1 nodes are available: request gpu: device class tpu does not exist."
    )


def test_cel_runtime_error_aborts_the_attempt():
    spec = {"devices": {"requests": [{"name": "gpu", "exactly": {
        "deviceClassName": "gpu", "selectors": [{"cel": {"expression": 'device.attributes["gpu.example.com"].nosuch == 1'}}]}}]}}
    objects = [*gpu_cluster({"a": 1}), template("t", spec=spec), pod("p", templates={"g": "t"})]
    result = schedule(objects)[2]["default/p"]
    assert not result.scheduled and result.error
    assert "nosuch" in result.message()


def first_filter_error_in_scan(names: list[str], start: int, to_find: int, failing: set[str]) -> str | None:
    """kube-scheduler's findNodesThatPassFilters (pkg/scheduler/schedule_one.go) read sequentially: nodes are
    checked from `nextStartNodeIndex` round the list; the search stops after `numNodesToFind` feasible nodes,
    and a Filter Error (not Unschedulable) on a node ends the cycle with that error."""
    feasible = 0
    for i in range(len(names)):
        name = names[(start + i) % len(names)]
        if name in failing:
            return name
        feasible += 1
        if feasible >= to_find:
            return None
    return None


@pytest.mark.parametrize("failing", [{"n010", "n120"}, {"n010"}])
def test_a_filter_error_is_the_first_one_the_rotating_scan_reaches(failing):
    # 150 nodes, one device each; the devices of `failing` lack the attribute a CEL selector reads (a runtime
    # error: Filter returns Error, the cycle aborts). numFeasibleNodesToFind(150) = max(150 * (50 - 150 // 125)
    # // 100, 100) = 100, so a pod without claims stops after n000..n099 and the next scan starts at n100. Both
    # pods of the claim shape (the second one answered from the shape index) must stop at the first failing node
    # from there; upstream also advances the start past the nodes processed before the error, which reaches
    # the same failing node for the second pod.
    from tests.support.builders import device_class, devices, resource_slice

    names = [f"n{i:03d}" for i in range(150)]
    objects: list[dict] = [device_class()]
    for name in names:
        objects += [node(name), resource_slice(name, devices(1) if name in failing else devices(1, model="a"))]
    spec = {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu", "selectors": [
        {"cel": {"expression": 'device.attributes["gpu.example.com"].model == "a"'}}]}}]}}
    objects += [template("t", spec=spec), pod("plain"), pod("a1", templates={"g": "t"}), pod("a2", templates={"g": "t"})]
    results = schedule(objects)[2]
    assert results["default/plain"].scheduled
    expected = first_filter_error_in_scan(names, 100, 100, failing)
    assert expected is not None
    for key in ("default/a1", "default/a2"):
        result = results[key]
        assert not result.scheduled and "model" in (result.error or "")
        assert list(result.filtered) == [expected]


def test_queue_order_priority_then_input_order():
    objects = [
        node("a", cpu="1"),
        {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "high"}, "value": 1000},
        pod("first", cpu="1"),
        pod("second", cpu="1", priorityClassName="high"),
        pod("third", cpu="1", priority=5),
    ]
    cluster, scheduler, results = schedule(objects)
    assert placed(results) == {"default/second": "a", "default/third": None, "default/first": None}
    assert list(results) == ["default/second", "default/third", "default/first"]


def test_nodes_without_status_are_unlimited_for_native_resources():
    objects = [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": "bare"}}, pod("p", cpu="64"),
               pod("q", extended={"example.com/fpga": "1"})]
    results = schedule(objects)[2]
    assert placed(results) == {"default/p": "bare", "default/q": None}
    assert results["default/q"].message() == "0/1 nodes are available: 1 Insufficient example.com/fpga."


def nodes_processed_before(names: list[str], start: int, to_find: int, failing: set[str]) -> int:
    """findNodesThatPassFilters read sequentially: how many nodes the scan passed (feasible or not) before it
    stopped, at `to_find` feasible nodes or at a Filter error; findNodesThatFit then moves nextStartNodeIndex by
    that many "regardless of whether an error has occurred" (pkg/scheduler/schedule_one.go)."""
    for i in range(len(names)):
        if names[(start + i) % len(names)] in failing:
            return i
        if i + 1 >= to_find:
            return i + 1
    return len(names)


def test_the_scan_start_moves_past_the_nodes_processed_before_a_filter_error():
    from tests.support.builders import device_class, devices, resource_slice

    names = [f"n{i:03d}" for i in range(150)]
    failing = {"n010", "n120"}
    objects: list[dict] = [device_class()]
    for name in names:
        objects += [node(name), resource_slice(name, devices(1) if name in failing else devices(1, model="a"))]
    spec = {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu", "selectors": [
        {"cel": {"expression": 'device.attributes["gpu.example.com"].model == "a"'}}]}}]}}
    objects += [template("t", spec=spec), pod("plain"), pod("a1", templates={"g": "t"}),
                pod("a2", templates={"g": "t"}), pod("plain2")]
    _cluster, scheduler, results = schedule(objects)
    start = 0
    for key, pod_failing in (("plain", set()), ("a1", failing), ("a2", failing), ("plain2", set())):
        start = (start + nodes_processed_before(names, start, 100, pod_failing)) % len(names)
        assert results[f"default/{key}"].scheduled == (not pod_failing)
    assert scheduler._next_start_node_index == start == 70  # 100, then 120 twice, then 100 more
