"""DefaultPreemption (gpudra.scheduler.preemption) against kube-scheduler's own test tables, and GPU cases.

The tables are copied as data from kubernetes v1.34.4:
- pkg/scheduler/framework/plugins/defaultpreemption/default_preemption_test.go TestSelectBestCandidate (which node
  pickOneNodeForPreemption picks; `expected` lists every valid answer), TestDryRunPreemption (the victims
  SelectVictimsOnNode finds per node, with PDBs) and TestPodEligibleToPreemptOthers;
- their resources: smallRes 100m/100, mediumRes 200m/200, largeRes 300m/300, veryLargeRes 500m/500 (cpu/memory),
  nodes `Capacity(veryLargeRes)` (pods 32), priorities neg -100, low 0, mid 100, high 1000, veryHigh 10000.
  Upstream's start times epochTimeN are N nanoseconds after the epoch; the API carries startTime in whole
  seconds (metav1.Time is RFC 3339), so here epochTimeN is N seconds.

GPU cases: GPUs as a device plugin's extended resource (`nvidia.com/gpu` in node allocatable), where kube-scheduler
preempts for them, and as ResourceClaims, where kube-scheduler 1.33-1.36 does not (DynamicResources has no
PreFilterExtensions and rejects as UnschedulableAndUnresolvable: dynamicresources.go) and gpudra's
`dra_preemption` models KEP-5690.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import time
from typing import Any

import pytest
import yaml

from support.builders import gpu_cluster, node, pod, template
from support.realkube import BUILD_TIMEOUT_S, built, gpudra, short_dir

from gpudra.controllers import ManagedCluster
from gpudra.scheduler import Scheduler
from gpudra.scheduler import preemption

NEG, LOW, MID, HIGH, VERY_HIGH = -100, 0, 100, 1000, 10000
RES = {"small": ("100m", "100"), "medium": ("200m", "200"), "large": ("300m", "300"), "veryLarge": ("500m", "500")}


def _node(name: str) -> dict[str, Any]:
    return node(name, cpu="500m", memory="500", pods="32")


def _pod(name: str, size: str, priority: int, on: str | None = None, start: int | None = None,
         labels: dict[str, str] | None = None) -> dict[str, Any]:
    cpu, memory = RES[size]
    obj = pod(name, cpu=cpu, memory=memory, priority=priority)
    if on:
        obj["spec"]["nodeName"] = on
    if start is not None:
        obj["status"] = {"phase": "Running", "startTime": f"1970-01-01T00:00:{start:02d}Z"}
    if labels:
        obj["metadata"]["labels"] = labels
    return obj


def _cluster(objects: list[dict[str, Any]]) -> ManagedCluster:
    return ManagedCluster(copy.deepcopy(objects))


# ----- TestSelectBestCandidate ----------------------------------------------------------------------
# (name, nodes, preemptor (size, priority), bound pods (name, node, size, priority, epochTimeN), expected nodes)
SELECT_BEST = [
    ("a pod that fits on both nodes when lower priority pods are preempted", 2, ("large", HIGH),
     [("p1", 1, "large", MID, 0), ("p2", 2, "large", MID, 0)], ["node1", "node2"]),
    ("node with min highest priority pod is picked", 3, ("veryLarge", HIGH),
     [("p1.1", 1, "medium", MID, 0), ("p1.2", 1, "large", MID, 0), ("p2.1", 2, "medium", MID, 0),
      ("p2.2", 2, "medium", LOW, 0), ("p3.1", 3, "medium", LOW, 0), ("p3.2", 3, "medium", LOW, 0)], ["node3"]),
    ("when highest priorities are the same, minimum sum of priorities is picked", 3, ("veryLarge", HIGH),
     [("p1.1", 1, "medium", MID, 0), ("p1.2", 1, "large", MID, 0), ("p2.1", 2, "large", MID, 0),
      ("p2.2", 2, "medium", LOW, 0), ("p3.1", 3, "medium", MID, 0), ("p3.2", 3, "medium", MID, 0)], ["node2"]),
    ("when highest priority and sum are the same, minimum number of pods is picked", 3, ("veryLarge", HIGH),
     [("p1.1", 1, "small", MID, 0), ("p1.2", 1, "small", NEG, 0), ("p1.3", 1, "small", MID, 0),
      ("p1.4", 1, "small", NEG, 0), ("p2.1", 2, "large", MID, 0), ("p2.2", 2, "medium", NEG, 0),
      ("p3.1", 3, "medium", MID, 0), ("p3.2", 3, "small", NEG, 0), ("p3.3", 3, "small", LOW, 0)], ["node2"]),
    ("sum of adjusted priorities is considered", 3, ("veryLarge", HIGH),
     [("p1.1", 1, "small", MID, 0), ("p1.2", 1, "small", NEG, 0), ("p1.3", 1, "small", NEG, 0),
      ("p2.1", 2, "large", MID, 0), ("p2.2", 2, "medium", NEG, 0), ("p3.1", 3, "medium", MID, 0),
      ("p3.2", 3, "small", NEG, 0), ("p3.3", 3, "small", LOW, 0)], ["node2"]),
    ("non-overlapping lowest high priority, sum priorities, and number of pods", 4, ("veryLarge", VERY_HIGH),
     [("p1.1", 1, "small", MID, 0), ("p1.2", 1, "small", LOW, 0), ("p1.3", 1, "small", LOW, 0),
      ("p2.1", 2, "large", HIGH, 0), ("p3.1", 3, "medium", MID, 0), ("p3.2", 3, "small", LOW, 0),
      ("p3.3", 3, "small", LOW, 0), ("p3.4", 3, "medium", LOW, 0), ("p4.1", 4, "medium", MID, 0),
      ("p4.2", 4, "small", MID, 0), ("p4.3", 4, "small", MID, 0), ("p4.4", 4, "small", NEG, 0)], ["node1"]),
    ("same priority, same number of victims, different start time for each node's pod", 3, ("veryLarge", HIGH),
     [("p1.1", 1, "medium", MID, 2), ("p1.2", 1, "medium", MID, 2), ("p2.1", 2, "medium", MID, 3),
      ("p2.2", 2, "medium", MID, 3), ("p3.1", 3, "medium", MID, 1), ("p3.2", 3, "medium", MID, 1)], ["node2"]),
    ("same priority, same number of victims, different start time for all pods", 3, ("veryLarge", HIGH),
     [("p1.1", 1, "medium", MID, 4), ("p1.2", 1, "medium", MID, 2), ("p2.1", 2, "medium", MID, 5),
      ("p2.2", 2, "medium", MID, 1), ("p3.1", 3, "medium", MID, 3), ("p3.2", 3, "medium", MID, 6)], ["node3"]),
    ("different priority, same number of victims, different start time for all pods", 3, ("veryLarge", HIGH),
     [("p1.1", 1, "medium", LOW, 4), ("p1.2", 1, "medium", MID, 2), ("p2.1", 2, "medium", MID, 6),
      ("p2.2", 2, "medium", LOW, 1), ("p3.1", 3, "medium", LOW, 3), ("p3.2", 3, "medium", MID, 5)], ["node2"]),
]


@pytest.mark.parametrize("name, nodes, preemptor, bound, expected", SELECT_BEST, ids=[c[0] for c in SELECT_BEST])
def test_select_best_candidate_as_upstream(name, nodes, preemptor, bound, expected):
    objects = [_node(f"node{i}") for i in range(1, nodes + 1)]
    objects += [_pod(p, size, priority, f"node{n}", start) for p, n, size, priority, start in bound]
    objects.append(_pod("p", *preemptor))
    cluster = _cluster(objects)
    result = Scheduler(cluster).schedule_pod("default/p")
    assert result.nominated_node in expected
    assert result.node == result.nominated_node  # the victims are gone: the pod goes to its nominated node
    assert cluster.pods["default/p"]["status"]["nominatedNodeName"] == result.nominated_node
    assert not set(result.preempted) & set(cluster.pods)  # victims deleted


# ----- TestDryRunPreemption -------------------------------------------------------------------------
FOO_PDB = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "pdb", "namespace": "default"},
           "spec": {"selector": {"matchLabels": {"app": "foo"}}}}


def _pdb(disrupted: list[str]) -> dict[str, Any]:
    pdb = copy.deepcopy(FOO_PDB)
    pdb["status"] = {"disruptionsAllowed": 1, "disruptedPods": {name: "2026-01-01T00:00:00Z" for name in disrupted}}
    return pdb


# (name, nodes, preemptor, bound pods (name, node, size, priority, epochTimeN or None, labels), pdbs,
#  expected {node: (victims, NumPDBViolations)})
DRY_RUN = [
    ("a pod that would fit on the nodes, but other pods running are higher priority, no preemption would happen",
     2, ("large", LOW), [("p1", 1, "large", MID, None, None), ("p2", 2, "large", MID, None, None)], [], {}),
    ("medium priority pod is preempted, but lower priority one stays as it is small", 2, ("large", HIGH),
     [("p1.1", 1, "small", LOW, None, None), ("p1.2", 1, "large", MID, None, None), ("p2", 2, "large", MID, None, None)],
     [], {"node1": ({"p1.2"}, 0), "node2": ({"p2"}, 0)}),
    ("mixed priority pods are preempted", 2, ("large", HIGH),
     [("p1.1", 1, "small", MID, None, None), ("p1.2", 1, "small", LOW, None, None),
      ("p1.3", 1, "medium", MID, None, None), ("p1.4", 1, "small", HIGH, None, None),
      ("p2", 2, "large", HIGH, None, None)], [], {"node1": ({"p1.2", "p1.3"}, 0)}),
    ("mixed priority pods are preempted, pick later StartTime one when priorities are equal", 2, ("large", HIGH),
     [("p1.1", 1, "small", LOW, 5, None), ("p1.2", 1, "small", LOW, 4, None), ("p1.3", 1, "medium", MID, 3, None),
      ("p1.4", 1, "small", HIGH, 2, None), ("p2", 2, "large", HIGH, 1, None)], [], {"node1": ({"p1.1", "p1.3"}, 0)}),
    ("preemption with violation of same pdb", 1, ("veryLarge", HIGH),
     [("p1.1", 1, "medium", MID, None, {"app": "foo"}), ("p1.2", 1, "medium", MID, None, {"app": "foo"})],
     [_pdb([])], {"node1": ({"p1.1", "p1.2"}, 1)}),
    ("preemption with violation of the pdb with pod whose eviction was processed, the victim doesn't belong to "
     "DisruptedPods", 1, ("veryLarge", HIGH),
     [("p1.1", 1, "medium", MID, None, {"app": "foo"}), ("p1.2", 1, "medium", MID, None, {"app": "foo"})],
     [_pdb(["p2"])], {"node1": ({"p1.1", "p1.2"}, 1)}),
    ("preemption with violation of the pdb with pod whose eviction was processed, the victim belongs to "
     "DisruptedPods", 1, ("veryLarge", HIGH),
     [("p1.1", 1, "medium", MID, None, {"app": "foo"}), ("p1.2", 1, "medium", MID, None, {"app": "foo"})],
     [_pdb(["p1.2"])], {"node1": ({"p1.1", "p1.2"}, 0)}),
    ("preemption with violation of the pdb with pod whose eviction was processed, the victim which belongs to "
     "DisruptedPods is treated as 'nonViolating'", 1, ("veryLarge", HIGH),
     [("p1.1", 1, "medium", MID, None, {"app": "foo"}), ("p1.2", 1, "medium", MID, None, {"app": "foo"}),
      ("p1.3", 1, "medium", MID, None, {"app": "foo"})],
     [_pdb(["p1.3"])], {"node1": ({"p1.1", "p1.2", "p1.3"}, 1)}),
]


@pytest.mark.parametrize("name, nodes, preemptor, bound, pdbs, expected", DRY_RUN, ids=[c[0] for c in DRY_RUN])
def test_dry_run_victims_as_upstream(name, nodes, preemptor, bound, pdbs, expected):
    objects = [_node(f"node{i}") for i in range(1, nodes + 1)] + pdbs
    objects += [_pod(p, size, priority, f"node{n}", start, labels) for p, n, size, priority, start, labels in bound]
    objects.append(_pod("p", *preemptor))
    cluster = _cluster(objects)
    scheduler = Scheduler(cluster)
    found = {}
    for node_name in cluster.node_names():
        candidate = preemption.select_victims_on_node(scheduler, "default/p", node_name, preemption.pdbs_of(cluster))
        if candidate is not None and candidate.victims:
            found[node_name] = ({key.split("/", 1)[1] for key in candidate.victim_pods}, candidate.pdb_violations)
    assert found == expected
    assert cluster.pods.keys() == {f"default/{p[0]}" for p in bound} | {"default/p"}  # a dry run changes nothing


# ----- TestPodEligibleToPreemptOthers ---------------------------------------------------------------
def _terminating(obj: dict[str, Any], by_preemption: bool) -> dict[str, Any]:
    obj["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    if by_preemption:
        obj.setdefault("status", {})["conditions"] = [
            {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}]
    return obj


ELIGIBLE = [
    ("Pod with nominated node", "node1", None, False, True),
    ("Pod without nominated node", None, None, False, True),
    ("Pod with 'PreemptNever' preemption policy", None, "Never", False, False),
    ("preemption victim pod terminating, as indicated by the dedicated DisruptionTarget condition", "node1", None,
     True, False),
    ("non-victim Pods terminating", "node1", None, False, True),
]


@pytest.mark.parametrize("name, nominated, policy, by_preemption, expected", ELIGIBLE, ids=[c[0] for c in ELIGIBLE])
def test_pod_eligible_to_preempt_others_as_upstream(name, nominated, policy, by_preemption, expected):
    preemptor = pod("p", priority=HIGH)
    if nominated:
        preemptor["status"] = {"nominatedNodeName": nominated}
    if policy:
        preemptor["spec"]["preemptionPolicy"] = policy
    victim = pod("p1", priority=LOW)
    victim["spec"]["nodeName"] = "node1"
    if name != "Pod without nominated node" and policy is None:
        _terminating(victim, by_preemption)
    cluster = _cluster([_node("node1"), victim, preemptor])
    assert preemption.eligible(cluster, cluster.pods["default/p"])[0] is expected


# ----- TestPostFilter (v1.36.0 default_preemption_test.go) ---------------------------------------------
# Upstream hands PostFilter the nodes' Filter statuses; here the filters give them: `onePod` (pods 1) rejects as
# "Too many pods" and `nodeRes` (200m cpu, 400 memory) a largeRes pod as "Insufficient cpu", both Unschedulable;
# a NoSchedule taint stands for an UnschedulableAndUnresolvable status (or an absent entry).
# (name, nodes (name, kind), bound pods (name, node, priority), preemptor (requests largeRes, priority),
#  nominated node or "", the status message)
POST_FILTER = [
    ("pod with higher priority can be made schedulable", [("node1", "onePod")], [("p1", "node1", 0)],
     (False, HIGH), "node1", ""),
    ("pod with tied priority is still unschedulable", [("node1", "onePod")], [("p1", "node1", 0)],
     (False, 0), "", "preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod."),
    ("preemption should respect filteredNodesStatuses", [("node1", "onePod tainted")], [("p1", "node1", 0)],
     (False, HIGH), "", "preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling."),
    ("pod can be made schedulable on one node", [("node1", "onePod"), ("node2", "onePod")],
     [("p1", "node1", HIGH), ("p2", "node2", 0)], (False, MID), "node2", ""),
    ("no candidate nodes found, no enough resource after removing low priority pods",
     [("node1", "nodeRes"), ("node2", "nodeRes")], [("p1", "node1", 0), ("p2", "node2", 0)], (True, HIGH), "",
     "preemption: 0/2 nodes are available: 2 Insufficient cpu."),
    ("no candidate nodes found with mixed reasons, no lower priority pod and no enough CPU resource",
     [("node1", "onePod"), ("node2", "nodeRes"), ("node3", "onePod")],
     [("p1", "node1", HIGH), ("p2", "node2", 0), ("p3", "node3", HIGH)], (True, HIGH), "",
     "preemption: 0/3 nodes are available: 1 Insufficient cpu, 2 No preemption victims found for incoming pod."),
    ("no candidate nodes found with mixed reason, 2 UnschedulableAndUnresolvable nodes and 2 nodes don't have "
     "enough CPU resource",
     [("node1", "nodeRes"), ("node2", "nodeRes"), ("node3", "nodeRes tainted"), ("node4", "nodeRes tainted")],
     [("p1", "node1", 0), ("p2", "node2", 0)], (True, HIGH), "",
     "preemption: 0/4 nodes are available: 2 Insufficient cpu, 2 Preemption is not helpful for scheduling."),
]


@pytest.mark.parametrize("name, nodes, bound, preemptor, nominated, message", POST_FILTER,
                         ids=[c[0] for c in POST_FILTER])
def test_post_filter_as_upstream(name, nodes, bound, preemptor, nominated, message):
    """The PostFilter's answer as the local cluster keeps it (graceful_preemption): the nominated node, the
    victims marked and left on it, and the status message a FailedScheduling event carries."""
    objects = []
    for node_name, kind in nodes:
        if kind.startswith("onePod"):
            obj = node(node_name, cpu=None, memory=None, pods="1")
        else:
            obj = node(node_name, cpu="200m", memory="400", pods="32")
        if kind.endswith("tainted"):
            obj["spec"] = {"taints": [{"key": "unresolvable", "effect": "NoSchedule"}]}
        objects.append(obj)
    for pod_name, on, priority in bound:
        objects.append(pod(pod_name, priority=priority, nodeName=on))
    large, priority = preemptor
    objects.append(pod("p", priority=priority, **({"cpu": "300m", "memory": "300"} if large else {})))
    cluster = _cluster(objects)
    result = Scheduler(cluster, graceful_preemption=True).schedule_pod("default/p")
    assert result.node is None and result.post_filter == message
    assert cluster.pods["default/p"].get("status", {}).get("nominatedNodeName", "") == nominated
    if nominated:  # the victims are marked and stay until the API server's graceful deletion is over
        assert result.preempted and all(cluster.pods[key]["metadata"]["deletionTimestamp"] for key in result.preempted)
        assert result.message().endswith("Too many pods.")
    else:
        assert result.message().endswith(" " + message)


# ----- GPUs -------------------------------------------------------------------------------------------
def _gpu_pod(name: str, gpus: int, priority: int, on: str | None = None, **spec: Any) -> dict[str, Any]:
    obj = pod(name, extended={"nvidia.com/gpu": str(gpus)}, priority=priority, **spec)
    if on:
        obj["spec"]["nodeName"] = on
    return obj


def _gpu_nodes(*names: str) -> list[dict[str, Any]]:
    return [node(name, extra={"nvidia.com/gpu": "8"}) for name in names]


def test_eight_gpu_pod_preempts_the_two_low_priority_four_gpu_pods_of_one_node():
    """Device-plugin GPUs: node n2's victims would include a pod of priority 5, n1's only priority 0 (the lowest
    highest-victim priority wins); the pods on n2 and the 2-GPU pod of n3, which cannot make room, stay."""
    objects = _gpu_nodes("n1", "n2", "n3") + [
        _gpu_pod("a", 4, 0, "n1"), _gpu_pod("b", 4, 0, "n1"),
        _gpu_pod("c", 4, 0, "n2"), _gpu_pod("d", 2, 5, "n2"),
        _gpu_pod("e", 4, 50, "n3"), _gpu_pod("f", 2, 0, "n3"),
        _gpu_pod("big", 8, 10)]
    cluster = _cluster(objects)
    results = {r.pod: r for r in Scheduler(cluster).run()}
    big = results["default/big"]
    assert (big.node, set(big.preempted)) == ("n1", {"default/a", "default/b"})
    assert set(cluster.pods) == {"default/big", "default/c", "default/d", "default/e", "default/f"}


def test_preemption_policy_never_never_preempts():
    objects = _gpu_nodes("n1") + [_gpu_pod("a", 4, 0, "n1"), _gpu_pod("b", 4, 0, "n1"),
                                  _gpu_pod("big", 8, 10, preemptionPolicy="Never")]
    cluster = _cluster(objects)
    result = Scheduler(cluster).schedule_pod("default/big")
    assert (result.node, result.preempted) == (None, ())
    assert {"default/a", "default/b"} <= set(cluster.pods)
    assert "nominatedNodeName" not in cluster.pods["default/big"].get("status", {})


def _claims_cluster(extra: list[dict[str, Any]] = ()) -> ManagedCluster:
    """Two nodes of 8 claimed GPUs, each full with two 4-GPU pods of priority 0 (claims from templates)."""
    objects = gpu_cluster({"n1": 8, "n2": 8}) + [template("four", 4), template("eight", 8)]
    objects += [pod(f"low-{i}", templates={"g": "four"}, priority=0) for i in range(4)] + list(extra)
    cluster = _cluster(objects)
    Scheduler(cluster).run()
    assert {p["spec"].get("nodeName") for p in cluster.pods.values()} == {"n1", "n2"}
    return cluster


def test_claimed_gpus_are_not_freed_by_preemption_as_in_kube_scheduler():
    """kube-scheduler 1.33-1.36: a node rejected by DynamicResources is no preemption candidate."""
    cluster = _claims_cluster()
    cluster.apply([pod("big", templates={"g": "eight"}, priority=10)])
    result = Scheduler(cluster).schedule_pod("default/big")
    assert (result.node, result.preempted) == (None, ())
    assert result.message() == "0/2 nodes are available: 2 cannot allocate all claims."
    assert len([k for k in cluster.pods if k.startswith("default/low-")]) == 4


def test_claimed_gpus_freed_with_dra_preemption():
    """KEP-5690: the victims' claims are released in the dry run; the two pods of one node go, their claims
    (made from templates, owned by the pods) with them, and the big pod gets all 8 devices of that node."""
    cluster = _claims_cluster()
    cluster.apply([pod("big", templates={"g": "eight"}, priority=10)])
    result = Scheduler(cluster, dra_preemption=True).schedule_pod("default/big")
    n1_pods = {"default/low-0", "default/low-2"}  # the queue pass put low-0 and low-2 on n1
    assert (result.node, set(result.preempted)) == ("n1", n1_pods)
    assert not n1_pods & set(cluster.pods)
    assert not any(key.startswith(("default/low-0-", "default/low-2-")) for key in cluster.claims)
    [claim] = [cluster.claims[k] for k in cluster.pod_claim_keys(cluster.pods["default/big"])]
    assert len(claim["status"]["allocation"]["devices"]["results"]) == 8


def test_shared_claim_reserved_by_a_remaining_pod_keeps_its_devices():
    """n1: a 4-GPU claim shared by low-priority `a` and priority-20 `keeper` (no victim), and `b`'s 4 GPUs; n2: two
    4-GPU pods of priority 0. Removing `a` frees nothing on n1 (the keeper still reserves the claim), so only n2
    can make room; releasing the shared claim would make n1 (the first node) the answer."""
    objects = gpu_cluster({"n1": 8, "n2": 8}) + [template("four", 4), template("eight", 8)]
    shared = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
              "metadata": {"name": "shared", "namespace": "default"},
              "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                  "deviceClassName": "gpu", "allocationMode": "ExactCount", "count": 4}}]}}}
    objects += [shared, pod("keeper", claims={"g": "shared"}, priority=20),
                pod("a", claims={"g": "shared"}, priority=0), pod("b", templates={"g": "four"}, priority=0),
                pod("c", templates={"g": "four"}, priority=0), pod("d", templates={"g": "four"}, priority=0)]
    for obj in objects:
        if obj["kind"] == "Node":
            obj["metadata"]["labels"]["kubernetes.io/hostname"] = obj["metadata"]["name"]
        if obj["kind"] == "Pod":  # where each goes: the claims' devices are the nodes' only limit
            obj["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "n2" if obj["metadata"]["name"] in ("c", "d")
                                           else "n1"}
    cluster = _cluster(objects)
    Scheduler(cluster).run()
    assert {k: p["spec"].get("nodeName") for k, p in cluster.pods.items()} == {
        "default/keeper": "n1", "default/a": "n1", "default/b": "n1", "default/c": "n2", "default/d": "n2"}
    cluster.apply([pod("big", templates={"g": "eight"}, priority=10)])
    result = Scheduler(cluster, dra_preemption=True).schedule_pod("default/big")
    assert (result.node, set(result.preempted)) == ("n2", {"default/c", "default/d"})
    assert cluster.claims["default/shared"]["status"]["allocation"]
    assert {e["name"] for e in cluster.claims["default/shared"]["status"]["reservedFor"]} == {"keeper", "a"}


def test_pick_one_node_criteria_in_order():
    """pickOneNodeForPreemption's criteria, each deciding only among the ties of the ones before."""
    v = preemption.Victim
    fewer_pdb = preemption.Candidate("x", (v("x/1", 500, 1.0),), pdb_violations=0)
    more_pdb = preemption.Candidate("y", (v("y/1", 0, 1.0),), pdb_violations=1)
    assert preemption.pick_one_node([more_pdb, fewer_pdb]).node == "x"
    negative_pair = preemption.Candidate("n", (v("n/1", -100, 1.0), v("n/2", -100, 1.0)))
    one = preemption.Candidate("o", (v("o/1", -100, 1.0),))
    assert preemption.pick_one_node([negative_pair, one]).node == "o"  # 2^31 shift: two -100s sum higher
    early = preemption.Candidate("e", (v("e/1", 0, 1.0),))
    late = preemption.Candidate("l", (v("l/1", 0, 9.0),))
    assert preemption.pick_one_node([early, late]).node == "l"
    assert preemption.pick_one_node([late, preemption.Candidate("m", (v("m/1", 0, 9.0),))]).node == "l"


