"""Preemption on the local cluster, with kube-scheduler's and the API server's timing: the victim is marked
(DisruptionTarget, reason PreemptionByScheduler), deleted gracefully (deletionTimestamp = now +
terminationGracePeriodSeconds, 30 by default) with a `Preempted` event, and stays on its node with its claim
until the grace period is over; the preemptor is nominated to the node, waits ("not eligible due to a terminating
pod on the nominated node"), and is bound once the victim is gone. The loop's clock is moved forward instead of
waiting (as tests/cluster/test_device_taint_eviction_cluster.py does for tolerationSeconds).

The scenario is the one the real kube-scheduler 1.34 plays in tests/scheduler/test_scheduler_preemption.py
(`test_victims_as_the_real_kube_scheduler`): one DGX H100 (8 GPUs, 64 cpu), a low-priority pod holding all 8 GPUs
through a claim. Facts and messages from kubernetes v1.36.0 (v1.34.4 the same):
pkg/scheduler/framework/preemption/executor.go (PreemptPod), preemption.go (Preempt), default_preemption.go
(PodEligibleToPreemptOthers), pkg/scheduler/framework/plugins/defaultpreemption/default_preemption_test.go
TestPostFilter ("pod with tied priority is still unschedulable": "preemption: 0/1 nodes are available: 1 No
preemption victims found for incoming pod."; "preemption should respect filteredNodesStatuses": "... 1 Preemption
is not helpful for scheduling."), plugin/pkg/admission/priority/admission_test.go (PriorityClass resolution).
On the old code the loop ran the scheduler with preempt=False: the high-priority pod stayed Pending, no victim.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from gpudra.cli import cli
from gpudra.cluster.controller import reconcile
from gpudra.cluster.layout import ClusterDir
from gpudra.cluster.store import StoreError
from support.realkube import BUILD_TIMEOUT_S, Kubectl, built, gpudra, short_dir

CLASSES = """apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: low}
value: 10
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: high}
value: 1000
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: all-gpus}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly: {deviceClassName: gpu.nvidia.com, allocationMode: ExactCount, count: 8}
---
"""


WAITING = ("0/1 nodes are available: 1 Insufficient cpu. "
           "preemption: not eligible due to a terminating pod on the nominated node.")


def run(*args: str, code: int = 0) -> str:
    result = CliRunner().invoke(cli, list(args))
    assert result.exit_code == code, result.output
    return result.output


def pod(name: str, priority_class: str, cpu: str, gpus: bool = False, grace: int | None = None) -> str:
    claims = ", claims: [{name: gpu}]" if gpus else ""
    text = f"""apiVersion: v1
kind: Pod
metadata: {{name: {name}}}
spec:
  priorityClassName: {priority_class}
  containers:
  - {{name: main, image: cuda, resources: {{requests: {{cpu: "{cpu}"}}{claims}}}}}
