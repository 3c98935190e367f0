"""Review findings in the scheduler: inputs that a `kubectl get -o yaml` dump or a hand-written manifest
can plausibly contain."""

from __future__ import annotations

from test_scheduler_support import claim, devices_of, gpu_cluster, placed, pod, schedule

from gpudra.scheduler.cluster import DELETE_PROTECTION_FINALIZER


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
