"""kube-controller-manager's controllers run on the scheduler's cluster state, as they would around it.

`ManagedCluster(objects)` is `gpudra.scheduler.ClusterState` with the controllers that create what the scheduler
then places: workloads expanded into pods where they stand in the input (Deployment, ReplicaSet, StatefulSet, Job;
DaemonSets once every node is known), a ComputeDomain's channel template (NVIDIA's compute-domain controller), and
the resourceclaim controller's claims from templates (pkg/controller/resourceclaim/controller.go: handleClaim, the
claim named in the pod's `status.resourceClaimStatuses`; an orphan claim it made before is adopted again).

The scheduler itself imports none of this: it places the pods it is given, as kube-scheduler does.
"""

from __future__ import annotations

from typing import Any, Iterable

from gpudra.api.objectmeta import (WORKLOAD_KINDS, ensure_uid, key_of, metadata, name_of, namespace_of,
                                   owned_by)
from gpudra.computedomain.controller import is_domain, workload_template
from gpudra.scheduler.state import ClusterState

from .workloads import (MAX_EXPANDED_PODS, POD_CLAIM_NAME_ANNOTATION, WorkloadError, claim_from_template,
                        expand_daemonset, expand_workload)


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
        self.sync()

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

    def claims_for_pod(self, pod: dict[str, Any]) -> None:
        """The resourceclaim controller: a claim per template-backed pod claim that has none yet."""
        spec = pod.get("spec") or {}
        status = pod.setdefault("status", {})
        statuses = {entry.get("name"): entry for entry in status.get("resourceClaimStatuses") or []}
        namespace = namespace_of(pod)
        changed = False
        for pod_claim in spec.get("resourceClaims") or []:
            template_name = pod_claim.get("resourceClaimTemplateName")
            if not template_name or pod_claim.get("name") in statuses:
                continue
            existing = self._orphan_claim(pod, pod_claim.get("name", ""))
            if existing is None:
                template = self.templates.get(f"{namespace}/{template_name}")
                if template is None:
                    continue  # reported by the scheduler: the claim cannot be created
                existing = claim_from_template(pod, pod_claim.get("name", ""), template, lambda k: k in self.claims)
                self.claims[key_of(existing)] = existing
                self._claims_by_owner.setdefault(ensure_uid(pod), []).append(existing)
            statuses[pod_claim.get("name")] = {"name": pod_claim.get("name"), "resourceClaimName": name_of(existing)}
            changed = True
        if changed:
            order = [c.get("name") for c in spec.get("resourceClaims") or []]
            status["resourceClaimStatuses"] = sorted(
                statuses.values(), key=lambda e: order.index(e["name"]) if e["name"] in order else len(order)
            )

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
