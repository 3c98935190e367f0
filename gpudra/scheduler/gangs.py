"""Gang scheduling (KEP-4671): the pods of a pod group whose policy is `gang` are bound all together or not at all.

As kube-scheduler's GangScheduling plugin (kubernetes v1.35.0 and v1.36.0
pkg/scheduler/framework/plugins/gangscheduling/gangscheduling.go) answers:
- PreEnqueue: a pod whose group object does not exist waits ("waiting for pods's pod group %q to appear in
  scheduling queue"; 1.35: "waiting for pods's workload %q …", "pod group %q doesn't exist for a workload %q"),
  and so does one of a gang with fewer than minCount pods ("waiting for minCount pods from a gang to appear in
  scheduling queue").
- Permit: a placed pod of a gang waits while fewer than minCount of its group are placed ("waiting for minCount
  pods from a gang to be scheduled"; 1.35 "… to be waiting on permit"); the pod that completes the quorum allows
  them all. A gang that never completes is rejected at the Permit timeout (5 minutes) and Unreserve frees what
  its pods held: none is bound. gpudra's queue run is one pass, so its end stands for that timeout.

1.35 joins pods by `spec.workloadRef` (Workload scheduling.k8s.io/v1alpha1 `podGroups[].policy`, a group per
workload, pod group and replica key); 1.36 by `spec.schedulingGroup.podGroupName` (PodGroup v1alpha2
`spec.schedulingPolicy`). Both need the GenericWorkload and GangScheduling gates (alpha, off by default).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpudra.api.objectmeta import name_of, namespace_of

from . import framework as fw

if TYPE_CHECKING:  # pragma: no cover
    from .scheduler import Scheduler

PERMIT_WAIT = {"1.35": "waiting for minCount pods from a gang to be waiting on permit",
               "1.36": "waiting for minCount pods from a gang to be scheduled"}
QUORUM_NOT_QUEUED = "waiting for minCount pods from a gang to appear in scheduling queue"


@dataclass(frozen=True)
class Gang:
    key: str  # namespace/group identity
    label: str  # how messages name it: pod group "pg1" (of workload "w")
    min_count: int
    members: tuple[str, ...]  # pod keys, in the cluster's creation order
    # spec.schedulingConstraints.topology[0].key of a 1.36 PodGroup while TopologyAwareWorkloadScheduling is on:
    # the gang is placed in one domain of that node label (gpudra.scheduler.workloadplacement); None: anywhere
    topology_key: str | None = None


@dataclass(frozen=True)
class GangPlan:
    gangs: dict[str, Gang]  # gang key -> gang
    member_of: dict[str, str]  # pod key -> gang key (gangs only; basic-policy groups schedule one by one)
    waiting: dict[str, str]  # pod key -> PreEnqueue message (the pod is not attempted)


def gangs_enabled(cluster: Any) -> bool:
    from gpudra.versions import gate_state

    release = cluster.kubernetes_version
    for gate in ("GenericWorkload", "GangScheduling"):
        chosen = cluster.features.gate_enabled(gate)
        if not (gate_state(gate, release).default if chosen is None else chosen):
            return False
    return release in ("1.35", "1.36")


def topology_aware(cluster: Any) -> bool:
    """TopologyAwareWorkloadScheduling (1.36 alpha; it needs GenericWorkload, which gangs_enabled checks)."""
    from gpudra.versions import gate_state

    release = cluster.kubernetes_version
    chosen = cluster.features.gate_enabled("TopologyAwareWorkloadScheduling")
    return release == "1.36" and bool(gate_state("TopologyAwareWorkloadScheduling", release).default
                                      if chosen is None else chosen)


def plan(cluster: Any) -> GangPlan:
    """Which pods form gangs, and which wait before any attempt (PreEnqueue)."""
    if not gangs_enabled(cluster):
        return GangPlan({}, {}, {})
    release = cluster.kubernetes_version
    policies = _policies(cluster.other_objects, release)
    groups: dict[str, list[str]] = {}
    labels: dict[str, str] = {}
    minimum: dict[str, int] = {}
    waiting: dict[str, str] = {}
    for pod_key, pod in cluster.pods.items():
        found = _group_of(pod, release, policies)
        if found is None:
            continue
        if isinstance(found, str):  # the group object is missing
            waiting[pod_key] = found
            continue
        key, label, min_count = found
        if min_count is None:
            continue  # basic policy: no gang
        groups.setdefault(key, []).append(pod_key)
        labels[key], minimum[key] = label, min_count
    keys = _topology_keys(cluster.other_objects) if topology_aware(cluster) else {}
    gangs = {key: Gang(key, labels[key], minimum[key], tuple(members), keys.get(key))
             for key, members in groups.items()}
    member_of: dict[str, str] = {}
    for gang in gangs.values():
        for pod_key in gang.members:
            if len(gang.members) < gang.min_count:
                waiting[pod_key] = QUORUM_NOT_QUEUED
            else:
                member_of[pod_key] = gang.key
    return GangPlan(gangs, member_of, waiting)


# (namespace, group object name[, pod group name]): a PodGroup (1.36), or a Workload and its pod groups (1.35)
GroupKey = tuple[str | None, ...]


def _policies(objects: list[dict[str, Any]], release: str) -> dict[GroupKey, int | None]:
    """(namespace, group object name[, pod group]) -> gang minCount (None: basic policy)."""
    found: dict[GroupKey, int | None] = {}
    for obj in objects:
        kind, version = obj.get("kind"), obj.get("apiVersion")
        raw = obj.get("spec")
        spec: dict[str, Any] = raw if isinstance(raw, dict) else {}
        namespace = namespace_of(obj) or "default"
        if release == "1.36" and kind == "PodGroup" and version == "scheduling.k8s.io/v1alpha2":
            found[(namespace, name_of(obj))] = _min_count(spec.get("schedulingPolicy"))
        elif release == "1.35" and kind == "Workload" and version == "scheduling.k8s.io/v1alpha1":
            found[(namespace, name_of(obj))] = None
            for group in spec.get("podGroups") or []:
                if isinstance(group, dict):
                    found[(namespace, name_of(obj), group.get("name"))] = _min_count(group.get("policy"))
    return found


def _topology_keys(objects: list[dict[str, Any]]) -> dict[str, str]:
    """1.36 gang key (namespace/name) -> the first topology constraint's key of its PodGroup (v1alpha2), as
    kube-scheduler's TopologyPlacementGenerator reads it (kubernetes v1.36.0
    pkg/scheduler/framework/plugins/topologyaware/topology_placement.go getTopologyKey)."""
    found: dict[str, str] = {}
    for obj in objects:
        if obj.get("kind") != "PodGroup" or obj.get("apiVersion") != "scheduling.k8s.io/v1alpha2":
            continue
        constraints = (obj.get("spec") or {}).get("schedulingConstraints")
        topology = constraints.get("topology") if isinstance(constraints, dict) else None
        first = topology[0] if isinstance(topology, list) and topology else None
        if isinstance(first, dict) and isinstance(first.get("key"), str):
            found[f"{namespace_of(obj) or 'default'}/{name_of(obj)}"] = first["key"]
    return found


def _min_count(policy: Any) -> int | None:
    gang = policy.get("gang") if isinstance(policy, dict) else None
    count = gang.get("minCount") if isinstance(gang, dict) else None
    return count if isinstance(count, int) and not isinstance(count, bool) and count >= 1 else None


def _group_of(pod: dict[str, Any], release: str,
              policies: dict[GroupKey, int | None]) -> tuple[str, str, int | None] | str | None:
    """(gang key, label, minCount) of the pod's group; a PreEnqueue message when its object is missing;
    None for a pod of no group."""
    spec = pod.get("spec") or {}
    namespace = namespace_of(pod) or "default"
    if release == "1.36":
        group = spec.get("schedulingGroup")
        name = group.get("podGroupName") if isinstance(group, dict) else None
        if not isinstance(name, str):
            return None
        if (namespace, name) not in policies:
            return f'waiting for pods\'s pod group "{name}" to appear in scheduling queue'
        return f"{namespace}/{name}", f'pod group "{name}"', policies[(namespace, name)]
    ref = spec.get("workloadRef")
    if not isinstance(ref, dict) or not isinstance(ref.get("name"), str):
        return None
    workload, group_name, replica = ref["name"], ref.get("podGroup"), ref.get("podGroupReplicaKey") or ""
    if (namespace, workload) not in policies:
        return f'waiting for pods\'s workload "{workload}" to appear in scheduling queue'
    if (namespace, workload, group_name) not in policies:
        return f'pod group "{group_name}" doesn\'t exist for a workload "{workload}"'
    label = f'pod group "{group_name}" of workload "{workload}"' + (f' (replica "{replica}")' if replica else "")
    return f"{namespace}/{workload}/{group_name}/{replica}", label, policies[(namespace, workload, group_name)]


def rejection(gang: Gang, placed: dict[str, str], release: str) -> str:
    """What each pod of a gang that missed its quorum says: how many of the group could be placed, where."""
    where = ", ".join(f"{pod.split('/', 1)[-1]} on {node}" for pod, node in placed.items()) or "none"
    return (f"{PERMIT_WAIT[release]}: {gang.label} needs {gang.min_count} of its {len(gang.members)} pods placed "
            f"together (minCount {gang.min_count}); {len(placed)} could be placed ({where}), so none is bound")


def wait_before_queue(scheduler: "Scheduler", pod_key: str, message: str) -> fw.PodResult:
    """PreEnqueue rejected the pod (GangScheduling): it is not attempted."""
    result = fw.PodResult(pod_key, num_nodes=len(scheduler.cluster.node_names()))
    result.prefilter = [fw.Reason(fw.GANG_SCHEDULING, message, {}, resolvable=False)]
    scheduler.results[pod_key] = result
    scheduler.cluster.mark_unschedulable(pod_key, result.message())
    return result


def permit(scheduler: "Scheduler", gang: Gang, gang_results: list[fw.PodResult]) -> list[fw.PodResult]:
    """The gang's quorum: all its placed pods stay bound when at least minCount are, else Unreserve frees
    every one and each pod says why."""
    cluster = scheduler.cluster
    # a pod waiting at PreBind has passed Permit's quorum count: it is placed on the node it waits for
    placed = {result.pod: str(result.node if result.binding is None else result.binding.node)
              for result in gang_results if result.node is not None or result.binding is not None}
    # ScheduledPodsCount: pods of the group bound before this pass count toward the quorum too
    bound = sum(1 for key in gang.members
                if key not in placed and (cluster.pods.get(key, {}).get("spec") or {}).get("nodeName"))
    if len(placed) + bound >= gang.min_count:
        return gang_results
    message = rejection(gang, placed, cluster.kubernetes_version)
    for result in reversed(gang_results):
        if result.node is not None or result.binding is not None:
            scheduler.unreserve(result)
            result.prefilter = [fw.Reason(fw.GANG_SCHEDULING, message, {"placed": dict(placed)}, resolvable=True)]
        else:
            result.gang = message
        scheduler.results[result.pod] = result
        cluster.mark_unschedulable(result.pod, result.message())
    return gang_results