"""
    if gpus:
        text += "  resourceClaims: [{name: gpu, resourceClaimTemplateName: all-gpus}]\n"
    if grace is not None:
        text += f"  terminationGracePeriodSeconds: {grace}\n"
    return text + "---\n"


def apply(directory: str, tmp_path: Any, text: str, code: int = 0) -> str:
    manifest = tmp_path / f"m{time.monotonic_ns()}.yaml"
    manifest.write_text(text)
    return run("apply", "-f", str(manifest), "--dir", directory, code=code)


def create(directory: str, text: str) -> None:
    """Into the store only (the API server): the test's reconcile, with its clock, is the first to act on it
    (`gpudra apply` runs the control loop itself, on the wall clock)."""
    for document in yaml.safe_load_all(text):
        if document:
            ClusterDir(directory).store.create(document)


def get(directory: str, kind: str, name: str) -> dict[str, Any] | None:
    return ClusterDir(directory).store.get(kind, "default", name)


def scheduled_condition(pod_obj: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in pod_obj["status"]["conditions"] if c["type"] == "PodScheduled")


def up(directory: str, version: str) -> str:
    run("cluster", "up", "--dir", directory, "--nodes", "dgx-h100:1", "--kubernetes-version", version,
        "--no-control-plane")
    return ClusterDir(directory).load_config().nodes[0].name


def _rfc3339(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.mark.parametrize("version", ["1.34", "1.36"])
def test_a_victim_goes_after_its_grace_period_and_the_preemptor_is_bound(cluster_state: str, tmp_path: Any,
                                                                         version: str) -> None:
    node = up(cluster_state, version)
    apply(cluster_state, tmp_path, CLASSES + pod("trainer", "low", "60", gpus=True))
    start = datetime.now(timezone.utc).replace(microsecond=0)
    reconcile(ClusterDir(cluster_state), clock=lambda: start)
    trainer = get(cluster_state, "Pod", "trainer")
    assert trainer is not None and trainer["status"]["phase"] == "Running"
    assert trainer["spec"]["priority"] == 10  # the Priority admission plugin resolved the class
    claim_name = trainer["status"]["resourceClaimStatuses"][0]["resourceClaimName"]

    create(cluster_state, pod("urgent", "high", "10"))
    steps: list[str] = []
    reconcile(ClusterDir(cluster_state), lambda kind, text: steps.append(kind), clock=lambda: start)
    assert steps.count("preempted") == 1
    victim = get(cluster_state, "Pod", "trainer")
    urgent = get(cluster_state, "Pod", "urgent")
    assert victim is not None and urgent is not None
    assert victim["metadata"]["deletionTimestamp"] == _rfc3339(start + timedelta(seconds=30))
    assert victim["metadata"]["deletionGracePeriodSeconds"] == 30
    [condition] = [c for c in victim["status"]["conditions"] if c["type"] == "DisruptionTarget"]
    assert (condition["status"], condition["reason"], condition["message"]) == (
        "True", "PreemptionByScheduler", "default-scheduler: preempting to accommodate a higher priority pod")
    events = [e for e in ClusterDir(cluster_state).store.list("Event")
              if e["involvedObject"]["name"] == "trainer" and e["reason"] == "Preempted"]
    assert [(e["type"], e["message"]) for e in events] == [
        ("Normal", f"Preempted by pod {urgent['metadata']['uid']} on node {node}")]
    assert urgent["status"]["nominatedNodeName"] == node and not urgent["spec"].get("nodeName")
    # the attempt that preempted (PostFilter succeeded: no "preemption:" part), then the retries while the
    # victim terminates
    failed = [e["message"] for e in ClusterDir(cluster_state).store.list("Event")
              if e["involvedObject"]["name"] == "urgent" and e["reason"] == "FailedScheduling"]
    assert sorted(failed) == ["0/1 nodes are available: 1 Insufficient cpu.", WAITING]
    claim = get(cluster_state, "ResourceClaim", claim_name)
    assert claim is not None and claim["status"]["allocation"]  # the victim still holds its GPUs

    # 29 s on: still terminating; the preemptor waits for it and preempts nothing more
    almost = start + timedelta(seconds=29)
    steps.clear()
    reconcile(ClusterDir(cluster_state), lambda kind, text: steps.append(kind), clock=lambda: almost)
    assert "preempted" not in steps
    assert get(cluster_state, "Pod", "trainer") is not None
    urgent = get(cluster_state, "Pod", "urgent")
    assert urgent is not None and urgent["status"]["nominatedNodeName"] == node
    assert scheduled_condition(urgent)["message"] == WAITING

    # the grace period is over: the kubelet stops the victim, its claim is deallocated and deleted with it, and
    # the preemptor is bound to the node it was nominated to
    later = start + timedelta(seconds=31)
    steps.clear()
    reconcile(ClusterDir(cluster_state), lambda kind, text: steps.append(kind), clock=lambda: later)
    assert get(cluster_state, "Pod", "trainer") is None
    assert get(cluster_state, "ResourceClaim", claim_name) is None
    assert steps.index("unprepared") < steps.index("scheduled")
    urgent = get(cluster_state, "Pod", "urgent")
    assert urgent is not None and urgent["spec"]["nodeName"] == node and urgent["status"]["phase"] == "Running"
    # ClearingNominatedNodeNameAfterBinding: on by default from 1.35
    assert urgent["status"].get("nominatedNodeName") == (node if version == "1.34" else None)


def test_a_custom_grace_period_and_equal_priority(cluster_state: str, tmp_path: Any) -> None:
    """terminationGracePeriodSeconds is the victim's own; a pod of the same priority preempts nobody."""
    up(cluster_state, "1.36")
    apply(cluster_state, tmp_path, CLASSES + pod("trainer", "low", "60", gpus=True, grace=5))
    start = datetime.now(timezone.utc).replace(microsecond=0)
    reconcile(ClusterDir(cluster_state), clock=lambda: start)

    create(cluster_state, pod("peer", "low", "10"))
    reconcile(ClusterDir(cluster_state), clock=lambda: start)
    peer = get(cluster_state, "Pod", "peer")
    trainer = get(cluster_state, "Pod", "trainer")
    assert peer is not None and trainer is not None
    assert not trainer["metadata"].get("deletionTimestamp") and "nominatedNodeName" not in peer["status"]
    assert scheduled_condition(peer)["message"] == (
        "0/1 nodes are available: 1 Insufficient cpu. "
        "preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod.")
    run("delete", "pod", "peer", "--dir", cluster_state)

    create(cluster_state, pod("urgent", "high", "10"))
    reconcile(ClusterDir(cluster_state), clock=lambda: start)
    trainer = get(cluster_state, "Pod", "trainer")
    assert trainer is not None and trainer["metadata"]["deletionGracePeriodSeconds"] == 5
    assert trainer["metadata"]["deletionTimestamp"] == _rfc3339(start + timedelta(seconds=5))
    reconcile(ClusterDir(cluster_state), clock=lambda: start + timedelta(seconds=5))
    urgent = get(cluster_state, "Pod", "urgent")
    assert get(cluster_state, "Pod", "trainer") is None and urgent is not None and urgent["spec"].get("nodeName")


