"""The scheduler on inputs that a `kubectl get -o yaml` dump or a hand-written manifest
can plausibly contain."""

from __future__ import annotations

from tests.support.builders import claim, gpu_cluster, pod
from tests.support.scheduling import devices_of, placed, schedule

from gpudra.scheduler.claimstatus import DELETE_PROTECTION_FINALIZER


def _allocated_claim(name: str, node: str, device_names: list[str], consumer: dict) -> dict:
    reserved = claim(name, count=len(device_names))
    reserved["metadata"]["finalizers"] = [DELETE_PROTECTION_FINALIZER]
    reserved["status"] = {
        "allocation": {
            "devices": {"results": [{"request": "gpu", "driver": "gpu.example.com", "pool": node, "device": d}
                                    for d in device_names]},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": [node]}]}]},
        },
        "reservedFor": [{"resource": "pods", "name": consumer["metadata"]["name"],
                         "uid": consumer["metadata"]["uid"]}],
    }
    return reserved


def test_a_finished_pod_in_the_input_releases_its_claims_as_the_resourceclaim_controller_does():
    finished = pod("done", claims={"gpu": "old"})
    finished["metadata"]["uid"] = "uid-done"
    finished["spec"]["nodeName"] = "a"
    finished["status"] = {"phase": "Succeeded"}
    objects = [*gpu_cluster({"a": 1}), finished, _allocated_claim("old", "a", ["gpu-0"], finished),
               claim("new"), pod("next", claims={"gpu": "new"})]
    cluster, _, results = schedule(objects)
    assert placed(results) == {"default/next": "a"}
    assert devices_of(cluster, "default/new") == ["a/gpu-0"]
    assert "allocation" not in (cluster.claims["default/old"].get("status") or {})


def _shared_device_cluster() -> list[dict]:
    device = {"name": "gpu-0", "allowMultipleAllocations": True,
              "capacity": {"memory": {"value": "80Gi", "requestPolicy": {"default": "10Gi"}}}}
    objects = [*gpu_cluster({"a": 1})]
    for obj in objects:
        if obj["kind"] == "ResourceSlice":
            obj["spec"]["devices"] = [device]
    return objects


def test_schedule_output_with_shared_devices_is_the_same_on_every_run():
    # `gpudra schedule` promises "same input, same output"; shareIDs must not be random
    import copy

    from gpudra.scheduler import Scheduler

    from gpudra.controllers import ManagedCluster
    from gpudra.scheduler.render import to_yaml

    objects = [*_shared_device_cluster(), claim("one"), claim("two"),
               pod("p1", claims={"gpu": "one"}), pod("p2", claims={"gpu": "two"})]
    outputs = []
    for _ in range(2):
        cluster = ManagedCluster(copy.deepcopy(objects))
        Scheduler(cluster).run()
        outputs.append(to_yaml(cluster))
    assert "shareID" in outputs[0]
    assert outputs[0] == outputs[1]
    share_ids = [r["shareID"] for key in ("default/one", "default/two")
                 for r in cluster.claims[key]["status"]["allocation"]["devices"]["results"]]
    assert len(set(share_ids)) == 2


def test_a_dump_with_a_deployment_and_its_replicaset_creates_the_missing_replica_once():
    # `kubectl get deploy,rs,pods -o yaml`: the Deployment owns the ReplicaSet that owns the pods; only
    # spec.replicas - running pods are missing, not that many per controller object
    template = {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "1"}}}]}}
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment",
                  "metadata": {"name": "web", "namespace": "default", "uid": "d-1"},
                  "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}}, "template": template}}
    rs_labels = {"app": "web", "pod-template-hash": "6d4b75cb6d"}
    replicaset = {"apiVersion": "apps/v1", "kind": "ReplicaSet",
                  "metadata": {"name": "web-6d4b75cb6d", "namespace": "default", "uid": "rs-1",
                               "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web",
                                                    "uid": "d-1", "controller": True}]},
                  "spec": {"replicas": 3, "selector": {"matchLabels": rs_labels},
                           "template": {**template, "metadata": {"labels": rs_labels}}}}
    running = []
    for name, node_name in (("web-6d4b75cb6d-aaaaa", "a"), ("web-6d4b75cb6d-bbbbb", "b")):
        running.append({"apiVersion": "v1", "kind": "Pod",
                        "metadata": {"name": name, "namespace": "default", "uid": name, "labels": rs_labels,
                                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                                          "name": "web-6d4b75cb6d", "uid": "rs-1",
                                                          "controller": True}]},
                        "spec": {"nodeName": node_name, **template["spec"]}, "status": {"phase": "Running"}})
    cluster, _, results = schedule([*gpu_cluster({"a": 1, "b": 1}), deployment, replicaset, *running])
    assert len(cluster.pods) == 3
    assert len(results) == 1


def test_a_job_with_finished_pods_only_creates_the_completions_still_missing():
    # job controller: active pods wanted = min(parallelism, completions - succeeded)
    labels = {"batch.kubernetes.io/controller-uid": "j-1", "job-name": "j"}
    container = {"name": "c", "image": "x", "resources": {"requests": {"cpu": "1"}}}
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": "default", "uid": "j-1"},
           "spec": {"completions": 3, "parallelism": 3, "selector": {"matchLabels": labels},
                    "template": {"metadata": {"labels": labels},
                                 "spec": {"restartPolicy": "Never", "containers": [container]}}}}
    finished = [{"apiVersion": "v1", "kind": "Pod",
                 "metadata": {"name": name, "namespace": "default", "uid": name, "labels": labels,
                              "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "j",
                                                   "uid": "j-1", "controller": True}]},
                 "spec": {"nodeName": "a", "restartPolicy": "Never", "containers": [container]},
                 "status": {"phase": "Succeeded"}} for name in ("j-aaaaa", "j-bbbbb")]
    _, _, results = schedule([*gpu_cluster({"a": 1}), job, *finished])
    assert len(results) == 1


