"""The node-independent reading of a claim: its label, each request's class, selectors and count
(StaticRequest) and its constraints, with the errors upstream reports before it looks at a device, kept in
upstream's order so that the search raises them where upstream would.

Claims are read once per claim object, not once per node and allocate() call: plans are kept with the
Allocator's ClassTable (they depend on the classes and the feature gates) and serve every Allocator built
from the same class objects, until the claim object changes (a new object, or a new generation or
resourceVersion: model.object_stamp).
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any, Literal

from gpudra.plain import as_dict, as_list, as_str

from .capacity import capacity_requests
from .claims import claim_label, request_mode_and_count
from .classes import ClassInfo
from .constraints import DistinctAttribute, MatchAttribute
from .model import CacheKey, object_stamp

if TYPE_CHECKING:
    from .allocator import Allocator


# What Allocator.fit_key needs of a claim of its shape: (candidates key, class, request selectors, requested
# capacities, count, matchAttribute or None).
FitRequest = tuple[CacheKey, ClassInfo, tuple[str, ...], tuple[tuple[str, int], ...], int, "str | None"]

_SHAPE_IDS: dict[CacheKey, int] = {}
_NEXT_SHAPE_ID = itertools.count()


def shape_id(shape: CacheKey) -> int:
    """A number for a request shape, the same for equal shapes: per-node caches key on it (an int hashes at once;
    the nested tuple would be hashed on every lookup). Numbers are never reused, even after the table is cleared."""
    found = _SHAPE_IDS.get(shape)
    if found is None:
        if len(_SHAPE_IDS) > 100_000:
            _SHAPE_IDS.clear()
        found = _SHAPE_IDS[shape] = next(_NEXT_SHAPE_ID)
    return found


class StaticRequest:
    """What one request asks for, independent of the node; `error` is its first validation error
    (in upstream's order: selectors, admin access, class, allocation mode)."""

    __slots__ = ("error", "exprs", "class_info", "admin", "tolerations", "capacity", "all_mode", "count", "shape")

    def __init__(self, allocator: Allocator, label: str, request: dict[str, Any], full: str, allow_admin: bool):
        self.error: str | None = None
        self.class_info: ClassInfo | None = None
        self.all_mode = False
        self.count = 0
        # what the request's candidates on a node depend on (Allocator.request_shape's key): class, selectors,
        # requested capacity, as a number (shape_id)
        self.shape = -1
        features = allocator.features
        exprs: list[str] = []
        for i, selector in enumerate(as_list(request.get("selectors"))):
            expression = as_dict(as_dict(selector).get("cel")).get("expression")
            if not expression or not isinstance(expression, str):
                self.error = f"claim {label}, request {full}, selector #{i}: CEL expression empty (unsupported selector type?)"
                return
            exprs.append(expression)
        self.exprs = tuple(exprs)
        self.admin = bool(request.get("adminAccess")) and allow_admin and features.admin_access
        self.tolerations = [t for t in as_list(request.get("tolerations")) if isinstance(t, dict)]
        self.capacity = capacity_requests(request) if features.consumable_capacity else {}
        if not features.admin_access and request.get("adminAccess") is not None:
            self.error = f"claim {label}, request {full}: admin access is requested, but the feature is disabled"
            return
        class_name = as_str(request.get("deviceClassName"))
        if not class_name:
            self.error = f"claim {label}, request {full}: missing device class name (unsupported request type?)"
            return
        self.class_info = allocator.classes.get(class_name)
        if self.class_info is None:
            self.error = (
                f"claim {label}, request {full}: could not retrieve device class {class_name}: "
                f'deviceclasses.resource.k8s.io "{class_name}" not found'
            )
            return
        if self.class_info.empty_selector is not None:
            self.error = (
                f"class {class_name}: selector #{self.class_info.empty_selector}: "
                "CEL expression empty (unsupported selector type?)"
            )
            return
        self.shape = shape_id((self.class_info.name, self.class_info.selector_exprs, self.exprs,
                               tuple(sorted(self.capacity.items()))))
        mode, self.count = request_mode_and_count(request)
        if mode == "All":
            self.all_mode = True
        elif mode != "ExactCount":
            self.error = f"claim {label}, request {full}: unsupported count mode {mode}"


class RequestPlan:
    """One request of a claim: `error` (raised when the search reaches it) or its options, the request itself or
    its firstAvailable subrequests, each as the arguments of Search._request_data after the claim:
    (StaticRequest, request or subrequest dict, request name, full name)."""

    __slots__ = ("name", "error", "subrequests", "options")

    def __init__(self, name: str):
        self.name = name
        self.error: str | None = None
        self.subrequests = False
        self.options: list[tuple[StaticRequest, dict[str, Any], str, str]] = []


class ClaimPlan:
    __slots__ = ("claim", "stamp", "label", "requests", "constraints", "constraint_error", "classes", "fit_request")

    def __init__(self, allocator: "Allocator", claim: dict[str, Any]):
        self.claim = claim
        self.stamp = object_stamp(claim)
        self.fit_request: FitRequest | None | Literal[False] = False  # Allocator._fit_request's answer once asked (False: not yet)
        self.label = label = claim_label(claim)
        features = allocator.features
        # Upstream tests the capacity field's presence, not its content (not in stable, which ignores it).
        reject_capacity = not features.consumable_capacity and not features.stable_variant
        spec_devices = as_dict(as_dict(claim.get("spec")).get("devices"))
        self.requests: list[RequestPlan] = []
        for request in as_list(spec_devices.get("requests")):
            request = as_dict(request)
            plan = RequestPlan(as_str(request.get("name")))
            self.requests.append(plan)
            name = plan.name
            subrequests = [as_dict(sub) for sub in as_list(request.get("firstAvailable"))]
            exactly = request.get("exactly")
            if subrequests and not features.prioritized_list:
                plan.error = f"claim {label}, request {name}: has subrequests, but the DRAPrioritizedList feature is disabled"
            elif reject_capacity and isinstance(exactly, dict) and exactly.get("capacity") is not None:
                plan.error = (f"claim {label}, request {name}: has capacity requests, "
                              "but the DRAConsumableCapacity feature is disabled")
            elif reject_capacity and any(sub.get("capacity") is not None for sub in subrequests):
                sub = next(sub for sub in subrequests if sub.get("capacity") is not None)
                plan.error = (f"claim {label}, subrequest {as_str(sub.get('name'))}: has capacity requests, "
                              "but the DRAConsumableCapacity feature is disabled")
            elif subrequests:
                plan.subrequests = True
                for sub in subrequests:
                    full = f"{name}/{as_str(sub.get('name'))}"
                    plan.options.append((allocator.static_request(label, sub, full, False), sub, name, full))
            elif not isinstance(exactly, dict):
                plan.error = f"claim {label}, request {name}: missing device class name (unsupported request type?)"
            else:
                plan.options.append((allocator.static_request(label, exactly, name, True), exactly, name, name))
        # the classes the requests name: a plan is stale once one of them is edited in place
        self.classes = list({id(option[0].class_info): option[0].class_info for request in self.requests
                             for option in request.options if option[0].class_info is not None}.values())
        self.constraints: list[tuple[type[MatchAttribute] | type[DistinctAttribute], list[str], str]] = []
        self.constraint_error: str | None = None
        for i, constraint in enumerate(as_list(spec_devices.get("constraints"))):
            constraint = as_dict(constraint)
            requests = [r for r in as_list(constraint.get("requests")) if isinstance(r, str)]
            if isinstance(constraint.get("matchAttribute"), str):
                self.constraints.append((MatchAttribute, requests, constraint["matchAttribute"]))
            elif isinstance(constraint.get("distinctAttribute"), str) and not features.stable_variant:
                # incubating and experimental honour distinctAttribute even with DRAConsumableCapacity
                # off; stable does not know it and reports an empty constraint.
                self.constraints.append((DistinctAttribute, requests, constraint["distinctAttribute"]))
            else:
                self.constraint_error = f"claim {label}, constraint #{i}: empty constraint (unsupported constraint type?)"
                break