def test_the_nominated_node_is_held_for_the_preemptor(cluster_state: str, tmp_path: Any) -> None:
    """Two victims, one gone at once (grace 0), one terminating for 30 s: a lower-priority pod that would fit in
    the first one's room does not take it, because the preemptor nominated there counts on the node for pods of
    equal or lower priority (RunFilterPluginsWithNominatedPods, addGENominatedPods in
    pkg/scheduler/framework/runtime/framework.go). Without that the filler is bound there, and once the second
    victim is gone the preemptor finds no room and preempts the filler too."""
    up(cluster_state, "1.36")
    apply(cluster_state, tmp_path, CLASSES + pod("quick", "low", "30", grace=0) + pod("slow", "low", "30"))
    start = datetime.now(timezone.utc).replace(microsecond=0)
    reconcile(ClusterDir(cluster_state), clock=lambda: start)
    create(cluster_state, pod("urgent", "high", "60"))
    reconcile(ClusterDir(cluster_state), clock=lambda: start)
    assert get(cluster_state, "Pod", "quick") is None  # its grace period was 0
    slow = get(cluster_state, "Pod", "slow")
    assert slow is not None and slow["metadata"]["deletionGracePeriodSeconds"] == 30

    create(cluster_state, pod("filler", "low", "30"))
    steps: list[str] = []
    reconcile(ClusterDir(cluster_state), lambda kind, text: steps.append(kind), clock=lambda: start)
    filler = get(cluster_state, "Pod", "filler")
    assert filler is not None and not filler["spec"].get("nodeName")  # 34 cpu free, but 60 held for urgent
    assert scheduled_condition(filler)["message"] == (
        "0/1 nodes are available: 1 Insufficient cpu. "
        "preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod.")

    reconcile(ClusterDir(cluster_state), lambda kind, text: steps.append(kind), clock=lambda: start
              + timedelta(seconds=30))
    urgent = get(cluster_state, "Pod", "urgent")
    assert urgent is not None and urgent["spec"].get("nodeName")
    assert steps.count("preempted") == 0  # the filler was never bound, so never preempted


