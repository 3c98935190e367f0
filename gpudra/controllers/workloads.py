"""Workload controllers expanded into pods, and ResourceClaims created from templates.

Names that the API server would randomise are derived from a hash of the input (`meta.random_suffix`), so the
same manifests always give the same pods and claims. Shapes follow the upstream controllers:

- ReplicaSet: `<rs>-<5 chars>`; Deployment: a ReplicaSet `<deploy>-<pod-template-hash>`, hence pods
  `<deploy>-<hash>-<5 chars>` labelled `pod-template-hash`.
- StatefulSet: `<sts>-<ordinal>` for ordinals 0..replicas-1 (`statefulset.kubernetes.io/pod-name`).
- Job: `<job>-<5 chars>` (Indexed: `<job>-<index>-<5 chars>`), min(parallelism, completions) pods at once.
- DaemonSet: `<ds>-<5 chars>` on every node that matches its template and whose NoSchedule/NoExecute taints it
  tolerates (with the controller's own tolerations), pinned by a `metadata.name` node affinity.
- Pods that already belong to a workload (a dump of a live cluster) count as its replicas.
- Template claims (resourceclaim controller): generateName `<pod>-<podClaim>-` shortened proportionally to 57
  characters, owned by the pod (controller; blockOwnerDeletion up to 1.34), annotated `resource.kubernetes.io/pod-claim-name`.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from gpudra.schedulinghelpers import (first_untolerated_taint, node_taints, pod_matches_node_selector_and_affinity,
                                      requirement_matches)

from gpudra.copying import copy_object

from gpudra.errors import GpudraError

from gpudra.api.objectmeta import (
    ensure_uid,
    owner_reference,
    unique_generated_name,
    key_of,
    name_of,
    namespace_of,
    stable_uid,
    template_hash,
)

POD_CLAIM_NAME_ANNOTATION = "resource.kubernetes.io/pod-claim-name"
CLAIM_GENERATE_NAME_LIMIT = 57  # resourceclaim controller: keeps room for the 5-character suffix and more

# Tolerations the DaemonSet controller adds to every daemon pod (daemon pods survive node conditions).
DAEMON_TOLERATIONS = [
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/disk-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/memory-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/pid-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
]


class WorkloadError(GpudraError, ValueError):
    pass


INT32_MAX = 2**31 - 1  # replicas, parallelism and completions are int32 in the apps/v1 and batch/v1 APIs
# The most pods gpudra creates for the workloads of one input: Kubernetes' tested limit of pods per cluster
# (kubernetes/community sig-scalability/configs-and-limits/thresholds.md: 150,000). `replicas: 2000000000` is
# valid to the API server, whose controllers create pods gradually; expanding it at once would exhaust memory.
MAX_EXPANDED_PODS = 150_000


def _int_field(spec: dict[str, Any], field: str, default: int, owner: dict[str, Any]) -> int:
    value = spec.get(field, default)
    if value is None:
        return default
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise WorkloadError(f"{owner.get('kind')} {key_of(owner)}: spec.{field} must be a non-negative integer")
    if value > INT32_MAX:
        raise WorkloadError(f"{owner.get('kind')} {key_of(owner)}: spec.{field} must be at most {INT32_MAX} (int32)")
    return value


def _check_room(owner: dict[str, Any], count: int, room: int) -> None:
    if count > room:
        raise WorkloadError(f"{owner.get('kind')} {key_of(owner)}: would create {count} pods, more than the "
                            f"{max(room, 0)} left of the {MAX_EXPANDED_PODS} pods gpudra expands for one input "
                            "(Kubernetes' tested limit of pods per cluster)")


def _pod_from_template(
    owner: dict[str, Any], name: str, extra_labels: dict[str, str], owner_ref: dict[str, Any]
) -> dict[str, Any]:
    template = (owner.get("spec") or {}).get("template") or {}
    template_meta = template.get("metadata") or {}
    meta: dict[str, Any] = {"name": name, "namespace": namespace_of(owner)}
    labels = dict(template_meta.get("labels") or {})
    labels.update(extra_labels)
    if labels:
        meta["labels"] = labels
    if template_meta.get("annotations"):
        meta["annotations"] = dict(template_meta["annotations"])
    meta["ownerReferences"] = [owner_ref]
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": copy_object(template.get("spec") or {})}
    meta["uid"] = stable_uid("Pod", meta["namespace"], name, owner_ref["uid"])
    return pod


def selector_matches(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    """A metav1.LabelSelector (matchLabels and matchExpressions); an empty selector matches everything."""
    selector = selector or {}
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    return all(requirement_matches(r, labels) for r in selector.get("matchExpressions") or [])


_OWNER_KIND = {
    "Deployment": "ReplicaSet", "ReplicaSet": "ReplicaSet", "StatefulSet": "StatefulSet", "Job": "Job",
    "DaemonSet": "DaemonSet",
}


def existing_replicas(
    obj: dict[str, Any], pods: list[dict[str, Any]], succeeded: bool = False
) -> list[dict[str, Any]]:
    """Live (non-terminal) pods that already belong to the workload — from a `kubectl get -o yaml` dump, say:
    same namespace, matching its selector (the template's labels when it has none), not controlled by a
    different kind of owner. With `succeeded`, its pods that completed instead."""
    spec = obj.get("spec") or {}
    selector = spec.get("selector") or {
        "matchLabels": ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
    }
    has_selector = bool(selector.get("matchLabels") or selector.get("matchExpressions"))
    uid = (obj.get("metadata") or {}).get("uid")
    if not has_selector and not uid:
        return []
    namespace = namespace_of(obj)
    found = []
    for pod in pods:
        if namespace_of(pod) != namespace:
            continue
        phase = (pod.get("status") or {}).get("phase")
        if (phase != "Succeeded") if succeeded else (phase in ("Succeeded", "Failed")):
            continue
        meta = pod.get("metadata") or {}
        owners = [ref for ref in meta.get("ownerReferences") or [] if ref.get("controller")]
        if owners and uid and owners[0].get("uid") == uid:
            found.append(pod)  # controlled by this very object (a selector the API server would add may be absent)
            continue
        if owners and owners[0].get("kind") != _OWNER_KIND.get(str(obj.get("kind"))):
            continue
        if has_selector and selector_matches(selector, meta.get("labels") or {}):
            found.append(pod)
    return found


def expand_workload(
    obj: dict[str, Any], taken: Callable[[str], bool], existing: Sequence[dict[str, Any]] = (),
    room: int = MAX_EXPANDED_PODS,
) -> list[dict[str, Any]]:
    """The pods a controller object would create. `taken(key)` says whether `namespace/name` is in use;
    `existing` are pods already present, of which those belonging to the workload count as its replicas;
    WorkloadError when that is more than `room` pods."""
    kind = obj.get("kind")
    spec = obj.get("spec") or {}
    namespace = namespace_of(obj)
    controller_uid = ensure_uid(obj)
    if not isinstance(spec.get("template"), dict):
        raise WorkloadError(f"{kind} {key_of(obj)}: spec.template is missing")
    pods: list[dict[str, Any]] = []
    # StatefulSets instead skip the ordinals whose pod exists
    already = len(existing_replicas(obj, list(existing))) if existing and kind != "StatefulSet" else 0

    def name_taken(name: str) -> bool:
        return taken(f"{namespace}/{name}") or any(name_of(p) == name for p in pods)

    if kind in ("Deployment", "ReplicaSet"):
        replicas = max(0, _int_field(spec, "replicas", 1, obj) - already)
        if kind == "Deployment":
            hash_label = template_hash(spec.get("template"))
            rs_name = f"{name_of(obj)}-{hash_label}"
            rs = {"kind": "ReplicaSet", "metadata": {"name": rs_name, "namespace": namespace}}
            ensure_uid(rs)
            ref = owner_reference(rs, "apps/v1", "ReplicaSet")
            extra = {"pod-template-hash": hash_label}
        else:
            rs_name = name_of(obj)
            ref = owner_reference(obj, "apps/v1", "ReplicaSet")
            extra = {}
        _check_room(obj, replicas, room)
        for index in range(replicas):
            name = unique_generated_name(f"{rs_name}-", name_taken, namespace, controller_uid, index)
            pods.append(_pod_from_template(obj, name, extra, ref))
    elif kind == "StatefulSet":
        replicas = _int_field(spec, "replicas", 1, obj)
        ref = owner_reference(obj, "apps/v1", "StatefulSet")
        revision = f"{name_of(obj)}-{template_hash(spec.get('template'))}"
        _check_room(obj, replicas, room)
        for ordinal in range(replicas):
            name = f"{name_of(obj)}-{ordinal}"
            if taken(f"{namespace}/{name}"):
                continue  # this ordinal already runs
            extra = {
                "statefulset.kubernetes.io/pod-name": name,
                "apps.kubernetes.io/pod-index": str(ordinal),
                "controller-revision-hash": revision,
            }
            pod = _pod_from_template(obj, name, extra, ref)
            pod["spec"].setdefault("hostname", name)
            if spec.get("serviceName"):
                pod["spec"].setdefault("subdomain", spec["serviceName"])
            pods.append(pod)
    elif kind == "Job":
        parallelism = _int_field(spec, "parallelism", 1, obj)
        completions = spec.get("completions")
        if completions is not None:
            # the job controller runs min(parallelism, completions - succeeded) pods
            done = max(_int_field(obj.get("status") or {}, "succeeded", 0, obj),
                       len(existing_replicas(obj, list(existing), succeeded=True)) if existing else 0)
            parallelism = min(parallelism, max(0, _int_field(spec, "completions", 1, obj) - done))
        parallelism = max(0, parallelism - already)
        indexed = spec.get("completionMode") == "Indexed"
        ref = owner_reference(obj, "batch/v1", "Job")
        extra = {
            "batch.kubernetes.io/controller-uid": controller_uid,
            "batch.kubernetes.io/job-name": name_of(obj),
            "controller-uid": controller_uid,
            "job-name": name_of(obj),
        }
        _check_room(obj, parallelism, room)
        indexes: list[int] = list(range(parallelism))
        if indexed and completions is not None and existing:
            # the indexes whose pod runs or succeeded are taken; the controller creates the lowest others
            taken_indexes = set()
            for owned in existing_replicas(obj, list(existing)) + existing_replicas(obj, list(existing), True):
                index_text = ((owned.get("metadata") or {}).get("labels") or {}).get(
                    "batch.kubernetes.io/job-completion-index")
                if str(index_text).isdigit():
                    taken_indexes.add(int(str(index_text)))
            indexes = [i for i in range(_int_field(spec, "completions", 1, obj)) if i not in taken_indexes]
            indexes = indexes[:parallelism]
        for index in indexes:
            prefix = f"{name_of(obj)}-{index}-" if indexed else f"{name_of(obj)}-"
            name = unique_generated_name(prefix, name_taken, namespace, controller_uid, index)
            labels = dict(extra)
            if indexed:
                labels["batch.kubernetes.io/job-completion-index"] = str(index)
            pod = _pod_from_template(obj, name, labels, ref)
            if indexed:
                pod["metadata"].setdefault("annotations", {})["batch.kubernetes.io/job-completion-index"] = str(index)
            pod["spec"].setdefault("restartPolicy", "Never")
            pods.append(pod)
    elif kind == "DaemonSet":
        raise WorkloadError("DaemonSets are expanded with expand_daemonset (they need the nodes)")
    else:
        raise WorkloadError(f"{kind} is not a workload kind gpudra expands")
    return pods


def expand_daemonset(
    obj: dict[str, Any], nodes: list[dict[str, Any]], taken: Callable[[str], bool], existing: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """One pod per node the daemon should run on (template selector/affinity match, NoSchedule/NoExecute taints
    tolerated with the controller's extra tolerations), pinned by a `metadata.name` node affinity as the
    DaemonSet controller does. Nodes that already run one of its pods are skipped."""
    spec = obj.get("spec") or {}
    if not isinstance(spec.get("template"), dict):
        raise WorkloadError(f"DaemonSet {key_of(obj)}: spec.template is missing")
    namespace = namespace_of(obj)
    controller_uid = ensure_uid(obj)
    ref = owner_reference(obj, "apps/v1", "DaemonSet")
    template_pod = {"spec": (spec.get("template") or {}).get("spec") or {}}
    tolerations = list(template_pod["spec"].get("tolerations") or []) + DAEMON_TOLERATIONS
    running = set()
    for pod in existing_replicas(obj, existing):
        pod_spec = pod.get("spec") or {}
        if pod_spec.get("nodeName"):
            running.add(pod_spec["nodeName"])
        for term in _required_terms(pod_spec):
            for field in term.get("matchFields") or []:
                if field.get("key") == "metadata.name" and field.get("operator") == "In":
                    running.update(field.get("values") or [])
    pods: list[dict[str, Any]] = []
    for node in nodes:
        node_name = name_of(node)
        if node_name in running or not pod_matches_node_selector_and_affinity(template_pod, node):
            continue
        if first_untolerated_taint(node_taints(node), tolerations) is not None:
            continue
        name = unique_generated_name(
            f"{name_of(obj)}-", lambda n: taken(f"{namespace}/{n}") or any(name_of(p) == n for p in pods),
            namespace, controller_uid, node_name,
        )
        pod = _pod_from_template(obj, name, {}, ref)
        pod_spec = pod["spec"]
        pod_spec["tolerations"] = list(pod_spec.get("tolerations") or []) + [
            t for t in DAEMON_TOLERATIONS if t not in (pod_spec.get("tolerations") or [])
        ]
        pin = {"key": "metadata.name", "operator": "In", "values": [node_name]}
        affinity = pod_spec.setdefault("affinity", {}).setdefault("nodeAffinity", {})
        required = affinity.setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
        terms = required.get("nodeSelectorTerms") or [{}]
        # the controller replaces any metadata.name field requirement in every term with the pin
        required["nodeSelectorTerms"] = [
            {**term, "matchFields": [pin]} for term in terms
        ]
        pods.append(pod)
    return pods


def _required_terms(pod_spec: dict[str, Any]) -> list[dict[str, Any]]:
    affinity = ((pod_spec.get("affinity") or {}).get("nodeAffinity") or {})
    return list((affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms") or [])


def claim_generate_name(pod_name: str, pod_claim_name: str) -> str:
    """The resourceclaim controller's generateName (`<pod or PodGroup>-<claim>-`), shortened proportionally when
    too long."""
    generate_name = f"{pod_name}-{pod_claim_name}-"
    if len(generate_name) > CLAIM_GENERATE_NAME_LIMIT:
        total = len(generate_name)
        pod_part = pod_name[: len(pod_name) * CLAIM_GENERATE_NAME_LIMIT // total]
        claim_part = pod_claim_name[: len(pod_claim_name) * CLAIM_GENERATE_NAME_LIMIT // total]
        generate_name = f"{pod_part}-{claim_part}"  # upstream drops the trailing dash here
    return generate_name


# The resourceclaim controller's owner reference on a claim it makes from a template blocks the owner's deletion
# (blockOwnerDeletion) up to 1.34 only: pkg/controller/resourceclaim/controller.go of v1.34.4 sets it, v1.35.0 and
# v1.36.0 (pods and PodGroups alike) do not.
OWNER_BLOCKS_DELETION_UNTIL = (1, 34)


def claim_from_template(
    pod: dict[str, Any], pod_claim_name: str, template: dict[str, Any], taken: Callable[[str], bool],
    owner_api: tuple[str, str] = ("v1", "Pod"), release: str | None = None,
) -> dict[str, Any]:
    """A ResourceClaim as the resourceclaim controller of `release` (default: the newest gpudra knows) creates it
    for `pod.spec.resourceClaims[pod_claim_name]`; with `owner_api` ("scheduling.k8s.io/v1alpha2", "PodGroup"), for
    a PodGroup's `spec.resourceClaims` entry (handlePodGroupClaim, 1.36: the same generateName, annotation and copy
    of the template, owned by the group)."""
    namespace = namespace_of(pod)
    generate_name = claim_generate_name(name_of(pod), pod_claim_name)
    name = unique_generated_name(
        generate_name, lambda n: taken(f"{namespace}/{n}"), namespace, ensure_uid(pod), pod_claim_name
    )
    template_spec = template.get("spec") or {}
    template_meta = template_spec.get("metadata") or {}
    annotations = dict(template_meta.get("annotations") or {})
    annotations[POD_CLAIM_NAME_ANNOTATION] = pod_claim_name
    meta: dict[str, Any] = {
        "name": name,
        "generateName": generate_name,
        "namespace": namespace,
        "uid": stable_uid("ResourceClaim", namespace, name),
        "annotations": annotations,
        "ownerReferences": [owner_reference(pod, *owner_api)],
    }
    if _release_key(release) > OWNER_BLOCKS_DELETION_UNTIL:
        del meta["ownerReferences"][0]["blockOwnerDeletion"]
    if template_meta.get("labels"):
        meta["labels"] = dict(template_meta["labels"])
    return {
        "apiVersion": template.get("apiVersion") or "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": meta,
        "spec": copy_object(template_spec.get("spec") or {}),
    }


def _release_key(release: str | None) -> tuple[int, int]:
    from gpudra.versions import parse_version

    major, minor = parse_version(release).split(".")[:2]
    return int(major), int(minor)
