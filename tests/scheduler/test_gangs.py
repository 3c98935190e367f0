"""Gang scheduling (KEP-4671) against kube-scheduler's own test tables, and the Workload API's validation against
the API server's.

Sources (kubernetes/kubernetes, read from the v1.35.0 and v1.36.0 module sources):
- v1.36.0 pkg/scheduler/framework/plugins/gangscheduling/gangscheduling_test.go TestGangSchedulingFlow, and the
  v1.35.0 one (workloadRef, "… to be waiting on permit")
- v1.35.0 pkg/apis/scheduling/validation/validation_test.go TestValidateWorkload
- v1.36.0 pkg/registry/scheduling/podgroup/declarative_validation_test.go
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpudra.api.load import Document
from gpudra.api.validate import validate_document
from gpudra.cli import cli
from gpudra.controllers import ManagedCluster
from gpudra.scheduler.scheduler import Scheduler

DATA = Path(__file__).parent.parent / "data" / "gang"
GANG_GATES = "default,+GenericWorkload,+GangScheduling"


# ----- the GangScheduling plugin: TestGangSchedulingFlow ---------------------------------------------------
def _node(name):
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
            "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}}}


def _pod(name, release, group=None, workload=None, fits=True):
    spec = {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}
    if group and release == "1.36":
        spec["schedulingGroup"] = {"podGroupName": group}
    if group and release == "1.35":
        spec["workloadRef"] = {"name": workload or "gang-wl", "podGroup": group}
    if not fits:
        spec["nodeSelector"] = {"no-such": "label"}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "ns1", "uid": name},
            "spec": spec}


def _groups(release, present=True):
    """The table's pod groups: pg1 gang of 3, pg2 gang of 4, pg3 basic (1.36: PodGroups; 1.35: Workloads)."""
    if not present:
        return []
    if release == "1.36":
        def group(name, policy):
            return {"apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "PodGroup",
                    "metadata": {"name": name, "namespace": "ns1"}, "spec": {"schedulingPolicy": policy}}
        return [group("pg1", {"gang": {"minCount": 3}}), group("pg2", {"gang": {"minCount": 4}}),
                group("pg3", {"basic": {}})]
    return [{"apiVersion": "scheduling.k8s.io/v1alpha1", "kind": "Workload",
             "metadata": {"name": "gang-wl", "namespace": "ns1"},
             "spec": {"podGroups": [{"name": "pg1", "policy": {"gang": {"minCount": 3}}},
                                    {"name": "pg2", "policy": {"gang": {"minCount": 4}}},
                                    {"name": "pg3", "policy": {"basic": {}}}]}}]


def _schedule(release, objects, features=GANG_GATES):
    cluster = ManagedCluster([_node("n1"), _node("n2"), _node("n3"), *objects], features=features,
                      kubernetes_version=release)
    results = {r.pod.split("/")[1]: r for r in Scheduler(cluster).run()}
    return cluster, results


PERMIT_WAIT = {"1.36": "waiting for minCount pods from a gang to be scheduled",
               "1.35": "waiting for minCount pods from a gang to be waiting on permit"}
MISSING_GROUP = {"1.36": 'waiting for pods\'s pod group "pg1" to appear in scheduling queue',
                 "1.35": 'waiting for pods\'s workload "gang-wl" to appear in scheduling queue'}


@pytest.mark.parametrize("release", ["1.35", "1.36"])
def test_non_gang_and_basic_policy_pods_succeed_immediately(release):
    _, results = _schedule(release, [*_groups(release), _pod("non-gang", release),
                                     _pod("basic-pod", release, "pg3")])
    assert results["non-gang"].scheduled and results["basic-pod"].scheduled


@pytest.mark.parametrize("release", ["1.35", "1.36"])
def test_gang_pod_fails_pre_enqueue_when_its_group_is_not_yet_created(release):
    pods = [_pod(n, release, "pg1") for n in ("p1", "p2", "p3")]
    cluster, results = _schedule(release, pods)
    assert results["p1"].message() == MISSING_GROUP[release]
    assert not any(r.scheduled for r in results.values())
    condition = cluster.pods["ns1/p1"]["status"]["conditions"][0]
    assert condition["reason"] == "Unschedulable" and condition["message"] == MISSING_GROUP[release]


