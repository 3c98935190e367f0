"""The deployment and replicaset controllers' bookkeeping in a local cluster: each Deployment's ReplicaSet exists
under the name its pods' ownerReferences give it, and both report their replicas as the real controllers do.

The pods themselves come from gpudra.controllers.workloads (it expands a Deployment into
`<deployment>-<pod-template-hash>-<suffix>` pods owned by that ReplicaSet); this module builds the ReplicaSet
object and the two statuses, and gpudra.cluster.deployments runs it against the local cluster's store. Learned from kube-controller-manager v1.34: the new ReplicaSet
(pkg/controller/deployment/sync.go getNewReplicaSet: name `<deployment>-<hash>`, the template and selector with
the `pod-template-hash` label, controlled by the Deployment, its annotations from
pkg/controller/deployment/util/deployment_util.go), the ReplicaSet's status (pkg/controller/replicaset/
replica_set_utils.go calculateStatus: active pods, those fully labelled, ready, available) and the Deployment's
(pkg/controller/deployment/sync.go calculateStatus: sums over its ReplicaSets). Rollouts are not modelled: a
changed template gets its own ReplicaSet, the pods of the old one stay where they are.
"""

from __future__ import annotations

import math
from datetime import datetime, timezone
from typing import Any

from gpudra.copying import copy_object
from gpudra.api.objectmeta import is_terminal, owner_reference, template_hash


HASH_LABEL = "pod-template-hash"  # apps/v1 DefaultDeploymentUniqueLabelKey
REVISION = "deployment.kubernetes.io/revision"
DESIRED_REPLICAS = "deployment.kubernetes.io/desired-replicas"
MAX_REPLICAS = "deployment.kubernetes.io/max-replicas"


def replica_set_name(deployment: dict[str, Any]) -> str:
    return f"{deployment['metadata']['name']}-{template_hash((deployment.get('spec') or {}).get('template'))}"


def replicas_of(obj: dict[str, Any]) -> int:
    value = (obj.get("spec") or {}).get("replicas", 1)
    return value if isinstance(value, int) and not isinstance(value, bool) else 1


def _scaled(value: Any, total: int, round_up: bool, default: str) -> int:
    """An int-or-percent of a rolling update (intstr.GetScaledValueFromIntOrPercent)."""
    value = default if value is None else value
    if isinstance(value, str) and value.endswith("%") and value[:-1].isdigit():
        exact = int(value[:-1]) * total / 100
        return math.ceil(exact) if round_up else math.floor(exact)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def max_surge(deployment: dict[str, Any]) -> int:
    strategy = (deployment.get("spec") or {}).get("strategy") or {}
    if strategy.get("type") == "Recreate":
        return 0
    return _scaled((strategy.get("rollingUpdate") or {}).get("maxSurge"), replicas_of(deployment), True, "25%")


def controller_uid(obj: dict[str, Any]) -> str | None:
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if isinstance(ref, dict) and ref.get("controller"):
            return ref.get("uid")
    return None


def new_replica_set(deployment: dict[str, Any], revision: int) -> dict[str, Any]:
    """The ReplicaSet the deployment controller creates for the Deployment's current template."""
    spec = deployment.get("spec") or {}
    hash_value = template_hash(spec.get("template"))
    template = copy_object(spec.get("template") or {})
    labels = {**((template.get("metadata") or {}).get("labels") or {}), HASH_LABEL: hash_value}
    template.setdefault("metadata", {})["labels"] = labels
    selector = copy_object(spec.get("selector") or {})
    selector["matchLabels"] = {**(selector.get("matchLabels") or {}), HASH_LABEL: hash_value}
    replicas = replicas_of(deployment)
    rs_spec: dict[str, Any] = {"replicas": replicas, "selector": selector, "template": template}
    if spec.get("minReadySeconds"):
        rs_spec["minReadySeconds"] = spec["minReadySeconds"]
    return {
        "apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {
            "name": replica_set_name(deployment), "namespace": deployment["metadata"]["namespace"], "labels": labels,
            "annotations": {DESIRED_REPLICAS: str(replicas), MAX_REPLICAS: str(replicas + max_surge(deployment)),
                            REVISION: str(revision)},
            "ownerReferences": [owner_reference(deployment, "apps/v1", "Deployment")],
        },
        "spec": rs_spec,
    }


def _is_ready(pod: dict[str, Any]) -> tuple[bool, str | None]:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return condition.get("status") == "True", condition.get("lastTransitionTime")
    return False, None


def _available(pod: dict[str, Any], min_ready_seconds: int, now: datetime) -> bool:
    """podutil.IsPodAvailable: ready for at least minReadySeconds."""
    ready, since = _is_ready(pod)
    if not ready:
        return False
    if not min_ready_seconds:
        return True
    try:
        started = datetime.strptime(str(since), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
    except ValueError:
        return False
    return (now - started).total_seconds() >= min_ready_seconds


def replica_set_status(rs: dict[str, Any], pods: list[dict[str, Any]], now: datetime) -> dict[str, Any]:
    """The replicaset controller's calculateStatus over the pods the ReplicaSet controls."""
    active = [p for p in pods if not is_terminal(p) and not p["metadata"].get("deletionTimestamp")]
    template_labels = (((rs.get("spec") or {}).get("template") or {}).get("metadata") or {}).get("labels") or {}
    min_ready = (rs.get("spec") or {}).get("minReadySeconds") or 0
    status = {k: v for k, v in (rs.get("status") or {}).items() if k == "conditions"}
    counts = {
        "replicas": len(active),
        "fullyLabeledReplicas": sum(all((p["metadata"].get("labels") or {}).get(k) == v
                                        for k, v in template_labels.items()) for p in active),
        "readyReplicas": sum(_is_ready(p)[0] for p in active),
        "availableReplicas": sum(_available(p, min_ready, now) for p in active),
        "observedGeneration": rs["metadata"].get("generation", 0),
    }
    status.update({k: v for k, v in counts.items() if v or k == "replicas"})  # the others are omitempty
    return status


def deployment_status(deployment: dict[str, Any], owned: list[dict[str, Any]], newest: dict[str, Any] | None
                      ) -> dict[str, Any]:
    """The deployment controller's calculateStatus over the ReplicaSets it owns (`newest`: its current one)."""
    def total(field: str, sets: list[dict[str, Any]]) -> int:
        return sum(int((rs.get("status") or {}).get(field) or 0) for rs in sets)

    available = total("availableReplicas", owned)
    counts = {
        "observedGeneration": deployment["metadata"].get("generation", 0),
        "replicas": total("replicas", owned),
        "updatedReplicas": total("replicas", [newest] if newest else []),
        "readyReplicas": total("readyReplicas", owned),
        "availableReplicas": available,
        "unavailableReplicas": max(0, sum(replicas_of(rs) for rs in owned) - available),
    }
    status = {k: v for k, v in (deployment.get("status") or {}).items() if k in ("conditions", "collisionCount")}
    status.update({k: v for k, v in counts.items() if v})  # every count is omitempty in apps/v1
    return status


def current_replica_set(deployment: dict[str, Any], replica_sets: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The Deployment's ReplicaSet for its current template, when the store holds it under the Deployment's
    control: only then does the Deployment have pods (the deployment controller creates them through it)."""
    name, uid = replica_set_name(deployment), deployment["metadata"].get("uid")
    return next((rs for rs in replica_sets if rs["metadata"]["name"] == name and controller_uid(rs) == uid
                 and rs["metadata"]["namespace"] == deployment["metadata"]["namespace"]), None)
