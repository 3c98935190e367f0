"""Gangs on the local cluster: the control loop binds a pod group's pods all together or leaves them all Pending,
as kube-scheduler's GangScheduling plugin does (kubernetes v1.36.0
pkg/scheduler/framework/plugins/gangscheduling/gangscheduling.go: Permit waits for minCount placed pods, the group
is rejected at the Permit timeout and Unreserve frees what its pods held), with the plugin's message on each pod;
the store serves Workload and PodGroup only as the cluster's release does (v1alpha1 1.35, v1alpha2 1.36, gate
GenericWorkload). Two simulated GB200 NVL72 racks of two trays each (two NVLink cliques); no GB200 hardware."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpudra.cli import cli
from gpudra.cluster.controller import reconcile
from gpudra.cluster.layout import ClusterConfig, ClusterDir, parse_racks
from gpudra.cluster.nodes import install_device_classes, up
from gpudra.cluster.store import StoreError
from gpudra.discovery.profiles import rack_clique

GANG_GATES = "default,+GenericWorkload,+GangScheduling"
PERMIT_WAIT = "waiting for minCount pods from a gang to be scheduled"  # gangscheduling.go v1.36.0


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return result.exit_code, result.stdout


def gang_job(name: str, pods: int, min_count: int, clique: str | None) -> str:
    """A PodGroup, a ComputeDomain and an indexed Job whose pods join the group (spec.schedulingGroup), one
    tray's GPUs and the domain's IMEX channel each."""
    selector = f"      nodeSelector: {{nvidia.com/gpu.clique: {clique}}}\n" if clique else ""
    return f"""\
apiVersion: scheduling.k8s.io/v1alpha2
kind: PodGroup
metadata: {{name: {name}}}
spec:
  schedulingPolicy: {{gang: {{minCount: {min_count}}}}}
---
apiVersion: resource.nvidia.com/v1beta1
kind: ComputeDomain
metadata: {{name: {name}}}
spec:
  numNodes: {pods}
  channel: {{resourceClaimTemplate: {{name: {name}-channel}}}}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {{name: {name}-gpus}}
spec:
  spec:
    devices:
      requests:
      - name: gpus
        exactly: {{deviceClassName: gpu.nvidia.com, allocationMode: All}}
---
apiVersion: batch/v1
kind: Job
metadata: {{name: {name}}}
spec:
  completionMode: Indexed
  completions: {pods}
  parallelism: {pods}
  template:
    spec:
      restartPolicy: Never
      schedulingGroup: {{podGroupName: {name}}}
{selector}      containers:
      - name: worker
        image: nvbandwidth
        resources:
          claims: [{{name: gpus}}, {{name: channel}}]
      resourceClaims:
      - {{name: gpus, resourceClaimTemplateName: {name}-gpus}}
      - {{name: channel, resourceClaimTemplateName: {name}-channel}}
