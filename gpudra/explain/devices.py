"""The device funnel: for one node and one request, how many devices survive each condition.

The allocator decides whether a pod fits; this module says *why not* in numbers a person can check
against `kubectl get resourceslices`: devices in node-visible pools → matching the DeviceClass →
matching each selector → not in use → taints tolerated → counters available.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from gpudra.quantity import Quantity, QuantityError
from gpudra.explain.model import CelErrorReport, FunnelStep, RequestFunnel

MAX_DETAILS = 5
MAX_CEL_ERRORS_PER_SELECTOR = 3


@dataclass
class DeviceRef:
    driver: str
    pool: str
    slice_name: str
    device: dict[str, Any]
    per_device_node_selection: bool = False
    info: Any = None  # the allocator's DeviceInfo (precomputed capacities, counters)
    name: str = field(init=False)
    id: str = field(init=False)  # asked of each device at every step of the funnel, on every node

    def __post_init__(self) -> None:
        self.name = str(self.device.get("name", ""))
        self.id = f"{self.driver}/{self.pool}/{self.name}"


@dataclass
class PoolView:
    driver: str
    name: str
    generation: int
    devices: list[DeviceRef] = field(default_factory=list)  # devices of slices that target the node
    all_devices: list[DeviceRef] = field(default_factory=list)  # for counter accounting
    counter_sets: dict[str, dict[str, int]] = field(default_factory=dict)  # set -> counter -> nanos
    problem: str = ""  # "incomplete: ..." / "invalid: ..."

    @property
    def id(self) -> str:
        return f"{self.driver}/{self.name}"


# ------------------------------------------------------------------------------------------ pools


def _node_matches(node: dict[str, Any], node_name: Any, all_nodes: Any, selector: Any) -> bool:
    from gpudra.allocator.nodematch import NodeInfo, node_matches

    return node_matches(NodeInfo.of(node), node_name or None, bool(all_nodes), selector)


def slice_index(slices: Iterable[dict[str, Any]], features: Any = "default") -> Any:
    from gpudra.allocator.features import Features
    from gpudra.allocator.pools import SliceIndex

    return SliceIndex(list(slices), Features.parse(features))


def visible_pools(node: dict[str, Any], slices: Iterable[dict[str, Any]] | None = None,
                  index: Any = None) -> list[PoolView]:
    """Pools the allocator considers for `node`, in its visiting order (the allocator's own gathering).

    A pool whose slices are not all published is "incomplete" and one with duplicate device names or
    unknown counter sets is "invalid"; the allocator skips both, so their devices do not count as visible.
    """
    from gpudra.allocator.nodematch import NodeInfo

    if index is None:
        index = slice_index(slices or [])
    views: list[PoolView] = []
    for pool in index.gather(NodeInfo.of(node)):
        same = index.by_pool.get(pool.id, [])
        generation = max((s.generation for s in same), default=0)
        view = PoolView(driver=pool.driver, name=pool.name, generation=generation)
        if pool.incomplete:
            published = sum(1 for s in same if s.generation == generation)
            expected = max((s.slice_count for s in same if s.generation == generation), default=0)
            view.problem = f"incomplete: {published} of {expected} ResourceSlices published"
            view.devices = [_ref(d) for s in same if s.generation == generation and index.targets(s, NodeInfo.of(node))
                            for d in s.devices]
            views.append(view)
            continue
        if pool.invalid_reason:
            view.problem = f"invalid: {pool.invalid_reason}"
        view.counter_sets = {name: dict(counters) for name, counters in pool.counter_sets.items()}
        if view.counter_sets:  # a pool without counter sets has nothing to account (one using them is invalid)
            view.all_devices = [_ref(d) for s in pool.all_device_slices for d in s.devices]
        for device in pool.devices:
            if device.slice.per_device_node_selection and not _node_matches(
                    node, device.node_name, device.all_nodes, device.node_selector):
                continue
            view.devices.append(_ref(device))
        views.append(view)
    return views


def _ref(device: Any) -> DeviceRef:
    return DeviceRef(device.driver, device.pool, device.slice.name, device.raw, device.slice.per_device_node_selection,
                     device)


def available_counters(pool: PoolView, allocated: set[str]) -> dict[str, dict[str, int]]:
    """The pool's counters minus what allocated devices consume (the allocator's own accounting)."""
    from gpudra.allocator.counters import counters_left

    return counters_left(pool.counter_sets, (ref.info for ref in pool.all_devices if ref.info is not None),
                         lambda key: "/".join(key) in allocated)


# ------------------------------------------------------------------------------------- selectors


class SelectorSet:
    """Compiled CEL selectors, cached by expression; evaluation errors are reported, never raised.

    `list_type_attributes`: the allocator's DRAListTypeAttributes setting, which decides how attribute values are
    typed (so whether `attr.tags.exists(…)` compiles) and whether list attributes are visible: explain must see
    devices as the allocator whose answer it explains does."""

    def __init__(self, list_type_attributes: bool = False) -> None:  # off: the default gates of every release
        self.list_type_attributes = list_type_attributes
        self._compiled: dict[str, Any] = {}
        self._compile_errors: dict[str, str] = {}
        self._inputs: dict[int, Any] = {}

    def compile_error(self, expression: str) -> str | None:
        self._compile(expression)
        return self._compile_errors.get(expression)

    def _compile(self, expression: str) -> Any:
        if expression in self._compiled:
            return self._compiled[expression]
        if expression in self._compile_errors:
            return None
        # The allocator's compile cache, in the allocator's environment.
        from gpudra.allocator.selection import compile_expression

        compiled = compile_expression(expression, True, self.list_type_attributes)
        if isinstance(compiled, Exception):
            self._compile_errors[expression] = str(compiled)
            return None
        self._compiled[expression] = compiled
        return compiled

    def evaluate(self, expression: str, ref: DeviceRef, shared: Any = None) -> tuple[bool, str | None]:
        """(matches, runtime error). A compile error counts as "does not match" here.

        `shared`: the allocator's SelectorEvaluator; where it sees the device as this set does (see `_same_input`)
        its outcome is taken, so a selector the scheduler already ran on a device is not evaluated again."""
        compiled = self._compile(expression)
        if compiled is None:
            return False, None
        if shared is not None and ref.info is not None and _same_input(shared, ref, self.list_type_attributes):
            outcome = shared.evaluate(expression, ref.info)
            if outcome is True or outcome is False:
                return outcome, None
            return False, outcome[1]  # ("runtime", message); compile errors were answered above
        from gpudra import cel

        key = id(ref.device)
        inp = self._inputs.get(key)
        if inp is None:
            try:
                inp = cel.device_input(ref.driver, ref.device, list_type_attributes=self.list_type_attributes)
            except cel.CELRuntimeError as exc:
                return False, str(exc)
            self._inputs[key] = inp
        try:
            return bool(compiled.evaluate(inp)), None
        except cel.CELRuntimeError as exc:
            return False, str(exc)


def _same_input(evaluator: Any, ref: DeviceRef, list_type_attributes: bool) -> bool:
    """Whether the allocator's evaluator hands CEL the device as `cel.device_input(driver, device)` does here: the
    same DRAListTypeAttributes setting and allowMultipleAllocations visible or absent."""
    return (evaluator.list_type_attributes == list_type_attributes and ref.info.raw is ref.device
            and (evaluator.multiple_allocations_visible or not ref.device.get("allowMultipleAllocations")))


def selector_expressions(obj_selectors: Any) -> list[str]:
    return [str(((s or {}).get("cel") or {}).get("expression", "")) for s in obj_selectors or []]


# ----------------------------------------------------------------------------------------- taints


def untolerated_taints(device: dict[str, Any], tolerations: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The device's taints that block the request (the allocator's rule)."""
    from gpudra.allocator.claims import untolerated_taints as blocking

    return blocking([t for t in device.get("taints") or [] if isinstance(t, dict)], tolerations)


