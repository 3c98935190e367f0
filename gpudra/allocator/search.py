"""One allocate() call: validation pre-pass, then depth-first search with backtracking.

Mirrors upstream's incubating/experimental allocator: the first complete solution wins; claims →
requests → (subrequests) → devices; the 32-results-per-claim limit turns into a MAXSIZE signal that
makes the search move on to the next subrequest instead of trying other devices.
"""

from __future__ import annotations

import enum
import sys
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from gpudra.plain import as_dict

from .capacity import consumption, fits
from .claims import taint_prevents_allocation
from .classes import ClassInfo
from .constraints import DistinctAttribute, MatchAttribute
from .counters import first_short_counter
from .model import CacheKey, DeviceInfo, DeviceKey
from .nodeview import NodeView
from .outcome import MAX_RESULTS_PER_CLAIM, TIMED_OUT, AllocationError
from .plan import StaticRequest
from .pools import Pool
from .results import build_allocation
from .selection import SelectorFailure

if TYPE_CHECKING:
    from .allocator import Allocator  # the search is built by the Allocator it reads

_NOTHING: frozenset[DeviceKey] = frozenset()
class _Signal(enum.Enum):
    MAXSIZE = "this branch needs more than 32 results: try the next subrequest"


MAXSIZE = _Signal.MAXSIZE
# what one step of the search answers: found, not found, or MAXSIZE
Step = bool | Literal[_Signal.MAXSIZE]


@dataclass(slots=True, eq=False)
class RequestData:
    """One request (or one firstAvailable subrequest) of a claim, resolved against the node being tried."""

    raw: dict[str, Any]  # the request (or subrequest) as written
    full_name: str  # "request" or "request/subrequest"
    base_name: str  # the request's name, also for a subrequest
    class_info: ClassInfo
    request_exprs: tuple[str, ...]
    admin: bool
    tolerations: list[dict[str, Any]]
    capacity: dict[str, int]  # requested capacity in nano-units
    candidates: list[tuple[DeviceInfo, SelectorFailure | None]]
    counter_flags: tuple[bool, bool]  # (some candidate consumes counters, one of those has taints)
    all_mode: bool
    # per candidate, what it consumes when it has no multiple allocations (None: it cannot serve the request);
    # None with DRAConsumableCapacity off
    consumed: list[dict[str, int] | None] | None = None
    num_devices: int = 0
    all_devices: list[DeviceInfo] | None = None  # allocationMode All: every device it takes
    ordered: bool = False  # try its devices as combinations (in candidate order), not permutations
    picks: list[int] = field(default_factory=list)  # candidate positions picked so far


class RequestSlot:
    """A claim request: either one RequestData, or firstAvailable alternatives."""

    __slots__ = ("name", "data", "subrequests", "selected")

    def __init__(self, name: str):
        self.name = name
        self.data: RequestData | None = None
        self.subrequests: list[RequestData] | None = None
        self.selected = 0

    def option(self, index: int) -> RequestData:
        """The request itself, or its subrequest number `index` when it has firstAvailable alternatives."""
        if self.subrequests is not None:
            return self.subrequests[index]
        assert self.data is not None  # a slot has one or the other
        return self.data


class ClaimData:
    __slots__ = ("claim", "label", "requests", "constraints", "results")

    def __init__(self, claim: dict[str, Any], label: str):
        self.claim = claim
        self.label = label
        self.requests: list[RequestSlot] = []
        self.constraints: list[MatchAttribute | DistinctAttribute] = []
        # (request, device, consumed capacity when shared, share ID when shared)
        self.results: list[tuple[RequestData, DeviceInfo, dict[str, int] | None, str | None]] = []