"""


def start(directory: str, version: str = "1.36", features: str = GANG_GATES) -> ClusterDir:
    cluster = ClusterDir(directory)
    up(cluster, ClusterConfig(nodes=parse_racks("2x2"), kubernetes_version=version, features=features))
    install_device_classes(cluster)
    return cluster


def apply(cluster: ClusterDir, tmp_path: Path, name: str, text: str) -> None:
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    code, out = run("apply", "-f", str(path), "--dir", cluster.path)
    assert code == 0, out
    for _ in range(4):  # the control plane's resyncs, by hand
        reconcile(cluster)


def job_pods(cluster: ClusterDir, job: str) -> list[dict]:
    return [p for p in cluster.store.list("Pod") if p["metadata"]["name"].startswith(job + "-")]


def test_a_gang_that_cannot_be_placed_whole_stays_pending_and_explain_counts_the_clique(cluster_state, tmp_path):
    cluster = start(cluster_state)
    # three pods on rack 0's clique, which has two trays: two could be placed, so none is bound
    apply(cluster, tmp_path, "big", gang_job("big", 3, 3, rack_clique(0)))
    pods = job_pods(cluster, "big")
    assert len(pods) == 3 and not any(p["spec"].get("nodeName") for p in pods)
    for pod in pods:
        (condition,) = [c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled"]
        assert condition["status"] == "False" and condition["reason"] == "Unschedulable"
        assert PERMIT_WAIT in condition["message"] and 'pod group "big"' in condition["message"]
        assert "2 could be placed" in condition["message"]
        events = [e for e in cluster.store.events_for(pod) if e["reason"] == "FailedScheduling"]
        assert events and 'pod group "big"' in events[-1]["message"]
    # kube-scheduler 1.36's condition on the PodGroup (schedule_one_podgroup.go)
    (group,) = cluster.store.list("PodGroup")
    (condition,) = group["status"]["conditions"]
    assert (condition["type"], condition["status"], condition["reason"]) == ("PodGroupScheduled", "False",
                                                                             "Unschedulable")
    assert condition["message"].startswith(PERMIT_WAIT) and 'pod group "big"' in condition["message"]
    # the two placed pods' GPUs were given back (Unreserve): no claim of the group is allocated
    assert not any((c.get("status") or {}).get("allocation") for c in cluster.store.list("ResourceClaim")
                   if c["metadata"]["name"].startswith("big-"))

    code, out = run("explain", f"pod/{pods[0]['metadata']['name']}", "--dir", cluster.path, "--no-fixes",
                    "-o", "json")
    assert code == 1, out
    (note,) = [n for n in json.loads(out)["notes"] if n.startswith("group ")]
    assert note == ("group default/big needs 3 pods on one NVLink clique (its pods share ComputeDomain default/big); "
                    f"2 could be placed; the largest clique has 2 nodes free (clique {rack_clique(0)})")


def test_a_gang_that_fits_is_bound_whole(cluster_state, tmp_path):
    cluster = start(cluster_state)
    apply(cluster, tmp_path, "pair", gang_job("pair", 2, 2, rack_clique(1)))
    pods = job_pods(cluster, "pair")
    assert len(pods) == 2
    assert sorted(p["spec"].get("nodeName") or "" for p in pods) == ["rack1-tray0", "rack1-tray1"]
    (group,) = cluster.store.list("PodGroup")
    assert [(c["type"], c["status"], c["reason"]) for c in group["status"]["conditions"]] == [
        ("PodGroupScheduled", "True", "Scheduled")]


def test_a_pod_of_a_group_that_is_not_there_waits(cluster_state, tmp_path):
    cluster = start(cluster_state)
    text = gang_job("lone", 1, 1, None).split("---\n", 1)[1]  # no PodGroup
    apply(cluster, tmp_path, "lone", text)
    (pod,) = job_pods(cluster, "lone")
    assert not pod["spec"].get("nodeName")
    (condition,) = [c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled"]
    # gangscheduling.go PreEnqueue, v1.36.0
    assert condition["message"] == 'waiting for pods\'s pod group "lone" to appear in scheduling queue'


@pytest.mark.parametrize("version, features, api_version, kind, served", [
    ("1.36", GANG_GATES, "scheduling.k8s.io/v1alpha2", "PodGroup", True),
    ("1.36", GANG_GATES, "scheduling.k8s.io/v1alpha2", "Workload", True),
    ("1.35", GANG_GATES, "scheduling.k8s.io/v1alpha1", "Workload", True),
    ("1.35", GANG_GATES, "scheduling.k8s.io/v1alpha2", "PodGroup", False),  # 1.35 has no PodGroup
    ("1.36", GANG_GATES, "scheduling.k8s.io/v1alpha1", "Workload", False),  # v1alpha1 went with 1.36
    ("1.36", "default", "scheduling.k8s.io/v1alpha2", "PodGroup", False),  # GenericWorkload is off by default
])
def test_the_store_serves_the_workload_api_as_the_release_does(cluster_state, version, features, api_version, kind,
                                                               served):
    cluster = start(cluster_state, version, features)
    spec = ({"schedulingPolicy": {"gang": {"minCount": 2}}} if kind == "PodGroup" else
            {"podGroups": [{"name": "g", "policy": {"gang": {"minCount": 2}}}]} if api_version.endswith("1")
            else {"podGroupTemplates": [{"name": "g", "schedulingPolicy": {"gang": {"minCount": 2}}}]})
    obj = {"apiVersion": api_version, "kind": kind, "metadata": {"name": "w", "namespace": "default"}, "spec": spec}
    if served:
        assert cluster.store.create(obj)["metadata"]["name"] == "w"
        return
    with pytest.raises(StoreError) as raised:
        cluster.store.create(obj)
    assert raised.value.status == 404 and "no matches for kind" in str(raised.value)


def test_a_1_35_workload_gang_stays_pending_with_that_release_s_message(cluster_state, tmp_path):
    """1.35: a Workload (v1alpha1) with the pod group, pods joined by spec.workloadRef; v1.35.0's Permit message."""
    cluster = start(cluster_state, "1.35")
    text = gang_job("big", 3, 3, rack_clique(0)).split("---\n", 1)[1]
    text = text.replace("schedulingGroup: {podGroupName: big}", "workloadRef: {name: big, podGroup: workers}")
    workload = ("apiVersion: scheduling.k8s.io/v1alpha1\nkind: Workload\nmetadata: {name: big}\n"
                "spec:\n  podGroups:\n  - {name: workers, policy: {gang: {minCount: 3}}}\n---\n")
    apply(cluster, tmp_path, "big", workload + text)
    pods = job_pods(cluster, "big")
    assert len(pods) == 3 and not any(p["spec"].get("nodeName") for p in pods)
    for pod in pods:
        (condition,) = [c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled"]
        assert ("waiting for minCount pods from a gang to be waiting on permit: "
                'pod group "workers" of workload "big" needs 3') in condition["message"]


def test_a_scheduled_group_s_condition_does_not_regress_and_keeps_its_transition_time():
    """updatePodGroupCondition (v1.36.0 schedule_one_podgroup.go): True stays True; SetStatusCondition moves
    lastTransitionTime only when the status changes."""
    from gpudra.cluster.podgroups import GroupDecision, with_condition

    group = {"apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "PodGroup", "metadata": {"name": "g"}}
    failed = with_condition(group, GroupDecision("default", "g", False, "m1"), "t1")
    assert failed is not None and failed["status"]["conditions"][0]["lastTransitionTime"] == "t1"
    assert with_condition(failed, GroupDecision("default", "g", False, "m1"), "t2") is None
    again = with_condition(failed, GroupDecision("default", "g", False, "m2"), "t2")
    assert again is not None and again["status"]["conditions"][0]["lastTransitionTime"] == "t1"
    scheduled = with_condition(again, GroupDecision("default", "g", True, ""), "t3")
    assert scheduled is not None and scheduled["status"]["conditions"][0]["lastTransitionTime"] == "t3"
    assert with_condition(scheduled, GroupDecision("default", "g", False, "m3"), "t4") is None
