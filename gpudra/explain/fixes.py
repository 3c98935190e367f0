"""The smallest change that makes a pod (or claim) fit: candidates are taken from the explanation,
each one is applied to a copy of the input and checked by running the scheduler again.

Candidates, smallest first: remove the pod's scheduling gates; tolerate a device taint or a node taint;
release one claim that holds matching devices (deleting the pods that use it); lower a request's count; use an existing DeviceClass
instead of a missing one; lower a cpu/memory request; drop a selector. Each is applied to a snapshot of
the cluster as the target met it and the target is scheduled again; only changes that work are reported.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from gpudra.explain import model, simulate
from gpudra.explain.devices import short_expression
from gpudra.explain.model import Explanation, Fix
from gpudra.explain.trials import (Trial, attempt_target, find_object, fits_with_change, release_cannot_help,
                                   release_on_fork, written_by_a_run, written_keys)

MAX_CANDIDATES = 16  # each one is a full re-simulation
MAX_FIXES = 3
MAX_RELEASE_CANDIDATES = 5
MAX_COUNTS_TRIED = 2  # per request: the best verified-looking count, then the next
POD_CLAIM_NAME_ANNOTATION = "resource.kubernetes.io/pod-claim-name"


@dataclass
class Candidate:
    kind: str
    describe: Callable[[str], str]  # node -> message
    mutate: Callable[[list[dict[str, Any]]], bool]  # False when it does not apply to this input
    change: dict[str, Any]


def _fits(change: str) -> Callable[[str], str]:
    """A candidate's `describe`: `node NODE fits CHANGE` ("if ...", "once ...", "without ...")."""
    return lambda node: f"node {node} fits {change}"


# --------------------------------------------------------------------------------- claim sources


def claim_source(explanation: Explanation, claim_key: str) -> tuple[str, str] | None:
    """Where the spec of `claim_key` comes from in the input: ("ResourceClaim", key) for a claim
    written by the user, ("ResourceClaimTemplate", key) for one the controller generated."""
    run = explanation.context
    cluster: Any = getattr(run, "cluster", None)
    claim = cluster.claims.get(claim_key) if cluster is not None else None
    if claim is None:
        return ("ResourceClaim", claim_key)
    meta = claim.get("metadata") or {}
    pod_claim = (meta.get("annotations") or {}).get(POD_CLAIM_NAME_ANNOTATION)
    owners = [ref for ref in meta.get("ownerReferences") or [] if ref.get("kind") == "Pod"]
    if pod_claim and owners:
        namespace = claim_key.split("/", 1)[0]
        pod = cluster.pods.get(f"{namespace}/{owners[0].get('name')}")
        for entry in ((pod or {}).get("spec") or {}).get("resourceClaims") or []:
            if entry.get("name") == pod_claim and entry.get("resourceClaimTemplateName"):
                return ("ResourceClaimTemplate", f"{namespace}/{entry['resourceClaimTemplateName']}")
        return None
    return ("ResourceClaim", claim_key)


def _request_body(devices: dict[str, Any] | None, request: str) -> dict[str, Any] | None:
    """The `exactly` body (or the firstAvailable subrequest) for `gpu` or `gpu/sub`."""
    if not devices:
        return None
    base, _, sub = request.partition("/")
    for entry in devices.get("requests") or []:
        if entry.get("name") != base:
            continue
        if sub:
            return next((s for s in entry.get("firstAvailable") or [] if s.get("name") == sub), None)
        return entry.get("exactly")
    return None


def _where(source: tuple[str, str]) -> str:
    kind, key = source
    return f"claim {key}" if kind == "ResourceClaim" else f"ResourceClaimTemplate {key}"


# ------------------------------------------------------------------------------------ candidates


