"""Each scoring policy's choice on small clusters whose answer is worked out by hand in the comments."""

from __future__ import annotations

import pytest

from gpudra.scheduler import Scheduler, num_feasible_nodes_to_find

from gpudra.controllers import ManagedCluster
from gpudra.scheduler.scoring import default_normalize
from tests.support.builders import claim_spec, DRIVER, claim, device_class, devices, gpu_cluster, node, pod, template
from tests.support.scheduling import devices_of, placed, schedule


def test_kube_least_allocated():
    objects = [node("a"), node("b"), pod("old", cpu="4", nodeName="a"), pod("new", cpu="1")]
    assert placed(schedule(objects)[2]) == {"default/new": "b"}


def test_kube_balanced_allocation_breaks_a_least_allocated_near_tie():
    # new pod: cpu 1, memory 1Gi. a: cpu 5/8, memory 5Gi/8Gi -> least (37+37)/2=37, balanced 100 -> 137.
    # b (old pod asks no memory: 200Mi for scoring) -> least (37 + (8192-1224)*100//8192=85)/2 = 61,
    #   balanced: fractions .625 and .125 -> 100*(1-.25) = 75 -> 136.  a wins by one point.
    objects = [node("a", memory="8Gi"), node("b", memory="8Gi"),
               pod("old-a", cpu="4", memory="4Gi", nodeName="a"), pod("old-b", cpu="4", nodeName="b"),
               pod("new", cpu="1", memory="1Gi")]
    cluster, scheduler, results = schedule(objects)
    assert results["default/new"].scores == {"a": 137 + 300, "b": 136 + 300}  # + TaintToleration 3 x 100
    assert placed(results) == {"default/new": "a"}


def test_kube_ties_go_to_the_first_node_name():
    objects = [node("b"), node("c"), node("a"), pod("p")]
    assert placed(schedule(objects)[2]) == {"default/p": "a"}


def test_kube_prefers_nodes_that_satisfy_earlier_first_available_alternatives():
    spec = {"devices": {"requests": [{"name": "gpu", "firstAvailable": [
        {"name": "big", "deviceClassName": "gpu", "selectors": [{"cel": {"expression":
            f'device.attributes["{DRIVER}"].model == "big"'}}]},
        {"name": "small", "deviceClassName": "gpu", "selectors": [{"cel": {"expression":
            f'device.attributes["{DRIVER}"].model == "small"'}}]},
    ]}]}}
    from tests.support.builders import resource_slice

    objects = [device_class(), node("a"), node("b"),
               resource_slice("a", devices(1, model="small")), resource_slice("b", devices(1, model="big")),
               template("t", spec=spec), pod("p", templates={"gpu": "t"})]
    cluster, _, results = schedule(objects)
    # raw 8 - 0 = 8 on b, 8 - 1 = 7 on a -> normalised 100 and 87
    assert results["default/p"].scores["b"] - results["default/p"].scores["a"] == 100 - 87
    assert placed(results) == {"default/p": "b"}
    (key,) = cluster.claims
    assert cluster.claims[key]["status"]["allocation"]["devices"]["results"][0]["request"] == "gpu/big"


def test_kube_preferred_node_affinity():
    affinity = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 10, "preference": {"matchExpressions": [{"key": "fast", "operator": "Exists"}]}}]}}
    objects = [node("a"), node("b", labels={"fast": "yes"}), pod("p", affinity=affinity)]
    assert placed(schedule(objects)[2]) == {"default/p": "b"}


def test_default_normalize_score():
    assert default_normalize({"a": 8, "b": 7}) == {"a": 100, "b": 87}
    assert default_normalize({"a": 0, "b": 2}, reverse=True) == {"a": 100, "b": 0}
    assert default_normalize({"a": 0}, reverse=True) == {"a": 100}


def test_binpack_and_spread_node_choice():
    objects = [*gpu_cluster({"a": 4, "b": 2}), template("t"), pod("p", templates={"gpu": "t"})]
    assert placed(schedule(objects, "binpack")[2]) == {"default/p": "b"}  # b is left with 1 free, a with 3
    assert placed(schedule(objects, "spread")[2]) == {"default/p": "a"}


def test_binpack_fills_a_node_before_opening_another():
    objects = [*gpu_cluster({"a": 2, "b": 2}), template("t"),
               *[pod(f"p{i}", templates={"gpu": "t"}) for i in range(3)]]
    binpack = placed(schedule(objects, "binpack")[2])
    assert binpack == {"default/p0": "a", "default/p1": "a", "default/p2": "b"}
    spread = placed(schedule(objects, "spread")[2])
    assert spread == {"default/p0": "a", "default/p1": "b", "default/p2": "a"}


