"""Workload expansion and claims created from templates (the resourceclaim controller's shapes)."""

from __future__ import annotations

import re

import pytest

from gpudra.controllers import ManagedCluster
from gpudra.api.objectmeta import SUFFIX_ALPHABET
from gpudra.controllers.workloads import POD_CLAIM_NAME_ANNOTATION, claim_generate_name
from tests.support.builders import claim, gpu_cluster, pod, pod_spec, template

SUFFIX = f"[{SUFFIX_ALPHABET}]{{5}}"


def workload(kind: str, name: str, replicas: int | None = None, **spec: object) -> dict:
    api = "batch/v1" if kind == "Job" else "apps/v1"
    body: dict = {"template": {"metadata": {"labels": {"app": name}}, "spec": pod_spec(templates={"gpu": "one-gpu"})}}
    if replicas is not None:
        body["replicas"] = replicas
    body.update(spec)
    return {"apiVersion": api, "kind": kind, "metadata": {"name": name, "namespace": "ml"}, "spec": body}


def cluster_with(*objects: dict) -> ManagedCluster:
    return ManagedCluster([*gpu_cluster({"n1": 8}), template("one-gpu", namespace="ml"), *objects])


def test_statefulset_pods_have_ordinal_names_and_labels():
    cluster = cluster_with(workload("StatefulSet", "train", 3, serviceName="train"))
    assert list(cluster.pods) == ["ml/train-0", "ml/train-1", "ml/train-2"]
    pod1 = cluster.pods["ml/train-1"]
    assert pod1["metadata"]["labels"]["statefulset.kubernetes.io/pod-name"] == "train-1"
    assert pod1["metadata"]["labels"]["app"] == "train"
    assert pod1["spec"]["hostname"] == "train-1" and pod1["spec"]["subdomain"] == "train"
    owner = pod1["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["controller"]) == ("StatefulSet", "train", True)


def test_deployment_pods_carry_template_hash_and_random_suffix():
    cluster = cluster_with(workload("Deployment", "web", 4))
    names = [key.split("/")[1] for key in cluster.pods]
    assert len(names) == 4 and len(set(names)) == 4
    hashes = {cluster.pods[f"ml/{n}"]["metadata"]["labels"]["pod-template-hash"] for n in names}
    assert len(hashes) == 1
    (hash_label,) = hashes
    for name in names:
        assert re.fullmatch(rf"web-{hash_label}-{SUFFIX}", name), name
    owner = cluster.pods[f"ml/{names[0]}"]["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"]) == ("ReplicaSet", f"web-{hash_label}")


def test_deployment_hash_follows_the_template():
    first = cluster_with(workload("Deployment", "web", 1))
    changed = workload("Deployment", "web", 1)
    changed["spec"]["template"]["metadata"]["labels"]["tier"] = "x"
    second = cluster_with(changed)
    label = lambda c: next(iter(c.pods.values()))["metadata"]["labels"]["pod-template-hash"]  # noqa: E731
    assert label(first) != label(second)


def test_replicaset_and_default_replicas():
    cluster = cluster_with(workload("ReplicaSet", "rs"))
    (name,) = [key.split("/")[1] for key in cluster.pods]
    assert re.fullmatch(rf"rs-{SUFFIX}", name)


def test_job_parallelism_is_capped_by_completions():
    cluster = cluster_with(workload("Job", "batch", parallelism=3, completions=2))
    assert len(cluster.pods) == 2
    for key, job_pod in cluster.pods.items():
        assert re.fullmatch(rf"ml/batch-{SUFFIX}", key)
        assert job_pod["metadata"]["labels"]["job-name"] == "batch"
        assert job_pod["spec"]["restartPolicy"] == "Never"


def test_indexed_job_names_carry_the_index():
    cluster = cluster_with(workload("Job", "idx", parallelism=2, completionMode="Indexed"))
    keys = list(cluster.pods)
    assert re.fullmatch(rf"ml/idx-0-{SUFFIX}", keys[0]) and re.fullmatch(rf"ml/idx-1-{SUFFIX}", keys[1])
    annotations = cluster.pods[keys[1]]["metadata"]["annotations"]
    assert annotations["batch.kubernetes.io/job-completion-index"] == "1"


def test_generated_names_are_deterministic():
    make = lambda: cluster_with(workload("Deployment", "web", 3), workload("Job", "j", parallelism=2))  # noqa: E731
    first, second = make(), make()
    assert list(first.pods) == list(second.pods)
    assert list(first.claims) == list(second.claims)
    assert [p["metadata"]["uid"] for p in first.pods.values()] == [p["metadata"]["uid"] for p in second.pods.values()]


