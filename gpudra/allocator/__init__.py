"""Structured DRA allocator with kube-scheduler 1.36 semantics (upstream's sorted variant).

    from gpudra.allocator import Allocator, Features, AllocationOutcome, build_report
    alloc = Allocator(device_classes, slices, allocated_claims, Features.parse("default"))
    outcome = alloc.allocate(node, claims)   # outcome.outcome: allocated | unallocatable | error
"""

from .allocator import AllocationError, AllocationOutcome, Allocator
from .features import FEATURE_NAMES, Features
from .report import MODES, build_report

__all__ = [
    "Allocator",
    "AllocationOutcome",
    "AllocationError",
    "Features",
    "FEATURE_NAMES",
    "MODES",
    "build_report",
]
