"""The bridge to `gpudra.allocator`: build the one allocator a run keeps, and call it for a node."""

from __future__ import annotations

from typing import Any

from gpudra.allocator import FILTER_TIMEOUT_S, TIMED_OUT, AllocationOutcome, Allocator

__all__ = ["TIMED_OUT", "AllocationOutcome", "allocate", "fits", "make_allocator"]

DEFAULT_FEATURES = "default"


def make_allocator(
    device_classes: dict[str, dict[str, Any]],
    slices: list[dict[str, Any]],
    allocated_claims: list[dict[str, Any]],
    features: Any = DEFAULT_FEATURES,
    device_taint_rules: list[dict[str, Any]] | None = None,
) -> Allocator:
    from gpudra.allocator.features import Features

    return Allocator(list(device_classes.values()), list(slices), list(allocated_claims), Features.parse(features),
                     device_taint_rules=device_taint_rules)


def allocate(
    allocator: Allocator, node: dict[str, Any], claims: list[dict[str, Any]], exclude_devices: Any = None,
    deadline: float | None = None,
) -> AllocationOutcome:
    """One node's search. `deadline`: the pod's budget (time.monotonic()), shared by all nodes it is
    tried on; without one, the search gets kube-scheduler's Filter timeout for itself."""
    if deadline is not None:
        return allocator.allocate(node, claims, exclude_devices=exclude_devices or None, timeout=None, deadline=deadline)
    return allocator.allocate(node, claims, exclude_devices=exclude_devices or None, timeout=FILTER_TIMEOUT_S)


def fits(allocator: Allocator, node: dict[str, Any], claims: list[dict[str, Any]],
         deadline: float | None = None) -> AllocationOutcome:
    """`allocate` when only whether the claims fit matters: nodes in the same device state share one search
    (`Allocator.fits`), and an "allocated" answer may come without allocations (`deferred`)."""
    if deadline is not None:
        return allocator.fits(node, claims, timeout=None, deadline=deadline)
    return allocator.fits(node, claims, timeout=FILTER_TIMEOUT_S)
