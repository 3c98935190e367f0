"""Structured DRA allocator with kube-scheduler 1.36 semantics.

The feature gates choose which of upstream's three allocator variants (stable, incubating,
experimental) is reproduced, as kube-scheduler chooses it (`Features.variant_name`); where they
differ (pool and slice order, pool completeness, combinations or permutations, bindsToNode,
distinctAttribute and capacity fields without their gate) is described in pools.gather and search.

    from gpudra.allocator import Allocator, Features, AllocationOutcome, build_report

    features = Features.parse("default")          # or "none,PrioritizedList", "-DeviceTaints", "all", …
    alloc = Allocator(device_classes, slices, allocated_claims, features)
    outcome = alloc.allocate(node, claims)         # node: Node dict or name
    outcome.outcome                                # "allocated" | "unallocatable" | "error"
    outcome.allocations                            # one v1 status.allocation dict per claim, in order
    outcome.error, outcome.error_node_local
    alloc.add_allocated_claim(claim) / alloc.remove_allocated_claim(claim)

    report = build_report(objects, mode="together"|"each"|"sequential", nodes=None, claims=None,
                          features=features)      # the conformance expected.yaml structure

Objects are plain dicts, treated as immutable unless their metadata.generation or resourceVersion (or a
slice's spec.pool.generation) moves: parsed slices, per-node pool views, CEL selector results, parsed
classes and claim readings are shared by every Allocator built from the same objects, and an object edited
in place with a new generation is read again. After editing dicts in place without one, call
`forget_cached_objects()`.
"""

from .allocator import FILTER_TIMEOUT_S, Allocator
from .classes import ClassTable
from .features import FEATURE_NAMES, Features
from .outcome import TIMED_OUT, AllocationError, AllocationOutcome
from .pools import SliceIndex
from .report import MODES, AllocationReport, ReportEntry, build_report


def forget_cached_objects() -> None:
    """Forget what was parsed from slice and class dicts (call after editing them in place without a new
    generation or resourceVersion; see SliceIndex)."""
    SliceIndex.forget_shared()
    ClassTable.forget_shared()


__all__ = [
    "Allocator",
    "AllocationOutcome",
    "AllocationError",
    "AllocationReport",
    "Features",
    "FEATURE_NAMES",
    "FILTER_TIMEOUT_S",
    "MODES",
    "ReportEntry",
    "SliceIndex",
    "TIMED_OUT",
    "build_report",
    "forget_cached_objects",
]