def test_template_claim_shape():
    tmpl = template("one-gpu", namespace="ml", labels={"team": "a"}, annotations={"note": "x"})
    cluster = ManagedCluster([*gpu_cluster({"n1": 2}), tmpl, pod("p", namespace="ml", templates={"gpu": "one-gpu"})])
    (key,) = list(cluster.claims)
    generated = cluster.claims[key]
    meta = generated["metadata"]
    assert re.fullmatch(rf"ml/p-gpu-{SUFFIX}", key)
    assert meta["generateName"] == "p-gpu-"
    assert meta["annotations"] == {"note": "x", POD_CLAIM_NAME_ANNOTATION: "gpu"}
    assert meta["labels"] == {"team": "a"}
    the_pod = cluster.pods["ml/p"]
    # v1.35.0 and v1.36.0 pkg/controller/resourceclaim/controller.go: controller, no blockOwnerDeletion (1.34's set it)
    assert meta["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": the_pod["metadata"]["uid"], "controller": True}
    ]
    on_134 = ManagedCluster([*gpu_cluster({"n1": 2}), tmpl, pod("p", namespace="ml", templates={"gpu": "one-gpu"})],
                            kubernetes_version="1.34")
    (claim_134,) = on_134.claims.values()
    assert claim_134["metadata"]["ownerReferences"][0]["blockOwnerDeletion"] is True
    assert generated["spec"] == tmpl["spec"]["spec"]
    assert the_pod["status"]["resourceClaimStatuses"] == [{"name": "gpu", "resourceClaimName": meta["name"]}]


def test_long_generate_name_is_cut_proportionally():
    pod_name = "p" * 40
    claim_name = "c" * 30
    # len("<40>-<30>-") = 72 > 57: pod part 40*57//72 = 31, claim part 30*57//72 = 23, no trailing dash
    assert claim_generate_name(pod_name, claim_name) == "p" * 31 + "-" + "c" * 23
    assert claim_generate_name("short", "gpu") == "short-gpu-"
    cluster = ManagedCluster([*gpu_cluster({"n1": 1}), template("t"), pod(pod_name, templates={claim_name: "t"})])
    (key,) = list(cluster.claims)
    name = key.split("/")[1]
    assert name.startswith("p" * 31 + "-" + "c" * 23) and len(name) == 55 + 5


def test_existing_orphan_claim_is_reused():
    owner = pod("p", templates={"gpu": "t"})
    owner["metadata"]["uid"] = "uid-p"
    orphan = claim("p-gpu-abcde")
    orphan["metadata"]["annotations"] = {POD_CLAIM_NAME_ANNOTATION: "gpu"}
    orphan["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "uid-p",
                                              "controller": True}]
    cluster = ManagedCluster([*gpu_cluster({"n1": 1}), template("t"), orphan, owner])
    assert list(cluster.claims) == ["default/p-gpu-abcde"]
    assert cluster.pods["default/p"]["status"]["resourceClaimStatuses"][0]["resourceClaimName"] == "p-gpu-abcde"


def test_missing_template_makes_the_pod_unschedulable_with_a_reason():
    from gpudra.scheduler import Scheduler

    cluster = ManagedCluster([*gpu_cluster({"n1": 1}), pod("p", templates={"gpu": "nope"})])
    (result,) = Scheduler(cluster).run()
    assert not result.scheduled
    assert 'resourceclaimtemplate "nope" not found' in result.message()


@pytest.mark.parametrize("replicas", [-1, "two"])
def test_bad_replicas_is_reported_not_raised(replicas):
    bad = workload("StatefulSet", "s")
    bad["spec"]["replicas"] = replicas
    cluster = cluster_with(bad)
    assert not cluster.pods and any("replicas" in problem for problem in cluster.problems)


def test_pods_of_a_dump_count_as_replicas():
    deployment = workload("Deployment", "web", 3)
    deployment["spec"]["selector"] = {"matchLabels": {"app": "web"}}
    running = []
    for name in ("web-abc-11111", "web-abc-22222"):
        live = pod(name, namespace="ml", nodeName="n1")
        live["metadata"]["labels"] = {"app": "web"}
        live["metadata"]["ownerReferences"] = [{"kind": "ReplicaSet", "name": "web-abc", "uid": "rs", "controller": True}]
        running.append(live)
    other = pod("unrelated", namespace="ml")
    other["metadata"]["labels"] = {"app": "web"}
    other["metadata"]["ownerReferences"] = [{"kind": "Job", "name": "j", "uid": "j", "controller": True}]
    cluster = cluster_with(deployment, *running, other)
    created = [key for key in cluster.pods if key.startswith("ml/web-") and key not in
               ("ml/web-abc-11111", "ml/web-abc-22222")]
    assert len(created) == 1  # 3 replicas wanted, 2 already run; the Job's pod does not count


def test_statefulset_creates_only_missing_ordinals():
    live = pod("train-0", namespace="ml", nodeName="n1")
    live["metadata"]["labels"] = {"app": "train"}
    cluster = cluster_with(workload("StatefulSet", "train", 3), live)
    assert sorted(cluster.pods) == ["ml/train-0", "ml/train-1", "ml/train-2"]
    assert cluster.pods["ml/train-0"]["spec"]["nodeName"] == "n1"