def test_explain_and_schedule_name_the_victims():
    from gpudra.explain.analyze import explain
    from gpudra.scheduler.render import to_table

    objects = _gpu_nodes("n1") + [_gpu_pod("a", 4, 0, "n1"), _gpu_pod("b", 4, 0, "n1"), _gpu_pod("big", 8, 10)]
    explanation = explain(copy.deepcopy(objects), "pod/big", fixes=False)
    assert explanation.fits
    assert explanation.summary == "would preempt default/a, default/b on node n1, then be scheduled there"
    assert explanation.to_dict()["placement"]["preempts"] == ["default/a", "default/b"]
    cluster = _cluster(objects)
    table = to_table(cluster, Scheduler(cluster).run())
    assert "PREEMPTED (2):\n  default/a: preempted by default/big on node n1\n" in table


def test_explain_says_why_claimed_devices_are_not_preempted():
    cluster = _claims_cluster()
    from gpudra.explain.simulate import snapshot
    from gpudra.explain.analyze import explain

    objects = snapshot(cluster) + [pod("big", templates={"g": "eight"}, priority=10)]
    explanation = explain(objects, "pod/big", fixes=False)
    assert not explanation.fits
    assert any("preemption frees no device held through a ResourceClaim" in note for note in explanation.notes)


# ----- the real kube-scheduler ---------------------------------------------------------------------------------
def _real_objects(name: str, priority_class: str, cpu: str, gpus: int = 0) -> list[dict[str, Any]]:
    container: dict[str, Any] = {"name": "main", "image": "registry.k8s.io/pause:3.10",
                                 "resources": {"requests": {"cpu": cpu}}}
    spec: dict[str, Any] = {"priorityClassName": priority_class, "containers": [container]}
    objects: list[dict[str, Any]] = []
    if gpus:
        objects.append({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                        "metadata": {"name": name, "namespace": "default"},
                        "spec": {"spec": {"devices": {"requests": [{"name": "g", "exactly": {
                            "deviceClassName": "gpu.nvidia.com", "count": gpus}}]}}}})
        spec["resourceClaims"] = [{"name": "c", "resourceClaimTemplateName": name}]
        container["resources"]["claims"] = [{"name": "c"}]
    return objects + [{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
                       "spec": spec}]


