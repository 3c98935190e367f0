"""The local cluster's ComputeDomain controller: gpudra.computedomain's plan for every stored ComputeDomain, written
to the store (the templates and the DaemonSet created, node labels set, finalizers and status updated, a deleted
domain torn down in the controller's order). The control loop runs it at the start of every round, so what it
creates is scheduled and started in the same `gpudra` command."""

from __future__ import annotations

import logging
from typing import Any, Callable

from gpudra.computedomain.controller import (DEFAULT_DAEMON_POD, DOMAIN_LABEL, FINALIZER, FROM_DAEMON_PODS, DaemonPod,
                                             DomainPlan, StatusSource, World, orphans, plan, stale_labels)
from gpudra.api.schema.computedomain import CLIQUE_KIND
from gpudra.computedomain.devices import DRIVER_NAMESPACE
from gpudra.api.schema.computedomain import KIND

from .store import Store, StoreError

CONTROLLER = "compute-domain-controller"

log = logging.getLogger(__name__)

Event = Callable[[dict[str, Any], str, str, str, str], None]
Step = Callable[[str, str], None]


def world_of(store: Store, source: StatusSource = FROM_DAEMON_PODS) -> World:
    """The objects the controller reads; the ComputeDomainCliques only where the daemons write them (the local
    cluster's store has no such kind: its daemons are pods on paper)."""
    # the driver's namespace only, as NVIDIA's namespaced informer (and its controller Role) reads them
    cliques = store.list(CLIQUE_KIND, DRIVER_NAMESPACE) if source.daemons_write and source.cliques_gate else []
    return World(nodes=store.list("Node"), templates=store.list("ResourceClaimTemplate"),
                 daemonsets=store.list("DaemonSet"), pods=store.list("Pod"), claims=store.list("ResourceClaim"),
                 cliques=cliques)


def reconcile_compute_domains(store: Store, event: Event, step: Step,
                              source: StatusSource = FROM_DAEMON_PODS, daemon: DaemonPod = DEFAULT_DAEMON_POD) -> bool:
    """One pass over every ComputeDomain; True when it changed the store."""
    domains = store.list(KIND)
    changed = False
    for domain in domains:
        result = plan(domain, world_of(store, source), source, daemon)  # re-read: an earlier domain's writes count
        changed |= _apply(store, domain, result, event, step)
    uids = {str(d["metadata"].get("uid")) for d in domains}
    for node in stale_labels(uids, store.list("Node")):
        changed |= _label_node(store, node, None, "(gone)", step)
    changed |= _delete_and_release(store, orphans(uids, world_of(store)), "(gone)", step)
    return changed


def _apply(store: Store, domain: dict[str, Any], result: DomainPlan, event: Event, step: Step) -> bool:
    meta = domain["metadata"]
    where = f"{meta.get('namespace')}/{meta.get('name')}"
    changed = False
    for obj in result.create:
        try:
            store.create(obj)
        except StoreError as exc:
            _warn_once(store, domain, "FailedCreate", str(exc), event)
            continue
        m = obj["metadata"]
        event(domain, "Normal", "Created", f"created {obj['kind']} {m['namespace']}/{m['name']}", CONTROLLER)
        step("computedomain", f"computedomain {where}: created {obj['kind']} {m['namespace']}/{m['name']}")
        changed = True
    for node, value in result.labels.items():
        changed |= _label_node(store, node, value, where, step)
    changed |= _delete_and_release(store, result, where, step)
    for reason, message in result.problems:
        _warn_once(store, domain, reason, message, event)
    for obj in result.replace:  # a clique without its stale daemons (cleanupClique)
        if _replace(store, obj):
            step("computedomain", f"computedomain {where}: stale daemons taken off {obj['kind']} "
                 f"{obj['metadata'].get('namespace')}/{obj['metadata'].get('name')}")
            changed = True
    if result.domain is None:
        gone = dict(domain, metadata={**meta, "finalizers": [f for f in meta.get("finalizers") or []
                                                            if f != FINALIZER]})
        if _replace(store, gone):
            step("computedomain", f"computedomain {where}: torn down, finalizer removed")
            return True
        return changed
    if result.domain != domain:
        changed |= _replace(store, result.domain)
    return changed


def _delete_and_release(store: Store, result: DomainPlan, where: str, step: Step) -> bool:
    changed = False
    for kind, namespace, name in result.delete:
        try:
            store.delete(kind, namespace, name)
        except StoreError:
            continue  # gone meanwhile
        step("computedomain", f"computedomain {where}: deleted {kind} {namespace}/{name}")
        changed = True
    for kind, namespace, name in result.release:
        current = store.get(kind, namespace, name)
        if current is not None and FINALIZER in (current["metadata"].get("finalizers") or []):
            current["metadata"]["finalizers"] = [f for f in current["metadata"]["finalizers"] if f != FINALIZER]
            changed |= _replace(store, current)
    return changed


def _label_node(store: Store, node_name: str, value: str | None, where: str, step: Step) -> bool:
    node = store.get("Node", None, node_name)
    if node is None:
        return False
    labels = node["metadata"].setdefault("labels", {})
    if value is None:
        labels.pop(DOMAIN_LABEL, None)
    else:
        labels[DOMAIN_LABEL] = value
    if not _replace(store, node):
        return False
    step("computedomain", f"computedomain {where}: node {node_name} "
         + ("labelled" if value is not None else "unlabelled") + f" {DOMAIN_LABEL}")
    return True


def _replace(store: Store, obj: dict[str, Any]) -> bool:
    """Write `obj` back; False when the store refuses it. 404/409: changed or deleted meanwhile, the next round
    works from the new version. Anything else (a status the API server's validation refuses, 422) is logged and
    skipped: one domain's bad write must not stop the control loop for every other object (cdstatus.go logs a
    failed status update and goes on with the next domain too)."""
    try:
        store.replace(obj)
    except StoreError as exc:
        if exc.status not in (404, 409):
            meta = obj.get("metadata") or {}
            log.warning("compute-domain controller: %s %s/%s not written: %s", obj.get("kind"),
                        meta.get("namespace") or "", meta.get("name"), exc)
        return False
    return True


def _warn_once(store: Store, domain: dict[str, Any], reason: str, message: str, event: Event) -> None:
    """A Warning event on the domain, once: every round would find the same problem again."""
    if any(e.get("reason") == reason and e.get("message") == message for e in store.events_for(domain)):
        return
    event(domain, "Warning", reason, message, CONTROLLER)