def partitioned_gpus() -> list[dict]:
    """Node a with two GPUs; each is offered whole or as two halves, all drawing on the GPU's counter set
    (like MIG). Half 0 of GPU 1 is already held. Pod `half` wants a half, then pod `whole` a whole GPU."""
    pool = {"name": "a", "generation": 1, "resourceSliceCount": 2}
    counters = {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": "a-counters"},
        "spec": {"driver": DRIVER, "nodeName": "a", "pool": pool,
                 "sharedCounters": [{"name": f"gpu-{g}", "counters": {"memory": {"value": "2"}}} for g in (0, 1)]},
    }

    def device(name: str, gpu: int, kind: str, memory: str) -> dict:
        return {"name": name, "attributes": {"kind": {"string": kind}},
                "consumesCounters": [{"counterSet": f"gpu-{gpu}", "counters": {"memory": {"value": memory}}}]}

    offered = [device(f"gpu-{g}-half-{h}", g, "half", "1") for g in (0, 1) for h in (0, 1)]
    offered += [device(f"gpu-{g}", g, "whole", "2") for g in (0, 1)]
    slice_devices = {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": "a-devices"},
        "spec": {"driver": DRIVER, "nodeName": "a", "pool": pool, "devices": offered},
    }
    held = claim("held")
    held["status"] = {"allocation": {"devices": {"results": [
        {"request": "gpu", "driver": DRIVER, "pool": "a", "device": "gpu-1-half-0"}]}}}

    def kind_template(kind: str) -> dict:
        return template(kind, spec=claim_spec(selectors=[f'device.attributes["{DRIVER}"].kind == "{kind}"']))

    return [device_class(), node("a"), counters, slice_devices, held, kind_template("half"), kind_template("whole"),
            pod("half", templates={"gpu": "half"}), pod("whole", templates={"gpu": "whole"})]


@pytest.mark.parametrize(
    "policy, half_device, whole_device",
    [("kube", "gpu-0-half-0", None), ("spread", "gpu-0-half-0", None), ("binpack", "gpu-1-half-1", "gpu-0"),
     ("fragmentation", "gpu-1-half-1", "gpu-0")],
)
def test_device_choice_inside_the_node(policy, half_device, whole_device):
    # kube keeps the allocator's first fit: gpu-0-half-0, which leaves no whole GPU for the next pod.
    # binpack steers the half onto GPU 1 (already in use); fragmentation sees that the first fit leaves
    # the "whole" workload class unplaceable (all 4 free devices count as fragments) and the
    # alternative does not (fragmentation 0), so both keep GPU 0 whole.
    cluster, _, results = schedule(partitioned_gpus(), policy)
    pods = cluster.pods
    half_claim = cluster.pod_claim_keys(pods["default/half"])[0]
    assert devices_of(cluster, half_claim) == [f"a/{half_device}"]
    assert results["default/whole"].node == ("a" if whole_device else None)
    if whole_device:
        assert devices_of(cluster, cluster.pod_claim_keys(pods["default/whole"])[0]) == [f"a/{whole_device}"]


def test_fragmentation_beats_best_fit_on_a_mixed_workload():
    # a has 3 devices, b has 2. Pods: one 1-device pod, then two 2-device pods (p = 1/3 and 2/3).
    # binpack (best fit) puts the small pod on b (1 left), then one big pod on a; the last big pod finds
    # 1 + 1 free devices and fails. FGD: small on b leaves b's last device useless to the big class
    # (fragmentation +2/3), small on a leaves 2 (fragmentation +0) -> a; then both big pods fit.
    objects = [*gpu_cluster({"a": 3, "b": 2}), template("one"), template("two", count=2),
               pod("small", templates={"gpu": "one"}),
               pod("big-1", templates={"gpu": "two"}), pod("big-2", templates={"gpu": "two"})]
    binpack = placed(schedule(objects, "binpack")[2])
    assert binpack == {"default/small": "b", "default/big-1": "a", "default/big-2": None}
    fragmentation = placed(schedule(objects, "fragmentation")[2])
    assert fragmentation == {"default/small": "a", "default/big-1": "a", "default/big-2": "b"}


def test_fragmentation_scores_are_fragmentation_decreases():
    objects = [*gpu_cluster({"a": 3, "b": 2}), template("one"), template("two", count=2),
               pod("small", templates={"gpu": "one"}), pod("big", templates={"gpu": "two"})]
    results = schedule(objects, "fragmentation")[2]
    scores = results["default/small"].scores
    assert scores["a"] == pytest.approx(0, abs=1e-6)
    assert scores["b"] == pytest.approx(-0.5, abs=1e-6)  # big has weight 1/2, b keeps 1 useless device


