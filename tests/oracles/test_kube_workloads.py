"""Gangs (the Workload API, KEP-4671) against the real kube-scheduler 1.36, with gpudra's simulated GPU nodes and
DRA drivers joined to the real control plane (k8s/releases/v1.36.mod).

The cluster runs with GenericWorkload and GangScheduling on (alpha in 1.36; scheduling.k8s.io/v1alpha2 served by
--runtime-config, as `cluster up` passes it). Each scenario is created on the live cluster; the real scheduler
places it (or not), and `gpudra schedule` places the same objects offline from the state read before:
- a gang of three 8-GPU pods with two 8-GPU nodes: the real GangScheduling plugin binds none and reports the
  PodGroup Unschedulable (v1.36 schedule_one_podgroup.go updatePodGroupCondition); gpudra binds none, and
  `gpudra explain` on the live cluster says why in its gang line;
- a gang of two: both pods bound, on the only two nodes that hold 8 H100s, by both;
- a gang with a topology constraint on the NVLink clique label (TopologyAwareWorkloadScheduling,
  framework/plugins/topologyaware/topology_placement.go) where only one rack has two free trays: both pods in
  that rack, by both.
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
FEATURES = "default,+GenericWorkload,+GangScheduling,+TopologyAwareWorkloadScheduling"
NODES = "dgx-h100:2"
RACKS = "2x2"  # two NVL72 racks of two 4-GPU GB200 trays, each rack its own clique (nvidia.com/gpu.clique)
CLIQUE_LABEL = "nvidia.com/gpu.clique"
H100 = 'device.attributes["gpu.nvidia.com"].productName == "NVIDIA H100 80GB HBM3"'
GB200 = 'device.attributes["gpu.nvidia.com"].productName.contains("GB200")'
NAMESPACE = "ml"


def template(name: str, count: int, selector: str) -> dict:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"spec": {"devices": {"requests": [{"name": "gpus", "exactly": {
                "deviceClassName": "gpu.nvidia.com", "count": count, "selectors": [{"cel": {"expression": selector}}]}}]}}}}


def pod_group(name: str, min_count: int, topology_key: str | None = None) -> dict:
    spec: dict = {"schedulingPolicy": {"gang": {"minCount": min_count}}}
    if topology_key:
        spec["schedulingConstraints"] = {"topology": [{"key": topology_key}]}
    return {"apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": NAMESPACE}, "spec": spec}


def pod(name: str, claim_template: str, group: str | None = None, node: str | None = None) -> dict:
    spec: dict = {"containers": [{"name": "trainer", "image": "trainer", "resources": {"claims": [{"name": "gpus"}]}}],
                  "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": claim_template}]}
    if group:
        spec["schedulingGroup"] = {"podGroupName": group}
    if node:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NAMESPACE}, "spec": spec}


def gang(group: str, size: int, claim_template: str, topology_key: str | None = None) -> list[dict]:
    return [pod_group(group, size, topology_key)] + [pod(f"{group}-{i}", claim_template, group) for i in range(size)]


def live_state(kubectl: Kubectl) -> list[dict]:
    state = cluster_state(kubectl)
    for obj in kubectl.json("get", "podgroups.scheduling.k8s.io", "-A")["items"]:
        obj.pop("status", None)  # the real scheduler's conditions: gpudra decides afresh
        obj["metadata"].pop("managedFields", None)
        state.append({"apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "PodGroup", **obj})
    return state


def offline(state: list[dict], objects: list[dict], tmp: str, label: str) -> dict[str, str | None]:
    """gpudra's placement of `objects` (created after `state` was read): pod name -> node (None: not bound)."""
    path = os.path.join(tmp, f"{label}.yaml")
    with open(path, "w", encoding="utf-8") as f:
        yaml.safe_dump_all(state + json.loads(json.dumps(objects)), f)
    result = gpudra("schedule", "-f", path, "-o", "json", "--kubernetes-version", RELEASE, "--features", FEATURES,
                    "--no-validate", check=False)
    assert result.returncode in (0, 1), result.stderr[-3000:]
    names = {o["metadata"]["name"] for o in objects if o["kind"] == "Pod"}
    return {o["metadata"]["name"]: o["spec"].get("nodeName") for o in json.loads(result.stdout)["items"]
            if o["kind"] == "Pod" and o["metadata"]["name"] in names}


def wait_bound(kubectl: Kubectl, names: list[str], timeout: float = 120) -> dict[str, str]:
    deadline = time.monotonic() + timeout
    while True:
        pods = {p["metadata"]["name"]: p for p in kubectl.json("get", "pods", "-n", NAMESPACE)["items"]}
        nodes = {name: pods.get(name, {}).get("spec", {}).get("nodeName") for name in names}
        if all(nodes.values()):
            return nodes  # type: ignore[return-value]
        assert time.monotonic() < deadline, f"kube-scheduler did not bind {names}: {nodes}"
        time.sleep(0.5)


