"""The cluster as the scheduler sees it: nodes, pods, claims, templates, classes and slices, with the bookkeeping
that the API server, the resourceclaim controller and the kubelet would do around a scheduling decision.

`ClusterState.apply(objects)` loads manifests (expanding workloads and creating template claims as the resourceclaim
controller does); `bind`, `end_pod` and `delete_pod` are the state transitions (gpudra.scheduler.transitions, a
mixin of `ClusterState`; what a claim's status says: gpudra.scheduler.claimstatus). Per-node `epoch` counters change
whenever anything that could change a filter verdict for that node changes (pods bound to it, devices allocated in
a pool it can see), which lets the scheduler cache per-node results safely.
"""

from __future__ import annotations

import copy
from collections import Counter
from typing import Any, Iterable

from gpudra.copying import copy_object

from . import resources as res
from gpudra.api.objectmeta import WORKLOAD_KINDS, is_terminal, ensure_uid_of, key_of, metadata, name_of, namespace_of
from .claimstatus import allocated_device_ids, claim_allocation, reserved_for
from .interpodaffinity import has_pod_affinity
from .topology import DeviceId
from .transitions import NodeUsage, Transitions

DEFAULT_SCHEDULER_NAME = "default-scheduler"  # pods naming another scheduler are not kube-scheduler's
DEFAULT_MAX_PODS = 110  # the kubelet's default when a node does not report `pods`