@dataclass
class _RequestEdit:
    """A change to one request of one claim, made to a trial's objects (called like any `mutate`) or, where the
    cluster can be forked (`on_fork`), to the fork's own copy of the claim."""

    claim_key: str
    request: str
    edit: Callable[[dict[str, Any]], bool]

    def __call__(self, objects: list[dict[str, Any]]) -> bool:
        return self._apply(find_object(objects, "ResourceClaim", self.claim_key))

    def on_fork(self, cluster: Any) -> Any | None:
        """A fork of `cluster` with the change made, or None where it does not apply (as the call's False). The
        fork copies what attempting the target may write (written_keys) and the edited claim."""
        if self.claim_key not in cluster.claims:
            return None
        pods, claims = written_keys(cluster)
        forked = cluster.fork(pods=pods, claims=[*claims, self.claim_key])
        return forked if self._apply(forked.claims[self.claim_key]) else None

    def _apply(self, claim: dict[str, Any] | None) -> bool:
        body = _request_body(((claim or {}).get("spec") or {}).get("devices"), self.request)
        return body is not None and self.edit(body)


def _request_edit(explanation: Explanation, claim_key: str, request: str,
                  edit: Callable[[dict[str, Any]], bool]) -> tuple[_RequestEdit, str] | None:
    """A mutation of one request of `claim_key` in the snapshot, and where users make that change (the
    claim itself, or the template it was generated from)."""
    source = claim_source(explanation, claim_key)
    if source is None:
        return None
    return _RequestEdit(claim_key, request, edit), _where(source)


def _tolerate_device_taint(explanation: Explanation) -> list[Candidate]:
    found: dict[tuple[str, str, str], dict[str, Any]] = {}
    for node in explanation.nodes:
        for funnel in node.requests:
            for text, taint in funnel.taints.items():
                found.setdefault((funnel.claim, funnel.request, text), taint)
    candidates = []
    for (claim, request, text), taint in found.items():
        toleration = {"key": taint.get("key", ""), "operator": "Equal", "value": taint.get("value", ""),
                      "effect": taint.get("effect", "")}
        if not toleration["value"]:
            toleration = {"key": taint.get("key", ""), "operator": "Exists", "effect": taint.get("effect", "")}

        def edit(body: dict[str, Any], toleration: dict[str, Any] = toleration) -> bool:
            body.setdefault("tolerations", []).append(dict(toleration))
            return True

        made = _request_edit(explanation, claim, request, edit)
        if made is None:
            continue
        mutate, where = made
        candidates.append(Candidate(
            "tolerate-device-taint",
            _fits(f"if request '{request}' in {where} tolerates device taint {text}"),
            mutate, {"claim": claim, "request": request, "toleration": toleration}))
    return candidates


def _remove_scheduling_gates(explanation: Explanation) -> list[Candidate]:
    run = explanation.context
    pod = run.pod if run is not None else None
    if explanation.kind != "Pod" or pod is None or not (pod.get("spec") or {}).get("schedulingGates"):
        return []
    pod_key = f"{explanation.namespace}/{explanation.name}"

    def mutate(objects: list[dict[str, Any]]) -> bool:
        target = find_object(objects, "Pod", pod_key)
        if target is None:
            return False
        (target.get("spec") or {}).pop("schedulingGates", None)
        return True

    return [Candidate("remove-scheduling-gates",
                      _fits("once the pod's scheduling gates are removed"),
                      mutate, {"schedulingGates": []})]


