"""Build an Explanation for a pod or a claim from the scheduler's verdicts plus the device funnels.

The scheduler (`gpudra.scheduler`) decides; this module asks it what it decided for the target pod on
every node, and for nodes the DynamicResources filter rejected (or would reject) it adds the funnel
per request, the failing constraints, pool problems and CEL errors. `fixes.py` then tries small changes.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from gpudra.errors import GpudraError
from gpudra.explain import model, simulate
from gpudra.explain.devices import SelectorSet
from gpudra.explain.dra import AllocatedDevices, analyze_node, devices_message
from gpudra.explain.model import CelErrorReport, Explanation, NodeExplanation, Reason
from gpudra.scheduler.framework import GANG_SCHEDULING, SCHEDULING_GATES
from gpudra.api.objectmeta import key_of

# scheduler plugin -> reason code
_PLUGIN_CODES = {
    "NodeUnschedulable": model.UNSCHEDULABLE,
    "NodeName": model.NODE_NAME,
    "TaintToleration": model.NODE_TAINT,
    "NodeAffinity": model.NODE_AFFINITY,
    "NodeResourcesFit": model.INSUFFICIENT,
}


class TargetError(GpudraError, ValueError):
    """The thing to explain does not exist or cannot be named; the message is for users."""


def parse_target(text: str) -> tuple[str, str]:
    """`pod/NAME`, `pods/NAME`, `po/NAME`, `claim/NAME`, `resourceclaim(s)/NAME` → (kind, name)."""
    kind, sep, name = text.partition("/")
    if not sep or not name or "/" in name:
        raise TargetError(f"cannot parse {text!r}: expected pod/NAME or claim/NAME")
    normal = kind.lower().split(".", 1)[0]
    if normal in ("pod", "pods", "po"):
        return "Pod", name
    if normal in ("claim", "claims", "resourceclaim", "resourceclaims"):
        return "ResourceClaim", name
    raise TargetError(f"cannot explain {kind!r}: only pods and ResourceClaims can be explained")


def explain(objects: list[dict[str, Any]], target: str, namespace: str = "default", policy: str = "kube",
            fixes: bool = True, progress: simulate.Progress | None = None, features: Any = None,
            kubernetes_version: str | None = None) -> Explanation:
    """`progress(what, done, total)` hears how far the replay and the fix search are (a CLI draws a bar);
    `kubernetes_version`: the release whose default gates apply (None: 1.36); `features`: the allocator's
    gates over them (gpudra.allocator.Features or token text)."""
    kind, name = parse_target(target)
    if kind == "Pod":
        explanation = explain_pod(objects, namespace, name, policy, progress, features, kubernetes_version)
    else:
        explanation = explain_claim(objects, namespace, name, features, kubernetes_version)
    if fixes and not explanation.fits:
        from gpudra.explain.fixes import find_fixes

        explanation.fixes = find_fixes(objects, explanation, policy, progress=progress, features=features,
                                       kubernetes_version=kubernetes_version)
    return explanation


# ------------------------------------------------------------------------------------------- pods


def explain_pod(objects: list[dict[str, Any]], namespace: str, name: str, policy: str = "kube",
                progress: simulate.Progress | None = None, features: Any = None,
                kubernetes_version: str | None = None) -> Explanation:
    run = simulate.run_until(simulate.working_copy(objects), f"{namespace}/{name}", policy, progress, features,
                             kubernetes_version)
    if run.pod is None:
        raise TargetError(_not_found("pod", namespace, name, run.cluster.pods))
    cluster, result = run.cluster, run.result
    num_nodes = len(cluster.nodes)
    if run.bound_node is not None:
        explanation = Explanation("Pod", namespace, name, True, "")
        devices = _claim_results(cluster, cluster.pod_claim_keys(run.pod))
        explanation.placement = {"node": run.bound_node, "devices": devices}
        explanation.summary = (f"already bound to node {run.bound_node}" if run.was_bound
                               else f"would be scheduled to node {run.bound_node}")
        if not run.was_bound and result is not None and result.preempted:
            # DefaultPreemption made room (gpudra.scheduler.preemption): the victims are what it costs
            explanation.placement["preempts"] = list(result.preempted)
            explanation.summary = (f"would preempt {', '.join(result.preempted)} on node {run.bound_node}, "
                                   "then be scheduled there")
        elif not run.was_bound and result is not None and result.scores:
            # only feasible nodes are scored; the scheduler stops looking once it has enough of them
            # (percentageOfNodesToScore), so this is a lower bound unless every node was scored
            scored = len(result.scores)
            explanation.summary += (f" ({scored}/{num_nodes} nodes fit)" if scored == num_nodes
                                    else f" (best of {scored} feasible node{'s' if scored != 1 else ''} scored)")
        if (run.pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            explanation.notes.append(f"the pod has finished (phase {run.pod['status']['phase']})")
        scheduler_name = (run.pod.get("spec") or {}).get("schedulerName")
        if scheduler_name not in (None, "", "default-scheduler") and not run.was_bound:
            explanation.notes.append(f"the pod is for scheduler {scheduler_name!r}: kube-scheduler leaves it "
                                     "alone; this is where kube-scheduler would put it")
        return explanation

    explanation = Explanation("Pod", namespace, name, False, "", context=run)
    if result is None:
        explanation.summary = "the pod was not attempted"
        return explanation
    if result.prefilter and result.prefilter[0].plugin == GANG_SCHEDULING or run.gang_note:
        explanation.summary = result.message()  # decided with its group (gpudra.scheduler.gangs)
        if run.gang_note:
            explanation.notes.append(run.gang_note)
        return explanation
    claims_to_allocate = _pending_claims(cluster, run.pod)
    selectors = SelectorSet(cluster.features.list_type_attributes)
    explanation.problems.extend(_prefilter_problems(result, cluster, claims_to_allocate, selectors, explanation))
    if result.prefilter:
        explanation.summary = _summary_for_pod_level(result, num_nodes)
        return explanation
    explanation.nodes = _node_explanations(run, selectors)
    explanation.notes.extend(cel_hints(explanation))
    explanation.notes.extend(_compute_domain_notes(objects, run, explanation))
    explanation.notes.extend(_preemption_notes(cluster, run.pod, result))
    if run.scheduled_before:
        explanation.notes.append(f"{len(run.scheduled_before)} pending pod(s) ahead in the queue were placed first: "
                                 + ", ".join(run.scheduled_before[:5])
                                 + (" …" if len(run.scheduled_before) > 5 else ""))
    if _fatal(result):
        explanation.summary = _summary_for_pod_level(result, num_nodes)
    else:
        explanation.summary = summary_line(num_nodes, explanation.nodes)
    return explanation


def _preemption_notes(cluster: Any, pod: dict[str, Any], result: Any) -> list[str]:
    """Why preemption did not make room where lower-priority pods hold what the pod wants
    (gpudra.scheduler.preemption has the upstream sources)."""
    from gpudra.scheduler.framework import DYNAMIC_RESOURCES
    from gpudra.scheduler.preemption import DRA_DEVICE_REJECTIONS, NEVER

    priority = cluster.pod_priority(pod)
    lower = {node for node, use in cluster.usage.items()
             if any(key in cluster.pods and cluster.pod_priority(cluster.pods[key]) < priority for key in use.pods)}
    if not lower:
        return []
    if (pod.get("spec") or {}).get("preemptionPolicy") == NEVER:
        return ["preemptionPolicy is Never: the pod preempts no lower-priority pod"]
    by_devices = sorted(node for node, verdict in result.filtered.items() if node in lower and any(
        r.plugin == DYNAMIC_RESOURCES and r.message in DRA_DEVICE_REJECTIONS for r in verdict.reasons))
    if not by_devices:
        return []
    return [f"lower-priority pods run on {len(by_devices)} node(s) rejected for devices ({', '.join(by_devices[:5])}"
            f"{' …' if len(by_devices) > 5 else ''}), but preemption frees no device held through a ResourceClaim: "
            "kube-scheduler up to 1.36 counts a DynamicResources rejection as unresolvable (DRA preemption, "
            "KEP-5690, is planned for a later release)"]


def _compute_domain_notes(objects: list[dict[str, Any]], run: Any, explanation: Explanation) -> list[str]:
    """A pod of a ComputeDomain workload: why in the domain's terms (gpudra.computedomain.fit)."""
    from gpudra.computedomain.fit import Tray, domain_notes, pod_domain
    from gpudra.computedomain.controller import CLIQUE_NODE_LABEL
    from gpudra.schedulinghelpers import pod_matches_node_selector_and_affinity

    domain = pod_domain(run.pod, objects)
    if domain is None:
        return []
    verdicts = {n.node: n for n in explanation.nodes}
    trays = []
    for name, node in sorted(run.cluster.nodes.items()):
        if not pod_matches_node_selector_and_affinity(run.pod, node):
            continue
        verdict = verdicts.get(name)
        clique = str(((node.get("metadata") or {}).get("labels") or {}).get(CLIQUE_NODE_LABEL, ""))
        why = "; ".join(r.message for r in verdict.reasons) if verdict is not None else ""
        trays.append(Tray(name, clique, verdict is None or verdict.fits, why))
    return domain_notes(run.pod, domain, list(run.cluster.pods.values()), list(run.cluster.nodes.values()), trays)


