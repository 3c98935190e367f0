"""kube-controller-manager's controllers run on the scheduler's cluster state, as they would around it.

`ManagedCluster(objects)` is `gpudra.scheduler.ClusterState` with the controllers that create what the scheduler
then places: workloads expanded into pods where they stand in the input (Deployment, ReplicaSet, StatefulSet, Job;
DaemonSets once every node is known), a ComputeDomain's channel template (NVIDIA's compute-domain controller), and
the resourceclaim controller's claims from templates (pkg/controller/resourceclaim/controller.go: handleClaim, the
claim named in the pod's `status.resourceClaimStatuses`; an orphan claim it made before is adopted again).
With DRAWorkloadResourceClaims (1.36, + GenericWorkload) a PodGroup's template claims are made once for the group
(syncPodGroup/handlePodGroupClaim: owned by the PodGroup, recorded in its `status.resourceClaimStatuses`), and a
pod claim that equals one of its group's entries exactly names that claim in the pod's status instead of getting
one of its own (handleClaim; the match is gpudra.api.podgroupclaims.group_claim_for).

The scheduler itself imports none of this: it places the pods it is given, as kube-scheduler does.
"""

from __future__ import annotations

from typing import Any, Iterable

from gpudra.api.objectmeta import (WORKLOAD_KINDS, ensure_uid, key_of, metadata, name_of, namespace_of,
                                   owned_by)
from gpudra.api.podgroupclaims import (PodGroupClaimError, find_pod_group, group_claim_for, is_for_pod_group,
                                       is_pod_group, workload_claims_enabled)
from gpudra.computedomain.controller import is_domain, workload_template
from gpudra.scheduler.state import ClusterState

from .workloads import (MAX_EXPANDED_PODS, POD_CLAIM_NAME_ANNOTATION, WorkloadError, claim_from_template,
                        expand_daemonset, expand_workload)


POD_GROUP_OWNER = ("scheduling.k8s.io/v1alpha2", "PodGroup")