@pytest.mark.timeout(BUILD_TIMEOUT_S)
def test_victims_as_the_real_kube_scheduler():
    """One simulated DGX H100 (8 GPUs, 64 cpu) under the real kube-scheduler 1.34, two low-priority pods holding 4
    claimed GPUs and 1 cpu each. An 8-GPU high-priority pod: the real scheduler finds preemption not helpful (the
    devices are claimed), and so does gpudra. A high-priority pod asking 63 cpu: the real scheduler preempts
    the later-started GPU pod (its claim is deallocated by the real resourceclaim controller) and binds the pod on
    the node it nominated; gpudra, given the state before, names the same victim and node."""
    binary = built()
    directory = short_dir("pe")
    from support.realkube import Kubectl, cluster_state  # one copy of the real cluster's reader

    def wait(what: str, check: Any, timeout: float = 90) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            found = check()
            if found:
                return found
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            time.sleep(0.3)

    def pod_of(kubectl: Kubectl, name: str) -> dict[str, Any] | None:
        items = kubectl.json("get", "pods", "--field-selector", f"metadata.name={name}")["items"]
        return items[0] if items else None

    def running(kubectl: Kubectl, name: str) -> bool:
        pod_now = pod_of(kubectl, name)
        return bool(pod_now and pod_now["spec"].get("nodeName") and pod_now["status"].get("phase") == "Running")

    def offline(state: list[dict[str, Any]], new: list[dict[str, Any]]) -> Any:
        objects = [o for o in state if o["kind"] != "PriorityClass"] + classes + new
        cluster = ManagedCluster(json.loads(json.dumps(objects)), "default", "1.34")
        return {r.pod: r for r in Scheduler(cluster).run()}

    classes = [{"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name},
                "value": value} for name, value in (("gpudra-low", 10), ("gpudra-high", 1000))]
    try:
        gpudra("cluster", "up", "--dir", directory, "--api-server", "kubernetes", "--nodes", "dgx-h100:1",
               "--kubernetes-version", "1.34")
        kubectl = Kubectl(binary.kubectl, os.path.join(directory, "kubeconfig"))
        kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(classes))
        wait("the node's ResourceSlice", lambda: kubectl.json("get", "resourceslices")["items"])
        for name in ("low-a", "low-b"):  # one after the other: distinct start times (whole seconds)
            kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(_real_objects(name, "gpudra-low", "1", 4)))
            wait(f"{name} running", lambda: running(kubectl, name))
            time.sleep(1.1)
        state = cluster_state(kubectl)

        big_gpu = _real_objects("big-gpu", "gpudra-high", "1", 8)
        kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(big_gpu))

        def rejected() -> str | None:
            conditions = ((pod_of(kubectl, "big-gpu") or {}).get("status") or {}).get("conditions") or []
            return next((c.get("message") for c in conditions
                         if c.get("type") == "PodScheduled" and c.get("status") == "False"), None)

        message = wait("big-gpu rejected", rejected)
        assert "cannot allocate all claims" in message and "Preemption is not helpful for scheduling" in message
        assert running(kubectl, "low-a") and running(kubectl, "low-b")
        assert not (pod_of(kubectl, "big-gpu") or {}).get("status", {}).get("nominatedNodeName")
        ours = offline(state, big_gpu)["default/big-gpu"]
        assert (ours.node, ours.preempted) == (None, ())
        kubectl("delete", "pod", "big-gpu", "--wait=true")

        state = cluster_state(kubectl)
        big_cpu = _real_objects("big-cpu", "gpudra-high", "63")
        kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(big_cpu))
        wait("big-cpu running", lambda: running(kubectl, "big-cpu"), timeout=120)
        real_node = pod_of(kubectl, "big-cpu")["spec"]["nodeName"]
        real_victims = {f"default/{n}" for n in ("low-a", "low-b") if pod_of(kubectl, n) is None}
        ours = offline(state, big_cpu)["default/big-cpu"]
        assert (ours.node, set(ours.preempted)) == (real_node, real_victims) == (real_node, {"default/low-b"})
    finally:
        gpudra("cluster", "down", "--dir", directory, check=False)
        shutil.rmtree(directory, ignore_errors=True)