def cel_hints(explanation: Explanation) -> list[str]:
    """For `no such key` runtime errors: which key, and how to guard the lookup."""
    import re

    hints: list[str] = []
    for entry in explanation.nodes:
        for error in entry.cel_errors:
            match = re.search(r"no such key: ([A-Za-z0-9_./-]+)", error.message)
            if not match:
                continue
            key = match.group(1)
            domain = re.search(r"""device\.(?:attributes|capacity)\[\s*['"]([^'"]+)['"]\s*\]\s*(?:\.\s*|\[\s*['"])"""
                               + re.escape(key), error.expression)
            where = f"device.attributes['{domain.group(1)}']" if domain else "the map"
            hint = (f"{error.where} reads {key!r}, which device {error.device} does not have; check the name or "
                    f"guard it: '{key}' in {where} && …")
            if hint.split(" which device")[0] not in " ".join(hints):
                hints.append(hint)
    return hints


def _fatal(result: Any) -> bool:
    return bool(getattr(result, "error", None))


def _summary_for_pod_level(result: Any, num_nodes: int) -> str:
    if result.prefilter and result.prefilter[0].plugin == SCHEDULING_GATES:
        return result.message()  # no node was looked at
    if result.prefilter:
        messages = sorted({reason.message for reason in result.prefilter})
        return f"0/{num_nodes} nodes are available: {'; '.join(messages)}."
    return f"0/{num_nodes} nodes are available: {result.error}"