def wait_unschedulable(kubectl: Kubectl, group: str, timeout: float = 120) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        conditions = kubectl.json("get", "podgroup", group, "-n", NAMESPACE).get("status", {}).get("conditions") or []
        scheduled = next((c for c in conditions if c["type"] == "PodGroupScheduled"), None)
        if scheduled and scheduled["status"] == "False":
            return scheduled
        assert time.monotonic() < deadline, f"the real scheduler reported nothing for {group}: {conditions}"
        time.sleep(0.5)


def test_gangs_placed_as_the_real_kube_scheduler_places_them(tmp_path):
    binary = built(RELEASE)
    directory = short_dir("gw")
    decided = []
    try:
        gpudra("cluster", "up", "--dir", directory, "--api-server", "kubernetes", "--kubernetes-version", RELEASE,
               "--nodes", NODES, "--racks", RACKS, "--features", FEATURES)
        kubeconfig = os.path.join(directory, "kubeconfig")
        kubectl = Kubectl(binary.kubectl, kubeconfig)
        kubectl("create", "namespace", NAMESPACE)
        wait_nodes_schedulable(kubectl)
        nodes = {n["metadata"]["name"]: n["metadata"].get("labels", {}) for n in kubectl.json("get", "nodes")["items"]}
        h100 = sorted(n for n in nodes if CLIQUE_LABEL not in nodes[n])
        trays = sorted(n for n in nodes if CLIQUE_LABEL in nodes[n])
        assert len(h100) == 2 and len(trays) == 4, nodes
        deadline = time.monotonic() + 90
        while {s["spec"].get("nodeName") for s in kubectl.json("get", "resourceslices")["items"]} < set(nodes):
            assert time.monotonic() < deadline, "not every node's driver published its devices"
            time.sleep(0.5)
        templates = [template("eight-h100", 8, H100), template("one-tray", 4, GB200)]
        kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(templates))

        # 1. three pods of eight H100s, two nodes of eight: all or nothing, so nothing
        too_big = gang("too-big", 3, "eight-h100")
        state = live_state(kubectl)
        kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(too_big))
        condition = wait_unschedulable(kubectl, "too-big")
        time.sleep(2)  # had any pod been bound it would show by now
        real = {p["metadata"]["name"]: p["spec"].get("nodeName") for p in kubectl.json("get", "pods", "-n", NAMESPACE)["items"]}
        assert not any(real.values()), real
        ours = offline(state, too_big, str(tmp_path), "too-big")
        assert ours == {f"too-big-{i}": None for i in range(3)}, ours
        explained = gpudra("explain", "pod/too-big-0", "-n", NAMESPACE, "--kubeconfig", kubeconfig, check=False)
        assert explained.returncode == 1, explained.stdout + explained.stderr
        assert "gang" in explained.stdout.lower() and "3" in explained.stdout, explained.stdout
        decided.append(f"too-big: real {condition['reason']}: {condition.get('message', '')[:120]}; gpudra binds none")
        kubectl("delete", "-f", "-", "--wait=true", stdin=yaml.safe_dump_all(too_big))

        # 2. two pods of eight H100s: both, one per H100 node
        pair = gang("pair", 2, "eight-h100")
        state = live_state(kubectl)
        kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(pair))
        real = wait_bound(kubectl, ["pair-0", "pair-1"])
        ours = offline(state, pair, str(tmp_path), "pair")
        assert sorted(real.values()) == h100 and sorted(v or "" for v in ours.values()) == h100, (real, ours)
        decided.append(f"pair: real {real}, gpudra {ours}")

        # 3. one tray of the first rack taken; a gang of two trays with a clique constraint: the other rack
        first_rack = nodes[trays[0]][CLIQUE_LABEL]
        holder = [pod("tray-holder", "one-tray", node=trays[0])]
        kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(holder))
        wait_bound(kubectl, ["tray-holder"])
        nvl = gang("nvl", 2, "one-tray", topology_key=CLIQUE_LABEL)
        state = live_state(kubectl)
        kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(nvl))
        real = wait_bound(kubectl, ["nvl-0", "nvl-1"])
        ours = offline(state, nvl, str(tmp_path), "nvl")
        other_rack = sorted(t for t in trays if nodes[t][CLIQUE_LABEL] != first_rack)
        assert sorted(real.values()) == other_rack, real
        assert sorted(v or "" for v in ours.values()) == other_rack, ours
        decided.append(f"nvl (clique {CLIQUE_LABEL}): real {real}, gpudra {ours}")
    finally:
        gpudra("cluster", "down", "--dir", directory, check=False)
        shutil.rmtree(directory, ignore_errors=True)
    print("\n".join(decided))