def test_a_pod_disruption_budget_steers_preemption_but_does_not_block_it(cluster_state: str, tmp_path: Any) -> None:
    """The disruption controller keeps the PDB's status (pkg/controller/disruption: minAvailable 1 of 1 healthy
    pod allows no disruption); preemption prefers the node whose victims violate no PDB (pickOneNodeForPreemption's
    first criterion, TestSelectBestCandidate and TestDryRunPreemption's PDB cases in default_preemption_test.go),
    and preempts a guarded pod when that is the only way (PDBs are best effort for preemption)."""
    run("cluster", "up", "--dir", cluster_state, "--nodes", "dgx-h100:2", "--kubernetes-version", "1.36",
        "--no-control-plane")
    first, second = sorted(n.name for n in ClusterDir(cluster_state).load_config().nodes)
    guarded = pod("guarded", "low", "60").replace("metadata: {name: guarded}",
                                                  "metadata: {name: guarded, labels: {app: guarded}}")
    guarded = guarded.replace("  priorityClassName: low\n", f"  priorityClassName: low\n  nodeName: {first}\n")
    free = pod("free", "low", "60").replace("  priorityClassName: low\n",
                                            f"  priorityClassName: low\n  nodeName: {second}\n")
    apply(cluster_state, tmp_path, CLASSES + guarded + free + """apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: keep-one}
spec:
  minAvailable: 1
  selector: {matchLabels: {app: guarded}}
""")
    start = datetime.now(timezone.utc).replace(microsecond=0)
    reconcile(ClusterDir(cluster_state), clock=lambda: start)
    budget = get(cluster_state, "PodDisruptionBudget", "keep-one")
    assert budget is not None
    status = budget["status"]
    assert (status["expectedPods"], status["currentHealthy"], status["desiredHealthy"],
            status["disruptionsAllowed"]) == (1, 1, 1, 0)
    assert [(c["type"], c["status"], c["reason"]) for c in status["conditions"]] == [
        ("DisruptionAllowed", "False", "InsufficientPods")]
    table = run("get", "pdb", "--dir", cluster_state).splitlines()  # kubectl's columns (printers.go)
    assert table[0].split() == ["NAME", "MIN", "AVAILABLE", "MAX", "UNAVAILABLE", "ALLOWED", "DISRUPTIONS", "AGE"]
    assert table[1].split()[:4] == ["keep-one", "1", "N/A", "0"]

    create(cluster_state, pod("urgent", "high", "60"))
    reconcile(ClusterDir(cluster_state), clock=lambda: start)
    urgent = get(cluster_state, "Pod", "urgent")
    assert urgent is not None and urgent["status"]["nominatedNodeName"] == second  # not the first node's guarded
    guarded_now = get(cluster_state, "Pod", "guarded")
    assert guarded_now is not None and not guarded_now["metadata"].get("deletionTimestamp")
    reconcile(ClusterDir(cluster_state), clock=lambda: start + timedelta(seconds=30))
    assert get(cluster_state, "Pod", "free") is None

    create(cluster_state, pod("urgent-too", "high", "60"))  # only the guarded pod can make room now
    reconcile(ClusterDir(cluster_state), clock=lambda: start + timedelta(seconds=30))
    guarded_now = get(cluster_state, "Pod", "guarded")
    assert guarded_now is not None and guarded_now["metadata"].get("deletionTimestamp")
    too = get(cluster_state, "Pod", "urgent-too")
    assert too is not None and too["status"]["nominatedNodeName"] == first


@pytest.mark.parametrize("version", ["1.34", "1.35", "1.36"])
def test_claimed_devices_are_not_freed_by_preemption(cluster_state: str, tmp_path: Any, version: str) -> None:
    """A high-priority pod that needs the 8 GPUs a low-priority pod holds through a claim: kube-scheduler 1.34 to
    1.36 frees no claimed device by preemption (DynamicResources rejects as UnschedulableAndUnresolvable), so the
    node is no candidate. The preemptor stays Pending, not nominated; the victim keeps running with its GPUs
    (the real 1.34 scheduler answers the same in tests/scheduler/test_scheduler_preemption.py)."""
    up(cluster_state, version)
    apply(cluster_state, tmp_path, CLASSES + pod("trainer", "low", "1", gpus=True))
    reconcile(ClusterDir(cluster_state))
    apply(cluster_state, tmp_path, pod("urgent", "high", "1", gpus=True))
    steps: list[str] = []
    reconcile(ClusterDir(cluster_state), lambda kind, text: steps.append(kind))
    assert "preempted" not in steps
    trainer = get(cluster_state, "Pod", "trainer")
    urgent = get(cluster_state, "Pod", "urgent")
    assert trainer is not None and not trainer["metadata"].get("deletionTimestamp")
    assert trainer["status"]["phase"] == "Running"
    assert urgent is not None and "nominatedNodeName" not in urgent["status"]
    assert scheduled_condition(urgent)["message"] == (
        "0/1 nodes are available: 1 cannot allocate all claims. "
        "preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling.")
    # the preemptor is placed once the holder goes by other means
    run("delete", "pod", "trainer", "--dir", cluster_state)
    urgent = get(cluster_state, "Pod", "urgent")
    assert urgent is not None and urgent["spec"].get("nodeName")