def fgd_fragmentation(free_devices: int, free_memory: int, classes: list[tuple[float, int, int]]) -> float:
    """A plain reference for F_n = sum_m p_m * F_n(m), from the FGD artifact (hkust-adsl/kubernetes-scheduler-simulator,
    `pkg/utils/frag.go`, `NodeGpuShareFragAmount`): a class m that the node cannot host (too few GPUs left, or its
    host resource short: `Q4LackCpu`; gpudra's DRA adaptation applies the same rule to memory) makes all of the
    node's idle GPU capacity count, weighted by its frequency p_m; a class that fits adds 0 (whole devices here,
    so no partial-GPU share). `classes`: (p_m, devices wanted, memory wanted)."""
    return sum(weight * free_devices for weight, wanted, memory in classes
               if wanted > free_devices or memory > free_memory)


def fgd_scores(nodes: dict[str, tuple[int, int]], pod_devices: int, pod_memory: int,
               classes: list[tuple[float, int, int]]) -> dict[str, float]:
    """The fragmentation decrease F_n(before) - F_n(after placing the pod) per node ((free devices, free memory))."""
    return {name: fgd_fragmentation(free, memory, classes)
            - fgd_fragmentation(free - pod_devices, memory - pod_memory, classes)
            for name, (free, memory) in nodes.items()}


def test_fragmentation_weighs_each_class_by_its_share_of_the_idle_devices():
    # Two classes, p = 1/2 each: a 1-device pod (the one being placed) and a 3-device pod. On b (3 devices) the
    # small pod leaves 2 devices that the big class cannot use: F_b grows by p * 2 free devices, not p / 2.
    objects = [*gpu_cluster({"a": 4, "b": 3}), template("one"), template("three", count=3),
               pod("small", templates={"gpu": "one"}), pod("big", templates={"gpu": "three"})]
    results = schedule(objects, "fragmentation")[2]
    memory = 32 * 2**30  # the builders' nodes: plenty for both classes
    expected = fgd_scores({"a": (4, memory), "b": (3, memory)}, 1, 0, [(0.5, 1, 0), (0.5, 3, 0)])
    assert expected["b"] != 0  # the case exercises the weight times free capacity
    assert results["default/small"].scores == pytest.approx(expected, abs=1e-6)
    assert results["default/small"].node == "a"


def test_fragmentation_counts_a_node_short_of_memory_as_fragmented():
    # a and b: 4 devices and 16Gi each; a already runs a pod holding 8Gi. The big class (1 device + 12Gi) cannot
    # run on a whatever devices are free, so all of a's idle devices are fragments (FGD's "lack cpu" quadrant);
    # placing the small pod there turns one fragment into a used device: F_a drops, F_b does not move.
    gi = 2**30
    objects = [*gpu_cluster({"a": 4, "b": 4}, memory="16Gi"), template("one"),
               pod("old", memory="8Gi", nodeName="a"),
               pod("small", templates={"gpu": "one"}), pod("big", templates={"gpu": "one"}, memory="12Gi")]
    results = schedule(objects, "fragmentation")[2]
    expected = fgd_scores({"a": (4, 8 * gi), "b": (4, 16 * gi)}, 1, 0, [(0.5, 1, 0), (0.5, 1, 12 * gi)])
    assert expected["a"] > expected["b"]
    assert results["default/small"].scores == pytest.approx(expected, abs=1e-6)
    assert results["default/small"].node == "a"


def test_unknown_policy():
    with pytest.raises(ValueError, match="unknown policy"):
        Scheduler(ManagedCluster([]), policy="random")


def test_percentage_of_nodes_to_score():
    assert num_feasible_nodes_to_find(50) == 50
    assert num_feasible_nodes_to_find(500) == 230  # 50 - 500/125 = 46 %
    assert num_feasible_nodes_to_find(5000) == 500  # 10 %
    assert num_feasible_nodes_to_find(100000) == 5000  # floor of 5 %
    assert num_feasible_nodes_to_find(150) == 100  # at least 100
    assert num_feasible_nodes_to_find(500, 100) == 500


