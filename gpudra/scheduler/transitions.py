"""The state transitions around a scheduling decision, as a mixin of `ClusterState` (gpudra.scheduler.state):
what kube-scheduler's cache does with an assumed pod (bind, assume, finish or abandon the binding, Unreserve), the
claim allocation and reservation the scheduler writes, and the cleanup the resourceclaim controller does when a pod
ends or goes. Every transition keeps the per-node accounting (`usage`, the priorities counted on nodes) and bumps
the node epochs that the scheduler's verdict caches key on.

Apart from the loading and the queries of `ClusterState` so that the writes to the cluster view sit in one place
(kube-scheduler keeps them apart likewise: its cache's AssumePod, ForgetPod, AddPod and RemovePod in
pkg/scheduler/backend/cache/cache.go, v1.36.0; the claim cleanup in pkg/controller/resourceclaim/controller.go).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable, Sequence, cast

from gpudra.api.objectmeta import ensure_uid, is_terminal, key_of, metadata, owned_by
from gpudra.copying import copy_object
from gpudra.errors import GpudraError

from . import groupclaims
from . import resources as res
from .claimstatus import DELETE_PROTECTION_FINALIZER, allocated_device_ids, claim_allocation, reserved_for, unreserve
from .topology import DeviceId, Topology

if TYPE_CHECKING:
    from .state import ClusterState


class ClusterError(GpudraError, ValueError):
    """A transition the cluster view refuses (a claim allocated twice)."""


@dataclass
class NodeUsage:
    """What is counted on one node: the requests of its pods, their scoring totals, the pods (bound or assumed)."""

    requested: dict[str, int] = field(default_factory=dict)
    non_zero_cpu: int = 0
    non_zero_memory: int = 0
    pods: list[str] = field(default_factory=list)


class Transitions(Topology):
    """The transitions of `ClusterState` (see the module's docstring); the state they change is declared here
    and set up by `ClusterState.__init__`."""

    pods: dict[str, dict[str, Any]]
    claims: dict[str, dict[str, Any]]
    usage: dict[str, NodeUsage]
    epoch: dict[str, int]
    device_epoch: dict[str, int]
    changes: list[str]
    problems: list[str]
    bound_priorities: Counter[int]
    _bound_priority: dict[str, int]
    binding_waits: dict[str, str]
    nominated_holds: dict[str, str]
    pods_with_pod_affinity: dict[str, None]
    _allocator: Any

    if TYPE_CHECKING:  # the queries of ClusterState
        def pod_priority(self, pod: dict[str, Any]) -> int: ...

        def pod_claim_keys(self, pod: dict[str, Any]) -> list[str]: ...

    def _cluster(self) -> ClusterState:
        """This state as the ClusterState it always is (groupclaims reads the whole cluster view)."""
        return cast("ClusterState", self)

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
        entry = groupclaims.consumer(self._cluster(), pod, claim)
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
                unreserve(claim, uid)
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
                unreserve(claim, uid)
                if groupclaims.unreserve_for_group(self._cluster(), pod, claim) and not reserved_for(claim):
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
            released, remaining = unreserve(claim, uid)
            if released and not remaining:
                finalizers = (claim.get("metadata") or {}).get("finalizers") or []
                if DELETE_PROTECTION_FINALIZER in finalizers:
                    self.deallocate_claim(claim)
            if not remaining and owned_by(claim, pod):
                if claim_allocation(claim) is not None:
                    self.deallocate_claim(claim)
                del self.claims[claim_key]
