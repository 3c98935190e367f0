"""NoExecute eviction and health recovery on a local cluster, end to end: the node drivers run as processes
(`--health-taint-effect NoExecute`), an XID injected with `gpudra driver inject-event` taints the GPU in the driver's
republished ResourceSlice, and the control loop's device taint eviction controller (kube-controller-manager's
pkg/controller/devicetainteviction) deletes the pod using it: DisruptionTarget condition with reason
DeletionByDeviceTaintManager and a DeviceTaintManagerEvent first, a claim that tolerates the taint for N seconds
keeps its pod that long. A cleared error (`inject-event --clear`) untaints the GPU and the scheduler places a pod
on it again. On the old code nothing evicted and only a driver restart removed a taint."""

from __future__ import annotations

import json
import time
from datetime import datetime, timedelta, timezone
from typing import Any

from click.testing import CliRunner

from gpudra.cli import cli
from gpudra.cluster.controller import ControlLoop, reconcile
from gpudra.cluster.layout import ClusterDir

XID_KEY = "gpu.nvidia.com/xid"


def run(*args: str, code: int = 0) -> str:
    result = CliRunner().invoke(cli, list(args))
    assert result.exit_code == code, result.output
    return result.stdout


def template(name: str, count: int = 1, toleration_s: int | None = None) -> str:
    tolerations = ""
    if toleration_s is not None:
        tolerations = (f", tolerations: [{{key: {XID_KEY}, operator: Exists, effect: NoExecute, "
                       f"tolerationSeconds: {toleration_s}}}]")
    return f"""apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {{name: {name}}}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly: {{deviceClassName: gpu.nvidia.com, allocationMode: ExactCount, count: {count}{tolerations}}}
---
"""


def pod(name: str, claim_template: str) -> str:
    return f"""apiVersion: v1
kind: Pod
metadata: {{name: {name}}}
spec:
  containers:
  - {{name: main, image: cuda, resources: {{claims: [{{name: gpu}}]}}}}
  resourceClaims: [{{name: gpu, resourceClaimTemplateName: {claim_template}}}]
---
"""


def apply(directory: str, tmp_path: Any, text: str) -> None:
    manifest = tmp_path / f"m{time.monotonic_ns()}.yaml"
    manifest.write_text(text)
    run("apply", "-f", str(manifest), "--dir", directory)


def get(directory: str, ref: str) -> dict[str, Any] | None:
    result = CliRunner().invoke(cli, ["get", ref, "-o", "json", "--dir", directory])
    return json.loads(result.stdout) if result.exit_code == 0 else None


def devices_of(directory: str, pod_name: str) -> list[tuple[str, str]]:
    found = get(directory, f"pod/{pod_name}")
    assert found is not None
    claim = get(directory, f"resourceclaim/{found['status']['resourceClaimStatuses'][0]['resourceClaimName']}")
    assert claim is not None
    return [(r["pool"], r["device"]) for r in claim["status"]["allocation"]["devices"]["results"]]


def wait_for_taint(directory: str, pool: str, device: str, present: bool) -> None:
    """The driver reads the event on its next health poll and republishes its slice into the store."""
    deadline = time.monotonic() + 60
    store = ClusterDir(directory).store
    while True:
        taints = [t for s in store.list("ResourceSlice") if s["spec"]["pool"]["name"] == pool
                  for d in s["spec"].get("devices") or [] if d["name"] == device for t in d.get("taints") or []]
        if bool(taints) == present:
            return
        assert time.monotonic() < deadline, f"{pool}/{device} taints: {taints}"
        time.sleep(0.2)


def inject(directory: str, pool: str, device: str, *flags: str) -> None:
    run("driver", "inject-event", "--root", f"{directory}/nodes/{pool}", "--gpu", device.rsplit("-", 1)[1], *flags)


def up(directory: str) -> None:
    run("cluster", "up", "--dir", directory, "--nodes", "l4-node", "--kubernetes-version", "1.36",
        "--health-taint-effect", "NoExecute", "--no-control-plane")