def _tolerate_node_taint(explanation: Explanation) -> list[Candidate]:
    if explanation.kind != "Pod":
        return []
    run = explanation.context
    pod_key = f"{explanation.namespace}/{explanation.name}"
    taints: dict[str, dict[str, Any]] = {}
    for node in explanation.nodes:
        if any(r.code == model.NODE_TAINT for r in node.reasons):
            cluster_node = run.cluster.nodes.get(node.node) if run is not None else None
            for taint in ((cluster_node or {}).get("spec") or {}).get("taints") or []:
                if taint.get("effect") in ("NoSchedule", "NoExecute"):
                    taints.setdefault(f"{taint.get('key')}={taint.get('value', '')}:{taint.get('effect')}", taint)
    candidates = []
    for text, taint in taints.items():
        toleration = {"key": taint.get("key", ""), "operator": "Equal", "value": taint.get("value", ""),
                      "effect": taint.get("effect", "")}

        def mutate(objects: list[dict[str, Any]], toleration: dict[str, Any] = toleration) -> bool:
            pod = find_object(objects, "Pod", pod_key)
            if pod is None:
                return False
            pod.setdefault("spec", {}).setdefault("tolerations", []).append(dict(toleration))
            return True

        candidates.append(Candidate(
            "tolerate-node-taint",
            _fits(f"if the pod tolerates node taint {text}"),
            mutate, {"toleration": toleration}))
    return candidates


def _release_claims(explanation: Explanation) -> list[Candidate]:
    counts: dict[str, int] = {}
    pods: dict[str, list[str]] = {}
    for node in explanation.nodes:
        if node.fits:
            continue
        for funnel in node.requests:
            for holder, n in funnel.holders.items():
                counts[holder] = counts.get(holder, 0) + n
                pods[holder] = funnel.holder_pods.get(holder, [])
    # Smallest first: fewest pods to delete, then fewest devices freed (every candidate is verified).
    order = sorted(counts, key=lambda key: (len(pods.get(key, [])), counts[key], key))
    candidates = []
    for holder in order[:MAX_RELEASE_CANDIDATES]:
        holder_pods = list(pods.get(holder, []))

        def mutate(objects: list[dict[str, Any]], holder: str = holder, holder_pods: list[str] = holder_pods) -> bool:
            changed = False
            for pod_key in holder_pods:
                pod = find_object(objects, "Pod", pod_key)
                if pod is not None:
                    objects.remove(pod)
                    changed = True
            claim = find_object(objects, "ResourceClaim", holder)
            if claim is not None:
                owners = {f"{holder.split('/', 1)[0]}/{ref.get('name')}"
                          for ref in (claim.get("metadata") or {}).get("ownerReferences") or []
                          if ref.get("kind") == "Pod"}
                if owners & set(holder_pods):
                    objects.remove(claim)
                else:
                    status = claim.get("status") or {}
                    status.pop("allocation", None)
                    status.pop("reservedFor", None)
                changed = True
            return changed

        pods_text = ""
        if holder_pods:
            pods_text = f" (deleting pod{'s' if len(holder_pods) > 1 else ''} {', '.join(holder_pods)})"
        candidates.append(Candidate(
            "release-claim",
            _fits(f"if claim {holder} is released{pods_text}"),
            mutate, {"claim": holder, "pods": holder_pods}))
    return candidates


def _reallocate_claims(explanation: Explanation) -> list[Candidate]:
    """The pod's own claim is allocated where the pod cannot go: free it from its other users so the
    scheduler can deallocate it and allocate it again elsewhere."""
    run = explanation.context
    if explanation.kind != "Pod" or run is None:
        return []
    target = f"{explanation.namespace}/{explanation.name}"
    claims = sorted({r.data["claim"] for n in explanation.nodes for r in n.reasons
                     if r.code == model.DRA_CLAIM_NODE and r.data.get("claim")})
    candidates = []
    for key in claims:
        claim = run.cluster.claims.get(key) or {}
        namespace = key.split("/", 1)[0]
        users = [f"{namespace}/{ref.get('name')}" for ref in (claim.get("status") or {}).get("reservedFor") or []]
        users = [u for u in dict.fromkeys(users) if u != target]

        def mutate(objects: list[dict[str, Any]], key: str = key, users: list[str] = users) -> bool:
            for pod_key in users:
                pod = find_object(objects, "Pod", pod_key)
                if pod is not None:
                    objects.remove(pod)
            claim_obj = find_object(objects, "ResourceClaim", key)
            if claim_obj is not None:
                status = claim_obj.get("status") or {}
                status.pop("allocation", None)
                status.pop("reservedFor", None)
            return claim_obj is not None or bool(users)

        users_text = f" (deleting pod{'s' if len(users) > 1 else ''} {', '.join(users)})" if users else ""
        candidates.append(Candidate(
            "reallocate-claim",
            _fits(f"if claim {key} is deallocated and allocated again{users_text}"),
            mutate, {"claim": key, "pods": users}))
    return candidates


