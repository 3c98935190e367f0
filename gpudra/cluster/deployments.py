"""The deployment and replicaset controllers run against the local cluster's store (one reconcile round): the
objects and statuses come from gpudra.controllers.deployments, the garbage collector's cascade is here."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Callable

from gpudra.controllers.deployments import (DESIRED_REPLICAS, REVISION, controller_uid, current_replica_set, deployment_status,
                                            replicas_of,
                                            new_replica_set, replica_set_name, replica_set_status)
from gpudra.copying import copy_object

from .store import Store, StoreError

Step = Callable[[str, str], None]


def collect_orphans(store: Store, step: Step) -> bool:
    """The garbage collector's background cascade for the Deployment → ReplicaSet → Pod chain: a ReplicaSet whose
    controlling Deployment is gone, then a pod whose controlling ReplicaSet is gone, is deleted (a bound pod
    gracefully: the kubelet stand-in unprepares its claims first)."""
    changed = False
    for kind, owner_kind in (("ReplicaSet", "Deployment"), ("Pod", "ReplicaSet")):
        owners = {o["metadata"].get("uid") for o in store.list(owner_kind)}
        for obj in store.list(kind):
            meta = obj["metadata"]
            refs = [r for r in meta.get("ownerReferences") or [] if isinstance(r, dict) and r.get("controller")]
            if meta.get("deletionTimestamp") or not refs or refs[0].get("kind") != owner_kind \
                    or refs[0].get("uid") in owners:
                continue
            try:
                store.delete(kind, meta["namespace"], meta["name"])
            except StoreError:
                continue
            step("deleted", f"{kind.lower()} {meta['namespace']}/{meta['name']} deleted: its {owner_kind} "
                            f"{refs[0].get('name')} is gone")
            changed = True
    return changed


def reconcile_deployments(store: Store, step: Step, now: datetime | None = None) -> bool:
    """Delete what lost its owner, create each Deployment's ReplicaSet, keep its replicas, and write both
    statuses; True when it changed the store."""
    now = now or datetime.now(timezone.utc)
    changed = collect_orphans(store, step)
    sets = store.list("ReplicaSet")
    for deployment in store.list("Deployment"):
        if deployment["metadata"].get("deletionTimestamp"):
            continue
        uid = deployment["metadata"]["uid"]
        namespace = deployment["metadata"]["namespace"]
        owned = [rs for rs in sets if rs["metadata"]["namespace"] == namespace and controller_uid(rs) == uid]
        name = replica_set_name(deployment)
        current = current_replica_set(deployment, owned)
        if current is None:
            revisions = [int(v) for rs in owned
                         if str(v := (rs["metadata"].get("annotations") or {}).get(REVISION, "")).isdigit()]
            try:
                current = store.create(new_replica_set(deployment, max(revisions, default=0) + 1))
            except StoreError:  # a ReplicaSet of that name not ours (upstream bumps collisionCount), a refused one
                continue
            step("replicaset", f"replicaset {namespace}/{name} created by Deployment {deployment['metadata']['name']}")
            sets.append(current)
            changed = True
        elif replicas_of(current) != replicas_of(deployment):
            updated = copy_object(current)
            updated["spec"]["replicas"] = replicas_of(deployment)
            updated["metadata"].setdefault("annotations", {})[DESIRED_REPLICAS] = str(replicas_of(deployment))
            changed |= _replace(store, updated)
    pods = store.list("Pod")
    for rs in store.list("ReplicaSet"):
        mine = [p for p in pods if p["metadata"]["namespace"] == rs["metadata"]["namespace"]
                and controller_uid(p) == rs["metadata"]["uid"]]
        status = replica_set_status(rs, mine, now)
        if status != rs.get("status"):
            changed |= _replace(store, {**rs, "status": status})
    sets = store.list("ReplicaSet")
    for deployment in store.list("Deployment"):
        uid, namespace = deployment["metadata"]["uid"], deployment["metadata"]["namespace"]
        owned = [rs for rs in sets if rs["metadata"]["namespace"] == namespace and controller_uid(rs) == uid]
        status = deployment_status(deployment, owned, current_replica_set(deployment, owned))
        if status != (deployment.get("status") or {}):
            changed |= _replace(store, {**deployment, "status": status})
    return changed


def _replace(store: Store, obj: dict[str, Any]) -> bool:
    try:
        store.replace(obj)
    except StoreError:  # changed or deleted meanwhile: the next round works from the new version
        return False
    return True
