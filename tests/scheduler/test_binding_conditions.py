"""Device binding conditions (KEP-5007) in gpudra's scheduler, against kube-scheduler's own test table.

The cases are upstream's, as data: kubernetes v1.36.0
pkg/scheduler/framework/plugins/dynamicresources/dynamicresources_test.go TestPlugin, the entries with binding
conditions — "bound-claim-with-succeeded-binding-conditions", "bound-claim-with-failed-binding",
"bound-claim-with-timed-out-binding", "prebind-fail-with-binding-timeout", "bound-claim-with-mixed-binding-conditions",
"bound-claim-without-binding-conditions", "multi-claims-binding-conditions-all-success",
"multi-claims-binding-conditions-one-fail", "bind-claim-with-binding-conditions" — with their objects (node
"worker", drivers "some-driver"/"some-driver-2", device "instance-1"/"instance-2", bindingConditions ["condition"],
bindingFailureConditions ["failed"], fabricSlice with bindsToNode) and their expected Filter status ("resourceclaim
not available on the node"), PostFilter change (allocation and status.devices removed) and PreBind status (success,
or the timeout/failure error). Semantics from dynamicresources.go (isClaimReadyForBinding, isClaimTimeout,
isPodReadyForBinding, PreBind, Filter, PostFilter) of v1.34.4, v1.35.0 and v1.36.0; the error wording changed in 1.36.

On the old code every one of these pods was bound at once: nothing waited, nothing failed, no claim was found
unavailable, so each assertion on `binding`, `binding_error` or a deallocated claim fails there.
"""

from __future__ import annotations

import copy
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from gpudra.controllers import ManagedCluster
from gpudra.scheduler import Scheduler
from gpudra.scheduler import bindingconditions as bc

NODE, NODE2 = "worker", "worker-2"
DRIVER, DRIVER2 = "some-driver", "some-driver-2"
POD, POD_UID = "my-pod", "1234"
CLAIM, CLAIM2 = "my-pod-my-resource", "my-pod-my-resource-2"
CLASS = "my-resource-class"
NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=timezone.utc)
NOT_AVAILABLE = "resourceclaim not available on the node"


def _selector(node: str) -> dict[str, Any]:
    return {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]}


def _node(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}}}


def _fabric_slice(driver: str, device: str, node: str = NODE) -> dict[str, Any]:
    """upstream's fabricSlice / fabricSlice2: one device with bindsToNode and binding conditions, the slice
    selecting its node by name."""
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": f"{node}-{driver}"},
            "spec": {"driver": driver, "nodeSelector": _selector(node),
                     "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                     "devices": [{"name": device, "bindsToNode": True, "bindingConditions": ["condition"],
                                  "bindingFailureConditions": ["failed"]}]}}


def _worker_slice() -> dict[str, Any]:
    """workerNodeSlice: one plain device."""
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": f"{NODE}-{DRIVER}"},
            "spec": {"driver": DRIVER, "nodeName": NODE, "pool": {"name": NODE, "generation": 1,
                                                                    "resourceSliceCount": 1},
                     "devices": [{"name": "instance-1"}]}}


DEVICE_CLASS = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": CLASS}, "spec": {}}


def _claim(name: str, request: str = "req-1") -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
            "spec": {"devices": {"requests": [{"name": request, "exactly": {"deviceClassName": CLASS}}]}}}


def _allocated(name: str, driver: str = DRIVER, device: str = "instance-1", request: str = "req-1",
               binding: bool = True, stamp: datetime | None = None,
               conditions: list[dict[str, Any]] | None = None, status_entry: bool = True) -> dict[str, Any]:
    """allocatedClaim with allocationResultWithBindingConditions (or allocationResult, `binding=False`), an
    allocationTimestamp and status.devices with `conditions`."""
    claim = _claim(name, request)
    result: dict[str, Any] = {"driver": driver, "pool": NODE, "device": device, "request": request}
    if binding:
        result.update(bindingConditions=["condition"], bindingFailureConditions=["failed"])
    allocation: dict[str, Any] = {"devices": {"results": [result]}, "nodeSelector": _selector(NODE)}
    if stamp is not None:
        allocation["allocationTimestamp"] = bc.format_time(stamp)
    claim["status"] = {"allocation": allocation}
    claim["metadata"]["finalizers"] = ["resource.kubernetes.io/delete-protection"]
    if conditions is not None or status_entry and binding:
        entry: dict[str, Any] = {"driver": driver, "pool": NODE, "device": device}
        if conditions is not None:
            entry["conditions"] = conditions
        claim["status"]["devices"] = [entry]
    return claim


def _cond(kind: str, status: str, reason: str = "Reason", message: str = "") -> dict[str, Any]:
    return {"type": kind, "status": status, "reason": reason, "message": message,
            "lastTransitionTime": "2026-03-01T11:00:00Z"}


