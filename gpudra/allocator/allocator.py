"""The Allocator: cluster-wide precomputation plus one allocate() per (node, claims).

Construction indexes slices and allocated claims; per node, the visible pools and the devices that
pass each (class, request selectors) combination are computed once and reused by later calls.
"""

from __future__ import annotations

import time
from collections.abc import Container, Mapping
from typing import Any

from gpudra.plain import as_dict, as_list

from .capacity import consumption, fits
from .classes import ClassInfo, ClassTable
from .counters import counters_left
from .features import Features
from .model import CacheKey, DeviceInfo, DeviceKey, object_stamp
from .nodematch import NodeInfo, node_matches
from .nodeview import Candidates, FitStatic, NodeView, RequestShape
from .outcome import MAX_RESULTS_PER_CLAIM, TIMED_OUT, AllocationError, AllocationOutcome
from .plan import ClaimPlan, FitRequest, StaticRequest
from .pools import Pool, SliceIndex
from .search import Search
from .selection import search_deadline
from .state import AllocatedState
from .taintrules import apply_device_taint_rules

MAX_SHARED_ANSWERS = 50_000  # `fits` answers kept (a key holds every candidate's state: about 1 KB each)


# kube-scheduler's DRASchedulerFilterTimeout default: one node's Filter gives up after 10 s.
FILTER_TIMEOUT_S = 10.0