def test_an_xid_evicts_the_pod_and_a_toleration_delays_it(cluster_state: str, tmp_path: Any) -> None:
    up(cluster_state)
    apply(cluster_state, tmp_path, template("plain") + template("tolerant", toleration_s=300)
          + pod("worker", "plain") + pod("patient", "tolerant"))
    reconcile(ClusterDir(cluster_state))
    worker = get(cluster_state, "pod/worker")
    assert worker is not None and worker["status"]["phase"] == "Running"
    [(pool, worker_gpu)] = devices_of(cluster_state, "worker")
    [(_, patient_gpu)] = devices_of(cluster_state, "patient")
    inject(cluster_state, pool, worker_gpu, "--xid", "79")
    inject(cluster_state, pool, patient_gpu, "--xid", "79")
    wait_for_taint(cluster_state, pool, worker_gpu, True)
    wait_for_taint(cluster_state, pool, patient_gpu, True)
    slices = ClusterDir(cluster_state).store.list("ResourceSlice")
    [taint] = [t for s in slices for d in s["spec"]["devices"] if d["name"] == worker_gpu for t in d["taints"]]
    assert (taint["key"], taint["value"], taint["effect"]) == (XID_KEY, "79", "NoExecute")

    # one pass of the eviction controller alone: the pod is marked and terminating, as upstream leaves it
    loop = ControlLoop(ClusterDir(cluster_state))
    try:
        assert loop._evict_tainted_pods()
    finally:
        loop.kubelet.close()
    marked = get(cluster_state, "pod/worker")
    assert marked is not None and marked["metadata"].get("deletionTimestamp")
    [condition] = [c for c in marked["status"]["conditions"] if c["type"] == "DisruptionTarget"]
    assert (condition["status"], condition["reason"], condition["message"]) == (
        "True", "DeletionByDeviceTaintManager", "Device Taint manager: deleting due to NoExecute taint")
    events = [e for e in ClusterDir(cluster_state).store.list("Event")
              if e["involvedObject"]["name"] == "worker" and e["reason"] == "DeviceTaintManagerEviction"]
    assert [e["message"] for e in events] == ["Marking for deletion"]

    steps: list[str] = []
    reconcile(ClusterDir(cluster_state), lambda kind, text: steps.append(kind))
    assert get(cluster_state, "pod/worker") is None  # unprepared and gone
    patient = get(cluster_state, "pod/patient")
    assert patient is not None and not patient["metadata"].get("deletionTimestamp")  # tolerated for 300 s

    later = datetime.now(timezone.utc) + timedelta(seconds=301)
    reconcile(ClusterDir(cluster_state), lambda kind, text: steps.append(kind), clock=lambda: later)
    assert get(cluster_state, "pod/patient") is None
    assert steps.count("evicted") == 1  # the patient's eviction (the worker's came from the single pass)


def test_a_cleared_error_makes_the_gpu_allocatable_again(cluster_state: str, tmp_path: Any) -> None:
    up(cluster_state)
    apply(cluster_state, tmp_path, template("all-gpus", count=4) + pod("first", "all-gpus"))
    reconcile(ClusterDir(cluster_state))
    devices = devices_of(cluster_state, "first")
    assert len(devices) == 4
    pool, gpu = devices[0]
    inject(cluster_state, pool, gpu, "--xid", "94")  # contained ECC error: RESTART_APP, it clears
    wait_for_taint(cluster_state, pool, gpu, True)
    reconcile(ClusterDir(cluster_state))
    assert get(cluster_state, "pod/first") is None  # evicted: NoExecute

    apply(cluster_state, tmp_path, pod("second", "all-gpus"))
    reconcile(ClusterDir(cluster_state))
    second = get(cluster_state, "pod/second")
    assert second is not None and not second["spec"].get("nodeName")  # three untainted GPUs: no fit

    inject(cluster_state, pool, gpu, "--clear")
    wait_for_taint(cluster_state, pool, gpu, False)
    reconcile(ClusterDir(cluster_state))
    second = get(cluster_state, "pod/second")
    assert second is not None and second["spec"].get("nodeName") == pool
    assert (pool, gpu) in devices_of(cluster_state, "second")
    # the prepared claim's status.devices (DRAResourceClaimDeviceStatus): the driver writes none, as NVIDIA's GPU
    # plugin does not (no AllocatedDeviceStatus outside its vendored API types)
    claim = get(cluster_state, f"resourceclaim/{second['status']['resourceClaimStatuses'][0]['resourceClaimName']}")
    assert claim is not None and "devices" not in claim["status"]


def test_a_gpu_needing_a_reset_stays_tainted_on_clear(cluster_state: str) -> None:
    up(cluster_state)
    config = ClusterDir(cluster_state).load_config()
    pool = config.nodes[0].name
    inject(cluster_state, pool, "gpu-1", "--xid", "95")  # uncontained ECC error: RESET_GPU
    wait_for_taint(cluster_state, pool, "gpu-1", True)
    inject(cluster_state, pool, "gpu-1", "--clear")
    inject(cluster_state, pool, "gpu-2", "--xid", "13")  # processed after the clear: the clear has been read
    wait_for_taint(cluster_state, pool, "gpu-2", True)
    wait_for_taint(cluster_state, pool, "gpu-1", True)
    inject(cluster_state, pool, "gpu-1", "--reset")
    wait_for_taint(cluster_state, pool, "gpu-1", False)


def test_a_noexecute_device_taint_rule_evicts(cluster_state: str, tmp_path: Any) -> None:
    """An operator's DeviceTaintRule (1.36: resource.k8s.io/v1beta2, gate DRADeviceTaintRules) drains a GPU; the
    driver's own taints stay NVIDIA's NoSchedule here."""
    run("cluster", "up", "--dir", cluster_state, "--nodes", "l4-node", "--kubernetes-version", "1.36",
        "--features", "default,+DRADeviceTaintRules", "--no-control-plane")
    apply(cluster_state, tmp_path, template("plain") + pod("worker", "plain"))
    reconcile(ClusterDir(cluster_state))
    [(pool, gpu)] = devices_of(cluster_state, "worker")
    apply(cluster_state, tmp_path, f"""apiVersion: resource.k8s.io/v1beta2
kind: DeviceTaintRule
metadata: {{name: drain}}
spec:
  deviceSelector: {{driver: gpu.nvidia.com, pool: {pool}, device: {gpu}}}
  taint: {{key: example.com/drain, effect: NoExecute}}
""")
    reconcile(ClusterDir(cluster_state))
    assert get(cluster_state, "pod/worker") is None