def _count_limits(explanation: Explanation) -> dict[tuple[str, str], tuple[int, list[int]]]:
    """(claim, request) -> (count asked for, the most devices it could get on each failing node, best first).

    On one node every bound applies at once (free matching devices, room left among all requests, the largest
    group of a matchAttribute constraint), so the node's limit is the smallest. A node where too few devices
    stopped the funnel before the constraint was checked gives only an upper bound: its limit comes after the
    limits of nodes where the constraint was checked (`5 free` is no fit when a domain holds 4)."""
    checked: dict[tuple[str, str], set[int]] = {}  # key -> node limits where the constraint was checked
    unchecked: dict[tuple[str, str], set[int]] = {}
    needs: dict[tuple[str, str], int] = {}
    constrained: set[tuple[str, str]] = set()

    def bound(bounds: dict[tuple[str, str], int], key: tuple[str, str], need: int, limit: int) -> None:
        needs.setdefault(key, need)
        bounds[key] = min(limit, bounds.get(key, limit))

    for node in explanation.nodes:
        if node.fits:
            continue
        bounds: dict[tuple[str, str], int] = {}
        grouped: set[tuple[str, str]] = set()

        for reason in node.reasons:
            if reason.code == model.DRA_DEVICES and "free" in reason.data:
                bound(bounds, (reason.data["claim"], reason.data["request"]), int(reason.data["need"]),
                      int(reason.data["free"]))
            if reason.code == model.DRA_COMBINATION and reason.data.get("requests"):
                short = int(reason.data["need"]) - int(reason.data["free"])
                for entry in reason.data["requests"]:
                    bound(bounds, (entry["claim"], entry["request"]), int(entry["count"]),
                          int(entry["count"]) - short)
        for constraint in node.constraints:
            if len(constraint.requests) == 1 and constraint.groups:
                key = (constraint.claim, constraint.requests[0])
                bound(bounds, key, constraint.need, max(constraint.groups.values()))
                grouped.add(key)
                constrained.add(key)
        for key, limit in bounds.items():
            (checked if key in grouped else unchecked).setdefault(key, set()).add(limit)
    limits: dict[tuple[str, str], tuple[int, list[int]]] = {}
    for key, need in needs.items():
        sure, rest = checked.get(key, set()), unchecked.get(key, set())
        if key not in constrained:
            sure, rest = sure | rest, set()
        ordered = sorted(sure, reverse=True) + sorted(rest - sure, reverse=True)
        limits[key] = (need, [limit for limit in ordered if 0 < limit < need])
    return limits


def _lower_counts(explanation: Explanation) -> list[Candidate]:
    """The largest count some node could give, then (if that is not verified) the next: at most
    MAX_COUNTS_TRIED per request; the first that fits is the fix."""
    tries = [(key, need, free) for key, (need, found) in sorted(_count_limits(explanation).items())
             for free in found[:MAX_COUNTS_TRIED]]
    candidates = []
    for (claim, request), need, free in tries:
        def edit(body: dict[str, Any], free: int = free) -> bool:
            if (body.get("allocationMode") or "ExactCount") != "ExactCount":
                return False
            body["count"] = free
            return True

        made = _request_edit(explanation, claim, request, edit)
        if made is None:
            continue
        mutate, where = made
        candidates.append(Candidate(
            "lower-count",
            _fits(f"if request '{request}' in {where} asks for {free} instead of {need} devices"),
            mutate, {"claim": claim, "request": request, "count": free}))
    return candidates


