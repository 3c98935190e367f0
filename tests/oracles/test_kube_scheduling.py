"""gpudra's scheduler and allocator against the real kube-scheduler 1.34 and 1.36 (DynamicResources plugin), on the
devices gpudra's drivers publish to the real API server.

Pods are created behind a scheduling gate; one at a time, the cluster's state is read, the gate is lifted, and the
real kube-scheduler places the pod and allocates its claim. `gpudra schedule` then places the same pod offline on
the state read before the gate was lifted:
- where the node is forced (one node can hold the claim), gpudra must pick the same node and the same devices;
- where kube-scheduler has a choice of nodes (1.34 scores no DRA; NodeResourcesFit's scores tie on identical nodes
  and the scheduler picks one of the best at random: pkg/scheduler/schedule_one.go selectHost), gpudra must find
  the real scheduler's node feasible, and on that node allocate the same devices (the allocator's choice on a node
  is deterministic: the first devices in slice order that satisfy the claim, upstream's structured allocator).
"""

from __future__ import annotations

import json
import os
import shutil
import time

import pytest
import yaml

from support.realkube import BUILD_TIMEOUT_S, built, gpudra, short_dir
from support.realkube import Kubectl, cluster_state, wait_nodes_schedulable  # noqa: F401

pytestmark = pytest.mark.timeout(BUILD_TIMEOUT_S)

NODES = "dgx-h100:2,hgx-a100-mig+dynamic-mig,l4-node"
FEATURES = "default,+DRAPartitionableDevices,+DRAExtendedResource"
GATE = "gpudra.local/compare"
H100 = 'device.attributes["gpu.nvidia.com"].productName == "NVIDIA H100 80GB HBM3"'

# a Pod of the device-plugin era (`nvidia.com/gpu: 2` in its limits), served through DRA: the scheduler makes its
# claim from the DeviceClass whose extendedResourceName it is (DRAExtendedResource, alpha in 1.34)
EXTENDED = "extended-resource"

# name -> (requests, constraints, node forced?)
SCENARIO = [
    ("l4", [{"name": "g", "exactly": {"deviceClassName": "gpu.nvidia.com", "selectors": [
        {"cel": {"expression": 'device.attributes["gpu.nvidia.com"].productName.contains("L4")'}}]}}], [], True),
    ("h100-board", [{"name": "g", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 8,
                                              "selectors": [{"cel": {"expression": H100}}]}}],
     [{"matchAttribute": "gpu.nvidia.com/nvlinkDomain"}], False),
    ("h100-four", [{"name": "g", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 4,
                                             "selectors": [{"cel": {"expression": H100}}]}}], [], True),
    ("h100-pair", [{"name": "g", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 2,
                                             "selectors": [{"cel": {"expression": H100}}]}}],
     [{"matchAttribute": "gpu.nvidia.com/nvlinkDomain"}], True),
    ("mig-3g", [{"name": "m", "exactly": {"deviceClassName": "mig.nvidia.com", "selectors": [
        {"cel": {"expression": 'device.attributes["gpu.nvidia.com"].profile == "3g.40gb"'}}]}}], [], True),
    ("mig-two-1g", [{"name": "m", "exactly": {"deviceClassName": "mig.nvidia.com", "count": 2, "selectors": [
        {"cel": {"expression": 'device.attributes["gpu.nvidia.com"].profile == "1g.10gb"'}}]}}], [], True),
    ("first-available", [{"name": "g", "firstAvailable": [
        {"name": "sixteen", "deviceClassName": "gpu.nvidia.com", "count": 16},
        {"name": "a100", "deviceClassName": "gpu.nvidia.com", "count": 2, "selectors": [
            {"cel": {"expression": 'device.attributes["gpu.nvidia.com"].productName.contains("A100")'}}]}]}],
     [], True),
    (EXTENDED, [], [], False),
    ("big-memory", [{"name": "g", "exactly": {"deviceClassName": "gpu.nvidia.com", "selectors": [
        {"cel": {"expression": 'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0'}}]}}],
     [], False),
]