def _pending_claims(cluster: Any, pod: dict[str, Any]) -> list[dict[str, Any]]:
    """The pod's claims that still need an allocation."""
    claims = [cluster.claims.get(key) for key in cluster.pod_claim_keys(pod)]
    return [c for c in claims if c is not None and not (c.get("status") or {}).get("allocation")]


def _prefilter_problems(result: Any, cluster: Any, claims: list[dict[str, Any]], selectors: SelectorSet,
                        explanation: Explanation) -> list[str]:
    """Pod-wide problems: missing classes (with the closest existing names), CEL compile errors."""
    problems: list[str] = []
    for claim in claims:
        key = key_of(claim)
        for request in ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []:
            subrequests = request.get("firstAvailable") or [dict(request.get("exactly") or {}, name="")]
            for sub in subrequests:
                rname = request.get("name", "") + (f"/{sub['name']}" if sub.get("name") else "")
                class_name = sub.get("deviceClassName", "")
                if class_name and class_name not in cluster.device_classes:
                    problems.append(f"claim {key}, request {rname}: DeviceClass {class_name!r} does not exist"
                                    + _did_you_mean(class_name, cluster.device_classes))
                for index, selector in enumerate(sub.get("selectors") or []):
                    expression = ((selector or {}).get("cel") or {}).get("expression", "")
                    error = selectors.compile_error(expression)
                    if error:
                        explanation.cel_errors.append(CelErrorReport(
                            f"claim {key} request {rname} selector #{index}", expression, "", error))
    for class_name, device_class in sorted(cluster.device_classes.items()):
        for index, selector in enumerate((device_class.get("spec") or {}).get("selectors") or []):
            expression = ((selector or {}).get("cel") or {}).get("expression", "")
            if any(_uses_class(c, class_name) for c in claims):
                error = selectors.compile_error(expression)
                if error:
                    explanation.cel_errors.append(
                        CelErrorReport(f"class {class_name} selector #{index}", expression, "", error))
    return problems