class Allocator:
    def __init__(
        self,
        device_classes: list[dict[str, Any]],
        slices: list[dict[str, Any]],
        allocated_claims: list[dict[str, Any]] | None = None,
        features: "Features | str | None" = None,
        device_taint_rules: list[dict[str, Any]] | None = None,
    ):
        self.features = features if isinstance(features, Features) else Features.parse(features)
        if device_taint_rules and self.features.device_taints:
            slices = apply_device_taint_rules(list(slices or []), device_taint_rules, device_classes or [])
        self._device_classes = list(device_classes or [])
        self._read_classes()
        self._slices = list(slices or [])
        self.state = AllocatedState(self.features)
        for claim in allocated_claims or []:
            self.state.add(claim)
        self._index_slices()

    def _read_classes(self) -> None:
        """Parsed classes and request readings, shared with other Allocators of the same class objects."""
        table = ClassTable.shared(self._device_classes, self.features)
        self.classes: dict[str, ClassInfo] = table.classes
        self.claim_plans: dict[int, ClaimPlan] = table.claim_plans  # see claim_plan

    def _index_slices(self) -> None:
        """(Re)start from the shared index of the slices; every per-node cache starts empty."""
        self.index = SliceIndex.shared(self._slices, self.features)
        self.evaluator = self.index.evaluator
        self._views: dict[CacheKey, NodeView] = self.index.views
        # per Node dict (by identity): its view; shared with the index (views depend on slices, name and labels)
        self._views_by_node: dict[int, tuple[dict[str, Any], NodeView]] = self.index.views_by_node
        self._pool_counters: dict[str, tuple[int, dict[str, dict[str, int]]]] = {}
        self._fit_memo: dict[CacheKey, str] = {}  # fit_key -> "allocated" | "unallocatable"
        self.fit_hits = 0  # `fits` answers taken from another node's search
        self.fit_searches = 0  # `fits` searches whose answer was remembered

    # allocated state -------------------------------------------------------------------------
    def add_allocated_claim(self, claim: dict[str, Any]) -> None:
        self.state.add(claim)

    def remove_allocated_claim(self, claim: dict[str, Any]) -> None:
        self.state.remove(claim)

    # per-node caches ----------------------------------------------------------------------------
    def node_view(self, node: "dict[str, Any] | str | NodeInfo") -> NodeView:
        """The node's pools and devices, from the cache unless a slice behind them, or one that could be edited
        to reach the node (NodeView.sources), was edited in place (a new generation or resourceVersion): then
        the index of all slices is rebuilt."""
        view = self._cached_view(node)
        for info in view.sources:
            if info.edited():
                SliceIndex.discard(self.index)
                self._index_slices()
                return self._cached_view(node)
        return view

    def _cached_view(self, node: "dict[str, Any] | str | NodeInfo") -> NodeView:
        if isinstance(node, dict):
            # The scheduler asks about the same Node dicts over and over: remember their views,
            # re-checking name and labels so that an edited dict is not served a stale view.
            cached = self._views_by_node.get(id(node))
            if cached is not None and cached[0] is node:
                metadata = node.get("metadata")
                if isinstance(metadata, dict) and metadata.get("name") == cached[1].node.name and (
                    (metadata.get("labels") or {}) == cached[1].node.labels
                ):
                    return cached[1]
            view = self._view_for(NodeInfo.of(node))
            if len(self._views_by_node) > 100_000:
                self._views_by_node.clear()
            self._views_by_node[id(node)] = (node, view)
            return view
        return self._view_for(NodeInfo.of(node))

    def _view_for(self, info: NodeInfo) -> NodeView:
        view = self._views.get(info.key)
        if view is None:
            # Slices that do not reach the node now but could after an edit: a slice's nodeSelector, allNodes
            # and per-device node selection may change, its nodeName not (immutable in resource.k8s.io/v1), so a
            # slice named for another node never reaches this one.
            reachable = [s for s in self.index.other if s.node_name is None or s.node_name == info.name]
            view = NodeView(info, self.index.gather(info), reachable)
            self._views[info.key] = view
        return view

    def candidates(self, view: NodeView, class_info: ClassInfo, request_exprs: tuple[str, ...]) -> Candidates:
        key = (class_info.name, class_info.selector_exprs, request_exprs)
        found = view.candidates.get(key)
        if found is not None:
            return found
        found = []
        binding = self.features.device_binding_and_status
        status = self.evaluator.status
        node = view.node
        for device in view.devices:
            if device.binding_conditions and not binding:
                continue
            result = status(device, class_info.name, class_info.selector_exprs, request_exprs)
            if result is False:
                continue
            if result is True:
                if device.slice.per_device_node_selection and not node_matches(
                    node, device.node_name, device.all_nodes, device.node_selector
                ):
                    continue
                found.append((device, None))
            else:
                found.append((device, result))
        view.candidates[key] = found
        counting = [d for d, _ in found if d.consumes_counters]
        view.counter_flags[key] = (bool(counting), any(d.taints for d in counting))
        return found

    def consumptions(self, view: NodeView, class_info: ClassInfo, request_exprs: tuple[str, ...], capacity: dict[str, int],
                     candidates: Candidates) -> list[dict[str, int] | None]:
        """Per candidate (in order): what allocating it for a request of `capacity` consumes, or None when it
        cannot serve the request. Only for devices without multiple allocations, for which the answer depends
        on nothing else (None for the others: their check depends on what is in use)."""
        key = (class_info.name, class_info.selector_exprs, request_exprs, tuple(sorted(capacity.items())))
        found = view.consumptions.get(key)
        if found is None:
            found = []
            for device, _ in candidates:
                consumed = None if device.allow_multiple else consumption(device, capacity)
                found.append(consumed if consumed is not None and fits(device, consumed) else None)
            view.consumptions[key] = found
        return found

    def request_shape(self, view: NodeView, static: StaticRequest) -> RequestShape:
        """(candidates, counter_flags, consumptions or None) of a request (plan.StaticRequest) on the node: one
        lookup per request and call instead of three."""
        found = view.shapes.get(static.shape)
        if found is None:
            class_info = static.class_info
            assert class_info is not None, "a request whose class is unknown fails before its shape is asked"
            candidates = self.candidates(view, class_info, static.exprs)
            consumed = self.consumptions(view, class_info, static.exprs, static.capacity, candidates) if (
                self.features.consumable_capacity) else None
            found = view.shapes[static.shape] = (candidates, self.counter_flags(view, class_info, static.exprs),
                                                 consumed)
        return found

    def counter_flags(self, view: NodeView, class_info: ClassInfo, request_exprs: tuple[str, ...]) -> tuple[bool, bool]:
        return view.counter_flags[(class_info.name, class_info.selector_exprs, request_exprs)]

    def available_counters(self, pool: Pool) -> dict[str, dict[str, int]]:
        """The pool's counter sets minus what allocated devices consume (cached per state version).

        Upstream caches this per Allocator under the pool's *name* only (not driver/name), so the
        first pool of that name to be checked answers for same-named pools of other drivers too.
        """
        cached = self._pool_counters.get(pool.name)
        if cached is not None and cached[0] == self.state.version:
            return cached[1]
        devices = (device for info in pool.all_device_slices for device in info.devices)
        available = counters_left(pool.counter_sets, devices, self.state.counts_for_counters)
        self._pool_counters[pool.name] = (self.state.version, available)
        return available

    def static_request(self, label: str, request: dict[str, Any], full: str, allow_admin: bool) -> StaticRequest:
        """The node-independent part of a request (plan.StaticRequest); kept with its claim's plan."""
        return StaticRequest(self, label, request, full, allow_admin)

    def claim_plan(self, claim: dict[str, Any]) -> ClaimPlan:
        """The node-independent reading of a claim (plan.ClaimPlan), cached per claim object while its
        generation and resourceVersion stay the same."""
        cache = self.claim_plans
        found = cache.get(id(claim))
        if found is not None and found.claim is claim and found.stamp == object_stamp(claim):
            if not any(info.edited() for info in found.classes):
                return found
            self._read_classes()  # a class was edited in place: read them all again
            cache = self.claim_plans
        found = ClaimPlan(self, claim)
        if len(cache) > 100_000:
            cache.clear()
        cache[id(claim)] = found
        return found

    # feasibility shared between nodes -------------------------------------------------------------------
    def fit_key(self, view: NodeView, claims: list[dict[str, Any]]) -> CacheKey | None:
        """A key on which the outcome of `allocate(node, claims)` depends alone, or None.

        Only for the simplest and most common shape: one claim with one ExactCount request, no constraints,
        no admin access, no firstAvailable; every candidate device valid for it (no CEL failure), without
        counters or taints. Then the search needs `count` distinct candidates that each fit on their own (a
        request uses a device at most once, so the devices do not interact) and, being exhaustive, finds them
        whatever their order: the outcome depends only on the request and on the multiset of (what the
        search reads of a candidate: multi-allocation, capacities; its allocated state). Nodes in the same
        device state (idle nodes of one GPU model above all) then share one search.

        One matchAttribute constraint on that request (the same-NVLink-domain pair) is of the shape too: the
        search then needs `count` such candidates that share one value of the attribute, so the outcome depends
        on the same multisets per value (values themselves do not matter, only which candidates share one;
        a candidate without the attribute never fits). List-typed values (sets that may overlap) are not."""
        if len(claims) != 1 or view.any_invalid or not self.features.consumable_capacity:
            return None
        request = self._fit_request(claims[0])
        if request is None:
            return None
        candidates_key, class_info, exprs, capacity, count, match = request
        static_key = candidates_key if match is None else (candidates_key, match)
        if static_key in view.fit_static:
            found = view.fit_static[static_key]
        else:
            statics = self._fit_static(view, class_info, exprs, match)
            # the candidates' keys and their shape while none of them is in use: most nodes, most of the time
            found = view.fit_static[static_key] = None if statics is None else (
                statics, tuple(key for key, _, _, _ in statics), _fit_shape(statics, {}, {}, {}))
        if found is None:
            return None
        statics, keys, idle = found
        state = self.state
        allocated, shared, consumed = state.allocated, state.shared_devices, state.capacity
        if allocated.keys().isdisjoint(keys) and shared.keys().isdisjoint(keys) and consumed.keys().isdisjoint(keys):
            shape = idle
        else:
            shape = _fit_shape(statics, allocated, shared, consumed)
        return (candidates_key, capacity, count, match is not None, shape)

    def _fit_static(self, view: NodeView, class_info: ClassInfo, exprs: tuple[str, ...],
                    match: str | None) -> tuple[FitStatic, ...] | None:
        """Per candidate of the view: (key, multi-allocation, capacities, group), the group being the value of
        the matchAttribute attribute (None without constraint); candidates that lack the attribute are left out.
        None when `fit_key` cannot say."""
        from .constraints import attribute_values

        statics: list[FitStatic] = []
        for device, failure in self.candidates(view, class_info, exprs):
            if failure is not None or device.consumes_counters or device.taints:
                return None
            group = None
            if match is not None:
                found = device.lookup_attribute(match)
                if found is not None and found[0].startswith("list:"):
                    return None
                group = attribute_values(device, match, self.features.list_type_attributes)
                if group is None:
                    continue
            statics.append((device.key, device.allow_multiple, _capacity_signature(device), group))
        return tuple(statics)

    def _fit_request(self, claim: dict[str, Any]) -> FitRequest | None:
        """The node-independent part of `fit_key` for one claim, or None when the claim is not of its shape;
        kept with the claim's plan."""
        plan = self.claim_plan(claim)
        if plan.fit_request is not False:
            return plan.fit_request
        found: FitRequest | None = None
        spec_devices = as_dict(as_dict(claim.get("spec")).get("devices"))
        requests = as_list(spec_devices.get("requests"))
        request = requests[0] if len(requests) == 1 else None
        match = _single_match_attribute(spec_devices.get("constraints"), request)
        if spec_devices.get("constraints") and match is None:
            request = None
        exactly = request.get("exactly") if isinstance(request, dict) and request.get("firstAvailable") is None else None
        if (isinstance(exactly, dict) and exactly.get("adminAccess") is None and len(plan.requests) == 1
                and plan.requests[0].error is None and not plan.requests[0].subrequests):
            static = plan.requests[0].options[0][0]
            class_info = static.class_info  # known when the request has no error
            if static.error is None and class_info is not None and not static.all_mode and not static.admin and (
                0 < static.count <= MAX_RESULTS_PER_CLAIM
            ):
                found = ((class_info.name, class_info.selector_exprs, static.exprs), class_info, static.exprs,
                         tuple(sorted(static.capacity.items())), static.count, match)
        plan.fit_request = found
        return found

    def fits(
        self,
        node: "dict[str, Any] | str | NodeInfo",
        claims: list[dict[str, Any]],
        timeout: float | None = FILTER_TIMEOUT_S,
        deadline: float | None = None,
    ) -> AllocationOutcome:
        """`allocate` for callers that need to know whether the claims fit, not (yet) the devices. For claims
        of `fit_key`'s shape the answer comes `deferred` (no allocations), and a node in the same device state as
        one searched before gets that node's answer. Errors and time-outs are never shared."""
        view = self.node_view(node)
        key = self.fit_key(view, claims)
        if key is None:
            return self.allocate(node, claims, timeout=timeout, deadline=deadline)
        known = self._fit_memo.get(key)
        if known is not None:
            self.fit_hits += 1
            return AllocationOutcome(known, deferred=known == "allocated")
        outcome = self.allocate(node, claims, timeout=timeout, deadline=deadline, build=False)
        if outcome.outcome in ("allocated", "unallocatable"):
            self.fit_searches += 1
            if len(self._fit_memo) > MAX_SHARED_ANSWERS:
                self._fit_memo.clear()
            self._fit_memo[key] = outcome.outcome
        return outcome

    # allocation ---------------------------------------------------------------------------------
    def allocate(
        self,
        node: "dict[str, Any] | str | NodeInfo",
        claims: list[dict[str, Any]],
        exclude_devices: "set[DeviceKey] | frozenset[DeviceKey] | None" = None,
        timeout: float | None = FILTER_TIMEOUT_S,
        deadline: float | None = None,
        build: bool = True,
    ) -> AllocationOutcome:
        """Allocate `claims` jointly on `node`.

        `exclude_devices` — (driver, pool, device) IDs to treat as unavailable for this call only,
        without consuming their counters or capacity (what-if steering; not an upstream concept).
        `timeout` — seconds; like kube-scheduler's Filter timeout (10 s by default, as there), a search
        that takes longer ends as a node-local error "timed out trying to allocate devices"; None: no limit.
        `deadline` — a time.monotonic() instant shared by several calls (one budget for all the nodes a
        pod is tried on); the earlier of the two ends the search.
        `build` — False: only search; an "allocated" outcome comes `deferred`, without allocations.
        """
        if timeout is not None:
            own = time.monotonic() + timeout
            deadline = own if deadline is None else min(deadline, own)
        if deadline is not None and time.monotonic() >= deadline:
            return AllocationOutcome("error", error=TIMED_OUT, error_node_local=True)
        try:
            with search_deadline(deadline):
                view = self.node_view(node)
                search = Search(self, view, claims, exclude_devices, deadline)
                allocations = search.run(build)
        except TimeoutError:  # a CEL evaluation that met the deadline
            return AllocationOutcome("error", error=TIMED_OUT, error_node_local=True)
        except AllocationError as err:
            return AllocationOutcome("error", error=str(err), error_node_local=err.node_local)
        except (TypeError, AttributeError, KeyError, ValueError) as err:
            # Objects that break the API schema (wrong JSON types) end up here rather than in a
            # traceback; validation reports the details.
            return AllocationOutcome("error", error=f"malformed input: {type(err).__name__}: {err}")
        if allocations is None:
            if view.any_invalid:
                return AllocationOutcome("error", error="invalid resource pools were encountered", error_node_local=True)
            return AllocationOutcome("unallocatable")
        return AllocationOutcome("allocated", allocations=allocations, deferred=not build)