@pytest.mark.parametrize("release", ["1.35", "1.36"])
def test_gang_pod_fails_pre_enqueue_when_quorum_is_not_met(release):
    # only p1 and p2 exist from their gang, minCount is 3
    _, results = _schedule(release, [*_groups(release), _pod("p1", release, "pg1"), _pod("p2", release, "pg1"),
                                     _pod("p4", release, "pg2"), _pod("p5", release, "pg2")])
    for name in ("p1", "p2", "p4", "p5"):
        assert results[name].message() == "waiting for minCount pods from a gang to appear in scheduling queue"
        assert not results[name].scheduled


@pytest.mark.parametrize("release", ["1.35", "1.36"])
def test_gang_pods_wait_at_permit_and_none_is_bound_without_the_quorum(release):
    # all of pg1 exists; p3 fits no node, so p1 and p2 wait at Permit until the pass ends (the timeout)
    cluster, results = _schedule(release, [*_groups(release), _pod("p1", release, "pg1"), _pod("p2", release, "pg1"),
                                           _pod("p3", release, "pg1", fits=False)])
    assert not any(r.scheduled for r in results.values())
    for name in ("p1", "p2", "p3"):
        assert PERMIT_WAIT[release] in results[name].message()
        assert "nodeName" not in cluster.pods[f"ns1/{name}"]["spec"]
    assert "2 could be placed" in results["p1"].message()
    assert all(not usage.pods for usage in cluster.usage.values())  # Unreserve gave the nodes back


@pytest.mark.parametrize("release", ["1.35", "1.36"])
def test_final_gang_pod_allows_all_waiting_pods(release):
    _, results = _schedule(release, [*_groups(release), *(_pod(n, release, "pg1") for n in ("p1", "p2", "p3"))])
    assert all(results[n].scheduled for n in ("p1", "p2", "p3"))


def test_without_the_gates_the_group_is_ignored_as_kube_scheduler_without_the_plugin():
    _, results = _schedule("1.36", [*_groups("1.36"), _pod("p1", "1.36", "pg1"), _pod("p2", "1.36", "pg1"),
                                    _pod("p3", "1.36", "pg1", fits=False)], features=None)
    assert results["p1"].scheduled and results["p2"].scheduled and not results["p3"].scheduled


# ----- end to end: three 8-GPU pods where two fit -----------------------------------------------------------
@pytest.mark.parametrize("release", ["1.35", "1.36"])
def test_schedule_binds_no_pod_of_a_gang_that_does_not_fit(release):
    result = CliRunner().invoke(cli, ["schedule", "-f", str(DATA / f"gang-{release}.yaml"), "--kubernetes-version",
                                      release, "--features", GANG_GATES, "-o", "yaml"], catch_exceptions=False)
    assert result.exit_code == 1, result.output
    import yaml

    pods = [d for d in yaml.safe_load_all(result.stdout) if d and d["kind"] == "Pod"]
    assert len(pods) == 3 and not any(p["spec"].get("nodeName") for p in pods)
    claims = [d for d in yaml.safe_load_all(result.stdout) if d and d["kind"] == "ResourceClaim"]
    assert not any((c.get("status") or {}).get("allocation") for c in claims)  # the two placed pods' GPUs freed
    message = pods[0]["status"]["conditions"][0]["message"]
    assert message.startswith(PERMIT_WAIT[release]) and "2 could be placed" in message


def test_explain_says_why_the_group_does_not_fit():
    result = CliRunner().invoke(cli, ["explain", "pod/train-2", "-n", "ml", "-f", str(DATA / "gang-1.36.yaml"),
                                      "--features", GANG_GATES], catch_exceptions=False)
    assert result.exit_code == 1, result.output
    assert ("group of 3 needs 3 pods placed at once, each on a node with 8 free gpu.nvidia.com devices; "
            "2 nodes have them (node-a, node-b)") in result.output


