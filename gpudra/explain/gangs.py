"""Why a gang (gpudra.scheduler.gangs) was not bound, in one line with its numbers.

kube-scheduler's GangScheduling plugin (kubernetes v1.35.0 / v1.36.0
pkg/scheduler/framework/plugins/gangscheduling/gangscheduling.go) rejects a group at Permit when fewer than minCount
of its pods were placed; its message says only that it waited. The line here adds what a user acts on: how many pods
the group needs, how many the queue pass could place, and the room one pod of it finds. Where the pods must share
one NVLink clique (their ComputeDomain's IMEX channel works only within one clique: NVIDIA dra-driver-nvidia-gpu
#377, #804; a claim all the group's pods share with `matchAttribute: gpu.nvidia.com/cliqueID`) the room is counted
per clique, and the largest one is what the group can get. (A required pod affinity on the clique label would be a
third reason, but gpudra's scheduler does not model InterPodAffinity, so its counts would not honour it.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpudra.computedomain.controller import CLIQUE_NODE_LABEL, DOMAIN_LABEL
from gpudra.computedomain.fit import pod_domain
from gpudra.vocabulary import DRIVER_NAME, NVLINK_CLIQUE_ATTRIBUTE

CLIQUE_MATCH_ATTRIBUTE = f"{DRIVER_NAME}/{NVLINK_CLIQUE_ATTRIBUTE}"


@dataclass(frozen=True)
class GangShortfall:
    group: str  # namespace/name of the pod group (1.35: namespace/workload/pod group[/replica])
    min_count: int
    members: int
    placed: int  # pods of the group the queue pass placed before Permit rejected them all
    devices: str  # what one pod asks for ("8 free gpu.nvidia.com devices"), "" when it asks for none
    fitting: tuple[str, ...]  # nodes one pod of the group fits on, with the group's pods unbound
    one_clique: str | None = None  # why the pods must share a clique, None when they need not
    cliques: tuple[tuple[str, int], ...] = ()  # (clique, nodes free in it), largest first
    topology_key: str | None = None  # the PodGroup's topology constraint (gpudra.scheduler.workloadplacement)
    domains: tuple[tuple[str, int], ...] = ()  # (domain tried, pods of the group it could hold), in trial order

    def line(self) -> str:
        if self.topology_key is not None:
            return self._placement_line(self.topology_key)
        if self.one_clique is not None:
            head = (f"group {self.group} needs {self.min_count} pods on one NVLink clique ({self.one_clique}); "
                    f"{self.placed} could be placed; ")
            if not self.cliques:
                return head + "no node it may use is in an NVLink clique with room for one of its pods"
            clique, free = self.cliques[0]
            return head + (f"the largest clique has {free} node{'s' if free != 1 else ''} free "
                           f"(clique {clique}{', of ' + str(len(self.cliques)) + ' cliques' if len(self.cliques) > 1 else ''})")
        shown = ", ".join(self.fitting[:8]) + (" …" if len(self.fitting) > 8 else "")
        have = f"{len(self.fitting)} node{'s have' if len(self.fitting) != 1 else ' has'} them"
        return (f"group {self.group} needs {self.min_count} of its {self.members} pods placed at once; "
                f"{self.placed} could be placed: each needs a node with {self.devices or 'room for it'}, and "
                + have + (f" ({shown})" if self.fitting else ""))


    def _placement_line(self, key: str) -> str:
        head = f"group {self.group} needs {self.min_count} of its {self.members} pods placed in one {key} domain; "
        if not self.domains:
            return head + f"no node it may use has the label {key}, so there is no domain to try"
        tried = ", ".join(f"{key}={domain} ({placed} of {self.members} pods placed)"
                          for domain, placed in self.domains[:8]) + (" …" if len(self.domains) > 8 else "")
        return head + f"0/{len(self.domains)} placements are available: " + tried


def shortfall(scheduler: Any, pod_key: str, gang: Any) -> GangShortfall:
    """The gang of `pod_key` after a queue pass that rejected it at Permit (its pods unbound)."""
    cluster = scheduler.cluster
    pod = cluster.pods[pod_key]
    info = scheduler.pod_info(pod_key)
    fitting = tuple(node for node in cluster.node_names() if not scheduler.filter_node(info, node).result.reasons)
    placed = _placed(scheduler, gang)
    group = gang.key.rstrip("/")
    why = _one_clique(cluster, pod, gang)
    cliques: tuple[tuple[str, int], ...] = ()
    if why is not None:
        domain = pod_domain(pod, _objects(cluster))
        uid = ((domain or {}).get("metadata") or {}).get("uid")
        of_node = node_cliques(cluster)
        free: dict[str, int] = {}
        for node in fitting:
            other = (((cluster.nodes[node].get("metadata") or {}).get("labels") or {}).get(DOMAIN_LABEL))
            if node in of_node and not (domain is not None and other and other != uid):
                free[of_node[node]] = free.get(of_node[node], 0) + 1
        cliques = tuple(sorted(free.items(), key=lambda item: (-item[1], item[0])))
    return GangShortfall(group, gang.min_count, len(gang.members), placed, _devices_wanted(cluster, pod), fitting,
                         why, cliques, getattr(gang, "topology_key", None), _domains(scheduler, gang))


def _placed(scheduler: Any, gang: Any) -> int:
    """How many of the gang the pass placed: the Permit rejection records them (gpudra.scheduler.scheduler)."""
    for key in gang.members:
        result = scheduler.results.get(key)
        for reason in (result.prefilter if result is not None else []):
            if isinstance(reason.details, dict) and "placed" in reason.details:
                return len(reason.details["placed"])
    return 0


def _domains(scheduler: Any, gang: Any) -> tuple[tuple[str, int], ...]:
    """The placements the pass tried for a gang with a topology constraint, and how many pods each held
    (gpudra.scheduler.workloadplacement records them with each pod's rejection)."""
    for key in gang.members:
        result = scheduler.results.get(key)
        for reason in (result.prefilter if result is not None else []):
            if isinstance(reason.details, dict) and "placements" in reason.details:
                return tuple((str(domain), int(count)) for domain, count in reason.details["placements"])
    return ()


def _objects(cluster: Any) -> list[dict[str, Any]]:
    return list(getattr(cluster, "other_objects", []))


def node_cliques(cluster: Any) -> dict[str, str]:
    """node -> its NVLink clique: GPU feature discovery's label, else the cliqueID its GPUs publish."""
    found: dict[str, str] = {}
    for slice_ in cluster.slices:
        spec = slice_.get("spec") or {}
        node = spec.get("nodeName")
        if not node or spec.get("driver") != DRIVER_NAME:
            continue
        for device in spec.get("devices") or []:
            attributes = (device or {}).get("attributes") or {}
            value = attributes.get(NVLINK_CLIQUE_ATTRIBUTE) or attributes.get(CLIQUE_MATCH_ATTRIBUTE) or {}
            if isinstance(value, dict) and isinstance(value.get("string"), str) and value["string"]:
                found.setdefault(node, value["string"])
    for name, node in cluster.nodes.items():
        label = ((node.get("metadata") or {}).get("labels") or {}).get(CLIQUE_NODE_LABEL)
        if isinstance(label, str) and label:
            found[name] = label
    return found


def _one_clique(cluster: Any, pod: dict[str, Any], gang: Any) -> str | None:
    """Why the gang's pods must share one clique, or None."""
    domain = pod_domain(pod, _objects(cluster))
    if domain is not None:
        meta = domain.get("metadata") or {}
        return f"its pods share ComputeDomain {meta.get('namespace') or 'default'}/{meta.get('name')}"
    members = [cluster.pods[key] for key in gang.members if key in cluster.pods]
    shared = set(cluster.pod_claim_keys(pod))
    for member in members:
        shared &= set(cluster.pod_claim_keys(member))
    for key in sorted(shared):
        devices = ((cluster.claims.get(key) or {}).get("spec") or {}).get("devices") or {}
        if any((c or {}).get("matchAttribute") == CLIQUE_MATCH_ATTRIBUTE for c in devices.get("constraints") or []):
            return f"claim {key}, shared by the group, has matchAttribute {CLIQUE_MATCH_ATTRIBUTE}"
    return None


def _devices_wanted(cluster: Any, pod: dict[str, Any]) -> str:
    """'8 free gpu.nvidia.com devices': what the pod's claims request (ExactCount requests), by class."""
    wanted: dict[str, int] = {}
    for key in cluster.pod_claim_keys(pod):
        devices = ((cluster.claims.get(key) or {}).get("spec") or {}).get("devices") or {}
        for request in devices.get("requests") or []:
            exactly = (request or {}).get("exactly") or {}
            if exactly.get("allocationMode", "ExactCount") == "ExactCount" and exactly.get("deviceClassName"):
                name = exactly["deviceClassName"]
                wanted[name] = wanted.get(name, 0) + int(exactly.get("count") or 1)
    return ", ".join(f"{count} free {name} device{'s' if count != 1 else ''}" for name, count in wanted.items())