class Search:
    def __init__(self, allocator: Allocator, view: NodeView, claims: list[dict[str, Any]],
                 excluded: Iterable[DeviceKey] | None = None,
                 deadline: float | None = None):
        self.allocator = allocator
        self.features = allocator.features
        self.state = allocator.state
        self.view = view
        self.excluded = frozenset(excluded) if excluded else _NOTHING
        self.deadline = deadline  # time.monotonic() instant, or None
        self.steps = 0
        self.allocating: dict[CacheKey, set[int]] = {}
        self.allocating_capacity: dict[CacheKey, dict[str, int]] = {}
        # A multi-allocatable device serves any number of requests, but each request only once.
        self.sharing: dict[CacheKey, list[tuple[int, str]]] = {}
        # Keyed by pool name alone, as upstream does (same-named pools of two drivers share it).
        self.consumed_counters: dict[str, dict[str, dict[str, int]]] = {}
        self.reject_capacity = not self.features.consumable_capacity and not self.features.stable_variant
        self.claims = [self._prepare(as_dict(claim)) for claim in claims]
        self._mark_order_independent_requests()

    # pre-pass --------------------------------------------------------------------------------------
    def _prepare(self, claim: dict[str, Any]) -> ClaimData:
        plan = self.allocator.claim_plan(claim)
        data = ClaimData(claim, plan.label)
        min_devices = 0
        for request in plan.requests:
            if request.error is not None:
                raise AllocationError(request.error)
            slot = RequestSlot(request.name)
            if request.subrequests:
                slot.subrequests = [self._request_data(data, *option) for option in request.options]
                min_devices += min(s.num_devices for s in slot.subrequests)
            else:
                slot.data = self._request_data(data, *request.options[0])
                min_devices += slot.data.num_devices
            data.requests.append(slot)
        if min_devices > MAX_RESULTS_PER_CLAIM:
            raise AllocationError(
                f"claim {plan.label}: number of requested devices {min_devices} exceeds the claim limit of {MAX_RESULTS_PER_CLAIM}"
            )
        if plan.constraint_error is not None:
            raise AllocationError(plan.constraint_error)
        data.constraints = [kind(requests, attribute, self.features.list_type_attributes)
                            for kind, requests, attribute in plan.constraints]
        return data

    def _mark_order_independent_requests(self) -> None:
        """Decide per request whether its devices are tried as combinations or as permutations.

        incubating and experimental try combinations: the next device of the same request is only
        looked for after the previous one (upstream's startLocation). stable tries permutations,
        which find the same first solution when the picked devices matter only as a set, so the
        cheaper combinations are used there too, except where 1.36.2's quirk makes order matter: a
        device rejected by taints or constraints leaks its counter consumption for the rest of the call
        (any such risk anywhere disables the shortcut everywhere). From 1.36.3 nothing leaks
        (Features.rollback_rejected_devices), so the shortcut always holds.
        """
        if not self.features.stable_variant:
            return  # requests start out ordered there (_request_data)
        taints = self.features.device_taints
        leaks = not self.features.rollback_rejected_devices
        for claim in self.claims if leaks else ():
            for rd in self._all_request_data(claim):
                any_counters, tainted_counters = rd.counter_flags
                if any_counters and (claim.constraints or (taints and tainted_counters)):
                    return
        for claim in self.claims:
            for rd in self._all_request_data(claim):
                rd.ordered = True

    @staticmethod
    def _all_request_data(claim: ClaimData) -> list[RequestData]:
        found: list[RequestData] = []
        for slot in claim.requests:
            found.extend(slot.subrequests if slot.subrequests is not None else [slot.option(0)])
        return found

    def _request_data(self, claim: ClaimData, static: StaticRequest, request: dict[str, Any], base: str, full: str) -> RequestData:
        if static.error is not None:
            raise AllocationError(static.error)
        label = claim.label
        class_info = static.class_info
        assert class_info is not None  # a request without a class has an error
        candidates, counter_flags, consumed = self.allocator.request_shape(self.view, static)
        rd = RequestData(
            raw=request, full_name=full, base_name=base, class_info=class_info, request_exprs=static.exprs,
            admin=static.admin, tolerations=static.tolerations, capacity=static.capacity,
            candidates=candidates, counter_flags=counter_flags, all_mode=static.all_mode, consumed=consumed,
            ordered=not self.features.stable_variant,  # stable: see _mark_order_independent_requests
        )
        if not static.all_mode:
            rd.num_devices = static.count
            return rd
        for pool in self.view.pools:
            if pool.incomplete:
                raise AllocationError(
                    f"claim {label}, request {full}: asks for all devices, but resource pool "
                    f"{pool.driver}/{pool.name} is currently being updated"
                )
            if pool.invalid_reason is not None:
                raise AllocationError(
                    f"claim {label}, request {full}: asks for all devices, but resource pool "
                    f"{pool.driver}/{pool.name} is currently invalid"
                )
        devices = []
        consumable = self.features.consumable_capacity
        for device, failure in rd.candidates:
            if failure is not None:
                raise AllocationError(failure.text(label))
            if consumable and self._capacity_ok(device, rd) is None:
                continue
            devices.append(device)
        rd.all_devices = devices
        rd.num_devices = len(devices)
        return rd

    # search ------------------------------------------------------------------------------------------
    def run(self, build: bool = True) -> list[dict[str, Any]] | None:
        """The claims' allocations (or [] when not `build`), or None when they do not fit."""
        # One stack frame per claim, request and device: make room for big "together" runs.
        depth = sum(1 + len(c.requests) + MAX_RESULTS_PER_CLAIM for c in self.claims) + 200
        if sys.getrecursionlimit() < depth + 500:
            sys.setrecursionlimit(depth + 500)
        result = self._first_fitting() if self._independent_picks() else self._allocate_one(0, 0, 0, 0, False)
        if result is not True:
            return None
        return [build_allocation(self, claim) for claim in self.claims] if build else []

    def _independent_picks(self) -> bool:
        """One claim with one ExactCount request and no constraints, none of whose candidates consumes counters:
        then whether a device can be picked does not depend on the other picks (a device serves a request once;
        taints, selectors and capacity are the device's own), so the depth-first search's first solution is
        the first `count` devices that can be picked, in candidate order (a level that finds none means no
        solution: a later device that fits would have been found there). It also meets a selector error at the
        same device as the search."""
        if len(self.claims) != 1:
            return False
        claim = self.claims[0]
        if len(claim.requests) != 1 or claim.constraints or claim.requests[0].subrequests is not None:
            return False
        rd = claim.requests[0].data
        return rd is not None and not rd.all_mode and rd.ordered and not rd.counter_flags[0]

    def _first_fitting(self) -> bool:
        """The search for `_independent_picks` claims, without backtracking."""
        claim = self.claims[0]
        rd = claim.requests[0].data
        assert rd is not None  # _independent_picks checked it
        needed = rd.num_devices
        if needed <= 0:
            return True
        consumable = self.features.consumable_capacity
        consumptions = rd.consumed
        for position, (device, failure) in enumerate(rd.candidates):
            if self._in_use(0, rd, device):
                continue
            if failure is not None:
                raise AllocationError(failure.text(claim.label))
            consumed = None
            if consumable:
                if device.allow_multiple:
                    consumed = self._capacity_ok(device, rd)
                else:
                    assert consumptions is not None  # set with consumable capacity on
                    consumed = consumptions[position]
                if consumed is None:
                    continue
            if self._allocate_device(0, rd, device, must=False, consumed=consumed, checked=True) is None:
                continue
            needed -= 1
            if not needed:
                return True
        return False

    def _capacity_ok(self, device: DeviceInfo, rd: RequestData) -> dict[str, int] | None:
        consumed = consumption(device, rd.capacity)
        if consumed is None:
            return None
        if device.allow_multiple:
            if not fits(device, consumed, self.state.capacity.get(device.key), self.allocating_capacity.get(device.key)):
                return None
        elif not fits(device, consumed):
            return None
        return consumed

    def _in_use(self, ci: int, rd: RequestData, device: DeviceInfo) -> bool:
        key = device.key
        if self.excluded and key in self.excluded:
            return True
        if device.allow_multiple and self.features.consumable_capacity:
            users = self.sharing.get(key)
            if users and (ci, rd.base_name) in users:
                return True
            return not rd.admin and key in self.state.allocated
        holders = self.allocating.get(key)
        if rd.admin:
            return holders is not None and ci in holders
        return bool(holders) or key in self.state.allocated or key in self.state.shared_devices

    def _allocate_one(self, ci: int, ri: int, si: int, di: int, in_sub: bool) -> Step:
        if self.deadline is not None:
            self.steps += 1
            if not self.steps & 1023 and time.monotonic() > self.deadline:
                raise AllocationError(TIMED_OUT, node_local=True)
        if ci == len(self.claims):
            return True
        claim = self.claims[ci]
        if ri == len(claim.requests):
            result = self._allocate_one(ci + 1, 0, 0, 0, False)
            return False if result is MAXSIZE else result
        slot = claim.requests[ri]
        if not in_sub and slot.subrequests is not None:
            all_exceeded = True
            for s in range(len(slot.subrequests)):
                result = self._allocate_one(ci, ri, s, di, True)
                if result is MAXSIZE:
                    continue
                all_exceeded = False
                if result is True:
                    slot.selected = s
                    return True
            return MAXSIZE if all_exceeded else False
        rd = slot.option(si)  # with subrequests, this point is only reached in_sub
        if rd.all_mode and not rd.all_devices:
            return False
        if di >= rd.num_devices:
            return self._allocate_one(ci, ri + 1, 0, 0, False)
        if len(claim.results) + rd.num_devices - di > MAX_RESULTS_PER_CLAIM:
            return MAXSIZE
        if rd.all_mode:
            assert rd.all_devices is not None  # set for every allocationMode All request
            undo = self._allocate_device(ci, rd, rd.all_devices[di], must=True)
            if undo is None:
                return False
            result = self._allocate_one(ci, ri, si, di + 1, in_sub)
            if result is not True:
                undo()
                return result
            return True
        consumable = self.features.consumable_capacity
        candidates = rd.candidates
        start = rd.picks[-1] + 1 if rd.ordered and di else 0
        for position in range(start, len(candidates)):
            device, failure = candidates[position]
            if self._in_use(ci, rd, device):
                continue
            if failure is not None:
                raise AllocationError(failure.text(claim.label))
            consumed = None
            if consumable:
                if device.allow_multiple:
                    consumed = self._capacity_ok(device, rd)
                else:
                    assert rd.consumed is not None  # set with consumable capacity on
                    consumed = rd.consumed[position]
                if consumed is None:
                    continue
            undo = self._allocate_device(ci, rd, device, must=False, consumed=consumed, checked=True)
            if undo is None:
                continue
            rd.picks.append(position)
            result = self._allocate_one(ci, ri, si, di + 1, in_sub)
            rd.picks.pop()
            if result is True:
                return True
            undo()
            if result is MAXSIZE:
                return MAXSIZE
        return False

    def _take_counters(self, device: DeviceInfo) -> bool:
        pool = self._pool_of(device)
        if pool is None:
            return False
        available = self.allocator.available_counters(pool)
        consumed = self.consumed_counters.setdefault(pool.name, {})
        for set_name, counters in device.consumes_counters:
            target = consumed.setdefault(set_name, {})
            for counter, amount in counters.items():
                target[counter] = target.get(counter, 0) + amount
        if first_short_counter(available, consumed) is not None:
            self._give_counters(device)
            return False
        return True

    def _give_counters(self, device: DeviceInfo) -> None:
        pool = self._pool_of(device)
        if pool is None:  # never: _take_counters took nothing from a device without a pool
            return
        consumed = self.consumed_counters.get(pool.name, {})
        for set_name, counters in device.consumes_counters:
            target = consumed.get(set_name, {})
            for counter, amount in counters.items():
                target[counter] = target.get(counter, 0) - amount

    def _pool_of(self, device: DeviceInfo) -> Pool | None:
        return self.view.pool_by_id.get(device.slice.pool_id)

    def _allocate_device(self, ci: int, rd: RequestData, device: DeviceInfo, must: bool,
                         consumed: dict[str, int] | None = None, checked: bool = False) -> Callable[[], None] | None:
        """Add one device to claim ci, or return None. Returns the undo function. `consumed`: what the caller
        found it consumes (_capacity_ok, just before: the check is not repeated); None: check here. `checked`:
        the caller found it not in use, just before."""
        features = self.features
        claim = self.claims[ci]
        if not checked and self._in_use(ci, rd, device):
            return None
        key = device.key
        multi = device.allow_multiple and features.consumable_capacity
        took_counters = False
        if device.consumes_counters:
            if not features.partitionable_devices:
                return None
            shared_already = multi and (key in self.state.shared_devices or bool(self.sharing.get(key)))
            if not shared_already:
                if not self._take_counters(device):
                    return None
                took_counters = True
        # Rejected below: 1.36.3 on gives the reserved counters back; 1.36.2 and older keep them for the rest of
        # this allocate() call (k8s.io/dynamic-resource-allocation v0.36.3 vs v0.36.2, allocateDevice in
        # structured/internal/*/allocator_*.go: rollbackDevice).
        give_back = took_counters and features.rollback_rejected_devices
        if features.device_taints and device.taints and taint_prevents_allocation(device.taints, rd.tolerations):
            if give_back:
                self._give_counters(device)
            return None
        added: list[MatchAttribute | DistinctAttribute] = []
        for constraint in claim.constraints:
            if not constraint.add(rd.base_name, rd.full_name, device):
                for done in reversed(added):
                    done.remove(rd.base_name, rd.full_name, device)
                if give_back:
                    self._give_counters(device)
                if must:
                    raise AllocationError(
                        f"claim {claim.label}, request {rd.full_name}: cannot add device "
                        f"{device.driver}/{device.pool}/{device.name} because a claim constraint would not be satisfied"
                    )
                return None
            added.append(constraint)
        share_id = None
        if features.consumable_capacity:
            if consumed is None:
                consumed = self._capacity_ok(device, rd)
            if consumed is None:  # only for allocationMode All: the candidate loop checked before
                # 1.36.2 and older also keep the device in the constraints here (v0.36.2's allocateDevice returns
                # without removing them), so a later device of the claim must match it too.
                if features.rollback_rejected_devices:
                    for done in reversed(added):
                        done.remove(rd.base_name, rd.full_name, device)
                if give_back:
                    self._give_counters(device)
                return None
        shared_use: dict[str, int] = {}  # what this result consumes of a shared device's capacity
        if multi:
            assert consumed is not None  # multi implies consumable capacity, checked just above
            shared_use = consumed
            used = self.allocating_capacity.setdefault(key, {})
            for name, amount in consumed.items():
                used[name] = used.get(name, 0) + amount
            self.sharing.setdefault(key, []).append((ci, rd.base_name))
            # Upstream draws a random UUID; deriving it from what is being allocated keeps it unique per
            # result and makes the same input give the same output.
            share_id = str(uuid.uuid5(uuid.NAMESPACE_OID, f"{claim.label}/{rd.full_name}/{device.driver}/"
                                                          f"{device.pool}/{device.name}/{len(claim.results)}"))
        else:
            self.allocating.setdefault(key, set()).add(ci)
            consumed = None
        claim.results.append((rd, device, consumed, share_id))

        def undo() -> None:
            claim.results.pop()
            if multi:
                used = self.allocating_capacity[key]
                for name, amount in shared_use.items():
                    used[name] -= amount
                self.sharing[key].remove((ci, rd.base_name))
            else:
                holders = self.allocating[key]
                holders.discard(ci)
                if not holders:
                    del self.allocating[key]
            for done in reversed(added):
                done.remove(rd.base_name, rd.full_name, device)
            # 1.36.2 and older: undoing a multi-allocatable device does not give its counters back (only
            # dedicated devices release them); 1.36.3 on, every device gives back what it took.
            if took_counters and (not multi or features.rollback_rejected_devices):
                self._give_counters(device)

        return undo