# ----- validation: 1.35 TestValidateWorkload --------------------------------------------------------------
def _workload_v1alpha1():
    return {"apiVersion": "scheduling.k8s.io/v1alpha1", "kind": "Workload",
            "metadata": {"name": "workload", "namespace": "ns"},
            "spec": {"controllerRef": {"apiGroup": "group", "kind": "foo", "name": "baz"},
                     "podGroups": [{"name": "group1", "policy": {"basic": {}}},
                                   {"name": "group2", "policy": {"gang": {"minCount": 2}}}]}}


def _set(path, value):
    def tweak(obj):
        *parents, last = path
        for key in parents:
            obj = obj[key]
        if value is _DELETE:
            del obj[last]
        else:
            obj[last] = value
    return tweak


_DELETE = object()
_PG = ("spec", "podGroups")
WORKLOAD_CASES = [  # (name, tweak, the path of the error or None where valid)
    ("basic and gang policies", None, None),
    ("no controllerRef", _set(("spec", "controllerRef"), _DELETE), None),
    ("no controllerRef apiGroup", _set(("spec", "controllerRef", "apiGroup"), ""), None),
    ("no name", _set(("metadata", "name"), ""), "metadata.name"),
    ("invalid name", _set(("metadata", "name"), ".workload"), "metadata.name"),
    ("too long name", _set(("metadata", "name"), "w" * 254), "metadata.name"),
    # "no namespace" is left out: gpudra reads a namespaced object without one as in the default namespace
    ("invalid namespace", _set(("metadata", "namespace"), ".ns"), "metadata.namespace"),
    ("too long namespace", _set(("metadata", "namespace"), "n" * 64), "metadata.namespace"),
    ("invalid controllerRef apiGroup", _set(("spec", "controllerRef", "apiGroup"), ".group"), "spec.controllerRef.apiGroup"),
    ("too long controllerRef apiGroup", _set(("spec", "controllerRef", "apiGroup"), "g" * 254),
     "spec.controllerRef.apiGroup"),
    ("no controllerRef kind", _set(("spec", "controllerRef", "kind"), ""), "spec.controllerRef.kind"),
    ("invalid controllerRef kind", _set(("spec", "controllerRef", "kind"), "/foo"), "spec.controllerRef.kind"),
    ("no controllerRef name", _set(("spec", "controllerRef", "name"), ""), "spec.controllerRef.name"),
    ("invalid controllerRef name", _set(("spec", "controllerRef", "name"), "/baz"), "spec.controllerRef.name"),
    ("no pod groups", _set(_PG, []), "spec.podGroups"),
    ("too many pod groups", _set(_PG, [{"name": f"group-{i}", "policy": {"basic": {}}} for i in range(9)]),
     "spec.podGroups"),
    ("no pod group name", _set((*_PG, 0, "name"), ""), "spec.podGroups[0].name"),
    ("invalid pod group name", _set((*_PG, 0, "name"), ".group1"), "spec.podGroups[0].name"),
    ("too long pod group name", _set((*_PG, 0, "name"), "g" * 64), "spec.podGroups[0].name"),
    ("no policy set", _set((*_PG, 0, "policy"), {}), "spec.podGroups[0].policy"),
    ("two policies", _set((*_PG, 0, "policy", "gang"), {"minCount": 2}), "spec.podGroups[0].policy"),
    ("zero min count in gang", _set((*_PG, 1, "policy", "gang", "minCount"), 0), "spec.podGroups[1].policy.gang.minCount"),
    ("negative min count in gang", _set((*_PG, 1, "policy", "gang", "minCount"), -1),
     "spec.podGroups[1].policy.gang.minCount"),
    ("two pod groups with the same name", _set((*_PG, 1, "name"), "group1"), "spec.podGroups[1]"),
]


# ----- validation: 1.36 PodGroup declarative validation ----------------------------------------------------
def _pod_group_v1alpha2():
    return {"apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "PodGroup",
            "metadata": {"name": "podgroup", "namespace": "ns"},
            "spec": {"podGroupTemplateRef": {"workload": {"workloadName": "workload",
                                                          "podGroupTemplateName": "template"}},
                     "schedulingPolicy": {"gang": {"minCount": 5}}}}