def taint_text(taint: dict[str, Any]) -> str:
    value = taint.get("value")
    return f"{taint.get('key', '')}{'=' + str(value) if value else ''}:{taint.get('effect', '')}"


# ----------------------------------------------------------------------------------------- funnel


@dataclass
class RequestSpec:
    """One (sub)request as the allocator sees it."""

    claim: str
    name: str  # "gpu" or "gpu/large"
    device_class: str
    selectors: list[str]
    mode: str
    count: int
    tolerations: list[dict[str, Any]]
    admin_access: bool = False
    capacity: dict[str, Any] = field(default_factory=dict)


def request_specs(claim_key: str, request: dict[str, Any]) -> list[RequestSpec]:
    """The request itself, or each firstAvailable subrequest in order."""
    name = str(request.get("name", ""))
    if request.get("firstAvailable"):
        return [_spec(claim_key, f"{name}/{sub.get('name', '')}", sub) for sub in request["firstAvailable"]]
    return [_spec(claim_key, name, request.get("exactly") or {}, admin=True)]


def _spec(claim_key: str, name: str, exact: dict[str, Any], admin: bool = False) -> RequestSpec:
    from gpudra.allocator.claims import request_mode_and_count

    mode, count = request_mode_and_count(exact)  # the allocator's reading, defaulting included
    return RequestSpec(
        claim=claim_key,
        name=name,
        device_class=str(exact.get("deviceClassName", "")),
        selectors=selector_expressions(exact.get("selectors")),
        mode=mode,
        count=count if mode != "All" else 1,
        tolerations=list(exact.get("tolerations") or []),
        admin_access=bool(exact.get("adminAccess")) if admin else False,
        capacity=dict((exact.get("capacity") or {}).get("requests") or {}),
    )


