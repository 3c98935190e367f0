"""Why the DynamicResources filter rejects a node: funnels, constraints, pool problems, CEL errors."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Iterable

from gpudra.allocator.model import quantity_nanos
from gpudra.explain import model
from gpudra.explain.devices import (
    DeviceRef,
    FunnelContext,
    SelectorSet,
    device_value,
    funnel,
    request_specs,
    visible_pools,
)
from gpudra.explain.model import CelErrorReport, ConstraintReport, Reason, RequestFunnel
from gpudra.api.objectmeta import key_of


def claim_name(key: str) -> str:
    return key.split("/", 1)[-1]


@dataclass
class AllocatedDevices:
    """Which claim holds which device; admin-access results do not hold devices (as upstream)."""

    holders: dict[str, list[str]] = field(default_factory=dict)  # device id -> claim keys
    pods: dict[str, list[str]] = field(default_factory=dict)  # claim key -> pods reserving it
    capacity_used: dict[str, dict[str, int]] = field(default_factory=dict)  # device id -> shares' consumption
    share_holders: dict[str, list[str]] = field(default_factory=dict)  # device id -> claims holding shares

    @classmethod
    def from_claims(cls, claims: Iterable[dict[str, Any]], extra_pods: dict[str, list[str]] | None = None) -> "AllocatedDevices":
        state = cls()
        for claim in claims:
            allocation = (claim.get("status") or {}).get("allocation")
            if not allocation:
                continue
            key = key_of(claim)
            namespace = key.split("/", 1)[0]
            for result in (allocation.get("devices") or {}).get("results") or []:
                device_id = f"{result.get('driver')}/{result.get('pool')}/{result.get('device')}"
                if result.get("shareID") and not result.get("adminAccess"):
                    sharers = state.share_holders.setdefault(device_id, [])
                    if key not in sharers:
                        sharers.append(key)
                    used = state.capacity_used.setdefault(device_id, {})
                    for name, amount in (result.get("consumedCapacity") or {}).items():
                        used[name] = used.get(name, 0) + (quantity_nanos(amount) or 0)
                if result.get("adminAccess") or result.get("shareID"):
                    continue  # neither holds the device exclusively
                state.holders.setdefault(device_id, []).append(key)
            pods: list[str] = []
            for ref in (claim.get("status") or {}).get("reservedFor") or []:
                pod = f"{namespace}/{ref.get('name')}"
                if ref.get("resource", "pods") == "pods" and ref.get("name") and pod not in pods:
                    pods.append(pod)
            if not pods and extra_pods:
                pods = list(extra_pods.get(key, []))
            state.pods[key] = pods
        return state

    @cached_property
    def allocated(self) -> set[str]:
        """Device ids held by a claim (built once: every node's analysis asks)."""
        return set(self.holders)


@dataclass
class DraNodeAnalysis:
    reasons: list[Reason] = field(default_factory=list)
    requests: list[RequestFunnel] = field(default_factory=list)
    constraints: list[ConstraintReport] = field(default_factory=list)
    pool_problems: list[str] = field(default_factory=list)
    cel_errors: list[CelErrorReport] = field(default_factory=list)


def _plural(n: int, word: str, plural: str | None = None) -> str:
    return f"{n} {word if n == 1 else (plural or word + 's')}"


def lookup_attribute(ref: DeviceRef, qualified: str) -> str | None:
    """matchAttribute lookup: the full name, or the bare id when the domain is the device's driver."""
    domain, _, ident = qualified.rpartition("/")
    attributes = ref.device.get("attributes") or {}
    raw = attributes.get(qualified)
    if raw is None and domain == ref.driver:
        raw = attributes.get(ident)
    if not isinstance(raw, dict):
        return None
    for typ in ("string", "int", "bool", "version"):
        if typ in raw:
            return str(raw[typ]).lower() if typ == "bool" else str(raw[typ])
    return None


def analyze_node(
    node: dict[str, Any],
    claims: list[dict[str, Any]],
    slices: list[dict[str, Any]],
    classes: dict[str, dict[str, Any]],
    allocated: AllocatedDevices,
    selectors: SelectorSet | None = None,
    allocator_error: str | None = None,
    labels: dict[tuple[str, str], str] | None = None,
    index: Any = None,
) -> DraNodeAnalysis:
    """Funnels for every request of `claims` on `node`, and the reasons they do not fit together.

    `index` is the allocator's SliceIndex when one exists (saves re-reading every slice per node)."""
    analysis = DraNodeAnalysis()
    pools = visible_pools(node, slices, index=index)
    analysis.pool_problems = [f"pool {p.id} is {p.problem}" for p in pools if p.problem]
    ctx = FunnelContext(pools=pools, classes=classes, allocated=allocated.allocated, holders=allocated.holders,
                        claim_pods=lambda key: allocated.pods.get(key, []), selectors=selectors or SelectorSet(
                            getattr(getattr(index, "features", None), "list_type_attributes", False)),
                        capacity_used=allocated.capacity_used, share_holders=allocated.share_holders,
                        device_taints=getattr(getattr(index, "features", None), "device_taints", True),
                        partitionable_devices=getattr(getattr(index, "features", None), "partitionable_devices", True),
                        evaluator=getattr(index, "evaluator", None))

    survivors_by_request: dict[tuple[str, str], list[DeviceRef]] = {}
    need_by_request: dict[tuple[str, str], int] = {}
    shortages: list[Reason] = []
    for claim in claims:
        key = key_of(claim)
        for request in ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []:
            specs = request_specs(key, request)
            results = []
            for spec in specs:
                result, survivors = funnel(spec, ctx, analysis.cel_errors)
                analysis.requests.append(result)
                results.append((spec, result, survivors))
            fitting = [(spec, result, survivors) for spec, result, survivors in results
                       if _enough(spec, result)]
            base = str(request.get("name", ""))
            if fitting:
                spec, result, survivors = fitting[0]
                survivors_by_request[(key, base)] = survivors
                need_by_request[(key, base)] = _need(spec, result)
            else:
                shortages.append(_shortage(key, base, results, (labels or {}).get((key, base))))
    analysis.reasons.extend(shortages)
    if not shortages:
        analysis.reasons.extend(_constraint_reasons(claims, survivors_by_request, need_by_request, analysis))
    if not analysis.reasons:
        analysis.reasons.extend(_combination_reasons(survivors_by_request, need_by_request))
    if allocator_error:
        # The allocator stopped on an error: that is the reason, the shortages are its side effect.
        analysis.reasons = [Reason(model.DRA_ERROR, allocator_error)]
        analysis.constraints = []
    if analysis.pool_problems and not shortages and not analysis.constraints:
        analysis.reasons.append(Reason(model.DRA_POOL, "; ".join(analysis.pool_problems)))
    return analysis


def _matching(result: RequestFunnel) -> int:
    """Devices matching class and selectors, before availability."""
    count = 0
    for step in result.steps:
        if step.step in ("free", "tolerated", "counters", "capacity"):
            break
        count = step.count
    return count


def _enough(spec: Any, result: RequestFunnel) -> bool:
    if spec.mode == "All":
        matching = _matching(result)
        return matching > 0 and result.available == matching
    return result.available >= spec.count


def _need(spec: Any, result: RequestFunnel) -> int:
    return _matching(result) if spec.mode == "All" else spec.count


def _shortage(key: str, request: str, results: list[tuple[Any, RequestFunnel, list[DeviceRef]]],
              label: str | None = None) -> Reason:
    subject = label or f"request '{request}' of claim '{claim_name(key)}'"
    if len(results) == 1:
        spec, result, _ = results[0]
        if spec.mode == "All":
            return Reason(model.DRA_ALL, f"{subject} {_shortage_text(spec, result)}")
        data = {"claim": key, "request": request, "need": spec.count, "free": result.available}
        if label:
            data["label"] = label
        return Reason(model.DRA_DEVICES, devices_message(subject, spec.count, result.available, result.available),
                      data)
    parts = [f"{spec.name.split('/', 1)[1]}: {_shortage_text(spec, result)}" for spec, result, _ in results]
    return Reason(model.DRA_DEVICES, f"{subject}: no alternative fits ({'; '.join(parts)})")


def _shortage_text(spec: Any, result: RequestFunnel) -> str:
    if spec.mode == "All":
        matching = _matching(result)
        if matching == 0:
            return "asks for all matching devices, but none match"
        return f"asks for all {matching} matching devices, {result.available} can be allocated"
    return _needs_text(spec.count, result.available, result.available)


def _needs_text(need: int, low: int, high: int) -> str:
    if high == 0:
        return f"needs {_plural(need, 'device')}, no free device matches"
    if low != high:
        return f"needs {_plural(need, 'device')}, at most {high} free {'matches' if high == 1 else 'match'}"
    return f"needs {_plural(need, 'device')}, {high} free {'matches' if high == 1 else 'match'}"


def devices_message(subject: str, need: int, low: int, high: int) -> str:
    """`request 'gpu' of claim 'c' needs 2 devices, 1 free matches`; with a range when nodes differ."""
    return f"{subject} {_needs_text(need, low, high)}"


def _constraint_reasons(claims: list[dict[str, Any]], survivors: dict[tuple[str, str], list[DeviceRef]],
                        needs: dict[tuple[str, str], int], analysis: DraNodeAnalysis) -> list[Reason]:
    reasons = []
    for claim in claims:
        key = key_of(claim)
        devices = (claim.get("spec") or {}).get("devices") or {}
        request_names = [str(r.get("name", "")) for r in devices.get("requests") or []]
        for index, constraint in enumerate(devices.get("constraints") or []):
            attribute = constraint.get("matchAttribute")
            if not attribute:
                continue
            applies = [r.split("/", 1)[0] for r in constraint.get("requests") or []] or request_names
            applies = [r for r in request_names if r in applies]
            pool: dict[str, DeviceRef] = {}
            for request in applies:
                for ref in survivors.get((key, request), []):
                    pool[ref.id] = ref
            need = sum(needs.get((key, r), 0) for r in applies)
            groups: Counter = Counter()
            missing = 0
            for ref in pool.values():
                value = lookup_attribute(ref, attribute)
                if value is None:
                    missing += 1
                else:
                    groups[value] += 1
            best = max(groups.values(), default=0)
            if best >= need:
                continue
            ordered = dict(sorted(groups.items(), key=lambda kv: (-kv[1], kv[0])))
            report = ConstraintReport(key, index, attribute, applies, need, ordered, missing)
            analysis.constraints.append(report)
            reasons.append(Reason(model.DRA_CONSTRAINT,
                                  f"claim '{claim_name(key)}' constraint #{index} matchAttribute {attribute}: "
                                  f"{report.message}",
                                  {"claim": key, "index": index, "attribute": attribute, "need": need,
                                   "best": best}))
    return reasons


def _combination_reasons(survivors: dict[tuple[str, str], list[DeviceRef]],
                         needs: dict[tuple[str, str], int]) -> list[Reason]:
    if not survivors:
        return []
    distinct = {ref.id for refs in survivors.values() for ref in refs}
    total = sum(needs.values())
    claims = sorted({key for key, _ in survivors})
    names = ", ".join(f"'{claim_name(k)}'" for k in claims)
    if len(distinct) < total:
        subject = f"claims {names} need" if len(claims) > 1 else f"claim {names} needs"
        requests = [{"claim": key, "request": request, "count": n} for (key, request), n in needs.items()]
        return [Reason(model.DRA_COMBINATION,
                       f"{subject} {total} devices for all requests together, only {len(distinct)} distinct free "
                       f"devices match", {"need": total, "free": len(distinct), "requests": requests})]
    uses_counters = any(ref.device.get("consumesCounters") for refs in survivors.values() for ref in refs)
    if uses_counters:
        return [Reason(model.DRA_COMBINATION,
                       f"claim{'s' if len(claims) > 1 else ''} {names}: shared counters are not enough for "
                       f"all {total} devices together")]
    return [Reason(model.DRA_COMBINATION,
                   f"no combination of free devices satisfies every request and constraint of {names} together")]


def holders_of(analysis: DraNodeAnalysis) -> list[str]:
    """Claims holding devices that would otherwise match, most matching devices first."""
    counts: Counter = Counter()
    for request in analysis.requests:
        for key, n in request.holders.items():
            counts[key] += n
    return [key for key, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]


def untolerated_taints_seen(analysis: DraNodeAnalysis) -> list[tuple[str, str]]:
    """(request key "claim|request", taint text) pairs where a taint removed devices."""
    seen = []
    for request in analysis.requests:
        step = request.step("tolerated")
        if step is None:
            continue
        for detail in step.details:
            marker = "untolerated taint "
            if marker in detail:
                pair = (f"{request.claim}|{request.request}", detail.split(marker, 1)[1])
                if pair not in seen:
                    seen.append(pair)
    return seen


__all__ = [
    "AllocatedDevices",
    "DraNodeAnalysis",
    "analyze_node",
    "holders_of",
    "lookup_attribute",
    "untolerated_taints_seen",
    "device_value",
]