def test_priority_admission(cluster_state: str, tmp_path: Any) -> None:
    """plugin/pkg/admission/priority: the class's value and preemption policy become the pod's; an unknown
    class, or a spec.priority the class does not give, is forbidden; the lowest-valued globalDefault class is
    every pod's without a class; the API server's system classes exist."""
    up(cluster_state, "1.36")
    store = ClusterDir(cluster_state).store
    output = apply(cluster_state, tmp_path, pod("orphan", "no-such-class", "1"), code=1)
    assert 'pods "orphan" is forbidden: no PriorityClass with name no-such-class was found' in output
    apply(cluster_state, tmp_path, CLASSES + pod("plain", "", "1").replace("  priorityClassName: \n", "")
          + pod("critical", "system-node-critical", "1"))
    plain, critical = get(cluster_state, "Pod", "plain"), get(cluster_state, "Pod", "critical")
    assert plain is not None and critical is not None
    assert (plain["spec"]["priority"], plain["spec"]["preemptionPolicy"]) == (0, "PreemptLowerPriority")
    assert critical["spec"]["priority"] == 2000001000
    apply(cluster_state, tmp_path, """apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: batch-default}
value: 5
globalDefault: true
preemptionPolicy: Never
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: other-default}
value: 7
globalDefault: true
""")
    apply(cluster_state, tmp_path, pod("defaulted", "", "1").replace("  priorityClassName: \n", ""))
    defaulted = get(cluster_state, "Pod", "defaulted")
    assert defaulted is not None
    assert (defaulted["spec"]["priorityClassName"], defaulted["spec"]["priority"],
            defaulted["spec"]["preemptionPolicy"]) == ("batch-default", 5, "Never")
    wrong = json.loads(json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "liar"},
                                   "spec": {"priorityClassName": "high", "priority": 7,
                                            "containers": [{"name": "main", "image": "cuda"}]}}))
    with pytest.raises(StoreError, match=r"the integer value of priority \(7\) must not be provided in pod spec; "
                                         r"priority admission controller computed 1000 from the given PriorityClass"):
        store.create(wrong)


