"""The cluster as the scheduler sees it: nodes, pods, claims, templates, classes and slices, with the bookkeeping
that the API server, the resourceclaim controller and the kubelet would do around a scheduling decision.

`ClusterState.apply(objects)` loads manifests (expanding workloads and creating template claims as the resourceclaim
controller does); `bind`, `end_pod` and `delete_pod` are the state transitions. Per-node `epoch` counters change
whenever anything that could change a filter verdict for that node changes (pods bound to it, devices allocated in
a pool it can see), which lets the scheduler cache per-node results safely.
"""

from __future__ import annotations

import copy
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from gpudra.copying import copy_object

from gpudra.errors import GpudraError

from . import resources as res
from gpudra.api.objectmeta import WORKLOAD_KINDS, is_terminal, ensure_uid, ensure_uid_of, key_of, metadata, name_of, namespace_of, owned_by
from . import groupclaims
from .interpodaffinity import has_pod_affinity
from .topology import DeviceId, Topology

DELETE_PROTECTION_FINALIZER = "resource.kubernetes.io/delete-protection"
MAX_RESERVED_FOR = 256
DEFAULT_SCHEDULER_NAME = "default-scheduler"  # pods naming another scheduler are not kube-scheduler's
DEFAULT_MAX_PODS = 110  # the kubelet's default when a node does not report `pods`



class ClusterError(GpudraError, ValueError):
    pass


@dataclass
class NodeUsage:
    requested: dict[str, int] = field(default_factory=dict)
    non_zero_cpu: int = 0
    non_zero_memory: int = 0
    pods: list[str] = field(default_factory=list)


def claim_allocation(claim: dict[str, Any]) -> dict[str, Any] | None:
    return (claim.get("status") or {}).get("allocation")


def reserved_for(claim: dict[str, Any]) -> list[dict[str, Any]]:
    return list((claim.get("status") or {}).get("reservedFor") or [])


def allocated_device_ids(claim: dict[str, Any]) -> list[DeviceId]:
    allocation = claim_allocation(claim) or {}
    return [
        (result.get("driver", ""), result.get("pool", ""), result.get("device", ""))
        for result in (allocation.get("devices") or {}).get("results") or []
        if not result.get("adminAccess")
    ]