_REF = ("spec", "podGroupTemplateRef", "workload")
_CLAIMS = ("spec", "resourceClaims")
POD_GROUP_CASES = [  # (name, tweak, error path or None, features)
    ("valid", None, None, None),
    ("valid with basic policy", _set(("spec", "schedulingPolicy"), {"basic": {}}), None, None),
    ("gang minCount zero", _set(("spec", "schedulingPolicy", "gang", "minCount"), 0),
     "spec.schedulingPolicy.gang.minCount", None),
    ("gang minCount negative", _set(("spec", "schedulingPolicy", "gang", "minCount"), -1),
     "spec.schedulingPolicy.gang.minCount", None),
    ("no podGroupTemplateRef", _set(("spec", "podGroupTemplateRef"), _DELETE), None, None),
    ("empty podGroupTemplateRef", _set(("spec", "podGroupTemplateRef"), {}), "spec.podGroupTemplateRef", None),
    ("podGroupTemplateRef with empty template name", _set((*_REF, "podGroupTemplateName"), ""),
     "spec.podGroupTemplateRef.workload.podGroupTemplateName", None),
    ("podGroupTemplateRef invalid template name", _set((*_REF, "podGroupTemplateName"), "temp/late"),
     "spec.podGroupTemplateRef.workload.podGroupTemplateName", None),
    ("podGroupTemplateRef with empty workload name", _set((*_REF, "workloadName"), ""),
     "spec.podGroupTemplateRef.workload.workloadName", None),
    ("podGroupTemplateRef invalid workload name", _set((*_REF, "workloadName"), "work/load"),
     "spec.podGroupTemplateRef.workload.workloadName", None),
    ("podGroupTemplateRef too long workload name", _set((*_REF, "workloadName"), "g" * 254),
     "spec.podGroupTemplateRef.workload.workloadName", None),
    ("podGroupTemplateRef too long template name", _set((*_REF, "podGroupTemplateName"), "g" * 254),
     "spec.podGroupTemplateRef.workload.podGroupTemplateName", None),
    ("policy with neither basic nor gang", _set(("spec", "schedulingPolicy"), {}), "spec.schedulingPolicy", None),
    ("policy with both basic and gang", _set(("spec", "schedulingPolicy", "basic"), {}), "spec.schedulingPolicy", None),
    ("with schedulingConstraints and TAS disabled", _set(("spec", "schedulingConstraints"), {"topology": [{"key": "foo"}]}),
     "spec.schedulingConstraints", None),
    ("valid with schedulingConstraints", _set(("spec", "schedulingConstraints"), {"topology": [{"key": "foo"}]}),
     None, "default,+TopologyAwareWorkloadScheduling"),
    ("schedulingConstraints with multiple topology constraints",
     _set(("spec", "schedulingConstraints"), {"topology": [{"key": "foo"}, {"key": "bar"}]}),
     "spec.schedulingConstraints.topology", "default,+TopologyAwareWorkloadScheduling"),
    ("topologyConstraint with empty topology key", _set(("spec", "schedulingConstraints"), {"topology": [{"key": ""}]}),
     "spec.schedulingConstraints.topology[0].key", "default,+TopologyAwareWorkloadScheduling"),
    ("with topology key with invalid characters", _set(("spec", "schedulingConstraints"), {"topology": [{"key": "a b"}]}),
     "spec.schedulingConstraints.topology[0].key", "default,+TopologyAwareWorkloadScheduling"),
    ("pod disruption mode, workload aware preemption enabled", _set(("spec", "disruptionMode"), "Pod"), None,
     "default,+WorkloadAwarePreemption"),
    ("pod disruption mode, workload aware preemption disabled", _set(("spec", "disruptionMode"), "Pod"),
     "spec.disruptionMode", None),
    ("invalid disruption mode, workload aware preemption enabled", _set(("spec", "disruptionMode"), "Invalid"),
     "spec.disruptionMode", "default,+WorkloadAwarePreemption"),
    ("invalid priority class name, workload aware preemption enabled", _set(("spec", "priorityClassName"), ".foo_bar"),
     "spec.priorityClassName", "default,+WorkloadAwarePreemption"),
    ("valid priority, workload aware preemption disabled", _set(("spec", "priority"), 1000), "spec.priority", None),
    ("valid negative priority, workload aware preemption enabled", _set(("spec", "priority"), -1000), None,
     "default,+WorkloadAwarePreemption"),
    ("too high priority, workload aware preemption enabled", _set(("spec", "priority"), 1_000_000_001),
     "spec.priority", "default,+WorkloadAwarePreemption"),
    ("ok resourceClaimName reference", _set(_CLAIMS, [{"name": "claim", "resourceClaimName": "resource-claim"}]),
     None, None),
    ("ok resourceClaimTemplateName reference",
     _set(_CLAIMS, [{"name": "claim", "resourceClaimTemplateName": "resource-claim-template"}]), None, None),
    ("claim name with prefix", _set(_CLAIMS, [{"name": "../my-claim", "resourceClaimName": "resource-claim"}]),
     "spec.resourceClaims[0].name", None),
    ("claim name with path", _set(_CLAIMS, [{"name": "my/claim", "resourceClaimName": "resource-claim"}]),
     "spec.resourceClaims[0].name", None),
    ("duplicate claim entries", _set(_CLAIMS, [{"name": "my-claim", "resourceClaimName": "resource-claim-1"},
                                               {"name": "my-claim", "resourceClaimName": "resource-claim-2"}]),
     "spec.resourceClaims[1]", None),
    ("resource claim source empty", _set(_CLAIMS, [{"name": "my-claim"}]), "spec.resourceClaims[0]", None),
    ("resource claim reference and template", _set(_CLAIMS, [{"name": "my-claim", "resourceClaimName": "a",
                                                             "resourceClaimTemplateName": "b"}]),
     "spec.resourceClaims[0]", None),
    ("invalid claim reference name", _set(_CLAIMS, [{"name": "my-claim", "resourceClaimName": ".foo_bar"}]),
     "spec.resourceClaims[0].resourceClaimName", None),
    ("invalid claim template name", _set(_CLAIMS, [{"name": "my-claim", "resourceClaimTemplateName": ".foo_bar"}]),
     "spec.resourceClaims[0].resourceClaimTemplateName", None),
    ("too many claims", _set(_CLAIMS, [{"name": f"my-claim-{i}", "resourceClaimName": "resource-claim"}
                                       for i in range(5)]), "spec.resourceClaims", None),
]