def objects(name: str, requests: list, constraints: list) -> list[dict]:
    if name == EXTENDED:
        return [{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
                 "spec": {"schedulingGates": [{"name": GATE}], "containers": [
                     {"name": "main", "image": "registry.k8s.io/pause:3.10",
                      "resources": {"limits": {"nvidia.com/gpu": "2"}}}]}}]
    template = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                "metadata": {"name": name, "namespace": "default"},
                "spec": {"spec": {"devices": {"requests": requests, "constraints": [
                    dict(c, requests=[r["name"] for r in requests]) for c in constraints]}}}}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
           "spec": {"schedulingGates": [{"name": GATE}], "resourceClaims": [
               {"name": "c", "resourceClaimTemplateName": name}],
               "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10",
                               "resources": {"claims": [{"name": "c"}]}}]}}
    return [template, pod]


def results_of(claim: dict) -> list[tuple]:
    found = claim.get("status", {}).get("allocation", {}).get("devices", {}).get("results", [])
    return sorted((r["request"], r["driver"], r["pool"], r["device"]) for r in found)


def identity(state: list[dict], pool: str, device: str) -> list[tuple[str, str]]:
    """The attributes that tell a device from the others of its pool: uuid, or parentUUID and profile."""
    for obj in state:
        if obj["kind"] == "ResourceSlice" and obj["spec"]["pool"]["name"] == pool:
            for d in obj["spec"].get("devices") or []:
                if d["name"] == device:
                    attributes = {k: v.get("string") for k, v in d.get("attributes", {}).items()}
                    if attributes.get("uuid"):
                        return [("uuid", attributes["uuid"])]
                    return [("parentUUID", attributes["parentUUID"]), ("profile", attributes["profile"])]
    raise AssertionError(f"no device {device} in pool {pool}")


def claim_of(pod: dict) -> str | None:
    status = pod.get("status", {})
    extended = (status.get("extendedResourceClaimStatus") or {}).get("resourceClaimName")
    return extended or next((s["resourceClaimName"] for s in status.get("resourceClaimStatuses", [])), None)


def offline(state: list[dict], pod_name: str, pin: str | None, tmp: str, release: str,
            only: list[tuple] | None = None) -> tuple[str | None, list[tuple]]:
    """gpudra's placement of `pod_name` (its gate lifted) on `state`; `pin` restricts it to one node, `only` its
    claim's requests to those devices (results_of's tuples)."""
    claim_name = None
    for obj in state:
        if obj["kind"] == "Pod" and obj["metadata"]["name"] == pod_name:
            obj["spec"].pop("schedulingGates", None)
            claim_name = claim_of(obj)
            if pin:
                obj["spec"]["nodeSelector"] = {"kubernetes.io/hostname": pin}
    if only is not None:
        # CEL sees no device names: each device by what identifies it (a GPU its uuid; a MIG partition, not
        # created yet, its parent and profile: partitions of one profile on one GPU are alike in every attribute)
        terms = [" && ".join(f"device.attributes['gpu.nvidia.com'].{k} == '{v}'" for k, v in identity(state, pool, device))
                 for _, _, pool, device in only]
        restrict = {"cel": {"expression": " || ".join(f"({t})" for t in terms)}}
        claim = next(o for o in state if o["kind"] == "ResourceClaim" and o["metadata"]["name"] == claim_name)
        for request in claim["spec"]["devices"]["requests"]:
            for sub in [request.get("exactly")] + list(request.get("firstAvailable") or []):
                if sub:
                    sub.setdefault("selectors", []).append(restrict)
    path = os.path.join(tmp, f"{pod_name}-{pin or 'any'}{'-only' if only else ''}.yaml")
    with open(path, "w", encoding="utf-8") as f:
        yaml.safe_dump_all(state, f)
    result = gpudra("schedule", "-f", path, "-o", "json", "--kubernetes-version", release, "--features", FEATURES,
                    "--no-validate", check=False)
    assert result.returncode in (0, 1), result.stderr[-3000:]
    after = json.loads(result.stdout)["items"]
    pod = next(o for o in after if o["kind"] == "Pod" and o["metadata"]["name"] == pod_name)
    node = pod["spec"].get("nodeName")
    claim_name = claim_of(pod)
    claim = next((o for o in after if o["kind"] == "ResourceClaim" and o["metadata"]["name"] == claim_name), {})
    return node, results_of(claim)