BOUND = [_cond("condition", "True"), _cond("failed", "False")]  # boundClaim's conditions
FAILED = [_cond("condition", "False"), _cond("failed", "True", "AttachFailed", 'fabric port "p1" down')]


def _pod(*claims: tuple[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": POD, "namespace": "default", "uid": POD_UID},
            "spec": {"containers": [{"name": "c", "image": "x"}],
                     "resourceClaims": [{"name": pod_claim, "resourceClaimName": claim} for pod_claim, claim in claims]}}


def _schedule(objects: list[dict[str, Any]], now: datetime = NOW, version: str = "1.36", features: Any = None,
              timeout: float = bc.BINDING_TIMEOUT_S) -> tuple[ManagedCluster, Any]:
    cluster = ManagedCluster(copy.deepcopy(objects), features, version)
    scheduler = Scheduler(cluster, preempt=False, clock=lambda: now, binding_timeout=timeout)
    return cluster, scheduler.schedule_pod(f"default/{POD}")


ONE_CLAIM = [("my-resource", CLAIM)]
TWO_CLAIMS = [("my-resource", CLAIM), ("my-resource-2", CLAIM2)]


def test_bound_claim_with_succeeded_binding_conditions():
    """PreBind: every binding condition True -> status nil: the pod is bound."""
    cluster, result = _schedule([_node(NODE), _allocated(CLAIM, conditions=BOUND), _pod(*ONE_CLAIM)])
    assert result.node == NODE and result.binding is None and result.binding_error is None
    assert cluster.pods[f"default/{POD}"]["spec"]["nodeName"] == NODE
    assert [e["uid"] for e in cluster.claims[f"default/{CLAIM}"]["status"]["reservedFor"]] == [POD_UID]


@pytest.mark.parametrize("name, claim", [
    ("bound-claim-with-failed-binding", _allocated(CLAIM, conditions=FAILED)),
    ("bound-claim-with-timed-out-binding", _allocated(CLAIM, stamp=NOW - timedelta(minutes=10, seconds=1))),
    ("bound-claim-with-mixed-binding-conditions",
     _allocated(CLAIM, stamp=NOW - timedelta(minutes=10, seconds=1),
                conditions=[_cond("condition1", "True"), _cond("condition2", "False")])),
])
def test_a_failed_or_timed_out_claim_is_unavailable_and_post_filter_deallocates_it(name, claim):
    """Filter: UnschedulableAndUnresolvable "resourceclaim not available on the node"; PostFilter: allocation and
    status.devices removed ("deallocation of ResourceClaim completed"). Upstream's timed-out claims are 10 minutes
    old against a 600 s timeout (`Before(now)`: strictly past it), here one second more to be past it."""
    cluster = ManagedCluster(copy.deepcopy([_node(NODE), claim, _pod(*ONE_CLAIM)]))
    scheduler = Scheduler(cluster, preempt=False, clock=lambda: NOW)
    info = scheduler.pod_info(f"default/{POD}")
    evaluation = scheduler.filter_node(info, NODE)
    assert [(r.message, r.resolvable) for r in evaluation.result.reasons] == [(NOT_AVAILABLE, False)], name
    assert scheduler._post_filter(f"default/{POD}", scheduler._attempt(f"default/{POD}"))
    status = cluster.claims[f"default/{CLAIM}"].get("status") or {}
    assert "allocation" not in status and "devices" not in status


def test_prebind_fail_with_binding_timeout():
    """The claim is not timed out when the pod reaches PreBind, and times out while it waits there: PreBind's
    status is ErrDeviceBindingTimeout with the claim (1.36: "device binding timeout: claim=…")."""
    stamp = NOW - timedelta(seconds=bc.BINDING_TIMEOUT_S) + timedelta(seconds=10)
    objects = [_node(NODE), _allocated(CLAIM, stamp=stamp), _pod(*ONE_CLAIM)]
    cluster = ManagedCluster(copy.deepcopy(objects))
    clock = [NOW]
    scheduler = Scheduler(cluster, preempt=False, clock=lambda: clock[0])
    waiting = scheduler.schedule_pod(f"default/{POD}")
    assert waiting.binding is not None and waiting.binding.node == NODE
    assert cluster.pods[f"default/{POD}"]["status"]["nominatedNodeName"] == NODE
    clock[0] = NOW + timedelta(seconds=11)
    failed = scheduler.schedule_pod(f"default/{POD}")
    assert failed.binding_error == f"device binding timeout: claim={CLAIM}"
    assert failed.message() == f'running PreBind plugin "DynamicResources": device binding timeout: claim={CLAIM}'
    pod = cluster.pods[f"default/{POD}"]
    assert "nodeName" not in pod["spec"] and "nominatedNodeName" not in pod["status"]
    [condition] = [c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled"]
    assert (condition["status"], condition["reason"]) == ("False", "SchedulerError")  # handleSchedulingFailure
    claim = cluster.claims[f"default/{CLAIM}"]
    assert "reservedFor" not in claim["status"] and "allocation" in claim["status"]  # Unreserve, not deallocation
    assert cluster.usage[NODE].pods == [] and cluster.binding_waits == {}


def test_bound_claim_without_binding_conditions():
    """No binding conditions: PreBind proceeds at once, nothing is stamped."""
    cluster, result = _schedule([_node(NODE), _allocated(CLAIM, binding=False), _pod(*ONE_CLAIM)])
    assert result.node == NODE and result.binding is None
    assert "allocationTimestamp" not in cluster.claims[f"default/{CLAIM}"]["status"]["allocation"]


def test_multi_claims_binding_conditions_all_success():
    cluster, result = _schedule([_node(NODE), _allocated(CLAIM, conditions=BOUND),
                                 _allocated(CLAIM2, DRIVER2, "instance-2", "req-2", conditions=BOUND),
                                 _pod(*TWO_CLAIMS)])
    assert result.node == NODE


def test_multi_claims_binding_conditions_one_fail():
    """Only the failed claim is deallocated by PostFilter; the other keeps its allocation."""
    cluster = ManagedCluster(copy.deepcopy([
        _node(NODE), _allocated(CLAIM, conditions=BOUND),
        _allocated(CLAIM2, DRIVER2, "instance-2", "req-2", conditions=FAILED), _pod(*TWO_CLAIMS)]))
    scheduler = Scheduler(cluster, preempt=False, clock=lambda: NOW)
    result = scheduler._attempt(f"default/{POD}")
    assert [r.message for r in result.filtered[NODE].reasons] == [NOT_AVAILABLE]
    assert scheduler._post_filter(f"default/{POD}", result)
    assert "allocation" in cluster.claims[f"default/{CLAIM}"]["status"]
    assert "allocation" not in (cluster.claims[f"default/{CLAIM2}"].get("status") or {})


def test_bind_claim_with_binding_conditions():
    """A pending claim allocated from fabricSlice: PreBind writes the allocation with the binding conditions, the
    node selector of bindsToNode and an allocationTimestamp, reserves it, and waits; with no controller setting
    the conditions it times out (upstream's case uses a 1 s BindingTimeout)."""
    objects = [_node(NODE), DEVICE_CLASS, _fabric_slice(DRIVER, "instance-1"),
               _claim(CLAIM), _pod(*ONE_CLAIM)]
    cluster = ManagedCluster(copy.deepcopy(objects))
    clock = [NOW]
    scheduler = Scheduler(cluster, preempt=False, clock=lambda: clock[0], binding_timeout=1)
    waiting = scheduler.schedule_pod(f"default/{POD}")
    assert waiting.binding is not None
    assert [p.describe() for p in waiting.binding.pending] == ["condition condition on device some-driver/worker/instance-1"]
    assert waiting.message() == ("Binding: waiting for condition condition on device some-driver/worker/instance-1 "
                                 "(node worker)")
    allocation = cluster.claims[f"default/{CLAIM}"]["status"]["allocation"]
    assert allocation["allocationTimestamp"] == "2026-03-01T12:00:00Z"
    assert allocation["nodeSelector"] == _selector(NODE)
    [result] = allocation["devices"]["results"]
    assert (result["bindingConditions"], result["bindingFailureConditions"]) == (["condition"], ["failed"])
    assert cluster.usage[NODE].pods == [f"default/{POD}"]  # the assumed pod counts on its node
    clock[0] = NOW + timedelta(seconds=2)
    assert scheduler.schedule_pod(f"default/{POD}").binding_error == f"device binding timeout: claim={CLAIM}"


def test_a_failure_condition_fails_prebind_in_each_release_s_words():
    """isClaimReadyForBinding's error: 1.34/1.35 "claim X binding failed: reason=…, message=%q", 1.36
    ErrDeviceBindingFailed "device binding failed: claim=X, reason=…, message=%q"."""
    claim = _allocated(CLAIM, stamp=NOW, conditions=FAILED)
    state = bc.claim_binding_state(claim, NOW)
    assert state.state == bc.FAILED
    assert state.error("1.36") == f'device binding failed: claim={CLAIM}, reason=AttachFailed, message="fabric port \\"p1\\" down"'
    assert state.error("1.35") == f'claim {CLAIM} binding failed: reason=AttachFailed, message="fabric port \\"p1\\" down"'
    assert bc.BindingState(bc.TIMED_OUT, CLAIM).error("1.34") == f"claim {CLAIM} binding timeout"


@pytest.mark.parametrize("conditions, stamp, expected", [
    (None, None, bc.WAITING),  # no status.devices entry: not ready, no timestamp: never times out
    ([_cond("condition", "True")], None, bc.READY),
    ([_cond("condition", "Unknown")], NOW - timedelta(seconds=600), bc.WAITING),  # exactly at the timeout: not Before
    ([_cond("condition", "Unknown")], NOW - timedelta(seconds=601), bc.TIMED_OUT),
    ([_cond("condition", "True"), _cond("failed", "True")], NOW, bc.FAILED),  # failure checked first
    ([_cond("failed", "False")], NOW, bc.WAITING),
])
def test_claim_binding_state_follows_is_claim_ready_for_binding(conditions, stamp, expected):
    claim = _allocated(CLAIM, stamp=stamp, conditions=conditions, status_entry=conditions is not None)
    assert bc.claim_binding_state(claim, NOW).state == expected


def test_when_the_gates_are_off_nothing_waits():
    """1.35 (DRADeviceBindingConditions alpha, off): the allocator does not hand out devices with binding conditions,
    and a claim allocated with them is bound at once (PreBind returns early)."""
    objects = [_node(NODE), DEVICE_CLASS, _fabric_slice(DRIVER, "instance-1"), _claim(CLAIM), _pod(*ONE_CLAIM)]
    _, result = _schedule(objects, version="1.35")
    assert result.node is None and result.binding is None and "cannot allocate all claims" in result.message()
    _, result = _schedule([_node(NODE), _allocated(CLAIM, stamp=NOW), _pod(*ONE_CLAIM)], version="1.35")
    assert result.node == NODE and result.binding is None
    cluster, result = _schedule(objects, version="1.35", features="default,+DRADeviceBindingConditions")
    assert result.binding is not None  # the gate turned on in 1.35: it waits


def test_a_waiting_pod_is_read_back_from_its_objects_and_counts_on_its_node():
    """After a restart (a new ClusterState from the stored objects): nominatedNodeName plus a claim reserved for the
    pod with binding conditions is a pod at PreBind; it counts on that node, and binds once the condition is True."""
    objects = [_node(NODE), _node(NODE2), DEVICE_CLASS, _fabric_slice(DRIVER, "instance-1"), _claim(CLAIM),
               _pod(*ONE_CLAIM)]
    cluster, result = _schedule(objects)
    assert result.binding is not None
    stored = copy.deepcopy([*cluster.nodes.values(), *cluster.slices, *cluster.device_classes.values(),
                            *cluster.claims.values(), *cluster.pods.values()])
    again = ManagedCluster(stored)
    assert again.binding_waits == {f"default/{POD}": NODE} and again.usage[NODE].pods == [f"default/{POD}"]
    again.claims[f"default/{CLAIM}"]["status"]["devices"] = [
        {"driver": DRIVER, "pool": NODE, "device": "instance-1", "conditions": [_cond("condition", "True")]}]
    result = Scheduler(again, clock=lambda: NOW + timedelta(seconds=30)).run()[0]
    assert result.node == NODE
    pod = again.pods[f"default/{POD}"]
    assert pod["spec"]["nodeName"] == NODE and "nominatedNodeName" not in pod["status"]
    assert again.binding_waits == {} and again.usage[NODE].pods == [f"default/{POD}"]


def test_a_binding_timeout_below_one_second_is_refused():
    with pytest.raises(ValueError, match="at least 1 second"):
        Scheduler(ManagedCluster([]), binding_timeout=0.5)


def test_schedule_and_explain_show_what_a_waiting_pod_waits_for(tmp_path):
    """`gpudra schedule` lists the pod under WAITING FOR BINDING (exit 1: not bound); `gpudra explain` names the
    condition, the device, the node, and what ends the wait."""
    import yaml
    from click.testing import CliRunner

    from gpudra.cli import cli

    manifest = tmp_path / "in.yaml"
    manifest.write_text(yaml.safe_dump_all([_node(NODE), DEVICE_CLASS, _fabric_slice(DRIVER, "instance-1"),
                                            _claim(CLAIM), _pod(*ONE_CLAIM)]))
    scheduled = CliRunner().invoke(cli, ["schedule", "-f", str(manifest)])
    assert scheduled.exit_code == 1, scheduled.output
    assert ("WAITING FOR BINDING (1):\n  default/my-pod: Binding: waiting for condition condition on device "
            "some-driver/worker/instance-1 (node worker)") in scheduled.stdout
    assert "UNSCHEDULABLE" not in scheduled.stdout
    explained = CliRunner().invoke(cli, ["explain", "pod/my-pod", "-f", str(manifest)])
    assert explained.exit_code == 0, explained.output
    assert "needs condition condition True in the claim's status.devices" in explained.stdout
    assert "600 s (DynamicResources bindingTimeout)" in explained.stdout