def _uses_class(claim: dict[str, Any], class_name: str) -> bool:
    for request in ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []:
        if (request.get("exactly") or {}).get("deviceClassName") == class_name:
            return True
        if any(sub.get("deviceClassName") == class_name for sub in request.get("firstAvailable") or []):
            return True
    return False


def _did_you_mean(name: str, existing: dict[str, Any]) -> str:
    import difflib

    close = difflib.get_close_matches(name, sorted(existing), n=2, cutoff=0.5)
    if close:
        return f" (did you mean {' or '.join(repr(c) for c in close)}?)"
    if existing:
        return f" (existing classes: {', '.join(sorted(existing)[:5])})"
    return " (there are no DeviceClasses)"


def _node_explanations(run: Any, selectors: SelectorSet) -> list[NodeExplanation]:
    cluster = run.cluster
    allocated = AllocatedDevices.from_claims(cluster.claims.values(), _claim_pods(cluster))
    explanations = []
    for node_name in cluster.node_names():
        node = cluster.nodes[node_name]
        filtered = (run.evaluations or {}).get(node_name)
        claims = (run.claims_by_node or {}).get(node_name, [])
        entry = NodeExplanation(node_name, fits=bool(filtered is not None and filtered.fits))
        for reason in (filtered.reasons if filtered is not None else []):
            if reason.plugin != "DynamicResources":
                entry.reasons.append(Reason(_PLUGIN_CODES.get(reason.plugin, model.OTHER), reason.message,
                                            _plain(reason.details)))
            elif reason.message == "resourceclaim not available on the node":
                claim = reason.details.get("claim", "")
                entry.reasons.append(Reason(model.DRA_CLAIM_NODE, f"claim '{claim.split('/', 1)[-1]}' is allocated"
                                            f" for {_selector_text(reason.details.get('nodeSelector')) or 'other nodes'}",
                                            {"claim": claim}))
            else:
                error = None if reason.message == "cannot allocate all claims" else reason.message
                analysis = analyze_node(node, claims, cluster.slices, cluster.device_classes, allocated,
                                        selectors, allocator_error=error, labels=run.request_labels,
                                        index=_slice_index(cluster))
                entry.requests = analysis.requests
                entry.constraints = analysis.constraints
                entry.pool_problems = analysis.pool_problems
                entry.cel_errors = analysis.cel_errors
                entry.reasons.extend(analysis.reasons or [Reason(model.OTHER, reason.message)])
        if filtered is None:
            entry.reasons.append(Reason(model.OTHER, "not evaluated"))
        explanations.append(entry)
    return explanations


def _slice_index(cluster: Any) -> Any:
    """The allocator's own index of the cluster's slices, so pools are gathered exactly as it does."""
    allocator = cluster.allocator()
    index = getattr(allocator, "index", None)
    if index is None:
        from gpudra.explain.devices import slice_index

        index = slice_index(cluster.slices, cluster.features)
    return index


def _plain(details: Any) -> dict[str, Any]:
    """Scheduler reason details that are plain data (for -o json/yaml)."""
    if not isinstance(details, dict):
        return {}
    return {k: v for k, v in details.items() if isinstance(v, (str, int, float, bool, dict, list))}


def _claim_pods(cluster: Any) -> dict[str, list[str]]:
    """claim key -> pods using it, for claims the simulation allocated (reservedFor may lag)."""
    pods: dict[str, list[str]] = {}
    for key, pod in cluster.pods.items():
        for claim in cluster.pod_claim_keys(pod):
            pods.setdefault(claim, []).append(key)
    return pods