def _fit_shape(statics: tuple[FitStatic, ...], allocated: Container[DeviceKey], shared: Container[DeviceKey],
               consumed: Mapping[DeviceKey, dict[str, int]]) -> CacheKey:
    """`Allocator.fit_key`'s multisets of candidates per matchAttribute group, given what is in use."""
    groups: dict[tuple[str, frozenset[object]] | None, list[CacheKey]] = {}
    for key, multiple, signature, group in statics:
        used = consumed.get(key)
        groups.setdefault(group, []).append((multiple, signature, key in allocated, key in shared,
                                             tuple(sorted(used.items())) if used else ()))
    return tuple(sorted(tuple(sorted(tokens)) for tokens in groups.values()))


def _single_match_attribute(constraints: Any, request: Any) -> str | None:
    """The attribute of the claim's only constraint when it is a matchAttribute over its only request (named,
    or all requests), else None."""
    if not isinstance(constraints, list) or len(constraints) != 1 or not isinstance(request, dict):
        return None
    constraint = constraints[0]
    if not isinstance(constraint, dict) or set(constraint) - {"requests", "matchAttribute"}:
        return None
    attribute, names = constraint.get("matchAttribute"), constraint.get("requests")
    if not isinstance(attribute, str) or not attribute or names not in (None, [], [request.get("name")]):
        return None
    return attribute


def _capacity_signature(device: DeviceInfo) -> CacheKey:
    """Everything the search reads of a device's capacities (their names, values and request policies)."""
    return tuple(
        (name, c.value, c.has_policy, c.default, tuple(c.valid_values) if c.valid_values is not None else None,
         c.range_min, c.range_max, c.range_step)
        for name, c in sorted(device.capacity.items())
    )




__all__ = ["Allocator", "AllocationOutcome", "AllocationError", "FILTER_TIMEOUT_S", "TIMED_OUT"]
