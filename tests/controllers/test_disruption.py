"""The disruption controller's PDB status (gpudra.controllers.disruption) against kubernetes v1.36.0
pkg/controller/disruption/disruption_test.go, cases copied as data: the pods are `newPod`'s (label foo=bar, Ready),
the PDBs `newMinAvailablePodDisruptionBudget`/`newMaxUnavailablePodDisruptionBudget` (selector foo=bar), and each
expectation is VerifyPdbStatus's (disruptionsAllowed, currentHealthy, desiredHealthy, expectedPods)."""

from __future__ import annotations

from typing import Any

import pytest

from gpudra.controllers.disruption import pdb_status

NOW = "2026-01-01T00:00:00Z"


def _pdb(min_available: Any = None, max_unavailable: Any = None, selector: Any = "default") -> dict[str, Any]:
    spec: dict[str, Any] = {"selector": {"matchLabels": {"foo": "bar"}} if selector == "default" else selector}
    if min_available is not None:
        spec["minAvailable"] = min_available
    if max_unavailable is not None:
        spec["maxUnavailable"] = max_unavailable
    return {"kind": "PodDisruptionBudget", "metadata": {"name": "pdb", "namespace": "default", "generation": 1},
            "spec": spec}


def _pod(name: str, owner: tuple[str, str] | None = None, ready: bool = True) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "default", "labels": {"foo": "bar"}}
    if owner:
        meta["ownerReferences"] = [{"kind": owner[0], "name": owner[1], "uid": f"uid-{owner[1]}", "controller": True}]
    return {"kind": "Pod", "metadata": meta,
            "status": {"conditions": [{"type": "Ready", "status": "True"}] if ready else []}}


def _owner(kind: str, name: str, replicas: int) -> dict[tuple[str, str, str], dict[str, Any]]:
    return {(kind, "default", name): {"kind": kind, "metadata": {"name": name, "namespace": "default",
                                                                  "uid": f"uid-{name}"}, "spec": {"replicas": replicas}}}


def _counts(status: dict[str, Any] | None) -> tuple[int, int, int, int]:
    assert status is not None
    return (status["disruptionsAllowed"], status["currentHealthy"], status["desiredHealthy"], status["expectedPods"])


CASES = [
    ("TestNoSelector, no pod", _pdb(3, selector={}), [], {}, (0, 0, 3, 0)),
    ("TestNoSelector, one pod", _pdb(3, selector={}), [_pod("yo-yo-yo")], {}, (0, 1, 3, 1)),
    ("TestUnavailable, 3 pods", _pdb(3), [_pod(f"yo-yo-yo {i}") for i in range(3)], {}, (0, 3, 3, 3)),
    ("TestUnavailable, 4 pods", _pdb(3), [_pod(f"yo-yo-yo {i}") for i in range(4)], {}, (1, 4, 3, 4)),
    ("TestUnavailable, one not ready", _pdb(3), [_pod("yo-yo-yo 0", ready=False)]
     + [_pod(f"yo-yo-yo {i}") for i in range(1, 4)], {}, (0, 3, 3, 4)),
    ("TestIntegerMaxUnavailableWithScaling, 7 replicas", _pdb(max_unavailable=2), [_pod("pod", ("ReplicaSet", "rs"))],
     _owner("ReplicaSet", "rs", 7), (0, 1, 5, 7)),
    ("TestIntegerMaxUnavailableWithScaling, 5 replicas", _pdb(max_unavailable=2), [_pod("pod", ("ReplicaSet", "rs"))],
     _owner("ReplicaSet", "rs", 5), (0, 1, 3, 5)),
    ("TestPercentageMaxUnavailableWithScaling, 7 replicas", _pdb(max_unavailable="30%"),
     [_pod("pod", ("ReplicaSet", "rs"))], _owner("ReplicaSet", "rs", 7), (0, 1, 4, 7)),
    ("TestPercentageMaxUnavailableWithScaling, 3 replicas", _pdb(max_unavailable="30%"),
     [_pod("pod", ("ReplicaSet", "rs"))], _owner("ReplicaSet", "rs", 3), (0, 1, 2, 3)),
    ("TestReplicaSet", _pdb("20%"), [_pod("pod", ("ReplicaSet", "rs"))], _owner("ReplicaSet", "rs", 10),
     (0, 1, 2, 10)),
    ("TestStatefulSetController, no pods", _pdb("34%"), [], _owner("StatefulSet", "ss", 3), (0, 0, 0, 0)),
    ("TestStatefulSetController, 2 pods", _pdb("34%"), [_pod(f"foobar {i}", ("StatefulSet", "ss")) for i in range(2)],
     _owner("StatefulSet", "ss", 3), (0, 2, 2, 3)),
    ("TestStatefulSetController, 3 pods", _pdb("34%"), [_pod(f"foobar {i}", ("StatefulSet", "ss")) for i in range(3)],
     _owner("StatefulSet", "ss", 3), (1, 3, 2, 3)),
    ("TestNakedPod", _pdb("28%"), [_pod("naked")], {}, (0, 1, 0, 0)),
    ("TestIntegerMaxUnavailable", _pdb(max_unavailable=1), [_pod("naked")], {}, (0, 1, 0, 0)),
]


@pytest.mark.parametrize("name, pdb, pods, owners, expected", CASES, ids=[c[0] for c in CASES])
def test_pdb_status_as_upstream(name, pdb, pods, owners, expected):
    status = pdb_status(pdb, pods, owners, NOW)
    assert _counts(status) == expected
    assert status is not None and status["conditions"][0]["reason"] == (
        "SufficientPods" if expected[0] else "InsufficientPods")


def test_a_deployments_scale_counts_for_its_replica_sets_pods():
    """getPodReplicaSet skips a ReplicaSet a Deployment owns; getPodDeployment takes the Deployment's replicas
    (TestDeploymentFinderFunction)."""
    owners = {("ReplicaSet", "default", "rs"): {"kind": "ReplicaSet", "metadata": {
        "name": "rs", "namespace": "default", "uid": "uid-rs",
        "ownerReferences": [{"kind": "Deployment", "name": "d", "uid": "uid-d", "controller": True}]},
        "spec": {"replicas": 2}}}
    owners.update(_owner("Deployment", "d", 4))
    assert _counts(pdb_status(_pdb("50%"), [_pod("pod", ("ReplicaSet", "rs"))], owners, NOW)) == (0, 1, 2, 4)


def test_a_terminating_pod_is_not_healthy_and_no_controller_found_leaves_the_status():
    terminating = _pod("going")
    terminating["metadata"]["deletionTimestamp"] = NOW
    assert _counts(pdb_status(_pdb(1), [terminating, _pod("staying")], {}, NOW)) == (0, 1, 1, 2)
    assert pdb_status(_pdb("50%"), [_pod("pod", ("ReplicaSet", "missing"))], {}, NOW) is None