class ClusterState(Topology):
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

    # ----- transitions --------------------------------------------------------------------------
    def _account(self, key: str, pod: dict[str, Any], node: str, sign: int = 1,
                 totals: tuple[dict[str, int], dict[str, int]] | None = None) -> None:
        """`totals`: `res.pod_request_totals(pod)` where the caller has just read them."""
        usage = self.usage.setdefault(node, NodeUsage())
        try:
            requests, non_zero = totals if totals is not None else res.pod_request_totals(pod)
        except res.ResourceError as exc:
            if sign > 0:
                self.problems.append(f"pod {key}: {exc}; its requests are not counted")
            requests, non_zero = {}, {}
        for name, value in requests.items():
            usage.requested[name] = usage.requested.get(name, 0) + sign * value
        usage.non_zero_cpu += sign * non_zero.get(res.CPU, 0)
        usage.non_zero_memory += sign * non_zero.get(res.MEMORY, 0)
        if sign > 0:
            usage.pods.append(key)
            priority = self._bound_priority[key] = self.pod_priority(pod)
            self.bound_priorities[priority] += 1
        elif key in usage.pods:
            usage.pods.remove(key)
            counted = self._bound_priority.pop(key, None)
            if counted is not None:
                self.bound_priorities[counted] -= 1
                if not self.bound_priorities[counted]:
                    del self.bound_priorities[counted]
        if node in self.epoch:
            self._bump(node)

    def _reserve(self, claim: dict[str, Any], pod: dict[str, Any]) -> None:
        """Reserve the claim for the pod, or for its PodGroup where it is the group's claim (groupclaims)."""
        status = claim.setdefault("status", {})
        entries = status.setdefault("reservedFor", [])
        ensure_uid(pod)
        entry = groupclaims.consumer(self, pod, claim)
        if not any(existing.get("uid") == entry["uid"] for existing in entries):
            entries.append(entry)

    def _touch_pools(self, device_ids: Iterable[DeviceId]) -> None:
        pool_nodes = self.pool_nodes()
        for pool in {(driver, pool) for driver, pool, _ in device_ids}:
            for node in pool_nodes.get(pool, ()):
                self._bump(node, devices=True)

    def _bump(self, node: str, devices: bool = False) -> None:
        self.epoch[node] += 1
        self.changes.append(node)
        if devices:
            self.device_epoch[node] = self.device_epoch.get(node, 0) + 1

    def allocate_claim(self, claim: dict[str, Any], allocation: dict[str, Any]) -> None:
        if claim_allocation(claim) is not None:
            raise ClusterError(f"claim {key_of(claim)} is already allocated")
        finalizers = metadata(claim).setdefault("finalizers", [])
        if DELETE_PROTECTION_FINALIZER not in finalizers:
            finalizers.append(DELETE_PROTECTION_FINALIZER)
        claim.setdefault("status", {})["allocation"] = copy_object(allocation)
        devices = allocated_device_ids(claim)
        self.allocated_devices.update(devices)
        self._count_groups(devices, 1)
        if self._allocator is not None:
            self._allocator.add_allocated_claim(claim)
        self._touch_pools(devices)

    def deallocate_claim(self, claim: dict[str, Any]) -> None:
        if claim_allocation(claim) is None:
            return
        devices = allocated_device_ids(claim)
        if self._allocator is not None:
            self._allocator.remove_allocated_claim(copy_object(claim))
        self.allocated_devices.subtract(devices)
        self.allocated_devices = +self.allocated_devices
        self._count_groups(devices, -1)
        status = claim["status"]
        status.pop("allocation", None)
        status.pop("reservedFor", None)
        status.pop("devices", None)
        if not status:
            claim.pop("status")
        finalizers = (claim.get("metadata") or {}).get("finalizers") or []
        if DELETE_PROTECTION_FINALIZER in finalizers:
            finalizers.remove(DELETE_PROTECTION_FINALIZER)
            if not finalizers:
                claim["metadata"].pop("finalizers")
        self._touch_pools(devices)

    def bind(
        self,
        pod_key: str,
        node: str,
        allocations: Sequence[tuple[str, dict[str, Any]]] = (),
        extended_claim: dict[str, Any] | None = None,
        request_totals: tuple[dict[str, int], dict[str, int]] | None = None,
    ) -> list[str]:
        """Write the scheduler's decision: allocate claims, reserve every claim of the pod, set nodeName. Returns
        the pod's claim keys (`pod_claim_keys`). `request_totals`: the pod's `resources.pod_request_totals`, where
        the caller read them in this cycle."""
        claim_keys = self._reserve_on(pod_key, node, allocations, extended_claim)
        self._set_node(self.pods[pod_key], node)
        self._account(pod_key, self.pods[pod_key], node, totals=request_totals)
        return claim_keys

    def _reserve_on(self, pod_key: str, node: str, allocations: Sequence[tuple[str, dict[str, Any]]],
                    extended_claim: dict[str, Any] | None) -> list[str]:
        pod = self.pods[pod_key]
        if extended_claim is not None:
            self.claims[key_of(extended_claim)] = extended_claim
        for claim_key, allocation in allocations:
            self.allocate_claim(self.claims[claim_key], allocation)
        claim_keys = self.pod_claim_keys(pod)
        for claim_key in claim_keys:
            claim = self.claims.get(claim_key)
            if claim is not None:
                self._reserve(claim, pod)
        return claim_keys

    @staticmethod
    def _set_node(pod: dict[str, Any], node: str) -> None:
        pod["spec"]["nodeName"] = node
        status = pod.setdefault("status", {})
        status.setdefault("phase", "Pending")
        status["conditions"] = [
            c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"
        ] + [{"type": "PodScheduled", "status": "True"}]

    def assume(
        self,
        pod_key: str,
        node: str,
        allocations: Sequence[tuple[str, dict[str, Any]]] = (),
        extended_claim: dict[str, Any] | None = None,
        request_totals: tuple[dict[str, int], dict[str, int]] | None = None,
        allocated_at: str = "",
    ) -> list[str]:
        """The pod goes to PreBind and waits there for its devices' binding conditions: its claims are allocated
        (the ones with binding conditions stamped `allocationTimestamp` = `allocated_at`, as PreBind's bindClaim
        stamps them) and reserved, it counts on `node` (the scheduler cache's assumed pod) and names it in
        status.nominatedNodeName, but it is not bound. `finish_binding` binds it, `abandon_binding` gives up."""
        from .bindingconditions import has_binding_conditions

        claim_keys = self._reserve_on(pod_key, node, allocations, extended_claim)
        for claim_key in claim_keys:
            claim = self.claims.get(claim_key)
            allocation = claim_allocation(claim) if claim is not None else None
            if claim is not None and allocation is not None and has_binding_conditions(claim) and allocated_at:
                allocation.setdefault("allocationTimestamp", allocated_at)
        pod = self.pods[pod_key]
        pod.setdefault("status", {}).setdefault("phase", "Pending")
        pod["status"]["nominatedNodeName"] = node
        self.binding_waits[pod_key] = node
        self._account(pod_key, pod, node, totals=request_totals)
        return claim_keys

    def hold_nominated(self, pod_key: str, node: str) -> None:
        """Count an unbound pod on the node it is nominated to (its requests and pod slot, no claim) until
        `release_nominated`."""
        if pod_key in self.nominated_holds or node not in self.nodes:
            return
        self._account(pod_key, self.pods[pod_key], node)
        self.nominated_holds[pod_key] = node

    def release_nominated(self) -> None:
        for pod_key, node in self.nominated_holds.items():
            if pod_key in self.pods:
                self._account(pod_key, self.pods[pod_key], node, sign=-1)
        self.nominated_holds.clear()

    def finish_binding(self, pod_key: str) -> str:
        """Every binding condition is True: the waiting pod is bound to its node (nominatedNodeName cleared, as
        kube-apiserver does on binding with ClearingNominatedNodeNameAfterBinding, 1.35+). Returns the node."""
        node = self.binding_waits.pop(pod_key)
        pod = self.pods[pod_key]
        (pod.get("status") or {}).pop("nominatedNodeName", None)
        self._set_node(pod, node)
        return node

    def abandon_binding(self, pod_key: str) -> None:
        """PreBind failed (a failure condition, or the binding timeout): Unreserve takes the pod off its node and
        out of its claims' reservedFor, and clears its nominatedNodeName. The claims stay allocated: the pod's next
        attempt finds them not available on any node and PostFilter deallocates them (dynamicresources.go)."""
        pod = self.pods[pod_key]
        self._unaccount(pod_key, pod)
        uid = ensure_uid(pod)
        for claim_key in self.pod_claim_keys(pod):
            claim = self.claims.get(claim_key)
            if claim is not None and reserved_for(claim):
                _unreserve(claim, uid)
        (pod.get("status") or {}).pop("nominatedNodeName", None)

    def unbind(self, pod_key: str, allocated: Iterable[str] = (), extended_claim: str | None = None) -> None:
        """Undo `bind` of a pod whose binding never reached the API server (a gang's pods rejected at Permit: the
        scheduler's Unreserve): its node usage, its reservations, the allocations `bind` made (`allocated`) and
        the extended-resource claim it created are removed (and the nominatedNodeName of a pod that waited at
        PreBind)."""
        pod = self.pods[pod_key]
        if pod_key in self.binding_waits:
            (pod.get("status") or {}).pop("nominatedNodeName", None)
        self._unaccount(pod_key, pod)
        pod["spec"].pop("nodeName", None)  # before the group counts its scheduled pods
        uid = ensure_uid(pod)
        for claim_key in self.pod_claim_keys(pod):
            claim = self.claims.get(claim_key)
            if claim is not None and reserved_for(claim):
                _unreserve(claim, uid)
                if groupclaims.unreserve_for_group(self, pod, claim) and not reserved_for(claim):
                    self.deallocate_claim(claim)  # PostFilter's next step: allocated, reserved for nobody
        for claim_key in allocated:
            claim = self.claims.get(claim_key)
            if claim is not None and not reserved_for(claim):
                self.deallocate_claim(claim)
        if extended_claim is not None:
            self.claims.pop(extended_claim, None)

    def mark_unschedulable(self, pod_key: str, message: str, reason: str = "Unschedulable") -> None:
        status = self.pods[pod_key].setdefault("status", {})
        status.setdefault("phase", "Pending")
        status["conditions"] = [
            c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"
        ] + [{"type": "PodScheduled", "status": "False", "reason": reason, "message": message}]

    def end_pod(self, pod_key: str, phase: str = "Succeeded") -> None:
        """The pod finished: release its node resources and claims (the resourceclaim controller's cleanup)."""
        pod = self.pods[pod_key]
        if is_terminal(pod):
            return
        self._release(pod_key, pod)
        pod.setdefault("status", {})["phase"] = phase

    def delete_pod(self, pod_key: str) -> None:
        pod = self.pods[pod_key]
        if not is_terminal(pod):
            self._release(pod_key, pod)
        del self.pods[pod_key]
        self.pods_with_pod_affinity.pop(pod_key, None)

    def _unaccount(self, pod_key: str, pod: dict[str, Any]) -> None:
        """Take the pod's requests off its node's usage, if they are on it (a pod waiting at PreBind counts on the
        node it waits for)."""
        node = (pod.get("spec") or {}).get("nodeName") or self.binding_waits.pop(pod_key, None)
        if node and pod_key in self.usage.get(node, NodeUsage()).pods:
            self._account(pod_key, pod, node, sign=-1)

    def _release(self, pod_key: str, pod: dict[str, Any]) -> None:
        self._unaccount(pod_key, pod)
        uid = ensure_uid(pod)
        for claim_key in self.pod_claim_keys(pod):
            claim = self.claims.get(claim_key)
            if claim is None:
                continue
            released, remaining = _unreserve(claim, uid)
            if released and not remaining:
                finalizers = (claim.get("metadata") or {}).get("finalizers") or []
                if DELETE_PROTECTION_FINALIZER in finalizers:
                    self.deallocate_claim(claim)
            if not remaining and owned_by(claim, pod):
                if claim_allocation(claim) is not None:
                    self.deallocate_claim(claim)
                del self.claims[claim_key]


def _unreserve(claim: dict[str, Any], uid: str) -> tuple[bool, list[dict[str, Any]]]:
    """Take the pod `uid` out of the claim's reservedFor (the field goes when no one is left); (whether it was
    there, who remains)."""
    entries = reserved_for(claim)
    remaining = [entry for entry in entries if entry.get("uid") != uid]
    if len(remaining) != len(entries):
        if remaining:
            claim["status"]["reservedFor"] = remaining
        else:
            claim["status"].pop("reservedFor", None)
    return len(remaining) != len(entries), remaining