class ClusterState(Transitions):
    """The cluster as the scheduler sees it (see the module's docstring)."""

    def __init__(self, objects: Iterable[dict[str, Any]] = (), features: Any = None,
                 kubernetes_version: str | None = None):
        """`kubernetes_version`: the release whose default feature gates apply (gpudra.versions; None: 1.36);
        `features`: the allocator's gates (gpudra.allocator.Features or token text over those defaults)."""
        from gpudra.allocator.features import Features
        from gpudra.versions import default_gates, parse_version

        release = parse_version(kubernetes_version)
        self.kubernetes_version = release
        self.features = Features.parse(features, release)
        # DRAExtendedResource: whether DeviceClasses serve extended resources (pod resources) through DRA
        chosen = self.features.gate_enabled("DRAExtendedResource")
        self.extended_resources_via_dra = default_gates(release)["DRAExtendedResource"] if chosen is None else chosen
        self.nodes: dict[str, dict[str, Any]] = {}
        self.pods: dict[str, dict[str, Any]] = {}  # insertion order = creation order
        self.claims: dict[str, dict[str, Any]] = {}
        self.templates: dict[str, dict[str, Any]] = {}
        self.device_classes: dict[str, dict[str, Any]] = {}
        self.slices: list[dict[str, Any]] = []
        self.priority_classes: dict[str, dict[str, Any]] = {}
        self.device_taint_rules: dict[str, dict[str, Any]] = {}
        self.workloads: list[dict[str, Any]] = []
        # pods waiting at PreBind for their devices' binding conditions (gpudra.scheduler.bindingconditions): pod
        # key -> the node they are assumed on (counted there, claims reserved, status.nominatedNodeName), not bound
        self.binding_waits: dict[str, str] = {}
        # pods nominated to a node by preemption, counted there while the rest of a queue pass is filtered
        # (gpudra.scheduler.preemption.hold_nominated): pod key -> node
        self.nominated_holds: dict[str, str] = {}
        self.other_objects: list[dict[str, Any]] = []
        self.problems: list[str] = []
        self.usage: dict[str, NodeUsage] = {}
        # priorities of the pods counted on nodes (how many each): whether any pod could be preempted at all
        self.bound_priorities: Counter[int] = Counter()
        self._bound_priority: dict[str, int] = {}  # pod key -> the priority it was counted with
        self.epoch: dict[str, int] = {}
        # bumped only when devices in a pool the node sees are allocated or released (a subset of `epoch`):
        # DRA verdicts depend on nothing else of the node's state
        self.device_epoch: dict[str, int] = {}
        self.changes: list[str] = []  # every epoch bump, in order: lets per-shape caches catch up cheaply
        self.allocated_devices: Counter[DeviceId] = Counter()
        # bumped when nodes, slices or classes change: every cached verdict is void
        self.generation = 0
        # keys of the pods with a pod (anti-)affinity section (InterPodAffinity reads only these of the pods that
        # it does not match against its own terms): kept on add/delete, recounted by `sync` after in-place edits
        self.pods_with_pod_affinity: dict[str, None] = {}
        self._allocator: Any = None
        self._reset_topology()
        self._allocatable: dict[str, dict[str, int] | None] = {}
        self._claims_by_owner: dict[str, list[dict[str, Any]]] = {}
        self._node_names: list[str] | None = None
        self._slice_positions: dict[str, int] = {}
        if objects:
            self.apply(objects)

    # ----- loading ------------------------------------------------------------------------------
    def apply(self, objects: Iterable[dict[str, Any]]) -> None:
        """Add objects (later ones replace earlier ones with the same key) as the API server stores them: no
        controller runs here (workloads stay unexpanded, no claim is created from a template).
        `gpudra.controllers.ManagedCluster` is this state with kube-controller-manager's controllers run on it."""
        for obj in objects:
            if isinstance(obj, dict):
                self.store_object(obj)
        self.sync()

    def store_object(self, obj: dict[str, Any]) -> None:
        """One object into its collection (a workload only into `workloads`, any other kind into
        `other_objects`)."""
        kind = obj.get("kind")
        if kind == "Pod":
            self.add_pod(obj)
        elif kind == "Node":
            self.nodes[name_of(obj)] = obj
            self._topology_changed()
        elif kind == "ResourceClaim":
            metadata(obj).setdefault("namespace", "default")
            ensure_uid_of(obj)
            self.claims[key_of(obj)] = obj
        elif kind == "ResourceClaimTemplate":
            metadata(obj).setdefault("namespace", "default")
            self.templates[key_of(obj)] = obj
        elif kind == "DeviceClass":
            self.device_classes[name_of(obj)] = obj
            self._topology_changed()
        elif kind == "ResourceSlice":
            position = self._slice_positions.get(name_of(obj))
            if position is not None:
                self.slices[position] = obj
            else:
                self._slice_positions[name_of(obj)] = len(self.slices)
                self.slices.append(obj)
            self._topology_changed()
        elif kind == "PriorityClass":
            self.priority_classes[name_of(obj)] = obj
        elif kind == "DeviceTaintRule":
            self.device_taint_rules[name_of(obj)] = obj
            self._topology_changed()
        elif kind in WORKLOAD_KINDS:
            metadata(obj).setdefault("namespace", "default")
            self.workloads.append(obj)
        else:
            self.other_objects.append(obj)

    def add_pod(self, pod: dict[str, Any]) -> None:
        metadata(pod).setdefault("namespace", "default")
        ensure_uid_of(pod)
        pod.setdefault("spec", {})
        self.pods[key_of(pod)] = pod
        if has_pod_affinity(pod):
            self.pods_with_pod_affinity[key_of(pod)] = None

    def _topology_changed(self) -> None:
        self.generation += 1
        self._pool_nodes = None
        self._node_devices = None
        self._device_groups = None
        self._node_groups = None
        self._node_names = None
        self._allocatable.clear()
        self._allocator = None

    def sync(self) -> None:
        """What the controllers do when objects appear: template claims, reservations of bound pods, usage."""
        self.allocated_devices = Counter()
        for claim in self.claims.values():
            self.allocated_devices.update(allocated_device_ids(claim))
        self._device_groups = None  # group use is recounted from the allocated devices
        self.usage = {name: NodeUsage() for name in self.nodes}
        self.bound_priorities, self._bound_priority = Counter(), {}
        self._claims_by_owner = {}
        for claim in self.claims.values():
            for ref in (claim.get("metadata") or {}).get("ownerReferences") or []:
                if ref.get("controller") and ref.get("uid"):
                    self._claims_by_owner.setdefault(ref["uid"], []).append(claim)
        for name in self.nodes:
            self.epoch.setdefault(name, 0)
        self.binding_waits = {}
        self.pods_with_pod_affinity = {key: None for key, pod in self.pods.items() if has_pod_affinity(pod)}
        for key, pod in self.pods.items():
            if is_terminal(pod):
                self._release(key, pod)  # the resourceclaim controller unreserves claims of finished pods
                continue
            self.claims_for_pod(pod)
            node = (pod.get("spec") or {}).get("nodeName")
            waiting_on = None if node else self._binding_wait_node(pod)
            if waiting_on is not None:
                self.binding_waits[key] = waiting_on
                self._account(key, pod, waiting_on)
            if node:
                self._account(key, pod, node)
                for claim_key in self.pod_claim_keys(pod):
                    bound_claim = self.claims.get(claim_key)
                    if bound_claim is None:
                        continue
                    if claim_allocation(bound_claim) is None:
                        self.problems.append(f"pod {key} is bound to {node} but claim {claim_key} is not allocated")
                    else:
                        self._reserve(bound_claim, pod)
        self._allocator = None
        for name in self.nodes:
            self._bump(name, devices=True)

    def _binding_wait_node(self, pod: dict[str, Any]) -> str | None:
        """The node an unbound pod waits on at PreBind, read back from the objects: its status.nominatedNodeName
        (NominatedNodeNameForExpectation, 1.35+: set when the binding cycle begins) with a claim of the pod
        allocated with binding conditions and reserved for it (PreBind reserves before it waits; a failed wait
        unreserves). None when the gates are off or the pod does not wait."""
        from .bindingconditions import has_binding_conditions

        nominated = (pod.get("status") or {}).get("nominatedNodeName")
        if not nominated or nominated not in self.nodes or not self.features.device_binding_and_status:
            return None
        uid = (pod.get("metadata") or {}).get("uid")
        for claim_key in self.pod_claim_keys(pod):
            claim = self.claims.get(claim_key)
            if (claim is not None and has_binding_conditions(claim)
                    and any(entry.get("uid") == uid for entry in reserved_for(claim))):
                return str(nominated)
        return None

    def invalidate(self) -> None:
        """Call after editing objects in place (not through `apply`/`bind`/`end_pod`): recounts usage and
        allocations and voids every cached verdict."""
        from gpudra.allocator import forget_cached_objects  # the allocator shares parsed slices by identity

        forget_cached_objects()
        self._topology_changed()
        self.sync()

    def claims_for_pod(self, pod: dict[str, Any]) -> None:
        """Where the resourceclaim controller creates a pod's claims from its templates: nothing happens here (no
        controller runs in the bare state); `gpudra.controllers.ManagedCluster` runs it."""

    # ----- queries ------------------------------------------------------------------------------
    def node_names(self) -> list[str]:
        """Node names in the order the scheduler walks them (sorted; do not modify the list)."""
        if self._node_names is None:
            self._node_names = sorted(self.nodes)
        return self._node_names

    def pod_priority(self, pod: dict[str, Any]) -> int:
        spec = pod.get("spec") or {}
        priority = spec.get("priority")
        if isinstance(priority, int):
            return priority
        class_name = spec.get("priorityClassName")
        if class_name and class_name in self.priority_classes:
            return int(self.priority_classes[class_name].get("value") or 0)
        for priority_class in self.priority_classes.values():
            if priority_class.get("globalDefault"):
                return int(priority_class.get("value") or 0)
        return 0

    def pending_pods(self) -> list[str]:
        """Unbound, non-terminal pods in queue order: higher priority first, then creationTimestamp, then input order."""
        order = {key: index for index, key in enumerate(self.pods)}
        pending = [
            key
            for key, pod in self.pods.items()
            if not (pod.get("spec") or {}).get("nodeName") and not is_terminal(pod)
            and (pod.get("spec") or {}).get("schedulerName") in (None, "", DEFAULT_SCHEDULER_NAME)
            and not (pod.get("metadata") or {}).get("deletionTimestamp")  # skipPodSchedule: being deleted
        ]
        # equal priorities queue by creation (a dump lists pods by name); pods without a creationTimestamp are
        # the what-if's own, created last
        def created(key: str) -> tuple[int, str]:
            timestamp = (self.pods[key].get("metadata") or {}).get("creationTimestamp")
            return (0, str(timestamp)) if timestamp else (1, "")

        return sorted(pending, key=lambda key: (-self.pod_priority(self.pods[key]), created(key), order[key]))

    def pod_claim_refs(self, pod: dict[str, Any]) -> list[tuple[str, str | None, str | None]]:
        """(pod claim name, claim key or None, problem) for every `spec.resourceClaims` entry. A None key with
        no problem means "no claim needed" (a template claim status without a name)."""
        namespace = namespace_of(pod)
        statuses = {
            entry.get("name"): entry for entry in (pod.get("status") or {}).get("resourceClaimStatuses") or []
        }
        refs: list[tuple[str, str | None, str | None]] = []
        for pod_claim in (pod.get("spec") or {}).get("resourceClaims") or []:
            name = pod_claim.get("name", "")
            if pod_claim.get("resourceClaimName"):
                refs.append((name, f"{namespace}/{pod_claim['resourceClaimName']}", None))
            elif pod_claim.get("resourceClaimTemplateName"):
                if name in statuses:
                    claim_name = statuses[name].get("resourceClaimName")
                    refs.append((name, f"{namespace}/{claim_name}" if claim_name else None, None))
                elif f"{namespace}/{pod_claim['resourceClaimTemplateName']}" not in self.templates:
                    refs.append(
                        (
                            name,
                            None,
                            f'resourceclaimtemplate "{pod_claim["resourceClaimTemplateName"]}" not found '
                            f"(claim {name!r} of pod {key_of(pod)} cannot be created)",
                        )
                    )
                else:
                    refs.append((name, None, f'pod "{key_of(pod)}": ResourceClaim not created yet'))
            else:
                refs.append((name, None, f"pod claim {name!r} names neither a claim nor a template"))
        return refs

    def pod_claim_keys(self, pod: dict[str, Any]) -> list[str]:
        keys = [key for _, key, _ in self.pod_claim_refs(pod) if key]
        extended = ((pod.get("status") or {}).get("extendedResourceClaimStatus") or {}).get("resourceClaimName")
        if extended:
            keys.append(f"{namespace_of(pod)}/{extended}")
        return keys

    def allocatable(self, node_name: str) -> dict[str, int] | None:
        """Node allocatable; None when the node reports neither allocatable nor capacity (treated as
        unlimited, so that hand-written Node objects with only labels still take pods)."""
        if node_name not in self._allocatable:
            node = self.nodes[node_name]
            status = node.get("status") or {}
            if not status.get("allocatable") and not status.get("capacity"):
                self._allocatable[node_name] = None
            else:
                values = res.node_allocatable(node)
                values.setdefault(res.PODS, DEFAULT_MAX_PODS)
                self._allocatable[node_name] = values
        return self._allocatable[node_name]

    def allocator(self) -> Any:
        """One allocator for the whole run, kept up to date as claims are allocated and deallocated."""
        if self._allocator is None:
            from .allocation import make_allocator

            allocated = [claim for claim in self.claims.values() if claim_allocation(claim) is not None]
            self._allocator = make_allocator(self.device_classes, self.slices, allocated, self.features,
                                             device_taint_rules=list(self.device_taint_rules.values()))
        return self._allocator

    def fork(self, pods: Iterable[str] = (), claims: Iterable[str] = ()) -> "ClusterState":
        """A copy for a what-if that goes through the transitions (delete_pod, deallocate_claim, bind): its own
        containers and accounting, the objects shared except the `pods` and `claims` (keys) it will change, which
        are copied. Nodes, slices, classes and what is derived from them alone (pools, device groups) stay shared:
        no transition writes them. Far cheaper than building a cluster again from its objects."""
        twin = copy.copy(self)
        twin.pods = dict(self.pods)
        twin.claims = dict(self.claims)
        twin.pods_with_pod_affinity = dict(self.pods_with_pod_affinity)
        for key in pods:
            if key in twin.pods:
                twin.pods[key] = copy_object(twin.pods[key])
        for key in claims:
            if key in twin.claims:
                twin.claims[key] = copy_object(twin.claims[key])
        twin.usage = {name: NodeUsage(dict(use.requested), use.non_zero_cpu, use.non_zero_memory, list(use.pods))
                      for name, use in self.usage.items()}
        twin.epoch, twin.device_epoch = dict(self.epoch), dict(self.device_epoch)
        twin.bound_priorities, twin._bound_priority = Counter(self.bound_priorities), dict(self._bound_priority)
        twin.changes = list(self.changes)
        twin.allocated_devices = Counter(self.allocated_devices)
        twin.group_use = Counter(self.group_use)
        twin.problems = list(self.problems)
        twin.binding_waits = dict(self.binding_waits)
        replaced = {id(self.claims[key]): twin.claims[key] for key in claims if key in self.claims}
        twin._claims_by_owner = {uid: [replaced.get(id(claim), claim) for claim in owned]
                                 for uid, owned in self._claims_by_owner.items()}
        twin._allocator = None  # built again from the fork's claims when first asked for
        return twin