def _errors(obj, release, features=None):
    return [p.path for p in validate_document(Document(obj, "t.yaml", 1), release, features)
            if p.severity == "error"]


def _check(base, tweak, expected, release, features=None):
    obj = copy.deepcopy(base)
    if tweak is not None:
        tweak(obj)
    errors = _errors(obj, release, features)
    if expected is None:
        assert errors == []
    else:
        assert errors and all(path.startswith(expected) for path in errors), errors


@pytest.mark.parametrize("name, tweak, expected", WORKLOAD_CASES, ids=[c[0] for c in WORKLOAD_CASES])
def test_v1alpha1_workload_validates_as_kubernetes_1_35(name, tweak, expected):
    _check(_workload_v1alpha1(), tweak, expected, "1.35")


@pytest.mark.parametrize("name, tweak, expected, features", POD_GROUP_CASES, ids=[c[0] for c in POD_GROUP_CASES])
def test_v1alpha2_pod_group_validates_as_kubernetes_1_36(name, tweak, expected, features):
    from gpudra.allocator.features import Features

    _check(_pod_group_v1alpha2(), tweak, expected, "1.36", Features.parse(features, "1.36") if features else None)


def test_each_version_is_served_only_by_its_release_and_gate():
    from gpudra.api.gates import gate_warnings

    workload = _workload_v1alpha1()
    assert any("served only by Kubernetes 1.35" in m for _, m in gate_warnings(workload, "1.36"))
    assert any("GenericWorkload feature gate" in m for _, m in gate_warnings(workload, "1.35"))
    assert not any("served only" in m for _, m in gate_warnings(workload, "1.35"))
    assert any("served only by Kubernetes 1.36" in m for _, m in gate_warnings(_pod_group_v1alpha2(), "1.35"))
    pod = _pod("p", "1.35", "pg1")
    assert any(path == "spec.workloadRef" for path in _errors(pod, "1.36"))  # 1.36's Pod has no workloadRef
    assert _errors(pod, "1.35") == []
