"""Topology-aware workload scheduling (gpudra.scheduler.workloadplacement) against kube-scheduler's own tables.

Sources (kubernetes v1.36.0, read from the module source):
- pkg/scheduler/framework/plugins/topologyaware/topology_placement_test.go TestGeneratePlacements
- pkg/scheduler/framework/plugins/podgrouppodscount/podgroup_pods_count_test.go TestScorePlacement,
  TestNormalizePlacementScore
- pkg/scheduler/framework/plugins/noderesources/fit_test.go TestScorePlacement_Resources
- pkg/scheduler/schedule_one_podgroup_test.go TestPodGroupSchedulingPlacementAlgorithm (the cases real plugins can
  stand for: a placement whose node filters the pod out, none feasible, none generated) and
  TestPodGroupSchedulingPlacementAlgorithm_Scoring (weighted totals)
"""

from __future__ import annotations

import random

import pytest
from click.testing import CliRunner

from gpudra.controllers import ManagedCluster
from gpudra.scheduler.scheduler import Scheduler
from gpudra.scheduler.workloadplacement import (
    Placement,
    PlacementError,
    Trial,
    best,
    fit_placement_score,
    generate,
    normalize_pods_count,
    pods_count_scores,
)

GATES = "default,+GenericWorkload,+GangScheduling,+TopologyAwareWorkloadScheduling"

# ----- TestGeneratePlacements: (name, topology key or None, scheduled pod -> node, placement nodes (name, labels),
# other nodes, wanted placements or "error")
GENERATE = [
    ("without constraint returns placement matching all nodes", None, {},
     [("node1", {}), ("node2", {"foo": "bar"})], [("node3", {})], {"test-placement": ["node1", "node2"]}),
    ("with topology key constraint, returns placement for each topology domain", "topology1", {},
     [("node0", {"topology2": "d1"}), ("node1", {"topology2": "d4"}), ("node2", {"topology1": "d1"}),
      ("node3", {"topology1": "d2"}), ("node4", {"topology1": "d1"}), ("node5", {"topology1": "d3"})], [],
     {"d1": ["node2", "node4"], "d2": ["node3"], "d3": ["node5"]}),
    ("without matching topology label, returns empty", "topology3", {},
     [("node0", {"topology2": "d1"}), ("node1", {"topology2": "d4"}), ("node2", {"topology1": "d1"}),
      ("node3", {"topology1": "d2"}), ("node4", {"topology1": "d1"}), ("node5", {"topology1": "d3"})], [], {}),
    ("with pods already scheduled in a single domain, returns that domain", "topology",
     {"pod1": "node2", "pod2": "node3"}, [("node0", {"topology": "d2"}), ("node1", {"topology": "d1"})],
     [("node2", {"topology": "d1"}), ("node3", {"topology": "d1"})], {"d1": ["node1"]}),
    ("with pods already scheduled in a single domain not present in current placement, returns empty", "topology",
     {"pod1": "node2", "pod2": "node3"}, [("node0", {"topology": "d2"})],
     [("node2", {"topology": "d1"}), ("node3", {"topology": "d1"})], {}),
    ("with pods already scheduled in conflicting domains, returns error", "topology",
     {"pod1": "node2", "pod2": "node3"}, [("node0", {"topology": "d2"}), ("node1", {"topology": "d1"})],
     [("node2", {"topology": "d0"}), ("node3", {"topology": "d1"})], "error"),
    ("with already scheduled pod on node outside of snapshot, returns error", "topology",
     {"pod1": "node2", "pod2": "node4"}, [("node0", {"topology": "d2"}), ("node1", {"topology": "d1"})],
     [("node2", {"topology": "d1"}), ("node3", {"topology": "d1"})], "error"),
    ("with already scheduled pod on node without topology label, returns error", "topology",
     {"pod1": "node2"}, [("node1", {"topology": "d2"})], [("node2", {"foo": "bar"})], "error"),
]