class ManagedCluster(ClusterState):
    """The scheduler's cluster state with the workload, ComputeDomain and resourceclaim controllers run on every
    `apply`."""

    def apply(self, objects: Iterable[dict[str, Any]]) -> None:
        """Add objects (later ones replace earlier ones with the same key), then run the controllers.

        Workloads are expanded where they stand in the input, so their pods queue there; pods that already
        belong to a workload (anywhere in the cluster or the input, e.g. a dump of a live cluster) count as
        its replicas instead of being created again."""
        objects = [obj for obj in objects if isinstance(obj, dict)]
        existing = list(self.pods.values())
        incoming = set()
        daemonsets: list[dict[str, Any]] = []
        controllers: set[Any] = set()  # workloads of the input; one they control (a Deployment's ReplicaSet) is theirs
        for obj in objects:
            if obj.get("kind") == "Pod":
                metadata(obj).setdefault("namespace", "default")
                existing.append(obj)
                incoming.add(key_of(obj))
            elif obj.get("kind") in WORKLOAD_KINDS:
                meta = obj.get("metadata") or {}
                controllers.add((meta.get("namespace") or "default", obj.get("kind"), meta.get("name")))
                if meta.get("uid"):
                    controllers.add(meta["uid"])

        def taken(key: str) -> bool:
            return key in self.pods or key in incoming

        for obj in objects:
            kind = obj.get("kind")
            self.store_object(obj)
            if kind == "DaemonSet":
                daemonsets.append(obj)  # after the loop: they need every node of the input
            elif kind in WORKLOAD_KINDS:
                # expanded in place: its pods queue where the workload stands in the input
                if _controlled_by_one_of(obj, controllers):
                    continue  # its controller, also in the input, creates the pods
                try:
                    pods = expand_workload(obj, taken, existing, room=MAX_EXPANDED_PODS - len(self.pods))
                except WorkloadError as exc:
                    self.problems.append(str(exc))
                    continue
                for pod in pods:
                    self.add_pod(pod)
            elif is_domain(obj):
                self._add_domain_template(obj)
        nodes = [self.nodes[name] for name in self.node_names()]
        for daemonset in daemonsets:
            try:
                pods = expand_daemonset(daemonset, nodes, taken, existing)
            except WorkloadError as exc:
                self.problems.append(str(exc))
                continue
            for pod in pods:
                self.add_pod(pod)
        self.sync()  # runs claims_for_pod, which makes the claims of a pod's group as it needs them
        if self.workload_claims():
            for obj in objects:
                if is_pod_group(obj):
                    self.claims_for_pod_group(obj)  # a group whose pods are not there yet

    def _add_domain_template(self, domain: dict[str, Any]) -> None:
        """A ComputeDomain's channel template, as its controller creates it (gpudra.computedomain), where the input
        has none of that name: manifests given to `schedule`/`explain` place the domain's pods as a cluster would."""
        metadata(domain).setdefault("namespace", "default")
        ensure_uid(domain)
        try:
            template = workload_template(domain)
        except (KeyError, TypeError, AttributeError):
            return  # no usable spec.channel (`gpudra validate` says why): the controller creates nothing either
        self.templates.setdefault(key_of(template), template)

    def workload_claims(self) -> bool:
        return workload_claims_enabled(self.kubernetes_version, self.features)

    def claims_for_pod(self, pod: dict[str, Any]) -> None:
        """The resourceclaim controller: a claim per template-backed pod claim that has none yet; a claim of the
        pod's PodGroup names the group's claim instead (none yet: the pod waits, as upstream's does)."""
        spec = pod.get("spec") or {}
        status = pod.setdefault("status", {})
        statuses = {entry.get("name"): entry for entry in status.get("resourceClaimStatuses") or []}
        namespace = namespace_of(pod)
        pod_group = find_pod_group(self.other_objects, pod) if self.workload_claims() else None
        changed = False
        for pod_claim in spec.get("resourceClaims") or []:
            template_name = pod_claim.get("resourceClaimTemplateName")
            if not template_name or pod_claim.get("name") in statuses:
                continue
            try:
                for_group = pod_group is not None and group_claim_for(pod, pod_group, pod_claim) is not None
            except PodGroupClaimError as exc:
                self.problems.append(f"pod {key_of(pod)}: {exc}")
                continue
            if for_group:
                assert pod_group is not None
                existing = self._group_claim(pod_group, pod_claim.get("name", ""))
                if existing is None:
                    self.claims_for_pod_group(pod_group)  # its template may have come after the PodGroup
                    existing = self._group_claim(pod_group, pod_claim.get("name", ""))
                if existing is None:
                    continue  # the group's claim is not created yet: the scheduler reports the pod waiting
                statuses[pod_claim.get("name")] = {"name": pod_claim.get("name"),
                                                   "resourceClaimName": name_of(existing)}
                changed = True
                continue
            existing = self._orphan_claim(pod, pod_claim.get("name", ""))
            if existing is None:
                template = self.templates.get(f"{namespace}/{template_name}")
                if template is None:
                    continue  # reported by the scheduler: the claim cannot be created
                existing = claim_from_template(pod, pod_claim.get("name", ""), template, lambda k: k in self.claims,
                                               release=self.kubernetes_version)
                self.claims[key_of(existing)] = existing
                self._claims_by_owner.setdefault(ensure_uid(pod), []).append(existing)
            statuses[pod_claim.get("name")] = {"name": pod_claim.get("name"), "resourceClaimName": name_of(existing)}
            changed = True
        if changed:
            order = [c.get("name") for c in spec.get("resourceClaims") or []]
            status["resourceClaimStatuses"] = sorted(
                statuses.values(), key=lambda e: order.index(e["name"]) if e["name"] in order else len(order)
            )

    def claims_for_pod_group(self, pod_group: dict[str, Any]) -> None:
        """syncPodGroup: a claim per template-backed entry of the PodGroup's `spec.resourceClaims` that has none
        yet, owned by the group and recorded in its `status.resourceClaimStatuses`."""
        if (pod_group.get("metadata") or {}).get("deletionTimestamp"):
            return
        metadata(pod_group).setdefault("namespace", "default")
        ensure_uid(pod_group)
        namespace = namespace_of(pod_group)
        status = pod_group.setdefault("status", {})
        statuses = {entry.get("name"): entry for entry in status.get("resourceClaimStatuses") or []}
        changed = False
        for group_claim in (pod_group.get("spec") or {}).get("resourceClaims") or []:
            template_name = group_claim.get("resourceClaimTemplateName")
            if not template_name:
                continue
            recorded = statuses.get(group_claim.get("name"), {}).get("resourceClaimName")
            claim = self.claims.get(f"{namespace}/{recorded}") if recorded else None
            if claim is not None and is_for_pod_group(pod_group, claim) is None:
                continue  # already created
            claim = self._group_claim(pod_group, group_claim.get("name", ""))
            if claim is None:
                template = self.templates.get(f"{namespace}/{template_name}")
                if template is None:
                    continue  # upstream's controller errs and retries; the pods wait for the claim
                claim = claim_from_template(pod_group, group_claim.get("name", ""), template,
                                            lambda k: k in self.claims, owner_api=POD_GROUP_OWNER,
                                            release=self.kubernetes_version)
                self.claims[key_of(claim)] = claim
                self._claims_by_owner.setdefault(ensure_uid(pod_group), []).append(claim)
            statuses[group_claim.get("name")] = {"name": group_claim.get("name"), "resourceClaimName": name_of(claim)}
            changed = True
        if changed:
            status["resourceClaimStatuses"] = list(statuses.values())

    def _group_claim(self, pod_group: dict[str, Any], group_claim_name: str) -> dict[str, Any] | None:
        """findPodGroupResourceClaim: the claim owned by the group for that entry (by the pod claim annotation)."""
        uid: Any = (pod_group.get("metadata") or {}).get("uid")
        for claim in self._claims_by_owner.get(uid, ()):
            annotations = (claim.get("metadata") or {}).get("annotations") or {}
            if annotations.get(POD_CLAIM_NAME_ANNOTATION) == group_claim_name and owned_by(claim, pod_group):
                return claim
        return None

    def _orphan_claim(self, pod: dict[str, Any], pod_claim_name: str) -> dict[str, Any] | None:
        uid: Any = (pod.get("metadata") or {}).get("uid")  # as written: owner references hold it alike
        for claim in self._claims_by_owner.get(uid, ()):
            annotations = (claim.get("metadata") or {}).get("annotations") or {}
            if annotations.get(POD_CLAIM_NAME_ANNOTATION) == pod_claim_name and owned_by(claim, pod):
                return claim
        return None


def _controlled_by_one_of(obj: dict[str, Any], controllers: set[Any]) -> bool:
    meta = obj.get("metadata") or {}
    for ref in meta.get("ownerReferences") or []:
        if ref.get("controller") and (
            ref.get("uid") in controllers
            or (meta.get("namespace") or "default", ref.get("kind"), ref.get("name")) in controllers
        ):
            return True
    return False