def _claim_results(cluster: Any, keys: list[str]) -> dict[str, list[dict[str, Any]]]:
    devices = {}
    for key in keys:
        claim = cluster.claims.get(key) or {}
        allocation = (claim.get("status") or {}).get("allocation") or {}
        devices[key] = [
            {k: r[k] for k in ("request", "driver", "pool", "device") if k in r}
            for r in (allocation.get("devices") or {}).get("results") or []
        ]
    return devices


# ------------------------------------------------------------------------------------------ summary


MAX_SUMMARY_REASONS = 10  # kinds of reason the one-line summary names; the rest are counted


def summary_line(num_nodes: int, nodes: list[NodeExplanation]) -> str:
    """`0/12 nodes are available: 8 nodes: <reason>; 4 nodes: <reason>.` — each node counted once, under
    its first reason (the first filter that rejected it, as kube-scheduler reports)."""
    available = sum(1 for n in nodes if n.fits)
    histogram: Counter = Counter()
    shortages: dict[tuple[str, str, int, str], list[int]] = {}  # (claim, request, need, label) -> free per node
    # (claim, constraint index, attribute, need) -> the node's message and its largest group, per node
    splits: dict[tuple[str, int, str, int], list[tuple[str, int]]] = {}
    for entry in nodes:
        if entry.fits or not entry.reasons:
            continue
        first = entry.reasons[0]
        if first.code == model.DRA_DEVICES and "free" in first.data:
            key = (first.data["claim"], first.data["request"], first.data["need"], first.data.get("label", ""))
            shortages.setdefault(key, []).append(first.data["free"])
            continue
        if first.code == model.DRA_CONSTRAINT and "best" in first.data:
            data = first.data
            splits.setdefault((data["claim"], data["index"], data["attribute"], data["need"]), []).append(
                (first.message, data["best"]))
            continue
        histogram[first.message] += 1
    # Nodes short of devices for the same request are one group, with the best node's count.
    for (claim, request, need, label), frees in shortages.items():
        subject = label or f"request '{request}' of claim '{claim.split('/', 1)[-1]}'"
        histogram[devices_message(subject, need, min(frees), max(frees))] += len(frees)
    # A constraint that fails alike on many nodes names each node's own attribute values (its NVLink domains):
    # one group, with the largest group any node has, unless every node said the same.
    for (claim, index, attribute, need), seen in splits.items():
        messages = {message for message, _ in seen}
        if len(messages) == 1:
            histogram[messages.pop()] += len(seen)
            continue
        best = max(best for _, best in seen)
        histogram[f"claim '{claim.split('/', 1)[-1]}' constraint #{index} matchAttribute {attribute}: at most "
                  f"{best} free with the same {attribute.rsplit('/', 1)[-1]} on a node; need {need}"] += len(seen)
    ranked = sorted(histogram.items(), key=lambda kv: (-kv[1], kv[0]))
    parts = [f"{n} node{'s' if n != 1 else ''}: {message}" for message, n in ranked[:MAX_SUMMARY_REASONS]]
    if len(ranked) > MAX_SUMMARY_REASONS:
        rest = ranked[MAX_SUMMARY_REASONS:]
        count = sum(n for _, n in rest)
        parts.append(f"{count} node{'s' if count != 1 else ''}: {len(rest)} other reasons (each node's own in its "
                     "section, -o wide or -o yaml)")
    head = f"{available}/{num_nodes} nodes are available"
    return f"{head}: {'; '.join(parts)}." if parts else f"{head}."


# ------------------------------------------------------------------------------------------- claims