@pytest.mark.parametrize("name,key,scheduled,placement_nodes,other_nodes,wanted", GENERATE,
                         ids=[case[0] for case in GENERATE])
def test_generate_placements(name, key, scheduled, placement_nodes, other_nodes, wanted):
    labels = dict(placement_nodes + other_nodes)
    nodes = [node for node, _ in placement_nodes]
    if key is None:  # no constraint: the parent placement itself (gpudra schedules such a group without placements)
        assert wanted == {"test-placement": nodes}
        return
    if wanted == "error":
        with pytest.raises(PlacementError):
            generate(labels, nodes, key, scheduled)
        return
    assert {p.name: list(p.nodes) for p in generate(labels, nodes, key, scheduled)} == wanted


# ----- TestScorePlacement (PodGroupPodsCount): (assigned, assumed) pods of the group, 2 proposed
@pytest.mark.parametrize("scheduled,expected", [(2 + 1, 5), (1, 3), (1, 3), (0, 2)],
                         ids=["existing assigned and assumed pods", "no assumed pods", "no assigned pods",
                              "no assigned pods, no assumed pods"])
def test_pods_count_score_is_scheduled_plus_proposed(scheduled, expected):
    # one placement only: its raw score is normalised to 100 by itself, so check the raw count through two
    assert pods_count_scores(scheduled, [2, 0]) == [100, scheduled * 100 // expected]


@pytest.mark.parametrize("scores,expected", [
    ([10, 50, 110], [9, 45, 100]),
    ([50, 50], [100, 100]),
    ([50], [100]),
    ([11, 100, 101, 102], [10, 98, 99, 100]),
], ids=["distinct scores", "equal scores", "single score", "some minimal score far from a group"])
def test_normalize_pods_count(scores, expected):
    assert normalize_pods_count(scores) == expected


def test_normalize_pods_count_zero_scores_is_an_error():
    with pytest.raises(ValueError, match="no pods from pod group are assigned to any of the candidate placements"):
        normalize_pods_count([0, 0])


# ----- TestScorePlacement_Resources (NodeResourcesFit): cpu in millicores, memory in bytes
def _n(cpu, memory, gpu=None, used=None):
    allocatable = {"cpu": cpu, "memory": memory} | ({"nvidia.com/gpu": gpu} if gpu is not None else {})
    return allocatable, used or {}


CPU_MEM = (("cpu", 1), ("memory", 1))
CPU4_MEM = (("cpu", 4), ("memory", 1))
WITH_GPU = (("cpu", 1), ("memory", 1), ("nvidia.com/gpu", 1))
FIT = [
    ("Computes score based on total requests", [{"cpu": 1000, "memory": 0}, {"cpu": 2000, "memory": 2000}],
     [_n(5000, 5000), _n(5000, 5000)], CPU_MEM, 25),
    ("Computes score using weights", [{"cpu": 1000, "memory": 0}, {"cpu": 2000, "memory": 2000}],
     [_n(5000, 5000), _n(5000, 5000)], CPU4_MEM, 28),
    ("Handles multiple pods per node", [{"cpu": 1000, "memory": 0}, {"cpu": 2000, "memory": 2000}],
     [_n(5000, 5000), _n(5000, 5000)], CPU4_MEM, 28),
    ("Does not include nodes from outside of placement", [{"cpu": 1000, "memory": 0}, {"cpu": 2000, "memory": 2000}],
     [_n(5000, 5000), _n(5000, 5000)], CPU_MEM, 25),
    ("Includes pre-existing pods from outside of pod group", [{"cpu": 1000, "memory": 0}, {"cpu": 2000, "memory": 2000}],
     [_n(5000, 5000, used={"cpu": 1000, "memory": 0}), _n(5000, 5000)], CPU_MEM, 30),
    ("Includes scalar resources if any pod in pod group has nonzero requests",
     [{"cpu": 1000, "memory": 0, "nvidia.com/gpu": 0}, {"cpu": 1000, "memory": 2000, "nvidia.com/gpu": 1}],
     [_n(5000, 5000, 5, used={"cpu": 1000, "memory": 0}), _n(5000, 5000, 5)], WITH_GPU, 20),
    ("Does not include scalar resources if all pods in pod group have zero requests",
     [{"cpu": 1000, "memory": 0, "nvidia.com/gpu": 0}, {"cpu": 1000, "memory": 2000, "nvidia.com/gpu": 0}],
     [_n(5000, 5000, 5, used={"cpu": 1000, "memory": 0, "nvidia.com/gpu": 1}), _n(5000, 5000, 5)], WITH_GPU, 25),
]


@pytest.mark.parametrize("name,group,nodes,resources,expected", FIT, ids=[case[0] for case in FIT])
def test_fit_placement_score(name, group, nodes, resources, expected):
    assert fit_placement_score(group, nodes, resources) == expected


# ----- TestPodGroupSchedulingPlacementAlgorithm_Scoring: weighted totals, the highest wins
@pytest.mark.parametrize("plugins,expected", [
    ([(1, {"placement1": 50, "placement2": 75}), (2, {"placement1": 25, "placement2": 10})], "placement1"),
    ([(1, {"placement1": 75, "placement2": 50}), (2, {"placement1": 10, "placement2": 25})], "placement2"),
], ids=["respects higher score of placement1", "respects higher score of placement2"])
def test_best_placement_by_weighted_total(plugins, expected):
    trials = [Trial(Placement(name, (name,)), {}) for name in ("placement1", "placement2")]
    totals = [sum(weight * scores[t.placement.name] for weight, scores in plugins) for t in trials]
    for ties in ("name", random.Random(1)):
        scheduler = type("S", (), {"ties": ties})()
        assert best(trials, totals, scheduler).placement.name == expected


def test_equal_placements_are_drawn_at_random_with_a_generator():
    trials = [Trial(Placement(name, (name,)), {}) for name in ("a", "b", "c")]
    drawn = {best(trials, [7, 7, 7], type("S", (), {"ties": random.Random(seed)})()).placement.name
             for seed in range(40)}
    assert drawn == {"a", "b", "c"}


# ----- the algorithm on gpudra's scheduler -----------------------------------------------------------------
def _node(name, domain, cpu="8", gpus=None):
    labels = {"kubernetes.io/hostname": name} | ({"rack": domain} if domain else {})
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels},
            "status": {"allocatable": {"cpu": cpu, "memory": "8Gi", "pods": "110"}}}


