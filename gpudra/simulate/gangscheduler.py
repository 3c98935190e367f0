"""The NVL72 gang replay's `clique-blind` placements decided by gpudra's scheduler (the reference) instead of the
replay's own rule (`gangs._spread`).

The racks become what kube-scheduler would see: each tray a Node (labelled with its hostname and NVLink clique,
CPU and memory in proportion to its GPUs) with a ResourceSlice of its GPUs (cliqueID attribute as NVIDIA's driver
publishes it). Each pod of a gang asks one ResourceClaim of `gpus_per_pod` GPUs from a template, CPU and memory in
the same proportion (so NodeResourcesFit's LeastAllocated scores the tray with the most free GPUs highest), and a
required pod anti-affinity on `kubernetes.io/hostname` against its own job's pods: one pod per tray, as the replay
lays a gang out. The pods are scheduled one by one in order (`Scheduler.schedule_pod`, the kube policy); a gang
that does not place every pod is taken off again (all or nothing, as GangScheduling's Permit unreserves a gang
that misses its quorum; with one gang pending at a time that is the same answer). Ties go as gpudra's scheduler
breaks them (the first node name), where the replay's rule draws at random as kube-scheduler's selectHost does.
"""

from __future__ import annotations

from typing import Any

from gpudra.controllers import ManagedCluster
from gpudra.scheduler.scheduler import Scheduler

from .nvl72 import GangJob, Topology

NAMESPACE = "gangs"
CLIQUE_LABEL = "nvidia.com/gpu.clique"
HOSTNAME_LABEL = "kubernetes.io/hostname"
JOB_LABEL = "gpudra.dev/gang-job"
DEVICE_CLASS = "gpu.nvidia.com"


def _rack_objects(topology: Topology) -> list[dict[str, Any]]:
    objects: list[dict[str, Any]] = [
        {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": DEVICE_CLASS},
         "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DEVICE_CLASS}"'}}]}}]
    for tray in topology.trays:
        objects.append({"apiVersion": "v1", "kind": "Node",
                        "metadata": {"name": tray.name, "labels": {HOSTNAME_LABEL: tray.name, CLIQUE_LABEL: tray.clique}},
                        "status": {"allocatable": {"cpu": str(tray.gpus), "memory": f"{tray.gpus}Gi", "pods": "110"}}})
        objects.append({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
                        "metadata": {"name": f"{tray.name}-gpus"},
                        "spec": {"driver": DEVICE_CLASS, "nodeName": tray.name,
                                 "pool": {"name": tray.name, "generation": 1, "resourceSliceCount": 1},
                                 "devices": [{"name": f"gpu-{i}", "attributes": {"cliqueID": {"string": tray.clique}}}
                                             for i in range(tray.gpus)]}})
    return objects


def _template(gpus: int) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": f"gpus-{gpus}", "namespace": NAMESPACE},
            "spec": {"spec": {"devices": {"requests": [
                {"name": "gpus", "exactly": {"deviceClassName": DEVICE_CLASS, "count": gpus}}]}}}}


def _pod(job: GangJob, index: int) -> dict[str, Any]:
    gpus = job.gpus_per_pod
    one_per_tray = {"labelSelector": {"matchLabels": {JOB_LABEL: job.name}}, "topologyKey": HOSTNAME_LABEL}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{job.name}-{index}", "namespace": NAMESPACE, "labels": {JOB_LABEL: job.name}},
            "spec": {"containers": [{"name": "worker", "image": "w", "resources": {
                         "requests": {"cpu": str(gpus), "memory": f"{gpus}Gi"}, "claims": [{"name": "gpus"}]}}],
                     "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": f"gpus-{gpus}"}],
                     "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [one_per_tray]}}}}


class SchedulerPlacer:
    """Places gangs through a ManagedCluster and gpudra's Scheduler; keeps the placed gangs' pods bound until
    `release`."""

    def __init__(self, topology: Topology):
        self.cluster = ManagedCluster(_rack_objects(topology))
        # no wall-clock Filter timeout (a replay must not depend on the machine), no preemption (one priority)
        self.scheduler = Scheduler(self.cluster, filter_timeout=None, preempt=False)
        self.tray_index = {tray.name: i for i, tray in enumerate(topology.trays)}
        self.templates: set[int] = set()
        self.pods: dict[str, list[str]] = {}  # placed job -> its pod keys

    def place(self, job: GangJob) -> tuple[int, ...] | None:
        """The trays (one per pod, in pod order) the scheduler bound the gang's pods to, or None (nothing bound)."""
        objects = [] if job.gpus_per_pod in self.templates else [_template(job.gpus_per_pod)]
        self.templates.add(job.gpus_per_pod)
        pods = [_pod(job, i) for i in range(job.pods)]
        self.cluster.apply(objects + pods)
        keys = [f"{NAMESPACE}/{pod['metadata']['name']}" for pod in pods]
        trays: list[int] = []
        for key in keys:
            result = self.scheduler.schedule_pod(key)
            if result.node is None:
                self._delete(keys)
                return None
            trays.append(self.tray_index[result.node])
        self.pods[job.name] = keys
        return tuple(trays)

    def release(self, job_name: str) -> None:
        self._delete(self.pods.pop(job_name))

    def _delete(self, keys: list[str]) -> None:
        for key in keys:
            self.cluster.delete_pod(key)  # its claim from the template goes with it (resourceclaim controller)
