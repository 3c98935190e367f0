"""A PodGroup's own ResourceClaim (DRAWorkloadResourceClaims, KEP-5729) against the real kube-controller-manager and
kube-scheduler 1.36, with gpudra's simulated GPU nodes, node driver and kubelet stand-in joined to the real control
plane (k8s/releases/v1.36.mod).

A gang of two pods that share one claim of their PodGroup (two H100s that agree on productName: matchAttribute):
- the real resourceclaim controller makes ONE claim for the group (pkg/controller/resourceclaim/controller.go
  handlePodGroupClaim): its generateName, ownerReference, annotation, the PodGroup's
  status.resourceClaimStatuses and each pod's status.resourceClaimStatuses naming the group's claim;
- the real scheduler allocates it once and reserves it for the PodGroup (dynamicresources.go
  podResourceClaimBindings: a scheduling.k8s.io podgroups entry in reservedFor), both pods where it is allocated;
- gpudra's node driver prepares it and the kubelet stand-in starts both pods (IsReservedForPod accepts the
  group's reservation): both reach Running;
- `gpudra schedule` of the same objects, read from the live cluster before they were created, answers the same:
  one claim, made and owned as the real controller makes it, reserved for the PodGroup as the real scheduler
  reserves it, both pods on one node.
"""

from __future__ import annotations

import json
import os
import shutil
import time

import pytest
import yaml

from support.realkube import BUILD_TIMEOUT_S, Kubectl, built, cluster_state, gpudra, short_dir, wait_nodes_schedulable

pytestmark = pytest.mark.timeout(BUILD_TIMEOUT_S)