def _group(pods, cpu="2", key="rack", min_count=None, filler=()):
    objects = [{"apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "PodGroup",
                "metadata": {"name": "pg", "namespace": "default"},
                "spec": {"schedulingPolicy": {"gang": {"minCount": min_count or pods}},
                         "schedulingConstraints": {"topology": [{"key": key}]}}}]
    for i in range(pods):
        objects.append({"apiVersion": "v1", "kind": "Pod",
                        "metadata": {"name": f"w-{i}", "namespace": "default", "uid": f"w-{i}"},
                        "spec": {"schedulingGroup": {"podGroupName": "pg"},
                                 "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]}})
    for i, node in enumerate(filler):  # pods already bound: they fill their node
        objects.append({"apiVersion": "v1", "kind": "Pod",
                        "metadata": {"name": f"filler-{i}", "namespace": "default", "uid": f"filler-{i}"},
                        "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {"requests": {"cpu": "4"}}}]}})
    return objects


def _run(objects, **options):
    cluster = ManagedCluster(objects, features=GATES, kubernetes_version="1.36")
    results = Scheduler(cluster, **options).run()
    return cluster, {r.pod.split("/", 1)[1]: r for r in results}


def _racks(per_rack=2, racks=("a", "b")):
    return [_node(f"{rack}-{i}", rack) for rack in racks for i in range(per_rack)]


def test_a_gang_lands_in_one_domain_and_the_fuller_domain_wins():
    # rack b is a quarter full: MostAllocated over the placement prefers it (per pod, LeastAllocated alone would
    # go to rack a's empty nodes first)
    cluster, results = _run(_racks() + _group(2, filler=["b-0"]))
    assert {results[f"w-{i}"].node[0] for i in range(2)} == {"b"}


def test_filters_out_infeasible_placements():
    # rack a's nodes are too small for the pods: only rack b is a placement that succeeds
    nodes = [_node("a-0", "a", cpu="1"), _node("a-1", "a", cpu="1"), _node("b-0", "b"), _node("b-1", "b")]
    _, results = _run(nodes + _group(2))
    assert {results[f"w-{i}"].node for i in range(2)} == {"b-0", "b-1"}


def test_a_gang_too_big_for_every_domain_is_not_spread_over_two():
    # 3 pods of 6 CPUs: four 8-CPU nodes would hold them, but no rack has three
    cluster, results = _run(_racks() + _group(3, cpu="6"))
    assert all(not r.scheduled for r in results.values())
    assert results["w-0"].message() == ("0/2 placements are available, first placement status: "
                                        "pod group is unschedulable")
    assert not any((p.get("spec") or {}).get("nodeName") for p in cluster.pods.values())  # nothing bound
    assert not cluster.usage["a-0"].pods and not cluster.usage["b-0"].pods


def test_when_no_placements_are_generated_returns_unschedulable():
    _, results = _run(_racks() + _group(2, key="zone"))
    assert results["w-0"].message() == "no feasible placements found"


def test_without_the_gate_the_constraint_is_not_read():
    objects = _racks() + _group(3, cpu="6")
    cluster = ManagedCluster(objects, features="default,+GenericWorkload,+GangScheduling", kubernetes_version="1.36")
    results = Scheduler(cluster).run()
    assert all(r.scheduled for r in results)  # spread over both racks, as the plain gang would be
    assert len({cluster.nodes[r.node]["metadata"]["labels"]["rack"] for r in results}) == 2


def test_pods_already_scheduled_pin_the_domain():
    objects = _racks() + _group(2, min_count=2)
    objects[-1]["spec"]["nodeName"] = "a-1"  # w-1 is already bound in rack a
    cluster, results = _run(objects + [_node("c-0", "c")])
    assert results["w-0"].node == "a-0"


def test_equal_domains_are_drawn_from_the_seeded_generator():
    chosen = set()
    for seed in range(30):
        _, results = _run(_racks(racks=("a", "b", "c")) + _group(2), ties=random.Random(seed))
        domains = {results[f"w-{i}"].node.split("-")[0] for i in range(2)}
        assert len(domains) == 1
        chosen |= domains
    assert chosen == {"a", "b", "c"}
    _, results = _run(_racks(racks=("a", "b", "c")) + _group(2))
    assert results["w-0"].node.startswith("a-")  # by name: the first domain


def test_explain_names_the_domains_tried(tmp_path):
    import yaml

    from gpudra.cli import cli

    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump_all(_racks() + _group(3, cpu="6")))
    result = CliRunner().invoke(cli, ["explain", "pod/w-0", "-n", "default", "-f", str(path), "--kubernetes-version", "1.36",
                                      "--features", GATES])  # validated with the gates --features names
    assert "0/2 placements are available" in result.output, result.output
    assert "rack=a (2 of 3 pods placed)" in result.output and "rack=b (2 of 3" in result.output, result.output
    without = CliRunner().invoke(cli, ["explain", "pod/w-0", "-n", "default", "-f", str(path), "--kubernetes-version",
                                       "1.36", "--features", GATES.replace(",+TopologyAwareWorkloadScheduling", "")])
    assert without.exit_code == 1, without.output  # the API server forbids the field while its gate is off
    assert "schedulingConstraints: Forbidden" in without.output, without.output
