"""The control loop of a local cluster: what kube-controller-manager, kube-scheduler and the kubelet do with the
objects in the store, run until nothing changes.

One round: the ComputeDomain controller writes what each domain needs (gpudra.cluster.computedomains), the kubelet
stand-in finishes deleted pods (unprepare), the workload and resourceclaim controllers
create pods and claims (gpudra.controllers holds those rules), the disruption controller keeps PDB statuses, the
garbage collector releases claims of pods that are gone, the scheduler places pending pods (allocation,
reservedFor, binding, FailedScheduling events with kube-scheduler's messages) and preempts (victims deleted
gracefully: gpudra.cluster.preemption), then the kubelet stand-in prepares and starts newly bound pods and
stops deleted ones whose grace period is over. Every
`gpudra` command that changes the store runs it, and the cluster's control-plane process
(`gpudra.cluster.controlplane`, started by `gpudra cluster up`) runs it whenever anything else changes the store
(a driver republishing its slices, an object written by another tool) and every few seconds, as the real
components' resyncs do. One lock makes sure only one of them runs it at a time; a command holds that lock from its
first write to the end of its rounds (`holding`), so the steps it prints are the ones its own writes caused.
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Any, Callable, Iterator

from gpudra.copying import copy_object
from gpudra.scheduler import Scheduler
from gpudra.controllers import ManagedCluster
from gpudra.scheduler.claimstatus import claim_allocation, reserved_for
from gpudra.api.objectmeta import is_terminal, key_of
from gpudra.api.podgroupclaims import is_group_consumer, is_pod_group, is_reserved_for_pod, workload_claims_enabled
from gpudra.controllers.workloads import POD_CLAIM_NAME_ANNOTATION
from gpudra.scheduler.dra import EXTENDED_RESOURCE_CLAIM_ANNOTATION
from gpudra.versions import parse_version

from . import preemption
from .computedomains import reconcile_compute_domains
from gpudra.controllers.deployments import current_replica_set
from gpudra.controllers import devicetainteviction, disruption

from .deployments import reconcile_deployments
from .kubelet import (Kubelet, PodRecord, allocated_resources_status, extended_claim_name, prepared_claims,
                      resource_health_enabled, running_status, waiting_status, with_resource_health)
from .layout import ClusterDir
from .store import StoreError, created_serial, open_private

MODEL_KINDS = ("Node", "DeviceClass", "ResourceSlice", "DeviceTaintRule", "PriorityClass", "ResourceClaimTemplate",
               "ResourceClaim", "Deployment", "ReplicaSet", "StatefulSet", "Job", "DaemonSet", "Pod", "ComputeDomain",
               "Workload", "PodGroup",  # the scheduler's gangs (gpudra.scheduler.gangs)
               "PodDisruptionBudget")  # preemption's victims (gpudra.scheduler.preemption)
MAX_ROUNDS = 8
SCHEDULER = "default-scheduler"
CLAIM_CONTROLLER = "resource-claim-controller"

# (step, text): what happened, for the demo's timeline and `-v` output
Step = Callable[[str, str], None]


class _HeldLocks(threading.local):
    """The lock files this thread holds, with their depth: `holding` is re-entrant. A `threading.local` subclass
    runs `__init__` once per thread, so every thread starts with its own empty `depths`."""

    def __init__(self) -> None:
        self.depths: dict[str, int] = {}


_held = _HeldLocks()


@contextmanager
def holding(cluster: ClusterDir) -> Iterator[None]:
    """The control loop's lock (re-entrant within a thread). flock is per open file, so a second open of the same
    lock file inside one process would wait for itself: the depth is counted here instead."""
    path = cluster.controller_lock()
    depths = _held.depths
    if depths.get(path):
        depths[path] += 1
        try:
            yield
        finally:
            depths[path] -= 1
        return
    fd = open_private(path)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        depths[path] = 1
        try:
            yield
        finally:
            depths[path] = 0
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _snapshot(obj: dict[str, Any]) -> str:
    return json.dumps(obj, sort_keys=True)


def _utc_now() -> datetime:
    return datetime.now(timezone.utc)


class ControlLoop:
    def __init__(self, cluster: ClusterDir, step: Step | None = None, clock: Callable[[], datetime] = _utc_now):
        self.clock = clock  # the time NoExecute evictions are measured against (tests move it forward)
        self.cluster = cluster
        self.store = cluster.store
        self.config = cluster.load_config()
        self.step = step or (lambda kind, text: None)
        self.kubelet = Kubelet(cluster, self.config.driver_name, self.event)
        # the nodes that have a kubelet: a pod bound to any other name (spec.nodeName in a manifest) waits, as it
        # would for a node that never joins, and never names a directory
        self.nodes = {node.name for node in self.config.nodes}

    def event(self, obj: dict[str, Any], type_: str, reason: str, message: str, component: str) -> None:
        self.store.record_event(obj, type_, reason, message, component)

    def run(self) -> int:
        """Rounds until nothing changes; returns how many rounds changed something."""
        with holding(self.cluster):
            try:
                changed_rounds = 0
                for _ in range(MAX_ROUNDS):
                    if not self.round():
                        break
                    changed_rounds += 1
                return changed_rounds
            finally:
                self.kubelet.close()
                self.store.expire_events(self.config.event_ttl_s)

    # ----- one round ----------------------------------------------------------------------------
    def round(self) -> bool:
        # the ComputeDomain controller first: the templates, DaemonSets and node labels it writes are this
        # round's input
        domains_changed = reconcile_compute_domains(self.store, self.event, self.step)
        domains_changed |= reconcile_deployments(self.store, self.step)
        # creation order, as the informers' caches hand objects to the controllers and the scheduling queue
        objects = [obj for kind in MODEL_KINDS for obj in sorted(self.store.list(kind), key=created_serial)]
        replica_sets = [obj for obj in objects if obj.get("kind") == "ReplicaSet"]
        objects = [obj for obj in objects if obj.get("kind") != "Deployment"
                   or current_replica_set(obj, replica_sets) is not None]
        if self._evict_tainted_pods(objects):
            return True  # the device taint eviction controller deleted pods: the next round finishes them
        pods = [o for o in objects if o.get("kind") == "Pod"]
        self._sync_disruption_budgets(objects, pods)
        claims_before = {key_of(o): _snapshot(o) for o in objects if o.get("kind") == "ResourceClaim"}
        pods_before = {key_of(o): _snapshot(o) for o in pods}
        groups_before = {key_of(o): _snapshot(o) for o in objects if is_pod_group(o)}
        changed = domains_changed

        finished = self._finish_deleted_pods(pods)
        cluster = ManagedCluster(objects, self.config.feature_gates(), parse_version(self.config.kubernetes_version))
        for key in finished:
            if key in cluster.pods:
                cluster.delete_pod(key)  # the resourceclaim controller: unreserve, deallocate, delete owned claims
        changed |= bool(finished)
        self._collect_garbage(cluster)
        new_pods = [key for key in cluster.pods if key not in pods_before]
        if new_pods:
            # the workload controllers' pods go to the store first, named by the API server (random suffix, new
            # uid); the next round creates their claims and schedules them
            new_uids = {cluster.pods[key]["metadata"].get("uid") for key in new_pods}
            self._persist_claims(cluster, claims_before, skip_owners=new_uids)
            for key in new_pods:
                self._create_pod(cluster.pods[key])
            return True
        # the loop's clock judges binding conditions (allocationTimestamp and the binding timeout: PreBind's wait
        # goes on across rounds, as the scheduler's binding cycle polls the claims) and victims' grace periods;
        # preemption marks its victims, and the store deletes them gracefully (gpudra.cluster.preemption)
        scheduler = Scheduler(cluster, policy=self.config.policy, graceful_preemption=True, clock=self.clock)
        results = scheduler.run()

        changed |= self._persist_claims(cluster, claims_before)
        changed |= self._persist_pod_groups(cluster, groups_before)
        victims = preemption.delete_victims(self.store, cluster, results, self.clock(), self.event, self.step)
        changed |= bool(victims)
        preemption.clear_nominations_of_bound(cluster, results, self.config.kubernetes_version)
        changed |= self._persist_pods(cluster, pods_before, skip=victims)
        changed |= self._record_pod_groups(cluster, results)
        for result in results:
            pod = cluster.pods[result.pod]
            if result.scheduled:
                self.event(pod, "Normal", "Scheduled", f"Successfully assigned {result.pod} to {result.node}",
                           SCHEDULER)
                devices = [f"{r['pool']}/{r['device']}" for key in cluster.pod_claim_keys(pod)
                           for r in ((claim_allocation(cluster.claims.get(key) or {}) or {}).get("devices") or {})
                           .get("results") or []]
                self.step("scheduled", f"pod {result.pod} → node {result.node}"
                          + (f", devices {', '.join(devices)}" if devices else ""))
            elif result.binding is not None:
                self._binding_pending(pod, result.binding, pods_before.get(result.pod))
            else:
                message = result.message()
                previous = json.loads(pods_before[result.pod]) if result.pod in pods_before else {}
                old = [c.get("message") for c in (previous.get("status") or {}).get("conditions") or []
                       if c.get("type") == "PodScheduled"]
                if old != [message]:
                    self.event(pod, "Warning", "FailedScheduling", message, SCHEDULER)
                    self.step("unschedulable", f"pod {result.pod}: {message}")
        changed |= self._start_pods()
        return changed

    def _binding_pending(self, pod: dict[str, Any], wait: Any, before: str | None) -> None:
        """A pod that began waiting at PreBind this round: BindingConditionsPending, as PreBind records it."""
        previous = json.loads(before) if before else {}
        if (previous.get("status") or {}).get("nominatedNodeName") == wait.node:
            return  # it waited already
        self.event(pod, "Normal", "BindingConditionsPending",
                   f"waiting for binding conditions for device on node {wait.node}", SCHEDULER)
        self.step("binding", f"pod {key_of(pod)} waits on node {wait.node}: {wait.message()}")

    def _evict_tainted_pods(self, objects: list[dict[str, Any]] | None = None) -> bool:
        """Delete the pods whose devices carry a NoExecute taint they no longer tolerate (DisruptionTarget condition
        and a DeviceTaintManagerEviction event first, as kube-controller-manager's controller does). `objects`: this
        round's objects (default: the store's)."""
        gates, version = self.config.feature_gates(), parse_version(self.config.kubernetes_version)
        if not devicetainteviction.eviction_enabled(gates, version):
            return False
        if objects is None:
            objects = [obj for kind in MODEL_KINDS for obj in self.store.list(kind)]
        by_kind: dict[str, list[dict[str, Any]]] = {}
        for obj in objects:
            by_kind.setdefault(str(obj.get("kind")), []).append(obj)
        rules = by_kind.get("DeviceTaintRule", []) if devicetainteviction.taint_rules_enabled(gates, version) else []
        now = self.clock()
        evictions = devicetainteviction.pod_evictions(
            by_kind.get("Pod", []), by_kind.get("ResourceClaim", []), by_kind.get("ResourceSlice", []), rules,
            by_kind.get("DeviceClass", []) if rules else [],
            rules_by_allocation=devicetainteviction.rules_match_allocations(version),
            group_claims=workload_claims_enabled(version, gates))
        changed = False
        for eviction in evictions:
            if not eviction.due(now):
                continue
            namespace, name = eviction.pod.split("/", 1)
            pod = self.store.get("Pod", namespace, name)
            if pod is None or pod["metadata"].get("uid") != eviction.uid or pod["metadata"].get("deletionTimestamp"):
                continue  # gone, replaced under the same name, or already going
            self.event(pod, "Normal", devicetainteviction.EVENT_REASON, devicetainteviction.EVENT_MESSAGE,
                       devicetainteviction.CONTROLLER_NAME)
            pod["status"] = devicetainteviction.with_disruption_condition(pod.get("status") or {}, now)
            self._replace(pod)
            try:
                self.store.delete("Pod", namespace, name)
            except StoreError:
                continue
            self.step("evicted", f"pod {eviction.pod} evicted: NoExecute device taint ({'; '.join(eviction.reasons)})")
            changed = True
        return changed

    def _sync_disruption_budgets(self, objects: list[dict[str, Any]], pods: list[dict[str, Any]]) -> None:
        """The disruption controller: each PodDisruptionBudget's status, written to the store and into `objects`
        (in place) so that this round's preemption reads it."""
        budgets = [obj for obj in objects if obj.get("kind") == "PodDisruptionBudget"]
        if not budgets:
            return
        owners = {(str(o.get("kind")), o["metadata"].get("namespace") or "default", o["metadata"].get("name")): o
                  for o in objects if o.get("kind") in ("ReplicaSet", "Deployment", "StatefulSet")}
        now = self.clock().astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        for budget in budgets:
            status = disruption.pdb_status(budget, pods, owners, now)
            if status is None or status == budget.get("status"):
                continue
            budget["status"] = status
            self._replace(budget)
            self.step("disruption", f"poddisruptionbudget {key_of(budget)}: "
                                    f"{status['disruptionsAllowed']} disruption(s) allowed")

    def _finish_deleted_pods(self, pods: list[dict[str, Any]]) -> list[str]:
        """Deleted pods: stop containers and unprepare claims (kubelet), then remove them. Returns their keys."""
        finished = []
        started_claims: dict[str, set[str]] = {}
        for pod in pods:
            node = (pod.get("spec") or {}).get("nodeName")
            if node in self.nodes and not pod["metadata"].get("deletionTimestamp"):
                record = self.kubelet.record(node, pod)
                for claim in prepared_claims(record):
                    started_claims.setdefault(node, set()).add(claim["uid"])
        now = self.clock()
        for pod in pods:
            if not pod["metadata"].get("deletionTimestamp") or preemption.in_grace_period(pod, now):
                continue  # not deleted, or its containers still have their grace period (SIGTERM sent)
            node = (pod.get("spec") or {}).get("nodeName")
            if node in self.nodes:
                record = self.kubelet.record(node, pod)
                if not self.kubelet.stop_pod(pod, started_claims.get(node, set())):
                    continue  # the driver did not answer: stays Terminating, retried next time
                if record is not None:
                    claims = ", ".join(c["name"] for c in record["claims"]) or "none"
                    self.step("unprepared", f"pod {key_of(pod)} stopped on {node}: claims unprepared ({claims})")
            try:
                self.store.delete("Pod", pod["metadata"]["namespace"], pod["metadata"]["name"], graceful=False)
            except StoreError:
                pass
            finished.append(key_of(pod))
        return finished

    def _collect_garbage(self, cluster: ManagedCluster) -> None:
        """Reservations for pods that no longer exist are removed (then the claim is deallocated), and claims
        owned by such pods are deleted: the resourceclaim controller's and garbage collector's cleanup."""
        live = {pod["metadata"].get("uid") for pod in cluster.pods.values() if not is_terminal(pod)}
        groups = {(obj.get("metadata") or {}).get("uid") for obj in cluster.other_objects if is_pod_group(obj)}
        # a PodGroup's reservation lasts while the PodGroup does (syncClaim; kept untouched with the gate off)
        group_gate = cluster.workload_claims()
        for key, claim in list(cluster.claims.items()):
            entries = reserved_for(claim)
            remaining = [e for e in entries if e.get("uid") in live
                         or is_group_consumer(e) and (e.get("uid") in groups or not group_gate)]
            if len(remaining) != len(entries):
                if remaining:
                    claim["status"]["reservedFor"] = remaining
                else:
                    claim["status"].pop("reservedFor", None)
                    cluster.deallocate_claim(claim)
            owners = [r for r in (claim.get("metadata") or {}).get("ownerReferences") or []
                      if r.get("kind") in ("Pod", "PodGroup") and r.get("controller")]
            if owners and not any(r.get("uid") in live | groups for r in owners) and not reserved_for(claim):
                cluster.deallocate_claim(claim)
                del cluster.claims[key]

    def _persist_claims(self, cluster: ManagedCluster, before: dict[str, str], skip_owners: set[str] | None = None) -> bool:
        changed = False
        for key, claim in cluster.claims.items():
            owners = {r.get("uid") for r in (claim.get("metadata") or {}).get("ownerReferences") or []}
            if key not in before and skip_owners and owners & skip_owners:
                continue
            if key not in before:
                annotations = (claim.get("metadata") or {}).get("annotations") or {}
                owner_ref = next(iter(claim["metadata"].get("ownerReferences") or []), {"name": "?"})
                owner = owner_ref["name"]
                owner_kind = "PodGroup" if owner_ref.get("kind") == "PodGroup" else "pod"
                claim = self.store.create(claim)  # with the uid the store gave it
                namespace = claim["metadata"]["namespace"]
                if annotations.get(EXTENDED_RESOURCE_CLAIM_ANNOTATION) == "true":  # the scheduler's, KEP-5004
                    self.step("claim", f"claim {key} created for the extended resources of pod {namespace}/{owner}")
                    changed = True
                    continue
                self.event(claim, "Normal", "Created", f"created from template for {owner_kind} {owner} "
                           f"(pod claim {annotations.get(POD_CLAIM_NAME_ANNOTATION)})", CLAIM_CONTROLLER)
                self.step("claim", f"claim {key} created from template for {owner_kind} {namespace}/{owner}")
                changed = True
            elif _snapshot(claim) != before[key]:
                self._replace(claim)
                if claim_allocation(claim) is None and claim_allocation(json.loads(before[key])) is not None:
                    self.step("deallocated", f"claim {key} deallocated")
                changed = True
        for key in before:
            if key not in cluster.claims:
                namespace, name = key.split("/", 1)
                try:
                    self.store.delete("ResourceClaim", namespace, name, graceful=False)
                except StoreError:
                    pass
                self.step("deleted", f"claim {key} deallocated and deleted with its pod")
                changed = True
        return changed

    def _persist_pod_groups(self, cluster: ManagedCluster, before: dict[str, str]) -> bool:
        """The resourceclaim controller's `status.resourceClaimStatuses` of the PodGroups it made claims for."""
        changed = False
        for group in cluster.other_objects:
            key = key_of(group)
            if is_pod_group(group) and key in before and _snapshot(group) != before[key]:
                self._replace(group)
                changed = True
        return changed

    def _create_pod(self, pod: dict[str, Any]) -> None:
        pod = copy_object(pod)  # read from the store: already JSON
        meta = pod["metadata"]
        owner: dict[str, Any] = next(iter(meta.get("ownerReferences") or []), {})
        if owner.get("kind") != "StatefulSet":  # StatefulSet pods keep their ordinal names
            meta["generateName"] = meta.pop("name")[:-5]
        meta.pop("uid", None)
        pod.pop("status", None)
        if owner.get("kind") == "ReplicaSet":  # a Deployment's: owned by its ReplicaSet as the store holds it
            replica_set = self.store.get("ReplicaSet", meta.get("namespace"), str(owner.get("name")))
            if replica_set is not None:
                owner["uid"] = replica_set["metadata"]["uid"]
        created = self.store.create(pod)
        self.step("pod", f"pod {key_of(created)} created by {owner.get('kind', '?')} {owner.get('name', '?')}")

    def _persist_pods(self, cluster: ManagedCluster, before: dict[str, str], skip: set[str] | None = None) -> bool:
        changed = False
        for key, pod in cluster.pods.items():
            if key in before and _snapshot(pod) != before[key] and key not in (skip or ()):
                self._replace(pod)
                changed = True
        return changed

    def _record_pod_groups(self, cluster: ManagedCluster, results: list[Any]) -> bool:
        """1.36: each PodGroup gang the pass decided gets kube-scheduler's PodGroupScheduled condition."""
        from gpudra.scheduler import gangs

        from .podgroups import decisions, with_condition
        from .store import now_rfc3339

        changed = False
        for decision in decisions(gangs.plan(cluster), results):
            current = self.store.get("PodGroup", decision.namespace, decision.name)
            updated = with_condition(current, decision, now_rfc3339()) if current is not None else None
            if updated is not None:
                self._replace(updated)
                changed = True
        return changed

    def _replace(self, obj: dict[str, Any]) -> None:
        try:
            self.store.replace(obj)
        except StoreError as exc:
            if exc.status not in (404, 409):
                raise
            # changed or deleted meanwhile: the next round works from the new version

    # ----- kubelet --------------------------------------------------------------------------------
    def _start_pods(self) -> bool:
        changed = False
        claims = {key_of(c): c for c in self.store.list("ResourceClaim")}
        health_on = resource_health_enabled(self.config.feature_gates(), self.config.kubernetes_version)
        health: dict[tuple[str, str], dict[tuple[str, str], str]] = {}
        for pod in self.store.list("Pod"):
            node = (pod.get("spec") or {}).get("nodeName")
            if node not in self.nodes or pod["metadata"].get("deletionTimestamp") or is_terminal(pod):
                continue
            record = self.kubelet.record(node, pod)
            if record is None:
                pod_claims, names = self._pod_claims(pod, claims)
                if pod_claims is None:
                    continue
                if self.kubelet.start_pod(pod, pod_claims, names):
                    record = self.kubelet.record(node, pod)
                    if record is None:
                        continue  # its record is unreadable (removed meanwhile): started again next round
                    self._prepared_steps(record)
                else:
                    if (pod.get("status") or {}).get("containerStatuses") is None:
                        pod["status"] = waiting_status(pod)
                        self._replace(pod)
                    continue
            status = pod.get("status") or {}
            if status.get("phase") != "Running":
                status = running_status(pod, record)
            if health_on:
                status = with_resource_health(status, allocated_resources_status(
                    pod, record, self.kubelet.record_health(record, health), self.config.driver_name))
            if status != pod.get("status"):
                pod["status"] = status
                self._replace(pod)
                changed = True
        return changed

    def _pod_claims(self, pod: dict[str, Any], claims: dict[str, dict[str, Any]]
                    ) -> tuple[list[dict[str, Any]] | None, dict[str, str]]:
        """The pod's claims (allocated and reserved for it) and pod claim name → claim name; None if not ready."""
        namespace = pod["metadata"]["namespace"]
        statuses = {s.get("name"): s.get("resourceClaimName")
                    for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []}
        out, names = [], {}
        # the kubelet prepares a claim reserved for the pod, or for its PodGroup (IsReservedForPod, 1.36)
        group_gate = workload_claims_enabled(parse_version(self.config.kubernetes_version), self.config.feature_gates())
        for pod_claim in (pod.get("spec") or {}).get("resourceClaims") or []:
            name = pod_claim.get("resourceClaimName") or statuses.get(pod_claim.get("name"))
            if name is None:
                continue
            claim = claims.get(f"{namespace}/{name}")
            if claim is None or claim_allocation(claim) is None or not is_reserved_for_pod(pod, claim, group_gate):
                return None, {}
            names[pod_claim["name"]] = name
            if claim not in out:
                out.append(claim)
        # the claim the scheduler made for the pod's extended-resource requests (KEP-5004): prepared like any
        # other, as the kubelet's DRA manager adds it to the pod's claims (pkg/kubelet/cm/dra/manager.go)
        extended = extended_claim_name(pod)
        if extended is not None:
            claim = claims.get(f"{namespace}/{extended}")
            if claim is None or claim_allocation(claim) is None or not any(
                    e.get("uid") == pod["metadata"]["uid"] for e in reserved_for(claim)):
                return None, {}
            if claim not in out:
                out.append(claim)
        return out, names

    def _prepared_steps(self, record: PodRecord) -> None:
        for claim in record["claims"]:
            ids = [i for d in claim["devices"] for i in d["cdiDeviceIDs"]]
            self.step("prepared", f"claim {claim['namespace']}/{claim['name']} prepared on {record['node']}: "
                                  f"CDI {', '.join(ids) or 'none'}")
        for view in record["containers"]:
            env = [e for e in view["env"] if e.startswith("NVIDIA_VISIBLE_DEVICES=")]
            self.step("container", f"pod {record['pod']} container {view['name']} sees "
                                   f"{', '.join(view['deviceNodes']) or 'no device'}" + (f" ({env[0]})" if env else ""))


def reconcile(cluster: ClusterDir, step: Step | None = None, clock: Callable[[], datetime] = _utc_now) -> int:
    return ControlLoop(cluster, step, clock).run()