def explain_claim(objects: list[dict[str, Any]], namespace: str, name: str, features: Any = None,
                  kubernetes_version: str | None = None) -> Explanation:
    """Why a claim cannot be allocated on any node, against the cluster as given (nothing is scheduled)."""
    cluster = simulate.build_cluster(simulate.working_copy(objects), features, kubernetes_version)
    key = f"{namespace}/{name}"
    claim = cluster.claims.get(key)
    if claim is None:
        raise TargetError(_not_found("claim", namespace, name, cluster.claims))
    explanation = Explanation("ResourceClaim", namespace, name, False, "")
    allocation = (claim.get("status") or {}).get("allocation")
    if allocation:
        explanation.fits = True
        explanation.placement = {"node": _selector_text(allocation.get("nodeSelector")),
                                 "devices": _claim_results(cluster, [key])}
        explanation.summary = "already allocated" + (
            f", usable on {explanation.placement['node']}" if explanation.placement["node"] else "")
        return explanation
    users = sorted(k for k, p in cluster.pods.items() if key in cluster.pod_claim_keys(p))
    if users:
        explanation.notes.append(f"used by pod {', '.join(users[:3])}{' …' if len(users) > 3 else ''}; "
                                 f"`explain pod/NAME` also checks cpu, memory, taints and node selectors, and "
                                 f"places pending pods ahead in the queue first")
    selectors = SelectorSet(cluster.features.list_type_attributes)
    fake = type("PreFilter", (), {"prefilter": [], "error": None})()
    explanation.problems.extend(_prefilter_problems(fake, cluster, [claim], selectors, explanation))
    allocated = AllocatedDevices.from_claims(cluster.claims.values(), _claim_pods(cluster))
    first_fit = None
    for node_name in cluster.node_names():
        node = cluster.nodes[node_name]
        outcome = simulate.fits(cluster, node, [claim])
        entry = NodeExplanation(node_name, fits=outcome.outcome == "allocated")
        if entry.fits:
            if first_fit is None:  # the devices of the first node that fits are shown: search them there
                first_fit = (node_name, simulate.allocate(cluster, node, [claim]).allocations)
        else:
            analysis = analyze_node(node, [claim], cluster.slices, cluster.device_classes, allocated, selectors,
                                    allocator_error=outcome.error if outcome.outcome == "error" else None,
                                    index=_slice_index(cluster))
            entry.requests, entry.constraints = analysis.requests, analysis.constraints
            entry.pool_problems, entry.cel_errors = analysis.pool_problems, analysis.cel_errors
            entry.reasons = analysis.reasons or [Reason(model.OTHER, "cannot allocate the claim")]
        explanation.nodes.append(entry)
    if first_fit is not None:
        node_name, allocations = first_fit
        explanation.fits = True
        results = ((allocations[0] if allocations else {}).get("devices") or {}).get("results") or []
        explanation.placement = {"node": node_name, "devices": {key: [
            {k: r[k] for k in ("request", "driver", "pool", "device") if k in r} for r in results]}}
        fitting = sum(1 for n in explanation.nodes if n.fits)
        explanation.summary = (f"can be allocated on {fitting}/{len(explanation.nodes)} nodes; "
                               f"the first is {node_name}")
        return explanation
    explanation.summary = summary_line(len(cluster.nodes), explanation.nodes)
    return explanation


def _selector_text(selector: Any) -> str:
    if not selector:
        return ""
    terms = []
    for term in selector.get("nodeSelectorTerms") or []:
        parts = []
        for req in (term.get("matchFields") or []) + (term.get("matchExpressions") or []):
            values = ",".join(req.get("values") or [])
            key = "node" if req.get("key") == "metadata.name" else req.get("key")
            parts.append(f"{key} {req.get('operator')} [{values}]" if req.get("operator") != "In" or
                         len(req.get("values") or []) != 1 else f"{key}={values}")
        terms.append(" and ".join(parts))
    return " or ".join(terms)


def _not_found(kind: str, namespace: str, name: str, existing: dict[str, Any]) -> str:
    import difflib

    in_namespace = sorted(k.split("/", 1)[1] for k in existing if k.startswith(f"{namespace}/"))
    elsewhere = sorted(k for k in existing if k.endswith(f"/{name}") and not k.startswith(f"{namespace}/"))
    message = f"{kind} {namespace}/{name} not found"
    if elsewhere:
        return message + f" (it exists as {', '.join(elsewhere)}; use -n)"
    close = difflib.get_close_matches(name, in_namespace, n=3, cutoff=0.6)
    if close:
        return message + f" (did you mean {', '.join(close)}?)"
    return message


__all__ = ["TargetError", "explain", "explain_claim", "explain_pod", "parse_target", "summary_line"]
