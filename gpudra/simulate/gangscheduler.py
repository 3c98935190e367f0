"""The NVL72 gang replay's placements decided by gpudra's scheduler (the reference) instead of a rule of the
replay's own (`gangs.py`), for the policies kube-scheduler itself has (`SCHEDULER_POLICIES`).

The racks become what kube-scheduler would see: each tray a Node (labelled with its hostname and NVLink clique,
CPU and memory in proportion to its GPUs) with a ResourceSlice of its GPUs (cliqueID attribute as NVIDIA's driver
publishes it). A job is a PodGroup (scheduling.k8s.io/v1alpha2, Kubernetes 1.36) with the gang policy, minCount =
its pods, so GangScheduling binds all of them or none; each pod asks one ResourceClaim of `gpus_per_pod` GPUs from
a template, CPU and memory in the same proportion (so NodeResourcesFit's LeastAllocated scores the tray with the
most free GPUs highest), and a required pod anti-affinity on `kubernetes.io/hostname` against its own job's pods:
one pod per tray, as the replay lays a gang out. Per policy:
- `clique-blind`: nothing more; kube-scheduler's default profile places each pod.
- `clique-aware`: the PodGroup's `schedulingConstraints.topology` names `nvidia.com/gpu.clique`, and
  TopologyAwareWorkloadScheduling (1.36 alpha, gpudra.scheduler.workloadplacement) tries the gang in every clique
  and keeps the best (the fullest clique that holds it: NodeResourcesFit's MostAllocated placement score).
- `clique-affinity`: a required pod affinity on `nvidia.com/gpu.clique` to its own job's pods (what users configure
  today, dra-driver-nvidia-gpu issue 804): the first pod goes where the default scoring puts it, the others follow.
Equal scores are broken by the replay's seeded generator, drawn as kube-scheduler's selectHost draws
(gpudra.scheduler.ties). Each job is scheduled as it arrives (one queue pass over its pods); a job that is not
bound is taken off again, as a gang that misses its quorum waits in the queue.
"""

from __future__ import annotations

import random
from typing import Any

from gpudra.api.objectmeta import name_of
from gpudra.controllers import ManagedCluster
from gpudra.scheduler.scheduler import Scheduler

from .gangs import SCHEDULER_POLICIES
from .nvl72 import GangJob, Topology

NAMESPACE = "gangs"
CLIQUE_LABEL = "nvidia.com/gpu.clique"
HOSTNAME_LABEL = "kubernetes.io/hostname"
JOB_LABEL = "gpudra.dev/gang-job"
DEVICE_CLASS = "gpu.nvidia.com"
RELEASE = "1.36"
GATES = "default,+GenericWorkload,+GangScheduling,+TopologyAwareWorkloadScheduling"


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


def _pod_group(job: GangJob, policy: str) -> dict[str, Any]:
    spec: dict[str, Any] = {"schedulingPolicy": {"gang": {"minCount": job.pods}}}
    if policy == "clique-aware":
        spec["schedulingConstraints"] = {"topology": [{"key": CLIQUE_LABEL}]}
    return {"apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "PodGroup",
            "metadata": {"name": job.name, "namespace": NAMESPACE}, "spec": spec}


def _pod(job: GangJob, index: int, policy: str) -> dict[str, Any]:
    gpus = job.gpus_per_pod
    own_job = {"matchLabels": {JOB_LABEL: job.name}}
    affinity: dict[str, Any] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": own_job, "topologyKey": HOSTNAME_LABEL}]}}  # one pod per tray
    if policy == "clique-affinity":
        affinity["podAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": own_job, "topologyKey": CLIQUE_LABEL}]}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{job.name}-{index}", "namespace": NAMESPACE, "labels": {JOB_LABEL: job.name}},
            "spec": {"schedulingGroup": {"podGroupName": job.name},
                     "containers": [{"name": "worker", "image": "w", "resources": {
                         "requests": {"cpu": str(gpus), "memory": f"{gpus}Gi"}, "claims": [{"name": "gpus"}]}}],
                     "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": f"gpus-{gpus}"}],
                     "affinity": affinity}}


class SchedulerPlacer:
    """Places gangs through a ManagedCluster and gpudra's Scheduler; keeps the placed gangs' pods bound until
    `release`."""

    def __init__(self, topology: Topology, policy: str = "clique-blind"):
        if policy not in SCHEDULER_POLICIES:
            raise ValueError(f"policy {policy!r}: the scheduler places only {', '.join(SCHEDULER_POLICIES)}")
        self.policy = policy
        self.cluster = ManagedCluster(_rack_objects(topology), features=GATES, kubernetes_version=RELEASE)
        # no wall-clock Filter timeout (a replay must not depend on the machine), no preemption (one priority)
        self.scheduler = Scheduler(self.cluster, filter_timeout=None, preempt=False)
        self.tray_index = {tray.name: i for i, tray in enumerate(topology.trays)}
        self.templates: set[int] = set()
        self.pods: dict[str, list[str]] = {}  # placed job -> its pod keys

    def place(self, job: GangJob, rng: random.Random | None = None) -> tuple[int, ...] | None:
        """The trays (one per pod, in pod order) the scheduler bound the gang's pods to, or None (nothing bound).
        `rng`: equal scores drawn from it (None: to the first node name)."""
        self.scheduler.ties = rng if rng is not None else "name"
        objects = [] if job.gpus_per_pod in self.templates else [_template(job.gpus_per_pod)]
        self.templates.add(job.gpus_per_pod)
        pods = [_pod(job, i, self.policy) for i in range(job.pods)]
        self.cluster.apply(objects + [_pod_group(job, self.policy)] + pods)
        keys = [f"{NAMESPACE}/{pod['metadata']['name']}" for pod in pods]
        nodes = {result.pod: result.node for result in self.scheduler.run()}
        if any(nodes.get(key) is None for key in keys):  # the gang missed its quorum: nothing of it is bound
            self._delete(job.name, keys)
            return None
        self.pods[job.name] = keys
        return tuple(self.tray_index[str(nodes[key])] for key in keys)

    def release(self, job_name: str) -> None:
        self._delete(job_name, self.pods.pop(job_name))

    def _delete(self, job_name: str, keys: list[str]) -> None:
        for key in keys:
            self.cluster.delete_pod(key)  # its claim from the template goes with it (resourceclaim controller)
        self.cluster.other_objects = [obj for obj in self.cluster.other_objects
                                      if not (obj.get("kind") == "PodGroup" and name_of(obj) == job_name)]