@pytest.mark.timeout(BUILD_TIMEOUT_S)
def test_the_same_answers_as_the_real_control_plane() -> None:
    """The facts the tests above assert, read from the real kube-apiserver, kube-scheduler and
    kube-controller-manager 1.34 (`cluster up --api-server kubernetes`; gpudra's node stand-in removes a
    terminating pod at once, so only the control plane's part is compared): the Priority admission plugin's
    answers, the victim's DisruptionTarget condition and graceful deletion (deletionGracePeriodSeconds 30,
    deletionTimestamp 30 s on), the Preempted event, the preemptor's FailedScheduling messages, and on 1.34 the
    nomination kept after binding."""
    binary = built()
    directory = short_dir("pr")
    kubectl = Kubectl(binary.kubectl, os.path.join(directory, "kubeconfig"))

    def wait(what: str, check: Any, timeout: float = 120) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            found = check()
            if found:
                return found
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            time.sleep(0.3)

    def pod_now(name: str) -> dict[str, Any] | None:
        items = kubectl.json("get", "pods", "--field-selector", f"metadata.name={name}")["items"]
        return items[0] if items else None

    def running(name: str) -> bool:
        found = pod_now(name)
        return bool(found and found["spec"].get("nodeName") and found["status"].get("phase") == "Running")

    def events(name: str, reason: str) -> list[dict[str, Any]]:
        return kubectl.json("get", "events", "--field-selector",
                            f"involvedObject.name={name},reason={reason}")["items"]

    try:
        gpudra("cluster", "up", "--dir", directory, "--api-server", "kubernetes", "--nodes", "dgx-h100:1",
               "--kubernetes-version", "1.34")
        node = kubectl.json("get", "nodes")["items"][0]["metadata"]["name"]
        kubectl("apply", "-f", "-", stdin=CLASSES)
        wait("the node's ResourceSlice", lambda: kubectl.json("get", "resourceslices")["items"])

        # the Priority admission plugin
        refused = subprocess.run([binary.kubectl, "--kubeconfig", kubectl.kubeconfig, "apply", "-f", "-"],
                                 input=pod("orphan", "no-such-class", "1"), capture_output=True, text=True)
        assert refused.returncode != 0
        assert 'pods "orphan" is forbidden: no PriorityClass with name no-such-class was found' in refused.stderr
        kubectl("apply", "-f", "-", stdin=pod("critical", "system-node-critical", "1").replace(
            "  containers:", "  nodeSelector: {nowhere: none}\n  containers:"))
        critical = pod_now("critical")
        assert critical is not None
        assert (critical["spec"]["priority"], critical["spec"]["preemptionPolicy"]) == (2000001000,
                                                                                         "PreemptLowerPriority")
        kubectl("delete", "pod", "critical", "--wait=true")

        # preemption: watch the victim so that its terminating version is seen before the stand-in removes it
        kubectl("apply", "-f", "-", stdin=pod("trainer", "low", "60", gpus=True))
        wait("trainer running", lambda: running("trainer"))
        watch = subprocess.Popen([binary.kubectl, "--kubeconfig", kubectl.kubeconfig, "get", "pod", "trainer",
                                  "-w", "-o", "json"], stdout=subprocess.PIPE, text=True)
        try:
            kubectl("apply", "-f", "-", stdin=pod("urgent", "high", "10"))
            terminating = _first_terminating(watch)
        finally:
            watch.kill()
            watch.wait()
        urgent = wait("urgent running", lambda: running("urgent") and pod_now("urgent"))
        assert terminating["metadata"]["deletionGracePeriodSeconds"] == 30
        [condition] = [c for c in terminating["status"]["conditions"] if c["type"] == "DisruptionTarget"]
        assert (condition["status"], condition["reason"], condition["message"]) == (
            "True", "PreemptionByScheduler", "default-scheduler: preempting to accommodate a higher priority pod")
        marked = datetime.fromisoformat(condition["lastTransitionTime"].replace("Z", "+00:00"))
        deadline = datetime.fromisoformat(terminating["metadata"]["deletionTimestamp"].replace("Z", "+00:00"))
        assert 29 <= (deadline - marked).total_seconds() <= 31
        preempted = wait("the Preempted event", lambda: events("trainer", "Preempted"))
        assert [(e["type"], e["message"]) for e in preempted] == [
            ("Normal", f"Preempted by pod {urgent['metadata']['uid']} on node {node}")]
        failed = {e["message"] for e in events("urgent", "FailedScheduling")}
        assert "0/1 nodes are available: 1 Insufficient cpu." in failed and failed <= {
            "0/1 nodes are available: 1 Insufficient cpu.", WAITING}
        assert urgent["spec"]["nodeName"] == node
        assert urgent["status"].get("nominatedNodeName") == node  # 1.34: ClearingNominatedNodeNameAfterBinding off
    finally:
        gpudra("cluster", "down", "--dir", directory, check=False)
        shutil.rmtree(directory, ignore_errors=True)


def _first_terminating(watch: subprocess.Popen[str], timeout: float = 120) -> dict[str, Any]:
    """The first version of the watched pod with a deletionTimestamp, from `kubectl get -w -o json`'s stream of
    JSON documents."""
    assert watch.stdout is not None
    decoder = json.JSONDecoder()
    buffer = ""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = watch.stdout.readline()
        if not line:
            break
        buffer += line
        try:
            document, end = decoder.raw_decode(buffer.lstrip())
        except ValueError:
            continue
        buffer = buffer.lstrip()[end:]
        if document.get("metadata", {}).get("deletionTimestamp"):
            return dict(document)
    raise AssertionError("the victim was never seen terminating")