@pytest.mark.parametrize("release", ["1.34", "1.36"])
def test_gpudra_places_as_the_real_kube_scheduler(release, tmp_path):
    binary = built(None if release == "1.34" else release)
    directory = short_dir("gs")
    decided = []
    try:
        gpudra("cluster", "up", "--dir", directory, "--api-server", "kubernetes", "--kubernetes-version", release,
               "--nodes", NODES, "--features", FEATURES)
        kubectl = Kubectl(binary.kubectl, os.path.join(directory, "kubeconfig"))
        wait_nodes_schedulable(kubectl)
        manifests = [obj for name, requests, constraints, _ in SCENARIO for obj in objects(name, requests, constraints)]
        kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(manifests))
        deadline = time.monotonic() + 60
        while len(kubectl.json("get", "resourceslices")["items"]) < 8 and time.monotonic() < deadline:
            time.sleep(0.5)  # every driver has published (2 H100 boards, 5 A100 slices, the L4)
        for name, _, _, forced in SCENARIO:
            deadline = time.monotonic() + 60
            while name != EXTENDED and not kubectl.json("get", "pod", name).get("status", {}).get(
                    "resourceClaimStatuses"):
                assert time.monotonic() < deadline, f"no claim made for {name}"
                time.sleep(0.3)  # the real resourceclaim controller makes the claim even for a gated pod
            state = cluster_state(kubectl)
            kubectl("patch", "pod", name, "--type=json", "-p", '[{"op":"remove","path":"/spec/schedulingGates"}]')
            deadline = time.monotonic() + 90
            while True:
                pod = kubectl.json("get", "pod", name)
                if pod["spec"].get("nodeName") and pod.get("status", {}).get("phase") == "Running":
                    break
                assert time.monotonic() < deadline, f"kube-scheduler did not place {name}: {pod.get('status')}"
                time.sleep(0.3)
            claim = kubectl.json("get", "resourceclaim", claim_of(pod))
            real_node, real_results = pod["spec"]["nodeName"], results_of(claim)
            ours_node, ours_results = offline(json.loads(json.dumps(state)), name, None, str(tmp_path), release)
            if forced:
                assert ours_node == real_node, name
                rule = f"{name}: the node is forced, {real_node}"
            else:
                pinned_node, ours_results = offline(json.loads(json.dumps(state)), name, real_node, str(tmp_path), release)
                assert pinned_node == real_node, f"{name}: gpudra finds {real_node} infeasible"
                rule = (f"{name}: kube-scheduler chose {real_node}, gpudra {ours_node} (equal scores, a random pick "
                        "in selectHost)")
            if ours_results != real_results:
                # which of a pool's slices the allocator reads first is the informer's list order in the real
                # scheduler (GatherPools keeps its input's order, pools_stable.go): gpudra must find the devices the
                # real one took a valid answer too
                assert [(r, d, p) for r, d, p, _ in ours_results] == [(r, d, p) for r, d, p, _ in real_results], name
                if name != EXTENDED:  # the extended claim does not exist before scheduling: nothing to restrict
                    _, restricted = offline(json.loads(json.dumps(state)), name, real_node, str(tmp_path),
                                            release, only=real_results)
                    assert [identity(state, p, d) for _, _, p, d in restricted] == [
                        identity(state, p, d) for _, _, p, d in real_results], f"{name}: {real_results} not valid"
                rule += f"; devices: another of the pool's slices first (real {real_results}, gpudra {ours_results})"
            decided.append(rule)
    finally:
        gpudra("cluster", "down", "--dir", directory, check=False)
        shutil.rmtree(directory, ignore_errors=True)
    print("\n".join(decided))