RELEASE = "1.36"
FEATURES = "default,+GenericWorkload,+GangScheduling,+DRAWorkloadResourceClaims"
NAMESPACE = "ml"
TEMPLATE = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": "two-linked-h100", "namespace": NAMESPACE},
            "spec": {"spec": {"devices": {
                "requests": [{"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 2}}],
                "constraints": [{"matchAttribute": "gpu.nvidia.com/productName"}]}}}}
GROUP_CLAIM = {"name": "gpus", "resourceClaimTemplateName": "two-linked-h100"}


def objects() -> list[dict]:
    group = {"apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "PodGroup",
             "metadata": {"name": "trainers", "namespace": NAMESPACE},
             "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}, "resourceClaims": [GROUP_CLAIM]}}
    pods = [{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"worker-{i}", "namespace": NAMESPACE},
             "spec": {"schedulingGroup": {"podGroupName": "trainers"}, "resourceClaims": [dict(GROUP_CLAIM)],
                      "containers": [{"name": "train", "image": "trainer",
                                      "resources": {"claims": [{"name": "gpus"}]}}]}} for i in range(2)]
    return [group, *pods]


def wait_running(kubectl: Kubectl, names: list[str], timeout: float = 240) -> dict[str, dict]:
    deadline = time.monotonic() + timeout
    while True:
        pods = {p["metadata"]["name"]: p for p in kubectl.json("get", "pods", "-n", NAMESPACE)["items"]}
        if all((pods.get(n, {}).get("status") or {}).get("phase") == "Running" for n in names):
            return pods
        phases = {n: (pods.get(n, {}).get("status") or {}).get("phase") for n in names}
        if time.monotonic() > deadline:
            claims = kubectl.json("get", "resourceclaims", "-n", NAMESPACE)["items"]
            events = [(e["involvedObject"]["name"], e["reason"], e.get("message", ""))
                      for e in kubectl.json("get", "events", "-n", NAMESPACE)["items"]]
            conditions = {n: (pods.get(n, {}).get("status") or {}).get("conditions") for n in names}
            raise AssertionError(f"pods not Running: {phases}; conditions {conditions}; events {events}; "
                                 f"claims: {json.dumps(claims)[:3000]}")
        time.sleep(0.5)


def offline(state: list[dict], created: list[dict], path: str) -> list[dict]:
    with open(path, "w", encoding="utf-8") as f:
        yaml.safe_dump_all(state + json.loads(json.dumps(created)), f)
    result = gpudra("schedule", "-f", path, "-o", "json", "--kubernetes-version", RELEASE, "--features", FEATURES,
                    "--no-validate", check=False)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    return json.loads(result.stdout)["items"]


def _owner_shape(claim: dict) -> list[dict]:
    return [{k: v for k, v in ref.items() if k != "uid"} for ref in claim["metadata"]["ownerReferences"]]


def test_a_pod_groups_claim_as_the_real_controller_and_scheduler_make_and_reserve_it(tmp_path):
    binary = built(RELEASE)
    directory = short_dir("gc")
    try:
        gpudra("cluster", "up", "--dir", directory, "--api-server", "kubernetes", "--kubernetes-version", RELEASE,
               "--nodes", "dgx-h100:2", "--features", FEATURES)
        kubectl = Kubectl(binary.kubectl, os.path.join(directory, "kubeconfig"))
        kubectl("create", "namespace", NAMESPACE)
        nodes = wait_nodes_schedulable(kubectl)
        deadline = time.monotonic() + 90
        while {s["spec"].get("nodeName") for s in kubectl.json("get", "resourceslices")["items"]} < nodes:
            assert time.monotonic() < deadline, "not every node's driver published its devices"
            time.sleep(0.5)
        kubectl("apply", "-f", "-", stdin=yaml.safe_dump(TEMPLATE))
        state = cluster_state(kubectl)
        created = objects()
        kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(created))

        pods = wait_running(kubectl, ["worker-0", "worker-1"])
        (group,) = kubectl.json("get", "podgroups.scheduling.k8s.io", "-n", NAMESPACE)["items"]
        (claim,) = kubectl.json("get", "resourceclaims", "-n", NAMESPACE)["items"]
        name = claim["metadata"]["name"]
        # the real controller: one claim for the group, named and owned after it
        assert claim["metadata"]["generateName"] == "trainers-gpus-"
        assert claim["metadata"]["ownerReferences"] == [
            {"apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "PodGroup", "name": "trainers",
             "uid": group["metadata"]["uid"], "controller": True}], claim["metadata"]["ownerReferences"]
        assert claim["metadata"]["annotations"] == {"resource.kubernetes.io/pod-claim-name": "gpus"}
        assert group["status"]["resourceClaimStatuses"] == [{"name": "gpus", "resourceClaimName": name}]
        for pod in pods.values():
            assert pod["status"]["resourceClaimStatuses"] == [{"name": "gpus", "resourceClaimName": name}]
        # the real scheduler: reserved for the PodGroup, allocated once, both pods where it is
        assert claim["status"]["reservedFor"] == [{"apiGroup": "scheduling.k8s.io", "resource": "podgroups",
                                                   "name": "trainers", "uid": group["metadata"]["uid"]}]
        assert len(claim["status"]["allocation"]["devices"]["results"]) == 2
        (real_node,) = {p["spec"]["nodeName"] for p in pods.values()}

        # gpudra on the same objects
        ours = offline(state, created, str(tmp_path / "group.yaml"))
        (our_claim,) = [o for o in ours if o["kind"] == "ResourceClaim" and o["metadata"]["namespace"] == NAMESPACE]
        (our_group,) = [o for o in ours if o["kind"] == "PodGroup"]
        our_pods = [o for o in ours if o["kind"] == "Pod" and o["metadata"]["namespace"] == NAMESPACE]
        assert our_claim["metadata"]["generateName"] == claim["metadata"]["generateName"]
        assert _owner_shape(our_claim) == _owner_shape(claim)
        assert our_claim["metadata"]["annotations"] == claim["metadata"]["annotations"]
        assert our_group["status"]["resourceClaimStatuses"] == [
            {"name": "gpus", "resourceClaimName": our_claim["metadata"]["name"]}]
        assert [{k: v for k, v in e.items() if k != "uid"} for e in our_claim["status"]["reservedFor"]] == [
            {k: v for k, v in e.items() if k != "uid"} for e in claim["status"]["reservedFor"]]
        assert len({p["spec"].get("nodeName") for p in our_pods}) == 1 and our_pods[0]["spec"].get("nodeName")
        assert all(p["status"]["resourceClaimStatuses"] == [{"name": "gpus",
                                                             "resourceClaimName": our_claim["metadata"]["name"]}]
                   for p in our_pods)
        print(f"real: claim {name} on {real_node}, reservedFor {claim['status']['reservedFor']}; "
              f"gpudra: claim {our_claim['metadata']['name']} on {our_pods[0]['spec']['nodeName']}")
    finally:
        gpudra("cluster", "down", "--dir", directory, check=False)
        shutil.rmtree(directory, ignore_errors=True)