@dataclass
class FunnelContext:
    pools: list[PoolView]
    classes: dict[str, dict[str, Any]]
    allocated: set[str]  # device ids held by allocated claims
    holders: dict[str, list[str]]  # device id -> claim keys
    claim_pods: Callable[[str], list[str]]
    selectors: SelectorSet
    capacity_used: dict[str, dict[str, int]] = field(default_factory=dict)  # device id -> shared capacity used
    share_holders: dict[str, list[str]] = field(default_factory=dict)  # device id -> claims holding shares
    counters_left: dict[str, dict[str, dict[str, int]]] = field(default_factory=dict)  # pool id -> ...
    device_taints: bool = True  # the DRADeviceTaints gate: off, the allocator ignores device taints
    # the DRAPartitionableDevices gate: off, the allocator never picks a device that consumes counters
    partitionable_devices: bool = True
    evaluator: Any = None  # the allocator's SelectorEvaluator, whose outcomes SelectorSet.evaluate reuses

    def counters_for(self, pool: PoolView) -> dict[str, dict[str, int]]:
        if pool.id not in self.counters_left:
            self.counters_left[pool.id] = available_counters(pool, self.allocated)
        return self.counters_left[pool.id]


def _details(counter: Counter, fmt: Callable[[str, int], str]) -> list[str]:
    items = sorted(counter.items(), key=lambda kv: (-kv[1], kv[0]))
    out = [fmt(key, n) for key, n in items[:MAX_DETAILS]]
    if len(items) > MAX_DETAILS:
        out.append(f"… and {len(items) - MAX_DETAILS} more")
    return out