def test_daemonset_runs_one_pinned_pod_per_eligible_node():
    from tests.support.builders import node
    from tests.support.scheduling import placed, schedule

    taint = {"key": "dedicated", "value": "infra", "effect": "NoSchedule"}
    nodes = [node("g1", labels={"gpu": "true"}), node("g2", labels={"gpu": "true"}, unschedulable=True),
             node("g3", labels={"gpu": "true"}, taints=[taint]), node("cpu")]
    daemon = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "dcgm", "namespace": "ml"},
              "spec": {"template": {"metadata": {"labels": {"app": "dcgm"}},
                                    "spec": pod_spec(cpu="100m", nodeSelector={"gpu": "true"})}}}
    cluster, _, results = schedule([*nodes, daemon])
    assert sorted(placed(results).values()) == ["g1", "g2"]  # g3's taint is not tolerated; cpu lacks the label
    for key, node_name in placed(results).items():
        assert re.fullmatch(rf"ml/dcgm-{SUFFIX}", key)
        terms = cluster.pods[key]["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        assert terms == [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node_name]}]}]
    again = ManagedCluster([*nodes, daemon, *[cluster.pods[k] for k in placed(results)]])
    assert len(again.pods) == 2  # a dump with the daemon pods running creates no more


@pytest.mark.parametrize("kind,field", [("Deployment", "replicas"), ("StatefulSet", "replicas"),
                                        ("Job", "parallelism")])
def test_a_huge_workload_is_refused_with_a_message_instead_of_exhausting_memory(kind, field):
    # int32 in apps/v1 and batch/v1: the API server accepts 2,000,000,000 and its controllers create pods
    # gradually; expanding them at once is refused, as is what no int32 holds
    accepted_by_api_server = workload(kind, "huge", **{field: 2_000_000_000})
    cluster = cluster_with(accepted_by_api_server, workload("Deployment", "small", 2))
    assert not any(key.startswith("ml/huge") for key in cluster.pods)
    assert [key for key in cluster.pods if key.startswith("ml/small")] != []
    assert any("would create 2000000000 pods" in p and "150000" in p for p in cluster.problems)
    too_big = cluster_with(workload(kind, "huge", **{field: 2**31}))
    assert any(f"spec.{field} must be at most 2147483647" in p for p in too_big.problems)


def test_the_pod_budget_counts_the_pods_already_in_the_input():
    from gpudra.controllers.workloads import WorkloadError, expand_workload

    assert len(expand_workload(workload("Deployment", "a", 3), lambda key: False, room=3)) == 3
    with pytest.raises(WorkloadError, match="would create 4 pods, more than the 3 left"):
        expand_workload(workload("Deployment", "a", 4), lambda key: False, room=3)


def test_the_pod_budget_is_shared_by_every_workload_of_one_input(monkeypatch):
    import gpudra.controllers.manager as cluster_module

    monkeypatch.setattr(cluster_module, "MAX_EXPANDED_PODS", 5)
    cluster = cluster_with(workload("Deployment", "a", 3), workload("Deployment", "b", 3))
    assert sum(key.startswith("ml/a-") for key in cluster.pods) == 3
    assert not any(key.startswith("ml/b-") for key in cluster.pods)
    assert any("Deployment ml/b: would create 3 pods, more than the 2 left" in p for p in cluster.problems)


def test_daemonset_pod_names_are_drawn_again_only_on_an_exact_collision(monkeypatch):
    """The DaemonSet controller creates its pods with generateName `<daemonset>-`; the API server keeps the name it
    draws unless it conflicts with an existing object's name (then AlreadyExists; with the RetryGenerateName
    feature gate, beta and on since 1.31, the server draws again itself: kubernetes/website, feature gate
    `RetryGenerateName`; the same rule as `test_generate_name_draws_again_when_the_name_is_taken` in
    tests/cluster/test_cluster_store.py). A name that merely sorts before or after another pod's is free."""
    from gpudra.api import objectmeta as workloads_module
    from tests.support.builders import node

    draws = {"n1": ["ccccc"], "n2": ["bbbbb"], "n3": ["ddddd"], "n4": ["ccccc", "fffff"], "n5": ["ggggg", "hhhhh"]}

    def drawn(base: str, attempt: int, namespace: str, uid: str, node_name: str) -> str:
        assert attempt < len(draws[node_name]), f"{node_name}: {base}{draws[node_name][-1]} drawn again"
        return draws[node_name][attempt]

    monkeypatch.setattr(workloads_module, "random_suffix", drawn)
    daemon = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "dcgm", "namespace": "ml"},
              "spec": {"template": {"metadata": {"labels": {"app": "dcgm"}}, "spec": pod_spec(cpu="100m")}}}
    other = pod("dcgm-ggggg", namespace="ml")  # not the daemon's: no app=dcgm label, but its name is taken
    cluster = ManagedCluster([*(node(f"n{i}") for i in range(1, 6)), other, daemon])
    # the first draw that no pod already has, per node in name order (n4's collides with n1's pod, n5's with
    # the other pod)
    taken, expected = {"dcgm-ggggg"}, set()
    for suffixes in draws.values():
        name = next(f"dcgm-{s}" for s in suffixes if f"dcgm-{s}" not in taken)
        taken.add(name)
        expected.add(f"ml/{name}")
    assert set(cluster.pods) - {"ml/dcgm-ggggg"} == expected