def test_kube_stops_after_enough_feasible_nodes_and_rotates():
    objects = [node(f"n{i:03d}") for i in range(200)] + [pod("p1"), pod("p2")]
    cluster, scheduler, results = schedule(objects)
    # 200 nodes: 48 % -> 96, but at least 100 feasible nodes are scored
    assert len(results["default/p1"].scores) == 100
    assert min(results["default/p1"].scores) == "n000"
    assert min(results["default/p2"].scores) == "n100"  # the search resumes where the last one stopped
    everything = Scheduler(ManagedCluster([node(f"n{i:03d}") for i in range(200)] + [pod("p")]),
                           percentage_of_nodes_to_score=100)
    assert len(everything.run()[0].scores) == 200


def test_best_effort_pods_skip_balanced_allocation():
    # no requests: LeastAllocated sees 100m cpu and 200Mi -> cpu 7900*100//8000 = 98, memory
    # (32768-200)*100//32768 = 99 -> 98; BalancedAllocation skipped; TaintToleration 3 x 100
    results = schedule([node("a"), pod("p")])[2]
    assert results["default/p"].scores == {"a": 98 + 300}
    results = schedule([node("a"), pod("p", cpu="1")])[2]
    # cpu 1: least (87 + 99)//2 = 93; balanced: fractions 1/8 and 0 -> 100*(1-0.0625) = 93
    assert results["default/p"].scores == {"a": 93 + 93 + 300}


def test_physical_devices_and_free_capacity():
    # static MIG: four 1g devices of one parent GPU form one physical device; plus one plain GPU
    from tests.support.builders import resource_slice

    migs = [{"name": f"mig-{i}", "attributes": {"parentUUID": {"string": "GPU-1"}}} for i in range(4)]
    objects = [device_class(), node("a"), resource_slice("a", migs + [{"name": "gpu-0"}])]
    cluster = ManagedCluster(objects)
    assert len(cluster.node_groups("a")) == 2
    assert cluster.free_node_groups("a") == 2 and cluster.free_capacity("a") == 2
    taken = [(DRIVER, "a", "mig-0")]
    assert cluster.free_capacity("a", taken) == 1.75  # 3 of the 4 partitions left + the plain GPU
    # counters: half of GPU 1 is held, so its counter set is half free; GPU 0 untouched
    counters = ManagedCluster(partitioned_gpus())
    assert counters.free_capacity("a") == 1.5
    assert counters.free_node_groups("a") == 1
    assert counters.groups_opened("a", [{"devices": {"results": [
        {"driver": DRIVER, "pool": "a", "device": "gpu-0-half-1"}, {"driver": DRIVER, "pool": "a", "device": "gpu-1-half-1"}]}}]) == 1


def test_a_domain_qualified_parent_uuid_names_the_same_physical_gpu():
    """NVIDIA's driver publishes `parentUUID` on every static MIG device (NVIDIA/k8s-dra-driver-gpu,
    `cmd/gpu-kubelet-plugin/deviceinfo.go`, `MigDeviceInfo.GetDevice`). By the ResourceSlice API
    (kubernetes/api `resource/v1/types.go`, `QualifiedName`) "names which do not include the domain prefix are
    assumed to be part of the driver's domain": for driver gpu.nvidia.com, `gpu.nvidia.com/parentUUID` is the same
    attribute, so MIG devices spelled either way belong to one physical GPU. A C identifier that merely ends in
    parentUUID is another attribute, and so is another domain's `parentUUID`."""
    from tests.support.builders import resource_slice

    nvidia = "gpu.nvidia.com"

    def mig(name: str, attribute: str, parent: str) -> dict:
        return {"name": name, "attributes": {attribute: {"string": parent}}}

    offered = [mig("gpu-1-mig-0", "parentUUID", "GPU-1"), mig("gpu-1-mig-1", f"{nvidia}/parentUUID", "GPU-1"),
               mig("gpu-2-mig-0", f"{nvidia}/parentUUID", "GPU-2"), mig("gpu-2-mig-1", f"{nvidia}/parentUUID", "GPU-2"),
               mig("other", "notparentUUID", "GPU-1"), mig("third-party", "example.com/parentUUID", "GPU-1"),
               {"name": "gpu-0"}]
    cluster = ManagedCluster([device_class(driver=nvidia), node("a"), resource_slice("a", offered, driver=nvidia)])
    physical = {"GPU-1": ["gpu-1-mig-0", "gpu-1-mig-1"], "GPU-2": ["gpu-2-mig-0", "gpu-2-mig-1"],
                "other": ["other"], "third-party": ["third-party"], "gpu-0": ["gpu-0"]}
    groups = {name: cluster.device_group((nvidia, "a", name)) for names in physical.values() for name in names}
    assert len(cluster.node_groups("a")) == len(physical)
    for names in physical.values():
        assert len({groups[name] for name in names}) == 1
    assert len(set(groups.values())) == len(physical)