def short_expression(expression: str, limit: int = 80) -> str:
    text = " ".join(expression.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def funnel(spec: RequestSpec, ctx: FunnelContext, cel_errors: list[CelErrorReport]) -> tuple[RequestFunnel, list[DeviceRef]]:
    """The funnel of one (sub)request on one node, and the devices that survive it."""
    result = RequestFunnel(spec.claim, spec.name, spec.device_class, spec.mode,
                           spec.count if spec.mode == "ExactCount" else None)
    devices = [ref for pool in ctx.pools if not pool.problem for ref in pool.devices]
    problems = [p for p in ctx.pools if p.problem]
    details = [f"pool {p.id} is {p.problem} ({len(p.devices)} devices not usable)" for p in problems]
    result.steps.append(FunnelStep("visible", "devices in node-visible pools", len(devices), details))

    if not devices:
        return result, []
    device_class = ctx.classes.get(spec.device_class)
    if device_class is None:
        result.steps.append(FunnelStep("class", f"DeviceClass {spec.device_class}", 0,
                                       [f"DeviceClass {spec.device_class!r} does not exist"]))
        return result, []
    class_selectors = selector_expressions((device_class.get("spec") or {}).get("selectors"))
    before = devices
    devices = _apply_selectors(devices, class_selectors, ctx, cel_errors, f"class {spec.device_class}")
    class_details = []
    if len(devices) < len(before):
        drivers = Counter(ref.driver for ref in before)
        class_details = ["drivers seen: " + ", ".join(f"{d} ×{n}" for d, n in sorted(drivers.items()))]
        for expression in class_selectors:
            class_details.extend(_attribute_values(expression, before))
    result.steps.append(FunnelStep("class", f"matching DeviceClass {spec.device_class}", len(devices),
                                   class_details))
    for index, expression in enumerate(spec.selectors):
        before = devices
        devices = _apply_selectors(devices, [expression], ctx, cel_errors,
                                   f"claim {spec.claim} request {spec.name} selector #{index}", index)
        details = _attribute_values(expression, before) if len(devices) < len(before) else []
        result.steps.append(FunnelStep("selector", f"selector #{index}: {short_expression(expression)}",
                                       len(devices), details, index=index))

    if not spec.admin_access:
        held: Counter[str] = Counter()
        free = []
        for ref in devices:
            if ref.id in ctx.allocated:
                for holder in ctx.holders.get(ref.id, ["(unknown claim)"]):
                    held[holder] += 1
            else:
                free.append(ref)
        for holder, n in sorted(held.items()):
            result.holders[holder] = n
            result.holder_pods[holder] = ctx.claim_pods(holder)
        result.steps.append(FunnelStep("free", "not in use", len(free), _details(
            held, lambda key, n: f"{n} held by claim {key}" + _pods_suffix(ctx.claim_pods(key)))))
        devices = free

    tainted: Counter[str] = Counter()
    tolerated = []
    for ref in devices:
        # a device without taints has none to tolerate (most devices: the rule is not asked)
        bad = untolerated_taints(ref.device, spec.tolerations) if ctx.device_taints and ref.device.get("taints") else []
        if bad:
            tainted[taint_text(bad[0])] += 1
            result.taints.setdefault(taint_text(bad[0]), {k: bad[0][k] for k in ("key", "value", "effect")
                                                           if bad[0].get(k)})
        else:
            tolerated.append(ref)
    if tainted or any(ref.device.get("taints") for ref in devices):
        result.steps.append(FunnelStep("tolerated", "taints tolerated", len(tolerated),
                                       _details(tainted, lambda key, n: f"{n} with untolerated taint {key}")))
    devices = tolerated

    if any(ref.device.get("consumesCounters") for ref in devices):
        short: Counter[str] = Counter()
        fitting = []
        pools = {p.id: p for p in ctx.pools}
        users: dict[str, list[str]] = {}
        for ref in devices:
            pool = pools[f"{ref.driver}/{ref.pool}"]
            if not ctx.partitionable_devices and ref.device.get("consumesCounters"):
                lacking = "the DRAPartitionableDevices feature gate (off)"
            else:
                lacking = _lacking_counter(ref, ctx.counters_for(pool))
            if lacking:
                short[lacking] += 1
                for holder in _counter_users(ref, pool, ctx):
                    users.setdefault(lacking, [])
                    if holder not in users[lacking]:
                        users[lacking].append(holder)
                    result.holders.setdefault(holder, 0)
                    result.holder_pods.setdefault(holder, ctx.claim_pods(holder))
            else:
                fitting.append(ref)

        def counter_detail(key: str, n: int) -> str:
            holders = users.get(key, [])
            used = f"; consumed by claim {', '.join(holders[:3])}" if holders else ""
            return f"{n} short of {key}{used}"

        result.steps.append(FunnelStep("counters", "shared counters available", len(fitting),
                                       _details(short, counter_detail)))
        devices = fitting

    enough = []
    short = Counter()
    requested = _capacity_nanos(spec.capacity)
    for ref in devices:
        lacking = _lacking_capacity(ref, requested, ctx.capacity_used.get(ref.id))
        if lacking:
            short[lacking] += 1
            for holder in ctx.share_holders.get(ref.id, []):
                result.holders.setdefault(holder, 0)
                result.holder_pods.setdefault(holder, ctx.claim_pods(holder))
        else:
            enough.append(ref)
    if spec.capacity or short:
        result.steps.append(FunnelStep("capacity", "capacity available", len(enough),
                                       _details(short, lambda key, n: f"{n} {key}")))
    devices = enough
    _trim_after_zero(result)
    return result, devices


def _trim_after_zero(result: RequestFunnel) -> None:
    """Steps after the funnel is empty say nothing; drop them."""
    for position, step in enumerate(result.steps):
        if step.count == 0:
            del result.steps[position + 1:]
            return


def _pods_suffix(pods: list[str]) -> str:
    if not pods:
        return ""
    shown = ", ".join(pods[:3]) + (f", … ({len(pods)} pods)" if len(pods) > 3 else "")
    return f" (pod {shown})" if len(pods) == 1 else f" (pods {shown})"


def _apply_selectors(devices: list[DeviceRef], expressions: list[str], ctx: FunnelContext,
                     cel_errors: list[CelErrorReport], where: str, index: int | None = None) -> list[DeviceRef]:
    kept = []
    for ref in devices:
        ok = True
        for position, expression in enumerate(expressions):
            matches, error = ctx.selectors.evaluate(expression, ref, ctx.evaluator)
            if error:
                label = where if index is not None else f"{where} selector #{position}"
                reported = sum(1 for e in cel_errors if e.where == label)
                if reported < MAX_CEL_ERRORS_PER_SELECTOR:
                    cel_errors.append(CelErrorReport(label, expression, ref.id, error))
            if not matches:
                ok = False
                break
        if ok:
            kept.append(ref)
    return kept


def _counter_users(ref: DeviceRef, pool: PoolView, ctx: FunnelContext) -> list[str]:
    """Claims holding other devices of the pool that draw on the same counter sets as `ref`."""
    sets = {use.get("counterSet") for use in ref.device.get("consumesCounters") or []}
    holders: list[str] = []
    for other in pool.all_devices:
        if other.id not in ctx.allocated:
            continue
        if sets & {use.get("counterSet") for use in other.device.get("consumesCounters") or []}:
            for holder in ctx.holders.get(other.id, []):
                if holder not in holders:
                    holders.append(holder)
    return holders


def _lacking_counter(ref: DeviceRef, left: dict[str, dict[str, int]]) -> str:
    """The counter that stops the device, checked as the allocator checks it (every counter of the
    pool, so an over-allocated pool stops every device that consumes counters)."""
    from gpudra.allocator.counters import first_short_counter

    if ref.info is None or not ref.info.consumes_counters:
        return ""
    consumed: dict[str, dict[str, int]] = {}
    for set_name, counters in ref.info.consumes_counters:
        target = consumed.setdefault(set_name, {})
        for name, amount in counters.items():
            target[name] = target.get(name, 0) + amount
    short = first_short_counter(left, consumed)
    if short is None:
        return ""
    set_name, name = short
    need = consumed.get(set_name, {}).get(name, 0)
    have = left.get(set_name, {}).get(name, 0)
    return f"counter {set_name}/{name} (needs {_fmt_nanos(need)}, {_fmt_nanos(max(have, 0))} left)"


def _capacity_nanos(requests: dict[str, Any]) -> dict[str, int]:
    values = {}
    for name, amount in requests.items():
        try:
            values[name] = Quantity.parse(amount).nanos
        except QuantityError:
            values[name] = 0
    return values


def _lacking_capacity(ref: DeviceRef, requested: dict[str, int], used: dict[str, int] | None) -> str:
    """The allocator's consumable-capacity check (policies, rounding, shares already in use)."""
    if ref.info is None:
        return ""
    if not requested and not used:
        for capacity in ref.info.capacity.values():
            if capacity.has_policy:
                break
        else:  # the whole of every capacity, none of it in use: always fits (the common case, asked per device)
            return ""
    from gpudra.allocator.capacity import consumption, fits

    missing = [name for name in requested if name not in ref.info.capacity]
    if missing:
        return f"without capacity {missing[0]}"
    consumed = consumption(ref.info, requested)
    if consumed is None:
        return "whose request policy does not allow the requested amount"
    if not fits(ref.info, consumed, used):
        name = next((n for n, amount in consumed.items()
                     if amount + (used or {}).get(n, 0) > ref.info.capacity[n].value), "")
        return f"with too little {name} left" if name else "with too little capacity left"
    return ""


def _fmt_nanos(value: int) -> str:
    """Counter amounts as people write them: 80Gi rather than 85899345920."""
    if value % 1_000_000_000 == 0:
        whole = value // 1_000_000_000
        for unit, size in (("Ti", 1 << 40), ("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)):
            if whole and whole % size == 0:
                return f"{whole // size}{unit}"
        return str(whole)
    return str(Quantity.parse(f"{value}n"))


# ------------------------------------------------------------------------------ attribute values

_ATTRIBUTE_PATTERNS = [
    re.compile(r'device\.(attributes|capacity)\[\s*["\']([^"\']+)["\']\s*\]\s*\.\s*\??([A-Za-z_][A-Za-z0-9_]*)'),
    re.compile(r'device\.(attributes|capacity)\[\s*["\']([^"\']+)["\']\s*\]\s*\[\s*\??["\']([^"\']+)["\']\s*\]'),
]


def referenced_names(expression: str) -> list[tuple[str, str, str]]:
    """(map, domain, id) triples a selector reads: device.attributes["d"].id / ["d"]["id"] / capacity."""
    found: list[tuple[str, str, str]] = []
    for pattern in _ATTRIBUTE_PATTERNS:
        for match in pattern.finditer(expression):
            triple = (match.group(1), match.group(2), match.group(3))
            if triple not in found:
                found.append(triple)
    return found


def device_value(ref: DeviceRef, kind: str, domain: str, ident: str) -> str | None:
    """The attribute or capacity a selector would see as `device.<kind>[domain].ident`, as text."""
    values = ref.device.get(kind) or {}
    candidates = [f"{domain}/{ident}"] + ([ident] if domain == ref.driver else [])
    for key in candidates:
        if key in values:
            value = values[key] or {}
            if kind == "capacity":
                return str(value.get("value"))
            for typ in ("string", "int", "bool", "version"):
                if typ in value:
                    raw = value[typ]
                    return str(raw).lower() if typ == "bool" else str(raw)
            return None
    return None


def _attribute_values(expression: str, devices: list[DeviceRef]) -> list[str]:
    details = []
    for kind, domain, ident in referenced_names(expression):
        seen = Counter(device_value(ref, kind, domain, ident) or "(not set)" for ref in devices)
        if seen:
            shown = ", ".join(f"{value} ×{n}" for value, n in sorted(seen.items(), key=lambda kv: (-kv[1], kv[0]))[:MAX_DETAILS])
            details.append(f"{ident} seen: {shown}")
    return details