def _use_existing_class(explanation: Explanation) -> list[Candidate]:
    import difflib

    run = explanation.context
    if run is None:
        return []
    classes = sorted(run.cluster.device_classes)
    candidates = []
    for claim_key, claim in sorted(run.cluster.claims.items()):
        for request in ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []:
            bodies = [(request.get("name", ""), request.get("exactly") or {})] + [
                (f"{request.get('name', '')}/{sub.get('name', '')}", sub) for sub in request.get("firstAvailable") or []]
            for name, body in bodies:
                missing = body.get("deviceClassName")
                if not missing or missing in run.cluster.device_classes:
                    continue
                if not _claim_of_target(explanation, claim_key):
                    continue
                for replacement in difflib.get_close_matches(missing, classes, n=2, cutoff=0.5):
                    def edit(b: dict[str, Any], replacement: str = replacement) -> bool:
                        b["deviceClassName"] = replacement
                        return True

                    made = _request_edit(explanation, claim_key, name, edit)
                    if made is None:
                        continue
                    mutate, where = made
                    candidates.append(Candidate(
                        "use-existing-class",
                        _fits(f"if request '{name}' in {where} uses DeviceClass {replacement!r} "
                              f"instead of the missing {missing!r}"),
                        mutate, {"claim": claim_key, "request": name, "deviceClassName": replacement}))
    return candidates


def _claim_of_target(explanation: Explanation, claim_key: str) -> bool:
    run = explanation.context
    if explanation.kind == "ResourceClaim":
        return claim_key == f"{explanation.namespace}/{explanation.name}"
    return run is not None and run.pod is not None and claim_key in run.cluster.pod_claim_keys(run.pod)


def _drop_selectors(explanation: Explanation) -> list[Candidate]:
    found: dict[tuple[str, str, int], str] = {}
    for node in explanation.nodes:
        for funnel in node.requests:
            previous = None
            for step in funnel.steps:
                if step.step == "selector" and previous is not None and step.count < previous:
                    found.setdefault((funnel.claim, funnel.request, step.index or 0), step.label)
                previous = step.count
    candidates = []
    for (claim, request, index), label in sorted(found.items()):
        def edit(body: dict[str, Any], index: int = index) -> bool:
            selectors = body.get("selectors") or []
            if index >= len(selectors):
                return False
            del selectors[index]
            return True

        made = _request_edit(explanation, claim, request, edit)
        if made is None:
            continue
        mutate, where = made
        expression = label.split(": ", 1)[-1]
        candidates.append(Candidate(
            "drop-selector",
            _fits(f"without selector #{index} ({short_expression(expression, 60)}) of request '{request}' in {where}"),
            mutate, {"claim": claim, "request": request, "removeSelector": index}))
    return candidates


def _lower_resources(explanation: Explanation) -> list[Candidate]:
    if explanation.kind != "Pod":
        return []
    from gpudra.explain.render import format_amount

    best: dict[str, tuple[int, int]] = {}  # resource -> (requested, most free on a node)
    for node in explanation.nodes:
        for reason in node.reasons:
            data = reason.data or {}
            if reason.code != model.INSUFFICIENT or not {"resource", "requested", "used", "capacity"} <= set(data):
                continue
            free = int(data["capacity"]) - int(data["used"])
            if free > best.get(data["resource"], (0, 0))[1]:
                best[data["resource"]] = (int(data["requested"]), free)
    pod_key = f"{explanation.namespace}/{explanation.name}"
    candidates = []
    for resource, (requested, free) in sorted(best.items()):
        if not 0 < free < requested or resource == "pods":
            continue
        amount = format_amount(resource, free)

        def mutate(objects: list[dict[str, Any]], resource: str = resource, amount: str = amount) -> bool:
            pod = find_object(objects, "Pod", pod_key)
            spec = (pod or {}).get("spec") or {}
            users = [c for c in (spec.get("initContainers") or []) + (spec.get("containers") or [])
                     if resource in ((c.get("resources") or {}).get("requests") or {})
                     or resource in ((c.get("resources") or {}).get("limits") or {})]
            if pod is None or len(users) != 1 or spec.get("overhead"):
                return False
            resources = users[0].setdefault("resources", {})
            resources.setdefault("requests", {})[resource] = amount
            if resource in (resources.get("limits") or {}):
                resources["limits"][resource] = amount
            return True

        candidates.append(Candidate(
            "lower-resource",
            _fits(f"if the pod requests {amount} {resource} instead of {format_amount(resource, requested)}"),
            mutate, {"resource": resource, "request": amount}))
    return candidates