def test_queue_order_of_a_dump_follows_creation_time_not_the_alphabetical_listing():
    # `kubectl get pods -o yaml` lists pods by name; kube-scheduler's queue orders equal priorities by the
    # time they were added, i.e. creation. The older pod gets the only GPU.
    newer = pod("a-newer", claims={"gpu": "c-newer"})
    newer["metadata"]["creationTimestamp"] = "2026-11-29T10:05:00Z"
    older = pod("b-older", claims={"gpu": "c-older"})
    older["metadata"]["creationTimestamp"] = "2026-11-29T10:00:00Z"
    fresh = pod("c-not-created-yet", claims={"gpu": "c-fresh"})  # the what-if pod comes last
    objects = [*gpu_cluster({"a": 1}), claim("c-newer"), claim("c-older"), claim("c-fresh"), fresh, newer, older]
    _, _, results = schedule(objects)
    assert placed(results) == {"default/b-older": "a", "default/a-newer": None, "default/c-not-created-yet": None}


def test_pods_for_another_scheduler_are_left_alone():
    # kube-scheduler only takes pods whose spec.schedulerName is empty or default-scheduler
    volcano = pod("batch", claims={"gpu": "c-batch"})
    volcano["spec"]["schedulerName"] = "volcano"
    default = pod("web", claims={"gpu": "c-web"})
    default["spec"]["schedulerName"] = "default-scheduler"
    cluster, _, results = schedule([*gpu_cluster({"a": 1}), claim("c-batch"), claim("c-web"), volcano, default])
    assert placed(results) == {"default/web": "a"}
    assert "nodeName" not in cluster.pods["default/batch"]["spec"]


def test_schedule_cli_warns_about_pods_left_to_another_scheduler(tmp_path):
    import yaml
    from click.testing import CliRunner

    from gpudra.cli.schedule import command

    volcano = pod("batch", claims={"gpu": "c-batch"})
    volcano["spec"]["schedulerName"] = "volcano"
    path = tmp_path / "in.yaml"
    path.write_text(yaml.safe_dump_all([*gpu_cluster({"a": 1}), claim("c-batch"), volcano]))
    result = CliRunner().invoke(command, ["-f", str(path), "--no-validate"], catch_exceptions=False)
    assert result.exit_code == 0
    assert "pod default/batch is for scheduler 'volcano'; not scheduled" in result.stderr


def test_a_pod_being_deleted_is_not_scheduled():
    # kube-scheduler skips pods with a deletionTimestamp (skipPodSchedule)
    deleting = pod("going", claims={"gpu": "c-going"})
    deleting["metadata"]["deletionTimestamp"] = "2026-11-29T10:00:00Z"
    _, _, results = schedule([*gpu_cluster({"a": 1}), claim("c-going"), claim("c-next"), deleting,
                              pod("next", claims={"gpu": "c-next"})])
    assert placed(results) == {"default/next": "a"}


def test_scheduling_the_output_again_creates_no_second_set_of_job_pods():
    # a Job as users write it: no selector, no template labels (the API server would add both); the pods
    # gpudra created carry its uid in their controller reference and must count as its replicas next time
    import copy

    import yaml

    from gpudra.scheduler import Scheduler

    from gpudra.controllers import ManagedCluster
    from gpudra.scheduler.render import to_yaml

    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": "default"},
           "spec": {"parallelism": 2, "template": {"spec": {
               "restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]}}}}
    cluster = ManagedCluster(copy.deepcopy([*gpu_cluster({"a": 1}), job]))
    Scheduler(cluster).run()
    assert len(cluster.pods) == 2
    again = ManagedCluster([obj for obj in yaml.safe_load_all(to_yaml(cluster)) if obj])
    assert sorted(again.pods) == sorted(cluster.pods)


def test_an_indexed_job_in_a_dump_creates_the_indexes_that_are_neither_running_nor_done():
    labels = {"batch.kubernetes.io/controller-uid": "j-1", "job-name": "j"}
    container = {"name": "c", "image": "x", "resources": {"requests": {"cpu": "1"}}}
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": "default", "uid": "j-1"},
           "spec": {"completions": 4, "parallelism": 2, "completionMode": "Indexed",
                    "selector": {"matchLabels": labels},
                    "template": {"metadata": {"labels": labels},
                                 "spec": {"restartPolicy": "Never", "containers": [container]}}}}

    def job_pod(index: int, phase: str) -> dict:
        return {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": f"j-{index}-abcde", "namespace": "default", "uid": f"p-{index}",
                             "labels": {**labels, "batch.kubernetes.io/job-completion-index": str(index)},
                             "annotations": {"batch.kubernetes.io/job-completion-index": str(index)},
                             "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "j",
                                                  "uid": "j-1", "controller": True}]},
                "spec": {"nodeName": "a", "restartPolicy": "Never", "containers": [container]},
                "status": {"phase": phase}}

    cluster, _, results = schedule([*gpu_cluster({"a": 1}), job, job_pod(0, "Succeeded"), job_pod(1, "Running")])
    new = [cluster.pods[key] for key in results]
    assert [p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"] for p in new] == ["2"]
