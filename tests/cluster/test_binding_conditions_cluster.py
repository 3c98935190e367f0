"""Binding conditions (KEP-5007) on a local cluster, end to end: the control loop's scheduler waits at PreBind across
rounds, by its clock, for the conditions a device's controller writes into the claim's status.devices.

NVIDIA's GPUs publish no binding conditions, so the pod asks for a device of a second, simulated driver: a
fabric-attached NIC per node (`fabric.example.com`, bindsToNode, bindingConditions [attached],
bindingFailureConditions [attach-failed]), the shape of upstream's fabricSlice (kubernetes v1.36.0
pkg/scheduler/framework/plugins/dynamicresources/dynamicresources_test.go). The test stands in for the fabric
manager with gpudra.cluster.devicestatus.set_device_conditions. Three outcomes, as dynamicresources.go's PreBind,
Filter and PostFilter give them: the condition set True -> bound; a failure condition -> PreBind error, the claim
deallocated by the next attempt's PostFilter and the pod placed on the other node (the failed NIC tainted by its
manager); no answer within the 600 s binding timeout -> the same, and the pod waits again. On the old code the pod
was bound at once, with no wait, event or allocationTimestamp.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from click.testing import CliRunner

from gpudra.cli import cli
from gpudra.cluster.controller import reconcile
from gpudra.cluster.devicestatus import DeviceCondition, set_device_conditions
from gpudra.cluster.layout import ClusterDir

FABRIC = "fabric.example.com"
T0 = datetime.now(timezone.utc).replace(microsecond=0)  # metav1.Time keeps whole seconds


def run(*args: str, code: int = 0) -> str:
    result = CliRunner().invoke(cli, list(args))
    assert result.exit_code == code, result.output
    return result.stdout


def fabric_objects(nodes: list[str]) -> list[dict[str, Any]]:
    objects: list[dict[str, Any]] = [
        {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": FABRIC},
         "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{FABRIC}'"}}]}}]
    for node in nodes:
        objects.append(
            {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": f"{node}-fabric"},
             "spec": {"driver": FABRIC, "nodeName": node, "pool": {"name": node, "generation": 1,
                                                                   "resourceSliceCount": 1},
                      "devices": [{"name": "nic-0", "bindsToNode": True, "bindingConditions": ["attached"],
                                   "bindingFailureConditions": ["attach-failed"]}]}})
    objects.append({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                    "metadata": {"name": "nic", "namespace": "default"},
                    "spec": {"devices": {"requests": [{"name": "nic", "exactly": {"deviceClassName": FABRIC}}]}}})
    objects.append({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "trainer", "namespace": "default"},
                    "spec": {"containers": [{"name": "main", "image": "cuda"}],
                             "resourceClaims": [{"name": "nic", "resourceClaimName": "nic"}]}})
    return objects


def up(directory: str, tmp_path: Any) -> tuple[ClusterDir, list[str]]:
    run("cluster", "up", "--dir", directory, "--nodes", "l4-node:2", "--kubernetes-version", "1.36",
        "--no-control-plane")
    cluster = ClusterDir(directory)
    nodes = sorted(node.name for node in cluster.load_config().nodes)
    for obj in fabric_objects(nodes):  # into the store alone: the test's own rounds, with its clock, come next
        cluster.store.create(obj)
    return cluster, nodes


def at(seconds: float) -> Any:
    return lambda: T0 + timedelta(seconds=seconds)


def state(cluster: ClusterDir) -> tuple[dict[str, Any], dict[str, Any]]:
    pod = cluster.store.get("Pod", "default", "trainer")
    claim = cluster.store.get("ResourceClaim", "default", "nic")
    assert pod is not None and claim is not None
    return pod, claim


def allocated_node(claim: dict[str, Any]) -> str:
    [result] = claim["status"]["allocation"]["devices"]["results"]
    return str(result["pool"])


def events(cluster: ClusterDir, reason: str) -> list[str]:
    return [e["message"] for e in cluster.store.list("Event")
            if e["involvedObject"]["name"] == "trainer" and e["reason"] == reason]


def attach(cluster: ClusterDir, node: str, now: datetime, ok: bool = True) -> None:
    conditions = ([DeviceCondition("attached", True, "Attached")] if ok else
                  [DeviceCondition("attached", False, "NotAttached"),
                   DeviceCondition("attach-failed", True, "FabricError", "port down")])
    set_device_conditions(cluster.store, "default", "nic", FABRIC, node, "nic-0", conditions, now)


def taint_nic(cluster: ClusterDir, node: str) -> None:
    """The fabric manager marks the NIC it could not attach (NoSchedule), as a driver reports a broken device."""
    slice_ = cluster.store.get("ResourceSlice", None, f"{node}-fabric")
    assert slice_ is not None
    slice_["spec"]["devices"][0]["taints"] = [{"key": "fabric.example.com/attach-failed", "effect": "NoSchedule"}]
    cluster.store.replace(slice_)


def test_the_pod_waits_for_its_nic_and_binds_when_the_condition_is_true(cluster_state: str, tmp_path: Any) -> None:
    cluster, nodes = up(cluster_state, tmp_path)
    steps: list[tuple[str, str]] = []
    reconcile(cluster, lambda kind, text: steps.append((kind, text)), clock=at(0))
    pod, claim = state(cluster)
    node = allocated_node(claim)
    assert node == nodes[0]
    assert not pod["spec"].get("nodeName") and pod["status"]["nominatedNodeName"] == node
    assert claim["status"]["allocation"]["allocationTimestamp"]
    assert [e["name"] for e in claim["status"]["reservedFor"]] == ["trainer"]
    assert events(cluster, "BindingConditionsPending") == [f"waiting for binding conditions for device on node {node}"]
    assert ("binding", f"pod default/trainer waits on node {node}: Binding: waiting for condition attached on device "
            f"{FABRIC}/{node}/nic-0 (node {node})") in steps
    reconcile(cluster, clock=at(30))  # nothing new: still waiting, no second event
    assert not state(cluster)[0]["spec"].get("nodeName")
    assert len(events(cluster, "BindingConditionsPending")) == 1

    # the fabric manager's write, through the CLI (its own rounds run at the real time, T0 plus a few seconds)
    other = nodes[1]
    refused = CliRunner().invoke(cli, ["cluster", "device-condition", "nic", f"{FABRIC}/{other}/nic-0",
                                       "attached=True", "--dir", cluster_state])
    assert refused.exit_code == 1 and "error: " in refused.output and "not in status.allocation" in refused.output
    assert CliRunner().invoke(cli, ["cluster", "device-condition", "nic", f"{FABRIC}/{node}/nic-0", "attached=yes",
                                    "--dir", cluster_state]).exit_code == 2
    run("cluster", "device-condition", "nic", f"{FABRIC}/{node}/nic-0", "attached=True", "--reason", "Attached",
        "--dir", cluster_state)
    pod, claim = state(cluster)
    [entry] = claim["status"]["devices"]
    assert [(c["type"], c["status"], c["reason"]) for c in entry["conditions"]] == [("attached", "True", "Attached")]
    assert pod["spec"]["nodeName"] == node and "nominatedNodeName" not in pod["status"]
    assert events(cluster, "Scheduled") == [f"Successfully assigned default/trainer to {node}"]


def test_a_failure_condition_sends_the_pod_to_the_other_node(cluster_state: str, tmp_path: Any) -> None:
    cluster, nodes = up(cluster_state, tmp_path)
    reconcile(cluster, clock=at(0))
    first = allocated_node(state(cluster)[1])
    attach(cluster, first, T0 + timedelta(seconds=5), ok=False)
    taint_nic(cluster, first)
    steps: list[str] = []
    reconcile(cluster, lambda kind, text: steps.append(kind), clock=at(10))
    assert events(cluster, "FailedScheduling") == [
        'running PreBind plugin "DynamicResources": device binding failed: claim=nic, reason=FabricError, '
        'message="port down"']
    assert steps == ["unschedulable", "binding"]  # PreBind failed; the next round deallocated and waits anew
    pod, claim = state(cluster)
    second = allocated_node(claim)
    assert second != first and pod["status"]["nominatedNodeName"] == second
    assert "devices" not in claim["status"]  # the failed NIC's status went with its allocation
    attach(cluster, second, T0 + timedelta(seconds=20))
    reconcile(cluster, clock=at(25))
    assert state(cluster)[0]["spec"]["nodeName"] == second


def test_no_answer_within_the_binding_timeout_reschedules_the_pod(cluster_state: str, tmp_path: Any) -> None:
    cluster, nodes = up(cluster_state, tmp_path)
    reconcile(cluster, clock=at(0))
    stamp = state(cluster)[1]["status"]["allocation"]["allocationTimestamp"]
    reconcile(cluster, clock=at(600))  # at the timeout, not past it (isClaimTimeout: Before(now))
    assert not events(cluster, "FailedScheduling")
    reconcile(cluster, clock=at(602))
    assert events(cluster, "FailedScheduling") == [
        'running PreBind plugin "DynamicResources": device binding timeout: claim=nic']
    pod, claim = state(cluster)
    assert not pod["spec"].get("nodeName") and pod["status"].get("nominatedNodeName")
    assert claim["status"]["allocation"]["allocationTimestamp"] != stamp  # allocated afresh, waiting again
    node = allocated_node(claim)
    attach(cluster, node, T0 + timedelta(seconds=610))
    reconcile(cluster, clock=at(611))
    assert state(cluster)[0]["spec"]["nodeName"] == node