def find_fixes(objects: list[dict[str, Any]], explanation: Explanation, policy: str = "kube",
               limit: int = MAX_FIXES, progress: simulate.Progress | None = None,
               features: Any = None, kubernetes_version: str | None = None, share: bool = True) -> list[Fix]:
    """Changes that make the target fit, tried on the cluster as the target met it: pods ahead in the
    queue keep their places, so "release claim X" frees exactly the devices X holds now. `share`: trials share
    the objects no run writes (`Trial`) and a release is judged on the nodes it changes first
    (`release_cannot_help`); False copies the whole snapshot and attempts the pod in full per trial (the same
    answers, slower)."""
    if explanation.context is None:
        explanation.context = simulate.Run(simulate.build_cluster(simulate.working_copy(objects), features,
                                                                  kubernetes_version), None)
    cluster = explanation.context.cluster
    base = simulate.snapshot(cluster, copy=False)  # never written: each trial copies what it may change
    written = written_by_a_run(cluster)
    candidates = (_remove_scheduling_gates(explanation) + _tolerate_device_taint(explanation) + _tolerate_node_taint(explanation)
                  + _release_claims(explanation) + _reallocate_claims(explanation) + _lower_counts(explanation)
                  + _use_existing_class(explanation) + _lower_resources(explanation)
                  + _drop_selectors(explanation))
    fixes: list[Fix] = []
    tried = 0
    for candidate in candidates:
        if tried >= MAX_CANDIDATES or len(fixes) >= limit:
            break
        if any(f.kind == candidate.kind for f in fixes):
            continue  # one fix of each kind: different options rather than variations of one
        released = candidate.change if share and candidate.kind == "release-claim" else None
        forked = release_on_fork(explanation, released) if released is not None else None
        if forked is not None:
            released = None  # judged on the fork: the trial below, if any, attempts the pod in full
            if release_cannot_help(forked, explanation, candidate.change, policy):
                tried += 1
                if progress is not None:
                    progress("verifying fixes", tried, min(MAX_CANDIDATES, len(candidates)))
                continue
        on_fork = getattr(candidate.mutate, "on_fork", None) if share and explanation.kind == "Pod" else None
        if on_fork is not None:  # a claim's request edited: attempted on a fork of the cluster, not a rebuilt one
            forked = on_fork(cluster)
            if forked is None:
                continue
            tried += 1
            if progress is not None:
                progress("verifying fixes", tried, min(MAX_CANDIDATES, len(candidates)))
            node = attempt_target(forked, explanation, policy)
        else:
            trial = Trial(base, written) if share else simulate.working_copy(base)
            if not candidate.mutate(trial):
                continue
            tried += 1
            if progress is not None:
                progress("verifying fixes", tried, min(MAX_CANDIDATES, len(candidates)))
            node = fits_with_change(trial, explanation, policy, features, kubernetes_version, released)
        if node is None:
            continue
        fixes.append(Fix(candidate.kind, candidate.describe(node), [node], candidate.change))
    return fixes
